"""Queue and frame throughput, in one run, interleaved.

Queues: shmring's queue (copying ``get`` and zero-copy ``get``; ``shmring in-place``: the
sender builds each array in the segment through ``Sender.claim`` — here it writes only a stamp,
its first and last element, as the payload of the other kinds is built once outside the clock —
and the receiver gets it zero-copy), py-sharedmemory's ``create_shared_memory_pair`` (PyPI
``py-sharedmemory``) and ``multiprocessing.Queue``; opt-in
kinds (``--kinds``) with two threads per endpoint, or one receiver shared by 3 spawned workers. Each
measurement is one fresh pair of capacity 2 with a spawned receiver; the clock starts when the
receiver has got ``WARM`` warm-up messages of the same size (capacity + 1: a queue that keeps
segments for reuse has then made those a steady stream needs), so process start-up and attaching
are excluded, and stops when it has got ``count`` more. Kinds alternate within each of the
``--runs`` rounds (the order rotates every round); the table shows the median of the rounds.

Frames: a spawned producer sends W x H BGRA frames; the consumer either pins each one from a
ring and views it as a ``(H, W, 4)`` numpy array (no copy), or receives it over a Unix socket
with ``recv_into`` a preallocated ``(H, W, 4)`` array. Frames per second, same rules.

    python python/bench.py [--runs 5] [--sizes 16,1K,100K,1M,10M,100M,1G] [--with-10g]
                           [--frames] [--plot docs/python-bench.png] [--json out.json]
"""

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import threading
import time

# No BLAS thread pool, in this process and the spawned ones (they inherit the environment): the
# bench does no linear algebra, and OpenBLAS's server threads spin for tens of milliseconds
# after `import numpy` (a fresh import: 0.125 s of CPU against 0.074 s without them), inside
# the short measurement windows of the large sizes, on whichever CPU a kind's processes need.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import shmring

WORKERS = 3  # the "... 3 workers" kinds: one receiver shared by this many spawned processes
WARM = 3  # warm-up messages before the clock starts (the "... 3 workers" kinds: one a worker)
UNITS = {"K": 1000, "M": 1000**2, "G": 1000**3}
WAIT = 600


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    return int(float(s[:-1]) * UNITS[s[-1]]) if s[-1] in UNITS else int(s)


def label(n):
    for u, v in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= v:
            return f"{n / v:g} {u}"
    return f"{n} B"


# ---------------------------------------------------------------------------- receivers


def sink_shmring(receiver, zero_copy, count, done):
    for _ in range(WARM):
        x = receiver.get(timeout=WAIT, zero_copy=zero_copy)
        del x
    done.put(time.monotonic())
    for _ in range(count):
        x = receiver.get(timeout=WAIT, zero_copy=zero_copy)
        del x
    done.put(time.monotonic())
    receiver.close()


def sink_queue(q, count, done):
    for _ in range(WARM):
        x = q.get(timeout=WAIT)
        del x
    done.put(time.monotonic())
    for _ in range(count):
        x = q.get(timeout=WAIT)
        del x
    done.put(time.monotonic())
    if hasattr(q, "close"):
        q.close()


def sink_threads(receiver, zero_copy, count, done, threads=2):
    """``sink_shmring``/``sink_queue`` with ``threads`` threads sharing one receiver."""
    kw = {"zero_copy": True} if zero_copy else {}
    for _ in range(WARM):
        x = receiver.get(timeout=WAIT, **kw)
        del x
    done.put(time.monotonic())

    def take(n):
        for _ in range(n):
            x = receiver.get(timeout=WAIT, **kw)
            del x

    share = [count // threads + (i < count % threads) for i in range(threads)]
    workers = [threading.Thread(target=take, args=(n,)) for n in share]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.put(time.monotonic())
    receiver.close()


def sink_worker(receiver, zero_copy, tickets, got, total, ready, warm, done):
    """One of several spawned workers sharing one receiver: takes a ticket per ``get`` until
    ``total`` (warm-ups included) are taken; reports when each of the first ``WORKERS`` gets
    (the warm-ups, the only messages sent until they are all got) completes, and when it
    ends."""
    kw = {"zero_copy": True} if zero_copy else {}
    ready.wait(WAIT)  # every worker has attached
    while True:
        with tickets.get_lock():
            if tickets.value >= total:
                break
            tickets.value += 1
        x = receiver.get(timeout=WAIT, **kw)
        del x
        with got.get_lock():
            got.value += 1
            n = got.value
        if n <= WORKERS:
            warm.put(time.monotonic())
    done.put(time.monotonic())
    receiver.close()


def put_threads(put, payload, count, threads=2):
    """``count`` puts of ``payload`` from ``threads`` threads sharing one sender."""
    share = [count // threads + (i < count % threads) for i in range(threads)]
    workers = [threading.Thread(target=lambda n=n: [put(payload, timeout=WAIT) for _ in range(n)])
               for n in share]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def put_in_place(sender):
    """A ``put`` that builds the array in the segment (``Sender.claim``) instead of copying
    ``payload`` there: it writes a stamp, the first and last element."""

    def put(payload, timeout):
        with sender.claim(payload.shape, payload.dtype, timeout=timeout) as a:
            a.flat[0] = a.flat[-1] = 1

    return put


def queue_once(kind, payload, count, ctx):
    """GB/s of ``count`` puts of ``payload`` through ``kind``, start-up excluded."""
    size = payload.nbytes
    done = ctx.Queue()
    closer = None
    # "... 2 threads": two threads per endpoint, sharing the sender and the receiver.
    threaded = kind.endswith(" 2 threads")
    # "... 3 workers": one receiver pickled to 3 spawned processes that share the messages.
    workers = kind.endswith(f" {WORKERS} workers")
    if workers:
        return workers_once(kind, payload, count, ctx)
    if kind.startswith("shmring"):
        s, r = shmring.create_pair(2, max_message=size + 4096)
        in_place = kind == "shmring in-place"
        zero_copy = in_place or kind.removesuffix(" 2 threads").endswith("zero-copy")
        sink = sink_threads if threaded else sink_shmring
        proc = ctx.Process(target=sink, args=(r, zero_copy, count, done))
        put = put_in_place(s) if in_place else s.put
        closer = s
    elif kind.startswith("py-sharedmemory"):
        from py_sharedmemory import create_shared_memory_pair

        s, r = create_shared_memory_pair(capacity=2, ctx=ctx)
        proc = ctx.Process(target=sink_threads if threaded else sink_queue,
                           args=(r, False, count, done) if threaded else (r, count, done))
        put = s.put
        closer = s
    else:
        q = ctx.Queue(2)
        proc = ctx.Process(target=sink_queue, args=(q, count, done))
        put = q.put
    proc.start()
    for _ in range(WARM):
        put(payload, timeout=WAIT)
    t0 = done.get(timeout=WAIT)
    if threaded:
        put_threads(put, payload, count)
    else:
        for _ in range(count):
            put(payload, timeout=WAIT)
    t1 = done.get(timeout=WAIT)
    proc.join(WAIT)
    if closer is not None:
        if hasattr(closer, "wait_for_all_ack"):
            closer.wait_for_all_ack(timeout=60)
        closer.close()
    return size * count / (t1 - t0) / 1e9


def workers_once(kind, payload, count, ctx):
    """GB/s of ``count`` puts of ``payload`` into one receiver shared by ``WORKERS`` spawned
    processes. The clock starts when all have attached and ``WORKERS`` warm-up messages have
    been got (by any of them), and stops when the last worker has got its share."""
    size = payload.nbytes
    if kind.startswith("shmring"):
        s, r = shmring.create_pair(2, max_message=size + 4096)
        zero_copy = kind.removesuffix(f" {WORKERS} workers").endswith("zero-copy")
    else:
        from py_sharedmemory import create_shared_memory_pair

        s, r = create_shared_memory_pair(capacity=2, ctx=ctx)
        zero_copy = False
    tickets, got = ctx.Value("q", 0), ctx.Value("q", 0)
    ready = ctx.Barrier(WORKERS + 1)
    warm, done = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=sink_worker,
                         args=(r, zero_copy, tickets, got, count + WORKERS, ready, warm, done))
             for _ in range(WORKERS)]
    for p in procs:
        p.start()
    ready.wait(WAIT)
    for _ in range(WORKERS):
        s.put(payload, timeout=WAIT)
    t0 = max(warm.get(timeout=WAIT) for _ in range(WORKERS))
    for _ in range(count):
        s.put(payload, timeout=WAIT)
    t1 = max(done.get(timeout=WAIT) for _ in range(WORKERS))
    for p in procs:
        p.join(WAIT)
    if hasattr(s, "wait_for_all_ack"):
        s.wait_for_all_ack(timeout=60)
    s.close()
    r.close()
    return size * count / (t1 - t0) / 1e9


# ---------------------------------------------------------------------------- frames


def frame_producer_ring(ring_name, w, h, count):
    # A frame server renders into the slot in place (a pin-only ring's claim); here the
    # "renderer" is one copy of a prepared frame, as the socket producer's send is.
    ring = shmring.Ring.open(ring_name, timeout=60)
    frame = np.full((h, w, 4), 7, np.uint8)
    with ring.producer() as p:
        p.wait_for_consumers(1, 60)
        for i in range(count + 1):
            frame[0, 0, 0] = i & 0xFF
            with p.claim(frame.nbytes, timeout=WAIT) as buf:
                np.copyto(np.frombuffer(buf, np.uint8).reshape(h, w, 4), frame)
        p.wait_drained(WAIT)


def frame_producer_socket(path, w, h, count):
    frame = np.full((h, w, 4), 7, np.uint8)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    for i in range(count + 1):
        frame[0, 0, 0] = i & 0xFF
        c.sendall(frame)
    c.recv(1)
    c.close()


def frames_once(kind, w, h, count, ctx):
    """Frames per second received as numpy arrays, start-up (the first frame) excluded."""
    nbytes = w * h * 4
    if kind == "pin":
        name = f"bench-frames-{time.monotonic_ns()}"
        ring = shmring.Ring.create(name, slots=2, slot_size=nbytes, consumers=2, pin_only=True)
        c = ring.consumer("gating")
        proc = ctx.Process(target=frame_producer_ring, args=(name, w, h, count))
        proc.start()
        with c.pin(timeout=WAIT) as m:
            arr = np.frombuffer(m, np.uint8).reshape(h, w, 4)
            del arr
        t0 = time.monotonic()
        for i in range(count):
            with c.pin(timeout=WAIT) as m:
                arr = np.frombuffer(m, np.uint8).reshape(h, w, 4)
                assert arr[0, 0, 0] == (i + 1) & 0xFF
                del arr
        t1 = time.monotonic()
        c.close()
        proc.join(WAIT)
        ring.close()
    else:
        path = f"/tmp/bench-frames-{time.monotonic_ns()}.sock"
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        proc = ctx.Process(target=frame_producer_socket, args=(path, w, h, count))
        proc.start()
        conn, _ = srv.accept()
        arr = np.empty((h, w, 4), np.uint8)
        view = memoryview(arr).cast("B")

        def recv_frame():
            got = 0
            while got < nbytes:
                n = conn.recv_into(view[got:], nbytes - got)
                if n == 0:
                    raise EOFError
                got += n

        recv_frame()
        t0 = time.monotonic()
        for i in range(count):
            recv_frame()
            assert arr[0, 0, 0] == (i + 1) & 0xFF
        t1 = time.monotonic()
        conn.send(b"x")
        proc.join(WAIT)
        conn.close()
        srv.close()
        os.unlink(path)
    return count / (t1 - t0)


# ---------------------------------------------------------------------------- main


def count_for(size):
    # About 0.5 GB moved per measurement, between 3 and 20000 messages.
    return max(3, min(20000, int(5e8) // max(size, 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="16,1K,100K,1M,10M,100M,1G")
    ap.add_argument("--with-10g", action="store_true", help="also 10 GB (needs ~35 GB of RAM)")
    ap.add_argument("--kinds", default="shmring copy,shmring zero-copy,shmring in-place,"
                                       "py-sharedmemory,mp.Queue",
                    help="also: 'shmring copy 2 threads', 'py-sharedmemory 2 threads' (two "
                         "threads per endpoint, sharing the sender and the receiver); "
                         "'shmring copy 3 workers', 'shmring zero-copy 3 workers', "
                         "'py-sharedmemory 3 workers' (one receiver shared by 3 spawned "
                         "processes, each message to one of them)")
    ap.add_argument("--frames", action="store_true", help="also the frame comparison")
    ap.add_argument("--no-queues", action="store_true")
    ap.add_argument("--plot", help="write a GB/s-against-size plot (PNG) here")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--merge", nargs="*", default=[],
                    help="earlier --json files whose tables fill in what this run skipped "
                         "(for the plot and the JSON)")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    kinds = args.kinds.split(",")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.with_10g:
        sizes.append(10 * UNITS["G"])
    results = {"queues": {}, "frames": {}}
    if not args.no_queues:
        print(f"| size | {' | '.join(kinds)} | copy / py-shm | zero-copy / py-shm "
              f"| in-place / py-shm | copy / mp.Queue |")
        print("|---" * (len(kinds) + 5) + "|")
        for size in sizes:
            payload = np.ones(size, np.uint8)
            count = count_for(size)
            res = {k: [] for k in kinds}
            for run in range(args.runs):
                order = kinds[run % len(kinds):] + kinds[:run % len(kinds)]
                for k in order:
                    res[k].append(queue_once(k, payload, count, ctx))
            del payload
            med = {k: statistics.median(v) for k, v in res.items()}
            results["queues"][size] = {"median_gbps": med, "runs": res, "count": count}

            def ratio(a, b):
                return f"{med[a] / med[b]:.2f}x" if a in med and b in med else "-"

            print(f"| {label(size)} | " + " | ".join(f"{med[k]:.3g} GB/s" for k in kinds)
                  + f" | {ratio('shmring copy', 'py-sharedmemory')}"
                  + f" | {ratio('shmring zero-copy', 'py-sharedmemory')}"
                  + f" | {ratio('shmring in-place', 'py-sharedmemory')}"
                  + f" | {ratio('shmring copy', 'mp.Queue')} |"
                  + (f" 2 threads: {ratio('shmring copy 2 threads', 'py-sharedmemory 2 threads')}"
                     if "shmring copy 2 threads" in med else "")
                  + (f" 3 workers: {ratio('shmring copy 3 workers', 'py-sharedmemory 3 workers')}"
                     if "shmring copy 3 workers" in med else ""), flush=True)
    if args.frames:
        print()
        print("| frame | MB | pin -> numpy fps | Unix socket -> numpy fps | pin / socket |")
        print("|---|---|---|---|---|")
        for w, h in [(640, 480), (1280, 720), (1920, 1080), (3840, 2160), (7680, 4320)]:
            nbytes = w * h * 4
            count = max(10, min(3000, int(2e9) // nbytes))
            res = {"pin": [], "socket": []}
            for run in range(args.runs):
                for k in (["pin", "socket"] if run % 2 == 0 else ["socket", "pin"]):
                    res[k].append(frames_once(k, w, h, count, ctx))
            med = {k: statistics.median(v) for k, v in res.items()}
            results["frames"][f"{w}x{h}"] = {"median_fps": med, "runs": res, "bytes": nbytes}
            print(f"| {w}x{h} | {nbytes / 1e6:.1f} | {med['pin']:.0f} | {med['socket']:.0f} "
                  f"| {med['pin'] / med['socket']:.1f}x |", flush=True)
    for path in args.merge:
        with open(path) as f:
            old = json.load(f)
        for part in ("queues", "frames"):
            for k, v in old[part].items():
                results[part].setdefault(int(k) if part == "queues" else k, v)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    q = results["queues"]
    sizes = sorted(q)
    if sizes:
        for k in q[sizes[0]]["median_gbps"]:
            ax.plot(sizes, [q[s]["median_gbps"][k] for s in sizes], marker="o", label=k)
    for frame, v in results["frames"].items():
        ax.scatter([v["bytes"]], [v["median_fps"]["pin"] * v["bytes"] / 1e9], marker="^",
                   color="tab:purple", label="frame pin" if frame.startswith("640") else None)
        ax.scatter([v["bytes"]], [v["median_fps"]["socket"] * v["bytes"] / 1e9], marker="v",
                   color="tab:gray", label="frame socket" if frame.startswith("640") else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s (median)")
    ax.set_title("shmring Python queue vs py-sharedmemory vs multiprocessing.Queue")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
