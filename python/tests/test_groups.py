"""Groups of competing consumers across processes: the queue's work-sharing receivers (one
receiver pickled to spawned workers hands each message to exactly one of them, and a worker
killed holding a message does not lose it) and the ring-level API (``Producer.create_group``,
``Ring.consumer(group=)``, ``Message.redelivered``, ``NoSuchGroup``)."""

import glob
import multiprocessing as mp
import os
import queue
import signal
import time

import numpy as np
import pytest

import shmring
import group_workers


def _started(spawn, target, args, ready):
    """Starts ``target(*args)`` in a spawned process and waits until it set ``ready``."""
    p = spawn.Process(target=target, args=args)
    p.start()
    assert ready.wait(60), "a worker did not start"
    return p


def _stop(procs):
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join(5)


def test_one_receiver_pickled_to_three_workers_shares_3000_messages_exactly_once(spawn, name):
    sender, receiver = shmring.create_pair(8, max_message=1024, name=name)
    out = spawn.Queue()
    sender.put(0, timeout=30)  # the group exists before the workers start: they join at once
    readies = [spawn.Event() for _ in range(3)]
    workers = [_started(spawn, group_workers.take_until_none, (receiver, e, out), e)
               for e in readies]
    try:
        for i in range(1, 3000):
            sender.put(i, timeout=30)
        for _ in workers:
            sender.put(None, timeout=30)  # one stop per worker: each stops at its first
        got = [out.get(timeout=60) for _ in workers]
        assert sender.wait_for_all_ack(timeout=30)
    finally:
        _stop(workers)
        sender.close()
        receiver.close()
    assert all(p.exitcode == 0 for p in workers)
    assert all(got), f"a worker took nothing: {[len(g) for g in got]}"
    values = sorted(v for g in got for v, _ in g)
    assert values == list(range(3000)), "each message to exactly one worker"
    assert not any(again for g in got for _, again in g), "nothing was redelivered"


def test_a_worker_killed_holding_a_message_loses_nothing(spawn, name):
    n, k = 3000, 1000
    sender, receiver = shmring.create_pair(8, max_message=1024, name=name)
    out, held_q = spawn.Queue(), spawn.Queue()
    sender.put(np.full(4, 0), timeout=30)
    ready = [spawn.Event() for _ in range(3)]
    victim = _started(spawn, group_workers.hold_from, (receiver, ready[0], k, held_q), ready[0])
    survivors = [_started(spawn, group_workers.take_until_none, (receiver, e, out), e)
                 for e in ready[1:]]
    victim_got, held = None, None
    try:
        deadline = time.monotonic() + 120

        def kill_when_held(block):
            nonlocal victim_got, held
            if held is not None:
                return
            try:
                victim_got, held = held_q.get(timeout=60 if block else 0)
            except queue.Empty:
                assert not block, "the victim never got a message to hold"
                return
            assert held is not None, "the victim reached the end without holding a message"
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(30)

        for i in range(1, n):
            while True:
                kill_when_held(block=False)
                try:
                    # Short waits: the ring fills while the victim holds its message, until
                    # it is killed and the sender's wait hands the message to the group.
                    sender.put(np.full(4, i), timeout=0.05)
                    break
                except shmring.Full:
                    assert time.monotonic() < deadline, f"put {i} never went through"
        kill_when_held(block=True)
        assert sender.wait_for_all_ack(timeout=60)
        for _ in survivors:
            sender.put(None, timeout=30)
        got = [out.get(timeout=60) for _ in survivors]
    finally:
        if victim.is_alive():
            victim.kill()
        _stop([victim, *survivors])
        sender.close()
        receiver.close()
    assert victim.exitcode == -signal.SIGKILL
    assert all(p.exitcode == 0 for p in survivors)
    delivered = [(v, False) for v in victim_got] + [d for g in got for d in g]
    assert (held, True) in delivered, f"message {held}, held by the killed worker, " \
        "was not redelivered (flagged)"
    first = [v for v, again in delivered if not again]
    assert len(first) == len(set(first)), "a message came twice without the flag"
    assert {v for v, again in delivered if again} == {held}, "only the held message repeats"
    assert sorted({v for v, _ in delivered}) == list(range(n)), "every message at least once"


def test_a_spilled_message_a_killed_worker_viewed_is_redelivered_whole(spawn, name):
    sender, receiver = shmring.create_pair(2, name=name)
    big = np.arange(30_000_000, dtype=np.uint8)  # more than its arena share: it spills
    sender.put(big, timeout=30)
    spills = f"/dev/shm/shmring.{name}.s*"
    assert len(glob.glob(spills)) == 1
    out, ready = spawn.Queue(), spawn.Event()
    victim = _started(spawn, group_workers.hold_from, (receiver, ready, 0, out), ready)
    try:
        assert out.get(timeout=60) == ([], 0)  # it views the message zero-copy
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(30)
        assert len(glob.glob(spills)) == 1
        assert not sender.wait_for_all_ack(timeout=0.5)  # reclaims it: back to the group
        again = receiver.get(timeout=10)
        assert receiver.redelivered and np.array_equal(again, big)
    finally:
        _stop([victim])
        sender.close()
        receiver.close()
    assert glob.glob(spills) == []


def test_late_workers_get_what_is_unread(spawn, name):
    sender, receiver = shmring.create_pair(None, name=name)
    for i in range(20):
        sender.put(i, timeout=30)
    sender.put(None, timeout=30)
    out, ready = spawn.Queue(), spawn.Event()
    worker = _started(spawn, group_workers.take_until_none, (receiver, ready, out), ready)
    try:
        assert out.get(timeout=60) == [(i, False) for i in range(20)]
    finally:
        _stop([worker])
        sender.close()
        receiver.close()


def test_the_original_receiver_shares_with_its_pickled_copies(name):
    import pickle

    sender, receiver = shmring.create_pair(4, max_message=1024, name=name)
    with sender, receiver:
        copy = pickle.loads(pickle.dumps(receiver))  # one more member, in this process
        got = []
        for i in range(6):
            sender.put(i, timeout=5)
            got.append((receiver if i % 2 else copy).get(timeout=5))
        assert got == list(range(6))
        with pytest.raises(shmring.Empty):
            receiver.get(timeout=0.05)
        with pytest.raises(shmring.Empty):
            copy.get_nowait()
        copy.close()


def test_a_queue_takes_31_receivers_and_the_next_one_says_busy_at_its_get(name):
    import pickle

    sender, receiver = shmring.create_pair(4, max_message=1024, name=name)
    with sender, receiver:
        sender.put("first", timeout=5)
        copies = [pickle.loads(pickle.dumps(receiver)) for _ in range(31)]  # 31 members
        extra = pickle.loads(pickle.dumps(receiver))  # unpickling never fails on a full table
        with pytest.raises(shmring.Busy):
            extra.get(timeout=1)
        assert receiver._ring._group_state(shmring.queue._GROUP) == (1, 31)
        assert copies[30].get(timeout=5) == "first"
        copies[0].close()  # a free entry: the next get joins
        sender.put("second", timeout=5)
        assert extra.get(timeout=5) == "second"
        for c in [*copies[1:], extra]:
            c.close()


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_forked_children_join_as_members_of_their_own(name):
    fork = mp.get_context("fork")
    sender, receiver = shmring.create_pair(4, max_message=1024, name=name)
    with sender, receiver:
        sender.put("parent's", timeout=5)
        assert receiver.get(timeout=5) == "parent's"  # the parent is a member now
        out, go = fork.Queue(), fork.Event()
        children = [fork.Process(target=group_workers.take_one_and_wait, args=(receiver, out, go))
                    for _ in range(2)]
        for c in children:
            c.start()
        try:
            sender.put(1, timeout=5)
            sender.put(2, timeout=5)
            assert sorted(out.get(timeout=30) for _ in children) == [1, 2]
            # Each child joined with an entry of its own, and the parent's is still its own.
            assert receiver._ring._group_state(shmring.queue._GROUP) == (0, 3)
            go.set()
        finally:
            go.set()
            _stop(children)
        assert all(c.exitcode == 0 for c in children)
        sender.put(3, timeout=5)
        assert receiver.get(timeout=5) == 3


def test_two_ring_members_in_two_processes_take_each_message_once(spawn, name):
    ring = shmring.Ring.create(name, slots=8, slot_size=64, consumers=4)
    with ring:
        producer = ring.producer()
        index = producer.create_group("workers")
        assert producer.create_group("workers") == index  # idempotent
        out = spawn.Queue()
        ready = [spawn.Event() for _ in range(2)]
        members = [_started(spawn, group_workers.ring_member, (name, "workers", e, out), e)
                   for e in ready]
        try:
            # Paced until both members have taken a message: on a loaded machine one member's
            # process may not run at all while 2000 messages go through at full speed (CI saw
            # [0, 2000] once). Then at full speed. Whoever is fastest takes each message.
            def members_that_took():
                return sum(1 for e in ring.inspect()["consumers"]
                           if e["class"] != "group" and e["received"] > 0)
            for i in range(2000):
                producer.publish(i.to_bytes(4, "little"), timeout=30)
                if i < 1000 and members_that_took() < 2:
                    time.sleep(0.005)
            producer.close()
            got = [out.get(timeout=60) for _ in members]
        finally:
            _stop(members)
        assert all(p.exitcode == 0 for p in members)
        assert all(got), f"a member took nothing: {[len(g) for g in got]}"
        assert sorted(v for g in got for v, _ in g) == list(range(2000))
        assert not any(again for g in got for _, again in g)
        info = {e["index"]: e for e in ring.inspect()["consumers"]}
        assert info[index]["class"] == "group"


def test_a_ring_member_killed_holding_a_pin_gives_it_to_another_flagged(spawn, name):
    ring = shmring.Ring.create(name, slots=4, slot_size=64, consumers=4)
    with ring:
        producer = ring.producer()
        producer.create_group("workers")
        out, ready = spawn.Queue(), spawn.Event()
        holder = _started(spawn, group_workers.ring_member_holding, (name, "workers", ready, out),
                          ready)
        try:
            producer.publish((7).to_bytes(4, "little"), timeout=5)
            assert out.get(timeout=60) == (7, False)
            mine = ring.consumer(group="workers")
            with pytest.raises(shmring.Timeout):
                mine.pin(timeout=0.1)  # the holder has it
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(30)
            assert not producer.wait_drained(timeout=0.5)  # reclaims the holder
            with mine.pin(timeout=5) as msg:
                assert int.from_bytes(msg.tobytes(), "little") == 7 and msg.redelivered
            assert producer.wait_drained(timeout=5)
            producer.close()
        finally:
            if holder.is_alive():
                holder.kill()
            _stop([holder])


def test_joining_a_group_the_producer_never_created_raises_no_such_group(name):
    ring = shmring.Ring.create(name, slots=4, slot_size=64, consumers=4)
    with ring:
        with pytest.raises(shmring.NoSuchGroup, match='"nope"') as e:
            ring.consumer(group="nope")
        assert isinstance(e.value, LookupError) and isinstance(e.value, shmring.Error)
        producer = ring.producer()
        producer.create_group("g")
        with pytest.raises(ValueError, match="gating"):
            ring.consumer("latest", group="g")
        with pytest.raises(ValueError, match="history"):
            ring.consumer(group="g", history=2)
        member = ring.consumer(group="g")
        assert member.group == "g" and member.mode == "gating"
        assert ring.consumer().group is None
        producer.publish(b"x")
        assert member.pending == 1
        with member.pin(timeout=5) as msg:
            assert bytes(msg.tobytes()) == b"x" and not msg.redelivered
        assert member.pending == 0
        producer.close()


def test_a_full_consumer_table_refuses_a_group_with_busy(name):
    ring = shmring.Ring.create(name, slots=4, slot_size=64, consumers=1)
    with ring:
        keep = ring.consumer()
        producer = ring.producer()
        with pytest.raises(shmring.Busy):
            producer.create_group("g")
        keep.close()
        producer.close()
