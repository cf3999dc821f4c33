"""memfd rings: no name in /dev/shm, shared by descriptor or through ring-os's rendezvous."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import shmring
import workers


def shm_names():
    return {n for n in os.listdir("/dev/shm") if n.startswith("shmring.")}


def test_a_memfd_ring_has_no_name_and_opens_from_its_descriptor():
    before = shm_names()
    with shmring.Ring.memfd(slots=4, slot_size=256) as ring:
        assert ring.kind == "memfd" and shm_names() == before
        other = shmring.Ring.from_fd(ring.fileno())  # duplicates: each handle owns its own
        assert other.kind == "memfd" and other.slot_size == 256
        c = other.consumer("gating")
        p = ring.producer()
        p.publish(b"through the fd")
        with c.pin(timeout=5) as msg:
            lo, hi = other.address_range()
            assert lo <= np.frombuffer(msg, np.uint8).ctypes.data < hi
            assert bytes(msg) == b"through the fd"
        assert ring.inspect()["consumers"][0]["received"] == 1  # one ring, two mappings
        c.close()
        other.close()


def test_from_fd_refuses_what_is_not_a_sealed_memfd(name):
    with shmring.Ring.create(name, slots=2, slot_size=64) as named:
        assert named.kind == "named"
        with pytest.raises(shmring.Corrupt):  # a /dev/shm object carries no seals
            shmring.Ring.from_fd(named.fileno())
    r, w = os.pipe()
    try:
        with pytest.raises((shmring.Error, ValueError)):
            shmring.Ring.from_fd(r)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(ValueError):
        shmring.Ring.from_fd(-1)
    with pytest.raises(ValueError):
        shmring.Ring.from_fd(r)  # closed now: EBADF
    with pytest.raises(TypeError):
        shmring.Ring.from_fd("3")


def test_a_served_memfd_ring_reaches_a_spawned_process(spawn, child, name):
    ring = shmring.Ring.memfd(slots=4, slot_size=4096 + 64, serve=name)
    got, received, missed = workers.consumed(spawn, child, ring, "memfd:" + name, "gating", 200)
    assert [g[0] for g in got] == list(range(200)) and missed == 0


def test_connect_to_a_name_nobody_serves(name):
    start = time.monotonic()
    with pytest.raises(shmring.NotFound):
        shmring.Ring.connect(name, timeout=0.2)
    assert time.monotonic() - start < 5
    with shmring.Ring.memfd(slots=2, slot_size=64, serve=name):
        with pytest.raises(shmring.AlreadyExists):  # one server per name
            shmring.Ring.memfd(slots=2, slot_size=64, serve=name)
    with pytest.raises(shmring.NotFound):  # closing the ring stopped its server
        shmring.Ring.connect(name, timeout=0.2)
    with pytest.raises(shmring.InvalidName):
        shmring.Ring.connect("no/slashes", timeout=0.1)
