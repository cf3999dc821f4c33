"""Late joiners: a latest consumer opened after a publish gets that message; a skip consumer
with ``history=n`` starts up to n messages back, as far as the ring still holds them."""

import uuid

import pytest

import shmring


def _ring(slots=4):
    return shmring.Ring.create(f"latejoin-{uuid.uuid4().hex[:8]}", slots=slots, slot_size=64)


def test_a_latest_consumer_opened_after_a_publish_gets_that_message():
    with _ring() as ring:
        producer = ring.producer()
        producer.publish(b"the frame that is already there")
        consumer = ring.consumer("latest")
        with consumer.pin(timeout=1) as msg:
            assert bytes(msg) == b"the frame that is already there"


def test_a_skip_consumer_with_history_reads_back_as_far_as_the_ring_holds():
    with _ring(slots=4) as ring:
        producer = ring.producer()
        for i in range(6):
            producer.publish(bytes([i]))
        three = ring.consumer("skip", history=3)
        assert [three.recv(timeout=1)[0] for _ in range(3)] == [3, 4, 5]
        far = ring.consumer("skip", history=100)
        assert [far.recv(timeout=1)[0] for _ in range(4)] == [2, 3, 4, 5]
        none = ring.consumer("skip")
        with pytest.raises(shmring.Timeout):
            none.recv(timeout=0.05)


def test_history_is_refused_where_it_does_not_apply():
    # A latest-only consumer starts at the newest message present anyway.
    with _ring() as ring:
        with pytest.raises(ValueError, match="history"):
            ring.consumer("latest", history=2)


def test_a_gating_consumer_with_history_reads_back_then_gates():
    with _ring() as ring:
        producer = ring.producer()
        for i in range(3):
            producer.publish(bytes([i]))
        late = ring.consumer("gating", history=2)
        assert [late.recv(timeout=1)[0] for _ in range(2)] == [1, 2]


def test_a_ring_created_with_history_starts_every_late_consumer_back():
    with shmring.Ring.create(
        f"hist-{uuid.uuid4().hex[:8]}", slots=4, slot_size=64, history=2
    ) as ring:
        producer = ring.producer()
        for i in range(5):
            producer.publish(bytes([i]))
        gating = ring.consumer("gating")
        skip = ring.consumer("skip")
        latest = ring.consumer("latest")
        assert [gating.recv(timeout=1)[0] for _ in range(2)] == [3, 4]
        assert [skip.recv(timeout=1)[0] for _ in range(2)] == [3, 4]
        assert latest.recv(timeout=1)[0] == 4
    with pytest.raises(ValueError):
        shmring.Ring.create(f"hist-{uuid.uuid4().hex[:8]}", slots=4, history=5)
