"""UnrealCV's shared-memory frames on Linux, read from a shmring ring.

An UnrealCV server's ``vget /camera/N/lit_shared`` (and ``panoramic_shared``) answers a JSON
descriptor of a frame it left in shared memory: ``name``, ``num_bytes``, ``shape``, ``dtype``.
The ``unrealcv`` client (1.3.2) then reads it with ``mmap.mmap(-1, n, tagname=name)``, a
Windows-only call, and copies it. A server that publishes its frames in a shmring ring (as
``examples/frame-server`` does) adds the ring's fields to the descriptor (``ring``, ``seq``,
``stamp``, ``sum``), and this module reads the frame from the ring, on Linux:

* :func:`frame_view` — a read-only numpy view of the frame in the ring (zero-copy): the slot
  stays pinned, so the server cannot overwrite it, until the array (and every view of it) is
  gone;
* :func:`recv_into` — a copy into an array the caller reuses, the slot released at once;
* :class:`Client` — ``unrealcv.Client`` with the shared-memory read done here, so
  ``request(SharedCommand(...))`` and ``UnrealCv_API`` work unchanged, plus
  :meth:`Client.request_frame` and :meth:`Client.request_frame_into`;
* :func:`word_sum` — the descriptor's checksum, to check every byte of a frame.

Each ring is read through one latest-only consumer per :class:`Reader` (the module-level
functions share one reader per ring name), so a frame is matched to its descriptor by the
ring's sequence number: a newer frame pinned instead raises :class:`Superseded`.

``unrealcv`` itself is needed only by :class:`Client` (it is imported on first use), so this
module imports without it; numpy is needed.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import numpy as np

from . import _shmring
from .errors import Error, Timeout, TooManyPins

__all__ = [
    "Client", "Reader", "Superseded", "frame_view", "parse", "reader", "recv_into", "word_sum",
]


class Superseded(Error):
    """The ring's newest frame is newer than the descriptor's: another request published a
    frame in between, and a latest-only reader sees only the newest. Ask again."""


def parse(descriptor: str | bytes | dict[str, Any]) -> dict[str, Any]:
    """The descriptor as a dict (JSON text, bytes or a dict); an ``error ...`` answer raises
    ``ValueError`` with the server's message, as the ``unrealcv`` client does."""
    if isinstance(descriptor, dict):
        desc = descriptor
    else:
        text = descriptor.decode("utf-8", "replace") if isinstance(descriptor, bytes) \
            else str(descriptor)
        if text.lstrip().lower().startswith("error"):
            raise ValueError(f"Shared-memory capture failed: {text!r}")
        desc = json.loads(text)
    missing = [k for k in ("name", "num_bytes", "shape", "dtype", "seq") if k not in desc]
    if missing:
        raise ValueError(f"not a shmring frame descriptor (no {', '.join(missing)}): {desc!r}")
    dtype = np.dtype(desc["dtype"])
    # math.prod, not np.prod: this runs once per frame, and np.prod costs ~8 us here.
    if math.prod(int(v) for v in desc["shape"]) * dtype.itemsize != int(desc["num_bytes"]):
        raise ValueError(f"descriptor's shape {desc['shape']} x {dtype} is not its "
                         f"num_bytes {desc['num_bytes']}")
    return desc


def word_sum(frame: Any) -> int:
    """The sum, mod 2**64, of the frame's bytes as little-endian 64-bit words (the last one
    zero-padded): the descriptor's ``sum``. Reads every byte."""
    b = np.frombuffer(memoryview(frame).cast("B"), np.uint8)
    whole = len(b) // 8 * 8
    total = int(b[:whole].view("<u8").sum(dtype=np.uint64)) if whole else 0
    tail = int.from_bytes(b[whole:].tobytes(), "little")
    return (total + tail) % (1 << 64)


class Reader:
    """A latest-only consumer of one ring that reads frames by descriptor.

    A latest-only consumer starts at the newest message present when it joins (ring-core
    fc2baae), so a reader made after the descriptor came still finds that frame."""

    def __init__(self, ring: str, timeout: float = 5.0):
        self.name = ring
        self._ring = _shmring.Ring.open(ring, timeout=timeout)
        # One frame pinned at a time: the next read while a view lives raises BufferError.
        self._consumer = self._ring.consumer("latest", max_pins=1)
        self.frames = 0  # frames read

    def pin(self, descriptor: Any, timeout: float | None = 5.0) -> _shmring.Message:
        """The pinned message the descriptor names (close it, or drop every view of it, to
        release the slot). Raises :class:`Superseded` when a newer frame was published in
        between, ``shmring.Timeout`` when it does not arrive within ``timeout``."""
        return self._pin(parse(descriptor), timeout)

    def _pin(self, desc: dict[str, Any], timeout: float | None) -> _shmring.Message:
        # pin() on a descriptor already parsed (frame_view and recv_into parse it once).
        want = int(desc["seq"])
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                msg = self._consumer.pin(timeout=left)
            except TooManyPins:
                raise BufferError(f"a frame of ring {self.name!r} is still viewed: drop (or "
                                  "copy) it before the next read from this reader") from None
            except Timeout as e:
                raise Timeout(f"frame {want} of ring {self.name!r} did not arrive within "
                              f"{timeout} s") from e
            if msg.seq == want:
                if len(msg) < int(desc["num_bytes"]):
                    msg.close()
                    raise ValueError(f"frame {want} has {len(msg)} bytes, its descriptor "
                                     f"says {desc['num_bytes']}")
                self.frames += 1
                return msg
            seq = msg.seq
            msg.close()
            if seq > want:
                raise Superseded(f"ring {self.name!r} holds frame {seq}, newer than the "
                                 f"descriptor's {want}")

    def frame_view(self, descriptor: Any, timeout: float | None = 5.0) -> np.ndarray:
        """A read-only array of the descriptor's shape and dtype over the frame in the ring.
        The slot stays pinned while the array or any view of it lives: drop it (or copy it)
        before the next read from this reader, which otherwise raises ``BufferError``."""
        desc = parse(descriptor)
        msg = self._pin(desc, timeout)
        dtype = np.dtype(desc["dtype"])
        # The array keeps the message (its buffer's exporter) alive; the message unpins when
        # the last view of it goes.
        view = np.frombuffer(msg, dtype, count=int(desc["num_bytes"]) // dtype.itemsize)
        return view.reshape(tuple(int(v) for v in desc["shape"]))

    def recv_into(self, descriptor: Any, out: np.ndarray,
                  timeout: float | None = 5.0) -> np.ndarray:
        """Copies the frame into ``out`` (any writable C-contiguous array of at least
        ``num_bytes``, reused across frames) and releases the slot; returns ``out``'s first
        ``num_bytes`` as an array of the descriptor's shape and dtype."""
        desc = parse(descriptor)
        n = int(desc["num_bytes"])
        dst = np.frombuffer(memoryview(out).cast("B"), np.uint8)
        if len(dst) < n:
            raise ValueError(f"the buffer has {len(dst)} bytes, the frame {n}")
        if dst.flags.writeable is False:
            raise ValueError("the buffer is read-only")
        msg = self._pin(desc, timeout)
        try:
            src = np.frombuffer(msg, np.uint8, count=n)
            np.copyto(dst[:n], src)  # numpy releases the GIL for the copy
            del src
        finally:
            msg.close()
        dtype = np.dtype(desc["dtype"])
        return dst[:n].view(dtype).reshape(tuple(int(v) for v in desc["shape"]))

    def close(self) -> None:
        """Leaves the ring (raises ``BufferError`` while a frame view is alive)."""
        self._consumer.close()
        self._ring.close()


_readers: dict[str, Reader] = {}
_readers_lock = threading.Lock()


def reader(ring: str, timeout: float = 5.0) -> Reader:
    """The module's reader of ``ring`` (made on first use and kept)."""
    with _readers_lock:
        r = _readers.get(ring)
        if r is None:
            r = _readers[ring] = Reader(ring, timeout)
        return r


def frame_view(descriptor: Any, timeout: float | None = 5.0) -> np.ndarray:
    """:meth:`Reader.frame_view` through the module's reader of the descriptor's ring."""
    desc = parse(descriptor)
    return reader(desc.get("ring", desc["name"])).frame_view(desc, timeout)


def recv_into(descriptor: Any, out: np.ndarray, timeout: float | None = 5.0) -> np.ndarray:
    """:meth:`Reader.recv_into` through the module's reader of the descriptor's ring."""
    desc = parse(descriptor)
    return reader(desc.get("ring", desc["name"])).recv_into(desc, out, timeout)


def _client_class() -> type:
    import unrealcv  # noqa: PLC0415 (optional: only the Client needs it)

    class Client(unrealcv.Client):
        """``unrealcv.Client`` whose shared-memory frames come from the server's shmring ring
        (on Linux; the base class maps a Windows named section). Everything else is the
        base class's: the wire protocol, the ids, the receive thread."""

        def __init__(self, endpoint: Any, type: str = "inet") -> None:  # noqa: A002
            super().__init__(endpoint, type)
            self._readers: dict[str, Reader] = {}

        def _reader(self, desc: dict[str, Any]) -> Reader:
            ring = desc.get("ring", desc["name"])
            r = self._readers.get(ring)
            if r is None:
                r = self._readers[ring] = Reader(ring)
            return r

        def _shared(self, command: str, timeout: float, read: Any) -> Any:
            desc = parse(self._request_without_capability_check(command, timeout=timeout))
            return read(self._reader(desc), desc, timeout)

        def request_frame(self, command: str, timeout: float = 15) -> np.ndarray:
            """Sends a ``..._shared`` command; returns a read-only, zero-copy view of the frame
            in the ring (pinned until the array and its views are gone)."""
            return self._shared(command, timeout, lambda r, d, t: r.frame_view(d, t))

        def request_frame_into(self, command: str, out: np.ndarray,
                               timeout: float = 15) -> np.ndarray:
            """Sends a ``..._shared`` command; copies the frame into ``out`` (reused) and
            returns it shaped as the descriptor says."""
            return self._shared(command, timeout, lambda r, d, t: r.recv_into(d, out, t))

        def request(self, message: Any, timeout: float = 15, response_format: Any = None):
            fmt = response_format if response_format is not None \
                else getattr(message, "response_format", None)
            if timeout >= 0 and fmt is not None and not isinstance(message, list) \
                    and self._is_shared_command(message):
                frame = self._shared(str(message), timeout,
                                     lambda r, d, t: r.frame_view(d, t))
                return self._encode(frame, fmt)
            return super().request(message, timeout, response_format)

        def _decode_shared_response(self, response: Any, output_format: str) -> Any:
            # The base class's staticmethod, as a method: request_batch calls it per answer.
            desc = parse(response)
            return self._encode(self._reader(desc).frame_view(desc, 15), output_format)

        @staticmethod
        def _encode(frame: np.ndarray, output_format: str) -> bytes:
            # What the base class returns for a shared frame: NPY bytes, or the BGRA frame
            # encoded as PNG / its BGR part as BMP, so decoders downstream see no difference.
            import io

            import cv2  # noqa: PLC0415 (unrealcv depends on it)

            if output_format == "npy":
                buf = io.BytesIO()
                np.save(buf, frame, allow_pickle=False)
                return buf.getvalue()
            if frame.ndim != 3 or frame.shape[-1] != 4:
                raise ValueError(f"Expected BGRA shared image, got shape {frame.shape}")
            ext = ".png" if output_format == "png" else ".bmp"
            ok, payload = cv2.imencode(ext, frame if output_format == "png" else frame[:, :, :3])
            if not ok:
                raise ValueError(f"Failed to encode shared image as {output_format}")
            return payload.tobytes()

    return Client


def __getattr__(name: str) -> Any:
    # Client subclasses unrealcv.Client, so it is made when first asked for.
    if name == "Client":
        cls = _client_class()
        globals()["Client"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
