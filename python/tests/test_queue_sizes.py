"""Objects of any size with no configuration: spill segments, unbounded capacity, a small
/dev/shm, nothing reserved up front, spills swept after a crash."""

import glob
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import shmring
import workers


def spills_of(sender):
    return workers.spills(sender._ring.name)


def test_a_message_larger_than_the_arena_spills_into_a_segment_the_sender_reuses():
    sender, receiver = shmring.create_pair(2)
    big = np.arange(40_000_000, dtype=np.uint8)  # > the 64 MiB arena's share of one message
    sender.put(big, timeout=5)
    first = spills_of(sender)
    assert len(first) == 1
    got = receiver.get(timeout=5)
    assert got.flags.writeable and np.array_equal(got, big)
    # Acknowledged by the get: the next spilled message reuses the segment (no new one).
    sender.put(big[::-1].copy(), timeout=5)
    assert spills_of(sender) == first
    assert np.array_equal(receiver.get(timeout=5), big[::-1])
    sender.put({"a": big, "b": big[:10]}, timeout=5)
    view = receiver.get(timeout=5, zero_copy=True)
    assert np.array_equal(view["a"], big) and not view["a"].flags.writeable
    # A zero-copy message keeps its segment busy while its parts live: the next spilled
    # message gets a second one, and the view still shows its own bytes.
    sender.put(np.zeros(40_000_000, np.uint8), timeout=5)
    assert len(spills_of(sender)) == 2
    assert np.array_equal(view["a"], big)
    del view
    assert not receiver.get(timeout=5).any()
    sender.put(b"x" * 70_000_000, timeout=5)
    assert receiver.get(timeout=5) == b"x" * 70_000_000
    left = spills_of(sender)
    assert len(left) == 1  # the two idle ones were too small for it: they went
    sender.close()
    # Every message was acknowledged: the sender's close removes its segments.
    assert not any(os.path.exists(p) for p in left)
    receiver.close()


@pytest.mark.parametrize("size", [(4 << 20) - 1, 4 << 20, (5 << 20) + 77, 40_000_037])
@pytest.mark.parametrize("offset", [0, 1, 13])
def test_large_parts_copy_exactly_at_any_alignment(size, offset):
    # Parts from 4 MiB up are copied with streaming stores (src/copy.rs) in the arena and in a
    # spill segment, by put and by the copying get: every byte, at any source alignment and
    # length (a head, 64-byte blocks, a tail).
    sender, receiver = shmring.create_pair(2, max_message=8 << 20)
    base = (np.arange(size + offset, dtype=np.uint64) * 2654435761 >> 7).astype(np.uint8)
    part = base[offset:]  # a buffer that starts off any 16-byte boundary when offset > 0
    sender.put(part, timeout=5)
    got = receiver.get(timeout=5)
    assert got.flags.writeable and np.array_equal(got, part)
    sender.put({"a": part, "b": part[::-1].copy()}, timeout=5)
    view = receiver.get(timeout=5, zero_copy=True)
    assert np.array_equal(view["a"], part) and np.array_equal(view["b"], part[::-1])
    del view
    sender.close()
    receiver.close()


def maps_of(path):
    """How many mappings of the file ``path`` this process has."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(path))


def test_a_receiver_keeps_a_pooled_spill_mapped_until_the_sender_lets_it_go():
    sender, receiver = shmring.create_pair(2)
    big = np.arange(40_000_000, dtype=np.uint8)
    sender.put(big, timeout=5)
    (path,) = spills_of(sender)
    assert np.array_equal(receiver.get(timeout=5), big)
    consumer = receiver._consumer
    assert consumer._spills_mapped() == 1
    # The sender reuses its segment; the receiver reads the next messages through the mapping
    # it kept (one mapping of the file here, the sender's, and one kept by the receiver).
    for i in range(3):
        sender.put(np.full(40_000_000, i, np.uint8), timeout=5)
        got = receiver.get(timeout=5)
        assert got[0] == got[-1] == i
        assert spills_of(sender) == [path] and consumer._spills_mapped() == 1
        assert maps_of(path) == 2
    # An idle pooled segment the sender removes is marked gone: the receiver's next get lets
    # its mapping go (the file's memory with it).
    time.sleep(2.2)
    sender.put(b"small", timeout=5)  # removes the idle spill (IDLE: 2 s)
    assert not os.path.exists(path)
    assert receiver.get(timeout=5) == b"small"
    assert consumer._spills_mapped() == 1  # not let go yet: a get of a spill looks
    sender.put(big, timeout=5)
    assert np.array_equal(receiver.get(timeout=5), big)
    assert consumer._spills_mapped() == 1 and maps_of(path + " (deleted)") == 0
    sender.close()
    receiver.close()


def test_a_closed_pair_leaves_no_spill_segment():
    sender, receiver = shmring.create_pair(2)
    for i in range(3):
        sender.put(np.full(40_000_000, i, np.uint8), timeout=5)
        assert receiver.get(timeout=5)[0] == i
    assert len(spills_of(sender)) == 1
    name = sender._ring.name  # the sender forgets its ring on close
    sender.close()
    assert workers.spills(name) == []
    receiver.close()


def test_the_sender_reuses_a_spill_when_its_slot_comes_round():
    sender, receiver = shmring.create_pair(1)
    sender.put(np.zeros(80_000_000, np.uint8), timeout=5)
    first = spills_of(sender)
    assert len(first) == 1
    # A member of the receivers' group that copies the slot's bytes only (as a receiver
    # that died after reading would, it never acknowledges the spill) consumes the message.
    raw = sender._ring.consumer(group=shmring.queue._GROUP)
    assert raw.recv(timeout=5)[:4] == b"SRQS"
    raw.close()
    sender.put("small", timeout=5)  # claims the slot again: the segment is free
    assert receiver.get(timeout=5) == "small"
    sender.put(np.ones(80_000_000, np.uint8), timeout=5)
    assert spills_of(sender) == first
    assert receiver.get(timeout=5).all()
    sender.close()
    receiver.close()


def test_spills_beyond_the_pool_get_segments_of_their_own_removed_after_get():
    keep = 4  # spill.rs KEEP
    sender, receiver = shmring.create_pair(8)
    for i in range(keep + 2):
        sender.put(np.full(30_000_000, i, np.uint8), timeout=5)
    assert len(spills_of(sender)) == keep + 2
    for i in range(keep + 2):
        assert receiver.get(timeout=5)[0] == i
    # The pool's segments stay for reuse; the two of their own went with their gets.
    left = spills_of(sender)
    assert len(left) == keep
    sender.close()
    receiver.close()
    assert not any(os.path.exists(p) for p in left)


def test_an_idle_pooled_spill_is_removed_at_a_later_put():
    sender, receiver = shmring.create_pair(2)
    sender.put(np.zeros(40_000_000, np.uint8), timeout=5)
    receiver.get(timeout=5)
    first = spills_of(sender)
    assert len(first) == 1
    time.sleep(2.2)  # spill.rs IDLE
    sender.put(np.zeros(30_000_000, np.uint8), timeout=5)  # the idle one goes; a new one
    left = spills_of(sender)
    assert len(left) == 1 and left != first
    receiver.get(timeout=5)
    sender.close()
    receiver.close()


def _two_spilled_and_sender_closed():
    """A receiver with two unread spilled messages (zeros, then ones) whose sender closed,
    and the spills' paths."""
    sender, receiver = shmring.create_pair(2)
    sender.put(np.zeros(80_000_000, np.uint8), timeout=5)
    sender.put(np.ones(90_000_000, np.uint8), timeout=5)
    left = spills_of(sender)
    assert len(left) == 2
    sender.close()
    assert all(os.path.exists(p) for p in left)  # the receiver may still drain them
    return receiver, left


def test_closing_both_ends_removes_unread_spilled_messages():
    receiver, left = _two_spilled_and_sender_closed()
    with pytest.warns(RuntimeWarning, match="discarded 2"):
        receiver.close()
    assert not any(os.path.exists(p) for p in left)


def test_a_receiver_draining_after_the_sender_closed_removes_the_spills():
    receiver, left = _two_spilled_and_sender_closed()
    assert not receiver.get(timeout=5).any()
    assert receiver.get(timeout=5, zero_copy=True).all()  # its parts go at once
    assert not any(os.path.exists(p) for p in left)
    receiver.close()


@pytest.mark.parametrize("capacity", [None, 0])
def test_capacity_none_or_zero_is_unbounded(capacity):
    sender, receiver = shmring.create_pair(capacity)
    for i in range(3000):
        sender.put_nowait(i)
    arrays = [np.full(100_000, i, np.int64) for i in range(40)]  # 32 MB unread, some spilled
    for a in arrays:
        sender.put_nowait(a)
    assert [receiver.get_nowait() for _ in range(3000)] == list(range(3000))
    for a in arrays:
        assert np.array_equal(receiver.get_nowait(), a)
    assert sender.wait_for_all_ack(timeout=5)
    sender.close()
    receiver.close()


def test_bad_capacities_are_refused():
    with pytest.raises(ValueError):
        shmring.create_pair(-1)
    with pytest.raises(TypeError):
        shmring.create_pair(1.5)


def test_the_arena_is_not_reserved_for_capacity_times_max_message():
    sender, receiver = shmring.create_pair(64, max_message=512 << 20)
    size = os.path.getsize(f"/dev/shm/shmring.{sender._ring.name}")
    assert size < 80 << 20, size  # was 65 x 512 MiB
    sender.close()
    receiver.close()


SMALL_SHM = """
import errno, numpy as np, shmring
for capacity in (8, None, 2):
    sender, receiver = shmring.create_pair(capacity)
    sender.put("small", timeout=5)
    assert receiver.get(timeout=5) == "small"
    sender.put(np.ones(1 << 20, np.uint8), timeout=5)
    assert receiver.get(timeout=5).sum() == 1 << 20
    try:
        sender.put(np.zeros(32 << 20, np.uint8), timeout=5)
    except OSError as e:
        assert isinstance(e, shmring.NoSpace) and e.errno == errno.ENOSPC, e
        assert "no room" in str(e), e
    else:
        raise SystemExit("a 32 MiB message fit into a 16 MiB /dev/shm")
    sender.put("still usable", timeout=5)
    assert receiver.get(timeout=5) == "still usable"
    assert sender.wait_for_all_ack(timeout=5)
    sender.close(); receiver.close()
print("ok")
"""


def _private_mounts():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _private_mounts(), reason="needs root and unshare -m for a 16 MiB /dev/shm")
def test_a_16_mib_dev_shm_takes_small_messages_and_refuses_a_large_one_clearly(tmp_path):
    script = tmp_path / "small_shm.py"
    script.write_text(SMALL_SHM)
    cmd = 'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "$0" "$1"'
    r = subprocess.run(["unshare", "-m", "sh", "-c", cmd, sys.executable, str(script)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


CRASH = """
import os, signal, numpy as np, shmring
sender, receiver = shmring.create_pair(2)
sender.put(np.zeros(100_000_000, np.uint8), timeout=5)
print(sender._ring.name, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_queue_and_its_spill_are_swept_by_the_next_create_pair(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    name = r.stdout.strip()
    assert name.startswith("q-"), r.stderr
    left = glob.glob(f"/dev/shm/shmring.{name}*")
    assert len(left) == 2, left  # the queue and its spill
    sender, receiver = shmring.create_pair(1)
    assert glob.glob(f"/dev/shm/shmring.{name}*") == []
    sender.close()
    receiver.close()


BIG = textwrap.dedent("""
import os, sys, time, multiprocessing as mp, numpy as np, shmring

def produce(sender, nbytes, count):
    for i in range(count):
        a = np.empty(nbytes, np.uint8); a[::4096] = i % 251; a[-1] = 7
        sender.put(a)
    sender.close()

if __name__ == "__main__":
    nbytes, count = int(sys.argv[1]), int(sys.argv[2])
    sender, receiver = shmring.create_pair()
    p = mp.get_context("spawn").Process(target=produce, args=(sender, nbytes, count))
    t = time.perf_counter(); p.start()
    for i in range(count):
        got = receiver.get(timeout=600)
        assert got.nbytes == nbytes and got[0] == i % 251 and got[-1] == 7
        del got
    p.join(600); assert p.exitcode == 0
    print(f"{count} x {nbytes / 1e9:.1f} GB in {time.perf_counter() - t:.1f} s")
""")


@pytest.mark.slow
@pytest.mark.parametrize("nbytes,count", [(4_000_000_000, 1), (1_000_000_000, 10)])
def test_a_4_gb_object_and_10_gb_through_one_pair_with_default_settings(tmp_path, nbytes, count):
    script = tmp_path / "big.py"
    script.write_text(BIG)
    started = time.perf_counter()
    r = subprocess.run([sys.executable, str(script), str(nbytes), str(count)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    print(r.stdout.strip(), f"(whole run {time.perf_counter() - started:.1f} s)")


@pytest.mark.parametrize("capacity", [None, 0])
def test_an_unbounded_queue_takes_more_than_its_ring_without_waiting(capacity):
    n = shmring.queue._UNBOUNDED_SLOTS * 2 + 100  # more than the ring holds: a backlog
    sender, receiver = shmring.create_pair(capacity)
    started = time.monotonic()
    for i in range(n):
        sender.put_nowait(i)  # never Full, never waits for a receiver
    sender.put(np.full(1000, 7), timeout=0)
    assert time.monotonic() - started < 30
    assert len(sender._backlog) > 0
    assert not sender.wait_for_all_ack(timeout=0.05)  # nobody read anything yet
    assert [receiver.get(timeout=5) for _ in range(n)] == list(range(n))  # in order
    assert (receiver.get(timeout=5) == 7).all()
    assert sender.wait_for_all_ack(timeout=5) and not sender._backlog
    sender.close()
    receiver.close()


def test_closing_an_unbounded_sender_ends_the_stream_after_its_backlog():
    n = shmring.queue._UNBOUNDED_SLOTS + 500
    sender, receiver = shmring.create_pair(None)
    for i in range(n):
        sender.put_nowait(i)
    sender.close()  # returns at once; the feeder ends the stream after the backlog
    assert sender.closed
    with pytest.raises(shmring.Closed):
        sender.put_nowait(-1)
    assert [receiver.get(timeout=5) for _ in range(n)] == list(range(n))
    with pytest.raises(shmring.Disconnected):
        receiver.get(timeout=5)
    receiver.close()


BACKLOG_AT_EXIT = textwrap.dedent("""
import sys, multiprocessing as mp, shmring

def read(receiver, n, out):
    got = [receiver.get(timeout=60) for _ in range(n)]
    with open(out, "w") as f:
        f.write("all" if got == list(range(n)) else "wrong")

if __name__ == "__main__":
    n = shmring.queue._UNBOUNDED_SLOTS + 3000
    sender, receiver = shmring.create_pair(None)
    for i in range(n):
        sender.put_nowait(i)
    reader = mp.get_context("spawn").Process(target=read, args=(receiver, n, sys.argv[1]))
    reader.start()
    print(len(sender._backlog) > 0, flush=True)
    # No close, no join: exiting waits for the backlog to go out to the reader.
""")


def test_a_process_exiting_with_a_backlog_waits_for_it_to_go_out(tmp_path):
    script, out = tmp_path / "backlog.py", tmp_path / "got"
    script.write_text(BACKLOG_AT_EXIT)
    r = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "True", (r.stdout, r.stderr)
    assert out.read_text() == "all"
