"""asyncio waits: ``Consumer.recv_async``/``pin_async`` and ``Receiver.get_async``.

No thread per wait and no executor: a waiting coroutine registers its consumer with ring-os's
reactor (one helper thread per process, asleep in ``futex_waitv`` on the rings' futex words).
The reactor's waker never takes the GIL: it writes the coroutine's token to its event loop's
``_Notifier`` (an eventfd on Linux, a pipe on other Unixes), which the loop watches with
``loop.add_reader``; the callback resolves the coroutine's future, and the coroutine tries a
non-blocking read. See ``python/src/aio.rs``.

On Linux >= 6.7 each loop also gets a ``_Driver`` (ring-os's ``asyncio::Driver``): while it
lives the waits are io_uring futex waits, the loop watches the io_uring's fd too, and its
callback reaps them on the loop's thread, so a publish in another process wakes the loop through
the kernel instead of through the reactor thread. Without io_uring's futex wait (an older kernel,
``kernel.io_uring_disabled``), or with ``SHMRING_ASYNC_DRIVER=0``, the loop keeps the reactor's
path.

Cancel safety: a read happens only in the synchronous step after a poll said "ready", never
across an ``await``, so a cancelled wait has read, pinned and lost nothing; its ``finally``
gives back what the wait holds in the ring (its reactor registration, its waiter count).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import weakref
from typing import Any, Callable, TypeVar

from . import errors
from ._shmring import Consumer, _Driver, _Notifier

T = TypeVar("T")

# Consumer._poll_ready's answers (python/src/aio.rs).
_READY, _PENDING, _BUSY = 0, 1, 2


class _Hub:
    """One event loop's doorbell and the futures of its waiting coroutines, by token."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.notifier = _Notifier()
        self.futures: dict[int, asyncio.Future[None]] = {}
        self.tokens = itertools.count(1)
        # The loop holds this callback (and so the hub); the hub holds no loop.
        loop.add_reader(self.notifier.fileno(), self._on_ready)
        self.driver = _driver()
        if self.driver is not None:
            loop.add_reader(self.driver.fileno(), self._on_driver)

    def _on_driver(self) -> None:
        assert self.driver is not None
        # Wakes the waiting consumers here, on the loop's thread; their tokens come back at
        # once, without a ring of the notifier's fd.
        self._resolve(self.notifier.dispatch(self.driver))

    def _on_ready(self) -> None:
        self._resolve(self.notifier.drain())

    def _resolve(self, tokens: list[int]) -> None:
        for token in tokens:
            fut = self.futures.get(token)
            if fut is not None and not fut.done():
                fut.set_result(None)


def _driver() -> _Driver | None:
    """An io_uring driver for a new loop, or ``None`` (unavailable, or turned off)."""
    if os.environ.get("SHMRING_ASYNC_DRIVER", "1") == "0":
        return None
    try:
        return _Driver()
    except (OSError, NotImplementedError):
        return None


_HUBS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub] = weakref.WeakKeyDictionary()
# Loops that cannot be weakly referenced (some third-party loops): kept for the process.
_STRONG: dict[int, tuple[asyncio.AbstractEventLoop, _Hub]] = {}


def _hub(loop: asyncio.AbstractEventLoop) -> _Hub:
    try:
        hub = _HUBS.get(loop)
    except TypeError:
        kept = _STRONG.get(id(loop))
        hub = kept[1] if kept is not None and kept[0] is loop else None
    if hub is not None:
        return hub
    if sys.platform == "win32":
        raise NotImplementedError(
            "shmring's asyncio waits need a readiness file descriptor, which Windows event "
            "loops cannot watch; use loop.run_in_executor(None, consumer.recv) there")
    hub = _Hub(loop)
    try:
        _HUBS[loop] = hub
    except TypeError:
        _STRONG[id(loop)] = (loop, hub)
    return hub


async def wait_then(consumer: Consumer, read: Callable[[], T]) -> T:
    """Waits until ``consumer`` has a message (or its stream ended), then returns ``read()``
    (a non-blocking read that raises ``Timeout`` when another reader was first: the wait goes
    on). Raises what the consumer's wait raises (``Disconnected``, ``Closed``...)."""
    loop = asyncio.get_running_loop()
    hub = _hub(loop)
    token = next(hub.tokens)
    pause = 0.001
    try:
        while True:
            fut = loop.create_future()
            hub.futures[token] = fut
            state = consumer._poll_ready(hub.notifier, token)
            if state == _READY:
                try:
                    return read()
                except errors.Timeout:
                    # Taken by another reader (a group member, another coroutine) or
                    # overwritten (latest, skip): wait again, letting the others run.
                    await asyncio.sleep(0)
            elif state == _PENDING:
                await fut
            else:  # a blocking call of another thread has the consumer
                await asyncio.sleep(pause)
                pause = min(2 * pause, 0.05)
    finally:
        hub.futures.pop(token, None)
        consumer._cancel_ready(hub.notifier, token)


async def recv(consumer: Consumer) -> bytes:
    return await wait_then(consumer, lambda: consumer.recv(0.0))


async def pin(consumer: Consumer) -> Any:
    return await wait_then(consumer, lambda: consumer.pin(0.0))
