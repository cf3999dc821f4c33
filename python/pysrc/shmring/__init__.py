"""shmring: a shared-memory single-producer / multi-consumer ring for Python.

Several APIs over one ring (``ring-os`` underneath, never a re-implementation):

* :class:`Ring` with :meth:`Ring.producer` and :meth:`Ring.consumer` — pub/sub with gating,
  latest-only or skip-on-lag consumers;
* zero-copy reads (:meth:`Consumer.pin` returns a :class:`Message` exporting the slot through the
  buffer protocol and DLPack) and in-place writes (:meth:`Producer.claim`);
* groups of competing consumers (:meth:`Producer.create_group`, ``Ring.consumer(group=...)``):
  each message to exactly one member, a dead member's message to another (``redelivered``);
* :func:`create_pair` — a ``multiprocessing.Queue``-shaped queue that pickles with protocol 5
  and writes out-of-band buffers straight into the ring's in-segment allocator; its receivers,
  pickled to worker processes, share the work (a group);
* named rings (``/dev/shm``) and memfd rings (:meth:`Ring.memfd`, :meth:`Ring.from_fd`,
  :meth:`Ring.connect`).
"""

import atexit as _atexit

from . import errors
from ._shmring import (
    Allocations, Allocator, Block, Claim, Consumer, Message, Part, Producer, RecvBuffer, Ring,
)
from ._shmring import _interpreter_exiting
from .errors import (
    Aborted, AlreadyExists, Busy, Closed, ConfigMismatch, Corrupt, Disconnected, Displaced,
    Empty, Error, Evicted, Full, InvalidConfig, InvalidName, Lagging, NotFound, NotPinOnly,
    PermissionDenied, Timeout, TooLarge, Truncated, InvalidHandle, TooManyPins, NoSpace,
    NoSuchGroup,
)
from .duplex import Duplex
from .queue import InPlace, Receiver, Sender, create_pair

__all__ = [
    "Ring", "Producer", "Consumer", "Message", "Claim", "Part", "RecvBuffer", "Allocator",
    "Allocations", "Block", "Duplex", "create_pair", "Sender",
    "Receiver", "InPlace", "errors", *errors.__all__,
]

# A thread blocked in a wait when the interpreter exits must not take the GIL back while it
# finalizes (CPython would terminate it through native frames and the process would abort):
# from this hook on, such a thread parks until the process ends. See python/src/wait.rs.
_atexit.register(_interpreter_exiting)
