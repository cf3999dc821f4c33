"""The queue: multiprocessing.Queue-shaped, protocol-5 pickles with out-of-band buffers in
the ring."""

import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmring
import workers


def test_put_get_objects(name):
    s, r = shmring.create_pair(4, max_message=1 << 16, name=name)
    with s, r:
        arr = np.arange(1000, dtype=np.float32).reshape(10, 100)
        for obj in [b"", b"bytes", {"a": np.ones(3), "b": [1, "two"]}, arr, None, 0]:
            s.put(obj)
            got = r.get(timeout=5)
            if isinstance(obj, dict):
                assert got.keys() == obj.keys() and np.array_equal(got["a"], obj["a"])
                assert got["b"] == obj["b"]
            elif isinstance(obj, np.ndarray):
                assert got.dtype == obj.dtype and np.array_equal(got, obj)
                assert got.flags.writeable  # a copying get gives owned, writable arrays
            else:
                assert got == obj


def test_zero_copy_get_views_the_slot(name):
    s, r = shmring.create_pair(2, max_message=1 << 16, name=name)
    with s, r:
        s.put(np.arange(4096, dtype=np.uint8))
        got = r.get(timeout=5, zero_copy=True)
        lo, hi = r._ring.address_range()
        assert lo <= got.ctypes.data < hi and not got.flags.writeable
        assert got.sum() == np.arange(4096, dtype=np.uint8).sum()
        s.put(b"next")
        with pytest.raises(BufferError):  # the previous result still views its slot
            r.get(timeout=5)
        del got
        assert r.get(timeout=5) == b"next"


def test_large_buffers_go_through_the_allocator_and_come_back_zero_copy(name):
    s, r = shmring.create_pair(2, max_message=1 << 20, name=name)
    with s, r:
        big = np.random.default_rng(0).integers(0, 2**31, 50_000, dtype=np.int64)  # 400 kB
        assert r._ring.arena > 3 * big.nbytes  # (capacity + 1) messages of max_message
        s.put({"big": big, "tag": "x"})
        alloc = r._ring.inspect()["allocator"]
        assert (alloc["allocs"], alloc["live"]) == (1, 1)  # one allocation, not slot spans
        assert alloc["live_bytes"] >= big.nbytes
        got = r.get(timeout=10, zero_copy=True)
        lo, hi = r._ring.address_range()
        assert lo <= got["big"].ctypes.data < hi  # a view of the segment, not a copy
        assert not got["big"].flags.writeable
        assert np.array_equal(got["big"], big) and got["tag"] == "x"
        del got
        s.put({"big": big})
        got = r.get(timeout=10)  # copying get: owned, writable, outside the segment
        assert not lo <= got["big"].ctypes.data < hi and got["big"].flags.writeable
        assert np.array_equal(got["big"], big)
        # Slot 0 came round again for the third message: its allocation was freed then.
        s.put(b"small")
        assert r._ring.inspect()["allocator"]["frees"] == 1
        assert r.get(timeout=5) == b"small"


def test_zero_byte_payloads(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with s, r:
        for obj in [b"", bytearray(), np.empty(0, np.float32), np.empty((0, 3)),
                    pickle.PickleBuffer(bytearray())]:
            for zero_copy in (False, True):
                s.put(obj, timeout=5)
                got = r.get(timeout=5, zero_copy=zero_copy)
                assert memoryview(got).nbytes == 0
                if isinstance(obj, np.ndarray):
                    assert got.shape == obj.shape and got.dtype == obj.dtype
                del got


def test_raw_bytes_payloads_skip_the_pickle_stream(name):
    s, r = shmring.create_pair(2, max_message=1 << 20, name=name)
    with s, r:
        data = bytes(range(256)) * 1000
        s.put(data)
        got = r.get(timeout=5)
        assert type(got) is bytes and got == data
        s.put(bytearray(data))
        got = r.get(timeout=5)
        assert type(got) is bytearray and got == data
        s.put(data)
        view = r.get(timeout=5, zero_copy=True)
        lo, hi = r._ring.address_range()
        assert isinstance(view, memoryview) and view.readonly and view == data
        assert lo <= np.frombuffer(view, np.uint8).ctypes.data < hi
        view.release()


def test_a_message_over_max_message_spills_into_a_segment_of_its_own(name):
    s, r = shmring.create_pair(2, max_message=1 << 16, name=name)
    with s, r:
        s.put(np.ones(1 << 18, np.uint8), timeout=1)
        assert len(workers.spills(name)) == 1
        s.put(np.ones(1 << 15, np.uint8), timeout=1)  # through the arena
        assert r.get(timeout=5).sum() == 1 << 18
        # Acknowledged: it stays in the sender's pool for the next spilled message.
        spilled = workers.spills(name)
        assert len(spilled) == 1
        assert r.get(timeout=5).sum() == 1 << 15
        s.put(np.full(1 << 18, 2, np.uint8), timeout=1)
        assert workers.spills(name) == spilled
        assert r.get(timeout=5).sum() == 2 << 18
    assert workers.spills(name) == []  # closing removed it


def test_random_sizes_never_exhaust_the_arena(name):
    """The arena holds capacity + 1 maximal messages; sizes that vary from 0 to max_message,
    allocated and freed in order, must always find room (next-fit as a circular buffer)."""
    rng = np.random.default_rng(7)
    cap, top = 3, 1 << 16
    s, r = shmring.create_pair(cap, max_message=top, name=name)
    sizes = [int(x) for x in rng.integers(0, top - 4096, 300)] + [top - 4096] * 20
    got = []

    def drain():
        for _ in sizes:
            got.append(int(r.get(timeout=30).sum()))

    with s, r:
        t = threading.Thread(target=drain)
        t.start()
        for n in sizes:
            s.put(np.ones(n, np.uint8), timeout=30)
        t.join(60)
        assert got == sizes
        alloc = r._ring.inspect()["allocator"]
        assert alloc["out_of_space"] == 0 and alloc["live"] <= cap and alloc["bad_frees"] == 0


def _raw(entries, n=None, magic=b"SRQ2"):
    """A hand-made queue message: the header and part table, no data."""
    n = len(entries) if n is None else n
    out = magic + struct.pack("<I", n)
    for kind, off, ln in entries:
        out += struct.pack("<QQQ", kind, off, ln)
    return out


def test_a_forged_message_raises_corrupt_and_is_skipped(name):
    ring = shmring.Ring.create(name, slots=16, slot_size=4096, consumers=2, pin_only=True,
                               arena=1 << 16)
    with ring:
        r = shmring.Receiver(ring)
        p = ring.producer()
        p.create_group(shmring.queue._GROUP)  # what a Sender does (receivers are its members)
        forged = [
            b"XX",                                   # shorter than the header
            _raw([(0, 64, 1)], magic=b"NOPE"),       # wrong magic
            _raw([(0, 64, 1)], n=1000),              # part table past the slot
            _raw([(0, 64, 10_000)]),                 # inline part past the slot
            _raw([(0, 8, 4)]),                       # inline part over the header
            _raw([(2, 0, 0)]),                       # unknown kind
            _raw([(1, 0, 8)]),                       # allocation part, no live handle (meta 0)
            _raw([(0, 1 << 63, 1 << 63)]),           # offset + length overflow
        ]
        for msg in forged:
            p.publish(msg + bytes(64), timeout=5)
        # Then an honest raw-bytes message (empty pickle part, one inline part at 64).
        p.publish(_raw([(0, 64, 0), (0, 64, 3)]) + bytes(8) + b"abc")
        for _ in forged:
            with pytest.raises(shmring.Corrupt):
                r.get(timeout=5)
        assert r.get(timeout=5) == b"abc"  # each forged message was consumed, then skipped
        p.close()
        r.close()


def test_capacity_blocks_and_put_nowait_raises_full(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with s, r:
        s.put_nowait(1)
        s.put_nowait(2)
        with pytest.raises(queue.Full):
            s.put_nowait(3)
        start = time.monotonic()
        with pytest.raises(queue.Full):
            s.put(3, timeout=0.2)
        assert time.monotonic() - start >= 0.19
        assert r.get() == 1
        s.put_nowait(3)
        assert [r.get_nowait(), r.get_nowait()] == [2, 3]
        with pytest.raises(queue.Empty):
            r.get_nowait()
        with pytest.raises(queue.Empty):
            r.get(timeout=0.05)


def test_wait_for_all_ack(name):
    s, r = shmring.create_pair(4, max_message=1024, name=name)
    with s, r:
        assert s.wait_for_all_ack(timeout=0.1)  # nothing sent
        s.put("a")
        s.put("b")
        assert s.wait_for_all_ack(timeout=0.1) is False
        r.get()
        assert s.wait_for_all_ack(timeout=0.1) is False
        r.get()
        assert s.wait_for_all_ack(timeout=1) is True


def test_close_ends_the_stream(name):
    s, r = shmring.create_pair(4, max_message=1024, name=name)
    s.put("last")
    s.close()
    assert r.get(timeout=1) == "last"
    with pytest.raises(shmring.Disconnected):
        r.get(timeout=1)
    r.close()
    with pytest.raises(shmring.Closed):
        r.get()
    with pytest.raises(shmring.Closed):
        s.put(1)


def test_endpoints_pickle_to_spawned_workers(child, name):
    to_worker, from_parent = shmring.create_pair(4, max_message=1 << 16, name=name)
    to_parent, from_worker = shmring.create_pair(4, max_message=1 << 16, name=name + "-back")
    try:
        with child(workers.queue_echo, from_parent, to_parent) as proc:
            objs = [np.arange(i * 100, dtype=np.float64) for i in range(20)] + [b"", {"k": b"v"}]
            for obj in objs:
                to_worker.put(obj, timeout=30)
                got = from_worker.get(timeout=30)
                if isinstance(obj, np.ndarray):
                    assert np.array_equal(got, obj)
                else:
                    assert got == obj
            to_worker.put(None, timeout=30)
            assert from_worker.get(timeout=30) is None
            assert to_worker.wait_for_all_ack(timeout=30)
            workers.finished(proc)
    finally:
        to_worker.close()
        from_worker.close()


def test_zero_copy_get_in_a_worker(spawn, child, name):
    s, r = shmring.create_pair(2, max_message=1 << 20, name=name)
    out = spawn.Queue()
    try:
        with child(workers.queue_sum, r, out) as proc:
            total = 0
            for i in range(30):
                a = np.full(100_000, i, dtype=np.int64)
                total += int(a.sum())
                s.put(a, timeout=30)
            s.put(None, timeout=30)
            assert out.get(timeout=30) == total
            proc.join(30)
    finally:
        s.close()


def test_a_used_sender_does_not_pickle(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with s, r:
        s.put(1)
        with pytest.raises(RuntimeError, match="before the first put"):
            pickle.dumps(s)
        assert r.get(timeout=5) == 1  # read, so closing discards nothing (no RuntimeWarning)


def test_a_used_sender_inherited_through_fork_refuses_to_put(name):
    import multiprocessing as mp

    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with s, r:
        s.put(1)
        ctx = mp.get_context("fork")
        got, out = ctx.Pipe(duplex=False)

        def child():
            try:
                s.put("from the child", block=False)
                out.send("put")
            except RuntimeError as e:
                out.send(str(e))

        p = ctx.Process(target=child)
        p.start()
        assert got.poll(10) and "another process" in got.recv()
        p.join(10)
        assert r.get(timeout=5) == 1
        with pytest.raises(queue.Empty):
            r.get(timeout=0.2)


@pytest.mark.slow
def test_a_payload_over_one_gib(name):
    n = (1 << 30) + (1 << 20)
    s, r = shmring.create_pair(1, max_message=n + 4096, name=name)
    with s, r:
        big = np.ones(n, dtype=np.uint8)
        big[-1] = 7
        s.put(big, timeout=600)
        got = r.get(timeout=600, zero_copy=True)  # no second GiB: the view is the segment
        lo, hi = r._ring.address_range()
        assert lo <= got.ctypes.data < hi
        assert got.nbytes == n and int(got[-1]) == 7 and int(got[:1 << 20].sum()) == 1 << 20
        del got
        s.put(big[: n // 2 + 1], timeout=600)
        del big
        got = r.get(timeout=600)  # a copying get of a half-GiB+ payload
        assert got.nbytes == n // 2 + 1 and got.flags.writeable and int(got[-1]) == 1


def test_blocking_queue_calls_release_the_gil_and_ctrl_c_interrupts(ticking, name):
    s, r = shmring.create_pair(1, max_message=1024, name=name)
    with s, r:
        with ticking() as ticks:
            for i, blocked in enumerate((lambda: r.get(timeout=None),
                                         lambda: s.put(2, timeout=None))):
                if i == 1:
                    s.put_nowait(1)  # fills the one slot: this call, a put, blocks
                n = len(ticks)
                threading.Timer(0.4, signal.raise_signal, (signal.SIGINT,)).start()
                start = time.monotonic()
                with pytest.raises(KeyboardInterrupt):
                    blocked()
                assert time.monotonic() - start < 2.0, "Ctrl-C was not noticed within a slice"
                assert len(ticks) - n > 20, "the GIL was held during the wait"
        assert r.get(timeout=1) == 1  # both ends still work after the interrupts
        s.put(3, timeout=1)
        assert r.get(timeout=1) == 3


def test_the_error_hierarchy():
    import queue as q

    for n in shmring.errors.__all__:
        assert issubclass(getattr(shmring, n), shmring.Error), n
    assert issubclass(shmring.Full, q.Full) and issubclass(shmring.Empty, q.Empty)
    assert issubclass(shmring.Timeout, TimeoutError)
    assert issubclass(shmring.NotFound, FileNotFoundError)
    assert issubclass(shmring.Truncated, shmring.Corrupt)
    # ring-os errors arrive as these classes (one per error), never as a bare RuntimeError.
    with pytest.raises(shmring.NotFound):
        shmring.Ring.open("pytest-never-created", timeout=0)
    with pytest.raises(shmring.InvalidConfig):
        shmring.Ring.create("pytest-bad-geometry", slots=0)


def test_dropping_a_zero_copy_result_releases_its_slot(name):
    s, r = shmring.create_pair(1, max_message=1 << 20, name=name)
    with s, r:
        s.put({"a": np.arange(100_000), "b": np.ones(10)})  # one part in the arena, one inline
        got = r.get(timeout=5, zero_copy=True)
        a = got["a"]
        del got
        with pytest.raises(queue.Full):  # `a` still views the only slot: it stays pinned
            s.put_nowait(1)
        assert int(a[-1]) == 99_999
        del a  # the last view and the last part go: the pin goes with them, before any get
        s.put_nowait(2)
        assert r.get(timeout=5) == 2


def test_large_copied_arrays_reuse_freed_memory_and_never_share_live_memory(name):
    # A copying get of a large array copies into memory recycled from freed results (no page
    # faults), but never into the memory of a result that is still alive.
    s, r = shmring.create_pair(2, max_message=8 << 20, name=name)
    with s, r:
        rng = np.random.default_rng(1)
        one, two, three = (rng.integers(0, 255, 3 << 20, dtype=np.uint8) for _ in range(3))
        s.put(one)
        s.put(two)
        a = r.get(timeout=10)
        b = r.get(timeout=10)
        assert a.flags.writeable and b.flags.writeable
        assert a.ctypes.data != b.ctypes.data
        lo, hi = r._ring.address_range()
        assert not lo <= a.ctypes.data < hi  # owned memory, not the segment
        assert r._consumer._recycled() == 0
        freed = a.ctypes.data
        del a  # its memory goes back to the receiver
        assert r._consumer._recycled() == 1
        s.put(three)
        c = r.get(timeout=10)
        assert c.ctypes.data == freed  # reused, not freshly mapped
        assert np.array_equal(c, three) and np.array_equal(b, two)  # b, alive, untouched
        c[:] = 7  # writable, and writing it touches nothing else
        assert np.array_equal(b, two)
        # A much smaller array does not take a big freed buffer (at most twice its size).
        del c
        s.put(np.ones(1 << 20, np.uint8))
        d = r.get(timeout=10)
        assert d.ctypes.data != freed and int(d.sum()) == 1 << 20
        # Raw bytes / bytearray payloads keep their types.
        s.put(bytes(2 << 20))
        s.put(bytearray(2 << 20))
        assert type(r.get(timeout=10)) is bytes and type(r.get(timeout=10)) is bytearray


def test_recycled_buffers_are_exported_as_recv_buffers(name):
    s, r = shmring.create_pair(1, max_message=4 << 20, name=name)
    with s, r:
        s.put(np.arange(1 << 18, dtype=np.int64))  # 2 MiB: a recycled buffer
        got = r.get(timeout=10)
        owner = got.base
        while isinstance(owner, (memoryview, np.ndarray)):
            owner = owner.obj if isinstance(owner, memoryview) else owner.base
        assert isinstance(owner, shmring.RecvBuffer) and len(owner) == got.nbytes
        assert int(got[-1]) == (1 << 18) - 1


def test_a_second_producer_after_the_stream_closed_is_refused(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    copy = pickle.loads(pickle.dumps(s))  # what a worker process would get
    with copy:
        copy.put(1)
    with pytest.raises(RuntimeError, match="one producing process"):
        s.put(2)
    assert r.get(timeout=5) == 1
    s.close()
    r.close()


DROPPED_SENDER = """
import threading, shmring
def main():
    sender, receiver = shmring.create_pair(2)
    got = []
    def consume():
        while True:
            got.append(receiver.get())
    threading.Thread(target=consume, daemon=True).start()
    sender.put(1)
    while not got:
        pass
main()  # the sender is dropped unclosed; the daemon thread still waits in get()
print("ok")
"""


def test_a_dropped_sender_leaves_a_daemon_reader_waiting_until_exit(tmp_path):
    script = tmp_path / "dropped.py"
    script.write_text(DROPPED_SENDER)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert out.stderr == ""
