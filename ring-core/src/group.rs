//! Groups (competing consumers): what the producer and the members share.
//!
//! A group is one consumer-table entry, its *record* ([`CLASS_GROUP`], owned by
//! [`OWNER_GROUP`]): its `cursor` is the next message no member has taken, and its `claims` are
//! the redelivery queue. Each member is an ordinary gating entry whose `group` word names the
//! group and whose `claims` are the messages it took and has not finished. The producer's
//! gating floor for a group is the lowest of its cursor, its queue and its members' claims, so
//! a message leaves the ring only once a member finished it (docs/PROTOCOL.md, "Groups").

use crate::layout::{ConsumerEntry, CLASS_GROUP, CONSUMER_ACTIVE, SEQ_LIMIT};
use crate::memory::Memory;
use crate::sync::{fence, Ordering};

/// The key of group `name`: FNV-1a of its bytes, never 0 (0 marks "no group" in an entry).
///
/// ```
/// assert_eq!(ring_core::group_key("workers"), ring_core::group_key("workers"));
/// assert_ne!(ring_core::group_key("workers"), ring_core::group_key("loggers"));
/// assert_ne!(ring_core::group_key(""), 0);
/// ```
pub const fn group_key(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    if h == 0 {
        1
    } else {
        h
    }
}

/// The index of the ACTIVE record of group `key`, if the table has one.
pub(crate) fn find_group<M: Memory + ?Sized>(mem: &M, key: u64) -> Option<usize> {
    (0..mem.geometry().consumers()).find(|&i| is_record_of(mem.consumer_entry(i), key))
}

/// Whether `e` is the ACTIVE record of group `key`.
pub(crate) fn is_record_of(e: &ConsumerEntry, key: u64) -> bool {
    // Acquire: pairs with the producer's Release store of ACTIVE when it created the record,
    // so its cursor and empty queue are visible. Relaxed class and key: written before it.
    e.state.load(Ordering::Acquire) == CONSUMER_ACTIVE
        && e.class.load(Ordering::Relaxed) == CLASS_GROUP
        && e.group.load(Ordering::Relaxed) == key
}

/// The lowest sequence in `e.claims` (`u64::MAX` when every word is empty). Words that cannot
/// be a sequence (a peer's scribble) count as empty: they protect nothing real.
///
/// Acquire: in a member's entry, pairs with its Release store of 0 when it finished a message
/// (its reads happen before the producer rewrites the slot); in a record, pairs with the
/// AcqRel CAS of a member that took a queued message, so the claim it stored first is visible
/// when the producer then scans the members (`Producer::lowest_gating_cursor`).
pub(crate) fn claims_floor(e: &ConsumerEntry) -> u64 {
    let mut floor = u64::MAX;
    for w in &e.claims {
        let v = w.load(Ordering::Acquire);
        if v != 0 && v - 1 < SEQ_LIMIT {
            floor = floor.min(v - 1);
        }
    }
    floor
}

/// Whether group `key`'s stream has nothing more for the member in entry `me`: nothing queued
/// for redelivery, and no other member holds a message it has not finished (a member that
/// dies gives its messages back through the queue, so until they are finished the stream has
/// not ended for anyone).
///
/// Acquire: pairs with the producer's Release queueing (P23) and with a member's Release
/// finish (G4), so a message that reappears in the queue after its holder died is seen by the
/// check that follows the finish of the others.
pub(crate) fn drained_for<M: Memory + ?Sized>(
    mem: &M,
    record: &ConsumerEntry,
    key: u64,
    me: usize,
) -> bool {
    let empty = |e: &ConsumerEntry| e.claims.iter().all(|w| w.load(Ordering::Acquire) == 0);
    empty(record)
        && (0..mem.geometry().consumers())
            .filter(|&i| i != me)
            .map(|i| mem.consumer_entry(i))
            // Relaxed: key and class are written before the entry is ACTIVE, and a member's
            // claims are cleared before its entry is reused; a stale read only delays the end.
            .filter(|e| {
                e.group.load(Ordering::Relaxed) == key
                    && e.class.load(Ordering::Relaxed) != CLASS_GROUP
            })
            .all(empty)
}

/// Wakes the consumers parked on the publish word (a message came back to a group's queue, or
/// a member finished one after the ring closed, which may end another member's stream).
pub(crate) fn wake_readers<M: Memory + ?Sized>(mem: &M) {
    let line = mem.producer_line();
    // Release: pairs with a waiter's Acquire load of the futex word.
    line.publish_futex.fetch_add(1, Ordering::Release);
    // SeqCst: the Dekker handshake with `Consumer::wait_ready` (W2), as a publish's.
    fence(Ordering::SeqCst);
    // Relaxed: ordered by the fence.
    if line.consumer_waiters.load(Ordering::Relaxed) != 0 {
        mem.notify(&line.publish_futex);
    }
}
