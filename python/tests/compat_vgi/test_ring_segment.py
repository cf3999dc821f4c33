"""shmring.vgi's side channel on its own (needs vgi-rpc and Python >= 3.13: ci/vgi.sh runs it):
vgi's bytes in a block, zero-copy reads, done notices that free, a batch sent back unchanged
without a copy, bounded writes, forged handles."""

import gc
import os

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
    b._service(flush=True)  # b sends the notice of the view that is gone
    assert a._drain(1.0)  # b's done notice arrives and a frees the block
    assert a._duplex.inspect()["own"]["live"] == 0
    assert b.stats["done_sent"] == 1 and a.stats["freed"] == 1


def test_a_block_the_peer_is_done_with_is_written_again(pair):
    a, b = pair.a, pair.b
    offsets = set()
    for i in range(20):
        want = batch(1000)
        handle, n = a.allocate_and_write(want)
        buf = b.read_buffer(handle, n)
        offsets.add(buf.address)
        assert _deserialize_from_shm(buf, want.schema).equals(want)
        del buf
        gc.collect()
        b._service(flush=True)  # b sends the done notice at once
    # The notice reaches a a call later, so a writes into two blocks in turn, not a new one
    # each time (ring-core's allocator reuses what was freed).
    assert len(offsets) <= 2
    assert a._duplex.inspect()["own"]["live"] <= 2


def test_done_notices_go_together_and_every_block_comes_back(pair):
    a, b = pair.a, pair.b
    sent = []
    for i in range(3 * shmring.vgi._FLUSH_COUNT):
        handle, n = a.allocate_and_write(batch(100))
        buf = b.read_buffer(handle, n)
        del buf
        gc.collect()
        b._service()  # b's next write: a notice only once _FLUSH_COUNT views are gone
        sent.append(b.stats["done_sent"])
        a._service()
        assert a._duplex.inspect()["own"]["live"] <= shmring.vgi._FLUSH_COUNT
    assert sent[shmring.vgi._FLUSH_COUNT - 2] == 0, "a notice went before enough waited"
    assert sent[-1] == 3 * shmring.vgi._FLUSH_COUNT  # three notices of _FLUSH_COUNT each
    assert a.stats["freed"] == 3 * shmring.vgi._FLUSH_COUNT
    assert a._duplex.inspect()["own"]["live"] == 0


def test_done_notices_of_big_blocks_go_at_once(pair):
    a, b = pair.a, pair.b
    big = batch(13_000)  # about 210 KiB: over an eighth of the 1 MiB arena, under a quarter
    for i in range(5):
        handle, n = a.allocate_and_write(big)
        assert 8 * n >= pair.size > 4 * n
        buf = b.read_buffer(handle, n)
        del buf
        gc.collect()
        b._service()
        assert b.stats["done_sent"] == i + 1  # every one: the bytes waiting reach 1/8
        a._service()
    assert a._duplex.inspect()["own"]["live"] == 0


def test_a_batch_sent_back_unchanged_is_not_copied_and_is_freed_when_both_are_done(
        pair, monkeypatch):
    a, b = pair.a, pair.b
    monkeypatch.setattr(shmring.vgi, "_REFLECT_MIN_BYTES", 0)  # the test's batch is small
    want = batch()
    handle, n = a.allocate_and_write(want)
    at_b = _deserialize_from_shm(b.read_buffer(handle, n), want.schema)
    back, m = b.allocate_and_write(at_b)  # an echo: b's batch is a's block, decoded
    assert back == -1 - handle and m == n and b.stats["reflected"] == 1
    assert b._duplex.inspect()["own"]["live"] == 0  # nothing allocated, nothing copied
    buf = a.read_buffer(back, m)
    start, end = a._duplex._out_ring.address_range()
    assert start <= buf.address < end  # a reads its own block: the bytes it wrote
    got = _deserialize_from_shm(buf, want.schema)
    assert got.equals(want)
    del at_b
    gc.collect()
    b._service(flush=True)  # b is done with its view: the done notice
    a._service()
    assert a._duplex.inspect()["own"]["live"] == 1, "a's own view still holds the block"
    del got, buf
    gc.collect()
    a._service()
    assert a._duplex.inspect()["own"]["live"] == 0
    assert a.stats["bad_notices"] == b.stats["bad_notices"] == 0
    # A batch that is not exactly the decoded one (a slice) is copied as usual.
    handle, n = a.allocate_and_write(want)
    part = _deserialize_from_shm(b.read_buffer(handle, n), want.schema).slice(1)
    h2, _ = b.allocate_and_write(part)
    assert h2 >= 0 and b.stats["reflected"] == 1
    # The same buffers under another schema (its metadata) are not the block's batch: copied.
    handle, n = a.allocate_and_write(want)
    at_b2 = _deserialize_from_shm(b.read_buffer(handle, n), want.schema)
    h4, _ = b.allocate_and_write(at_b2.replace_schema_metadata({"k": "v"}))
    assert h4 >= 0 and b.stats["reflected"] == 1
    # Sent back unchanged again (the block's header matches: the batch message is decoded
    # after it), it is reflected.
    back2, _ = b.allocate_and_write(at_b2)
    assert back2 == -1 - handle and b.stats["reflected"] == 2
    # Below _REFLECT_MIN_BYTES (bytes of the batch's buffers) an unchanged batch is copied too
    # (the check costs more).
    handle, n = a.allocate_and_write(want)
    echo = _deserialize_from_shm(b.read_buffer(handle, n), want.schema)
    monkeypatch.setattr(shmring.vgi, "_REFLECT_MIN_BYTES", echo.get_total_buffer_size() + 1)
    h3, _ = b.allocate_and_write(echo)
    assert h3 >= 0 and b.stats["reflected"] == 2


def test_a_sent_back_handle_the_peer_does_not_hold_is_refused(pair):
    handle, n = pair.a.allocate_and_write(batch(10))
    with pytest.raises(shmring.InvalidHandle):
        pair.a.read_buffer(-1 - (handle + 1), n)


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


def test_a_small_batch_is_written_as_a_stream_writer_writes_it(pair):
    from vgi_rpc.utils import new_ipc_stream

    a, b = pair.a, pair.b
    meta = pa.schema([pa.field("x", pa.int64())], metadata={b"k": b"v"})
    cases = [batch(10), batch(3000), pa.record_batch([pa.array([1, 2, 3])], schema=meta),
             pa.record_batch({"n": pa.array([None, 1.5, None]), "l": pa.array([[1], [], None])})]
    for want in cases:
        assert want.get_total_buffer_size() <= shmring.vgi._SERIALIZE_MAX
        sink = pa.BufferOutputStream()
        with new_ipc_stream(sink, want.schema) as w:
            w.write_batch(want)
        expected = sink.getvalue().to_pybytes()
        routed = a.stats["routed"]
        handle, n = a.allocate_and_write(want)
        assert a.stats["routed"] == routed + 1
        assert a._head and a._schema.equals(want.schema, check_metadata=True)  # the small path
        buf = b.read_buffer(handle, n)
        assert buf.to_pybytes() == expected
        got = _deserialize_from_shm(buf, want.schema)
        assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)


def stream_bytes(want):
    """What a fresh stream writer writes for `want` (schema, batch, end marker)."""
    from vgi_rpc.utils import new_ipc_stream

    sink = pa.BufferOutputStream()
    with new_ipc_stream(sink, want.schema) as w:
        w.write_batch(want)
    return sink.getvalue().to_pybytes()


def test_a_larger_batch_is_written_by_a_kept_writer_as_a_fresh_one_writes_it(monkeypatch):
    p = SegmentPair(16 << 20)
    a, b = p.a, p.b
    meta = pa.schema([pa.field("v", pa.uint8())], metadata={b"k": b"v"})
    big = pa.Array.from_buffers(pa.uint8(), 5 << 20, [None, pa.py_buffer(os.urandom(5 << 20))])
    cases = [
        batch(30_000), batch(40_000),  # the same schema twice: the writer is kept
        batch(60_000).slice(7, 30_000),  # sliced: the writer truncates, as a fresh one does
        pa.record_batch({"n": pa.array([None, 1.5] * 20_000), "l": pa.array([[1], None] * 20_000)}),
        pa.record_batch([big], schema=meta),  # 5 MiB: a streamed copy into the block
        pa.record_batch([big.slice(3)], names=["v"]),  # the same field without the metadata
    ]
    writers = []
    for want in cases:
        assert want.get_total_buffer_size() > shmring.vgi._SERIALIZE_MAX
        handle, n = a.allocate_and_write(want)
        writers.append(a._writer)
        buf = b.read_buffer(handle, n)
        assert buf.to_pybytes() == stream_bytes(want)
        got = _deserialize_from_shm(buf, want.schema)
        assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)
        del buf, got
    assert writers[0] is writers[1] is writers[2] and writers[2] is not writers[3]
    assert len({id(w) for w in writers[3:]}) == 3  # a new schema, a new writer
    # Bounded: a block too small for the message (the size forced short) is never written
    # past; the batch goes inline, the block is freed and the writer is not used again.
    want = batch(30_000)
    gc.collect()
    b._service(flush=True)
    a._service()
    assert a._duplex.inspect()["own"]["live"] == 0  # b is done with every block
    monkeypatch.setattr(shmring.vgi.ipc, "get_record_batch_size", lambda _: 1000)
    assert a.allocate_and_write(want) is None
    monkeypatch.undo()
    assert a.stats["fallbacks"] == 1 and a._writer is None
    assert a._duplex.inspect()["own"]["live"] == 0
    handle, n = a.allocate_and_write(want)
    assert b.read_buffer(handle, n).to_pybytes() == stream_bytes(want)
    assert a.stats["bad_notices"] == b.stats["bad_notices"] == 0
    p.close()


def test_done_notices_that_wait_go_with_a_reflect_notice(pair, monkeypatch):
    monkeypatch.setattr(shmring.vgi, "_REFLECT_MIN_BYTES", 0)  # the test's batch is small
    a, b = pair.a, pair.b
    want = batch()
    h1, n1 = a.allocate_and_write(want)
    first = _deserialize_from_shm(b.read_buffer(h1, n1), want.schema)
    del first
    gc.collect()
    h2, n2 = a.allocate_and_write(want)
    echo = _deserialize_from_shm(b.read_buffer(h2, n2), want.schema)
    assert b._pending == [h1]  # b's view of h1 is gone; its notice waits (not yet due)
    assert a._consumer.pending == 0
    back, _ = b.allocate_and_write(echo)  # sent back unchanged: the reflect notice
    assert back == -1 - h2 and b.stats["reflected"] == 1
    assert b._pending == [] and b.stats["done_sent"] == 1
    assert a._consumer.pending == 1  # one message: the reflection and the done notice
    a._service()
    assert a.stats["freed"] == 1  # h1, by the done notice that went with the reflection
    assert a._duplex.inspect()["own"]["live"] == 1  # h2: b's view and the reflection hold it
    assert a.stats["bad_notices"] == 0
