//! The free-granule bitmap: bit `g` of the bitmap is set while granule `g` is allocated.
//!
//! Bit `g` lives in word `g / 64`, bit `g % 64` (least significant first). Bits at or beyond
//! the granule count are never read. Only the mutator reads or writes the bitmap, so every
//! access is `Relaxed`: program order on that one thread is all the ordering it needs; readers
//! in other processes never look at it.
//!
//! Scans move a word (64 granules) at a time over runs of all-used or all-free words, so a
//! search costs O(bitmap words + bits inspected at run boundaries).

use crate::sync::{AtomicU64, Ordering};

/// The bitmap sub-region, with the number of granules it covers.
#[derive(Clone, Copy)]
pub(crate) struct Bitmap<'a> {
    /// At least `granules.div_ceil(64)` words (checked when the allocator is built).
    words: &'a [AtomicU64],
    /// Number of valid bits.
    granules: u64,
}

impl<'a> Bitmap<'a> {
    /// A view of `words` covering `granules` bits. Caller guarantees
    /// `words.len() * 64 >= granules`.
    pub(crate) fn new(words: &'a [AtomicU64], granules: u64) -> Self {
        debug_assert!((words.len() as u64).saturating_mul(64) >= granules);
        Self { words, granules }
    }

    /// Word `i / 64`, or 0 if out of range (cannot happen for `i < granules`).
    fn word(&self, i: u64) -> u64 {
        usize::try_from(i / 64)
            .ok()
            .and_then(|w| self.words.get(w))
            // Relaxed: mutator-only data, see the module doc.
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Index of the first granule in `from..to` whose bit equals `set`, or `to`.
    fn next_with(&self, from: u64, to: u64, set: bool) -> u64 {
        let to = to.min(self.granules);
        let mut i = from;
        while i < to {
            let raw = self.word(i);
            let bits = if set { raw } else { !raw } >> (i % 64);
            if bits != 0 {
                return (i + u64::from(bits.trailing_zeros())).min(to);
            }
            i = (i / 64 + 1) * 64;
        }
        to
    }

    /// Finds the first run of `need` free granules that lies entirely inside `from..to`.
    pub(crate) fn find_run(&self, from: u64, to: u64, need: u64) -> Option<u64> {
        let to = to.min(self.granules);
        let mut i = from;
        loop {
            let start = self.next_with(i, to, false);
            let end = start.checked_add(need)?;
            if end > to {
                return None;
            }
            let used = self.next_with(start, end, true);
            if used == end {
                return Some(start);
            }
            // `used > start`, so the scan always advances.
            i = used;
        }
    }

    /// Length of the longest run of free granules.
    pub(crate) fn largest_free(&self) -> u64 {
        let mut best = 0;
        let mut i = 0;
        while i < self.granules {
            let start = self.next_with(i, self.granules, false);
            let end = self.next_with(start, self.granules, true);
            best = best.max(end - start);
            i = end;
        }
        best
    }

    /// True when every granule in `start..start + len` is allocated. Caller guarantees the
    /// range lies inside the bitmap.
    pub(crate) fn all_set(&self, start: u64, len: u64) -> bool {
        let end = start.saturating_add(len);
        self.next_with(start, end, false) >= end
    }

    /// Sets (`used == true`) or clears every bit in `start..start + len`. Caller guarantees the
    /// range lies inside the bitmap.
    pub(crate) fn mark(&self, start: u64, len: u64, used: bool) {
        let end = start.saturating_add(len).min(self.granules);
        let mut i = start;
        while i < end {
            let bit = i % 64;
            let n = (64 - bit).min(end - i);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            if let Some(w) = usize::try_from(i / 64).ok().and_then(|w| self.words.get(w)) {
                // Relaxed: mutator-only data, see the module doc.
                let old = w.load(Ordering::Relaxed);
                let new = if used { old | mask } else { old & !mask };
                w.store(new, Ordering::Relaxed);
            }
            i += n;
        }
    }

    /// Clears the whole bitmap (used by `init`).
    pub(crate) fn clear_all(&self) {
        for w in self.words {
            // Relaxed: `init` publishes the region with the magic word's Release store.
            w.store(0, Ordering::Relaxed);
        }
    }
}
