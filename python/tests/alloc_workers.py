"""Child-process bodies for test_allocator.py and test_duplex.py (spawned: module-level functions)."""

import os
import time
import zlib

import shmring


def view_and_check(name, handle, nbytes, out):
    """Opens the ring, views `handle` read-only, reports its crc32, whether it is read-only and
    whether the view lies inside this process's mapping."""
    ring = shmring.Ring.open(name, timeout=5.0)
    view = ring.allocations().view(handle, nbytes)
    mv = memoryview(view)
    try:
        mv[0] = 1
        writable = True
    except TypeError:
        writable = False
    start, end = ring.address_range()
    # numpy gives the data pointer of a read-only buffer without copying.
    import numpy as np

    ptr = np.frombuffer(mv, np.uint8).ctypes.data
    out.put((zlib.crc32(mv), writable, start <= ptr < end, len(mv)))


def allocate_and_hang(name, count, ready):
    """Becomes the ring's producer and allocator owner, allocates `count` blocks, then waits
    to be killed mid-call."""
    ring = shmring.Ring.open(name, timeout=5.0)
    producer = ring.producer()
    alloc = producer.allocator()
    blocks = [alloc.allocate(1000 + i, owner=3) for i in range(count)]
    for b in blocks:
        memoryview(b)[:4] = b"dead"
    ready.set()
    time.sleep(60)
    os._exit(0)


def duplex_side_b(name, script, out):
    """Opens side B of duplex `name` and runs `script` ("echo" or "hang")."""
    side = shmring.Duplex.open(name, timeout=5.0)
    if script == "echo":
        try:
            while True:
                msg = side.recv(timeout=5.0)
                side.send(msg[::-1])
        except shmring.Disconnected:
            out.put("finished")
        except shmring.Aborted as e:
            out.put(f"aborted {e.code}")
        side.close()
    elif script == "view-and-hang":
        handle = int(side.recv(timeout=5.0))
        view = side.view(handle)
        out.put(bytes(memoryview(view)[:5]))
        time.sleep(60)
    elif script == "abort":
        side.send(b"bye")
        side.abort(7)
        out.put("done")
