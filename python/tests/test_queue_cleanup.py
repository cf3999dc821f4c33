"""Nothing left behind: the segments of a queue whose processes all died are removed when the
next queue is created (in any process of the same user) and by ``ringctl clean``; a queue with
a live owner never is."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

import shmring

SHM = pathlib.Path("/dev/shm")
BIG = 64 << 20

pytestmark = pytest.mark.skipif(not SHM.is_dir() or sys.platform != "linux",
                                reason="named segments in /dev/shm are Linux's")

# A child that creates a queue (default name unless argv[1] names it), puts one BIG-byte
# message, says the ring's name and waits to be killed.
_CREATOR = textwrap.dedent(f"""
    import sys, time, shmring
    name = sys.argv[1] if len(sys.argv) > 1 else None
    sender, receiver = shmring.create_pair(2, max_message={BIG} + 4096, name=name)
    sender.put(bytes({BIG}), timeout=30)
    print(receiver._ring.name, flush=True)
    time.sleep(600)
""")

# A child that takes the receiving end of queue argv[1] (as unpickling a Receiver does) and
# waits to be killed.
_HOLDER = textwrap.dedent("""
    import sys, time, shmring.queue
    receiver = shmring.queue._attach_receiver(sys.argv[1])
    print("ready", flush=True)
    time.sleep(600)
""")


def _child(script, *args):
    """Starts `script`; returns the process and its first line of output."""
    p = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline().strip()
    if not line:
        p.kill()
        p.wait()
        pytest.fail(f"child exited with {p.wait()} before it was ready")
    return p, line


def _kill(p):
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL


def _segment(name):
    return SHM / f"shmring.{name}"


def _new_queue_closed():
    """Creates a queue (which sweeps first) and closes it again."""
    sender, receiver = shmring.create_pair(2)
    sender.close()
    receiver.close()


@pytest.fixture
def children():
    procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_killed_queue_is_removed_when_the_next_queue_is_created(children):
    p, name = _child(_CREATOR)
    children.append(p)
    seg = _segment(name)
    assert seg.exists()
    assert seg.stat().st_size >= BIG
    # The message's bytes are really in the segment (tmpfs blocks), not only reserved.
    assert seg.stat().st_blocks * 512 >= BIG
    _kill(p)
    _new_queue_closed()
    assert not seg.exists(), "a dead queue's segment survived create_pair"


def test_a_queue_whose_creator_is_alive_is_never_removed(children):
    p, name = _child(_CREATOR)
    children.append(p)
    seg = _segment(name)
    for _ in range(3):
        _new_queue_closed()
        assert name not in shmring.queue._sweep()
        assert seg.exists()
    _kill(p)
    _new_queue_closed()
    assert not seg.exists()


def test_a_queue_held_by_another_live_process_is_never_removed(children):
    """The creator died; a process that took its receiving end keeps the queue alive."""
    creator, name = _child(_CREATOR)
    children.append(creator)
    holder, _ = _child(_HOLDER, name)
    children.append(holder)
    seg = _segment(name)
    _kill(creator)
    for _ in range(3):
        _new_queue_closed()
        assert seg.exists(), "a queue with a live receiver was removed"
    _kill(holder)
    _new_queue_closed()
    assert not seg.exists()


def test_a_sweep_failure_never_fails_the_creation(monkeypatch):
    def broken(budget):
        raise OSError("no /dev/shm today")

    monkeypatch.setattr(shmring.queue, "_sweep_stale_queues", broken)
    with pytest.warns(RuntimeWarning, match="could not sweep stale queue segments"):
        sender, receiver = shmring.create_pair(2)
    sender.put(b"still works")
    assert receiver.get(timeout=5) == b"still works"
    sender.close()
    receiver.close()


def _ringctl():
    found = os.environ.get("SHMRING_RINGCTL") or str(
        pathlib.Path(__file__).resolve().parents[2] / "target" / "debug" / "ringctl")
    if not os.access(found, os.X_OK):
        pytest.skip(f"ringctl is not built ({found}): run `cargo build -p ringctl`, or set "
                    "SHMRING_RINGCTL to its path")
    return found


def test_ringctl_clean_removes_a_dead_queue(children):
    ringctl = _ringctl()
    # A queue given its own name: create_pair's sweep leaves it alone, ringctl clean does not.
    named = f"pytest-q-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    p, name = _child(_CREATOR, named)
    children.append(p)
    assert name == named
    seg = _segment(name)
    assert seg.stat().st_size >= BIG
    # Alive: ringctl keeps it.
    out = subprocess.run([ringctl, "clean", name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert seg.exists(), out.stdout
    _kill(p)
    _new_queue_closed()
    assert seg.exists(), "create_pair swept a queue it did not name"
    out = subprocess.run([ringctl, "clean", name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"removed {name}" in out.stdout
    assert not seg.exists()


def test_the_sweep_is_bounded_in_time(children):
    """With no time left the sweep removes at most one segment; the next one finishes."""
    script = textwrap.dedent("""
        import time, shmring
        pairs = [shmring.create_pair(2) for _ in range(3)]
        print(" ".join(r._ring.name for _, r in pairs), flush=True)
        time.sleep(600)
    """)
    p, line = _child(script)
    children.append(p)
    segs = [_segment(n) for n in line.split()]
    assert len(segs) == 3 and all(s.exists() for s in segs)
    _kill(p)
    removed, error = shmring.queue._sweep_stale_queues(0.0)
    assert error is None
    assert len(removed) <= 1
    assert sum(s.exists() for s in segs) >= 2
    start = time.monotonic()
    _new_queue_closed()
    assert time.monotonic() - start < 10
    assert not any(s.exists() for s in segs)
