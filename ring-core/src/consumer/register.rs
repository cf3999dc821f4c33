//! Registration: taking a consumer-table entry and choosing the start point (R1-R3 in
//! docs/PROTOCOL.md).

use super::{wake_producer, Consumer, HoldSet};
use crate::class::DeliveryClass;
use crate::error::Error;
use crate::layout::{CONSUMER_ACTIVE, CONSUMER_FREE, CONSUMER_JOINING};
use crate::memory::Memory;
use crate::owner::OwnerId;
use crate::sync::{fence, Ordering};

impl<M: Memory> Consumer<M> {
    /// [`new`](Self::new) on any memory.
    ///
    /// # Safety
    /// For as long as the returned consumer (or a [`Pinned`](super::Pinned) of it) lives, whatever judges the
    /// liveness of this ring's participants judges it alive: no
    /// [`Producer::reclaim`](crate::Producer::reclaim) of its entry runs on a "the owner is
    /// dead" verdict. ring-os, for example, takes the entry's role lock before it registers
    /// and holds it until after the consumer left the entry.
    ///
    /// # Errors
    /// [`Error::ConsumerTableFull`].
    pub unsafe fn new_unchecked(
        mem: M,
        class: DeliveryClass,
        owner: OwnerId,
    ) -> Result<Self, Error> {
        // SAFETY: the caller's promise covers whichever entry we register in.
        Self::in_any_entry(mem, |m, index| unsafe {
            Self::new_at_unchecked(m, index, class, owner)
        })
    }

    /// Runs `register_at` on each entry in turn until one takes the consumer; an error other
    /// than a busy entry ends the search.
    pub(super) fn in_any_entry(
        mut mem: M,
        mut register_at: impl FnMut(M, usize) -> Result<Self, (M, Error)>,
    ) -> Result<Self, Error> {
        for index in 0..mem.geometry().consumers() {
            match register_at(mem, index) {
                Ok(c) => return Ok(c),
                Err((m, Error::EntryBusy { .. })) => mem = m,
                Err((_, e)) => return Err(e),
            }
        }
        Err(Error::ConsumerTableFull {
            capacity: mem.geometry().config.consumers,
        })
    }

    /// [`new_at`](Self::new_at) on any memory: for callers that must own the entry's index
    /// before they register (ring-os takes the entry's liveness lock first).
    ///
    /// # Safety
    /// As [`new_unchecked`](Self::new_unchecked), for entry `index`.
    ///
    /// # Errors
    /// As [`new_at`](Self::new_at).
    #[allow(
        clippy::result_large_err,
        reason = "the memory handle is given back to the caller"
    )]
    pub unsafe fn new_at_unchecked(
        mem: M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
    ) -> Result<Self, (M, Error)> {
        // SAFETY: the caller's promise is ours.
        unsafe { Self::new_at_with_hook(mem, index, class, owner, || {}) }
    }

    /// [`new_at_unchecked`](Self::new_at_unchecked) with `between_steps` run after the entry is
    /// ACTIVE and before its start point is final — where a preemption used to let a subscriber
    /// lose messages. A test hook: it lets a test inject the delay a preemption would.
    ///
    /// # Safety
    /// As [`new_unchecked`](Self::new_unchecked), for entry `index`.
    #[doc(hidden)]
    #[allow(
        clippy::result_large_err,
        reason = "the memory handle is given back to the caller"
    )]
    pub unsafe fn new_at_with_hook(
        mem: M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
        between_steps: impl FnOnce(),
    ) -> Result<Self, (M, Error)> {
        if index >= mem.geometry().consumers() {
            return Err((mem, Error::NoSuchConsumer { index }));
        }
        match Self::register(&mem, index, class, owner, 0, between_steps) {
            Some((generation, head)) => {
                let mut c = Self::registered(mem, index, class, owner, generation);
                c.next = head;
                // Relaxed: fixed at creation, validated by the attach (≤ slots).
                let history = c.mem.header().history.load(Ordering::Relaxed);
                if history > 0 && class != DeliveryClass::LatestOnly {
                    // Cannot fail for a consumer that just registered (it read nothing and is
                    // registered), but a corrupt head is reported by its first read anyway.
                    let _ = c.rewind(u64::from(history));
                }
                Ok(c)
            }
            None => Err((mem, Error::EntryBusy { index })),
        }
    }

    /// A consumer that just registered in entry `index` (its start point still to be set).
    pub(super) fn registered(
        mem: M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
        generation: u64,
    ) -> Self {
        let never_stall = mem.geometry().config().never_stall;
        let fast = super::fast_bits(class, mem.geometry().config());
        Self {
            mem,
            fast,
            index,
            owner,
            class,
            never_stall,
            next: 0,
            received: 0,
            missed_total: 0,
            generation,
            held: None,
            holds: HoldSet::new(),
            member: None,
            // Every read of another class sets the reader bit (`pins`).
            gate_from: if class == DeliveryClass::Gating {
                0
            } else {
                u64::MAX
            },
            guarded_from: if class == DeliveryClass::Gating && !never_stall {
                0
            } else {
                u64::MAX
            },
            idle: super::fast::IdlePolls::new(),
            unpublished: 0,
        }
    }

    /// The registration protocol for entry `index`; returns the generation and start point.
    pub(super) fn register(
        mem: &M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
        group: u64,
        between_steps: impl FnOnce(),
    ) -> Option<(u64, u64)> {
        let line = mem.producer_line();
        let e = mem.consumer_entry(index);
        // The entry is claimed by its owner word, so a consumer that dies at any point after
        // this CAS has left its owner id behind, and `Producer::reclaim` can free the entry.
        // Success Acquire: pairs with the previous holder's Release store of 0 (leave, reclaim or
        // a producer's sweep), which comes after its Release store of FREE and its last slot
        // access. Failure Relaxed: the entry is taken.
        e.owner
            .compare_exchange(0, owner.get(), Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // Relaxed: the owner CAS above ordered us after the previous holder's FREE.
        if e.state.load(Ordering::Relaxed) != CONSUMER_FREE {
            // A state no one leaves behind with owner 0: a corrupt entry. Give it back.
            e.owner.store(0, Ordering::Relaxed);
            return None;
        }
        // A new generation: a handle of an earlier registration (reclaimed while alive) can
        // no longer pass `check_registered`, even with the same owner id. Relaxed: we hold the
        // entry; a reclaimer's CAS on this word orders itself.
        let generation = e.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        // Relaxed: published by the Release store of ACTIVE below.
        e.state.store(CONSUMER_JOINING, Ordering::Relaxed);
        e.class.store(class as u32, Ordering::Relaxed);
        e.missed.store(0, Ordering::Relaxed);
        e.received.store(0, Ordering::Relaxed);
        e.parked.store(0, Ordering::Relaxed);
        e.ready.store(0, Ordering::Relaxed);
        // A member's key tells the gating scan to read its claims (empty now), not its cursor.
        e.group.store(group, Ordering::Relaxed);
        for w in &e.claims {
            w.store(0, Ordering::Relaxed);
        }
        // A provisional cursor (≤ the final one): a producer that sees us ACTIVE before the
        // final store below is held back at most until then.
        // Acquire: pairs with the producer's Release `head` store.
        e.cursor
            .store(line.head.load(Ordering::Acquire), Ordering::Relaxed);
        // Release: pairs with the producer's Acquire state load in its gating scan.
        e.state.store(CONSUMER_ACTIVE, Ordering::Release);
        // SeqCst: the registration handshake (see `Producer::claim_slot`): after this fence
        // either the producer sees us ACTIVE, or the `head` we load now covers every slot it
        // overwrote without seeing us.
        fence(Ordering::SeqCst);
        between_steps();
        let head = line.head.load(Ordering::Acquire);
        // A latest-only consumer starts one back, so the newest message present when it joins
        // is its first (a late-joining frame grabber gets the frame already there); it gates
        // nothing, so its cursor may lie below what the producer has overwritten (its read
        // then takes the newest message, or reports an overrun, as any latest-only read).
        let start = match class {
            DeliveryClass::LatestOnly => head.saturating_sub(1),
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => head,
        };
        // Release: pairs with the producer's Acquire cursor load.
        e.cursor.store(start, Ordering::Release);
        // Release: the start point is final; pairs with the Acquire load in
        // `Producer::ready_consumers`, so a producer that counts us publishes its next message
        // at a sequence ≥ our cursor and we receive it.
        e.ready.store(1, Ordering::Release);
        wake_producer(mem);
        Some((generation, start))
    }
}
