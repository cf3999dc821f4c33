//! Accounting: the global and per-owner stats records, and the leak report's item type.
//!
//! A stats record is 16 words (one 128-byte line), of which 9 are counters (indices `C_*` in
//! `layout.rs`). The single mutator updates them with a `Relaxed` load and a `Relaxed` store (no
//! read-modify-write is needed with one writer, and targets without compare-and-swap can do it).
//! Readers in other processes load them `Relaxed`: each counter is exact on its own, but a
//! [`Stats`] read while the mutator runs is not a snapshot of one instant (e.g. `allocs` may
//! already include an allocation that `live` does not yet). Nothing is published through them.

use super::layout::{
    C_ALLOCS, C_BAD_FREES, C_CEILING_HITS, C_FREES, C_LIVE, C_LIVE_BYTES, C_OUT_OF_SPACE,
    C_PEAK_BYTES, C_PEAK_LIVE, RECORD_WORDS,
};
use crate::sync::{AtomicU64, Ordering};

/// Counters of one stats record: the whole allocator's ([`Allocator::stats`]) or one owner's
/// ([`Allocator::owner_stats`]).
///
/// [`Allocator::stats`]: super::Allocator::stats
/// [`Allocator::owner_stats`]: super::Allocator::owner_stats
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Live allocations now.
    pub live: u64,
    /// Requested bytes of the live allocations now.
    pub live_bytes: u64,
    /// Most live allocations at any one time.
    pub peak_live: u64,
    /// Most live requested bytes at any one time.
    pub peak_bytes: u64,
    /// Successful allocations, ever.
    pub allocs: u64,
    /// Successful frees (including those by `free_all_of`), ever.
    pub frees: u64,
    /// Allocations refused by the live-allocation or the byte ceiling.
    pub ceiling_hits: u64,
    /// Allocations refused because no free run was long enough.
    pub out_of_space: u64,
    /// Refused frees: double, foreign or invalid handles (counted for the owner who tried).
    pub bad_frees: u64,
}

/// Per-owner counters: the same record as the global one, for one owner id.
pub type OwnerStats = Stats;

/// One live allocation, as named by [`Allocator::leak_report`](super::Allocator::leak_report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leak {
    /// The owner that allocated it.
    pub owner: u16,
    /// Its handle.
    pub handle: u64,
    /// Byte offset in the arena.
    pub offset: u64,
    /// Requested length in bytes.
    pub len: u64,
    /// `now` minus the `now` given to `alloc` (saturating at 0), in the caller's clock units.
    pub age: u64,
}

/// Totals of a [`leak_report`](super::Allocator::leak_report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeakTotals {
    /// Live allocations reported.
    pub count: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// Entries skipped because their words were inconsistent (a peer overwrote them).
    pub corrupt: u64,
}

/// What [`free_all_of`](super::Allocator::free_all_of) reclaimed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Freed {
    /// Allocations freed.
    pub count: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// Entries of the owner left alone because their words were inconsistent.
    pub corrupt: u64,
}

/// A view of one stats record (16 words, see the module doc).
#[derive(Clone, Copy)]
pub(crate) struct Record<'a>(pub(crate) &'a [AtomicU64]);

impl Record<'_> {
    fn get(&self, c: usize) -> u64 {
        // Relaxed: counters publish nothing (module doc). A record always has RECORD_WORDS
        // words (checked when the allocator is built); `get` keeps this panic-free anyway.
        self.0.get(c).map_or(0, |w| w.load(Ordering::Relaxed))
    }

    fn set(&self, c: usize, v: u64) {
        if let Some(w) = self.0.get(c) {
            // Relaxed: single writer, nothing published (module doc).
            w.store(v, Ordering::Relaxed);
        }
    }

    fn bump(&self, c: usize) {
        self.set(c, self.get(c).wrapping_add(1));
    }

    /// Reads every counter.
    pub(crate) fn load(&self) -> Stats {
        Stats {
            live: self.get(C_LIVE),
            live_bytes: self.get(C_LIVE_BYTES),
            peak_live: self.get(C_PEAK_LIVE),
            peak_bytes: self.get(C_PEAK_BYTES),
            allocs: self.get(C_ALLOCS),
            frees: self.get(C_FREES),
            ceiling_hits: self.get(C_CEILING_HITS),
            out_of_space: self.get(C_OUT_OF_SPACE),
            bad_frees: self.get(C_BAD_FREES),
        }
    }

    /// Zeroes the record (used by `init`).
    pub(crate) fn clear(&self) {
        for c in 0..RECORD_WORDS {
            self.set(c, 0);
        }
    }

    /// Counts a successful allocation of `len` bytes.
    pub(crate) fn on_alloc(&self, len: u64) {
        let live = self.get(C_LIVE).saturating_add(1);
        let bytes = self.get(C_LIVE_BYTES).saturating_add(len);
        self.set(C_LIVE, live);
        self.set(C_LIVE_BYTES, bytes);
        self.set(C_PEAK_LIVE, self.get(C_PEAK_LIVE).max(live));
        self.set(C_PEAK_BYTES, self.get(C_PEAK_BYTES).max(bytes));
        self.bump(C_ALLOCS);
    }

    /// Counts a successful free of `len` bytes.
    pub(crate) fn on_free(&self, len: u64) {
        self.set(C_LIVE, self.get(C_LIVE).saturating_sub(1));
        self.set(C_LIVE_BYTES, self.get(C_LIVE_BYTES).saturating_sub(len));
        self.bump(C_FREES);
    }

    /// Counts a refusal by a ceiling.
    pub(crate) fn on_ceiling_hit(&self) {
        self.bump(C_CEILING_HITS);
    }

    /// Counts a refusal for want of space.
    pub(crate) fn on_out_of_space(&self) {
        self.bump(C_OUT_OF_SPACE);
    }

    /// Counts a refused free.
    pub(crate) fn on_bad_free(&self) {
        self.bump(C_BAD_FREES);
    }
}
