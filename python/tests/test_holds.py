"""Several pinned messages alive at once (ring-core holds): eight Arrow batches kept while the
ninth is read, releases in any order, the gating cursor at the oldest pin (across processes),
max_pins, per-message exports, a killed holder reclaimed, a release while another thread
waits."""

import random
import threading
import time

import numpy as np
import pytest

import shmring

import workers

pa = pytest.importorskip("pyarrow")

SCHEMA = pa.schema([("x", pa.int64()), ("k", pa.int32())])


def batch(k):
    """Arrow batch `k`: 1000 distinct int64 values and a column of k."""
    x = np.arange(k * 1000, (k + 1) * 1000, dtype=np.int64) * 7 + 3
    return pa.record_batch([pa.array(x), pa.array(np.full(1000, k, np.int32))], schema=SCHEMA)


def check_batch(b, k):
    assert b.num_rows == 1000
    assert b.column("x").to_numpy().tolist() == batch(k).column("x").to_numpy().tolist()
    assert set(b.column("k").to_pylist()) == {k}


def inside(ring, addr):
    lo, hi = ring.address_range()
    return lo <= addr < hi


def cursor(ring):
    return ring.inspect()["consumers"][0]["cursor"]


def test_eight_arrow_batches_stay_pinned_while_the_ninth_is_read(name):
    with shmring.Ring.create(name, slots=16, slot_size=64 << 10) as ring:
        c = ring.consumer("gating", max_pins=8)
        assert c.max_pins == 8
        p = ring.producer()
        for k in range(9):
            p.publish(memoryview(batch(k).serialize()))
        kept = []
        for k in range(8):
            msg = c.pin(timeout=1)
            b = pa.ipc.read_record_batch(pa.py_buffer(msg), SCHEMA)  # zero-copy over the slot
            assert inside(ring, b.column("x").buffers()[1].address), "not a view of the ring"
            kept.append((msg, b))
        assert c.pins == 8 and cursor(ring) == 0  # the gating cursor stays at the oldest
        # The ninth, read while the eight stay pinned (a copying read needs no pin of them).
        ninth = pa.ipc.read_record_batch(pa.py_buffer(c.recv(timeout=1)), SCHEMA)
        check_batch(ninth, 8)
        for k, (msg, b) in enumerate(kept):
            assert msg.seq == k and not msg.closed
            check_batch(b, k)
        assert c.pins == 8 and cursor(ring) == 0
        # Every byte of the eight still as published, then released with their views gone.
        for k, (msg, b) in enumerate(kept):
            assert bytes(msg) == bytes(batch(k).serialize())
        for msg, b in kept:
            with pytest.raises(BufferError):  # the batch still views the slot
                msg.release()
        del b
        while kept:
            msg, b = kept.pop()
            del b
            msg.release()
        assert c.pins == 0 and cursor(ring) == 9


def test_release_in_any_order(name):
    with shmring.Ring.create(name, slots=4, slot_size=64) as ring:
        c = ring.consumer("gating")
        p = ring.producer()
        for k in range(4):
            p.publish(b"message %d" % k)
        msgs = [c.pin(timeout=1) for _ in range(4)]
        assert [m.seq for m in msgs] == [0, 1, 2, 3] and c.pins == 4
        # (released, the gating cursor after it: the oldest message still pinned)
        for k, want in [(2, 0), (0, 1), (3, 1), (1, 4)]:
            msgs[k].release()
            assert msgs[k].closed and cursor(ring) == want
            for j, m in enumerate(msgs):
                if not m.closed:
                    assert bytes(m) == b"message %d" % j  # the others are untouched
            msgs[k].release()  # releasing again does nothing
            with pytest.raises(shmring.Closed):
                memoryview(msgs[k])
        assert c.pins == 0
        # Released as a group out of order with a latest consumer too (reader bits).
        lat = ring.consumer("latest")
        p.publish(b"newest")
        a = lat.pin(timeout=1)
        p.publish(b"newer still")
        b = lat.pin(timeout=1)
        a.release()
        assert bytes(b) == b"newer still"
        b.release()


def test_a_gating_producer_waits_for_the_oldest_pin(child, name):
    n = 12
    with shmring.Ring.create(name, slots=4, slot_size=8192) as ring:
        c = ring.consumer("gating", max_pins=2)
        with child(workers.produce_payloads, name, n) as proc:
            oldest = c.pin(timeout=30)
            assert workers.check(oldest) == 0
            for k in range(1, 4):  # read and released: only the oldest stays pinned
                with c.pin(timeout=30) as m:
                    assert workers.check(m) == k
            deadline = time.monotonic() + 30
            while ring.inspect()["head"] < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
            # Held back: message 4 would reuse the oldest's slot.
            assert ring.inspect()["head"] == 4 and proc.is_alive()
            assert workers.check(oldest) == 0  # intact
            oldest.release()
            got = []
            while True:
                try:
                    with c.pin(timeout=30) as m:
                        got.append(workers.check(m))
                except shmring.Disconnected:
                    break
            assert got == list(range(4, n))
            workers.finished(proc)


def test_pinning_beyond_max_pins_raises_at_once(name):
    with shmring.Ring.create(name, slots=8, slot_size=64) as ring:
        for bad in (0, 9, -1):
            with pytest.raises(ValueError, match="max_pins"):
                ring.consumer(max_pins=bad)
        assert ring.consumer().max_pins == 4
        c = ring.consumer("skip", max_pins=3)
        p = ring.producer()
        for k in range(5):
            p.publish(b"m%d" % k)
        msgs = [c.pin(timeout=1) for _ in range(3)]
        for timeout in (0, 5.0):
            t0 = time.monotonic()
            with pytest.raises(shmring.TooManyPins, match="max_pins"):
                c.pin(timeout=timeout)
            assert time.monotonic() - t0 < 0.5, "waited instead of raising"
        assert issubclass(shmring.TooManyPins, shmring.Busy)
        assert c.recv(timeout=1) == b"m3"  # copying reads still work
        msgs[1].release()
        with c.pin(timeout=1) as m:
            assert bytes(m) == b"m4"
        del msgs[1]
        # A message dropped without release() is released by its collection.
        msgs.pop()
        assert c.pins == 1
        p.publish(b"m5")
        p.publish(b"m6")
        two = [c.pin(timeout=1), c.pin(timeout=1)]
        assert [bytes(m) for m in two] == [b"m5", b"m6"] and c.pins == 3
        c.close()  # releases all
        assert all(m.closed for m in msgs + two)


def test_an_exported_message_cannot_be_released_until_its_view_goes(name):
    with shmring.Ring.create(name, slots=4, slot_size=64) as ring:
        c = ring.consumer()
        p = ring.producer()
        for k in range(3):
            p.publish(b"payload %d" % k)
        first = c.pin(timeout=1)
        arr = np.frombuffer(first, np.uint8)
        second = c.pin(timeout=1)  # the first stays pinned, its view intact
        dl = np.from_dlpack(second)
        assert arr.tobytes() == b"payload 0" and dl.tobytes() == b"payload 1"
        for m in (first, second):  # each message has its own export count
            with pytest.raises(BufferError):
                m.release()
            with pytest.raises(BufferError):
                with m:
                    pass
        with pytest.raises(BufferError):
            c.close()
        with c.pin(timeout=1) as third:  # unexported: released by its with block
            assert bytes(third) == b"payload 2"
        assert third.closed
        del arr
        first.release()  # its view is gone; the second's is not
        assert first.closed and not second.closed
        with pytest.raises(BufferError):
            second.release()
        assert dl.tobytes() == b"payload 1"
        del dl
        second.release()
        assert second.closed and c.pins == 0
        c.close()


def test_a_consumer_killed_holding_several_is_reclaimed(spawn, child, name):
    with shmring.Ring.create(name, slots=4, slot_size=1024) as ring:
        ready, held = spawn.Event(), spawn.Event()
        with child(workers.hold_several, name, 3, ready, held) as proc:
            p = workers.producer_when_ready(ring, ready)
            for k in range(4):
                p.publish(bytes([k]) * 1024, timeout=5)
            assert held.wait(30)
            entry = ring.inspect()["consumers"][0]
            assert entry["cursor"] == 0  # its oldest pin
            with pytest.raises(shmring.Full):  # held back by the child's pins
                p.publish(b"\x09" * 1024, timeout=0.2)
            workers.kill_and_go_on(proc, ring, p, 1024)


def test_a_release_while_another_thread_waits_in_pin_frees_the_slot(name):
    with shmring.Ring.create(name, slots=2, slot_size=64) as ring:
        c = ring.consumer("gating", max_pins=2)
        p = ring.producer()
        p.publish(b"m0")
        p.publish(b"m1")
        m0 = c.pin(timeout=1)
        assert c.recv(timeout=1) == b"m1"
        with pytest.raises(shmring.Full):  # m2 needs m0's slot
            p.publish(b"m2", timeout=0)
        got = []

        def wait_for_m2():
            with c.pin(timeout=10) as m:
                got.append(bytes(m))

        t = threading.Thread(target=wait_for_m2)
        t.start()
        time.sleep(0.2)  # the thread waits in pin, holding the consumer state
        assert bytes(m0) == b"m0" and len(m0) == 2  # readable meanwhile
        m0.release()  # let go now, given back to the ring by the waiting call
        p.publish(b"m2", timeout=2)
        t.join(10)
        assert got == [b"m2"] and c.pins == 0


def test_release_order_is_random_and_every_batch_survives(name):
    rng = random.Random(28)
    with shmring.Ring.create(name, slots=12, slot_size=64 << 10) as ring:
        c = ring.consumer("gating", max_pins=8)
        p = ring.producer()
        sent = 0
        live = {}
        for _ in range(8):
            while len(live) < 8:  # up to eight batches pinned
                try:
                    p.publish(memoryview(batch(sent).serialize()), timeout=0)
                except shmring.Full:  # held back by the oldest pin, and only by it
                    assert sent == min(live) + ring.slots
                    break
                sent += 1
                msg = c.pin(timeout=1)
                live[msg.seq] = (msg, pa.ipc.read_record_batch(pa.py_buffer(msg), SCHEMA))
            for seq in rng.sample(sorted(live), min(3, len(live))):  # release some at random
                msg, b = live.pop(seq)
                check_batch(b, seq)
                del b
                msg.release()
            assert cursor(ring) == min(live, default=sent)
            for seq, (msg, b) in live.items():
                check_batch(b, seq)
        del msg, b
        live.clear()
        assert c.pins == 0 and cursor(ring) == sent
