//! A device ring's host side in one ring-os segment: the ring-core segment, then (at the next
//! cache line) the device table. Peers in different processes open it by name.
//!
//! The ring part is a [`ring_os::raw::Mapping`] (ring-os validation, futex wake-ups on publish); the
//! table lies past the ring's `total_len`, where ring-core never reads or writes.

use core::sync::atomic::AtomicU64;
use std::ptr::NonNull;

use ring_core::{Config, Geometry, Memory};
use ring_os::raw::{CreateOptions, Mapping, Segment, SegmentName, SizeCheck};

use super::table::{table_words, TableMemory};
use super::RingError;

/// The host half of a cross-process device ring: ring-core protocol plus device table.
#[derive(Debug)]
pub struct SharedRing {
    map: Mapping,
    table_offset: usize,
    table_words: usize,
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
    /// Creates the named segment (`0600`, exclusive) and formats the ring in it, recording this
    /// process (ring-os owner id) as its creator. The name is removed when this value is dropped.
    ///
    /// # Errors
    /// [`RingError::Segment`] (name taken, no space, bad config), [`RingError::Corrupt`].
    pub fn create(name: &str, config: &Config) -> Result<Self, RingError> {
        let g = Geometry::new(config).map_err(|_| RingError::Corrupt("invalid ring config"))?;
        let (off, words, len) = layout(&g).ok_or(RingError::Corrupt("ring too large"))?;
        let name = SegmentName::new(name).map_err(RingError::Segment)?;
        let mut seg = Segment::create_named(&name, len as u64, CreateOptions::new())
            .map_err(RingError::Segment)?;
        seg.set_unlink_on_drop(true);
        let map = Mapping::initialize(seg, config).map_err(RingError::Segment)?;
        Ok(Self {
            map,
            table_offset: off,
            table_words: words,
        })
    }

    /// Opens a segment another process created, validating the ring header and the size.
    ///
    /// # Errors
    /// [`RingError::Segment`] (not found, wrong owner or mode, invalid ring),
    /// [`RingError::Corrupt`] (no room for the table).
    pub fn open(name: &str) -> Result<Self, RingError> {
        let name = SegmentName::new(name).map_err(RingError::Segment)?;
        let seg = Segment::open_named(&name, SizeCheck::AtLeast(ring_core::CACHE_LINE as u64))
            .map_err(RingError::Segment)?;
        let map = Mapping::attach(seg).map_err(RingError::Segment)?;
        let (off, words, len) =
            layout(map.geometry()).ok_or(RingError::Corrupt("ring too large"))?;
        if map.segment().len() < len {
            return Err(RingError::Corrupt(
                "the segment is too short for the device table",
            ));
        }
        Ok(Self {
            map,
            table_offset: off,
            table_words: words,
        })
    }
}

// SAFETY: forwards to `Mapping`, whose promises hold for as long as `self` lives.
unsafe impl Memory for SharedRing {
    ring_core::forward_memory_accessors!(|s| &s.map);
    fn notify(&self, word: &ring_core::AtomicU32) {
        self.map.notify(word);
    }
}

/// The role locks (ring-os, kernel-held) live on the segment's file: the producer and each
/// consumer hold theirs for as long as they live, and their liveness is probed through it.
impl ring_os::raw::RoleFile for SharedRing {
    fn role_file(&self) -> std::os::fd::BorrowedFd<'_> {
        self.map.role_file()
    }

    fn lock_role(
        &self,
        role: ring_os::raw::lock::Role,
    ) -> Result<Option<ring_os::raw::lock::RoleLock>, ring_os::Error> {
        self.map.lock_role(role)
    }
}

impl TableMemory for SharedRing {
    /// The ring is a [`ring_os::raw::Mapping`]: every publish wakes the futex waiters.
    fn wakes_waiters(&self) -> bool {
        true
    }

    fn table(&self) -> &[AtomicU64] {
        let base: NonNull<u8> = self.map.segment().as_ptr();
        // SAFETY:
        // - `table_offset + table_words * 8 <= segment.len()` (checked at create/open), the
        //   offset is a multiple of 128 past the ring's `total_len`, so the words are in bounds,
        //   8-aligned and never touched by ring-core;
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
