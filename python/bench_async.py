"""Wake-up latency of a parked Python reader, three ways, in one run (docs/benchmarks.md,
"Async subscribers"):

- ``blocking``: ``consumer.recv()`` in a plain thread;
- ``recv_async``: ``await consumer.recv_async()`` on an asyncio loop (ring-os's reactor thread
  wakes the loop through its eventfd; ``SHMRING_ASYNC_DRIVER=0``);
- ``recv_async+driver``: the same with the loop's io_uring ``_Driver`` (Linux >= 6.7, the
  default there): the kernel wakes the loop's thread through the io_uring fd it watches;
- ``executor``: ``await loop.run_in_executor(None, consumer.recv)`` (the usual work-around);
- ``pipe-thread`` and ``pipe-asyncio``: asyncio's own floor, without shmring: the publisher
  writes the same stamps, at the same cadence, into a pipe instead; ``pipe-thread`` reads it
  with ``os.read`` in a plain thread, ``pipe-asyncio`` on the loop (``loop.add_reader`` whose
  callback reads the pipe and resolves the future a task awaits). Their ratio bounds what any
  ``recv_async`` on asyncio can reach against a blocking thread.

A publisher process (spawned by ``subprocess``) pauses ``--pause`` seconds before each of ``-n``
messages, so every reader is parked, and stamps ``time.monotonic_ns()`` (CLOCK_MONOTONIC,
shared by the processes) into each; the reader records publish -> received. Rounds alternate
the ways; the table gives p50/p99 over all rounds and the ratios of the p50s to the
blocking reader's (and, last column, to the pipe thread's).

    python python/bench_async.py            # --quick: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid

import shmring

PUBLISHER = """
import struct, sys, time, shmring
name, n, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ring = shmring.Ring.open(name)
with ring.producer() as p:
    p.wait_for_consumers(1, timeout=10)
    time.sleep(0.05)
    for _ in range(n):
        time.sleep(pause)
        p.publish(struct.pack("<Q", time.monotonic_ns()))
"""

PIPE_PUBLISHER = """
import os, struct, sys, time
fd, n, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
time.sleep(0.05)
for _ in range(n):
    time.sleep(pause)
    os.write(fd, struct.pack("<Q", time.monotonic_ns()))
os.close(fd)
"""


def stamp(data: bytes) -> float:
    """Microseconds from the publisher's stamp in ``data`` to now."""
    return (time.monotonic_ns() - struct.unpack("<Q", data)[0]) / 1000


def blocking(c: shmring.Consumer, out: list[float]) -> None:
    def reader():
        try:
            while True:
                out.append(stamp(c.recv()))
        except shmring.Disconnected:
            pass
    t = threading.Thread(target=reader)
    t.start()
    t.join()


async def recv_async(c: shmring.Consumer, out: list[float]) -> None:
    try:
        while True:
            out.append(stamp(await c.recv_async()))
    except shmring.Disconnected:
        pass


async def executor(c: shmring.Consumer, out: list[float]) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            out.append(stamp(await loop.run_in_executor(None, c.recv)))
    except shmring.Disconnected:
        pass


def pipe_thread(fd: int, out: list[float]) -> None:
    def reader():
        while len(data := os.read(fd, 8)) == 8:
            out.append(stamp(data))
    t = threading.Thread(target=reader)
    t.start()
    t.join()


async def pipe_asyncio(fd: int, out: list[float]) -> None:
    """asyncio's floor: the loop's selector wakes, a reader callback reads the pipe and resolves
    the future the task awaits (the shape of shmring's hub, without shmring)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bytes] | None = None

    def on_ready() -> None:
        data = os.read(fd, 8)
        if fut is not None and not fut.done():
            fut.set_result(data)

    os.set_blocking(fd, False)
    loop.add_reader(fd, on_ready)
    try:
        while True:
            fut = loop.create_future()
            data = await fut
            if len(data) != 8:
                break
            out.append(stamp(data))
    finally:
        loop.remove_reader(fd)


def pipe_round(way: str, n: int, pause: float) -> list[float]:
    r, w = os.pipe()
    pub = subprocess.Popen(
        [sys.executable, "-c", PIPE_PUBLISHER, str(w), str(n), str(pause)], pass_fds=(w,))
    os.close(w)
    out: list[float] = []
    try:
        if way == "pipe-thread":
            pipe_thread(r, out)
        else:
            asyncio.run(pipe_asyncio(r, out))
    finally:
        pub.wait(60)
        os.close(r)
    if len(out) != n:
        raise SystemExit(f"{way}: {len(out)} of {n} messages arrived")
    return out


def round_of(way: str, n: int, pause: float) -> list[float]:
    if way.startswith("pipe-"):
        return pipe_round(way, n, pause)
    name = f"bench-async-{uuid.uuid4().hex[:10]}"
    ring = shmring.Ring.create(name, slots=8, slot_size=64)
    c = ring.consumer("gating")
    pub = subprocess.Popen([sys.executable, "-c", PUBLISHER, name, str(n), str(pause)])
    out: list[float] = []
    try:
        if way == "blocking":
            blocking(c, out)
        else:
            # Read by the loop's hub when the loop makes it (shmring/_aio.py).
            os.environ["SHMRING_ASYNC_DRIVER"] = "1" if way == "recv_async+driver" else "0"
            coro = executor if way == "executor" else recv_async
            asyncio.run(coro(c, out))
            gc.collect()  # the loop's hub, and its driver, go with the loop
    finally:
        pub.wait(60)
        c.close()
        ring.close()
    if len(out) != n:
        raise SystemExit(f"{way}: {len(out)} of {n} messages arrived")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="messages per round")
    ap.add_argument("--pause", type=float, default=0.0005, help="seconds before each message")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a smoke run (100 messages, 1 round)")
    args = ap.parse_args()
    if args.quick:
        args.n, args.rounds = 100, 1
    ways = ["blocking", "recv_async", "executor", "pipe-thread", "pipe-asyncio"]
    try:
        shmring._shmring._Driver()
        ways.insert(2, "recv_async+driver")
    except (OSError, NotImplementedError) as e:
        print(f"no io_uring driver here: {e}")
    lat: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(args.rounds):
        for w in ways if r % 2 == 0 else ways[::-1]:
            lat[w] += round_of(w, args.n, args.pause)
    base = statistics.median(lat["blocking"])
    pipe = statistics.median(lat["pipe-thread"])
    print(f"{args.rounds} rounds x {args.n} messages, {args.pause * 1e6:.0f} µs apart")
    print("| reader | wake-up p50 | p99 | p50 vs blocking | p50 vs pipe thread |")
    print("|---|---|---|---|---|")
    for w in ways:
        v = sorted(lat[w])
        p50, p99 = statistics.median(v), v[int(0.99 * (len(v) - 1))]
        print(f"| {w} | {p50:.1f} µs | {p99:.1f} µs | {p50 / base:.2f}x | {p50 / pipe:.2f}x |")


if __name__ == "__main__":
    main()
