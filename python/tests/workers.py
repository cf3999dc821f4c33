"""Child-process bodies for the cross-process tests (spawned: importable, top level), and the
parent's side of them (producer_when_ready, consumed, finished, spills, kill_and_go_on)."""

import os
import struct
import time
import zlib

import shmring

HEAD = struct.Struct("<QI")  # seq, crc32 of the rest


def payload(seq: int) -> bytes:
    """Message `seq`: its number, a checksum, then 16..~4000 deterministic bytes."""
    n = 16 + (seq * 7919) % 4000
    body = bytes((seq + i) & 0xFF for i in range(n))
    return HEAD.pack(seq, zlib.crc32(body)) + body


def check(buf) -> int:
    """The sequence number in a message; raises if it is torn."""
    mv = memoryview(buf)
    seq, crc = HEAD.unpack_from(mv)
    body = bytes(mv[HEAD.size:])
    if zlib.crc32(body) != crc or body != payload(seq)[HEAD.size:]:
        raise AssertionError(f"torn message {seq}")
    return seq


def consume(name, mode, ready, results, delay):
    """Reads every message until the stream ends; reports (seq, missed) pairs and torn count.
    A name ``memfd:NAME`` connects to a memfd ring served as NAME."""
    if name.startswith("memfd:"):
        ring = shmring.Ring.connect(name[len("memfd:"):], timeout=10)
        assert ring.kind == "memfd"
    else:
        ring = shmring.Ring.open(name, timeout=10)
    c = ring.consumer(mode)
    ready.set()
    got, torn = [], 0
    while True:
        try:
            with c.pin(timeout=20) as msg:
                try:
                    seq = check(msg)
                except AssertionError:
                    torn += 1
                    continue
                got.append((seq, msg.missed, msg.seq))
        except shmring.Disconnected:
            break
        if delay:
            time.sleep(delay)
    results.put((got, torn, c.received, c.missed))


def hold_pinned(name, ready, pinned):
    """Pins a message, views it with numpy, and waits to be killed."""
    import numpy as np

    ring = shmring.Ring.open(name, timeout=10)
    c = ring.consumer("gating")
    ready.set()
    msg = c.pin(timeout=20)
    view = np.frombuffer(msg, np.uint8)
    assert view.sum() >= 0
    pinned.set()
    time.sleep(600)


def hold_several(name, k, ready, held):
    """Pins `k` messages at once, views each with numpy, and waits to be killed."""
    import numpy as np

    ring = shmring.Ring.open(name, timeout=10)
    c = ring.consumer("gating", max_pins=k)
    ready.set()
    msgs = [c.pin(timeout=20) for _ in range(k)]
    views = [np.frombuffer(m, np.uint8) for m in msgs]
    assert [int(v[0]) for v in views] == list(range(k))
    held.set()
    time.sleep(600)


def produce_payloads(name, n):
    """Publishes payload(0..n) to a ring whose consumer is registered, then closes."""
    ring = shmring.Ring.open(name, timeout=10)
    p = ring.producer()
    assert p.wait_for_consumers(1, timeout=30)
    for seq in range(n):
        p.publish(payload(seq), timeout=30)
    p.close()


def queue_echo(receiver, sender):
    """Gets objects and puts them back until it gets None."""
    while True:
        obj = receiver.get(timeout=30)
        sender.put(obj)
        if obj is None:
            break
    sender.wait_for_all_ack(timeout=30)
    sender.close()
    receiver.close()


def queue_sum(receiver, out):
    """Sums the arrays it gets, zero-copy, until None."""
    total = 0
    while True:
        arr = receiver.get(timeout=30, zero_copy=True)
        if arr is None:
            break
        total += int(arr.sum())
        del arr
    out.put(total)


def arrow_reader(name, ready, out):
    """Reads one Arrow IPC stream zero-copy out of a pinned message."""
    import pyarrow as pa

    ring = shmring.Ring.open(name, timeout=10)
    c = ring.consumer("gating")
    ready.set()
    msg = c.pin(timeout=20)
    buf = pa.py_buffer(msg)
    table = pa.ipc.open_stream(buf).read_all()
    col = table.column("x").chunks[0]
    addr = col.buffers()[1].address
    lo, hi = ring.address_range()
    out.put((table.num_rows, sum(table.column("x").to_pylist()), lo <= addr < hi,
             os.getpid()))
    del table, col, buf
    msg.close()


def producer_when_ready(ring, ready):
    """Once the spawned consumer has set `ready`: a producer of `ring` that has seen it join."""
    assert ready.wait(30)
    p = ring.producer()
    assert p.wait_for_consumers(1, timeout=30)
    return p


def consumed(spawn, child, ring, name, mode, n, delay=0.0, publish_timeout=None):
    """Publishes `n` checksummed payloads on `ring` to a spawned `mode` consumer of `name`; what
    it got (its (seq, missed, ...) list, received, missed), none torn. Closes `ring`."""
    ready, results = spawn.Event(), spawn.Queue()
    try:
        with child(consume, name, mode, ready, results, delay) as proc:
            p = producer_when_ready(ring, ready)
            for seq in range(n):
                p.publish(payload(seq), timeout=publish_timeout)
            p.close()
            got, torn, received, missed = results.get(timeout=60)
            finished(proc)
    finally:
        ring.close()
    assert torn == 0
    return got, received, missed


def finished(child):
    """Waits for `child` and checks that it exited cleanly."""
    child.join(30)
    assert child.exitcode == 0


def spills(name):
    """The spill segments (`<name>.s<seq>-<hex>`) of queue `name` in /dev/shm."""
    import glob

    return glob.glob(f"/dev/shm/shmring.{name}.s*")


def kill_and_go_on(child, ring, producer, size):
    """SIGKILLs `child` (a consumer holding the producer back), then checks that the producer
    reclaims it and goes on (10 messages of `size` bytes) and that its entry is gone."""
    import signal

    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    for i in range(10):  # the producer reclaims the dead consumer and goes on
        producer.publish(bytes([i]) * size, timeout=10)
    assert ring.inspect()["consumers"] == []
