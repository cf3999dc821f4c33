//! The single producer: claim → write → publish (or abort), gating, recovery and reclaim.

use crate::class::DeliveryClass;
use crate::error::{ClaimError, Error};
use crate::layout::{ProducerLine, SEQ_LIMIT, WRITER};
use crate::memory::{Memory, OpenJoin};
use crate::owner::OwnerId;
use crate::sync::Ordering;

mod claim;

mod fast;
mod group;
mod never_stall;
mod publish;
mod reclaim;
mod write_slot;

/// The ring's one writer.
///
/// There is at most one `Producer` per segment: [`Producer::new`] claims the producer line's
/// owner word with a compare-and-swap, so a second producer (in any process) gets
/// [`Error::ProducerExists`].
///
/// # Examples
///
/// ```
/// use ring_core::{ClaimError, Config, HeapSegment, OwnerId, Producer};
/// let seg = HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap();
/// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
/// let mut slot = producer.try_claim()?;
/// slot.write(b"frame 0").unwrap();
/// slot.set_meta([7, 0]);
/// assert_eq!(slot.publish()?, 0);
/// assert_eq!(producer.published(), 1);
/// # Ok::<(), ClaimError>(())
/// ```
#[derive(Debug)]
pub struct Producer<M: Memory> {
    mem: M,
    owner: OwnerId,
    /// Local copy of the publish cursor (the producer is its only writer): every sequence below
    /// it is complete in its slot (its stamp is final).
    head: u64,
    /// The `head` value last stored to the producer line. Equal to `head` except inside a
    /// batch, which stores `head` once at its end.
    stored_head: u64,
    /// Claims of sequences below this bound need no gating scan: the smallest gating cursor
    /// seen (or the scanned sequence, if smaller), plus the slot count. Cursors only grow, and a
    /// consumer that joins later starts at a head at least the scanned sequence, so the bound
    /// stays valid.
    gate_ok_below: u64,
    /// Whether a SeqCst fence has run since the last `head` store (see `try_claim`).
    fenced: bool,
    /// On a never-stall ring, the slot of the newest published message (`usize::MAX`: none
    /// known): the producer never claims it, so a latest-only reader always finds the newest.
    newest_slot: usize,
    /// Whether the ring is never-stall (cached from the geometry for the claim and publish).
    never_stall: bool,
    /// The producer line's epoch this producer started with (its fencing token).
    epoch: u32,
    /// The consumers this producer reclaimed (readers that died without leaving).
    lost: LostReaders,
}

/// A claimed slot. Write the message, then [`publish`](WriteSlot::publish) it; dropping it
/// without publishing aborts (the sequence number is reused by the next claim).
#[derive(Debug)]
pub struct WriteSlot<'a, M: Memory> {
    producer: &'a mut Producer<M>,
    slot: usize,
    seq: u64,
    len: usize,
    meta: [u64; 2],
    done: bool,
    /// The payload was lent out as `&mut [u8]` ([`WriteSlot::loan`]), which zeroed the last
    /// word's padding itself: `publish` then stores no payload word (it never mixes an atomic
    /// store into memory just written through a plain reference).
    loaned: bool,
    /// The whole message is small and was written into the payload area and the message line
    /// at once, each padded ([`WriteSlot::fill`]): `finish` has nothing left to copy.
    inlined: bool,
}

/// What [`Producer::reclaim`] cleared for a dead consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reclaimed {
    /// The consumer-table index.
    pub index: usize,
    /// The owner the entry belonged to.
    pub owner: u64,
    /// Slots whose pin by this consumer was cleared.
    pub pins_cleared: u32,
    /// The consumer's cursor when it was reclaimed, as it last published it: exact for a
    /// gating consumer; for one that does not gate, up to
    /// [`PROGRESS_EVERY`](crate::PROGRESS_EVERY)` - 1` reads behind if it died while streaming.
    pub cursor: u64,
    /// False when the entry was already free (reclaim is idempotent).
    pub was_registered: bool,
}

/// A consumer that ended without leaving: its holder died (or was judged dead), and this
/// producer reclaimed its entry. A consumer that finished leaves its entry itself and is never
/// one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostReader {
    /// What the reclaim cleared (entry, owner, pins, the reader's cursor).
    pub reclaimed: Reclaimed,
    /// The reader's class as its entry recorded it (`None`: a value no class has).
    pub class: Option<DeliveryClass>,
    /// Messages this producer had published when it reclaimed the reader: a gating reader
    /// whose `reclaimed.cursor` is below this died before it consumed everything.
    pub published: u64,
}

impl LostReader {
    /// Messages a gating reader had not consumed when it died (0 for other classes, which
    /// never promised to read everything).
    pub fn unread(&self) -> u64 {
        match self.class {
            Some(DeliveryClass::Gating) => self.published.saturating_sub(self.reclaimed.cursor),
            _ => 0,
        }
    }
}

/// The readers a producer lost: [`Producer::lost_readers`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostReaders {
    /// Readers reclaimed so far.
    pub total: u64,
    /// Of those, gating readers (the stream's lossless readers).
    pub gating: u64,
    /// The most recent one.
    pub last: Option<LostReader>,
    /// The first gating reader that died with messages unread, if any.
    pub first_gating_unread: Option<LostReader>,
}

/// Why [`WriteSlot::loan`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoanError {
    /// The ring has optimistic copy readers, which may read the slot while it is written:
    /// create it pin-only, or write with `write_at`.
    NotPinOnly,
    /// The loan is longer than the slot.
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
}

impl core::fmt::Display for LoanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotPinOnly => f.write_str(
                "in-place writes need a pin-only ring (Config::with_pin_only): copy readers may \
                 read the slot while it is written; write with write_at instead",
            ),
            Self::TooLarge { len, capacity } => {
                write!(
                    f,
                    "a loan of {len} bytes does not fit in a {capacity}-byte slot"
                )
            }
        }
    }
}

impl core::error::Error for LoanError {}

/// The message is larger than the slot (or the allocation): nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// Bytes the reservation holds.
    pub reserved: usize,
    /// End offset the write would have reached.
    pub attempted: usize,
}

impl core::fmt::Display for Overflow {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "write of {} bytes refused: the reservation holds {} (nothing was written)",
            self.attempted, self.reserved
        )
    }
}

impl core::error::Error for Overflow {}

impl<M: OpenJoin> Producer<M> {
    /// Becomes the ring's producer, on memory that carries no liveness contract.
    ///
    /// The unchecked form, for memory whose participants some liveness oracle may judge dead
    /// (ring-os's role locks), is [`new_unchecked`](Self::new_unchecked): a producer built
    /// there without taking part in that oracle would be "taken over" while it still writes.
    ///
    /// ```compile_fail,E0277
    /// // RawMemory (what an OS mapping opens) is not `OpenJoin`: no safe producer on it.
    /// use ring_core::{OwnerId, Producer, RawMemory};
    /// fn join(raw: &RawMemory) {
    ///     let _ = Producer::new(raw, OwnerId::new(1).unwrap()); // error[E0277]: not OpenJoin
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::ProducerExists`] when another producer owns the ring.
    pub fn new(mem: M, owner: OwnerId) -> Result<Self, Error> {
        // SAFETY: `M: OpenJoin`: no liveness oracle judges participants on this memory, so
        // only an `unsafe` `take_over` (whose caller answers for it) can displace us.
        unsafe { Self::new_unchecked(mem, owner) }
    }
}

impl<M: Memory> Producer<M> {
    /// Becomes the ring's producer on any memory.
    ///
    /// Reopens a ring a previous producer closed; clears a `WRITER` bit a previous producer left
    /// behind (its unpublished message is dropped).
    ///
    /// # Safety
    /// For as long as the returned producer (or a [`WriteSlot`] of it) lives, whatever judges
    /// the liveness of this ring's participants judges it alive: no [`take_over`](Self::take_over)
    /// of it runs on a "the owner is dead" verdict. ring-os, for example, takes the producer's
    /// role lock first and holds it for the producer's whole life; the safe
    /// [`new`](Self::new) is for [`OpenJoin`] memory, where no such verdict exists.
    ///
    /// # Errors
    /// [`Error::ProducerExists`] when another producer owns the ring.
    pub unsafe fn new_unchecked(mem: M, owner: OwnerId) -> Result<Self, Error> {
        let line = mem.producer_line();
        // Success AcqRel: Acquire synchronises with the previous producer's Release store of 0
        // in `Drop`, so its last `head` is visible; Release publishes nothing yet but keeps a
        // takeover's later stores after the claim. Failure Relaxed: we only report the value.
        line.owner
            .compare_exchange(0, owner.get(), Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|found| Error::ProducerExists { owner: found })?;
        Ok(Self::start(mem, owner))
    }

    /// Takes the ring over from a producer that died (`dead` is its owner id).
    ///
    /// The slot the dead producer was writing, if any, is released and its half-written
    /// message dropped (its stamp is made odd from the dead claim's marker, so readers of the
    /// old message see an overrun, and the sequence number is reused). Messages it published stay readable.
    /// The producer line's epoch moves on, so the displaced producer, should it still run,
    /// gets [`ClaimError::Displaced`] from every later claim and publish and writes nothing
    /// to the ring's shared state again.
    ///
    /// `ring-os` offers the safe form: it takes over only after the kernel released the dead
    /// producer's liveness lock.
    ///
    /// # Safety
    /// The producer `dead` is not inside a call on this ring and holds no [`WriteSlot`] (a dead
    /// process holds none). A live producer's `WriteSlot` would keep writing payload words that
    /// readers of the new producer's messages may have pinned as `&[u8]`.
    ///
    /// ```compile_fail,E0133
    /// use ring_core::{Config, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap();
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let _ = Producer::take_over(&seg, id(2), id(1)); // error[E0133]: requires unsafe
    /// ```
    ///
    /// # Errors
    /// [`Error::OwnerMismatch`] when `dead` is not the current producer.
    pub unsafe fn take_over(mem: M, owner: OwnerId, dead: OwnerId) -> Result<Self, Error> {
        let line = mem.producer_line();
        // As in `new`: Acquire pairs with the dead producer's last Release stores.
        line.owner
            .compare_exchange(dead.get(), owner.get(), Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|found| Error::OwnerMismatch { found })?;
        // A producer that died parked left its flag up; no one else parks on the drain word.
        // Relaxed: only the producer parks; read by consumers after their SeqCst fence.
        line.producer_waiting.store(0, Ordering::Relaxed);
        Ok(Self::start(mem, owner))
    }

    fn start(mem: M, owner: OwnerId) -> Self {
        let line = mem.producer_line();
        // Relaxed: the fencing token is compared, not synchronised on. A displaced producer
        // that runs again sees a different epoch at its next claim or publish (the caller of
        // `take_over` guaranteed it is not inside one now).
        let epoch = line.epoch.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        // Relaxed: only the producer writes `flags`, and we own the line now. Reopens the ring
        // and forgets how the previous stream ended.
        line.flags.store(0, Ordering::Relaxed);
        for i in 0..mem.geometry().slots() {
            let hdr = mem.slot_header(i);
            // Relaxed: only a producer sets WRITER, and we own the ring now.
            if hdr.state.load(Ordering::Relaxed) & WRITER != 0 {
                // The previous producer died holding the slot: its message may be partly
                // overwritten, so the stamp must not name it any more.
                claim::drop_claim(hdr);
            }
            // Release: a slot the previous producer held is handed to readers again; pairs with
            // their Acquire `fetch_or` in a pin (which then sees the odd stamp stored above).
            hdr.state.fetch_and(!WRITER, Ordering::Release);
        }
        // Relaxed: ordered after the owner CAS (Acquire) above.
        let stored = line.head.load(Ordering::Relaxed);
        let mem_never_stall = mem.geometry().config().never_stall;
        let (head, newest_slot) = if mem_never_stall {
            never_stall::start_head(&mem, stored)
        } else {
            (Self::start_head(&mem, stored), never_stall::NO_SLOT)
        };
        if head != stored {
            // Release: pairs with consumers' Acquire `head` loads.
            line.head.store(head, Ordering::Release);
        }
        Self {
            mem,
            owner,
            head,
            stored_head: head,
            gate_ok_below: 0,
            fenced: false,
            newest_slot,
            never_stall: mem_never_stall,
            epoch,
            lost: LostReaders::default(),
        }
    }

    /// At a (re)start: `head` moved past the messages a predecessor published (final stamp)
    /// without storing `head`.
    fn start_head(mem: &M, mut head: u64) -> u64 {
        // A message is published by its stamp; `head` follows. A predecessor that died between
        // a final stamp and its `head` store (or inside a batch) left complete messages beyond
        // `head` that stamp-following consumers may have read already: move `head` past them
        // rather than rewrite those sequences. At most one lap of slots.
        let n = mem.geometry().slots() as u64;
        let start_head = head;
        while head < SEQ_LIMIT && head - start_head < n {
            // Acquire: pairs with the predecessor's Release stamp store, so the message is
            // complete for whoever reads `head` after our Release store below.
            let stamp = mem
                .slot_header(mem.geometry().slot_of(head))
                .stamp
                .load(Ordering::Acquire);
            if stamp != 2 * head + 2 {
                break;
            }
            head += 1;
        }
        head
    }

    /// Fails with [`ClaimError::Displaced`] when another producer started on this ring since
    /// this one did (the owner word or the epoch moved).
    fn check_epoch(&self) -> Result<(), ClaimError> {
        self.check_epoch_in(self.mem.producer_line())
    }

    /// [`check_epoch`](Self::check_epoch) with `line`, this ring's producer line, already
    /// looked up.
    #[inline(always)]
    fn check_epoch_in(&self, line: &ProducerLine) -> Result<(), ClaimError> {
        // Relaxed: a fencing check, not a synchronisation point (see `start`).
        let epoch = line.epoch.load(Ordering::Relaxed);
        let owner = line.owner.load(Ordering::Relaxed);
        if epoch != self.epoch || owner != self.owner.get() {
            return Err(ClaimError::Displaced { owner, epoch });
        }
        Ok(())
    }

    /// True when another producer took the ring over: this one can no longer publish.
    pub fn is_displaced(&self) -> bool {
        self.check_epoch().is_err()
    }

    /// The memory this producer writes.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// This producer's owner id.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// Number of messages published so far (the next sequence number).
    pub fn published(&self) -> u64 {
        self.head
    }
}
