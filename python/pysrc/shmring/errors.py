"""The ``shmring`` exception hierarchy: every ring-os error maps to exactly one class here.

All derive from :class:`Error`; several also derive from the builtin a caller would catch
without knowing this package (``TimeoutError``, ``FileNotFoundError``, ``queue.Full``...).
"""

import errno as _errno
import queue as _queue

__all__ = [
    "Error", "Timeout", "Disconnected", "Aborted", "Closed", "Full", "Empty", "TooLarge",
    "Corrupt", "Truncated", "NotFound", "AlreadyExists", "PermissionDenied", "InvalidName",
    "InvalidConfig", "ConfigMismatch", "Busy", "Lagging", "Evicted", "Displaced", "NotPinOnly",
    "InvalidHandle", "TooManyPins", "NoSpace", "NoSuchGroup",
]


class Error(Exception):
    """Base class of every error this package raises (besides ``BufferError``, ``TypeError``
    and ``ValueError`` for bad arguments)."""


class Timeout(Error, TimeoutError):
    """A blocking call ran out of time."""


class Disconnected(Error, _queue.Empty):
    """No message will come: the producer closed the stream (and it was drained) or died.

    A ``queue.Empty`` too, so code written for ``multiprocessing.Queue`` that stops on
    ``Empty`` stops at the end of the stream; a loop that *retries* on ``Empty`` must catch
    ``Disconnected`` first, or it spins once the sender is gone."""


class Aborted(Error):
    """The producer ended the stream as aborted (dropped without ``close()``); ``code`` says
    why (0 for a dropped producer)."""

    code: int = 0


class Closed(Error, BrokenPipeError):
    """This handle, or the ring's stream, is closed. A ``BrokenPipeError`` too, as
    py-sharedmemory and ``multiprocessing`` connections raise for a closed end."""


class Full(Error, _queue.Full):
    """The ring is full: a gating consumer or a pin holds the next slot."""


class Empty(Error, _queue.Empty):
    """Nothing to read yet."""


class TooLarge(Error, ValueError):
    """A message does not fit in a slot."""


class Corrupt(Error):
    """The segment is not a valid ring (not a ring at all, a foreign version, or damaged)."""


class Truncated(Corrupt):
    """A peer truncated the segment under this mapping."""


class NotFound(Error, FileNotFoundError):
    """No ring has this name."""


class AlreadyExists(Error, FileExistsError):
    """A ring with this name exists already."""


class PermissionDenied(Error, PermissionError):
    """The segment belongs to another user or is writable by others."""


class InvalidName(Error, ValueError):
    """A ring name breaks the naming rules (1-200 characters from [A-Za-z0-9._-])."""


class NoSuchGroup(Error, LookupError):
    """No group of that name on the ring (``Ring.consumer(group=...)``): the producer creates
    groups (``Producer.create_group``), so join after it did."""


class InvalidConfig(Error, ValueError):
    """The geometry asked for is invalid (slots, slot size, consumers)."""


class ConfigMismatch(Error, ValueError):
    """An existing ring's geometry is not the one asked for."""


class Busy(Error):
    """The role is taken: a live producer owns the ring, the consumer table is full, or a
    claimed slot is still open."""


class TooManyPins(Busy):
    """A consumer already keeps ``max_pins`` messages pinned (``Ring.consumer(max_pins=)``):
    release one (``msg.release()``, the end of its ``with`` block, or dropping it and every
    view of it) before the next read. Raised at once; nothing was read."""


class Lagging(Error):
    """The producer overwrote the message again and again while it was being read."""


class Evicted(Error):
    """This consumer was reclaimed (taken for dead) and is no longer registered."""


class Displaced(Error):
    """Another producer took the ring over."""


class NotPinOnly(Error, ValueError):
    """In-place writes (``Producer.claim``) need a ring created with ``pin_only=True``."""


class InvalidHandle(Error, ValueError):
    """An allocation handle that is not live: freed twice, stale, another owner's, or forged."""


class NoSpace(Error, OSError):
    """Shared memory has no room (``/dev/shm`` or the memory limit is full): an ``OSError``
    with ``errno.ENOSPC``. A queue ``put`` that raises it sent nothing and the queue stays
    usable."""

    def __init__(self, msg: str = "") -> None:
        super().__init__(_errno.ENOSPC, msg)
