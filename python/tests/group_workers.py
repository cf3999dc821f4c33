"""Spawned-process targets of test_groups.py (importable by multiprocessing's spawn)."""

import time

import shmring


def take_until_none(receiver, ready, out):
    """Gets objects until ``None``; puts ``[(value, redelivered), ...]`` on ``out``."""
    ready.set()
    got = []
    while (obj := receiver.get(timeout=60)) is not None:
        value = int(obj[0]) if hasattr(obj, "__len__") else obj
        got.append((value, receiver.redelivered))
    receiver.close()
    out.put(got)


def hold_from(receiver, ready, k, out):
    """Gets objects zero-copy; keeps the first whose value is at least ``k`` (its view keeps
    the message pinned), reports ``(finished values, held value)`` on ``out`` and sleeps
    until it is killed."""
    ready.set()
    got = []
    while (obj := receiver.get(timeout=60, zero_copy=True)) is not None:
        value = int(obj[0])
        if value >= k:
            out.put((got, value))
            time.sleep(600)
        got.append(value)
        del obj  # the next zero-copy get lets this message go
    out.put((got, None))


def ring_member(name, group, ready, out):
    """Joins ``group`` of ring ``name``, pins messages until the stream ends, and puts
    ``[(int value, redelivered), ...]`` on ``out``."""
    ring = shmring.Ring.open(name, timeout=30)
    consumer = ring.consumer(group=group)
    ready.set()
    got = []
    for msg in consumer:
        with msg:
            got.append((int.from_bytes(msg.tobytes(), "little"), msg.redelivered))
    consumer.close()
    out.put(got)


def ring_member_holding(name, group, ready, out):
    """Joins ``group`` of ring ``name``, pins one message, reports its value on ``out`` and
    sleeps holding it until it is killed."""
    ring = shmring.Ring.open(name, timeout=30)
    consumer = ring.consumer(group=group)
    ready.set()
    msg = consumer.pin(timeout=60)
    out.put((int.from_bytes(msg.tobytes(), "little"), msg.redelivered))
    time.sleep(600)


def take_one_and_wait(receiver, out, go):
    """Gets one object, reports it on ``out``, waits for ``go``, then leaves (a forked child
    using the receiver it inherited)."""
    out.put(receiver.get(timeout=30))
    assert go.wait(60)
    receiver.close()
