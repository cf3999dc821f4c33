//! The read-only operations any process may call: lookup, stats and the leak report.

use super::entry::{handle, split_handle};
use super::layout::GRANULE_BYTES;
use super::ops::Snap;
use super::stats::Stats;
use super::{AllocError, Allocation, Allocator, Leak, LeakTotals};

impl Allocator<'_> {
    /// Confirms that `handle` names a live allocation and returns it (for readers: validated
    /// against the geometry; the allocation may be freed right after, see the module doc).
    ///
    /// # Errors
    ///
    /// [`AllocError::InvalidHandle`] (out of range, free, stale or changing),
    /// [`AllocError::Corrupt`].
    pub fn lookup(&self, handle: u64) -> Result<Allocation, AllocError> {
        let (idx, generation) = split_handle(handle);
        if idx >= self.geometry.max_live {
            return Err(AllocError::InvalidHandle { handle });
        }
        match self.snapshot(idx)? {
            Snap::Live {
                meta, first, len, ..
            } if meta.generation == generation => Ok(Allocation {
                handle,
                offset: first * GRANULE_BYTES,
                len,
            }),
            _ => Err(AllocError::InvalidHandle { handle }),
        }
    }

    /// The global counters (read `Relaxed`; see [`Stats`]).
    pub fn stats(&self) -> Stats {
        self.stats.load()
    }

    /// The counters of one owner.
    ///
    /// # Errors
    ///
    /// [`AllocError::BadOwner`].
    pub fn owner_stats(&self, owner: u16) -> Result<Stats, AllocError> {
        Self::check_owner(owner)?;
        Ok(self.owner_record(owner).load())
    }

    /// Calls `f` with every live allocation (owner, handle, offset, length, age at `now`), in
    /// entry order, and returns the totals. Entries that change during the scan are skipped;
    /// inconsistent ones are counted in [`LeakTotals::corrupt`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ring_core::AtomicU64;
    /// use ring_core::arena::{DEFAULT_MAX_LIVE, region_len, AllocConfig, Allocator};
    /// # let words: Vec<AtomicU64> =
    /// #     (0..region_len(1024, DEFAULT_MAX_LIVE).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let mut alloc = Allocator::init(&words, AllocConfig::new(1024))?;
    /// alloc.alloc(100, 5, 10)?;
    /// let mut seen = Vec::new();
    /// let totals = alloc.leak_report(25, |leak| seen.push((leak.owner, leak.len, leak.age)));
    /// assert_eq!(seen, [(5, 100, 15)]);
    /// assert_eq!((totals.count, totals.bytes), (1, 100));
    /// # Ok::<(), ring_core::arena::AllocError>(())
    /// ```
    pub fn leak_report(&self, now: u64, mut f: impl FnMut(Leak)) -> LeakTotals {
        let mut totals = LeakTotals::default();
        for idx in 0..self.geometry.max_live {
            match self.snapshot(idx) {
                Ok(Snap::Live {
                    meta,
                    first,
                    len,
                    stamp,
                    ..
                }) => {
                    totals.count += 1;
                    totals.bytes = totals.bytes.saturating_add(len);
                    f(Leak {
                        owner: meta.owner,
                        handle: handle(idx, meta.generation),
                        offset: first * GRANULE_BYTES,
                        len,
                        age: now.saturating_sub(stamp),
                    });
                }
                Ok(_) => {}
                Err(_) => totals.corrupt += 1,
            }
        }
        totals
    }
}
