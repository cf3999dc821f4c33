"""vgi-rpc echo benchmark: one exchange stream that echoes each batch back, over vgi's plain
pipe, vgi's own shared-memory segment and the ring side channel (shmring.vgi), in one run,
interleaved (each round visits every size and every transport), best of the rounds.

    python bench_vgi.py --rounds 5            # needs vgi-rpc (Python >= 3.13) and shmring

Every batch goes through the side channel (vgi's threshold at 0). A batch is one uint8 column
of the given size; the time is per round trip (client -> server -> client).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Protocol

os.environ["VGI_RPC_SHM_MIN_BATCH_BYTES"] = "0"
# numpy only makes the batches here: OpenBLAS's worker threads (one per core, started at import)
# would take CPU time from the client and server threads on a small machine (perf saw 3.6% of
# a ring run's samples in blas_thread_server).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from vgi_rpc.rpc import (  # noqa: E402
    AnnotatedBatch, CallContext, ExchangeState, OutputCollector, RpcServer, ShmPipeTransport,
    Stream, _RpcProxy, make_pipe_pair,
)
from vgi_rpc.shm import ShmSegment  # noqa: E402

from shmring import vgi as ring_vgi  # noqa: E402

SCHEMA = pa.schema([pa.field("value", pa.uint8())])


@dataclass
class EchoState(ExchangeState):
    def exchange(self, input: AnnotatedBatch, out: OutputCollector, ctx: CallContext) -> None:
        out.emit(input.batch)


class Echo(Protocol):
    def echo(self) -> Stream[EchoState]: ...


class EchoImpl:
    def echo(self) -> Stream[EchoState]:
        return Stream(output_schema=SCHEMA, state=EchoState(), input_schema=SCHEMA)


@contextlib.contextmanager
def connect(kind: str, seg_bytes: int):
    client_pipe, server_pipe = make_pipe_pair()
    cleanup = lambda: None  # noqa: E731
    if kind == "pipe":
        client, server = client_pipe, server_pipe
    elif kind == "vgi-shm":
        shm = ShmSegment.create(seg_bytes)
        client, server = ShmPipeTransport(client_pipe, shm), ShmPipeTransport(server_pipe, shm)

        def cleanup() -> None:
            shm.unlink()
            with contextlib.suppress(BufferError):
                shm.close()
    else:
        pair = ring_vgi.SegmentPair(seg_bytes)
        client = ring_vgi.ShmPipeTransport(client_pipe, pair)
        server = ring_vgi.ShmPipeTransport(server_pipe, pair)
        cleanup = pair.close
    thread = threading.Thread(target=RpcServer(Echo, EchoImpl()).serve, args=(server,), daemon=True)
    thread.start()
    try:
        yield _RpcProxy(Echo, client, None), (pair if kind == "ring" else None)
    finally:
        client.close()
        thread.join(5)
        cleanup()


def measure(proxy, batch: pa.RecordBatch, n: int) -> float:
    """Seconds per round trip over `n` exchanges (after one warm-up)."""
    session = proxy.echo()
    ab = AnnotatedBatch(batch=batch)
    got = session.exchange(ab)
    assert got.batch.equals(batch)
    got.release()
    del got
    t0 = time.perf_counter()
    for _ in range(n):
        got = session.exchange(ab)
        got.release()  # vgi's contract: frees its segment's region (a no-op for pipe and ring)
        del got
    dt = (time.perf_counter() - t0) / n
    session.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-mib", type=int, default=16)
    ap.add_argument("--min-kib", type=int, default=1)
    ap.add_argument("--segment-mib", type=int, default=0,
                    help="vgi's segment and each ring arena (default max(64, 4 x --max-mib))")
    args = ap.parse_args()
    sizes = [1 << k for k in range(10, 40) if args.min_kib << 10 <= (1 << k) <= args.max_mib << 20]
    kinds = ["pipe", "vgi-shm", "ring"]
    seg = (args.segment_mib << 20) or max(64 << 20, 4 * (args.max_mib << 20))
    rng = np.random.default_rng(1)
    batches = {s: pa.record_batch([pa.array(rng.integers(0, 255, s, dtype=np.uint8))], schema=SCHEMA)
               for s in sizes}
    best = {(k, s): float("inf") for k in kinds for s in sizes}
    with contextlib.ExitStack() as stack:
        conns = {k: stack.enter_context(connect(k, seg)) for k in kinds}
        for r in range(args.rounds):
            for s in sizes:
                n = max(5, min(500, (256 << 20) // (2 * s)))
                for k in kinds:
                    best[(k, s)] = min(best[(k, s)], measure(conns[k][0], batches[s], n))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
        stats = conns["ring"][1].stats
    print(f"\nring side channel: {stats['routed']} batches written into a block, "
          f"{stats['reflected']} sent back unchanged (no copy), {stats['fallbacks']} fell back")
    print("\n| batch | pipe | vgi shm segment | ring (shmring.vgi) | ring vs vgi shm |")
    print("|------:|-----:|----------------:|-------------------:|----------------:|")
    for s in sizes:
        label = f"{s >> 10} KiB" if s < 1 << 20 else f"{s >> 20} MiB"
        cells = []
        for k in kinds:
            t = best[(k, s)]
            cells.append(f"{t * 1e6:.0f} µs ({2 * s / t / 1e9:.2f} GB/s)")
        ratio = best[("vgi-shm", s)] / best[("ring", s)]
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
