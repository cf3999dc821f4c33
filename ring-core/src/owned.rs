//! A segment made of typed values in ordinary collections: the backend loom can model, and a
//! second in-process backend for the conformance suite.

use crate::error::{AttachError, LayoutError};
use crate::geometry::{Config, Geometry};
use crate::layout::{ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader};
use crate::memory::Memory;
use crate::owner::OwnerId;
use crate::sync::{new_u32, new_u64, AtomicU64};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// A segment whose parts are separate typed allocations rather than one byte range.
///
/// Under `--cfg ring_loom` this is the only backend (loom's atomics cannot be laid over bytes);
/// otherwise it is a convenient in-process ring and a second implementation of [`Memory`] for
/// the conformance suite.
///
/// # Examples
///
/// ```
/// use ring_core::{Config, OwnedSegment, OwnerId};
/// let seg = OwnedSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap())?;
/// # Ok::<(), ring_core::LayoutError>(())
/// ```
#[derive(Debug)]
pub struct OwnedSegment {
    geometry: Geometry,
    header: Box<SegmentHeader>,
    producer: Box<ProducerLine>,
    consumers: Vec<ConsumerEntry>,
    slots: Vec<SlotHeader>,
    payloads: Vec<Vec<AtomicU64>>,
    alloc: Vec<AtomicU64>,
}

fn words(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| new_u64(0)).collect()
}

fn slot_header() -> SlotHeader {
    SlotHeader {
        state: new_u64(0),
        route: new_u64(0),
        claim: new_u64(0),
        pad_state: core::array::from_fn(|_| new_u64(0)),
        stamp: new_u64(0),
        len: new_u64(0),
        meta: [new_u64(0), new_u64(0)],
        inline: core::array::from_fn(|_| new_u64(0)),
    }
}

fn consumer_entry() -> ConsumerEntry {
    ConsumerEntry {
        state: new_u32(0),
        class: new_u32(0),
        owner: new_u64(0),
        cursor: new_u64(0),
        missed: new_u64(0),
        received: new_u64(0),
        generation: new_u64(0),
        parked: new_u32(0),
        ready: new_u32(0),
        group: new_u64(0),
        claims: core::array::from_fn(|_| new_u64(0)),
    }
}

impl OwnedSegment {
    /// Builds and formats a segment for `config`, created by `creator`.
    ///
    /// # Errors
    /// [`LayoutError`] when the config is invalid.
    pub fn new(config: &Config, creator: OwnerId) -> Result<Self, LayoutError> {
        let this = Self::unformatted(config)?;
        this.initialize(creator);
        Ok(this)
    }

    /// Builds a segment for `config` that is not formatted yet: every word is zero (no magic,
    /// `init_state` is [`INIT_NONE`](crate::layout::INIT_NONE)), as a fresh mapping looks to an
    /// attacher before its creator formats it. [`initialize`](Self::initialize) formats it.
    /// For models of the init barrier (a creator formatting while another thread attaches).
    ///
    /// # Errors
    /// [`LayoutError`] when the config is invalid.
    pub fn unformatted(config: &Config) -> Result<Self, LayoutError> {
        let geometry = Geometry::new(config)?;
        let header = Box::new(SegmentHeader {
            magic: new_u64(0),
            abi_version: new_u32(0),
            init_state: new_u32(0),
            fingerprint: new_u64(0),
            slots: new_u32(0),
            slot_capacity: new_u32(0),
            consumers: new_u32(0),
            alloc_max_live: new_u32(0),
            alloc_arena: new_u64(0),
            producer_off: new_u64(0),
            consumers_off: new_u64(0),
            slots_off: new_u64(0),
            payloads_off: new_u64(0),
            alloc_off: new_u64(0),
            alloc_len: new_u64(0),
            total_len: new_u64(0),
            creator: new_u64(0),
            ring_flags: new_u64(0),
            history: new_u32(0),
            header_reserved: new_u32(0),
        });
        let producer = Box::new(ProducerLine {
            head: new_u64(0),
            pad_head: core::array::from_fn(|_| new_u64(0)),
            owner: new_u64(0),
            flags: new_u32(0),
            epoch: new_u32(0),
            publish_futex: new_u32(0),
            control_reserved: new_u32(0),
            pad_control: core::array::from_fn(|_| new_u64(0)),
            consumer_waiters: new_u32(0),
            drain_futex: new_u32(0),
            producer_waiting: new_u32(0),
            wake_reserved: new_u32(0),
        });
        let this = Self {
            header,
            producer,
            consumers: (0..geometry.consumers())
                .map(|_| consumer_entry())
                .collect(),
            slots: (0..geometry.slots()).map(|_| slot_header()).collect(),
            payloads: (0..geometry.slots())
                .map(|_| words(geometry.payload_words()))
                .collect(),
            alloc: words(geometry.alloc_region().1 / 8),
            geometry,
        };
        Ok(this)
    }

    /// Formats the segment for `creator` and opens the init barrier: the same code
    /// [`RawMemory::initialize`](crate::RawMemory::initialize) runs. Call it once, on a segment
    /// from [`unformatted`](Self::unformatted) (on a segment in use it resets every word).
    pub fn initialize(&self, creator: OwnerId) {
        crate::init::format(self, creator);
    }

    /// Validates the header as [`RawMemory::attach`](crate::RawMemory::attach) does (the same
    /// function, every word untrusted) and returns the geometry it describes.
    ///
    /// # Errors
    /// [`AttachError`] names the first thing found wrong (`BadMagic` or `NotInitialized` while
    /// the creator has not opened the init barrier yet).
    pub fn attach_check(&self) -> Result<Geometry, AttachError> {
        crate::raw::validate_header(&self.header, self.geometry.total_len)
    }
}

// SAFETY: as for `HeapSegment`: in-process memory whose participants nothing judges dead.
unsafe impl crate::memory::OpenJoin for OwnedSegment {}

// SAFETY: every accessor indexes a collection sized from the geometry (out-of-range indices
// panic in the bounds check instead of touching foreign memory); nothing is ever resized.
unsafe impl Memory for OwnedSegment {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    fn header(&self) -> &SegmentHeader {
        &self.header
    }
    fn producer_line(&self) -> &ProducerLine {
        &self.producer
    }
    fn consumer_entry(&self, index: usize) -> &ConsumerEntry {
        &self.consumers[index]
    }
    fn slot_header(&self, index: usize) -> &SlotHeader {
        &self.slots[index]
    }
    fn payload(&self, index: usize) -> &[AtomicU64] {
        &self.payloads[index]
    }
    fn alloc_words(&self) -> &[AtomicU64] {
        &self.alloc
    }
}
