"""asyncio waits: Consumer.recv_async / pin_async and Receiver.get_async, woken through ring-os's
one reactor thread per process and the loop's readiness fd (python/src/aio.rs, shmring/_aio.py):
order and completeness, cancel safety (cancelled awaits in a loop, with a checksum over what
arrived, and nothing left counted or registered), close() from elsewhere, a producer's abort and
death, and 100 waiting consumers on at most one extra thread. Delivery and cancel safety also
run on uvloop's event loop."""

import asyncio
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

import shmring
from shmring import _shmring

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no readiness fd on Windows")


try:
    import uvloop
except ImportError:  # ci/python.sh installs it; elsewhere the uvloop cases are skipped
    uvloop = None

# The event loops the awaitables are tested on: asyncio's default loop and uvloop's (libuv's
# poller watching the same readiness fd through its own add_reader).
LOOPS = [
    pytest.param("asyncio", id="asyncio"),
    pytest.param("uvloop", id="uvloop",
                 marks=pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")),
]


def run(coro, timeout=60, loop="asyncio"):
    async def bounded():
        running = type(asyncio.get_running_loop()).__module__
        assert running.startswith(loop), f"running on {running}, not {loop}"
        async with asyncio.timeout(timeout):
            return await coro
    factory = uvloop.new_event_loop if loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(bounded())


def publish_slowly(p, n, seed=1, pause=0.0005):
    """Publishes 0..n as 4-byte ints at uneven gaps (some none, some longer), then closes."""
    rnd = random.Random(seed)
    for i in range(n):
        r = rnd.random()
        if r < 0.3:
            time.sleep(pause * rnd.random() * 4)
        p.publish(i.to_bytes(4, "little"))
    p.close()


async def receive_all(c, out):
    """Appends the ints ``c.recv_async()`` returns to ``out`` until ``Disconnected``."""
    try:
        while True:
            out.append(int.from_bytes(await c.recv_async(), "little"))
    except shmring.Disconnected:
        pass


def settled(c):
    """Nothing left of any wait: no waiter counted in the ring, no reactor registration."""
    end = time.monotonic() + 5
    while (c._waiters(), _shmring._async_pending()) != (0, 0) and time.monotonic() < end:
        time.sleep(0.01)
    return c._waiters(), _shmring._async_pending()


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("tasks", [1, 2])
def test_recv_async_receives_every_message_then_disconnected(tasks, loop):
    """One task gets every message in order; two tasks awaiting one consumer share them, each
    message once. Then both see Disconnected, and nothing is left counted or registered."""
    ring = shmring.Ring.memfd(slots=4, slot_size=64)
    c = ring.consumer("gating")
    p = ring.producer()
    n = 500

    async def main():
        outs = [[] for _ in range(tasks)]
        t = threading.Thread(target=publish_slowly, args=(p, n, tasks))
        t.start()
        await asyncio.gather(*(receive_all(c, out) for out in outs))
        t.join()
        return outs

    outs = run(main(), loop=loop)
    if tasks == 1:
        assert outs[0] == list(range(n))
    assert sorted(sum(outs, [])) == list(range(n))
    assert c.received == n
    assert settled(c) == (0, 0)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("how", ["recv", "pin"])
def test_cancelled_awaits_lose_nothing_and_leak_nothing(how, loop):
    """Awaits cancelled at random points (timeouts of 0-300 µs, explicit task.cancel()): every
    message still arrives exactly once and in order (checksum), no pin is left, and the ring's
    waiter count and the reactor's registrations fall back to zero."""
    ring = shmring.Ring.memfd(slots=8, slot_size=64)
    c = ring.consumer("gating", max_pins=2) if how == "pin" else ring.consumer("gating")
    p = ring.producer()
    n = 3000

    async def one():
        if how == "pin":
            m = await c.pin_async()
            try:
                return int.from_bytes(bytes(m), "little")
            finally:
                m.release()
        return int.from_bytes(await c.recv_async(), "little")

    async def main():
        rnd = random.Random(7)
        t = threading.Thread(target=publish_slowly, args=(p, n, 3))
        t.start()
        got, cancelled = [], 0
        while True:
            try:
                if rnd.random() < 0.5:
                    async with asyncio.timeout(rnd.random() * 0.0003):
                        got.append(await one())
                else:
                    task = asyncio.ensure_future(one())
                    await asyncio.sleep(0)
                    if rnd.random() < 0.5:
                        task.cancel()
                    try:
                        got.append(await task)
                    except asyncio.CancelledError:
                        cancelled += 1
                        leaks.append((c._waiters(), _shmring._async_pending()))
            except TimeoutError:
                cancelled += 1
                # The cancelled wait gave back its count and registration at once.
                leaks.append((c._waiters(), _shmring._async_pending()))
            except shmring.Disconnected:
                break
        t.join()
        return got, cancelled

    leaks = []
    got, cancelled = run(main(), timeout=120, loop=loop)
    assert set(leaks) == {(0, 0)}, "a cancelled wait kept its waiter count or registration"
    assert cancelled > 100, f"only {cancelled} awaits were cancelled: the test did not test"
    assert len(got) == n
    assert sum(got) == n * (n - 1) // 2
    assert got == list(range(n))
    assert c.pins == 0
    assert settled(c) == (0, 0)


def blocking_recv(consumer):
    """A thread blocked in ``consumer.recv()``; the dict gets what it raised (key "error")."""
    seen = {}

    def blocked():
        try:
            consumer.recv()
        except Exception as e:  # noqa: BLE001 - compared by the caller
            seen["error"] = e

    t = threading.Thread(target=blocked)
    t.start()
    return t, seen


async def ended(c, end, exc):
    """Awaits ``c.recv_async()``, runs ``end()`` while it waits, returns what it raised."""
    task = asyncio.ensure_future(c.recv_async())
    await asyncio.sleep(0.05)
    assert not task.done()
    end()
    with pytest.raises(exc) as e:
        await task
    return e.value


def test_abort_reaches_a_waiting_recv_async_as_the_blocking_recv_sees_it():
    ring = shmring.Ring.memfd(slots=4, slot_size=64)
    c = ring.consumer("gating")
    blocking = ring.consumer("gating")
    p = ring.producer()

    t, seen = blocking_recv(blocking)
    err = run(ended(c, lambda: p.abort(7), shmring.Aborted), timeout=10)
    t.join(10)
    assert type(err) is type(seen["error"])
    assert err.code == seen["error"].code == 7


@pytest.mark.parametrize("where", ["another thread", "the same loop"])
def test_close_from_elsewhere_wakes_the_await_with_closed(where):
    ring = shmring.Ring.memfd(slots=4, slot_size=64)
    c = ring.consumer("gating")
    _p = ring.producer()

    def close():
        if where == "another thread":
            threading.Thread(target=c.close).start()
        else:
            c.close()

    async def main():
        await ended(c, close, shmring.Closed)
        with pytest.raises(shmring.Closed):
            await c.recv_async()

    run(main(), timeout=10)
    assert _shmring._async_pending() == 0


PRODUCER = """
import sys, time, shmring
ring = shmring.Ring.open(sys.argv[1])
p = ring.producer()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_killed_producer_reaches_a_waiting_recv_async_as_disconnected(name):
    ring = shmring.Ring.create(name, slots=4, slot_size=64)
    c = ring.consumer("gating")
    blocking = ring.consumer("gating")
    child = subprocess.Popen([sys.executable, "-c", PRODUCER, name], stdout=subprocess.PIPE)

    def kill():
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

    try:
        assert child.stdout.readline().strip() == b"ready"
        t, seen = blocking_recv(blocking)
        err = run(ended(c, kill, shmring.Disconnected), timeout=20)
        t.join(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert type(err) is type(seen["error"])


HUNDRED = """
import asyncio, os, time, shmring
from shmring import _shmring

def threads():
    return len(os.listdir("/proc/self/task"))

# 4 rings of 25 consumers (a ring takes at most 32): 100 waits on 4 futex words.
rings = [shmring.Ring.memfd(slots=4, slot_size=64, consumers=25) for _ in range(4)]
consumers = [r.consumer("gating") for r in rings for _ in range(25)]
producers = [r.producer() for r in rings]
before = threads()  # this process has made no async wait yet: no reactor thread

async def main():
    tasks = [asyncio.ensure_future(c.recv_async()) for c in consumers]
    end = time.monotonic() + 10
    while _shmring._async_pending() < 100 and time.monotonic() < end:
        await asyncio.sleep(0.01)
    waiters = sum(r_c._waiters() for r_c in consumers[::25])
    during = threads()
    done = sum(t.done() for t in tasks)
    for p in producers:
        p.publish(b"all")
    got = await asyncio.gather(*tasks)
    return waiters, during, done, got

waiters, during, done, got = asyncio.run(main())
assert waiters == 100, waiters
assert done == 0, done
assert got == [b"all"] * 100
print(during - before, flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/task")
def test_a_hundred_awaiting_consumers_add_at_most_one_thread():
    """In a fresh process (no reactor yet): 100 consumers awaiting at once, every one counted
    as a waiter in its ring, add exactly the reactor's thread (no executor, no thread each)."""
    out = subprocess.run([sys.executable, "-c", HUNDRED], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    added = int(out.stdout)
    assert added <= 1, f"{added} threads were added for 100 waiting consumers"


def test_a_blocking_call_in_another_thread_does_not_stall_the_await():
    """The await finds the consumer lent to a blocking recv of another thread (BUSY) and keeps
    trying; whichever of the two gets each message, none is lost."""
    ring = shmring.Ring.memfd(slots=8, slot_size=64)
    c = ring.consumer("gating")
    p = ring.producer()
    n = 200
    blocking = []

    def blocked():
        try:
            while True:
                blocking.append(int.from_bytes(c.recv(), "little"))
        except shmring.Disconnected:
            pass

    async def main():
        got = []
        t = threading.Thread(target=blocked)
        t.start()
        pub = threading.Thread(target=publish_slowly, args=(p, n, 9, 0.002))
        pub.start()
        await receive_all(c, got)
        pub.join()
        t.join(10)
        return got

    got = run(main())
    assert sorted(got + blocking) == list(range(n))


@pytest.mark.parametrize("loop", LOOPS)
def test_get_async_queue_and_cancel_safety(loop):
    tx, rx = shmring.create_pair(capacity=1 << 16, max_message=256)
    n = 1000

    def put_all():
        rnd = random.Random(11)
        for i in range(n):
            if rnd.random() < 0.3:
                time.sleep(0.0005 * rnd.random())
            tx.put({"i": i})
        tx.close()

    async def main():
        rnd = random.Random(13)
        t = threading.Thread(target=put_all)
        t.start()
        got, cancelled = [], 0
        while True:
            try:
                async with asyncio.timeout(rnd.random() * 0.0003):
                    got.append((await rx.get_async())["i"])
            except TimeoutError:
                cancelled += 1
            except shmring.Disconnected:
                break
        t.join()
        return got, cancelled

    try:
        got, cancelled = run(main(), timeout=120, loop=loop)
    finally:
        rx.close()
    assert cancelled > 50, f"only {cancelled} awaits were cancelled"
    assert sum(got) == n * (n - 1) // 2
    assert got == list(range(n))
    assert _shmring._async_pending() == 0


def test_receiver_close_wakes_get_async_with_closed():
    tx, rx = shmring.create_pair(capacity=1 << 16, max_message=256)
    tx.put("first")  # the receiver joins the group

    async def main():
        assert await rx.get_async() == "first"
        task = asyncio.ensure_future(rx.get_async())
        await asyncio.sleep(0.05)
        assert not task.done()
        threading.Thread(target=rx.close).start()
        with pytest.raises(shmring.Closed):
            await task

    try:
        run(main(), timeout=10)
    finally:
        tx.close()


SLOW_PUBLISHER = """
import sys, time, shmring
ring = shmring.Ring.open(sys.argv[1])
with ring.producer() as p:
    p.wait_for_consumers(1, timeout=10)
    for i in range(int(sys.argv[2])):
        time.sleep(0.001)  # the reader parks meanwhile
        p.publish(i.to_bytes(4, "little"))
"""


def driver_or_skip() -> "_shmring._Driver":
    """An io_uring driver (Linux >= 6.7), or the test skipped."""
    if os.environ.get("SHMRING_ASYNC_DRIVER") == "0":
        pytest.skip("SHMRING_ASYNC_DRIVER=0")
    try:
        return _shmring._Driver()
    except (OSError, NotImplementedError) as e:
        pytest.skip(f"no io_uring driver here: {e}")


def test_a_publisher_in_another_process_wakes_the_loop_through_its_io_uring_driver(name):
    """On Linux >= 6.7 each loop gets an io_uring driver (shmring/_aio.py): the loop's own thread
    reaps the futex waits, so the wake-ups are counted as the driver's."""
    probe = driver_or_skip()
    before = probe.wakeups()
    del probe
    n = 100
    ring = shmring.Ring.create(name, slots=8, slot_size=64)
    c = ring.consumer("gating")
    child = subprocess.Popen([sys.executable, "-c", SLOW_PUBLISHER, name, str(n)])

    async def main():
        got = []
        try:
            while True:
                got.append(int.from_bytes(await c.recv_async(), "little"))
        except shmring.Disconnected:
            pass
        return got

    try:
        got = run(main(), timeout=30)
    finally:
        child.wait(30)
    assert got == list(range(n))
    through = _shmring._Driver().wakeups() - before
    assert through > n // 2, f"{through} of {n} wake-ups through the driver"
    assert _shmring._async_pending() == 0


def test_a_dispatch_hands_its_tokens_back_without_ringing_the_notifier(name):
    """``_Notifier.dispatch(driver)`` (python/src/aio.rs): the coroutine tokens the driver's
    dispatch wakes for this loop come back from the call, and the notifier's fd is not made
    readable for them (no eventfd write and drain per wake-up)."""
    driver = driver_or_skip()
    notifier = _shmring._Notifier()
    ring = shmring.Ring.create(name, slots=8, slot_size=64)
    c = ring.consumer("gating")
    try:
        with ring.producer() as p:
            assert c._poll_ready(notifier, 7) == 1  # pending: armed in the driver's io_uring
            p.publish(b"x")
            assert select.select([driver.fileno()], [], [], 10)[0], "no completion"
            assert notifier.dispatch(driver) == [7]
            assert select.select([notifier.fileno()], [], [], 0)[0] == []
            assert c.recv(0.0) == b"x"
            c._cancel_ready(notifier, 7)
            # The reactor thread's path still rings it (a token notified outside a dispatch).
            assert c._poll_ready(notifier, 8) == 1
            p.publish(b"y")
            assert select.select([driver.fileno()], [], [], 10)[0], "no completion"
            assert driver.dispatch() == 1
            assert select.select([notifier.fileno()], [], [], 0)[0] == [notifier.fileno()]
            assert notifier.drain() == [8]
            assert select.select([notifier.fileno()], [], [], 0)[0] == []
            c._cancel_ready(notifier, 8)
    finally:
        c.close()
        ring.close()
    assert _shmring._async_pending() == 0
