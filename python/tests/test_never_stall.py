"""Never-stall rings (``Ring.create(..., never_stall=n)``): the pins of latest and skip
consumers never make the producer wait while ``slots >= n + 2``; gating consumers still hold
it back; too few slots raise ``InvalidConfig``."""

import uuid

import pytest

import shmring


def _name(tag):
    return f"nostall-{tag}-{uuid.uuid4().hex[:8]}"


def test_a_latest_pin_never_makes_the_producer_wait():
    with shmring.Ring.create(_name("pin"), slots=3, slot_size=64, never_stall=1) as ring:
        assert ring.never_stall
        assert ring.inspect()["never_stall"] is True
        assert "never_stall=True" in repr(ring)
        producer = ring.producer()
        grabber = ring.consumer("latest")
        producer.publish(b"frame 0")
        held = grabber.pin(timeout=1)
        for i in range(1, 40):
            # try_publish raises Full at once if the pin held the producer back.
            assert producer.try_publish(b"frame %d" % i) == i
        assert bytes(held) == b"frame 0"
        held.release()
        with grabber.pin(timeout=1) as newest:
            assert bytes(newest) == b"frame 39"


def test_an_ordinary_ring_is_held_back_by_the_same_pin():
    # What the test above would see without never_stall (so it can fail).
    with shmring.Ring.create(_name("plain"), slots=3, slot_size=64) as ring:
        assert not ring.never_stall
        assert ring.inspect()["never_stall"] is False
        producer = ring.producer()
        grabber = ring.consumer("latest")
        producer.publish(b"frame 0")
        held = grabber.pin(timeout=1)
        with pytest.raises(shmring.Full):
            for i in range(1, 40):
                producer.try_publish(b"frame %d" % i)
        held.release()


def test_a_gating_consumer_still_holds_the_producer_back():
    with shmring.Ring.memfd(slots=3, slot_size=64, never_stall=1) as ring:
        assert ring.never_stall
        producer = ring.producer()
        gating = ring.consumer("gating")
        with pytest.raises(shmring.Full):
            for i in range(4):
                producer.try_publish(bytes([i]))
        assert gating.recv(timeout=1) == bytes([0])


def test_too_few_slots_for_the_pins_are_refused():
    with pytest.raises(shmring.InvalidConfig, match=r"slots >= max_pins \+ 2"):
        shmring.Ring.create(_name("small"), slots=5, never_stall=4)
    with pytest.raises(shmring.InvalidConfig, match="never-stall"):
        shmring.Ring.memfd(slots=2, never_stall=0)
    with pytest.raises(ValueError, match="never_stall"):
        shmring.Ring.create(_name("huge"), slots=8, never_stall=1 << 40)
