"""An asyncio client that awaits frames from a ring while it does other async work.

A producer process (spawned here; in real use a camera grabber or a renderer) publishes
`FRAMES` frames of `WIDTH x HEIGHT` RGB bytes into a named ring, each stamped with its index and
a checksum. The client, one asyncio task, pins each frame zero-copy with
`await consumer.pin_async()` — no thread per wait and no executor: ring-os's reactor thread
wakes the event loop through a readiness fd — while a second task keeps ticking (the "other
async work": a UI refresh, a network heartbeat). The client checks its own result: every frame
in order, every checksum right, and the ticker ran while the client waited. Exit status 0 and
"asyncio_frames: ok" on success.

    python python/examples/asyncio_frames.py
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import struct
import sys
import time
import uuid
import zlib

import shmring

WIDTH, HEIGHT = 320, 240
FRAME = WIDTH * HEIGHT * 3
HEADER = struct.Struct("<QI")  # frame index, crc32 of the pixels
FRAMES = 120
PERIOD = 0.005  # the producer's frame interval (200 fps)


def produce(name: str) -> None:
    """The producer process: FRAMES frames written in place, one every PERIOD seconds."""
    ring = shmring.Ring.open(name)
    with ring.producer() as p:
        p.wait_for_consumers(1, timeout=10)
        for i in range(FRAMES):
            time.sleep(PERIOD)
            pixels = bytes([(i + k) & 0xFF for k in range(256)]) * (FRAME // 256)
            with p.claim(HEADER.size + FRAME) as view:  # leaving the block publishes
                view[:HEADER.size] = HEADER.pack(i, zlib.crc32(pixels))
                view[HEADER.size:] = pixels


async def ticker(stop: asyncio.Event, ticks: list[float]) -> None:
    """Other async work: ticks every millisecond until told to stop."""
    while not stop.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.001)


async def client(consumer: shmring.Consumer) -> tuple[int, int]:
    """Pins frame after frame until the producer closes; returns (frames, bad checksums)."""
    seen, bad = 0, 0
    while True:
        try:
            frame = await consumer.pin_async()
        except shmring.Disconnected:
            return seen, bad
        try:
            with memoryview(frame) as view:  # the pixels in the ring, not a copy
                index, crc = HEADER.unpack(view[:HEADER.size])
                if index != seen:
                    raise SystemExit(f"asyncio_frames: frame {index} came where {seen} was due")
                bad += zlib.crc32(view[HEADER.size:]) != crc
        finally:
            frame.release()  # the producer may reuse the slot
        seen += 1


async def main() -> int:
    name = f"asyncio-frames-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    # pin_only: the producer writes frames in place (claim), readers pin them (zero-copy).
    ring = shmring.Ring.create(name, slots=4, slot_size=HEADER.size + FRAME, pin_only=True)
    consumer = ring.consumer("gating")
    producer = mp.get_context("spawn").Process(target=produce, args=(name,))
    producer.start()
    stop, ticks = asyncio.Event(), []
    tick_task = asyncio.create_task(ticker(stop, ticks))
    started = time.monotonic()
    try:
        seen, bad = await asyncio.wait_for(client(consumer), timeout=60)
    finally:
        stop.set()
        await tick_task
        producer.join(10)
        consumer.close()
        ring.close()
    took = time.monotonic() - started
    # The ticker kept running while the client awaited: at least one tick per 10 ms.
    expected_ticks = int(took / 0.010)
    print(f"asyncio_frames: {seen} frames of {FRAME} B in {took:.2f} s, {bad} bad checksums, "
          f"{len(ticks)} ticks meanwhile")
    if seen != FRAMES or bad or len(ticks) < expected_ticks or producer.exitcode != 0:
        print("asyncio_frames: FAILED", file=sys.stderr)
        return 1
    print("asyncio_frames: ok")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
