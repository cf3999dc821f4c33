"""Rings: create, open, inspect, context managers, and bad input -> the documented exception."""

import os

import numpy as np
import pytest

import shmring


def test_create_open_inspect(name):
    with shmring.Ring.create(name, slots=4, slot_size=1000, consumers=3) as ring:
        assert (ring.slots, ring.slot_size, ring.consumers, ring.pin_only) == (4, 1000, 3, False)
        with shmring.Ring.open(name, timeout=1) as other:
            assert other.slot_size == 1000
            c = other.consumer("skip")
            p = ring.producer()
            p.publish(b"abc")
            info = ring.inspect()
            assert info["head"] == 1 and info["slots"] == 4
            assert info["producer"]["pid"] == os.getpid() and info["producer"]["alive"]
            [entry] = info["consumers"]
            assert entry["class"] == "skip" and entry["cursor"] == 0 and entry["pins"] == 0
            with c.pin(timeout=1) as msg:
                assert ring.inspect()["consumers"][0]["pins"] == 1
                assert bytes(msg) == b"abc"
            info = ring.inspect()["consumers"][0]
            assert info["cursor"] == 1 and info["received"] == 1 and info["missed"] == 0
            c.close()
            assert ring.inspect()["consumers"] == []
    # The creator's handle removed the name.
    with pytest.raises(shmring.NotFound):
        shmring.Ring.open(name, timeout=0.1)


def test_already_exists(name):
    with shmring.Ring.create(name):
        with pytest.raises(shmring.AlreadyExists):
            shmring.Ring.create(name)
        with pytest.raises(FileExistsError):
            shmring.Ring.create(name)


def test_open_missing_times_out_with_not_found():
    with pytest.raises(shmring.NotFound):
        shmring.Ring.open("no-such-ring-anywhere", timeout=0.2)


@pytest.mark.parametrize("bad", ["", "a/b", ".hidden", "x" * 300, "sp ace"])
def test_invalid_names(bad):
    with pytest.raises(shmring.InvalidName):
        shmring.Ring.create(bad)


def test_wrong_types_and_sizes(name):
    with pytest.raises(TypeError):
        shmring.Ring.create(name, slots="8")
    with pytest.raises(shmring.InvalidConfig):
        shmring.Ring.create(name, slots=0)
    with pytest.raises(ValueError):
        shmring.Ring.create(name, slots=2**40)
    with shmring.Ring.create(name, slots=2, slot_size=64) as ring:
        with pytest.raises(ValueError):
            ring.consumer("bogus")
        p = ring.producer()
        with pytest.raises(TypeError):
            p.publish(123)
        with pytest.raises(TypeError):
            p.publish("text is not bytes")
        with pytest.raises(TypeError):  # not contiguous
            p.publish(np.arange(16, dtype=np.uint8)[::2])
        with pytest.raises(shmring.TooLarge):
            p.publish(b"x" * 65)
        with pytest.raises(ValueError):
            p.publish(b"x" * 65)
        with pytest.raises(ValueError):
            p.publish(b"x", timeout=-1)
        with pytest.raises(shmring.Busy):
            ring.producer()  # one producer at a time
        p.publish(bytearray(64))
        p.publish(np.zeros(8, np.float64))  # 64 bytes
        assert p.sent == 2


def test_closed_handles(name):
    ring = shmring.Ring.create(name, slots=2, slot_size=64)
    p = ring.producer()
    c = ring.consumer()
    p.close()
    with pytest.raises(shmring.Closed):
        p.publish(b"x")
    with pytest.raises(shmring.Disconnected):
        c.pin(timeout=1)
    c.close()
    with pytest.raises(shmring.Closed):
        c.pin(timeout=0)
    ring.close()
    assert ring.closed
    with pytest.raises(shmring.Closed):
        ring.producer()
    with pytest.raises(shmring.Closed):
        ring.consumer()


def test_dropped_producer_aborts(name):
    with shmring.Ring.create(name, slots=4, slot_size=64) as ring:
        c = ring.consumer()
        p = ring.producer()
        p.publish(b"one")
        del p  # dropped without close(): the stream is aborted, not finished
        assert c.recv(timeout=1) == b"one"  # drained first
        with pytest.raises(shmring.Aborted) as e:
            c.pin(timeout=1)
        assert e.value.code == 0
        p = ring.producer()  # a new producer may take over
        p.abort(7)


def test_producer_context_manager_finishes_or_aborts(name):
    with shmring.Ring.create(name, slots=4, slot_size=64) as ring:
        c = ring.consumer()
        with ring.producer() as p:
            p.publish(b"a")
        assert [bytes(m) for m in c] == [b"a"]  # iteration ends at Disconnected
    with shmring.Ring.create(name + "b", slots=4, slot_size=64) as ring:
        c = ring.consumer()
        with pytest.raises(RuntimeError):
            with ring.producer():
                raise RuntimeError("boom")
        with pytest.raises(shmring.Aborted):
            c.pin(timeout=1)


def test_a_name_that_is_not_a_ring(name):
    path = f"/dev/shm/shmring.{name}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.write(fd, os.urandom(8192))
    os.close(fd)
    with pytest.raises(shmring.Corrupt):
        shmring.Ring.open(name, timeout=0.5)


def test_a_corrupt_segment(name):
    ring = shmring.Ring.create(name, slots=2, slot_size=64, keep_name=True)
    ring.close()
    with open(f"/dev/shm/shmring.{name}", "r+b") as f:
        f.write(b"\xff" * 16)  # the header's magic and version
    with pytest.raises(shmring.Corrupt):
        shmring.Ring.open(name, timeout=0.5)


def test_a_truncated_segment(name):
    with shmring.Ring.create(name, slots=2, slot_size=4096) as ring:
        c = ring.consumer()
        p = ring.producer()
        p.publish(b"x" * 4096)
        os.truncate(f"/dev/shm/shmring.{name}", 4096)
        with pytest.raises(shmring.Corrupt):  # Truncated is a Corrupt
            msg = c.pin(timeout=1)
            bytes(msg)
        for read in (lambda: c.recv(timeout=1), lambda: c.recv_into(bytearray(4096), timeout=1)):
            with pytest.raises(shmring.Corrupt):
                read()
        with pytest.raises(shmring.Corrupt):
            shmring.Ring.open(name, timeout=0.2)


def test_segments_are_not_registered_with_the_resource_tracker(name):
    # In a fresh interpreter: other tests start the tracker for multiprocessing's semaphores.
    import subprocess
    import sys

    code = f"""
import shmring
from multiprocessing import resource_tracker
with shmring.Ring.create({name!r}, slots=2, slot_size=64) as ring:
    ring.producer().publish(b"x")
    s, r = shmring.create_pair(2, max_message=1024, name={name + "-q"!r})
    with s, r:
        s.put(b"y")
        assert r.get(timeout=1) == b"y"
# Nothing started the tracker (whose unlinking of live segments is the CPython complaint).
print(resource_tracker._resource_tracker._pid)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"


def test_recv_into_copies_into_the_callers_buffer(name):
    with shmring.Ring.create(name, slots=4, slot_size=1 << 17) as ring:
        c = ring.consumer("gating")
        with ring.producer() as p:
            big = np.random.default_rng(2).integers(0, 255, 100_000, dtype=np.uint8)
            p.publish(b"hello")
            p.publish(big)
            p.publish(b"x" * 300)
            p.publish(b"last")
            into = bytearray(16)
            assert c.recv_into(into, timeout=5) == 5 and into[:5] == b"hello"
            # A numpy array of another dtype, reused: every byte lands, GIL released (>= 64 KiB).
            frame = np.zeros(100_000 // 8, np.uint64)
            assert c.recv_into(frame, timeout=5) == 100_000
            assert np.array_equal(frame.view(np.uint8), big)
            # Too small: TooLarge, the message is consumed, the buffer untouched.
            small = bytearray(b"\xff" * 100)
            with pytest.raises(shmring.TooLarge, match="300 bytes"):
                c.recv_into(small, timeout=5)
            assert small == bytearray(b"\xff" * 100)
            assert c.recv_into(memoryview(into)[4:], timeout=5) == 4 and into[4:8] == b"last"
            # Read-only or non-buffer destinations are refused before anything is consumed.
            p.publish(b"kept")
            for bad in (b"immutable bytes", np.zeros(8).view(np.uint8)[::2], 42):
                with pytest.raises(TypeError):
                    c.recv_into(bad, timeout=5)
            assert c.recv(timeout=5) == b"kept"
            with pytest.raises(shmring.Timeout):
                c.recv_into(bytearray(8), timeout=0)
