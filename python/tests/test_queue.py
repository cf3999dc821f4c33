"""The queue: multiprocessing.Queue-shaped, protocol-5 pickles with out-of-band buffers in
the ring."""

import pickle
import queue
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


def test_messages_larger_than_a_slot_span_slots(name):
    s, r = shmring.create_pair(3, max_message=4096, name=name)
    with s, r:
        big = np.random.default_rng(0).integers(0, 2**31, 50_000, dtype=np.int64)  # 400 kB
        t = threading.Thread(target=s.put, args=({"big": big, "tag": "x"},))
        t.start()
        got = r.get(timeout=10)
        t.join()
        assert np.array_equal(got["big"], big) and got["tag"] == "x"


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


def test_endpoints_pickle_to_spawned_workers(spawn, name):
    to_worker, from_parent = shmring.create_pair(4, max_message=1 << 16, name=name)
    to_parent, from_worker = shmring.create_pair(4, max_message=1 << 16, name=name + "-back")
    child = spawn.Process(target=workers.queue_echo, args=(from_parent, to_parent))
    child.start()
    try:
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
        child.join(30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
        to_worker.close()
        from_worker.close()


def test_zero_copy_get_in_a_worker(spawn, name):
    s, r = shmring.create_pair(2, max_message=1 << 20, name=name)
    out = spawn.Queue()
    child = spawn.Process(target=workers.queue_sum, args=(r, out))
    child.start()
    try:
        total = 0
        for i in range(30):
            a = np.full(100_000, i, dtype=np.int64)
            total += int(a.sum())
            s.put(a, timeout=30)
        s.put(None, timeout=30)
        assert out.get(timeout=30) == total
        child.join(30)
    finally:
        if child.is_alive():
            child.kill()
        s.close()


def test_a_used_sender_does_not_pickle(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with s, r:
        s.put(1)
        with pytest.raises(TypeError):
            pickle.dumps(s)


@pytest.mark.slow
def test_a_payload_over_one_gib(name):
    s, r = shmring.create_pair(4, max_message=64 << 20, name=name)
    with s, r:
        big = np.ones((1 << 30) + 8, dtype=np.uint8)
        t = threading.Thread(target=s.put, args=(big,))
        t.start()
        got = r.get(timeout=600)
        t.join()
        assert got.nbytes == big.nbytes and int(got[-8:].sum()) == 8
