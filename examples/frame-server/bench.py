"""The frame-grabber benchmark: request -> every byte usable, per transport and frame size.

One C++ frame server (frame_server.cpp) renders stamped BGRA frames into a pin-only ring and
also serves them as BMP files. Six clients capture frames from it:

  shm zero-copy (py)  Python: "latest" on the Unix socket -> JSON descriptor -> Consumer.pin()
                      -> np.frombuffer(message, uint64) (a view of the slot)
  shm copy (py recv)  Python: the same, but Consumer.recv() (the package's copying read: a new
                      bytes object each time) -> np.frombuffer(bytes, uint64)
  shm copy (py copyto) Python: pin -> np.copyto(a preallocated uint64 array, the view) ->
                      release the pin (a copying reader that reuses its buffer)
  ringctl (rust)      `ringctl grab`: "latest" -> descriptor -> pin (latest-only) -> &[u8]
  BMP over TCP        Python: "bmp" on a loopback TCP connection -> 54-byte header ->
                      recv_into a preallocated uint64 array until the file size is read
  BMP over Unix       the same over a Unix stream socket

Every client does the same two steps after its transport: "usable" = the frame's bytes are in
hand (pinned, copied or received) and the frame number stamped in its first 8 bytes matches
the descriptor (or the BMP answer to a request made right after that frame was rendered);
"summed" = additionally every byte has been read: the sum (mod 2^64) of the frame as 64-bit
little-endian words (numpy .sum() in Python, a Rust fold in ringctl), which the driver compares
with the sum the server computed when it rendered the frame. A capture whose stamp or sum is
wrong aborts the run. The clock runs in the client: from just before the request is sent to
the end of the step.

Each capture of each transport gets a new frame, rendered by an untimed "frame" request just
before it; the BMP encoding is prepared at render time (so the TCP and Unix paths are timed
without an encoding step). Per cell: --warmup captures, then --captures measured ones; the
transports take turns capture by capture (their order rotates every round).

    python -m venv venv && venv/bin/pip install ./python numpy
    venv/bin/python examples/frame-server/bench.py            # builds the server and ringctl
    venv/bin/python examples/frame-server/bench.py --quick    # one size, few captures (CI)
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import shmring

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(640, 480), (1280, 720), (1920, 1080), (2560, 1440), (3840, 2160), (7680, 4320)]
BMP_HEADER = 54
TIMEOUT = 30.0
TRANSPORTS = ["shm zero-copy (py)", "shm copy (py recv)", "shm copy (py copyto)",
              "ringctl (rust)", "BMP over TCP", "BMP over Unix"]


def build(target):
    """Builds libshmring + the frame server (CMake, via the installed pkg-config file) and
    ringctl, in release mode; returns (server, ringctl) paths."""
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
    subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "ringctl"], check=True,
                   env=env, cwd=ROOT)
    return build_dir / "frame-server", target / "release" / "ringctl"


class LineSocket:
    """A connected stream socket with line reads."""

    def __init__(self, sock):
        self.sock = sock
        self.sock.settimeout(TIMEOUT)
        self.buf = b""

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the frame server closed the connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def ask(self, request):
        self.sock.sendall(request)
        return json.loads(self.line())


def recv_exactly(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the frame server closed the connection mid-frame")
        got += n


class Bmp:
    """A BMP client: one request, the header, then the pixels into a preallocated array."""

    def __init__(self, sock, w, h):
        self.sock = sock
        self.sock.settimeout(TIMEOUT)
        self.header = bytearray(BMP_HEADER)
        self.pixels = np.empty(w * h * 4 // 8, np.uint64)
        self.w, self.h = w, h

    def capture(self, seq, clock):
        t0 = clock()
        self.sock.sendall(b"bmp\n")
        recv_exactly(self.sock, memoryview(self.header))
        size = int.from_bytes(self.header[2:6], "little")
        w = int.from_bytes(self.header[18:22], "little")
        h = -int.from_bytes(self.header[22:26], "little", signed=True)
        if self.header[:2] != b"BM" or (w, h) != (self.w, self.h) or \
                size != BMP_HEADER + self.pixels.nbytes:
            raise ValueError(f"unexpected BMP header {bytes(self.header)!r}")
        recv_exactly(self.sock, memoryview(self.pixels).cast("B"))
        if int(self.pixels[0]) != seq:
            raise ValueError(f"BMP stamped {int(self.pixels[0])}, wanted {seq}")
        t1 = clock()
        total = int(self.pixels.sum())
        t2 = clock()
        return seq, total, t1 - t0, t2 - t0, None


class Shm:
    """The Python package's clients: "pin" (a zero-copy view of the slot), "recv" (the
    package's copying read, a new bytes object each time) or "copyto" (pin, copy into a
    preallocated array, release)."""

    def __init__(self, ring, desc, how, w, h):
        self.consumer = ring.consumer("latest")
        self.desc = desc
        self.how = how
        self.buf = np.empty(w * h * 4 // 8, np.uint64) if how == "copyto" else None

    def capture(self, _seq, clock):
        t0 = clock()
        seq = self.desc.ask(b"latest\n")["seq"]
        td = clock()
        msg = None
        if self.how == "recv":
            data = self.consumer.recv(timeout=TIMEOUT)  # pins, copies into bytes, releases
            words = np.frombuffer(data, np.uint64)
        else:
            msg = self.consumer.pin(timeout=TIMEOUT)
            if msg.seq != seq:
                raise ValueError(f"asked for frame {seq}, pinned message {msg.seq}")
            words = np.frombuffer(msg, np.uint64)  # a view of the slot: no copy
            if self.how == "copyto":
                np.copyto(self.buf, words)
                del words
                msg.close()  # release the pin: the copy is ours
                msg, words = None, self.buf
        if int(words[0]) != seq:
            raise ValueError(f"asked for frame {seq}, read a frame stamped {int(words[0])}")
        t1 = clock()
        total = int(words.sum())
        t2 = clock()
        del words
        if msg is not None:
            msg.close()  # release the pin (the view above is gone)
        return seq, total, t1 - t0, t2 - t0, td - t0


class Ringctl:
    """`ringctl grab`, one capture per line written to its stdin (its own clock)."""

    def __init__(self, exe, name, path):
        self.proc = subprocess.Popen([str(exe), "grab", name, "--socket", str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if json.loads(self.proc.stdout.readline()) != {"ready": True}:
            raise RuntimeError("ringctl grab did not start")

    def capture(self, _seq, _clock):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"ringctl grab ended ({self.proc.wait()})")
        r = json.loads(line)
        return r["seq"], r["sum"], r["usable_ns"], r["summed_ns"], r["descriptor_ns"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT)


def cell(server, ringctl, w, h, warmup, captures, tmp):
    name = f"fsbench-{os.getpid()}-{w}x{h}"
    path = Path(tmp) / "frames.sock"
    proc = subprocess.Popen([str(server), name, str(path), str(w), str(h), "--tcp", "0"],
                            stdout=subprocess.PIPE, text=True)
    clients = {}
    try:
        first = proc.stdout.readline()
        if not first.startswith("serving"):
            raise RuntimeError(f"the frame server did not start: {first!r}")
        port = int(first.rsplit(":", 1)[1])

        def unix():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(path))
            return s

        ctl = LineSocket(unix())
        ring = shmring.Ring.open(name, timeout=TIMEOUT)
        tcp = socket.create_connection(("127.0.0.1", port))
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        clients = {
            "shm zero-copy (py)": Shm(ring, LineSocket(unix()), "pin", w, h),
            "shm copy (py recv)": Shm(ring, LineSocket(unix()), "recv", w, h),
            "shm copy (py copyto)": Shm(ring, LineSocket(unix()), "copyto", w, h),
            "ringctl (rust)": Ringctl(ringctl, name, path),
            "BMP over TCP": Bmp(tcp, w, h),
            "BMP over Unix": Bmp(unix(), w, h),
        }
        times = {t: ([], [], []) for t in TRANSPORTS}
        clock = time.perf_counter_ns
        for r in range(warmup + captures):
            k = r % len(TRANSPORTS)
            for t in TRANSPORTS[k:] + TRANSPORTS[:k]:
                want = ctl.ask(b"frame\n")  # untimed: render the next frame
                seq, total, usable, summed, desc = clients[t].capture(want["seq"], clock)
                if (seq, total) != (want["seq"], want["sum"]):
                    raise ValueError(f"{t}: frame {seq} sum {total}, the server rendered "
                                     f"frame {want['seq']} with sum {want['sum']}")
                if r >= warmup:
                    times[t][0].append(usable / 1e6)
                    times[t][1].append(summed / 1e6)
                    if desc is not None:
                        times[t][2].append(desc / 1e6)
        # A floor for the "summed" column: numpy's sum of a frame already in hand (the last
        # one the TCP client received), as often as a cell measures.
        pixels = clients["BMP over TCP"].pixels
        floor = []
        for _ in range(captures):
            t0 = clock()
            pixels.sum()
            floor.append((clock() - t0) / 1e6)
        times["numpy sum of a frame in hand"] = (floor, floor, [])
        ctl.ask(b"quit\n")
        proc.wait(timeout=TIMEOUT)
        return times
    finally:
        if "ringctl (rust)" in clients:
            clients["ringctl (rust)"].close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", help="WxH,WxH,... (default: 640x480 up to 7680x4320)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--captures", type=int, default=60)
    ap.add_argument("--quick", action="store_true",
                    help="2 warm-up and 5 measured captures, 640x480 unless --sizes (a smoke test)")
    ap.add_argument("--server", help="a built frame-server (default: build it)")
    ap.add_argument("--ringctl", help="a built ringctl (default: build it)")
    ap.add_argument("--json", help="also write the raw times (ms) to this file")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.warmup, args.captures = args.sizes or "640x480", 2, 5
    args.sizes = args.sizes or ",".join(f"{w}x{h}" for w, h in SIZES)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    if args.server is None or args.ringctl is None:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")).resolve()
        server, ringctl = build(target)
    server = Path(args.server) if args.server else server
    ringctl = Path(args.ringctl) if args.ringctl else ringctl

    print(f"frame grabber: {args.warmup} warm-up + {args.captures} measured captures per cell, "
          "transports alternated; ms per capture (request -> bytes in hand and stamp checked "
          "| -> every byte summed); ratio = BMP over TCP's median / this median")
    print()
    print("| size | transport | usable median | usable min | summed median | summed min "
          "| vs TCP (usable) | vs TCP (summed) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    raw = {}
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        for w, h in sizes:
            times = cell(server, ringctl, w, h, args.warmup, args.captures, tmp)
            raw[f"{w}x{h}"] = times
            tcp_u = statistics.median(times["BMP over TCP"][0])
            tcp_s = statistics.median(times["BMP over TCP"][1])
            for t in TRANSPORTS:
                u, s, _ = times[t]
                mu, ms = statistics.median(u), statistics.median(s)
                print(f"| {w}x{h} | {t} | {mu:.3f} | {min(u):.3f} | {ms:.3f} | {min(s):.3f} "
                      f"| {tcp_u / mu:.1f}x | {tcp_s / ms:.1f}x |", flush=True)
            floor = times["numpy sum of a frame in hand"][0]
            print(f"| {w}x{h} | (floor) numpy sum of a frame in hand | | | "
                  f"{statistics.median(floor):.3f} | {min(floor):.3f} | | "
                  f"{tcp_s / statistics.median(floor):.1f}x |", flush=True)
            desc = {t: statistics.median(times[t][2]) for t in TRANSPORTS if times[t][2]}
            notes.append(f"{w}x{h}: descriptor round trip (\"latest\" -> JSON) median " +
                         ", ".join(f"{t} {d:.3f} ms" for t, d in desc.items()))
    print()
    for n in notes:
        print(n)
    if args.json:
        Path(args.json).write_text(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
