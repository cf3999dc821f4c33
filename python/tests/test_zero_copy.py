"""Zero-copy reads and in-place writes, proven: pointers inside the mapping, pinned bytes that
stay intact, exports that keep the pin, claims bounded to their reservation."""

import gc
import signal
import threading
import time

import numpy as np
import pytest

import shmring


def inside(ring, addr):
    lo, hi = ring.address_range()
    return lo <= addr < hi


def test_numpy_view_points_into_the_mapping(name):
    h, w = 48, 64
    with shmring.Ring.create(name, slots=2, slot_size=h * w * 4) as ring:
        c = ring.consumer("latest")
        p = ring.producer()
        frame = np.random.default_rng(1).integers(0, 255, (h, w, 4), dtype=np.uint8)
        p.publish(frame)
        with c.pin(timeout=1) as msg:
            view = np.frombuffer(msg, np.uint8).reshape(h, w, 4)
            assert inside(ring, view.ctypes.data)
            assert not view.flags.writeable
            assert np.array_equal(view, frame)
            dl = np.from_dlpack(msg)
            assert dl.ctypes.data == view.ctypes.data and dl.nbytes == msg.__len__()
            del view, dl


def test_pinned_bytes_stay_intact_while_the_producer_publishes(name):
    with shmring.Ring.create(name, slots=4, slot_size=256) as ring:
        c = ring.consumer("latest")
        p = ring.producer()
        p.publish(bytes([7]) * 256)
        msg = c.pin(timeout=1)
        view = np.frombuffer(msg, np.uint8)
        sent = 0
        for i in range(200):
            try:
                p.publish(bytes([i % 7]) * 256, timeout=0)
                sent += 1
            except shmring.Full:
                pass  # the producer may not overwrite the pinned slot
        # It laps the ring until it reaches the pinned slot, then waits for it (never writes it).
        assert sent == ring.slots - 1
        assert (view == 7).all(), "a pinned slot was overwritten"
        del view
        msg.close()
        p.publish(bytes([9]) * 256, timeout=1)  # released: the producer goes on
        with c.pin(timeout=1) as newest:
            assert newest.missed == ring.slots - 1 and bytes(newest) == bytes([9]) * 256


def test_closing_with_a_live_export_raises(name):
    with shmring.Ring.create(name, slots=2, slot_size=64) as ring:
        c = ring.consumer()
        p = ring.producer()
        p.publish(b"abcdef")
        p.publish(b"second")
        msg = c.pin(timeout=1)
        mv = memoryview(msg)
        with pytest.raises(BufferError):
            msg.close()
        m2 = c.pin(timeout=0)  # the next pin leaves this one pinned
        assert bytes(m2) == b"second" and bytes(mv) == b"abcdef"
        m2.release()
        with pytest.raises(BufferError):
            c.close()
        with pytest.raises(BufferError):  # a with block cannot release it either
            with msg:
                pass
        assert bytes(mv) == b"abcdef"  # still pinned, still valid
        with pytest.raises(TypeError):
            mv[0] = 1  # read-only
        mv.release()
        msg.close()
        assert msg.closed
        with pytest.raises(shmring.Closed):
            memoryview(msg)
        p.publish(b"third", timeout=1)
        with c.pin(timeout=1) as m2:
            assert bytes(m2) == b"third"
            arr = np.frombuffer(m2, np.uint8)
            with pytest.raises(BufferError):
                m2.close()
            del arr
        assert m2.closed


def test_dlpack_export_keeps_the_pin(name):
    with shmring.Ring.create(name, slots=2, slot_size=64) as ring:
        c = ring.consumer()
        p = ring.producer()
        p.publish(b"dlpack")
        msg = c.pin(timeout=1)
        assert msg.__dlpack_device__() == (1, 0)
        arr = np.from_dlpack(msg)
        assert arr.tobytes() == b"dlpack"
        with pytest.raises(BufferError):
            msg.close()
        del arr
        gc.collect()
        msg.close()
        cap = None
        msg2 = None
        p.publish(b"x")
        msg2 = c.pin(timeout=1)
        cap = msg2.__dlpack__()  # an unconsumed capsule also counts, until it is freed
        with pytest.raises(BufferError):
            msg2.close()
        del cap
        msg2.close()


def test_claim_writes_in_place_and_is_bounded(name):
    with shmring.Ring.create(name, slots=2, slot_size=1024, pin_only=True) as ring:
        c = ring.consumer("gating")
        p = ring.producer()
        with p.claim(10) as buf:
            assert len(buf) == 10 and not buf.readonly
            assert inside(ring, np.frombuffer(buf, np.uint8).ctypes.data)
            buf[:] = b"0123456789"
            with pytest.raises((IndexError, ValueError)):
                buf[10] = 1  # past the reservation: refused
            with pytest.raises(ValueError):
                buf[:] = b"x" * 11
        with c.pin(timeout=1) as msg:
            assert bytes(msg) == b"0123456789"
        # An exception aborts: nothing is published.
        with pytest.raises(KeyError):
            with p.claim(4) as buf:
                buf[:] = b"nope"
                raise KeyError
        with pytest.raises(shmring.Timeout):
            c.pin(timeout=0.05)
        # A view that outlives the block keeps the slot claimed: no publish, BufferError.
        with pytest.raises(BufferError):
            with p.claim(4) as buf:
                keep = np.frombuffer(buf, np.uint8)
        with pytest.raises(shmring.Busy):
            p.publish(b"x")
        del keep  # the last view goes: the unpublished claim gives its slot back
        gc.collect()
        claim = p.claim(3)
        memoryview(claim)[:] = b"abc"
        claim.publish()
        with c.pin(timeout=1) as msg:
            assert bytes(msg) == b"abc"
        with pytest.raises(shmring.TooLarge):
            p.claim(1025)


def test_claim_refuses_rings_that_are_not_pin_only(name):
    with shmring.Ring.create(name, slots=2, slot_size=64) as ring:
        p = ring.producer()
        with pytest.raises(shmring.NotPinOnly):
            p.claim(8)


def test_blocking_pin_releases_the_gil_and_ctrl_c_interrupts(ticking, name):
    with shmring.Ring.create(name, slots=2, slot_size=64) as ring:
        c = ring.consumer()
        with ticking() as ticks:
            threading.Timer(0.4, signal.raise_signal, (signal.SIGINT,)).start()
            start = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                c.pin(timeout=None)
            took = time.monotonic() - start
        assert took < 2.0, "Ctrl-C was not noticed within a wait slice"
        assert len(ticks) > 20, "the GIL was held during the wait"
        # The consumer is still usable after the interrupt.
        p = ring.producer()
        p.publish(b"after")
        assert c.recv(timeout=1) == b"after"
