"""The engine frame path as its users run it: the real ``unrealcv`` client (1.3.2, from PyPI,
unchanged) against examples/frame-server, which speaks UnrealCV's protocol over TCP and
publishes every frame it renders in a shmring ring; shared-memory frames read through
``shmring.unrealcv``.

The frame server is built here (libshmring with cargo, the server with CMake) into a temporary
directory, unless SHMRING_FRAME_SERVER names a built one. Skipped, saying why, only where cmake
or a C++ compiler is missing; ci/python.sh installs unrealcv, so these run in CI.
"""

import io
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest

import shmring
from shmring import unrealcv as su

unrealcv = pytest.importorskip("unrealcv", reason="pip install unrealcv==1.3.2")

ROOT = Path(__file__).resolve().parents[2]
W, H = 320, 240
# Slots of 16 MiB: room for a 2048 x 2048 panorama, which the server writes with non-temporal
# stores (render.hpp's kStreamFrom), smaller frames with plain ones.
SLOT_BYTES = 16 << 20


@pytest.fixture(scope="module")
def server_exe(tmp_path_factory):
    exe = os.environ.get("SHMRING_FRAME_SERVER")
    if exe:
        return Path(exe)
    missing = [t for t in ("cmake", "c++") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"building the frame server needs {' and '.join(missing)} "
                    "(apt-get install cmake g++)")
    tmp = tmp_path_factory.mktemp("frame-server")
    env = dict(os.environ)
    # A debug libshmring: CI has built the workspace in debug before this runs.
    subprocess.run(["bash", str(ROOT / "ring-ffi/install.sh"), str(tmp / "prefix")],
                   check=True, env=dict(env, PROFILE="debug"), cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    env["PKG_CONFIG_PATH"] = str(tmp / "prefix/lib/pkgconfig")
    subprocess.run(["cmake", "-S", str(ROOT / "examples/frame-server"), "-B", str(tmp / "build")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(tmp / "build")], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return tmp / "build/frame-server"


@pytest.fixture(scope="module")
def server(server_exe, tmp_path_factory):
    """A running frame server: (ring name, TCP port, save directory)."""
    tmp = tmp_path_factory.mktemp("frames")
    ring = f"pytest-ucv-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([str(server_exe), ring, str(tmp / "fs.sock"), str(W), str(H),
                             "--tcp", "0", "--save-dir", str(tmp),
                             "--slot-bytes", str(SLOT_BYTES)],
                            stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("serving"), f"the frame server did not start: {first!r}"
        yield ring, int(first.rsplit(":", 1)[1]), tmp
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert rc == 0, f"frame-server exited {rc} on SIGTERM"
    assert not Path(f"/dev/shm/shmring.{ring}").exists(), "the ring's name outlived the server"


@pytest.fixture
def client(server):
    c = unrealcv.Client(("127.0.0.1", server[1]))
    assert c.connect(), "the real unrealcv client could not connect"
    yield c
    c.disconnect()


@pytest.fixture
def consumer(server):
    """A latest-only consumer of the server's ring, to see what each request published."""
    ring = shmring.Ring.open(server[0], timeout=5)
    c = ring.consumer("latest")
    yield c
    c.close()
    ring.close()


def stamp(frame_bytes):
    return int.from_bytes(bytes(frame_bytes[:8]), "little")


def lit(n, cam=0, w=W, h=H):
    """Frame n of camera `cam` as render.hpp draws it (BGRA, the stamp in the first 8 bytes)."""
    x = np.arange(w, dtype=np.uint64)[None, :]
    y = np.arange(h, dtype=np.uint64)[:, None]
    f = np.empty((h, w, 4), np.uint8)
    f[..., 0] = (x + n) & 255
    f[..., 1] = (y + n) & 255
    f[..., 2] = (n + 32 * cam) & 255
    f[..., 3] = 255
    f.reshape(-1)[:8] = np.frombuffer(int(n).to_bytes(8, "little"), np.uint8)
    return f


def test_status_and_commands(client, server):
    status = client.request("vget /unrealcv/status")
    assert status.startswith("Is Listening\n"), status
    assert f"Port: {server[1]}\n" in status and f"Width: {W}\nHeight: {H}\n" in status
    assert f"Ring: {server[0]} " in status
    commands = client.request("vget /unrealcv/commands").splitlines()
    assert "vget /camera/[uint]/lit_shared" in commands
    # The client checked the templates on connect: it knows the shared command is served.
    assert client._command_capabilities_available
    with pytest.warns(UserWarning, match="may not support"):  # not in the templates
        assert client.request("vget /camera/0/nonsense").startswith("error ")


def test_bmp_frame_is_the_frame_in_the_ring(client, consumer):
    bmp = client.request("vget /camera/0/lit bmp")
    assert isinstance(bmp, bytes) and bmp[:2] == b"BM"
    assert int.from_bytes(bmp[2:6], "little") == len(bmp) == 54 + W * H * 4
    assert int.from_bytes(bmp[18:22], "little") == W
    assert int.from_bytes(bmp[22:26], "little", signed=True) == -H  # top-down
    pixels = bmp[54:]
    with consumer.pin(timeout=5) as msg:
        assert msg.seq == stamp(pixels), "the BMP is not the newest frame in the ring"
        assert bytes(msg) == pixels
        assert msg.meta == (msg.seq, W << 32 | H)
    assert pixels == lit(stamp(pixels)).tobytes()
    # What the client's own decoder (unrealcv.api.MsgDecoder, OpenCV) makes of it.
    from unrealcv.api import MsgDecoder
    img = MsgDecoder().decode_bmp(bmp)
    assert img.shape == (H, W, 3)
    assert np.array_equal(img[1:], lit(stamp(pixels))[1:, :, :3])


def test_png_and_npy_frames(client, consumer):
    import PIL.Image

    png = client.request("vget /camera/0/lit png")
    rgba = np.asarray(PIL.Image.open(io.BytesIO(png)))
    assert rgba.shape == (H, W, 4)
    with consumer.pin(timeout=5) as msg:
        frame = np.frombuffer(msg, np.uint8).reshape(H, W, 4).copy()
    assert np.array_equal(rgba, frame[..., [2, 1, 0, 3]]), "PNG != the frame in the ring"
    npy = np.load(io.BytesIO(client.request("vget /camera/1/lit npy")))
    assert npy.shape == (H, W, 4) and npy.dtype == np.uint8
    assert np.array_equal(npy, lit(stamp(npy.reshape(-1)), cam=1))


def test_lit_without_a_format_saves_a_file(client, server):
    path = Path(client.request("vget /camera/0/lit"))
    assert path.parent == server[2] and path.suffix == ".png", path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    named = server[2] / "named.bmp"
    assert client.request(f"vget /camera/0/lit {named}") == str(named)
    assert named.read_bytes()[:2] == b"BM"


def test_shared_descriptor(client, server):
    desc = json.loads(client.request("vget /camera/0/lit_shared"))
    # The fields the client's shared-memory read uses, and the ring's own.
    assert desc["name"] == desc["ring"] == server[0]
    assert desc["num_bytes"] == W * H * 4 and desc["shape"] == [H, W, 4]
    assert desc["dtype"] == "uint8" and desc["seq"] == desc["stamp"]
    assert isinstance(desc["sum"], int)
    # The client's own read maps a Windows named section (mmap's tagname), absent on Linux:
    # the reason shmring.unrealcv exists.
    with pytest.raises(TypeError, match="tagname"):
        client.request(unrealcv.SharedCommand("vget /camera/0/lit_shared", "bmp"))


def test_shared_frame_through_shmring(client, server):
    desc = json.loads(client.request("vget /camera/0/lit_shared"))
    frame = su.frame_view(desc)  # joins the ring now: the frame is already published
    reader = su.reader(server[0])
    start, end = reader._ring.address_range()
    assert start <= frame.ctypes.data < end, "not a view of the ring"
    assert not frame.flags.writeable
    assert frame.shape == (H, W, 4) and stamp(frame.reshape(-1)) == desc["stamp"]
    assert su.word_sum(frame) == desc["sum"], "the frame does not match the server's checksum"
    assert np.array_equal(frame, lit(desc["stamp"]))
    # The slot stays pinned while the view lives.
    with pytest.raises(BufferError):
        su.frame_view(json.loads(client.request("vget /camera/0/lit_shared")))
    del frame
    out = np.empty(W * H * 4 + 100, np.uint8)  # reused, larger than a frame
    for _ in range(3):
        desc = json.loads(client.request("vget /camera/0/lit_shared"))
        got = su.recv_into(desc, out)
        assert np.shares_memory(got, out) and got.shape == (H, W, 4)
        assert su.word_sum(got) == desc["sum"] and stamp(out) == desc["stamp"]


def test_a_newer_frame_supersedes(client, server):
    reader = su.Reader(server[0])
    try:
        first = json.loads(client.request("vget /camera/0/lit_shared"))
        second = json.loads(client.request("vget /camera/0/lit_shared"))
        with pytest.raises(su.Superseded):
            reader.frame_view(first)
        # The newer frame was read (and dropped) in finding that out: ask again.
        with pytest.raises(shmring.Timeout):
            reader.frame_view(second, timeout=0.2)
        third = json.loads(client.request("vget /camera/0/lit_shared"))
        frame = reader.frame_view(third)
        assert su.word_sum(frame) == third["sum"] and third["seq"] == second["seq"] + 1
        del frame
    finally:
        reader.close()


def test_panoramic(client):
    bmp = client.request("vget /camera/0/panoramic bmp 256 128")
    assert int.from_bytes(bmp[18:22], "little") == 256
    assert int.from_bytes(bmp[22:26], "little", signed=True) == -128
    desc = json.loads(client.request("vget /camera/0/panoramic_shared 512 256"))
    assert desc["shape"] == [256, 512, 4] and desc["view"] == "panoramic"
    frame = su.frame_view(desc)
    assert su.word_sum(frame) == desc["sum"] and stamp(frame.reshape(-1)) == desc["stamp"]
    del frame
    odd = json.loads(client.request("vget /camera/2/panoramic_shared 333 111"))  # odd width
    frame = su.frame_view(odd)
    assert su.word_sum(frame) == odd["sum"] and frame.shape == (111, 333, 4)
    del frame
    # A frame of the slot's whole 16 MiB, streamed past the cache and fenced before the publish:
    # every byte as the checksum says, and the pattern (B along x, G along y) in two rows.
    big = json.loads(client.request("vget /camera/1/panoramic_shared 2048 2048"))
    frame = su.frame_view(big)
    assert frame.nbytes == SLOT_BYTES and stamp(frame.reshape(-1)) == big["stamp"]
    assert su.word_sum(frame) == big["sum"], "a streamed frame does not match its checksum"
    n, x = big["stamp"], np.arange(2048)
    for y in (1, 2047):
        want = np.stack([(x // 8 + n) & 255, np.full(2048, y // 8), np.full(2048, (n + 32) & 255),
                         np.full(2048, 128)], axis=1).astype(np.uint8)
        assert np.array_equal(frame[y], want), f"row {y} of the streamed panorama"
    del frame
    too_big = client.request("vget /camera/0/panoramic_shared 4096 2048")
    assert too_big.startswith("error ") and "does not fit" in too_big


def test_drop_in_client(server):
    c = su.Client(("127.0.0.1", server[1]))
    assert c.connect()
    try:
        frame = c.request_frame("vget /camera/0/lit_shared")
        assert np.array_equal(frame, lit(stamp(frame.reshape(-1))))
        del frame
        out = np.empty((H, W, 4), np.uint8)
        got = c.request_frame_into("vget /camera/0/lit_shared", out)
        assert np.shares_memory(got, out) and np.array_equal(out, lit(stamp(out.reshape(-1))))
        # The client's shared-memory commands, now served from the ring: the same encodings
        # the base class returns.
        npy = c.request(unrealcv.SharedCommand("vget /camera/0/lit_shared", "npy"))
        arr = np.load(io.BytesIO(npy))
        assert np.array_equal(arr, lit(stamp(arr.reshape(-1))))
        from unrealcv.api import MsgDecoder
        bgr = MsgDecoder().decode_bmp(
            c.request("vget /camera/0/lit_shared", response_format="bmp"))
        assert bgr.shape == (H, W, 3)
        [a, b] = c.request_batch([unrealcv.SharedCommand("vget /camera/0/lit_shared", "npy"),
                                  "vget /unrealcv/version"])
        assert np.load(io.BytesIO(a)).shape == (H, W, 4) and b.startswith("1.1.0")
    finally:
        c.disconnect()
