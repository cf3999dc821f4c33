"""Endpoints used from several threads, interpreter exit with threads blocked in a wait, and the
queue.Queue-shaped edges (Empty, timeouts, closed, discarded messages)."""

import math
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
import zlib

import numpy as np
import pytest

import shmring


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)


def test_two_putters_and_two_getters_share_one_pair(name):
    s, r = shmring.create_pair(4, max_message=1 << 20, name=name)
    per_putter, errors_seen = 150, []
    got: list[tuple[int, int, int]] = []
    got_lock = threading.Lock()

    def putter(who: int) -> None:
        rng = np.random.default_rng(who)
        try:
            for i in range(per_putter):
                # Some inline, some in the arena (>= 64 KiB), all checksummed.
                data = rng.integers(0, 255, int(rng.integers(1, 200_000)), dtype=np.uint8)
                s.put((who, i, zlib.crc32(data), data), timeout=30)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors_seen.append(e)

    def getter() -> None:
        try:
            while True:
                try:
                    who, i, crc, data = r.get(timeout=30)
                except shmring.Disconnected:
                    return
                if zlib.crc32(data) != crc:
                    raise AssertionError(f"checksum mismatch in message {who}/{i}")
                with got_lock:
                    got.append((who, i, crc))
        except BaseException as e:  # noqa: BLE001
            errors_seen.append(e)

    threads = [threading.Thread(target=putter, args=(k,)) for k in (1, 2)]
    threads += [threading.Thread(target=getter) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads[:2]:
        t.join(120)
    s.close()
    for t in threads[2:]:
        t.join(60)
    r.close()
    assert not any(t.is_alive() for t in threads)
    assert errors_seen == [], errors_seen  # no "Already borrowed", no checksum mismatch
    assert sorted((w, i) for w, i, _ in got) == [(w, i) for w in (1, 2) for i in range(per_putter)]
    for who in (1, 2):  # each putter's messages arrive in its order within each getter
        seq = [i for w, i, _ in got if w == who]
        assert len(seq) == per_putter


def test_close_from_another_thread_wakes_a_blocked_get(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    outcome = []

    def wait() -> None:
        t0 = time.monotonic()
        try:
            r.get()  # no timeout: only close() can end it
        except BaseException as e:  # noqa: BLE001
            outcome.append((e, time.monotonic() - t0))

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    r.close()  # from this thread, while the other waits inside the native get
    closed_in = time.monotonic() - t0
    t.join(2)
    assert not t.is_alive()
    (exc, waited), = outcome
    assert isinstance(exc, shmring.Closed) and "closed" in str(exc)
    assert closed_in < 0.5 and waited < 1.0
    assert r.closed and not s.closed
    with pytest.raises(shmring.Closed):
        r.get_nowait()
    s.close()
    assert s.closed


def test_close_from_another_thread_wakes_a_blocked_put(name):
    s, r = shmring.create_pair(1, max_message=1024, name=name)
    s.put(b"fills the only slot")
    outcome = []

    def wait() -> None:
        try:
            s.put(b"no room", timeout=float("inf"))
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 0.5
    t.join(2)
    assert not t.is_alive() and len(outcome) == 1 and isinstance(outcome[0], shmring.Closed)
    # The stream ended as finished: the receiver drains the one message, then Disconnected.
    assert r.get(timeout=5) == b"fills the only slot"
    with pytest.raises(shmring.Disconnected):
        r.get(timeout=5)
    r.close()


def test_consumer_and_producer_are_shared_by_threads(name):
    with shmring.Ring.create(name, slots=4, slot_size=256) as ring:
        c, p = ring.consumer("gating"), ring.producer()
        got, failures = [], []

        def read() -> None:
            try:
                while True:
                    got.append(c.recv(timeout=10))
            except shmring.Disconnected:
                pass
            except BaseException as e:  # noqa: BLE001
                failures.append(e)

        def write(tag: bytes) -> None:
            try:
                for i in range(300):
                    p.publish(tag + i.to_bytes(4, "little"), timeout=10)
            except BaseException as e:  # noqa: BLE001
                failures.append(e)

        readers = [threading.Thread(target=read) for _ in range(2)]
        writers = [threading.Thread(target=write, args=(t,)) for t in (b"a", b"b")]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join(60)
        assert p.sent == 600
        p.close()
        for t in readers:
            t.join(60)
        assert failures == [], failures
        assert sorted(got) == sorted(t + i.to_bytes(4, "little")
                                     for t in (b"a", b"b") for i in range(300))
        # close() from another thread wakes a consumer's recv too.
        c2 = ring.consumer("gating")
        woke = []
        t = threading.Thread(target=lambda: woke.append(_raises(lambda: c2.recv())))
        t.start()
        time.sleep(0.2)
        c2.close()
        t.join(2)
        assert not t.is_alive() and isinstance(woke[0], (shmring.Closed, shmring.Disconnected))


def _raises(f):
    try:
        f()
    except BaseException as e:  # noqa: BLE001
        return e
    return None


_BLOCKED_AT_EXIT = """
import threading, time, shmring
s, r = shmring.create_pair(1, max_message=1 << 20)
s2, r2 = shmring.create_pair(1, max_message=1 << 20)
s2.put(b"full")
for target in (r.get, r.get, lambda: s2.put(b"x" * 300_000)):
    threading.Thread(target=target, daemon=True).start()
time.sleep(0.2)
print("exiting", flush=True)
"""


# Daemon threads passing messages as fast as they can when the main thread ends: they leave
# and re-take the GIL all the time, so some are on their way back when the exit begins.
_BUSY_AT_EXIT = """
import threading, time, shmring
s, r = shmring.create_pair(2, max_message=1 << 20)
def feed():
    while True:
        s.put(b"x" * 100_000)
def eat():
    while True:
        r.get()
for f in (feed, eat, eat):
    threading.Thread(target=f, daemon=True).start()
time.sleep(0.05)
print("exiting", flush=True)
"""


@pytest.mark.parametrize("run", range(3))
@pytest.mark.parametrize("script", [_BLOCKED_AT_EXIT, _BUSY_AT_EXIT], ids=["blocked", "busy"])
def test_daemon_threads_blocked_at_exit_do_not_abort(script, run):
    out = _run(script)
    # Before: SIGABRT (-6) with "FATAL: exception not rethrown" in most runs.
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.strip() == "exiting" and "FATAL" not in out.stderr


def test_sigint_while_blocked_in_get_raises_keyboard_interrupt():
    code = """
import shmring, sys
s, r = shmring.create_pair(2, max_message=1024)
print("waiting", flush=True)
try:
    r.get()
except KeyboardInterrupt:
    print("KeyboardInterrupt in get", flush=True)
    raise
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        assert time.monotonic() - t0 < 2
    finally:
        proc.kill()
    # The exception reached Python, and the interpreter exited the way an uncaught
    # KeyboardInterrupt makes it (a traceback, then death by SIGINT), not by SIGABRT.
    assert out.strip() == "KeyboardInterrupt in get", (out, err)
    assert proc.returncode == -signal.SIGINT, (proc.returncode, err)
    assert err.rstrip().endswith("KeyboardInterrupt") and "FATAL" not in err, err


def test_empty_and_end_of_stream_are_queue_empty(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with pytest.raises(queue.Empty):
        r.get_nowait()
    with pytest.raises(queue.Empty):
        r.get(timeout=0.05)
    s.put("last")
    s.close()
    assert r.get(timeout=5) == "last"
    with pytest.raises(queue.Empty) as caught:
        r.get(timeout=5)
    assert isinstance(caught.value, shmring.Disconnected)
    with pytest.raises(shmring.Disconnected):
        r.get_nowait()
    assert issubclass(shmring.Disconnected, queue.Empty)
    assert issubclass(shmring.Disconnected, shmring.Error)
    r.close()


def test_infinite_nan_and_negative_timeouts(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    with s, r:
        s.put(1, timeout=float("inf"))
        assert r.get(timeout=math.inf) == 1
        with pytest.raises(ValueError, match="NaN"):
            r.get(timeout=float("nan"))
        with pytest.raises(ValueError, match="NaN"):
            s.put(2, timeout=float("nan"))
        with pytest.raises(ValueError, match="NaN"):
            s.wait_for_all_ack(timeout=float("nan"))
        # A negative timeout does not wait (py-sharedmemory's rule).
        for negative in (-1.0, -math.inf):
            started = time.monotonic()
            with pytest.raises(queue.Empty):
                r.get(timeout=negative)
            assert time.monotonic() - started < 1
        s.put(2, timeout=-1.0)
        assert r.get(timeout=-1.0) == 2
        # block=False ignores the timeout, as queue.Queue does.
        with pytest.raises(queue.Empty):
            r.get(block=False, timeout=float("nan"))
        assert s.wait_for_all_ack(timeout=float("inf"))
    with pytest.raises(shmring.Closed):
        s.wait_for_all_ack()
    assert issubclass(shmring.Closed, BrokenPipeError)
    for end in (s, r):
        with pytest.raises(BrokenPipeError):
            end.__enter__()
    with shmring.Ring.create(name + "-r", slots=2, slot_size=64) as ring:
        c, p = ring.consumer(), ring.producer()
        p.publish(b"x", timeout=math.inf)
        assert c.recv(timeout=math.inf) == b"x"
        for bad in (float("nan"), -0.5):
            with pytest.raises(ValueError):
                c.recv(timeout=bad)
            with pytest.raises(ValueError):
                p.publish(b"y", timeout=bad)
        p.close()
        c.close()


def test_closed_properties(name):
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    assert not s.closed and not r.closed
    s.close()
    r.close()
    assert s.closed and r.closed
    s.close()  # idempotent
    r.close()
    with pytest.raises(shmring.Closed):
        s.put(1)


def test_receiver_close_warns_when_it_discards_messages(name):
    s, r = shmring.create_pair(4, max_message=1024, name=name)
    s.put(1)
    s.put(2)
    assert r.get(timeout=5) == 1
    with pytest.warns(RuntimeWarning, match="discarded 1 unread"):
        r.close()
    s.close()
    # Nothing unread: no warning.
    s, r = shmring.create_pair(4, max_message=1024, name=name + "-b")
    s.put(1)
    assert r.get(timeout=5) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r.close()
        s.close()


def test_close_from_a_signal_handler_in_the_waiting_thread(name):
    # The handler runs inside the main thread's own blocked get (between two slices): close()
    # must not wait for that get to give the receiver back (it never would), and the get
    # raises Closed.
    s, r = shmring.create_pair(2, max_message=1024, name=name)
    old = signal.signal(signal.SIGUSR1, lambda *_: r.close())
    try:
        threading.Timer(0.2, signal.raise_signal, (signal.SIGUSR1,)).start()
        t0 = time.monotonic()
        with pytest.raises(shmring.Closed):
            r.get(timeout=10)
        assert time.monotonic() - t0 < 2
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert r.closed
    s.close()
