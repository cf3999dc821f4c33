"""Shared fixtures: a unique ring name per test, the spawn context, a spawned child that is
killed if the test leaves it running, a thread that ticks only while the GIL is free."""

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
import uuid

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (set SHMRING_SLOW=1 to run)")
    # The Ctrl-C tests need SIGINT to raise KeyboardInterrupt, as it does in a terminal. A
    # shell without job control starts background commands with SIGINT ignored, and Python
    # then installs no handler: those tests would wait for ever (`timeout=None`) and their
    # subprocesses would ignore the signal too. Install Python's own handler in that case
    # (children started by exec get SIGINT's default disposition back from it).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SHMRING_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set SHMRING_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def name():
    n = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield n
    try:
        os.unlink(f"/dev/shm/shmring.{n}")
    except FileNotFoundError:
        pass


@pytest.fixture
def spawn():
    return mp.get_context("spawn")


@pytest.fixture
def child(spawn):
    """`with child(target, *args) as proc:` runs `target(*args)` in a spawned process; one still
    alive when the block ends (a failed assertion, say) is killed."""

    @contextlib.contextmanager
    def run(target, *args):
        proc = spawn.Process(target=target, args=args)
        proc.start()
        try:
            yield proc
        finally:
            if proc.is_alive():
                proc.kill()

    return run


@contextlib.contextmanager
def _ticking():
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)

    t = threading.Thread(target=spin)
    t.start()
    try:
        yield ticks
    finally:
        stop.set()
        t.join()


@pytest.fixture
def ticking():
    """`with ticking() as ticks:` a thread appends to `ticks` every 5 ms until the block ends; it
    can only while the GIL is free, so a blocking call that holds it adds no ticks."""
    return _ticking
