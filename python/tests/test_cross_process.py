"""Across processes (spawn): each delivery class with checksummed payloads, and a consumer
killed while it holds a pinned numpy view."""

import pytest

import shmring
import workers

N = 400


def run(spawn, child, name, mode, slots, delay=0.0, publish_timeout=None):
    ring = shmring.Ring.create(name, slots=slots, slot_size=4096 + 64)
    return workers.consumed(spawn, child, ring, name, mode, N, delay, publish_timeout)


def test_gating_loses_nothing(spawn, child, name):
    got, received, missed = run(spawn, child, name, "gating", slots=4)
    assert [g[0] for g in got] == list(range(N))
    assert all(m == 0 for _, m, _ in got)
    assert (received, missed) == (N, 0)


def test_latest_sees_the_newest(spawn, child, name):
    got, received, missed = run(spawn, child, name, "latest", slots=4, delay=0.002)
    seqs = [g[0] for g in got]
    assert seqs == sorted(set(seqs)), "latest-only went backwards or repeated"
    assert seqs[-1] == N - 1, "the newest message was not seen"
    assert received + missed == N


def test_skip_reports_exactly_what_it_missed(spawn, child, name):
    got, received, missed = run(spawn, child, name, "skip", slots=4, delay=0.003)
    prev = -1
    for seq, m, _ in got:
        assert seq == prev + 1 + m, "a skip was not counted exactly"
        prev = seq
    assert missed > 0, "the slow consumer never lagged: the test proves nothing"
    assert received + missed == prev + 1


def test_a_killed_consumer_holding_a_numpy_view_does_not_stall_the_producer(spawn, child, name):
    with shmring.Ring.create(name, slots=2, slot_size=1024) as ring:
        ready, pinned = spawn.Event(), spawn.Event()
        with child(workers.hold_pinned, name, ready, pinned) as proc:
            p = workers.producer_when_ready(ring, ready)
            p.publish(b"\x01" * 1024)
            assert pinned.wait(30)
            # A gating reader's pin is its cursor (no reader bit): it stays at the message.
            entry = ring.inspect()["consumers"][0]
            assert entry["pins"] == 0 and entry["cursor"] == 0
            p.publish(b"\x02" * 1024)
            with pytest.raises(shmring.Full):  # held back by the gating, pinning child
                p.publish(b"\x03" * 1024, timeout=0.2)
            workers.kill_and_go_on(proc, ring, p, 1024)
