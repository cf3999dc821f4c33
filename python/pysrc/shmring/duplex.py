"""A duplex channel: two rings, one per direction, opened and closed as one object.

Each side is the producer of one ring and a gating consumer of the other, and the owner of its
outgoing ring's in-segment allocator: :meth:`Duplex.allocate` gives a hard-bounded writable
block whose handle the side sends (on the ring or any other way); the peer views it read-only
and zero-copy by handle (:meth:`Duplex.view`) and, once done, tells the owner, which frees it.

The ending of either side is reported to the other: after :meth:`close` the peer drains what
was sent, then :meth:`recv` raises :class:`shmring.Disconnected` (finished); after
:meth:`abort` (or an exception in a ``with`` block) it raises :class:`shmring.Aborted` with the
code; if the peer's process dies, :class:`shmring.Aborted` with ``code = -1`` ("died").
:attr:`peer_ended` says which (``None`` while the peer is there).

Rings are named ``<name>.ab`` (side ``"a"`` produces) and ``<name>.ba``; the creating side
removes both names when it closes.
"""

from __future__ import annotations

from typing import Any

from ._shmring import Allocations, Allocator, Block, Ring
from .errors import Aborted, Disconnected

__all__ = ["Duplex", "DIED"]

#: ``Aborted.code`` when the peer's process died without ending its side.
DIED = -1


class Duplex:
    """One side of a duplex channel; make it with :meth:`create` (side ``"a"``) and
    :meth:`open` (side ``"b"``, another process or thread)."""

    def __init__(self, side: str, out: Ring, inc: Ring, owns: bool) -> None:
        self.side = side
        self._out_ring, self._in_ring, self._owns = out, inc, owns
        self._producer = out.producer()
        self._allocator: Allocator = self._producer.allocator()
        self._peer_allocations: Allocations = inc.allocations()
        self._connected = False
        self.peer_ended: str | None = None
        self.abort_code: int | None = None
        self._closed = False

    @classmethod
    def create(cls, name: str, *, slots: int = 64, slot_size: int = 4096,
               arena: int = 64 << 20, max_live: int = 4094) -> Duplex:
        """Creates both rings (each with an `arena`-byte allocator) and returns side ``"a"``."""
        kw: dict[str, Any] = dict(slots=slots, slot_size=slot_size, arena=arena,
                                  max_live=max_live, pin_only=True)
        ab = Ring.create(f"{name}.ab", **kw)
        try:
            ba = Ring.create(f"{name}.ba", **kw)
        except BaseException:
            ab.close()
            raise
        self = cls("a", ab, ba, owns=True)
        self._consumer = ba.consumer("gating")  # registered before the peer can send
        return self

    @classmethod
    def open(cls, name: str, timeout: float = 5.0) -> Duplex:
        """Opens side ``"b"`` of the channel `name` (waiting up to `timeout` for it)."""
        ab = Ring.open(f"{name}.ab", timeout=timeout)
        ba = Ring.open(f"{name}.ba", timeout=timeout)
        consumer = ab.consumer("gating")  # before our producer exists: nothing of a's is lost
        self = cls("b", ba, ab, owns=False)
        self._consumer = consumer
        return self

    # -- messages ----------------------------------------------------------------------------

    def send(self, data: Any, timeout: float | None = None) -> int:
        """Sends `data` (any bytes-like object that fits a slot); waits up to `timeout` for
        the peer to be there and for room. Returns the sequence number."""
        if not self._connected:
            if not self._producer.wait_for_consumers(1, timeout):
                from .errors import Full
                raise Full("the peer has not opened its side")
            self._connected = True
        return self._producer.publish(data, timeout)

    def recv(self, timeout: float | None = None) -> bytes:
        """The next message (a copy). Raises :class:`Disconnected` once the peer closed and
        everything was read, :class:`Aborted` once it aborted or died (``code == DIED``)."""
        try:
            return self._consumer.recv(timeout)
        except Aborted as e:
            self.peer_ended, self.abort_code = "aborted", getattr(e, "code", 0)
            self._reclaim()
            raise
        except Disconnected:
            self._reclaim()
            producer = self._in_ring.inspect()
            if producer["closed"] and not producer["aborted"]:
                self.peer_ended = "finished"
                raise
            self.peer_ended, self.abort_code = "aborted", DIED
            err = Aborted("the peer's process died without ending its side")
            err.code = DIED
            raise err from None

    def _reclaim(self) -> None:
        """The peer has ended: nothing of ours is viewed any more; free it all."""
        if not self._closed:
            self._allocator.free_all()

    @property
    def pending(self) -> int:
        """Messages from the peer not read yet (a snapshot; 0 once closed)."""
        return 0 if self._closed else self._consumer.pending

    # -- allocations -------------------------------------------------------------------------

    def allocate(self, nbytes: int, owner: int = 0) -> Block:
        """A writable block of exactly `nbytes` in this side's arena (``Full`` at a ceiling)."""
        return self._allocator.allocate(nbytes, owner)

    def free(self, handle: int) -> int:
        """Frees one of this side's allocations (when the peer said it is done with it)."""
        return self._allocator.free(handle)

    def view(self, handle: int, nbytes: int | None = None, notify: bool = False) -> Block:
        """A read-only zero-copy view of the peer's allocation `handle` (checked). With
        `notify`, its handle is listed by :meth:`take_released` once the view is gone."""
        return self._peer_allocations.view(handle, nbytes, notify)

    def view_own(self, handle: int, nbytes: int | None = None, notify: bool = False) -> Block:
        """A read-only zero-copy view of this side's own allocation `handle` (a block the
        peer sent back); it does not keep the allocation alive."""
        return self._allocator.view(handle, nbytes, notify)

    def take_released(self) -> tuple[list[int], list[int]]:
        """``(peer, own)``: the handles of `notify` views (of the peer's allocations, of this
        side's own) that are gone since the last call."""
        if self._closed:
            return [], []
        return self._peer_allocations.take_released(), self._allocator.take_released()

    def inspect(self) -> dict[str, Any]:
        """This side's allocator report (stats, owners, leaks, reclaimed) and the peer's."""
        return {"own": self._allocator.inspect(), "peer": self._peer_allocations.inspect(),
                "peer_ended": self.peer_ended}

    # -- ending ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Ends this side as finished: the peer drains, then gets ``Disconnected``."""
        self._end(None)

    def abort(self, code: int = 0) -> None:
        """Ends this side as aborted with `code`: the peer drains, then gets ``Aborted``."""
        self._end(code)

    def _end(self, code: int | None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._allocator.free_all()
            self._allocator.close()
            if code is None:
                self._producer.close()
            else:
                self._producer.abort(code)
            self._consumer.close()
        finally:
            self._out_ring.close()
            self._in_ring.close()
            # Drop the endpoints: each keeps its ring mapped (views made from it keep theirs).
            self._producer = self._consumer = self._allocator = self._peer_allocations = None

    def __enter__(self) -> Duplex:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._end(None if exc_type is None else 0)

    def __repr__(self) -> str:
        return f"<shmring.Duplex side={self.side!r} closed={self._closed}>"
