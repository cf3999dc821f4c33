"""The duplex channel: two rings opened and closed as one object; either side's ending
(finished, aborted, died) reaches the other; allocations by handle across processes; a peer
killed while it views an allocation leaves nothing live once its death is seen."""

import os
import signal

import pytest

import alloc_workers
import shmring


@pytest.fixture
def dname(name):
    yield name
    for suffix in (".ab", ".ba"):
        try:
            os.unlink(f"/dev/shm/shmring.{name}{suffix}")
        except FileNotFoundError:
            pass


def test_echo_and_a_finished_ending(spawn, dname):
    with shmring.Duplex.create(dname, slot_size=1024) as a:
        out = spawn.Queue()
        child = spawn.Process(target=alloc_workers.duplex_side_b, args=(dname, "echo", out))
        child.start()
        for i in range(100):
            a.send(b"msg %d" % i, timeout=10)
            assert a.recv(timeout=10) == (b"msg %d" % i)[::-1]
    assert out.get(timeout=10) == "finished"  # b saw a's close as finished
    child.join(10)
    assert child.exitcode == 0


def test_an_abort_reaches_the_peer_with_its_code(spawn, dname):
    a = shmring.Duplex.create(dname)
    out = spawn.Queue()
    child = spawn.Process(target=alloc_workers.duplex_side_b, args=(dname, "abort", out))
    child.start()
    assert a.recv(timeout=10) == b"bye"
    with pytest.raises(shmring.Aborted) as e:
        a.recv(timeout=10)
    assert e.value.code == 7 and a.peer_ended == "aborted"
    child.join(10)
    a.close()


def test_a_finished_peer_in_a_thread(dname):
    a = shmring.Duplex.create(dname)
    b = shmring.Duplex.open(dname)
    b.send(b"x")
    b.close()
    assert a.recv(timeout=1) == b"x"
    with pytest.raises(shmring.Disconnected):
        a.recv(timeout=1)
    assert a.peer_ended == "finished"
    a.close()


def test_a_peer_killed_while_viewing_leaves_nothing_live(spawn, dname):
    a = shmring.Duplex.create(dname)
    out = spawn.Queue()
    child = spawn.Process(target=alloc_workers.duplex_side_b, args=(dname, "view-and-hang", out))
    child.start()
    try:
        block = a.allocate(64)
        memoryview(block)[:5] = b"hello"
        a.send(str(block.handle).encode(), timeout=10)
        assert out.get(timeout=10) == b"hello"  # the child views it zero-copy
        assert a.inspect()["own"]["live"] == 1
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    finally:
        if child.is_alive():
            child.kill()
    with pytest.raises(shmring.Aborted) as e:
        a.recv(timeout=10)
    assert e.value.code == shmring.duplex.DIED and a.peer_ended == "aborted"
    report = a.inspect()["own"]
    assert report["live"] == 0 and report["leak_count"] == 0 and report["frees"] == 1
    a.close()
