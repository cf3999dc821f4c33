"""A ``multiprocessing.Queue``-shaped queue over one ring: :func:`create_pair`.

Objects are pickled with protocol 5; out-of-band buffers (numpy arrays, ``bytes``,
``PickleBuffer``) are written straight into the ring's slots in place (the ring is pin-only,
so the sender claims slots and fills them, no staging copy). A message larger than one slot
spans several consecutive slots. The receiver reads by pinning: ``get()`` copies the message
out once; ``get(zero_copy=True)`` returns objects whose buffers *view the slot* (read-only)
when the message fits in one slot — those views must be dropped before the next ``get``
(which otherwise raises ``BufferError``).

Endpoints pickle by name and reattach on unpickling, so they can be passed to spawned
workers. A ``Receiver`` *moves* when pickled: the original stops reading (it leaves the ring)
and the unpickled copy registers, so the sender never waits for a reader that is gone. The
sender waits (within ``put``'s timeout) until a receiver is registered before its first
message goes out, so nothing is published to nobody.
"""

from __future__ import annotations

import os
import pickle
import struct
import time
import uuid
from typing import Any

from . import errors
from ._shmring import Ring

__all__ = ["create_pair", "Sender", "Receiver"]

_MAGIC = b"SRQ1"
# magic, number of buffers, pickle length, total stream length; then one u64 per buffer.
_HEAD = struct.Struct("<4sIQQ")
_ALIGN = 64


def _pad(n: int) -> int:
    return (-n) % _ALIGN


def _layout(pickle_len: int, lens: list[int]) -> tuple[int, list[int], int]:
    """Header length, buffer offsets and total length of one message."""
    head = _HEAD.size + 8 * len(lens)
    off = head + pickle_len
    offsets = []
    for n in lens:
        off += _pad(off)
        offsets.append(off)
        off += n
    return head, offsets, off


def _deadline(block: bool, timeout: float | None) -> float | None:
    if not block:
        return 0.0
    if timeout is None:
        return None
    if timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")
    return time.monotonic() + timeout


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def create_pair(capacity: int = 8, *, max_message: int = 1 << 20, name: str | None = None,
                ctx: Any = None) -> tuple[Sender, Receiver]:
    """Creates a queue: ``capacity`` slots of ``max_message`` bytes each (a larger message
    spans several slots). Returns ``(sender, receiver)``. ``ctx`` is accepted for
    ``multiprocessing`` compatibility and unused: endpoints pickle to any start method."""
    del ctx
    if not isinstance(capacity, int) or capacity < 1:
        raise ValueError("capacity must be a positive int")
    name = name or f"q-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    ring = Ring.create(name, slots=capacity, slot_size=max_message, consumers=4, pin_only=True)
    return Sender(ring), Receiver(ring)


class Sender:
    """The writing end: ``put``, ``put_nowait``, ``wait_for_all_ack``, ``close``."""

    def __init__(self, ring: Ring) -> None:
        self._ring = ring
        self._producer = None
        self._closed = False

    def _ensure(self):
        if self._closed:
            raise errors.Closed("this sender is closed")
        if self._producer is None:
            self._producer = self._ring.producer()
        return self._producer

    def put(self, obj: Any, block: bool = True, timeout: float | None = None) -> None:
        """Puts ``obj``; waits up to ``timeout`` while the queue is full (``block=False``:
        not at all). Raises ``queue.Full`` (``shmring.Full``) when it stays full."""
        deadline = _deadline(block, timeout)
        bufs: list[memoryview] = []

        def keep(pb: pickle.PickleBuffer) -> bool:
            try:
                bufs.append(pb.raw())
            except BufferError:
                return True  # not contiguous: pickle it in band
            return False

        data = pickle.dumps(obj, protocol=5, buffer_callback=keep)
        lens = [m.nbytes for m in bufs]
        head, offsets, total = _layout(len(data), lens)
        header = _HEAD.pack(_MAGIC, len(lens), len(data), total) + struct.pack(
            f"<{len(lens)}Q", *lens)
        pieces = [(0, header), (head, data)] + list(zip(offsets, bufs))
        producer = self._ensure()
        if not producer.wait_for_consumers(1, _left(deadline)):
            raise errors.Full("no receiver is attached to the queue yet")
        slot = producer.slot_size
        start = 0
        first = True
        while start < total:
            n = min(slot, total - start)
            # After the first slot the message must be completed: later chunks wait as long
            # as it takes (dead receivers are reclaimed, so this cannot hang on a crash).
            claim = producer.claim(n, _left(deadline) if first else None)
            first = False
            with claim as view:
                for off, piece in pieces:
                    lo, hi = max(off, start), min(off + len(piece), start + n)
                    if lo < hi:
                        view[lo - start:hi - start] = memoryview(piece).cast("B")[lo - off:hi - off]
                del view
            start += n

    def put_nowait(self, obj: Any) -> None:
        """``put(obj, block=False)``."""
        self.put(obj, block=False)

    def wait_for_all_ack(self, timeout: float | None = None) -> bool:
        """Waits until every receiver consumed everything put; False on timeout."""
        if self._producer is None:
            return True
        return self._producer.wait_drained(timeout)

    def close(self) -> None:
        """Ends the stream as finished (receivers drain what is there, then get
        ``Disconnected``) and releases this end."""
        if not self._closed:
            self._closed = True
            if self._producer is not None:
                self._producer.close()
            self._producer = None
            self._ring = None

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        if self._closed:
            raise errors.Closed("a closed sender cannot be pickled")
        if self._producer is not None:
            raise TypeError("a sender that has put messages cannot move to another process")
        return (_attach_sender, (self._ring.name,))


class Receiver:
    """The reading end: ``get``, ``get_nowait``, ``close``."""

    def __init__(self, ring: Ring) -> None:
        self._ring = ring
        self._consumer = ring.consumer("gating")
        self._closed = False

    def _ensure(self):
        if self._closed:
            raise errors.Closed("this receiver is closed")
        if self._consumer is None:
            self._consumer = self._ring.consumer("gating")
        return self._consumer

    def get(self, block: bool = True, timeout: float | None = None, *,
            zero_copy: bool = False) -> Any:
        """Gets the next object; waits up to ``timeout`` (``block=False``: not at all) and
        raises ``queue.Empty`` (``shmring.Empty``) when nothing came. Raises
        ``shmring.Disconnected`` once the sender closed and everything was read.
        ``zero_copy=True``: buffers view the slot (see the module docs)."""
        consumer = self._ensure()
        deadline = _deadline(block, timeout)
        try:
            msg = consumer.pin(_left(deadline))
        except errors.Timeout:
            raise errors.Empty("nothing came within the timeout") from None
        view = memoryview(msg)
        try:
            magic, nbufs, pickle_len, total = _HEAD.unpack_from(view)
            if magic != _MAGIC:
                raise errors.Corrupt("not a shmring queue message")
            lens = list(struct.unpack_from(f"<{nbufs}Q", view, _HEAD.size))
            head, offsets, want = _layout(pickle_len, lens)
            if want != total:
                raise errors.Corrupt("inconsistent queue message header")
            if zero_copy and total == len(view):
                bufs = [view[o:o + n] for o, n in zip(offsets, lens)]
                obj = pickle.loads(view[head:head + pickle_len], buffers=bufs)
                del bufs
                return obj
            whole = bytearray(total)
            got = len(view)
            whole[:got] = view
        finally:
            view.release()
        msg.close()
        while got < total:
            part = consumer.pin(None)
            with memoryview(part) as pv:
                whole[got:got + len(pv)] = pv
                got += len(pv)
            part.close()
        mv = memoryview(whole)
        return pickle.loads(mv[head:head + pickle_len],
                            buffers=[mv[o:o + n] for o, n in zip(offsets, lens)])

    def get_nowait(self) -> Any:
        """``get(block=False)``."""
        return self.get(block=False)

    def close(self) -> None:
        """Leaves the queue, discarding what this end has not read."""
        if not self._closed:
            self._closed = True
            if self._consumer is not None:
                self._consumer.close()
            self._consumer = None
            self._ring = None

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        if self._closed:
            raise errors.Closed("a closed receiver cannot be pickled")
        # Moving: this end stops reading so the sender does not wait for it.
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        return (_attach_receiver, (self._ring.name,))


def _attach_sender(name: str) -> Sender:
    return Sender(Ring.open(name, timeout=10.0))


def _attach_receiver(name: str) -> Receiver:
    return Receiver(Ring.open(name, timeout=10.0))
