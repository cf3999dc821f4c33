//! Consumers: registration, pinned (zero-copy) reads, seqlock copy-out reads, delivery classes.

use crate::class::DeliveryClass;
use crate::error::{Error, ReadError};
use crate::layout::{
    ConsumerEntry, ABORT_CODE_SHIFT, CONSUMER_ACTIVE, CONSUMER_FREE, CONSUMER_JOINING,
    FLAG_ABORTED, FLAG_CLOSED, INLINE_CAPACITY, SEQ_LIMIT, WRITER,
};
use crate::memory::{Memory, OpenJoin};
use crate::owner::OwnerId;
use crate::sync::{fence, AtomicU64, Ordering};
use crate::wait::WaitStrategy;

mod history;
mod hold;
mod member;
pub(crate) mod route;
use hold::HoldSet;
pub use hold::{Hold, DEFAULT_MAX_HOLDS, MAX_HOLDS};
use member::Member;

/// How many times one read re-targets after finding its message overwritten before it reports
/// [`ReadError::Lagging`]. Bounds every read (invariant 6 in `docs/DESIGN.md`).
pub const READ_RETRIES: u32 = 16;

/// A registered reader of the ring.
///
/// # Examples
///
/// ```
/// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer, ReadError};
/// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
/// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
/// let mut reader = Consumer::new(&seg, DeliveryClass::SkipOnLag, OwnerId::new(2).unwrap()).unwrap();
/// for i in 0..6u8 {
///     producer.try_publish(&[i; 10]).unwrap();
/// }
/// // Six messages into four slots: the two oldest are gone, and the reader is told so.
/// let msg = reader.try_pin()?;
/// assert_eq!((msg.seq(), msg.missed()), (2, 2));
/// assert_eq!(msg.bytes(), &[2u8; 10]);
/// # Ok::<(), ReadError>(())
/// ```
#[derive(Debug)]
pub struct Consumer<M: Memory> {
    mem: M,
    index: usize,
    owner: OwnerId,
    class: DeliveryClass,
    /// Next sequence to read (gating, skip-on-lag), or first sequence not yet seen (latest-only).
    next: u64,
    received: u64,
    missed_total: u64,
    /// The entry generation this consumer registered with (see [`ConsumerEntry::generation`]).
    generation: u64,
    /// The slot of the last pin handed out, until that `Pinned` is dropped. Still set at the
    /// next read only if the `Pinned` was leaked (`mem::forget`): the read then takes the pin
    /// back, so a leaked pin cannot wedge its slot.
    held: Option<usize>,
    /// The messages held by [`try_hold`](Self::try_hold) and not yet released.
    holds: HoldSet,
    /// Set for a group member ([`join_group`](Self::join_group)): its reads take messages from
    /// the group.
    member: Option<Member>,
    /// For a gating consumer that started back ([`rewind`](Self::rewind)): the head it joined
    /// at. Messages below it are read like a skip-on-lag reader's (pinned by the reader bit,
    /// lost ones counted as missed): the producer's cached gate may cover them. 0 otherwise.
    gate_from: u64,
    /// Whether the ring is never-stall (its geometry says so; cached for the read path): reads
    /// find a message's slot through its home slot's route.
    never_stall: bool,
}

/// A pinned message: a zero-copy view the producer cannot overwrite until it is dropped.
#[derive(Debug)]
pub struct Pinned<'a, M: Memory> {
    consumer: &'a mut Consumer<M>,
    slot: usize,
    seq: u64,
    len: usize,
    missed: u64,
    /// For a group member: the claim word holding the message ([`NO_CLAIM`] otherwise); one
    /// byte, so the single-consumer `Pinned` stays as small as it was.
    claim: u8,
    /// For a group member: whether the message is a redelivery.
    again: bool,
}

/// [`Pinned`]'s claim word when it is not a group member's.
const NO_CLAIM: u8 = u8::MAX;

/// What a copy-out read returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copied {
    /// The message's sequence number.
    pub seq: u64,
    /// Bytes copied into the buffer.
    pub len: usize,
    /// Messages skipped before this one (0 for a gating consumer).
    pub missed: u64,
    /// The message's metadata words.
    pub meta: [u64; 2],
    /// A group member's message that was handed out before (to a member that died, or by a
    /// read that did not finish): at-least-once delivery says it again. Always false outside
    /// groups.
    pub redelivered: bool,
}

/// Why one attempt at one sequence failed.
enum Miss {
    /// The slot already holds a later message (or is being rewritten for one).
    Overrun,
    Fatal(ReadError),
}

impl<M: OpenJoin> Consumer<M> {
    /// Registers a consumer of `class` in the first free consumer-table entry, on memory that
    /// carries no liveness contract ([`OpenJoin`]; for any other memory see
    /// [`new_unchecked`](Self::new_unchecked)).
    ///
    /// A gating or skip-on-lag consumer starts at the current head: it receives messages
    /// published from now on. A latest-only consumer starts at the newest message present when
    /// it joins (a frame grabber that opens the ring after the frame was published gets it).
    ///
    /// ```compile_fail,E0277
    /// // RawMemory (what an OS mapping opens) is not `OpenJoin`: a consumer registered there
    /// // without its liveness lock would be reclaimed, and its pinned bytes overwritten, by a
    /// // producer that judges it dead.
    /// use ring_core::{Consumer, DeliveryClass, OwnerId, RawMemory};
    /// fn join(raw: &RawMemory) {
    ///     let _ = Consumer::new(raw, DeliveryClass::Gating, OwnerId::new(9).unwrap());
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::ConsumerTableFull`].
    pub fn new(mem: M, class: DeliveryClass, owner: OwnerId) -> Result<Self, Error> {
        // SAFETY: `M: OpenJoin`: nothing judges participants on this memory dead, so only an
        // `unsafe` `Producer::reclaim` (whose caller answers for it) can reclaim us.
        unsafe { Self::new_unchecked(mem, class, owner) }
    }

    /// Registers a consumer of `class` in consumer-table entry `index`, if it is free.
    /// On failure the memory comes back with the error.
    ///
    /// # Errors
    /// [`Error::NoSuchConsumer`] beyond the table, [`Error::EntryBusy`] when the entry is
    /// taken.
    #[allow(
        clippy::result_large_err,
        reason = "the memory handle is given back to the caller"
    )]
    pub fn new_at(
        mem: M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
    ) -> Result<Self, (M, Error)> {
        // SAFETY: as in `new`.
        unsafe { Self::new_at_unchecked(mem, index, class, owner) }
    }
}

impl<M: Memory> Consumer<M> {
    /// [`new`](Self::new) on any memory.
    ///
    /// # Safety
    /// For as long as the returned consumer (or a [`Pinned`] of it) lives, whatever judges the
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
    fn in_any_entry(
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
    fn registered(
        mem: M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
        generation: u64,
    ) -> Self {
        let never_stall = mem.geometry().config().never_stall;
        Self {
            mem,
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
            gate_from: 0,
        }
    }

    /// The registration protocol for entry `index`; returns the generation and start point.
    fn register(
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

    /// This consumer's consumer-table index (its reader bit is `1 << index`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The delivery class.
    pub fn class(&self) -> DeliveryClass {
        self.class
    }

    /// The memory this consumer reads.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Messages received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Messages skipped so far (0 for a gating consumer, except history it started back into
    /// and found overwritten: see [`rewind`](Self::rewind)).
    pub fn missed(&self) -> u64 {
        self.missed_total
    }

    /// The next sequence this consumer will read.
    pub fn cursor(&self) -> u64 {
        self.next
    }

    /// The owner id of the ring's producer (0 when none), for liveness checks by the caller.
    pub fn producer_owner(&self) -> u64 {
        // Relaxed: an identity to check, not a synchronisation point.
        self.mem.producer_line().owner.load(Ordering::Relaxed)
    }

    /// This consumer's entry, if it still holds it: same owner, same generation, ACTIVE. Every
    /// write to shared state goes through this check, so a consumer whose entry was reclaimed
    /// (see [`Producer::reclaim`](crate::Producer::reclaim)) writes nothing.
    fn own_entry(&self) -> Result<&ConsumerEntry, ReadError> {
        let e = self.mem.consumer_entry(self.index);
        // Relaxed: our own entry; a reclaim changes these (the generation first), and we only
        // detect it. Whoever reclaims promised we are not inside a call meanwhile.
        if e.generation.load(Ordering::Relaxed) != self.generation
            || e.owner.load(Ordering::Relaxed) != self.owner.get()
            || e.state.load(Ordering::Relaxed) != CONSUMER_ACTIVE
        {
            return Err(ReadError::Evicted);
        }
        Ok(e)
    }

    fn check_registered(&self) -> Result<(), ReadError> {
        self.own_entry().map(|_| ())
    }

    /// True while this consumer still holds its entry (it was not reclaimed).
    pub fn is_registered(&self) -> bool {
        self.own_entry().is_ok()
    }

    /// The entry generation this consumer registered with.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Chooses the sequence to read next by delivery class, or says why there is none.
    ///
    /// Gating and skip-on-lag consumers follow the slot: message `next` is published once slot
    /// `next % n` holds its final stamp, so the common case reads that one line (which carries
    /// a small message too) and never the producer's `head` line. `head` is read only by
    /// latest-only consumers and by a consumer whose slot already holds a later message (it
    /// must learn how far behind it is).
    #[inline]
    fn target(&self) -> Result<(u64, u64), ReadError> {
        if self.never_stall {
            return self.target_routed();
        }
        self.target_with(|c, seq| c.stamp_at_home(seq))
    }

    /// [`target`](Self::target) on a never-stall ring: the stamp of the slot the route names.
    /// Out of line, and the default ring's path calls nothing, so it keeps its small frame.
    #[inline(never)]
    fn target_routed(&self) -> Result<(u64, u64), ReadError> {
        self.target_with(Self::stamp_of)
    }

    #[inline(always)]
    fn target_with(&self, stamp_of: impl Fn(&Self, u64) -> u64) -> Result<(u64, u64), ReadError> {
        match self.class {
            DeliveryClass::LatestOnly => self.target_by_head(),
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => {
                let seq = self.next;
                if seq >= SEQ_LIMIT {
                    // The start point came from a corrupt `head`; stamps would overflow.
                    return Err(ReadError::Corrupt(
                        "the consumer's cursor is beyond the sequence range",
                    ));
                }
                let want = 2 * seq + 2;
                let stamp = stamp_of(self, seq);
                if stamp == want {
                    Ok((seq, 0))
                } else if stamp < want {
                    // Not published yet (an older message, or this one being written).
                    Err(self.empty_or_closed(|c| c.stamp_of(seq) < want))
                } else {
                    self.target_by_head()
                }
            }
        }
    }

    /// Chooses the sequence to read from `head`: the newest for latest-only, the oldest still
    /// in the ring for a consumer that was overrun.
    fn target_by_head(&self) -> Result<(u64, u64), ReadError> {
        let line = self.mem.producer_line();
        // Acquire: pairs with the producer's Release `head` store.
        let head = line.head.load(Ordering::Acquire);
        if head >= SEQ_LIMIT {
            // Only a corrupt peer writes such a head; computing stamps from it would overflow.
            return Err(ReadError::Corrupt(
                "the published head is beyond the sequence range",
            ));
        }
        // Acquire: as above; a re-check after a close (see `empty_or_closed`).
        let unchanged = |c: &Self| c.mem.producer_line().head.load(Ordering::Acquire) == head;
        let n = self.mem.geometry().slots() as u64;
        let (seq, skipped) = match self.class {
            DeliveryClass::LatestOnly => {
                if head == 0 || head - 1 < self.next {
                    return Err(self.empty_or_closed(unchanged));
                }
                (head - 1, head - 1 - self.next)
            }
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => {
                if self.next >= head {
                    return Err(self.empty_or_closed(unchanged));
                }
                let oldest = head.saturating_sub(n);
                if self.next < oldest {
                    (oldest, oldest - self.next)
                } else {
                    (self.next, 0)
                }
            }
        };
        Ok((seq, skipped))
    }

    /// `Empty`, or the ring's ending once it is closed and `still_empty` confirms that nothing
    /// was published before the close.
    fn empty_or_closed(&self, still_empty: impl Fn(&Self) -> bool) -> ReadError {
        let line = self.mem.producer_line();
        // Acquire: pairs with the producer's Release `fetch_or` in `close`, which follows every
        // publish of that producer: the re-check below sees them.
        let flags = line.flags.load(Ordering::Acquire);
        if flags & FLAG_CLOSED != 0 && still_empty(self) {
            if flags & FLAG_ABORTED != 0 {
                return ReadError::Aborted {
                    code: (flags >> ABORT_CODE_SHIFT) as u16,
                };
            }
            return ReadError::Closed;
        }
        ReadError::Empty
    }

    /// The words message `len` bytes long lies in: the header's inline words for a small one,
    /// the payload area otherwise (`len` ≤ the slot capacity, checked by the caller).
    fn message_words(&self, slot: usize, len: usize) -> &[AtomicU64] {
        if len <= INLINE_CAPACITY {
            &self.mem.slot_header(slot).inline
        } else {
            self.mem.payload(slot)
        }
    }

    /// Pins the next message (by delivery class) without blocking.
    ///
    /// # Errors
    /// [`ReadError::Empty`], [`ReadError::Closed`], [`ReadError::Lagging`] (overwritten
    /// [`READ_RETRIES`] times in a row), [`ReadError::Evicted`], [`ReadError::Corrupt`].
    pub fn try_pin(&mut self) -> Result<Pinned<'_, M>, ReadError> {
        if self.member.is_some() {
            return self.member_pin();
        }
        let (seq, missed, (slot, len)) = self.read_next(|c, seq| c.pin_seq(seq))?;
        self.held = Some(slot);
        Ok(Pinned {
            consumer: self,
            slot,
            seq,
            len,
            missed,
            claim: NO_CLAIM,
            again: false,
        })
    }

    /// The read loop both kinds of read share: target the next sequence by delivery class,
    /// `attempt` it, and on an overrun count the lost message and re-target, at most
    /// [`READ_RETRIES`] times. Returns the sequence read, the messages skipped before it, and
    /// what `attempt` returned.
    fn read_next<T>(
        &mut self,
        mut attempt: impl FnMut(&Self, u64) -> Result<T, Miss>,
    ) -> Result<(u64, u64, T), ReadError> {
        self.check_registered()?;
        if let Some(slot) = self.held.take() {
            // The last `Pinned` was leaked (its drop would have cleared `held`): no borrow of
            // its bytes can be alive now, so take the pin back. The message is not consumed.
            let hdr = self.mem.slot_header(slot);
            // A gating reader's bit is set only below `gate_from`; clearing a clear bit is
            // harmless, so this clears it whenever it may be set.
            self.refuse_pin(hdr, 1u64 << self.index, self.pins(0));
        }
        let start = self.next;
        let mut missed = 0;
        for _ in 0..READ_RETRIES {
            let (seq, skipped) = match self.target() {
                Ok(t) => t,
                Err(e) => return Err(self.count_skipped(start, e)),
            };
            missed += skipped;
            match attempt(self, seq) {
                Ok(got) => {
                    self.missed_total += missed;
                    // The skipped messages are counted: step past them now, so a read after a
                    // leaked pin (which never advances) does not count them a second time.
                    self.next = seq;
                    return Ok((seq, missed, got));
                }
                Err(Miss::Overrun) => {
                    // The message is gone: count it and re-target.
                    missed += 1;
                    self.next = seq + 1;
                }
                Err(Miss::Fatal(e)) => return Err(self.count_skipped(start, e)),
            }
        }
        Err(self.count_skipped(start, ReadError::Lagging))
    }

    /// A read that returns no message counts, as missed, exactly the messages it stepped
    /// `next` past (they were overwritten while it tried). Messages it only targeted past are
    /// not counted yet: `next` did not move, so the next read skips (and counts) them again.
    fn count_skipped(&mut self, start: u64, e: ReadError) -> ReadError {
        self.missed_total += self.next - start;
        e
    }

    /// Takes back a pin bit set by a refused pin. Release: an unpin, pairing with the
    /// producer's claim CAS. A producer whose claim failed on this transient bit may have
    /// parked, so it is woken like after any unpin.
    fn refuse_pin(&self, hdr: &crate::layout::SlotHeader, bit: u64, pinned: bool) {
        if !pinned {
            return; // A gating read sets no bit (its cursor is its pin).
        }
        hdr.state.fetch_and(!bit, Ordering::Release);
        self.wake_producer();
    }

    /// Pins slot `seq % n` if it holds message `seq`; returns the slot and the length.
    #[inline]
    fn pin_seq(&self, seq: u64) -> Result<(usize, usize), Miss> {
        if self.never_stall {
            return self.pin_routed(seq);
        }
        self.pin_slot(seq, self.mem.geometry().slot_of(seq))
    }

    /// [`pin_seq`](Self::pin_seq) on a never-stall ring (out of line, as `target_routed`).
    #[inline(never)]
    fn pin_routed(&self, seq: u64) -> Result<(usize, usize), Miss> {
        let slot = self.slot_for(seq)?;
        self.pin_slot(seq, slot)
    }

    /// Pins `slot` if it holds message `seq`.
    #[inline(always)]
    fn pin_slot(&self, seq: u64, slot: usize) -> Result<(usize, usize), Miss> {
        let hdr = self.mem.slot_header(slot);
        if self.holds.holds_slot(slot) {
            // A held message keeps the producer off its slot, so no later message can be
            // published there: only a scribbled `head` or stamp targets it. Touching the bit
            // (a refused pin clears it) would release the hold under its borrowed bytes.
            return Err(Miss::Fatal(ReadError::Corrupt(
                "a read targets a slot this consumer holds: head or a stamp was scribbled",
            )));
        }
        if !self.pins(seq) {
            return self.hold_by_cursor(hdr, slot, seq);
        }
        let bit = 1u64 << self.index;
        // Acquire: pairs with the producer's Release `fetch_and` that cleared WRITER after the
        // message was written (before its final stamp), so the payload is visible. One word
        // for pins and claims gives
        // them a single total order: if our bit went in first, the claim CAS fails.
        // Release: pairs with the failure Acquire of a claim CAS that sees our bit, so the
        // producer's sweep of free entries sees our registration and leaves the bit alone.
        let prev = hdr.state.fetch_or(bit, Ordering::AcqRel);
        if prev & WRITER != 0 {
            // The producer is rewriting the slot for a later message: we saw `seq` published
            // (its final stamp, or a `head` stored after it), and the producer clears this
            // message's WRITER bit before that. Release: pairs with its claim CAS, as any
            // unpin does.
            self.refuse_pin(hdr, bit, true);
            return Err(Miss::Overrun);
        }
        // Relaxed: our target read saw `seq` published (the final stamp, or a `head` after it)
        // with Acquire, so by coherence this load sees that stamp or a later one; and a later
        // claim's odd stamp is visible through the Acquire above if its WRITER clear is.
        let stamp = hdr.stamp.load(Ordering::Relaxed);
        let want = 2 * seq + 2;
        if stamp != want {
            // Release: an unpin (see above).
            self.refuse_pin(hdr, bit, true);
            return Err(if stamp > want {
                Miss::Overrun
            } else {
                Miss::Fatal(ReadError::Corrupt(
                    "slot stamp is behind the published head",
                ))
            });
        }
        // Relaxed: stable while pinned; ordered by the Acquire above.
        let len = hdr.len.load(Ordering::Relaxed);
        let cap = self.mem.geometry().slot_capacity() as u64;
        if len > cap {
            // Release: an unpin.
            self.refuse_pin(hdr, bit, true);
            return Err(Miss::Fatal(ReadError::Corrupt(
                "message length exceeds the slot capacity",
            )));
        }
        Ok((slot, len as usize))
    }

    /// Whether this consumer's reads set a reader bit. A gating consumer's cursor is its pin:
    /// the producer claims the slot of message `seq` only once every gating cursor is past
    /// `seq` (its gating check, P12 with the consumer's Release cursor store C8), and our
    /// shared cursor stays at the message we read until we are done with it. So a gating read
    /// touches neither the pin line nor a locked instruction: only the message line.
    ///
    /// A gating consumer that started back ([`rewind`](Self::rewind)) pins the messages below
    /// the head it joined at with its bit: the producer's cached gate may cover their slots.
    #[inline]
    fn pins(&self, seq: u64) -> bool {
        self.class != DeliveryClass::Gating || seq < self.gate_from
    }

    /// `pin_seq` for a gating consumer: message `seq` is ours to read in place while our
    /// shared cursor is at most `seq` (see [`pins`](Self::pins)); check that the slot holds it.
    fn hold_by_cursor(
        &self,
        hdr: &crate::layout::SlotHeader,
        slot: usize,
        seq: u64,
    ) -> Result<(usize, usize), Miss> {
        // Acquire: pairs with the producer's Release stamp store that published `seq`, so the
        // message's words are visible (the target's load already did, this re-load is for
        // reads that targeted through `head`).
        let stamp = hdr.stamp.load(Ordering::Acquire);
        let want = 2 * seq + 2;
        if stamp != want {
            // The gating check keeps the producer off this slot: another stamp is a peer's
            // scribble (or a reclaimed, still running consumer, which `own_entry` reports).
            return Err(if stamp > want {
                Miss::Overrun
            } else {
                Miss::Fatal(ReadError::Corrupt(
                    "slot stamp is behind the published head",
                ))
            });
        }
        // Relaxed: stable while our cursor holds the slot; ordered by the Acquire above.
        let len = hdr.len.load(Ordering::Relaxed);
        if len > self.mem.geometry().slot_capacity() as u64 {
            return Err(Miss::Fatal(ReadError::Corrupt(
                "message length exceeds the slot capacity",
            )));
        }
        Ok((slot, len as usize))
    }

    /// Copies the next message (by delivery class) into `buf` with the seqlock, without
    /// pinning: the producer is never held back by a copy reader (except a gating one, by its
    /// cursor).
    ///
    /// # Errors
    /// As [`try_pin`](Self::try_pin), and [`ReadError::BufferTooSmall`] (the consumer does not
    /// advance: retry with a larger buffer).
    pub fn try_copy(&mut self, buf: &mut [u8]) -> Result<Copied, ReadError> {
        if self.member.is_some() {
            return self.member_copy(buf);
        }
        let pin_only = self.mem.geometry().config().pin_only;
        let (seq, missed, (len, meta)) = self.read_next(|c, seq| {
            if pin_only {
                c.copy_pinned_seq(seq, buf)
            } else {
                c.copy_seq(seq, buf)
            }
        })?;
        self.advance(seq, false);
        Ok(Copied {
            seq,
            len,
            missed,
            meta,
            redelivered: false,
        })
    }

    /// Reads up to `max` ready messages (by delivery class), handing each to `f` while it is
    /// pinned, then publishes the cursor once and checks for a parked producer once for the
    /// whole batch. Returns how many were read.
    ///
    /// If `f` panics, the message it was given stays unconsumed: the next read takes its pin
    /// back and reads it again. `max == 0` reads nothing and returns `Ok(0)` without looking
    /// at the ring's state (an eviction or the stream's end shows on the next read).
    ///
    /// # Errors
    /// When not even one message could be read, the error the first read gave (as
    /// [`try_pin`](Self::try_pin)); an error after the first message ends the batch and comes
    /// back from the next call.
    pub fn try_read_batch(
        &mut self,
        max: usize,
        mut f: impl FnMut(BatchItem<'_>),
    ) -> Result<usize, ReadError> {
        if self.member.is_some() {
            return self.member_batch(max, f);
        }
        let bit = 1u64 << self.index;
        let mut count = 0;
        while count < max {
            let (seq, missed, (slot, len)) = match self.read_next(|c, seq| c.pin_seq(seq)) {
                Ok(got) => got,
                Err(e) if count == 0 => return Err(e),
                Err(_) => break,
            };
            // Should `f` unwind, the next read takes the pin back (a leaked pin).
            self.held = Some(slot);
            let hdr = self.mem.slot_header(slot);
            // Relaxed: stable while pinned; ordered by the pin's Acquire.
            let meta = [
                hdr.meta[0].load(Ordering::Relaxed),
                hdr.meta[1].load(Ordering::Relaxed),
            ];
            f(BatchItem {
                words: &self.message_words(slot, len)[..len.div_ceil(8)],
                seq,
                len,
                missed,
                meta,
            });
            self.held = None;
            if self.pins(seq) {
                // Release: the unpin; pairs with the producer's Acquire claim CAS, so our
                // reads happen before its next writes to the slot. (The wake-up check is the
                // batch's.) A gating read's pin is its cursor, stored once below.
                hdr.state.fetch_and(!bit, Ordering::Release);
            }
            self.next = seq + 1;
            self.received += 1;
            count += 1;
        }
        self.publish_progress(true);
        Ok(count)
    }

    /// A copy read in a pin-only ring: pin message `seq`, copy it, unpin. The producer cannot
    /// claim the slot meanwhile, so its in-place writes never race with this read.
    fn copy_pinned_seq(&self, seq: u64, buf: &mut [u8]) -> Result<(usize, [u64; 2]), Miss> {
        let (slot, len) = self.pin_seq(seq)?;
        let hdr = self.mem.slot_header(slot);
        let bit = 1u64 << self.index;
        if len > buf.len() {
            // Release: an unpin (see `refuse_pin`).
            self.refuse_pin(hdr, bit, self.pins(seq));
            return Err(Miss::Fatal(ReadError::BufferTooSmall { needed: len }));
        }
        // Relaxed: stable while pinned; ordered by the pin's Acquire.
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        crate::words::read(self.message_words(slot, len), &mut buf[..len]);
        // Release: the unpin, pairing with the producer's claim CAS: our reads happen before
        // its next writes. (Wakes a producer parked on the pin.)
        self.refuse_pin(hdr, bit, self.pins(seq));
        Ok((len, meta))
    }

    /// One seqlock read of message `seq` into `buf`.
    #[inline]
    fn copy_seq(&self, seq: u64, buf: &mut [u8]) -> Result<(usize, [u64; 2]), Miss> {
        if self.never_stall {
            return self.copy_routed(seq, buf);
        }
        self.copy_slot(seq, self.mem.geometry().slot_of(seq), buf)
    }

    /// [`copy_seq`](Self::copy_seq) on a never-stall ring (out of line, as `target_routed`).
    #[inline(never)]
    fn copy_routed(&self, seq: u64, buf: &mut [u8]) -> Result<(usize, [u64; 2]), Miss> {
        let slot = self.slot_for(seq)?;
        self.copy_slot(seq, slot, buf)
    }

    /// One seqlock read of message `seq` from `slot` into `buf`.
    #[inline(always)]
    fn copy_slot(&self, seq: u64, slot: usize, buf: &mut [u8]) -> Result<(usize, [u64; 2]), Miss> {
        let hdr = self.mem.slot_header(slot);
        let want = 2 * seq + 2;
        // Acquire: pairs with the producer's Release stamp store that completed message `seq`.
        let s1 = hdr.stamp.load(Ordering::Acquire);
        if s1 != want {
            return Err(if s1 > want {
                Miss::Overrun
            } else {
                Miss::Fatal(ReadError::Corrupt(
                    "slot stamp is behind the published head",
                ))
            });
        }
        // Relaxed: inside the seqlock read window; validated by the re-check below.
        let len = hdr.len.load(Ordering::Relaxed);
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        let cap = self.mem.geometry().slot_capacity() as u64;
        let early = if len > cap {
            Some(Miss::Fatal(ReadError::Corrupt(
                "message length exceeds the slot capacity",
            )))
        } else if len > buf.len() as u64 {
            Some(Miss::Fatal(ReadError::BufferTooSmall {
                needed: len as usize,
            }))
        } else {
            crate::words::read(
                self.message_words(slot, len as usize),
                &mut buf[..len as usize],
            );
            None
        };
        // Acquire fence: pairs with the producer's Release fence after its odd stamp store. If
        // any word read above was written after that fence, the load below sees the odd stamp.
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence.
        let s2 = hdr.stamp.load(Ordering::Relaxed);
        if s2 != s1 {
            return Err(Miss::Overrun);
        }
        match early {
            Some(e) => Err(e),
            None => Ok((len as usize, meta)),
        }
    }

    /// Marks `seq` consumed: the local cursor, then the shared cursor, then a producer wake.
    /// `unpinned`: the read released a pin (which may be what the producer waits for).
    fn advance(&mut self, seq: u64, unpinned: bool) {
        self.next = seq + 1;
        self.received += 1;
        self.publish_progress(unpinned);
    }

    /// Publishes the local cursor and statistics to the entry (once per read, or once per
    /// batch), then wakes a parked producer if `unpinned` or gating.
    #[inline]
    fn publish_progress(&mut self, unpinned: bool) {
        let Ok(e) = self.own_entry() else {
            return; // Reclaimed: the entry is not ours to write.
        };
        // Release: pairs with the producer's Acquire cursor load in its gating scan, so that a
        // `wait_drained` that sees this cursor returns after our reads up to it (and whatever we
        // did while they were pinned). The overwrite of a slot is ordered by the unpin (pins) or
        // refused by the seqlock re-check (copies) already.
        e.cursor.store(self.shared_cursor(), Ordering::Release);
        // Relaxed: statistics for inspection.
        e.received.store(self.received, Ordering::Relaxed);
        e.missed.store(self.missed_total, Ordering::Relaxed);
        // The producer waits only for gating cursors and pins: a copy read by a non-gating
        // consumer can release nothing it waits for, so it skips the fence and the check.
        if unpinned || self.class == DeliveryClass::Gating {
            self.wake_producer();
        }
    }

    fn wake_producer(&self) {
        wake_producer(&self.mem);
    }

    /// True when a read would find a message (or the ring closed), by delivery class.
    fn ready(&self) -> bool {
        if let Some(m) = &self.member {
            return self.member_ready(m);
        }
        // Anything but `Empty` is ready: a message, `Closed`, or an error the read will report.
        !matches!(self.target(), Err(ReadError::Empty))
    }

    /// Before parking: a consumer that follows the slot reads `Empty` while its slot's stamp
    /// says "not yet"; if `head` says the message was published, a peer scribbled the stamp,
    /// and waiting would only time out. (Non-blocking reads do not look at `head` on an empty
    /// poll, so they report `Empty` for such a slot.)
    fn check_stamp_not_behind_head(&self) -> Result<(), ReadError> {
        if self.class == DeliveryClass::LatestOnly || self.member.is_some() {
            return Ok(()); // It reads from `head` (or its group's cursor) already.
        }
        // Acquire: pairs with the producer's Release `head` store, which follows the stamp
        // store of every message below it: the re-load below sees their final stamps.
        let head = self.mem.producer_line().head.load(Ordering::Acquire);
        if self.next < head && self.next < SEQ_LIMIT && self.stamp_of(self.next) < 2 * self.next + 2
        {
            return Err(ReadError::Corrupt(
                "slot stamp is behind the published head",
            ));
        }
        Ok(())
    }

    /// Waits with `wait` until a read would find a message or the ring is closed.
    ///
    /// # Errors
    /// [`ReadError::Timeout`] when `wait`'s bound ran out; [`ReadError::Evicted`];
    /// [`ReadError::Corrupt`] when the slot's stamp is behind the published `head`.
    pub fn wait_ready<W: WaitStrategy>(&mut self, wait: &mut W) -> Result<(), ReadError> {
        let line = self.mem.producer_line();
        loop {
            self.check_registered()?;
            if self.ready() {
                return Ok(());
            }
            self.check_stamp_not_behind_head()?;
            // Acquire: pairs with the producer's Release store of the futex word.
            let seen = line.publish_futex.load(Ordering::Acquire);
            // Relaxed + SeqCst fence: the Dekker handshake with `WriteSlot::publish` (head store,
            // fence, waiters load): either we see the new head now, or it sees us and wakes us.
            line.consumer_waiters.fetch_add(1, Ordering::Relaxed);
            // After the increment, before the decrement: a reclaim that sees 1 gives back a
            // count that was really taken (an over-count is harmless, an under-count would
            // lose a wake-up). Relaxed: read only by a reclaimer of this (dead) entry.
            let e = self.mem.consumer_entry(self.index);
            e.parked.store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            let ok = self.ready() || wait.wait(&line.publish_futex, seen);
            if self.check_registered().is_err() {
                // Reclaimed while parked: the reclaimer gave our count back already (or will
                // find `parked` clear because a new registration reset it): touch nothing.
                return Err(ReadError::Evicted);
            }
            e.parked.store(0, Ordering::Relaxed);
            line.consumer_waiters.fetch_sub(1, Ordering::Relaxed);
            if !ok {
                return Err(ReadError::Timeout);
            }
        }
    }

    /// Waits for, then pins, the next message (see [`try_pin`](Self::try_pin)).
    ///
    /// # Errors
    /// As `try_pin` and [`wait_ready`](Self::wait_ready).
    pub fn pin<W: WaitStrategy>(&mut self, wait: &mut W) -> Result<Pinned<'_, M>, ReadError> {
        self.wait_ready(wait)?;
        // `head` only grows, so a read that `wait_ready` found ready stays ready.
        self.try_pin()
    }

    /// Waits for, then copies, the next message (see [`try_copy`](Self::try_copy)).
    ///
    /// # Errors
    /// As `try_copy` and [`wait_ready`](Self::wait_ready).
    pub fn copy<W: WaitStrategy>(
        &mut self,
        buf: &mut [u8],
        wait: &mut W,
    ) -> Result<Copied, ReadError> {
        loop {
            self.wait_ready(wait)?;
            match self.try_copy(buf) {
                Err(ReadError::Empty) => continue,
                other => return other,
            }
        }
    }
}

/// The consumer side of the producer-parking handshake: after progress the producer may wait
/// for (an unpin, a gating advance, leaving, becoming ready), wake it if it announced it parks.
fn wake_producer<M: Memory + ?Sized>(mem: &M) {
    let line = mem.producer_line();
    // SeqCst: Dekker handshake with `Producer::park` (it stores `producer_waiting`, fences,
    // then re-checks cursors and pins): either it sees our progress or we see it waiting.
    fence(Ordering::SeqCst);
    // Relaxed: ordered by the fence.
    if line.producer_waiting.load(Ordering::Relaxed) != 0 {
        // Release: pairs with the producer's Acquire load of the drain word.
        line.drain_futex.fetch_add(1, Ordering::Release);
        mem.notify(&line.drain_futex);
    }
}

impl<M: Memory> Drop for Consumer<M> {
    fn drop(&mut self) {
        let Ok(e) = self.own_entry() else {
            return; // Reclaimed: the entry is not ours any more.
        };
        // Take our bit back from every slot: a `Pinned` leaked with `mem::forget` left it set,
        // and the entry is about to be free. No `Pinned` borrows us now, so no pinned bytes are
        // in use. Before FREE: once the entry is free, the bit may be a new holder's.
        let bit = 1u64 << self.index;
        for i in 0..self.mem.geometry().slots() {
            // Release: an unpin, pairing with the producer's claim CAS.
            self.mem
                .slot_header(i)
                .state
                .fetch_and(!bit, Ordering::Release);
        }
        // A member's unfinished claims end with it (a `Hold` not released was delivered).
        // Relaxed: ordered by the Release store of FREE below.
        for w in &e.claims {
            w.store(0, Ordering::Relaxed);
        }
        // Dropped while counted as parked (a panic unwound out of a wait strategy): give the
        // count back. Relaxed: as in `wait_ready`.
        if e.parked.swap(0, Ordering::Relaxed) != 0 {
            self.mem
                .producer_line()
                .consumer_waiters
                .fetch_sub(1, Ordering::Relaxed);
        }
        // Relaxed: the entry is about to be free; FREE below (Release) orders it.
        e.ready.store(0, Ordering::Relaxed);
        // Release: pairs with the producer's Acquire state load: our reads are done before the
        // entry stops gating the producer, and a `wait_drained` that sees FREE returns after
        // everything we did.
        e.state.store(CONSUMER_FREE, Ordering::Release);
        // Release: pairs with the next registrant's Acquire owner CAS (which then sees FREE).
        e.owner.store(0, Ordering::Release);
        self.wake_producer();
    }
}

impl<M: Memory> Pinned<'_, M> {
    /// The memory of the ring this pin holds a slot of (for the payload binding in `arena`).
    #[cfg(feature = "alloc")]
    pub(crate) fn memory(&self) -> &M {
        self.consumer.memory()
    }

    /// The message's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Messages skipped before this one (0 for a gating consumer that keeps up).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Whether a group member's message was handed out before (see [`Copied::redelivered`]).
    pub fn redelivered(&self) -> bool {
        self.again
    }

    /// The message length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot index the message lies in.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The message's metadata words.
    pub fn meta(&self) -> [u64; 2] {
        let hdr = self.consumer.mem.slot_header(self.slot);
        // Relaxed: stable while pinned (the producer cannot claim the slot).
        [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ]
    }

    /// The payload as atomic words (the last one zero-padded past `len`).
    pub fn words(&self) -> &[AtomicU64] {
        &self.consumer.message_words(self.slot, self.len)[..self.len.div_ceil(8)]
    }

    /// Copies the message into `out` (which must be at least `len()` bytes; extra is untouched).
    /// Returns the number of bytes copied.
    pub fn copy_to(&self, out: &mut [u8]) -> usize {
        let n = self.len.min(out.len());
        crate::words::read(
            self.consumer.message_words(self.slot, self.len),
            &mut out[..n],
        );
        n
    }

    /// The message bytes, zero-copy.
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    pub fn bytes(&self) -> &[u8] {
        let words = self.consumer.message_words(self.slot, self.len);
        // SAFETY:
        // - the words span `words.len() * 8 ≥ len` bytes (len ≤ capacity was checked at pin,
        //   and inline words are used only for `len ≤ INLINE_CAPACITY`);
        // - `AtomicU64` has the layout of `u64`, so its bytes may be viewed as `u8`s;
        // - while this pin is held the producer cannot claim the slot (the claim CAS needs a
        //   zero reader mask; for a gating consumer, whose pin is its cursor, the gating check
        //   needs our shared cursor past `seq`, which `Drop` stores only after the borrow; for
        //   a group member, whose pin is its claim, the gating scan sees the claim until
        //   `Drop` clears it after the borrow: G1–G4 in docs/PROTOCOL.md), so
        //   no one writes these bytes for the borrow's life; other readers only read. A hostile process could still write them: shared memory cannot stop a
        //   peer that ignores the protocol, which the threat model (`docs/DESIGN.md`) accepts for pinned reads.
        unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<u8>(), self.len) }
    }
}

impl<M: Memory> Drop for Pinned<'_, M> {
    fn drop(&mut self) {
        let c = &mut *self.consumer;
        if self.claim != NO_CLAIM {
            c.finish(usize::from(self.claim));
            return;
        }
        c.held = None;
        if c.check_registered().is_err() {
            // Reclaimed: the bit and the cursor are no longer ours (a new consumer may hold
            // this entry now, with the same owner id); write nothing.
            return;
        }
        if c.pins(self.seq) {
            let hdr = c.mem.slot_header(self.slot);
            // Release: the unpin; pairs with the producer's Acquire claim CAS, so our reads of
            // the message happen before its next writes to the slot.
            hdr.state.fetch_and(!(1u64 << c.index), Ordering::Release);
        }
        // A gating consumer's pin is its cursor: the Release cursor store in `advance` lets
        // the producer's gating scan (Acquire) past this message.
        c.advance(self.seq, true);
    }
}

/// One message of [`Consumer::try_read_batch`], pinned while the callback runs.
#[derive(Debug)]
pub struct BatchItem<'a> {
    words: &'a [AtomicU64],
    seq: u64,
    len: usize,
    missed: u64,
    meta: [u64; 2],
}

impl BatchItem<'_> {
    /// The message's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Messages skipped before this one (0 for a gating consumer that keeps up).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// The message length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The message's metadata words.
    pub fn meta(&self) -> [u64; 2] {
        self.meta
    }

    /// The payload as atomic words (the last one zero-padded past `len`).
    pub fn words(&self) -> &[AtomicU64] {
        self.words
    }

    /// Copies the message into `out`; returns the number of bytes copied.
    pub fn copy_to(&self, out: &mut [u8]) -> usize {
        let n = self.len.min(out.len());
        crate::words::read(self.words, &mut out[..n]);
        n
    }

    /// The message bytes, zero-copy.
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` covers `len.div_ceil(8) * 8 ≥ len` bytes of the pinned slot (cut by
        // `try_read_batch` after the pin checked `len`); `AtomicU64` has the layout of `u64`;
        // the pin is held until the callback this item was given to returns, and the item (a
        // higher-ranked borrow) cannot outlive that call, so no one writes the bytes meanwhile
        // (as for `Pinned::bytes`).
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}
