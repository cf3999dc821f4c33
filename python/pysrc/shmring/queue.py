"""A ``multiprocessing.Queue``-shaped queue over one ring: :func:`create_pair`.

Objects are pickled with protocol 5. The pickle stream and its out-of-band buffers (numpy
arrays, ``PickleBuffer`` objects; a top-level ``bytes`` or ``bytearray`` payload too) are
written as one message straight from their objects into the shared segment, in one native call:
what fits goes into the slot, the rest into one allocation of the ring's in-segment allocator
(ring-core's allocator; freed by the sender when the slot comes round again, so a receiver that
dies leaks nothing). The receiver pins the message: ``get()`` copies each buffer out once into
memory the unpickled objects own (writable numpy arrays; from 1 MiB up a ``shmring.RecvBuffer``
whose memory the receiver reuses once it is freed, so large copies land in memory that is
already mapped); ``get(zero_copy=True)`` gives objects whose buffers *view the segment*
(read-only numpy arrays, no copy at all). A zero-copy message stays pinned while anything
made from it is alive and is released when the last of it goes; the next ``get`` and
``close`` raise ``BufferError`` while a view of it is still alive, so a view can never outlive
the bytes it shows.

Objects of any size travel without configuration: a message whose buffers do not fit its slot
goes into the ring's arena (shared memory reserved once, at most ``_ARENA_MAX`` bytes, shrunk
when ``/dev/shm`` has less room), and one that does not fit there, or finds the arena held by
unread messages, into a named spill segment (``<queue>.s<seq>-<hex>``, every page reserved
when it is made). The sender keeps up to four of them and reuses one once its receiver has
acknowledged the message in it (or its slot comes round again); idle ones go after 2 s, at
the next ``put``, and at ``close`` (the native ``spill`` module has the rules). A message that
finds them all busy gets one of its own, which its receiver removes once it has the message;
``create_pair`` sweeps the spills of queues whose processes died.
When shared memory has no room for a message, ``put`` raises ``shmring.NoSpace`` (an
``OSError`` with ``errno.ENOSPC``), sends nothing, and the queue stays usable.

``capacity`` counts unread messages (``put`` waits when they are that many); ``None`` or 0 is
unbounded as far as memory goes: a ring of ``_UNBOUNDED_SLOTS`` small slots, each message of
any size, and when those are all unread ``put`` never waits: the message joins the sender's
*backlog* (this process's memory), which a feeder thread moves into the ring in order as
receivers make room, as ``multiprocessing.Queue``'s feeder thread does (an object in the
backlog is pickled when it is moved, so changing it meanwhile changes what is sent).
``close()`` leaves the backlog to the feeder, which ends the stream after it; at interpreter
exit the process waits for its backlogs to go out while receivers keep taking messages (it
gives up, with a ``RuntimeWarning``, after ``_EXIT_PATIENCE`` seconds without progress).

Endpoints pickle by name and reattach on unpickling, so they can be passed to spawned workers.
Receivers are *work-sharing*, as py-sharedmemory's: a receiver pickled to N worker processes
(and the original, if it reads too) hands each message to exactly one of them. They are the
members of one group of the ring (ring-core's competing consumers): the sender creates the
group when it first puts, and a receiver joins it when it is unpickled after that, or else at
its first ``get`` (waiting, within the ``get``'s timeout, for the sender to start). Messages
wait in the group for a receiver, so a receiver that starts late gets what no receiver has
taken yet, and nothing is published to nobody. A receiver whose process dies while it holds a
message (inside ``get``, or a zero-copy message it still views) does not lose it: the sender
hands it to another receiver when it next waits for room, in ``wait_for_all_ack`` or in
``close``, and that receiver's ``redelivered`` says so (delivery is at-least-once; only such
repeats happen).

A queue is the segment ``/dev/shm/shmring.q-<pid>-<12 hex>``. Before it creates one,
``create_pair`` removes such segments that no process holds any more (their processes were
killed): ring-os's ``stale`` rule, as ``ringctl clean``, within about a second, never failing
the creation (see ``_sweep``).

Both endpoints are thread-safe: ``put``, ``get`` and ``close`` may be called from any thread of
the process (concurrent calls on one endpoint take turns). ``close()`` from another thread wakes
a blocked ``put``/``get`` within one slice (``shmring._shmring.SLICE_SECONDS``) with
``shmring.Closed``. A daemon thread still blocked in ``get``/``put`` at interpreter exit is
simply left behind (it never runs Python again), as one blocked in ``time.sleep`` is.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import math
import os
import pickle
import threading
import time
import uuid
import warnings
from typing import Any

from . import errors
from ._shmring import Ring, _remove_idle_spills, _sweep_stale_queues

# The group every receiver of a queue joins (see the module docs).
_GROUP = "receivers"
# Consumer-table entries of a queue's ring: the group's record and up to 31 receivers.
_CONSUMERS = 32
# Memberships a forked child inherited with a receiver: its parent's, so the child never uses,
# closes or frees them (see Receiver._ensure).
_INHERITED: list[Any] = []

__all__ = ["create_pair", "Sender", "Receiver", "InPlace"]

# A top-level bytes/bytearray payload at least this long skips the pickle stream (which would
# copy it once more): it is sent as a raw part behind an empty or one-byte "pickle" part.
_RAW_AT = 1 << 12
_RAW_BYTES = b""
_RAW_BYTEARRAY = b"\x00"
_DEFAULT_MAX = 1 << 24
# How long create_pair may spend removing stale queue segments before it creates its own.
_SWEEP_SECONDS = 1.0
# The arena is at most this large (and shrinks when /dev/shm has less room); larger messages
# spill into segments of their own.
_ARENA_MAX = 1 << 26
_ARENA_MIN = 1 << 20
# capacity None/0: this many slots of _UNBOUNDED_SLOT bytes (~5 MiB of shared memory).
_UNBOUNDED_SLOTS = 4096
_UNBOUNDED_SLOT = 1024
# How long the feeder waits for room at a time (then it checks whether the sender was closed).
_FEED_SLICE = 0.05
# At exit, how long the process waits for a backlog that makes no progress.
_EXIT_PATIENCE = 10.0


def _geometry(capacity: int, max_message: int) -> dict[str, int]:
    """Slots, slot size and arena for ``capacity`` messages (0: unbounded) whose buffers are
    typically at most ``max_message`` bytes (larger ones spill)."""
    aligned = -(-max_message // 64) * 64
    if capacity == 0:
        return {"slots": _UNBOUNDED_SLOTS, "slot_size": _UNBOUNDED_SLOT, "arena": _ARENA_MAX,
                "max_live": 64}
    return {
        "slots": capacity,
        # Small messages (and the pickle stream of large ones) travel in the slot itself.
        "slot_size": max(4096, min(1 << 16, aligned + 2048)),
        # Room for up to capacity + 1 messages, each with 64-byte alignment of up to 64 parts,
        # within _ARENA_MAX.
        "arena": min(_ARENA_MAX, (min(capacity, 8) + 1) * (aligned + 64 * 64)),
        "max_live": min(capacity, 8) + 2,
    }


def create_pair(capacity: int | None = 8, *, max_message: int = _DEFAULT_MAX,
                name: str | None = None, ctx: Any = None) -> tuple[Sender, Receiver]:
    """Creates a queue of ``capacity`` unread messages (``None`` or 0: unbounded, see the
    module docs) of any size. Returns ``(sender, receiver)``. ``max_message`` (default 16 MiB)
    sizes the arena that messages up to that size use; larger ones travel in segments of
    their own. ``ctx`` is accepted for ``multiprocessing`` compatibility and unused: endpoints
    pickle to any start method."""
    del ctx
    if capacity is None:
        capacity = 0
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        raise TypeError("capacity must be an int or None")
    if capacity < 0:
        raise ValueError("capacity must not be negative (None or 0: unbounded)")
    if not isinstance(max_message, int) or max_message < 0:
        raise ValueError("max_message must be an int >= 0")
    _sweep()
    # The default name is the one _sweep (and ringctl clean) recognises: q-<pid>-<12 hex>.
    name = name or f"q-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    geometry = _geometry(capacity, max_message)
    while True:
        try:
            ring = Ring.create(name, consumers=_CONSUMERS, pin_only=True, **geometry)
            break
        except errors.NoSpace:
            # A small /dev/shm: a smaller arena (down to none; messages then spill).
            if geometry["arena"] == 0:
                raise
            geometry["arena"] //= 4
            if geometry["arena"] < _ARENA_MIN:
                geometry["arena"] = 0
    receiver = Receiver(ring)
    receiver._creator = os.getpid()
    return Sender(ring, unbounded=capacity == 0), receiver


def _sweep() -> list[str]:
    """Removes the segments of default-named queues whose processes all died (no role lock
    held: ring-os's ``stale`` rule, as ``ringctl clean``), within about ``_SWEEP_SECONDS``.
    Never raises: a failure is a ``RuntimeWarning`` and the queue is created anyway. Returns
    the names removed."""
    try:
        removed, error = _sweep_stale_queues(_SWEEP_SECONDS)
    except Exception as e:  # noqa: BLE001 - a sweep must never fail the creation
        removed, error = [], repr(e)
    if error is not None:
        warnings.warn(f"shmring: could not sweep stale queue segments: {error}",
                      RuntimeWarning, stacklevel=3)
    return removed


def _wait(block: bool, timeout: float | None) -> float | None:
    """The seconds a ``put``/``get`` may wait: 0 when not blocking, ``None`` for ever
    (``timeout=None`` or ``float("inf")``). A NaN timeout is a ``ValueError``; a negative one
    does not wait (py-sharedmemory's rule: a deadline already passed); with ``block=False`` the
    timeout is ignored, as ``queue.Queue`` does."""
    if not block:
        return 0.0
    if timeout is None:
        return None
    timeout = float(timeout)
    if math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds, not NaN")
    if math.isinf(timeout):
        return None if timeout > 0 else 0.0
    return max(timeout, 0.0)


# The producers of senders dropped without close(), kept until the interpreter exits: as in
# py-sharedmemory, dropping a sender does not end the stream under a receiver still waiting in
# this process (a daemon thread in get() at exit stays parked); the process's exit ends it,
# and receivers elsewhere then see the producer gone.
_DROPPED: list[Any] = []


# Senders whose feeder thread is moving a backlog into the ring (see the module docs).
_FEEDING: set[Sender] = set()
_FEEDING_LOCK = threading.Lock()
_EXIT_HOOKED = False


def _flush_at_exit() -> None:
    """Waits for the backlogs of this process's senders to go out while they make progress
    (registered when the first feeder starts: after shmring's own exit hook, so it runs
    before it, while waits still work)."""
    while True:
        with _FEEDING_LOCK:
            feeding = list(_FEEDING)
        if not feeding:
            return
        for sender in feeding:
            last, since = len(sender._backlog), time.monotonic()
            while (feeder := sender._feeder) is not None:
                feeder.join(_FEED_SLICE)
                left = len(sender._backlog)
                if left < last:
                    last, since = left, time.monotonic()
                elif time.monotonic() - since > _EXIT_PATIENCE:
                    warnings.warn(f"shmring: {left} message(s) of a sender's backlog were "
                                  f"never taken by a receiver; exiting without them",
                                  RuntimeWarning, stacklevel=1)
                    with _FEEDING_LOCK:
                        _FEEDING.discard(sender)
                    break


class Sender:
    """The writing end: ``put``, ``put_nowait``, ``wait_for_all_ack``, ``close``. Thread-safe."""

    def __init__(self, ring: Ring, unbounded: bool = False) -> None:
        self._ring = ring
        self._producer = None
        self._closed = False
        # Guards the fields above, never held while waiting (the native producer lends
        # itself to one blocking call at a time).
        self._lock = threading.Lock()
        # capacity None/0: messages waiting for room, oldest first, and the thread moving
        # them into the ring (see the module docs); guarded by _feed_lock.
        self._unbounded = unbounded
        self._backlog: collections.deque[list[Any]] = collections.deque()
        self._feeder: threading.Thread | None = None
        self._close_after = False
        self._feed_lock = threading.Lock()

    def _ensure(self):
        with self._lock:
            if self._closed:
                raise errors.Closed("this sender is closed")
            if self._producer is not None and self._pid != os.getpid():
                # Inherited through fork after its first put: the producer is the parent's.
                raise RuntimeError("a sender that has put messages cannot be used in another "
                                   "process: pass the sender to its process before the first put")
            if self._producer is None:
                self._pid = os.getpid()
                if self._ring.inspect()["closed"]:
                    # Another copy of this sender produced and closed the stream.
                    raise RuntimeError("a pair supports one producing process: this queue's "
                                       "stream was already closed by its producer")
                producer = self._ring.producer()
                try:
                    # Before the first message: every message goes to the receivers' group.
                    producer.create_group(_GROUP)
                except BaseException:
                    producer.close()
                    raise
                self._producer = producer
            return self._producer

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def put(self, obj: Any, block: bool = True, timeout: float | None = None) -> None:
        """Puts ``obj``; waits up to ``timeout`` while the queue is full or no receiver is
        attached yet (``block=False``: not at all; ``timeout=None`` or ``inf``: as long as it
        takes). Raises ``queue.Full`` (``shmring.Full``) when it stays full,
        ``shmring.NoSpace`` (an ``OSError``, ``ENOSPC``) when shared memory has no room for
        the message (nothing was sent; the queue stays usable), ``shmring.Closed`` when the
        sender is closed (also by another thread while this waits)."""
        wait = _wait(block, timeout)
        producer = self._ensure()
        if self._unbounded:
            self._put_unbounded(producer, obj)
            return
        producer._put_parts(_parts(obj), wait)

    def _put_unbounded(self, producer: Any, obj: Any) -> None:
        """capacity None/0: into the ring now if it has room and no backlog waits, else into
        the backlog (see the module docs)."""
        with self._feed_lock:
            if not self._backlog:
                try:
                    producer._put_parts(_parts(obj), 0.0)
                    return
                except errors.Full:
                    pass  # no room (or another thread's put has the producer): the backlog
            self._backlog.append(obj)
            if self._feeder is None:
                self._feeder = threading.Thread(target=self._feed, args=(producer,),
                                                name="shmring-feeder", daemon=True)
                global _EXIT_HOOKED
                with _FEEDING_LOCK:
                    _FEEDING.add(self)
                    if not _EXIT_HOOKED:
                        _EXIT_HOOKED = True
                        atexit.register(_flush_at_exit)
                self._feeder.start()

    def _feed(self, producer: Any) -> None:
        """The feeder thread: moves the backlog into the ring in order, the oldest message
        leaving the backlog only once it is in the ring (so a ``put`` that finds the backlog
        empty cannot overtake it); ends the stream after it when ``close`` asked to."""
        try:
            while True:
                with self._feed_lock:
                    if not self._backlog:
                        self._feeder = None
                        close = self._close_after
                        break
                    obj = self._backlog[0]
                try:
                    producer._put_parts(_parts(obj), _FEED_SLICE)
                except errors.Full:
                    continue
                except errors.Closed:
                    return
                with self._feed_lock:
                    self._backlog.popleft()
            if close:
                self._finish(producer, self._ring)
        finally:
            with _FEEDING_LOCK:
                _FEEDING.discard(self)

    def put_nowait(self, obj: Any) -> None:
        """``put(obj, block=False)``."""
        self.put(obj, block=False)

    def claim(self, shape: Any, dtype: Any = "uint8", block: bool = True,
              timeout: float | None = None) -> InPlace:
        """Reserves a numpy array of ``shape`` and ``dtype`` *in the queue's shared memory*,
        for the caller to build in place; leaving the ``with`` block puts it, with no copy::

            with sender.claim((1080, 1920, 4)) as frame:
                render_into(frame)

        An exception in the block (or ``abort()``) sends nothing. The receiver gets the array
        as from ``put`` (``get(zero_copy=True)``: a read-only view of the same memory). The
        array lies in the arena or a spill segment, never in a slot; once put it is read-only
        (views made from it inside the block stay writable: do not write through them after
        the block, the receiver may be reading). Waits for room as ``put`` does; while the
        claim is open, ``put`` and ``claim`` on this sender raise ``shmring.Busy``. Needs
        numpy; a dtype holding Python objects is a ``TypeError``."""
        import numpy as np

        wait = _wait(block, timeout)
        producer = self._ensure()
        template = np.empty(shape, dtype)  # never touched: only its pickle stream is used
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(template, protocol=5,
                            buffer_callback=lambda b: buffers.append(b) is not None)
        if len(buffers) != 1:
            raise TypeError(f"a claimed array needs a dtype of plain data, not {template.dtype}")
        del buffers
        native = producer._claim_parts(head, template.nbytes, wait)
        return InPlace(native, np.ndarray(template.shape, template.dtype, buffer=native))

    def wait_for_all_ack(self, timeout: float | None = None) -> bool:
        """Waits until every receiver consumed everything put; False on timeout. Raises
        ``shmring.Closed`` (a ``BrokenPipeError``) once the sender is closed."""
        wait = _wait(True, timeout)
        if self._closed:
            raise errors.Closed("this sender is closed")
        producer = self._producer
        if producer is None:
            return True
        end = None if wait is None else time.monotonic() + wait
        while self._backlog:  # capacity None/0: the backlog goes into the ring first
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.001)
        return producer.wait_drained(None if end is None else max(0.0, end - time.monotonic()))

    def close(self) -> None:
        """Ends the stream as finished (receivers drain what is there, then get
        ``Disconnected``) and releases this end. From another thread, a ``put`` waiting
        meanwhile raises ``shmring.Closed`` within one slice. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producer, ring = self._producer, self._ring
            self._producer = None
        with self._feed_lock:
            if self._feeder is not None:
                self._close_after = True  # the feeder ends the stream after the backlog
                return
        self._ring = None
        self._finish(producer, ring)

    def _finish(self, producer: Any, ring: Ring) -> None:
        """Ends the stream and removes what nobody will read (``close``'s second half)."""
        self._ring = None
        if producer is not None:
            producer.close()
        state = ring._group_state(_GROUP)
        if state is None or state[0] == 0:  # else the receivers may still drain them
            _remove_idle_spills(ring.name)  # the last one out removes unread spilled messages

    def __del__(self) -> None:
        producer = getattr(self, "_producer", None)
        if producer is not None and not getattr(self, "_closed", True):
            _DROPPED.append(producer)

    def __enter__(self) -> Sender:
        if self._closed:
            raise errors.Closed("this sender is closed")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        with self._lock:
            if self._closed:
                raise errors.Closed("a closed sender cannot be pickled")
            if self._producer is not None:
                raise RuntimeError("a sender that has put messages cannot move to another "
                                   "process: pass the sender to its process before the first put")
            return (_attach_sender, (self._ring.name, self._unbounded))


class Receiver:
    """The reading end: ``get``, ``get_nowait``, ``close``. Thread-safe."""

    def __init__(self, ring: Ring) -> None:
        self._ring = ring
        # A member of the queue's group, joined by the first get (see the module docs), and
        # the process that joined (a forked child must not use its parent's membership).
        self._consumer = None
        self._joined_in: int | None = None
        self._closed = False
        # Guards the fields above, never held while waiting (see Sender).
        self._lock = threading.Lock()
        # Per thread: whether the last message its get returned was redelivered.
        self._last = threading.local()
        # The pid of the process that created the pair, on create_pair's receiver only: it
        # alone warns about unread messages (a worker's copy cannot know whether another
        # worker is still to come).
        self._creator: int | None = None
        # An unpickled receiver joins at once when the sender has started (so its process
        # holds the queue: create_pair's sweep leaves it alone); otherwise its first get does
        # (which also says Busy when the queue has as many receivers as it can take).
        try:
            self._ensure(0.0)
        except errors.Busy:
            pass

    def _ensure(self, wait: float | None):
        """This receiver's membership of the queue's group, joining it if need be: waits up
        to ``wait`` seconds (``None``: for ever) for the sender to create the group; ``None``
        when it did not."""
        end = None if wait is None else time.monotonic() + wait
        pause = 0.001
        while True:
            with self._lock:
                if self._closed:
                    raise errors.Closed("this receiver is closed")
                if self._consumer is not None:
                    if self._joined_in == os.getpid():
                        return self._consumer
                    # Inherited through fork: the parent's membership (its claims would mix
                    # with ours); this process joins as a member of its own.
                    _INHERITED.append(self._consumer)
                    self._consumer = None
                try:
                    self._consumer = self._ring.consumer("gating", group=_GROUP)
                    self._joined_in = os.getpid()
                    return self._consumer
                except errors.NoSuchGroup:
                    pass  # the sender has not put anything yet
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(pause if left is None else min(pause, left))
            pause = min(2 * pause, 0.02)

    @property
    def redelivered(self) -> bool:
        """Whether the last object ``get`` returned in this thread was handed out before, to
        a receiver whose process died holding it (see the module docs)."""
        return getattr(self._last, "redelivered", False)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def get(self, block: bool = True, timeout: float | None = None, *,
            zero_copy: bool = False) -> Any:
        """Gets the next object; waits up to ``timeout`` (``block=False``: not at all;
        ``timeout=None`` or ``inf``: as long as it takes) and raises ``queue.Empty``
        (``shmring.Empty``) when nothing came. Raises ``shmring.Disconnected`` (also a
        ``queue.Empty``) once the sender closed and everything was read, ``shmring.Closed``
        when the receiver is closed (also by another thread while this waits).
        ``zero_copy=True``: buffers view the segment (see the module docs); a ``bytes`` or
        ``bytearray`` payload then comes back as a read-only ``memoryview``."""
        wait = _wait(block, timeout)
        end = None if wait is None else time.monotonic() + wait
        consumer = self._ensure(wait)
        if consumer is None:
            raise errors.Empty("nothing came within the timeout")
        if end is not None:
            wait = max(0.0, end - time.monotonic())
        try:
            parts, self._last.redelivered = consumer._get_parts(wait, zero_copy)
        except errors.Timeout:
            raise errors.Empty("nothing came within the timeout") from None
        return _decode(parts, zero_copy)

    async def get_async(self, *, zero_copy: bool = False) -> Any:
        """``await receiver.get_async()``: ``get`` for asyncio, waiting as long as it takes
        without a thread and without blocking the event loop (bound it with
        ``asyncio.timeout``). Woken through ring-os's one reactor thread per process and the
        loop's readiness fd (see ``Consumer.recv_async``). Cancel-safe: a cancelled await has
        taken nothing, so the object stays for the next get (this receiver's or another's).
        Raises as ``get`` (``Disconnected``, ``Closed``...); ``NotImplementedError`` on
        Windows."""
        from . import _aio

        pause = 0.001
        consumer = self._ensure(0.0)
        while consumer is None:  # the sender has not put anything yet
            await asyncio.sleep(pause)
            pause = min(2 * pause, 0.02)
            consumer = self._ensure(0.0)
        parts, redelivered = await _aio.wait_then(
            consumer, lambda: consumer._get_parts(0.0, zero_copy))
        self._last.redelivered = redelivered
        return _decode(parts, zero_copy)

    def get_nowait(self) -> Any:
        """``get(block=False)``."""
        return self.get(block=False)

    def close(self) -> None:
        """Leaves the queue. Unread messages stay for the other receivers (and those still
        to come); the receiver ``create_pair`` returned, closed in the process that created
        the pair when no other receiver has joined, warns (``RuntimeWarning``) how many it
        leaves unread. From another thread, a ``get`` waiting meanwhile raises
        ``shmring.Closed`` within one slice. Idempotent."""
        self._close(stacklevel=3)

    def _close(self, stacklevel: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            consumer, ring = self._consumer, self._ring
            self._consumer = self._ring = None
        if ring is None:
            return
        if consumer is not None and self._joined_in != os.getpid():
            _INHERITED.append(consumer)  # the parent's (see _ensure): not ours to close
            consumer = None
        if consumer is not None:
            try:
                consumer.close()
            except BaseException:
                with self._lock:  # still open: a zero-copy view is alive (BufferError)
                    self._closed, self._consumer, self._ring = False, consumer, ring
                raise
        # Unread messages stay in the group; the creating process's receiver says how many
        # when it leaves last.
        unread, members = ring._group_state(_GROUP) or (0, 0)
        if members or self._creator != os.getpid():
            unread = 0
        _remove_idle_spills(ring.name)  # the last one out removes unread spilled messages
        if unread:
            warnings.warn(f"shmring.Receiver.close() discarded {unread} unread message(s)",
                          RuntimeWarning, stacklevel=stacklevel)

    def __enter__(self) -> Receiver:
        if self._closed:
            raise errors.Closed("this receiver is closed")
        return self

    def __exit__(self, *exc: object) -> None:
        self._close(stacklevel=3)

    def __reduce__(self):
        with self._lock:
            if self._closed:
                raise errors.Closed("a closed receiver cannot be pickled")
            # The copy is one more member of the group; this end keeps reading if it reads.
            return (_attach_receiver, (self._ring.name,))


class InPlace:
    """A numpy array being built in the queue's shared memory (``Sender.claim``): a context
    manager whose ``__enter__`` gives the array and whose clean exit puts it."""

    def __init__(self, native: Any, array: Any) -> None:
        self._native = native
        self.array = array

    def put(self) -> None:
        """Sends the array (then read-only). Raises ``shmring.Closed`` once put or aborted."""
        try:
            self._native.publish()
        finally:
            self.array.flags.writeable = False

    def abort(self) -> None:
        """Sends nothing and gives the room back (the array is then read-only)."""
        try:
            self._native.abort()
        finally:
            self.array.flags.writeable = False

    def __enter__(self) -> Any:
        return self.array

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.put()
        else:
            self.abort()


def _decode(parts: list[Any], zero_copy: bool) -> Any:
    """The object a get returns from its message's parts."""
    head = parts[0]
    if len(head) <= 1 and len(parts) == 2:  # a raw bytes / bytearray payload
        body = parts[1]
        if zero_copy:
            return memoryview(body)
        return body  # copied as bytes (empty head) or bytearray (one-byte head)
    return pickle.loads(head, buffers=parts[1:])


def _parts(obj: Any) -> list[Any]:
    """The parts of ``obj``'s message: its pickle stream (protocol 5) and out-of-band
    buffers, or a raw ``bytes``/``bytearray`` payload behind a marker (see ``_RAW_AT``)."""
    kind = type(obj)
    if (kind is bytes or kind is bytearray) and len(obj) >= _RAW_AT:
        return [_RAW_BYTES if kind is bytes else _RAW_BYTEARRAY, obj]
    parts: list[Any] = [b""]

    def keep(pb: pickle.PickleBuffer) -> bool:
        try:
            parts.append(pb.raw())
        except BufferError:
            return True  # not contiguous: pickle it in band
        return False

    parts[0] = pickle.dumps(obj, protocol=5, buffer_callback=keep)
    return parts


def _attach_sender(name: str, unbounded: bool = False) -> Sender:
    return Sender(Ring.open(name, timeout=10.0), unbounded)


def _attach_receiver(name: str) -> Receiver:
    return Receiver(Ring.open(name, timeout=10.0))
