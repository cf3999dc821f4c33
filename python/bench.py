"""Queue throughput: shmring's queue (copying and zero-copy get) vs multiprocessing.Queue.

Spawned worker, capacity 2, interleaved, median of N runs, start-up excluded (the clock starts
when the worker has answered a first message). py-sharedmemory is not measured yet.

    python bench.py [--runs 5] [--sizes 16,1024,102400,1048576,10485760]
"""

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np

import shmring


def sink_shm(receiver, zero_copy, count, done):
    receiver.get(timeout=60)  # warm-up
    done.put(time.monotonic())
    for _ in range(count):
        x = receiver.get(timeout=60, zero_copy=zero_copy)
        del x
    done.put(time.monotonic())


def sink_mp(q, count, done):
    q.get(timeout=60)
    done.put(time.monotonic())
    for _ in range(count):
        q.get(timeout=60)
    done.put(time.monotonic())


def one(kind, size, count, ctx):
    payload = np.ones(size, np.uint8)
    done = ctx.Queue()
    if kind == "mp.Queue":
        q = ctx.Queue(2)
        p = ctx.Process(target=sink_mp, args=(q, count, done))
        p.start()
        q.put(payload)
        done.get(timeout=60)
        t0 = time.monotonic()
        for _ in range(count):
            q.put(payload)
    else:
        s, r = shmring.create_pair(2, max_message=max(size + 4096, 1 << 16))
        p = ctx.Process(target=sink_shm, args=(r, kind.endswith("zero-copy"), count, done))
        p.start()
        s.put(payload, timeout=60)
        done.get(timeout=60)
        t0 = time.monotonic()
        for _ in range(count):
            s.put(payload, timeout=60)
    t1 = done.get(timeout=600)
    p.join(60)
    return size * count / (t1 - t0) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="16,1024,102400,1048576,10485760")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    kinds = ["shmring copy", "shmring zero-copy", "mp.Queue"]
    print("| size | " + " | ".join(f"{k} GB/s" for k in kinds) + " | copy / mp.Queue |")
    print("|---" * (len(kinds) + 2) + "|")
    for size in (int(s) for s in args.sizes.split(",")):
        count = max(20, min(20000, (256 << 20) // max(size, 1) // 4))
        res = {k: [] for k in kinds}
        for _ in range(args.runs):
            for k in kinds:  # interleaved
                res[k].append(one(k, size, count, ctx))
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"| {size} | " + " | ".join(f"{med[k]:.4g}" for k in kinds)
              + f" | {med['shmring copy'] / med['mp.Queue']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
