"""A shared-memory side channel for vgi-rpc (https://pypi.org/project/vgi-rpc/) over a
:class:`shmring.Duplex`: a drop-in for ``vgi_rpc.shm.ShmSegment`` in
``vgi_rpc.rpc.ShmPipeTransport``.

vgi-rpc sends a batch through its side channel by writing it into a segment and sending a
zero-row *pointer batch* (offset and length in its metadata) over its pipe; the reader resolves
the pointer to a zero-copy Arrow buffer and frees the region when it releases the batch. Here:

* the **writer** allocates a block in its own arena (its side of the duplex channel owns that
  allocator) and writes the Arrow IPC stream straight into it through a fixed-size writer, so a
  write can never pass the block; the pointer carries the block's *handle*;
* the **reader** views the block read-only and zero-copy by handle (checked against the
  owner's entry table) and, once the last Arrow buffer made from the view is gone (not merely
  when vgi calls ``release()``: a batch still referenced keeps its bytes), tells the owner over
  the duplex channel's other direction;
* the **owner** frees what the peer is done with before each allocation (and waits for such
  notices, up to ``wait`` seconds, when its arena is full); when the peer's side ends, all of
  it.

A batch that finds no room after that wait goes inline over the pipe, as vgi's own segment
does; :attr:`RingSegment.stats` counts batches ``routed`` and ``fallbacks``.

Written against vgi-rpc 0.52 (its IPC helpers are reused so the bytes in a block are exactly
what ``vgi_rpc.shm`` writes and reads).
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
import weakref
from typing import Any

import pyarrow as pa
from pyarrow import ipc

from .duplex import Duplex
from .errors import Aborted, Disconnected, Empty, Full, InvalidHandle, Timeout

__all__ = ["RingSegment", "SegmentPair", "ShmPipeTransport", "transport_pair"]

_DONE = b"D"
_VGI: tuple | None = None


def _vgi() -> tuple:
    """vgi-rpc's IPC helpers (imported once, on first use: vgi-rpc is optional)."""
    global _VGI
    if _VGI is None:
        from vgi_rpc.shm import _STREAM_OVERHEAD, _has_dictionary_columns, _serialize_for_shm
        from vgi_rpc.utils import new_ipc_stream

        _VGI = (_STREAM_OVERHEAD, _has_dictionary_columns, _serialize_for_shm, new_ipc_stream)
    return _VGI


class RingSegment:
    """One side of a vgi-rpc side channel (duck-typed as ``vgi_rpc.shm.ShmSegment``).

    Make a connected pair with :meth:`create` (side ``"a"``) and :meth:`open` (side ``"b"``,
    usually in the other process), or both in one process with :class:`SegmentPair`.
    """

    def __init__(self, duplex: Duplex, name: str, size: int, wait: float = 5.0,
                 keep: int = 2) -> None:
        self._duplex = duplex
        self._name, self._size, self.wait = name, size, wait
        self._lock = threading.Lock()  # guards _pending (finalizers run on any thread)
        self._pending: list[int] = []
        #: Blocks the peer is done with, kept (at most ``keep``) to be written again: a block
        #: reused at once is still in the cache, where the allocator's next-fit search would
        #: hand out the next, cold, stretch of the arena (measured: a 4 MiB write 3x slower).
        self.keep = keep
        self._idle: list = []
        self._lent: dict[int, Any] = {}  # handle -> Block the peer may be viewing
        self._send_lock = threading.Lock()
        self._closed = False
        self.stats = {"routed": 0, "fallbacks": 0, "viewed": 0, "done_sent": 0, "freed": 0, "reused": 0,
                      "bad_notices": 0}

    @classmethod
    def create(cls, size: int = 64 << 20, name: str | None = None, **kw: Any) -> RingSegment:
        """Creates the channel (an arena of `size` bytes per direction) and returns side a."""
        name = name or f"vgi-{uuid.uuid4().hex[:12]}"
        return cls(Duplex.create(name, arena=size, **kw), name, size)

    @classmethod
    def open(cls, name: str, size: int = 0, timeout: float = 5.0) -> RingSegment:
        """Opens side b of the channel `name`."""
        d = Duplex.open(name, timeout=timeout)
        return cls(d, name, size or d.inspect()["peer"]["arena_bytes"])

    # -- what vgi-rpc calls ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def allocate_and_write(self, batch: pa.RecordBatch) -> tuple[int, int] | None:
        """Writes `batch` into a new block of this side's arena: ``(handle, length)``, or
        ``None`` (the batch goes inline) when no room comes within ``wait`` seconds."""
        _STREAM_OVERHEAD, _has_dictionary_columns, _serialize_for_shm, new_ipc_stream = _vgi()
        self._flush()
        if self._duplex.pending:
            self._drain(0)
        if _has_dictionary_columns(batch.schema):
            data = _serialize_for_shm(batch)  # vgi's format: dictionaries + batch, no schema
            block = self._allocate(data.size)
            if block is None:
                return None
            memoryview(block)[: data.size] = memoryview(data).cast("B")
            self.stats["routed"] += 1
            return block.handle, data.size
        block = self._allocate(ipc.get_record_batch_size(batch) + _STREAM_OVERHEAD)
        if block is None:
            return None
        target = pa.py_buffer(block)
        sink = pa.FixedSizeBufferWriter(target)
        try:
            writer = new_ipc_stream(sink, batch.schema)
            writer.write_batch(batch)
            writer.close()
            n = sink.tell()
        except (pa.ArrowException, OSError, ValueError):  # the estimate was short: never past it
            del sink, target
            self._lent.pop(block.handle, None)
            self._duplex.free(block.handle)
            self.stats["fallbacks"] += 1
            return None
        sink.close()
        del sink, target, writer
        self.stats["routed"] += 1
        return block.handle, n

    def read_buffer(self, handle: int, length: int) -> pa.Buffer:
        """A zero-copy, read-only Arrow buffer over the peer's block `handle` (checked)."""
        self._flush()
        view = self._duplex.view(handle, length)
        weakref.finalize(view, self._done, handle)
        self.stats["viewed"] += 1
        return pa.py_buffer(view)

    def free(self, handle: int) -> None:
        """vgi's release of a batch read from the peer: nothing to do here — the owner is
        told once the last buffer over the block is gone (see the module doc)."""

    def reset(self) -> None:
        """vgi calls this between calls on its own segment; blocks here are freed one by one."""

    def close(self) -> None:
        """Ends this side (finished): the peer frees everything it lent us."""
        if not self._closed:
            self._drain(0)
            self._closed = True
            self._duplex.close()
            self._duplex = None  # unmaps the rings once no view is left

    def unlink(self) -> None:
        """Names are removed when the creating side closes."""

    # -- the done notices --------------------------------------------------------------------

    def _done(self, handle: int) -> None:
        """The last buffer over the peer's block `handle` is gone (any thread)."""
        if self._closed:
            return
        with self._lock:
            self._pending.append(handle)
        self._flush()

    def _flush(self) -> None:
        """Sends pending done notices (never blocks; what does not fit waits for the next)."""
        if self._closed or not self._pending or not self._send_lock.acquire(blocking=False):
            return
        try:
            with self._lock:
                take = self._pending[:500]
            if not take:
                return
            try:
                self._duplex.send(_DONE + struct.pack(f"<{len(take)}Q", *take), timeout=0)
            except (Full, Timeout):
                return
            except (Aborted, Disconnected, OSError):
                return
            with self._lock:
                del self._pending[: len(take)]
            self.stats["done_sent"] += len(take)
        finally:
            self._send_lock.release()

    def _drain(self, timeout: float) -> bool:
        """Frees what the peer said it is done with; waits up to `timeout` for a first
        notice. Returns whether anything was freed."""
        freed = False
        while True:
            try:
                msg = self._duplex.recv(timeout=timeout)
            except (Empty, Timeout):
                return freed
            except (Disconnected, Aborted):
                self._idle.clear()
                self._lent.clear()
                return freed  # Duplex freed everything already
            timeout = 0
            if msg[:1] != _DONE or (len(msg) - 1) % 8:
                self.stats["bad_notices"] += 1
                continue
            for (h,) in struct.iter_unpack("<Q", msg[1:]):
                block = self._lent.pop(h, None)
                if block is not None and len(self._idle) < self.keep:
                    self._idle.append(block)
                    self.stats["freed"] += 1
                    freed = True
                    continue
                try:
                    self._duplex.free(h)
                    self.stats["freed"] += 1
                    freed = True
                except (InvalidHandle, BufferError):
                    self.stats["bad_notices"] += 1

    def _allocate(self, n: int):
        """A block of `n` bytes, waiting up to ``wait`` for the peer to give room back."""
        for i in range(len(self._idle) - 1, -1, -1):  # the most recently returned first
            block = self._idle[i]
            if n <= block.nbytes <= 2 * n + (64 << 10):
                del self._idle[i]
                self._lent[block.handle] = block
                self.stats["reused"] += 1
                return block
        end = time.monotonic() + self.wait
        while True:
            try:
                block = self._duplex.allocate(n)
                self._lent[block.handle] = block
                return block
            except Full:
                if self._idle:  # room first from the blocks kept for reuse
                    while self._idle:
                        self._duplex.free(self._idle.pop().handle)
                    continue
                left = end - time.monotonic()
                if left <= 0 or self._duplex.peer_ended or n > self._size:
                    self.stats["fallbacks"] += 1
                    return None
                self._drain(min(left, 0.05))


class SegmentPair:
    """Both sides of one channel in one process (a server thread and a client): pass it where
    vgi-rpc takes a segment and build the two transports with :class:`ShmPipeTransport`, which
    hands the first transport side a and the second side b."""

    def __init__(self, size: int = 64 << 20, **kw: Any) -> None:
        self.a = RingSegment.create(size, **kw)
        self.b = RingSegment.open(self.a.name, size)
        self._sides = [self.a, self.b]

    def take(self) -> RingSegment:
        if not self._sides:
            raise RuntimeError("both sides of this pair are taken")
        return self._sides.pop(0)

    @property
    def name(self) -> str:
        return self.a.name

    @property
    def size(self) -> int:
        return self.a.size

    @property
    def stats(self) -> dict[str, int]:
        return {k: self.a.stats[k] + self.b.stats[k] for k in self.a.stats}

    def close(self) -> None:
        self.b.close()
        self.a.close()

    def unlink(self) -> None:
        pass

    def reset(self) -> None:
        pass


def _transport_class():
    from vgi_rpc.rpc import ShmPipeTransport as _Base

    class ShmPipeTransport(_Base):
        """vgi-rpc's ``ShmPipeTransport`` over a ring side channel: takes a
        :class:`RingSegment`, or a :class:`SegmentPair` (one side per transport)."""

        __slots__ = ()

        def __init__(self, pipe: Any, shm: Any) -> None:
            if isinstance(shm, SegmentPair):
                shm = shm.take()
            super().__init__(pipe, shm)

    return ShmPipeTransport


def __getattr__(attr: str) -> Any:
    if attr == "ShmPipeTransport":  # built on first use: vgi-rpc is an optional dependency
        cls = _transport_class()
        globals()["ShmPipeTransport"] = cls
        return cls
    raise AttributeError(attr)


def transport_pair(size: int = 64 << 20):
    """``(client_transport, server_transport, pair)``: vgi-rpc's in-process pipe pair with
    this side channel (close both transports, then ``pair.close()``)."""
    from vgi_rpc.rpc import make_pipe_pair

    pair = SegmentPair(size)
    client_pipe, server_pipe = make_pipe_pair()
    cls = __getattr__("ShmPipeTransport")
    return cls(client_pipe, pair), cls(server_pipe, pair), pair
