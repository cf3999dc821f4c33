"""The in-segment allocator from Python: hard-bounded writable blocks by handle, read-only
zero-copy views in another process, ceilings as clear errors, and a dead owner's allocations
reclaimed (and seen in the leak report before that)."""

import os
import signal
import zlib

import pytest

import alloc_workers
import shmring


def make(name, arena=1 << 20, max_live=4094):
    ring = shmring.Ring.create(
        name, slots=4, slot_size=4096, arena=arena, max_live=max_live, pin_only=True
    )
    producer = ring.producer()
    return ring, producer, producer.allocator()


def test_a_million_calls_leave_nothing_live(name):
    ring, _producer, alloc = make(name)
    window = []
    for i in range(500_000):  # 500k allocate + 500k free: 10**6 calls
        window.append(alloc.allocate(1 + (i * 7919) % 3000).handle)
        if len(window) == 64:
            for h in window:
                alloc.free(h)
            window.clear()
    for h in window:
        alloc.free(h)
    report = alloc.inspect()
    assert report["live"] == 0 and report["leak_count"] == 0
    assert report["allocs"] == report["frees"] == 500_000
    assert ring.inspect()["allocator"]["live"] == 0


def test_the_live_ceiling_is_a_clear_error(name):
    _ring, _producer, alloc = make(name, max_live=8)
    blocks = [alloc.allocate(64) for _ in range(8)]
    with pytest.raises(shmring.Full, match="live") as e:
        alloc.allocate(64)
    assert isinstance(e.value, shmring.Error)
    assert alloc.inspect()["ceiling_hits"] == 1
    alloc.free(blocks[0].handle)
    alloc.allocate(64)  # room again


def test_a_full_arena_is_a_clear_error(name):
    _ring, _producer, alloc = make(name, arena=1 << 16)
    with pytest.raises(shmring.Full):
        alloc.allocate((1 << 16) + 1)
    assert alloc.inspect()["live"] == 0


def test_a_block_is_hard_bounded(name):
    pa = pytest.importorskip("pyarrow")
    _ring, _producer, alloc = make(name)
    block = alloc.allocate(100)
    mv = memoryview(block)
    assert len(mv) == 100 and not mv.readonly and not block.readonly
    mv[:] = b"x" * 100
    with pytest.raises(IndexError):
        mv[100] = 1
    with pytest.raises(ValueError):
        mv[90:110] = b"y" * 20
    with pa.FixedSizeBufferWriter(pa.py_buffer(block)) as w:
        w.write(b"z" * 100)
        with pytest.raises(Exception):
            w.write(b"!")
    del w, mv


def test_block_write_copies_within_the_block_only(name):
    _ring, _producer, alloc = make(name, arena=16 << 20)
    block = alloc.allocate(100)
    memoryview(block)[:] = b"." * 100
    assert block.write(0, b"abc") == 3
    assert block.write(3, memoryview(b"defg")[1:]) == 6  # any contiguous buffer
    with pytest.raises(ValueError):
        block.write(98, b"xyz")  # past the end: nothing written
    with pytest.raises(ValueError):
        block.write(2**62, b"x")
    assert bytes(memoryview(block)) == b"abcefg" + b"." * 94
    assert block.write(100, b"") == 100
    # A source that is a view of the block itself (overlapping ranges) is moved as memmove does.
    block.write(1, memoryview(block)[:6])
    assert bytes(memoryview(block)[:8]) == b"aabcefg."
    # From 4 MiB the copy is streamed (x86_64): every byte lands, the neighbours untouched.
    big = alloc.allocate((5 << 20) + 13)
    memoryview(big)[:] = b"\x00" * big.nbytes
    data = os.urandom((5 << 20) + 3)
    assert big.write(7, data) == (5 << 20) + 10
    got = bytes(memoryview(big))
    assert got[7:-3] == data and got[:7] == b"\x00" * 7 and got[-3:] == b"\x00" * 3
    reader = shmring.Ring.open(name).allocations()
    with pytest.raises(ValueError):
        reader.view(block.handle).write(0, b"x")  # a view is read-only
    alloc.free(block.handle)
    with pytest.raises(BufferError):
        block.write(0, b"x")  # a freed block takes no writes


def test_free_refuses_while_a_view_is_alive_and_bad_handles_raise(name):
    _ring, _producer, alloc = make(name)
    block = alloc.allocate(10)
    mv = memoryview(block)
    with pytest.raises(BufferError):
        alloc.free(block.handle)
    mv.release()
    assert alloc.free(block.handle) == 10
    with pytest.raises(shmring.InvalidHandle):
        alloc.free(block.handle)  # double free
    with pytest.raises(BufferError):
        memoryview(block)  # a freed block exports nothing
    with pytest.raises(shmring.InvalidHandle):
        alloc.free(0xDEAD_0000_0001)
    assert alloc.inspect()["bad_frees"] == 2


def test_a_view_in_a_spawned_process_sees_the_bytes(spawn, name):
    ring, _producer, alloc = make(name)
    data = os.urandom(100_000)
    block = alloc.allocate(len(data))
    memoryview(block)[:] = data
    out = spawn.Queue()
    child = spawn.Process(target=alloc_workers.view_and_check, args=(name, block.handle, None, out))
    child.start()
    crc, writable, inside, n = out.get(timeout=30)
    child.join(10)
    assert (crc, writable, inside, n) == (zlib.crc32(data), False, True, len(data))


def test_views_check_the_handle(name):
    ring, _producer, alloc = make(name)
    block = alloc.allocate(32)
    reader = shmring.Ring.open(name).allocations()
    assert len(memoryview(reader.view(block.handle))) == 32
    assert len(memoryview(reader.view(block.handle, 5))) == 5
    with pytest.raises(ValueError):
        reader.view(block.handle, 33)
    alloc.free(block.handle)
    with pytest.raises(shmring.InvalidHandle):
        reader.view(block.handle)  # stale
    with pytest.raises(shmring.InvalidHandle):
        reader.view((7 << 32) | 4093)
    with pytest.raises(shmring.InvalidHandle):
        reader.view(1 << 63)


def test_one_mutator(name):
    ring, producer, alloc = make(name)
    with pytest.raises(shmring.Busy):
        producer.allocator()
    with pytest.raises(shmring.Busy):
        producer._put_parts([b"x"])
    producer.close()
    with pytest.raises(shmring.Closed):
        alloc.allocate(8)


def test_a_producer_whose_queue_ran_does_not_lend_its_allocator(name):
    ring = shmring.Ring.create(name, slots=2, slot_size=4096, arena=1 << 16, pin_only=True)
    producer = ring.producer()
    _consumer = ring.consumer()
    producer._put_parts([b"x"], timeout=1.0)
    with pytest.raises(shmring.Busy):
        producer.allocator()


def test_an_owner_killed_mid_call_leaves_nothing_live(spawn, name):
    ring = shmring.Ring.create(name, slots=4, slot_size=4096, arena=1 << 20)
    ready = spawn.Event()
    child = spawn.Process(target=alloc_workers.allocate_and_hang, args=(name, 5, ready))
    child.start()
    try:
        assert ready.wait(30)
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    finally:
        if child.is_alive():
            child.kill()
    seen = ring.allocations().inspect()
    assert seen["leak_count"] == 5 and seen["owners"][3]["live"] == 5
    assert {leak["owner"] for leak in seen["leaks"]} == {3}
    alloc = ring.producer().allocator()  # takes the dead owner's role over
    report = alloc.inspect()
    assert report["reclaimed"] == {"count": 5, "bytes": sum(1000 + i for i in range(5))}
    assert report["live"] == 0 and report["leak_count"] == 0
