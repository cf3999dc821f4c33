"""shmring.vgi's side channel on its own (needs vgi-rpc and Python >= 3.13: ci/vgi.sh runs it):
vgi's bytes in a block, zero-copy reads, done notices that free, bounded writes, forged
handles."""

import gc

import pyarrow as pa
import pytest

pytest.importorskip("vgi_rpc")
from vgi_rpc.shm import _deserialize_from_shm  # noqa: E402

import shmring  # noqa: E402
from shmring.vgi import SegmentPair  # noqa: E402


@pytest.fixture
def pair():
    p = SegmentPair(1 << 20)
    yield p
    p.close()


def batch(n=1000):
    return pa.record_batch({"x": pa.array(range(n), pa.int64()), "s": [str(i) for i in range(n)]})


def test_a_batch_crosses_zero_copy_and_its_block_is_freed_when_done(pair):
    a, b = pair.a, pair.b
    a.keep = 0  # no block kept for reuse: freed as soon as b is done
    want = batch()
    handle, n = a.allocate_and_write(want)
    buf = b.read_buffer(handle, n)
    start, end = b._duplex._in_ring.address_range()
    assert start <= buf.address < end  # the reader's buffer is the ring's memory
    got = _deserialize_from_shm(buf, want.schema)
    assert got.equals(want)
    assert a._duplex.inspect()["own"]["live"] == 1
    del got, buf
    gc.collect()
    assert a._drain(1.0)  # b's done notice arrives and a frees the block
    assert a._duplex.inspect()["own"]["live"] == 0
    assert b.stats["done_sent"] == 1 and a.stats["freed"] == 1


def test_a_block_the_peer_is_done_with_is_written_again(pair):
    a, b = pair.a, pair.b
    handles = set()
    for i in range(20):
        want = batch(1000 - i)  # each fits the block of the one before
        handle, n = a.allocate_and_write(want)
        handles.add(handle)
        buf = b.read_buffer(handle, n)
        assert _deserialize_from_shm(buf, want.schema).equals(want)
        del buf
        gc.collect()
    assert len(handles) <= 3 and a.stats["reused"] >= 17
    assert a._duplex.inspect()["own"]["live"] <= 1 + a.keep


def test_a_dictionary_batch_crosses(pair):
    want = pa.record_batch({"d": pa.array(["a", "b", "a"]).dictionary_encode()})
    handle, n = pair.a.allocate_and_write(want)
    assert _deserialize_from_shm(pair.b.read_buffer(handle, n), want.schema).equals(want)


def test_no_room_falls_back_after_the_wait_and_is_counted(pair):
    pair.a.wait = 0.1
    assert pair.a.allocate_and_write(batch(200_000)) is None  # > 1 MiB: never fits
    assert pair.a.stats["fallbacks"] == 1
    held = [pair.a.allocate_and_write(batch(10_000)) for _ in range(3)]
    views = [pair.b.read_buffer(h, n) for h, n in held if h is not None]
    assert len(views) == len(held)
    while pair.a.allocate_and_write(batch(10_000)) is not None:
        pass  # the arena fills while b holds its views: then the wait runs out
    assert pair.a.stats["fallbacks"] == 2


def test_a_forged_handle_is_refused(pair):
    with pytest.raises(shmring.InvalidHandle):
        pair.b.read_buffer(12345 << 32, 10)
    handle, n = pair.a.allocate_and_write(batch(10))
    with pytest.raises(ValueError):
        pair.b.read_buffer(handle, n + 10**9)
