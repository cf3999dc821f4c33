"""The frame-grabber benchmark, UnrealCV's way: the real `unrealcv` client (1.3.2, from PyPI)
against the C++ frame server (frame_server.cpp), TCP against shared memory.

The method of the frame-grabber seed's Table 2 ("seed 001"): per frame size, 10 warm-up
captures, then 3 rounds of 20 measured captures, the paths alternating capture by capture
(their order rotating), request -> frame usable. Every request makes the server render a new
frame into its ring and answer it, as an engine renders and encodes per `vget`:

  TCP (unrealcv.Client)     client.request("vget /camera/0/lit bmp") -> the BMP file's bytes
                            (the server copies the frame into a BMP per request)
  shm zero-copy             client.request("vget /camera/0/lit_shared") -> JSON descriptor ->
                            shmring.unrealcv's Reader.frame_view: a numpy view pinned in the ring
  shm copy (recv_into)      the same descriptor -> Reader.recv_into: a copy into one array the
                            reader reuses, the slot released at once
  TCP prealloc (raw)        this script's own minimal UnrealCV-framing socket client:
                            "vget /camera/0/lit bmp" -> recv_into one preallocated array (what
                            a careful TCP client does; the real client joins chunks into bytes
                            and hands each answer between two threads)
  shm zero-copy (raw), shm copy (raw)   the shared-memory paths with the descriptor asked by
                            that raw client: the same client cost as "TCP prealloc (raw)", so
                            "shm copy (raw)" against it is a copying read against TCP into a
                            preallocated buffer, nothing else differing

"Usable" = the frame's bytes are in hand and its stamp (the frame number in its first 8 bytes)
is the one expected; the clock runs in the client from just before the request. After the
clock stops (untimed), every shared-memory frame is checked against the descriptor's checksum
(all bytes) and every TCP frame's stamp and two of its rows against the pattern; a mismatch
stops the run. The server's own costs (median and mean: render, BMP/NPY/PNG encoding, a
`lit_shared` request's time to its framed answer) are read from `vget /unrealcv/status` after
each size. The speedup is printed beside seed 001's where the seed published one (640x480:
1.6x, 3840x2160: 14.7x).

    python -m venv venv && venv/bin/pip install ./python numpy unrealcv==1.3.2
    venv/bin/python examples/frame-server/bench.py            # builds libshmring + the server
    venv/bin/python examples/frame-server/bench.py --quick    # one size, few captures (CI)
"""

import argparse
import contextlib
import io
import json
import logging
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import unrealcv

from shmring import unrealcv as su

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(640, 480), (1280, 720), (1920, 1080), (2560, 1440), (3840, 2160), (7680, 4320)]
MAGIC = 0x9E2B83C1
BMP_HEADER = 54
TIMEOUT = 60.0
TCP, SHM, COPY = "TCP (unrealcv.Client)", "shm zero-copy", "shm copy (recv_into)"
RAW, RAW_SHM, RAW_COPY = "TCP prealloc (raw)", "shm zero-copy (raw)", "shm copy (raw)"
PATHS = [TCP, SHM, COPY, RAW, RAW_SHM, RAW_COPY]
# Seed 001's Table 2: shared memory (the client copying the mapping) against TCP, end to end,
# published for these two sizes only (4K: 224.8 ms against 15.3 ms).
SEED = {(640, 480): 1.6, (3840, 2160): 224.8 / 15.3}


# The server's costs reported per size, in the order of the second table's columns.
NOTE_COSTS = ["Render", "EncodeBmp", "EncodeNpy", "EncodePng", "SharedRequest"]


def build(target):
    """Builds libshmring (release) and the frame server (CMake, via the installed pkg-config
    file); returns the server's path."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    prefix = target / "frame-bench" / "prefix"
    subprocess.run(["bash", str(ROOT / "ring-ffi/install.sh"), str(prefix)], check=True,
                   env=env, stdout=subprocess.DEVNULL)
    env["PKG_CONFIG_PATH"] = str(prefix / "lib/pkgconfig")
    build_dir = target / "frame-bench" / "build"
    subprocess.run(["cmake", "-S", str(ROOT / "examples/frame-server"), "-B", str(build_dir),
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return build_dir / "frame-server"


def connect(port):
    """The real client, connected (its connect() prints and logs; both go quiet here)."""
    client = unrealcv.Client(("127.0.0.1", port))
    with contextlib.redirect_stdout(io.StringIO()):
        if not client.connect():
            raise RuntimeError(f"unrealcv.Client could not connect to port {port}")
    return client


def recv_exactly(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the frame server closed the connection")
        got += n


class RawTcp:
    """UnrealCV's framing (magic, length, "<id>:<payload>") on a plain socket, each answer
    received into one preallocated array."""

    def __init__(self, port, w, h):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = bytearray(8)
        self.buf = np.empty(BMP_HEADER + w * h * 4 + 32, np.uint8)
        self.id = 0
        if not bytes(self.receive()).startswith(b"connected"):
            raise RuntimeError("the frame server did not greet")

    def receive(self):
        recv_exactly(self.sock, memoryview(self.head))
        magic, n = struct.unpack("<II", self.head)
        if magic != MAGIC or n > len(self.buf):
            raise ValueError(f"bad answer: magic {magic:#x}, {n} bytes")
        view = memoryview(self.buf)[:n]
        recv_exactly(self.sock, view)
        return view

    def request(self, command):
        payload = b"%d:%s" % (self.id, command)
        self.sock.sendall(struct.pack("<II", MAGIC, len(payload)) + payload)
        view = self.receive()
        prefix = b"%d:" % self.id
        if bytes(view[:len(prefix)]) != prefix:
            raise ValueError(f"answer to request {self.id} starts {bytes(view[:16])!r}")
        self.id += 1
        return view[len(prefix):]


def check_bmp(bmp, w, h, n):
    """A BMP answer: its header, its stamp, and two rows against the pattern (render.hpp)."""
    if bytes(bmp[:2]) != b"BM" or len(bmp) != BMP_HEADER + w * h * 4:
        raise ValueError(f"not the {w}x{h} BMP expected ({len(bmp)} bytes)")
    px = np.frombuffer(bmp, np.uint8, offset=BMP_HEADER).reshape(h, w, 4)
    if int.from_bytes(px[0, :2].tobytes(), "little") != n:
        raise ValueError(f"BMP stamped {int.from_bytes(px[0, :2].tobytes(), 'little')}, "
                         f"expected frame {n}")
    x = np.arange(w)
    for y in (h // 2, h - 1):
        want = np.stack([(x + n) & 255, np.full(w, (y + n) & 255), np.full(w, n & 255),
                         np.full(w, 255)], axis=1).astype(np.uint8)
        if not np.array_equal(px[y], want):
            raise ValueError(f"frame {n}: row {y} differs from the pattern")


def cell(server, w, h, warmup, rounds, captures, tmp):
    name = f"ucvbench-{os.getpid()}-{w}x{h}"
    proc = subprocess.Popen([str(server), name, str(Path(tmp) / f"{name}.sock"), str(w),
                             str(h), "--tcp", "0", "--save-dir", str(tmp)],
                            stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        if not first.startswith("serving"):
            raise RuntimeError(f"the frame server did not start: {first!r}")
        port = int(first.rsplit(":", 1)[1])
        tcp, shm_client, copy_client = connect(port), connect(port), connect(port)
        raw = RawTcp(port, w, h)
        zero_reader, copy_reader = su.Reader(name), su.Reader(name)
        out = np.empty((h, w, 4), np.uint8)  # the copying reader's one array
        clock = time.perf_counter_ns
        expect = [0]  # the next frame number: one request at a time, each renders a frame

        def take(path):
            n = expect[0]
            t0 = clock()
            if path == TCP:
                bmp = tcp.request("vget /camera/0/lit bmp", timeout=TIMEOUT)
                if not isinstance(bmp, bytes) or bmp[BMP_HEADER:BMP_HEADER + 8] != \
                        n.to_bytes(8, "little"):
                    raise ValueError(f"{path}: not frame {n}")
                t1 = clock()
                check_bmp(bmp, w, h, n)
            elif path == RAW:
                bmp = raw.request(b"vget /camera/0/lit bmp")
                if bytes(bmp[BMP_HEADER:BMP_HEADER + 8]) != n.to_bytes(8, "little"):
                    raise ValueError(f"{path}: not frame {n}")
                t1 = clock()
                check_bmp(bmp, w, h, n)
            else:
                if path in (RAW_SHM, RAW_COPY):
                    desc = su.parse(bytes(raw.request(b"vget /camera/0/lit_shared")))
                else:
                    client = shm_client if path == SHM else copy_client
                    desc = su.parse(client.request("vget /camera/0/lit_shared",
                                                   timeout=TIMEOUT))
                if path in (SHM, RAW_SHM):
                    frame = zero_reader.frame_view(desc, TIMEOUT)
                else:
                    frame = copy_reader.recv_into(desc, out, TIMEOUT)
                if desc["stamp"] != n or frame.reshape(-1)[:8].tobytes() != \
                        n.to_bytes(8, "little"):
                    raise ValueError(f"{path}: not frame {n}")
                t1 = clock()
                if su.word_sum(frame) != desc["sum"]:
                    raise ValueError(f"{path}: frame {n} does not match the server's sum")
                del frame  # unpins a zero-copy frame
            expect[0] = n + 1
            return (t1 - t0) / 1e6

        for i in range(warmup):
            take(PATHS[i % len(PATHS)])
        times = {p: [[] for _ in range(rounds)] for p in PATHS}
        for r in range(rounds):
            for i in range(captures):
                k = (r * captures + i) % len(PATHS)
                for p in PATHS[k:] + PATHS[:k]:
                    times[p][r].append(take(p))
        # Untimed: what the server spent, and what a PNG and an NPY cost it to encode.
        for _ in range(3):
            tcp.request("vget /camera/0/lit png", timeout=TIMEOUT)
            tcp.request("vget /camera/0/lit npy", timeout=TIMEOUT)
        status = tcp.request("vget /unrealcv/status", timeout=TIMEOUT)
        # "<What>Ms: <mean> mean of <count>, median <median>"
        costs = {line.split("Ms:")[0]: {"mean": float(line.split()[1]),
                                        "median": float(line.rsplit(" ", 1)[1])}
                 for line in status.splitlines() if "Ms:" in line}
        for c in (tcp, shm_client, copy_client):
            c.disconnect()
        raw.sock.close()
        del out
        zero_reader.close()
        copy_reader.close()
        return times, costs
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", help="WxH,WxH,... (default: 640x480 up to 7680x4320)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--captures", type=int, default=20, help="per round and path")
    ap.add_argument("--quick", action="store_true",
                    help="2 warm-up, 1 round of 5 captures, 640x480 unless --sizes (CI)")
    ap.add_argument("--server", help="a built frame-server (default: build it)")
    ap.add_argument("--json", help="also write the raw times (ms) to this file")
    args = ap.parse_args()
    logging.getLogger("unrealcv").setLevel(logging.WARNING)
    if args.quick:
        args.sizes, args.warmup, args.rounds, args.captures = args.sizes or "640x480", 2, 1, 5
    args.sizes = args.sizes or ",".join(f"{w}x{h}" for w, h in SIZES)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    if args.server:
        server = Path(args.server)
    else:
        server = build(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")).resolve())

    print(f"UnrealCV frame grabber: {args.warmup} warm-up, {args.rounds} rounds x "
          f"{args.captures} captures per path, paths alternated; ms per capture, request -> "
          "frame usable; speedup = TCP (unrealcv.Client)'s median / this median; seed = seed "
          "001's shared memory / TCP at this size, where it published one; vs raw = TCP "
          "prealloc (raw)'s median / this median")
    print()
    print("| size | path | median | round medians | min | speedup | seed | vs raw |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    raw_times, notes = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for w, h in sizes:
            times, costs = cell(server, w, h, args.warmup, args.rounds, args.captures, tmp)
            raw_times[f"{w}x{h}"] = {"times": times, "server_ms": costs}
            med = {p: statistics.median([t for r in times[p] for t in r]) for p in PATHS}
            for p in PATHS:
                allt = [t for r in times[p] for t in r]
                rounds = " / ".join(f"{statistics.median(r):.3f}" for r in times[p])
                seed = f"{SEED[(w, h)]:.1f}x" if (w, h) in SEED and p.startswith("shm") else ""
                print(f"| {w}x{h} | {p} | {med[p]:.3f} | {rounds} | {min(allt):.3f} "
                      f"| {med[TCP] / med[p]:.1f}x | {seed} | {med[RAW] / med[p]:.1f}x |",
                      flush=True)
            notes.append(f"| {w}x{h} | " + " | ".join(
                f"{costs[k]['median']:.3f} ({costs[k]['mean']:.3f})" for k in NOTE_COSTS) + " |")
    print()
    print("Server ms per frame, median (mean), from vget /unrealcv/status: render (the checksum "
          "included), encoding (BMP, NPY: a header and a copy; PNG: stored deflate, untimed "
          "requests), a lit_shared request's server time (parse to descriptor framed, the send "
          "not included)")
    print()
    print("| size | render | BMP | NPY | PNG | lit_shared request |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in notes:
        print(n)
    if args.json:
        Path(args.json).write_text(json.dumps(raw_times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
