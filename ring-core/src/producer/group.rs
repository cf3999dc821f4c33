//! The producer's side of groups: creating a group's record, and handing a dead member's
//! claims to the group's redelivery queue.

use super::Producer;
use crate::error::Error;
use crate::group::{find_group, group_key};
use crate::layout::{ConsumerEntry, CLASS_GROUP, CONSUMER_ACTIVE, CONSUMER_FREE, OWNER_GROUP};
use crate::memory::Memory;
use crate::sync::Ordering;

impl<M: Memory> Producer<M> {
    /// Creates the group `name` (competing consumers), or finds it if it exists; returns its
    /// record's consumer-table index.
    ///
    /// Consumers that [join](crate::Consumer::join_group) the group share one cursor: each
    /// message published from now on goes to exactly one live member, and the group gates
    /// the producer as one gating consumer would (it waits for the group, not for its slowest
    /// member). Messages published before any member joined wait for the first one. A group
    /// takes one consumer-table entry and lasts as long as the segment.
    ///
    /// ```
    /// use ring_core::{Config, Consumer, HeapSegment, OwnerId, Producer};
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let seg = HeapSegment::new(&Config::new(8, 16).with_consumers(4), id(1)).unwrap();
    /// let mut producer = Producer::new(&seg, id(1)).unwrap();
    /// producer.create_group("workers").unwrap();
    /// for i in 0..4u8 {
    ///     producer.try_publish(&[i]).unwrap();
    /// }
    /// let mut a = Consumer::join_group(&seg, "workers", id(2)).unwrap();
    /// let mut b = Consumer::join_group(&seg, "workers", id(3)).unwrap();
    /// let mut buf = [0u8; 16];
    /// let mut seen = Vec::new();
    /// for _ in 0..2 {
    ///     seen.push(a.try_copy(&mut buf)?.seq);
    ///     seen.push(b.try_copy(&mut buf)?.seq);
    /// }
    /// assert_eq!(seen, [0, 1, 2, 3]); // each message to exactly one member
    /// # Ok::<(), ring_core::ReadError>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ConsumerTableFull`] when no entry is free; [`Error::ProducerExists`] when this
    /// producer was displaced (the ring is its successor's).
    pub fn create_group(&mut self, name: &str) -> Result<usize, Error> {
        if self.check_epoch().is_err() {
            return Err(Error::ProducerExists {
                // Relaxed: reported only.
                owner: self.mem.producer_line().owner.load(Ordering::Relaxed),
            });
        }
        let key = group_key(name);
        if let Some(index) = find_group(&self.mem, key) {
            return Ok(index);
        }
        for index in 0..self.mem.geometry().consumers() {
            let e = self.mem.consumer_entry(index);
            // Success Acquire: pairs with the last holder's Release store of 0 (it left, or
            // was reclaimed), after which it touches nothing. Failure: the entry is taken.
            if e.owner
                .compare_exchange(0, OWNER_GROUP, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Relaxed: ordered by the owner CAS.
            if e.state.load(Ordering::Relaxed) != CONSUMER_FREE {
                // Corrupt (a state no one leaves with owner 0): give it back.
                e.owner.store(0, Ordering::Relaxed);
                continue;
            }
            self.format_record(e, key);
            // Claims below the old bound were checked without this group, which starts at
            // `head`: the next claim rescans.
            self.gate_ok_below = 0;
            return Ok(index);
        }
        Err(Error::ConsumerTableFull {
            capacity: self.mem.geometry().config.consumers,
        })
    }

    /// Fills a claimed entry as group `key`'s record, starting at `head`, and publishes it.
    fn format_record(&self, e: &ConsumerEntry, key: u64) {
        // Relaxed: published by the Release store of ACTIVE below; members and the gating scan
        // load the state with Acquire first.
        e.generation.fetch_add(1, Ordering::Relaxed);
        e.class.store(CLASS_GROUP, Ordering::Relaxed);
        e.group.store(key, Ordering::Relaxed);
        e.cursor.store(self.head, Ordering::Relaxed);
        for w in [&e.missed, &e.received] {
            w.store(0, Ordering::Relaxed);
        }
        for w in &e.claims {
            w.store(0, Ordering::Relaxed);
        }
        e.parked.store(0, Ordering::Relaxed);
        e.ready.store(0, Ordering::Relaxed);
        // Release: pairs with the Acquire state load of a joining member (`is_record_of`) and
        // of our own gating scan.
        e.state.store(CONSUMER_ACTIVE, Ordering::Release);
    }
}

/// Moves the claims of dying member entry `e` to its group's redelivery queue, so another
/// member receives them (flagged as redelivered). A claim at or past the group's cursor was
/// never taken (the member died between storing it and its cursor CAS): the cursor still
/// hands it out, so it is dropped. Runs only in the producer's thread (inside
/// `Producer::reclaim`), which is also the only thread that scans the claims for gating, so
/// no scan sees a message in neither place.
///
/// # Errors
/// [`Error::RedeliveryFull`] when the queue has no room for every claim: nothing moved, the
/// member is not reclaimed, and its claims keep gating until members drain the queue.
pub(super) fn hand_claims_to_group<M: Memory + ?Sized>(
    mem: &M,
    e: &ConsumerEntry,
) -> Result<(), Error> {
    // Relaxed: the member wrote its key before its Release store of ACTIVE, which the
    // reclaim's Acquire owner load ordered (or it never registered, and the key is 0).
    let key = e.group.load(Ordering::Relaxed);
    if key == 0 {
        return Ok(());
    }
    let Some(g) = find_group(mem, key).map(|i| mem.consumer_entry(i)) else {
        // No record (a peer scribbled it): nothing to hand to; the claims are dropped.
        clear_claims(e);
        return Ok(());
    };
    // Acquire: pairs with the members' AcqRel cursor CAS (a claim below the cursor was taken).
    let cursor = g.cursor.load(Ordering::Acquire);
    let queued = |v: u64| g.claims.iter().any(|w| w.load(Ordering::Relaxed) == v);
    let mut moving = [0u64; crate::layout::GROUP_CLAIMS];
    let mut count = 0;
    for w in &e.claims {
        // Relaxed: the dead member writes nothing more; its stores were ordered by the
        // Acquire owner load of the reclaim.
        let v = w.load(Ordering::Relaxed);
        // Relaxed `queued` loads: only the producer fills the queue (this thread).
        if v != 0 && v - 1 < cursor && !queued(v) {
            moving[count] = v;
            count += 1;
        }
    }
    // Relaxed: only this thread fills the queue, members only empty it, so free words only
    // grow in number between this count and the fills below.
    let free = g
        .claims
        .iter()
        .filter(|w| w.load(Ordering::Relaxed) == 0)
        .count();
    if free < count {
        return Err(Error::RedeliveryFull {
            needed: count,
            free,
        });
    }
    let mut next = 0;
    for w in &g.claims {
        if next == count {
            break;
        }
        // Release: pairs with the Acquire load of a member that takes it (what the dead
        // member's claim protected is still in the slot: the claim kept gating until here).
        if w.compare_exchange(0, moving[next], Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            next += 1;
        }
    }
    clear_claims(e);
    if count > 0 {
        // Members parked at the group's end (or on an empty group) take them now.
        crate::group::wake_readers(mem);
    }
    Ok(())
}

/// Empties a member entry's claims. Relaxed: the entry's Release store of FREE follows.
fn clear_claims(e: &ConsumerEntry) {
    for w in &e.claims {
        w.store(0, Ordering::Relaxed);
    }
}
