"""Sender.claim: an array built in place in the queue's shared memory, put with no copy."""

import gc

import numpy as np
import pytest

import shmring
import workers


def test_a_claimed_array_arrives_as_put_and_is_read_only_once_put():
    sender, receiver = shmring.create_pair(2)
    with sender.claim((4, 3), "float32") as a:
        assert a.flags.writeable and a.shape == (4, 3) and a.dtype == np.float32
        a[:] = np.arange(12).reshape(4, 3)
    assert not a.flags.writeable
    got = receiver.get(timeout=5)
    assert got.dtype == np.float32 and np.array_equal(got, np.arange(12).reshape(4, 3))
    assert got.flags.writeable  # a copying get owns its copy
    sender.close()
    receiver.close()


def test_a_zero_copy_get_views_the_very_memory_the_sender_wrote():
    sender, receiver = shmring.create_pair(2)
    with sender.claim(1 << 16) as a:  # in the arena (never in the slot)
        a[:] = 3
        written = a.ctypes.data
    lo, hi = sender._ring.address_range()
    assert lo <= written < hi
    view = receiver.get(timeout=5, zero_copy=True)
    assert not view.flags.writeable and (view == 3).all()
    lo, hi = receiver._ring.address_range()
    assert lo <= view.ctypes.data < hi
    del view
    sender.close()
    receiver.close()


def test_a_large_claim_lies_in_a_pooled_spill_segment_and_is_reused():
    sender, receiver = shmring.create_pair(2)
    name = sender._ring.name
    for i in range(3):
        with sender.claim(50_000_000) as a:
            a[0], a[-1] = i, 7
        got = receiver.get(timeout=5, zero_copy=True)
        assert (got[0], got[-1], got.shape) == (i, 7, (50_000_000,))
        del got
        assert len(workers.spills(name)) == 1
    sender.close()
    receiver.close()
    assert workers.spills(name) == []


def test_an_exception_in_the_block_sends_nothing_and_removes_what_it_made():
    sender, receiver = shmring.create_pair(1)
    name = sender._ring.name
    with pytest.raises(KeyError):
        with sender.claim(50_000_000) as a:  # a new spill segment
            a[0] = 1
            raise KeyError
    assert not a.flags.writeable
    assert workers.spills(name) == []
    with pytest.raises(shmring.Empty):
        receiver.get(timeout=0.1)
    sender.put("still usable", timeout=1)  # the slot went back
    assert receiver.get(timeout=1) == "still usable"
    sender.close()
    receiver.close()


def test_a_claim_dropped_unput_gives_its_slot_back():
    sender, receiver = shmring.create_pair(1)
    claim = sender.claim(100)
    with pytest.raises(shmring.Busy):
        sender.put("while a claim is open", timeout=0.1)
    del claim
    gc.collect()
    sender.put("next", timeout=1)
    assert receiver.get(timeout=1) == "next"
    sender.close()
    receiver.close()


def test_a_put_claim_cannot_be_put_again_and_an_array_kept_is_read_only():
    sender, receiver = shmring.create_pair(2)
    claim = sender.claim(8, "int64")
    claim.array[:] = 5
    claim.put()
    with pytest.raises(shmring.Closed):
        claim.put()
    with pytest.raises(ValueError):
        claim.array[0] = 1
    assert (receiver.get(timeout=1) == 5).all()
    sender.close()
    receiver.close()


def test_a_full_queue_refuses_a_claim_like_a_put():
    sender, receiver = shmring.create_pair(1)
    sender.put(1, timeout=1)
    with pytest.raises(shmring.Full):
        sender.claim(10, block=False)
    assert receiver.get(timeout=1) == 1
    sender.close()
    receiver.close()


def test_a_dtype_of_python_objects_is_refused():
    sender, receiver = shmring.create_pair(1)
    with pytest.raises(TypeError):
        sender.claim(3, object)
    sender.close()
    receiver.close()
