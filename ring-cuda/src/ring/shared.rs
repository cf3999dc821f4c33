//! A device ring's host side in one ring-os segment: the ring-core segment, then (at the next
//! cache line) the device table. Peers in different processes open it by name.
//!
//! Waiting is by polling with back-off (`publish_with`/`read_with`); futex wake-ups are left to
//! ring-os's own `Memory` implementation once the device ring moves onto it.

use core::sync::atomic::AtomicU64;
use std::ptr::NonNull;

use ring_core::layout::{ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader};
use ring_core::{Config, Geometry, Memory, OwnerId, RawMemory};
use ring_os::{CreateOptions, Segment, SegmentName, SizeCheck};

use super::table::{table_words, TableMemory};
use super::RingError;

/// The host half of a cross-process device ring: ring-core protocol plus device table.
#[derive(Debug)]
pub struct SharedRing {
    raw: RawMemory,
    table_offset: usize,
    table_words: usize,
    // Dropped last: `raw` and the table point into this mapping.
    seg: Segment,
}

fn layout(g: &Geometry) -> Option<(usize, usize, usize)> {
    let off = g
        .total_len()
        .checked_next_multiple_of(ring_core::CACHE_LINE)?;
    let words = table_words(g.slots(), g.consumers());
    let len = off.checked_add(words.checked_mul(8)?)?;
    Some((off, words, len))
}

impl SharedRing {
    /// Creates the named segment (`0600`, exclusive) and formats the ring in it. The name is
    /// removed when this value is dropped.
    ///
    /// # Errors
    /// [`RingError::Segment`] (name taken, no space), [`RingError::Corrupt`] (bad config).
    pub fn create(name: &str, config: &Config, creator: OwnerId) -> Result<Self, RingError> {
        let g = Geometry::new(config).map_err(|_| RingError::Corrupt("invalid ring config"))?;
        let (off, words, len) = layout(&g).ok_or(RingError::Corrupt("ring too large"))?;
        let name = SegmentName::new(name).map_err(RingError::Segment)?;
        let mut seg = Segment::create_named(&name, len as u64, CreateOptions::new())
            .map_err(RingError::Segment)?;
        seg.set_unlink_on_drop(true);
        // SAFETY: the mapping is `len >= total_len` bytes, page-aligned, freshly created (no
        // one else has opened it yet) and lives in `seg`, which outlives `raw` (field order).
        let raw = unsafe { RawMemory::initialize(seg.as_ptr(), g.total_len(), config, creator) }
            .map_err(|_| RingError::Corrupt("ring-core refused the layout"))?;
        Ok(Self {
            raw,
            table_offset: off,
            table_words: words,
            seg,
        })
    }

    /// Opens a segment another process created, validating the ring header and the size.
    ///
    /// # Errors
    /// [`RingError::Segment`] (not found, wrong owner or mode), [`RingError::Corrupt`].
    pub fn open(name: &str) -> Result<Self, RingError> {
        let name = SegmentName::new(name).map_err(RingError::Segment)?;
        let seg = Segment::open_named(&name, SizeCheck::AtLeast(ring_core::CACHE_LINE as u64))
            .map_err(RingError::Segment)?;
        // SAFETY: the mapping covers `seg.len()` bytes, stays mapped while `seg` lives (which
        // outlives `raw`), and `attach` treats the bytes as untrusted.
        let raw = unsafe { RawMemory::attach(seg.as_ptr(), seg.len()) }
            .map_err(|_| RingError::Corrupt("the segment does not hold a valid ring"))?;
        let (off, words, len) =
            layout(raw.geometry()).ok_or(RingError::Corrupt("ring too large"))?;
        if seg.len() < len {
            return Err(RingError::Corrupt(
                "the segment is too short for the device table",
            ));
        }
        Ok(Self {
            raw,
            table_offset: off,
            table_words: words,
            seg,
        })
    }
}

// SAFETY: forwards to `RawMemory`, whose promises hold while the segment is mapped, which it is
// for as long as `self` lives.
unsafe impl Memory for SharedRing {
    fn geometry(&self) -> &Geometry {
        self.raw.geometry()
    }
    fn header(&self) -> &SegmentHeader {
        self.raw.header()
    }
    fn producer_line(&self) -> &ProducerLine {
        self.raw.producer_line()
    }
    fn consumer_entry(&self, index: usize) -> &ConsumerEntry {
        self.raw.consumer_entry(index)
    }
    fn slot_header(&self, index: usize) -> &SlotHeader {
        self.raw.slot_header(index)
    }
    fn payload(&self, index: usize) -> &[ring_core::AtomicU64] {
        self.raw.payload(index)
    }
    fn alloc_words(&self) -> &[ring_core::AtomicU64] {
        self.raw.alloc_words()
    }
}

impl TableMemory for SharedRing {
    fn table(&self) -> &[AtomicU64] {
        let base: NonNull<u8> = self.seg.as_ptr();
        // SAFETY:
        // - `table_offset + table_words * 8 <= seg.len()` (checked at create/open) and the
        //   offset is a multiple of 128, so the words are in bounds and 8-aligned;
        // - every process accesses these bytes only through `AtomicU64`;
        // - the mapping lives as long as `self`, which bounds the returned borrow.
        unsafe {
            core::slice::from_raw_parts(
                base.as_ptr().add(self.table_offset).cast::<AtomicU64>(),
                self.table_words,
            )
        }
    }
}
