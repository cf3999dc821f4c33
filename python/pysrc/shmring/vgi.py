"""A shared-memory side channel for vgi-rpc (https://pypi.org/project/vgi-rpc/) over a
:class:`shmring.Duplex`: a drop-in for ``vgi_rpc.shm.ShmSegment`` in
``vgi_rpc.rpc.ShmPipeTransport``.

vgi-rpc sends a batch through its side channel by writing it into a segment and sending a
zero-row *pointer batch* (offset and length in its metadata) over its pipe; the reader resolves
the pointer to a zero-copy Arrow buffer and frees the region when it releases the batch. Here:

* the **writer** allocates a block in its own arena (its side of the duplex channel owns that
  allocator) and writes the Arrow IPC stream straight into it (``Block.write`` or a fixed-size
  writer), so a write can never pass the block; the pointer carries the block's *handle*;
* the **reader** views the block read-only and zero-copy by handle (checked against the
  owner's entry table); once the last Arrow buffer made from the view is gone (not merely
  when vgi calls ``release()``: a batch still referenced keeps its bytes) it tells the owner
  over the duplex channel's other direction, a *done* notice;
* a batch that is **sent back unchanged** (an echo, a pass-through: every buffer of it is one
  the reader decoded from a block of the peer's, and the block's stream decodes to exactly it)
  is not copied again: the pointer names the peer's own block (``-1 - handle``), and a
  *reflect* notice, sent before the pointer, tells the owner to keep the block until its own
  view of it is gone too;
* the **owner** counts each block's holders (the peer's view, each reflection, its own views
  of a reflected block) and frees it when the last is gone, before each allocation (waiting for
  notices, up to ``wait`` seconds, when its arena is full); when the peer's side ends, all of
  it. Freed space is written again first (ring-core's allocator moves its rover back on free).

A reader learns that a view is gone without a finalizer: the view records its handle when it
is deallocated (``notify=True``), and the side sends those done notices together, in one
message, at a read or write into the channel once eight of them wait or the blocks they name
add up to 1 MiB or an eighth of the owner's arena, if less (so a request/response of small
batches sends one notice per eight round trips, not two per round trip). A view of a quarter
of the peer's arena or more has a finalizer instead that sends its notice (and any waiting) at
once, so the owner can write a batch up to its whole arena again as soon as the reader is done
with the last one.

A batch that finds no room after that wait goes inline over the pipe, as vgi's own segment
does; :attr:`RingSegment.stats` counts batches ``routed``, ``reflected`` and ``fallbacks``.

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

_DONE = b"D"  # the peer is done with these blocks of ours
# The peer sends the first block named back (its pointer follows on vgi's pipe) and is done
# with the others (the done notices that waited go with a reflect notice, one message).
_REFLECT = b"R"
_MAX_NOTICE = 500  # handles per notice (a 4 KiB slot)
# Done notices wait to go together: a side sends them (on a read or a write) once this many
# wait, or once the blocks they free add up to _FLUSH_BYTES (or _FLUSH_FRACTION of the peer's
# arena, if less), so a request/response pair of small batches costs one notice message per
# few round trips instead of one per direction per round trip. What waits is less than that
# fraction of the owner's arena, so an owner short of room waits only on views still alive.
# The byte bound keeps an owner writing into a few recently freed, cache-warm blocks: with
# 1/8 of a 64 MiB arena waiting, 1-2 MiB batches went round eight blocks, 10-15% slower.
_FLUSH_COUNT = 8
_FLUSH_BYTES = 1 << 20
_FLUSH_FRACTION = 8  # 1/8 of the peer's arena
# Smallest batch (bytes of its buffers) checked for reflection: below it the check (decoding the
# peer's block once more, about 20 µs) costs more than the copy it could save (measured, one
# thread: 256 KiB 69 µs per echo copied against 76 µs reflected, 512 KiB 94 against 88 µs).
_REFLECT_MIN_BYTES = 512 << 10
# Largest batch (bytes of its buffers) written as its cached stream header, ``serialize()``'s
# message and the end-of-stream marker instead of through a stream writer: the same bytes,
# without a writer's setup (measured: 4.7 against 7.9 µs at 1 KiB, 6 against 16 µs at 64 KiB,
# even at 256 KiB, where the serialized copy starts to cost what the setup saves).
_SERIALIZE_MAX = 128 << 10
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an IPC stream's end: continuation, length 0
_VGI: tuple | None = None


def _vgi() -> tuple:
    """vgi-rpc's IPC helpers (imported once, on first use: vgi-rpc is optional)."""
    global _VGI
    if _VGI is None:
        from vgi_rpc.shm import _STREAM_OVERHEAD, _has_dictionary_columns, _serialize_for_shm
        from vgi_rpc.utils import IPC_WRITE_OPTIONS, new_ipc_stream

        _VGI = (_STREAM_OVERHEAD, _has_dictionary_columns, _serialize_for_shm, new_ipc_stream,
                IPC_WRITE_OPTIONS is not None)
    return _VGI


def _first_batch(buf: pa.Buffer, head: bytes, schema: pa.Schema) -> pa.RecordBatch | None:
    """The first batch of the IPC stream `buf` (zero-copy), or None when the stream's schema is
    not `schema` (metadata included). When the stream starts with `head`, the stream header
    of `schema`, the batch message after it is decoded with `schema` directly (a fifth of what
    opening a stream reader costs); otherwise the stream is opened and its schema compared."""
    n = len(head)
    if n and buf.size > n and buf.slice(0, n).equals(pa.py_buffer(head)):
        reader = pa.BufferReader(buf)
        reader.seek(n)
        return ipc.read_record_batch(ipc.read_message(reader), schema)
    back = ipc.open_stream(buf).read_next_batch()
    return back if back.schema.equals(schema, check_metadata=True) else None


def _layout(batch: pa.RecordBatch) -> list:
    """Every column's offset and length and its buffers' addresses and sizes."""
    return [(c.offset, len(c), [(b.address, b.size) if b is not None else None
                                for b in c.buffers()]) for c in batch.columns]


class _BlockSink:
    """Where a side's kept stream writer writes: pyarrow calls ``write`` with each piece of a
    batch's message (small ``bytes``, the body's buffers as zero-copy ``pa.Buffer``), which go
    into the current block at ``pos`` through ``Block.write``, or nowhere while ``block`` is
    None (a new writer's schema message)."""

    __slots__ = ("block", "pos")
    closed = False

    def __init__(self) -> None:
        self.block: Any = None
        self.pos = 0

    def write(self, data: Any) -> int:
        n = data.size if isinstance(data, pa.Buffer) else len(data)
        if self.block is not None:
            self.pos = self.block.write(self.pos, data)
        return n

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        pass


class RingSegment:
    """One side of a vgi-rpc side channel (duck-typed as ``vgi_rpc.shm.ShmSegment``).

    Make a connected pair with :meth:`create` (side ``"a"``) and :meth:`open` (side ``"b"``,
    usually in the other process), or both in one process with :class:`SegmentPair`.
    """

    def __init__(self, duplex: Duplex, name: str, size: int, wait: float = 5.0) -> None:
        self._duplex = duplex
        self._name, self._size, self.wait = name, size, wait
        self._peer_size = duplex.inspect()["peer"]["arena_bytes"]
        self._flush_bytes = max(1, min(_FLUSH_BYTES, self._peer_size // _FLUSH_FRACTION))
        # The duplex channel's endpoints, called directly on the per-batch path (each call
        # through Duplex costs a Python frame): the peer's allocations (views), this side's
        # allocator and the incoming ring's consumer (whether notices wait).
        self._peer_allocs = duplex._peer_allocations
        self._own_allocs = duplex._allocator
        self._consumer = duplex._consumer
        self._lock = threading.Lock()  # guards _pending (finalizers run on any thread)
        self._pending: list[int] = []  # done notices not sent yet
        self._pending_bytes = 0  # the bytes of the peer's blocks they name
        self._holds: dict[int, int] = {}  # own block handle -> holders (see the module doc)
        self._views: dict[int, int] = {}  # peer handle -> length of our live view of it
        # peer handle -> weakref to our live view of it, for views the reflection check
        # looks at (from _REFLECT_MIN_BYTES)
        self._reflectable: dict[int, Any] = {}
        self._send_lock = threading.Lock()
        self._closed = False
        # The last schema written without dictionaries and its stream header (schema message).
        self._schema: pa.Schema | None = None
        self._head = b""
        # That schema's stream writer for larger batches (_write_large) and where it writes.
        self._writer: Any = None
        self._sink = _BlockSink()
        self._write_lock = threading.Lock()  # one thread at a time uses them
        self.stats = {"routed": 0, "reflected": 0, "fallbacks": 0, "viewed": 0, "done_sent": 0,
                      "freed": 0, "bad_notices": 0}

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
        ``None`` (the batch goes inline) when no room comes within ``wait`` seconds. A batch
        decoded unchanged from a block of the peer's goes back as ``(-1 - handle, length)``."""
        if self._closed:
            raise Disconnected("this side of the channel is closed")
        _STREAM_OVERHEAD, _, _serialize_for_shm, new_ipc_stream, standard = _vgi()
        head = self._header(batch.schema)
        # Buffer bytes, slices counted whole: only the thresholds below read it (a fifth of
        # a microsecond, where ``batch.nbytes`` takes two).
        size = batch.get_total_buffer_size() if head is not None else 0
        # A batch that may go back as the peer's block keeps the done notices that are due
        # for its reflect notice (one message instead of two), sent below if it is copied.
        reflecting = size >= _REFLECT_MIN_BYTES
        self._service(hold=reflecting)
        if head is None:
            data = _serialize_for_shm(batch)  # vgi's format: dictionaries + batch, no schema
            block = self._allocate(data.size)
            if block is None:
                return None
            memoryview(block)[: data.size] = memoryview(data).cast("B")
            self.stats["routed"] += 1
            return block.handle, data.size
        if reflecting:
            back = self._reflect(batch, head, size)
            if back is not None:
                return back
            if self._due():
                self._flush()
        if head and standard:
            if size <= _SERIALIZE_MAX:
                return self._write_small(batch, head)
            if self._write_lock.acquire(blocking=False):  # else another thread writes: below
                try:
                    return self._write_large(batch, head)
                finally:
                    self._write_lock.release()
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
            self._give_back(block)
            return None
        sink.close()
        del sink, target, writer
        self.stats["routed"] += 1
        return block.handle, n

    def _give_back(self, block: Any) -> None:
        """Frees a block this side allocated but could not write (the batch goes inline)."""
        self._holds.pop(block.handle, None)
        self._own_allocs.free(block.handle)
        self.stats["fallbacks"] += 1

    def _header(self, schema: pa.Schema) -> bytes | None:
        """The IPC stream header (the schema message) of `schema`, or None when it has a
        dictionary column (vgi's own format then). Kept for the last schema: comparing it is
        a twentieth of what looking at every field again costs."""
        if self._schema is not None and schema.equals(self._schema, check_metadata=True):
            return self._head
        _, has_dictionary_columns, _, new_ipc_stream, _ = _vgi()
        if has_dictionary_columns(schema):
            return None
        sink = pa.BufferOutputStream()
        new_ipc_stream(sink, schema).close()
        head = sink.getvalue().to_pybytes()
        # b"" (no copy of a serialized message) unless the stream ends as _write_small's does.
        self._schema, self._head = schema, head[: -len(_EOS)] if head.endswith(_EOS) else b""
        self._writer = None
        return self._head

    def _write_small(self, batch: pa.RecordBatch, head: bytes) -> tuple[int, int] | None:
        """A small batch's stream (header, message, end marker) copied into a block of
        exactly its size: what a stream writer would write (a test compares them)."""
        body = batch.serialize()
        start, end = len(head), len(head) + body.size
        block = self._allocate(end + len(_EOS))
        if block is None:
            return None
        m = memoryview(block)
        m[:start] = head
        m[start:end] = memoryview(body).cast("B")
        m[end:] = _EOS
        m.release()
        self.stats["routed"] += 1
        return block.handle, end + len(_EOS)

    def _write_large(self, batch: pa.RecordBatch, head: bytes) -> tuple[int, int] | None:
        """A larger batch's stream (header, message, end marker) written into a block of
        exactly its size: the message by this side's stream writer for the schema, kept from
        batch to batch (a new writer's setup costs as much as copying 256 KiB), whose every
        piece goes straight into the block through ``Block.write`` (bounded: a piece past the
        block's end raises and the batch goes inline; from 4 MiB a non-temporal copy)."""
        block = self._allocate(len(head) + ipc.get_record_batch_size(batch) + len(_EOS))
        if block is None:
            return None
        sink = self._sink
        try:
            writer = self._writer
            if writer is None:
                sink.block = None  # the new writer's schema message and empty batch go nowhere
                writer = _vgi()[3](pa.PythonFile(sink, mode="w"), batch.schema)
                writer.write_batch(batch.slice(0, 0))
                self._writer = writer
            sink.block, sink.pos = block, block.write(0, head)
            writer.write_batch(batch)
            n = block.write(sink.pos, _EOS)
        except (pa.ArrowException, OSError, ValueError, BufferError):
            self._writer = None  # a writer stopped mid-message is not used again
            sink.block = None
            self._give_back(block)
            return None
        sink.block = None
        self.stats["routed"] += 1
        return block.handle, n

    def read_buffer(self, handle: int, length: int) -> pa.Buffer:
        """A zero-copy, read-only Arrow buffer over the peer's block `handle` (checked), or
        over this side's own block ``-1 - handle`` that the peer sent back.

        It waits for nothing and mostly calls nothing that lets the GIL go: the other thread
        of an in-process pair is finishing its turn now, and would take the GIL over (a
        round trip of thread switches). Done notices go once enough wait (``_collect``)."""
        if self._closed:
            raise Disconnected("this side of the channel is closed")
        if self._collect():
            self._flush()
        if handle < 0:
            own = -1 - handle
            if own not in self._holds:  # not a block of ours the peer holds: forged or stale
                raise InvalidHandle(f"the peer sent back {own:#x}, which it does not hold")
            return pa.py_buffer(self._own_allocs.view(own, length, True))
        prompt = 4 * length >= self._peer_size
        view = self._peer_allocs.view(handle, length, not prompt)
        if prompt:
            weakref.finalize(view, self._done_now, handle)
        else:
            self._views[handle] = length
        if length >= _REFLECT_MIN_BYTES:
            self._reflectable[handle] = weakref.ref(view)
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
            self._service(flush=True)
            self._closed = True
            self._duplex.close()
            # Unmaps the rings once no view is left (the endpoints keep their mappings).
            self._duplex = self._peer_allocs = self._own_allocs = self._consumer = None

    def unlink(self) -> None:
        """Names are removed when the creating side closes."""

    # -- notices -----------------------------------------------------------------------------

    def _collect(self) -> bool:
        """Queues the done notices of this side's views of the peer's blocks that are gone;
        returns whether enough wait to be sent (see ``_FLUSH_COUNT``)."""
        peer = self._peer_allocs.take_released()
        if peer:
            views, reflectable, n = self._views, self._reflectable, 0
            for h in peer:
                n += views.pop(h, 0)
                reflectable.pop(h, None)
            with self._lock:
                self._pending.extend(peer)
                self._pending_bytes += n
        return self._due()

    def _due(self) -> bool:
        """Whether enough done notices wait to be sent."""
        return len(self._pending) >= _FLUSH_COUNT or self._pending_bytes >= self._flush_bytes

    def _service(self, flush: bool = False, hold: bool = False) -> None:
        """Sends the done notices of views that are gone once enough wait (all of them with
        `flush`; none with `hold`: the caller sends them), handles the peer's notices, then
        counts this side's own views of reflected blocks that are gone (after the peer's
        notices: the reflect notice of a block always comes before the pointer that let this
        side view it, so it is counted first)."""
        if self._closed:
            return
        if ((self._collect() and not hold) or flush) and self._pending:
            self._flush()
        if self._consumer.pending:
            self._drain(0)
        if self._closed:  # the peer ended while draining
            return
        for h in self._own_allocs.take_released():
            self._unhold(h)

    def _done_now(self, handle: int) -> None:
        """The finalizer of a large view: its notice (and any waiting) goes at once (any
        thread)."""
        if self._closed:
            return
        self._reflectable.pop(handle, None)
        with self._lock:
            self._pending.append(handle)
        self._flush()

    def _send(self, kind: bytes, handles: list[int]) -> bool:
        """One notice; False when it does not fit the ring now (never blocks)."""
        try:
            self._duplex.send(kind + struct.pack(f"<{len(handles)}Q", *handles), timeout=0)
            return True
        except (Full, Timeout, Aborted, Disconnected, OSError):
            return False

    def _flush(self) -> None:
        """Sends pending done notices (never blocks; what does not fit waits for the next)."""
        if self._closed or not self._pending or not self._send_lock.acquire(blocking=False):
            return
        try:
            while True:
                with self._lock:
                    take = self._pending[:_MAX_NOTICE]
                if not take or not self._send(_DONE, take):
                    return
                with self._lock:
                    del self._pending[: len(take)]
                    if not self._pending:
                        self._pending_bytes = 0
                self.stats["done_sent"] += len(take)
        finally:
            self._send_lock.release()

    def _reflect(self, batch: pa.RecordBatch, head: bytes, size: int) -> tuple[int, int] | None:
        """``(-1 - handle, length)`` when `batch` is exactly what the peer's block `handle`
        decodes to (the reflect notice sent), else None. `head` is the stream header of the
        batch's schema (``_header``), `size` its buffers' bytes."""
        if (not self._reflectable or batch.num_rows == 0 or batch.num_columns == 0
                or size < _REFLECT_MIN_BYTES):
            return None
        mine = _layout(batch)
        first = next((b for _, _, bufs in mine for b in bufs if b is not None), None)
        if first is None:
            return None
        for handle, ref in reversed(list(self._reflectable.items())):  # newest first
            view = ref()
            if view is None:
                continue
            buf = pa.py_buffer(view)
            if not buf.address <= first[0] < buf.address + buf.size:
                continue
            try:
                back = _first_batch(buf, head, batch.schema)
            except (pa.ArrowException, OSError, ValueError, StopIteration):
                return None
            if back is None or back.num_rows != batch.num_rows or _layout(back) != mine:
                return None
            with self._send_lock:
                with self._lock:
                    done = self._pending[: _MAX_NOTICE - 1]
                if not self._send(_REFLECT, [handle, *done]):
                    return None
                if done:
                    with self._lock:
                        del self._pending[: len(done)]
                        if not self._pending:
                            self._pending_bytes = 0
                    self.stats["done_sent"] += len(done)
            self.stats["reflected"] += 1
            return -1 - handle, buf.size
        return None

    def _unhold(self, handle: int) -> bool:
        """One holder of own block `handle` is gone; frees it with the last. Returns whether
        it was freed."""
        n = self._holds.get(handle)
        if n is None:
            self.stats["bad_notices"] += 1
            return False
        if n > 1:
            self._holds[handle] = n - 1
            return False
        del self._holds[handle]
        try:
            self._own_allocs.free(handle)
        except (InvalidHandle, BufferError):
            self.stats["bad_notices"] += 1
            return False
        self.stats["freed"] += 1
        return True

    def _drain(self, timeout: float) -> bool:
        """Handles the peer's notices; waits up to `timeout` for a first one. Returns whether
        anything was freed."""
        freed = False
        while True:
            if timeout == 0 and not self._consumer.pending:
                return freed
            try:
                msg = self._duplex.recv(timeout=timeout)
            except (Empty, Timeout):
                return freed
            except (Disconnected, Aborted):
                self._holds.clear()
                return freed  # Duplex freed everything already (its consumer stays open)
            timeout = 0
            kind = msg[:1]
            if kind not in (_DONE, _REFLECT) or (len(msg) - 1) % 8:
                self.stats["bad_notices"] += 1
                continue
            for i, (h,) in enumerate(struct.iter_unpack("<Q", msg[1:])):
                if kind == _DONE or i:
                    freed |= self._unhold(h)
                elif h in self._holds:
                    self._holds[h] += 1
                else:
                    self.stats["bad_notices"] += 1

    def _allocate(self, n: int):
        """A block of `n` bytes, waiting up to ``wait`` for the peer to give room back."""
        end = time.monotonic() + self.wait
        while True:
            try:
                block = self._own_allocs.allocate(n)
                self._holds[block.handle] = 1  # the peer's view
                return block
            except Full:
                left = end - time.monotonic()
                if left <= 0 or self._duplex.peer_ended or n > self._size:
                    self.stats["fallbacks"] += 1
                    return None
                self._drain(min(left, 0.05))
                self._service()


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
