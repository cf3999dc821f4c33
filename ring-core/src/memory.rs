//! Where a segment's bytes live: the [`Memory`] trait (its raw-bytes implementation,
//! [`RawMemory`](crate::RawMemory), is `raw.rs`).
//!
//! The protocol (`producer.rs`, `consumer.rs`) never touches bytes; it asks a `Memory` for typed
//! references to the header, the producer line, consumer entries, slot headers and payload
//! words. Two families implement it:
//! - [`RawMemory`]: validated offsets into a byte range (a heap buffer, an OS mapping): the
//!   production path;
//! - [`OwnedSegment`](crate::OwnedSegment): typed values in ordinary collections, which is the
//!   only shape loom can model (its atomics cannot be laid over raw bytes).
//!
//! This split is bbqueue's storage/coordination split.

use crate::geometry::Geometry;
use crate::layout::{ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader};
use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

/// Typed access to one segment.
///
/// # Safety
/// An implementation promises, for as long as `&self` lives:
/// - `geometry()` never changes, and `consumer_entry(i)` for `i < geometry().consumers()`,
///   `slot_header(i)` and `payload(i)` for `i < geometry().slots()` return references to memory
///   that stays valid (mapped, aligned) and is used only through these atomics by every party;
/// - `payload(i)` has exactly `geometry().payload_words()` words, and different `i` never overlap;
/// - `alloc_words()` has `geometry().alloc_region().1 / 8` words.
pub unsafe trait Memory {
    /// The validated geometry this memory was opened with.
    fn geometry(&self) -> &Geometry;
    /// The segment header.
    fn header(&self) -> &SegmentHeader;
    /// The producer line.
    fn producer_line(&self) -> &ProducerLine;
    /// Consumer-table entry `index` (`index < geometry().consumers()`).
    fn consumer_entry(&self, index: usize) -> &ConsumerEntry;
    /// Slot header `index` (`index < geometry().slots()`).
    fn slot_header(&self, index: usize) -> &SlotHeader;
    /// Payload words of slot `index` (`index < geometry().slots()`).
    fn payload(&self, index: usize) -> &[AtomicU64];
    /// The allocator region as words (empty without an allocator).
    fn alloc_words(&self) -> &[AtomicU64];
    /// Wakes every waiter parked on `word` (which lies in this memory). Memory shared between
    /// processes overrides this with a futex wake; in-process memory waits by spinning, so the
    /// default does nothing.
    fn notify(&self, word: &AtomicU32) {
        let _ = word;
    }

    /// The per-message side of the two wake-up handshakes: after a publish's `head` store
    /// (before its load of `consumer_waiters`) and after a reader's progress (before its load
    /// of `producer_waiting`). Returns whether it was a full `SeqCst` fence (the producer's
    /// registration handshake then needs no second one).
    ///
    /// The default is a `SeqCst` fence. An implementation may make it lighter (a compiler
    /// fence) only together with [`heavy_fence`](Self::heavy_fence): the pair must act as a
    /// `SeqCst` fence on each side, as `membarrier(2)`'s asymmetric fences do (see "Asymmetric
    /// fences" in docs/PROTOCOL.md). Memory safety never depends on them: a pair that is too
    /// weak loses wake-ups (a parked peer sleeps until its wait strategy's bound or the next
    /// wake-up), nothing else.
    #[inline(always)]
    fn light_fence(&self) -> bool {
        fence(Ordering::SeqCst);
        true
    }

    /// The parking side of the two wake-up handshakes: after a consumer counts itself in
    /// `consumer_waiters`, and after the producer sets `producer_waiting`, before each re-checks
    /// and sleeps. The default is a `SeqCst` fence; an implementation whose
    /// [`light_fence`](Self::light_fence) is lighter must make this one order every peer that
    /// may run the light one, or bound its sleeps.
    #[inline(always)]
    fn heavy_fence(&self) {
        fence(Ordering::SeqCst);
    }
}

/// Memory on which participants may be made by safe code: nothing judges the liveness of
/// the participants on it.
///
/// Reclaiming a consumer ([`Producer::reclaim`](crate::Producer::reclaim)) and taking a
/// producer over ([`Producer::take_over`](crate::Producer::take_over)) are `unsafe`: they
/// require the displaced participant to be inside no call and to hold no pin or slot. A
/// backend that makes those calls from *safe* code on a verdict of its own ("the owner's role
/// lock is free, so it is dead", as ring-os does) can only be sound if every participant on its
/// memory takes part in that verdict. So the safe constructors ([`Producer::new`],
/// [`Consumer::new`], [`Consumer::new_at`]) exist only for `OpenJoin` memory, and everyone
/// else goes through the `unsafe` `*_unchecked` forms, whose contract is that the verdict
/// holds for the participant they make.
///
/// [`Producer::new`]: crate::Producer::new
/// [`Consumer::new`]: crate::Consumer::new
/// [`Consumer::new_at`]: crate::Consumer::new_at
///
/// # Safety
/// No code that can be reached without `unsafe` (in this crate or any other) reclaims or
/// takes over a participant on this memory because it judged that participant dead. In
/// particular a type that implements this trait must not also be a memory that a backend's
/// liveness checks reclaim on (ring-os's `RoleFile`), and must not hand out, from safe code,
/// another `Memory` over the same bytes that is not `OpenJoin` either.
pub unsafe trait OpenJoin: Memory {}

// SAFETY: a borrow is the same memory, with the same (absent) verdicts.
unsafe impl<T: OpenJoin + ?Sized> OpenJoin for &T {}

#[cfg(feature = "alloc")]
// SAFETY: as for `&T`.
unsafe impl<T: OpenJoin + ?Sized> OpenJoin for alloc::sync::Arc<T> {}

/// Writes the six accessor methods of [`Memory`] (everything but `notify`) inside an
/// `unsafe impl Memory for …` block, forwarding each to another `Memory` reached from `self`:
/// `forward_memory_accessors!(|s| &s.inner)`. The `unsafe impl` (and its `// SAFETY:` comment)
/// stays with the caller, who answers for the forwarding target's promises.
#[macro_export]
macro_rules! forward_memory_accessors {
    (|$s:ident| $inner:expr) => {
        #[inline]
        fn geometry(&self) -> &$crate::Geometry {
            let $s = self;
            $crate::Memory::geometry($inner)
        }
        #[inline]
        fn header(&self) -> &$crate::layout::SegmentHeader {
            let $s = self;
            $crate::Memory::header($inner)
        }
        #[inline]
        fn producer_line(&self) -> &$crate::layout::ProducerLine {
            let $s = self;
            $crate::Memory::producer_line($inner)
        }
        #[inline]
        fn consumer_entry(&self, index: usize) -> &$crate::layout::ConsumerEntry {
            let $s = self;
            $crate::Memory::consumer_entry($inner, index)
        }
        #[inline]
        fn slot_header(&self, index: usize) -> &$crate::layout::SlotHeader {
            let $s = self;
            $crate::Memory::slot_header($inner, index)
        }
        #[inline]
        fn payload(&self, index: usize) -> &[$crate::AtomicU64] {
            let $s = self;
            $crate::Memory::payload($inner, index)
        }
        fn alloc_words(&self) -> &[$crate::AtomicU64] {
            let $s = self;
            $crate::Memory::alloc_words($inner)
        }
    };
}

/// The rest of [`Memory`] (the wake-up and the two fences) for a pointer to a `Memory`,
/// forwarded to the pointee.
macro_rules! forward_hooks {
    () => {
        fn notify(&self, word: &AtomicU32) {
            (**self).notify(word);
        }
        #[inline(always)]
        fn light_fence(&self) -> bool {
            (**self).light_fence()
        }
        #[inline(always)]
        fn heavy_fence(&self) {
            (**self).heavy_fence();
        }
    };
}

// SAFETY: forwards to `T`, whose promises hold for as long as the borrow.
unsafe impl<T: Memory + ?Sized> Memory for &T {
    forward_memory_accessors!(|s| &**s);
    forward_hooks!();
}

#[cfg(feature = "alloc")]
// SAFETY: forwards to `T`, which the `Arc` keeps alive.
unsafe impl<T: Memory + ?Sized> Memory for alloc::sync::Arc<T> {
    forward_memory_accessors!(|s| &**s);
    forward_hooks!();
}
