//! The mutator's operations (alloc, free, reclaim) and the seqlock read of an entry.

use super::entry::{handle, split_handle, Meta};
use super::layout::{ENTRY_WORDS, E_FIRST, E_LEN, E_META, E_STAMP, GRANULE_BYTES, RECORD_WORDS};
use super::stats::Record;
use super::{AllocError, Allocation, Allocator, Freed, MAX_OWNERS};
use crate::sync::{fence, AtomicU64, Ordering};

/// A consistent read of one entry.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Snap {
    /// Free (its last meta).
    Free(Meta),
    /// Live, with fields validated against the geometry.
    Live {
        /// Decoded meta.
        meta: Meta,
        /// First granule.
        first: u64,
        /// Requested length (≥ 1).
        len: u64,
        /// Granules spanned.
        granules: u64,
        /// The `now` given to `alloc`.
        stamp: u64,
    },
    /// The entry changed while it was read (a concurrent mutator step).
    Changed,
}

fn corrupt(what: &'static str, index: u32) -> AllocError {
    AllocError::Corrupt {
        what,
        index: u64::from(index),
    }
}

impl<'a> Allocator<'a> {
    /// The 4 words of entry `idx`.
    fn entry(&self, idx: u32) -> Result<&'a [AtomicU64], AllocError> {
        let start = (idx as usize).checked_mul(ENTRY_WORDS);
        start
            .and_then(|s| self.entries.get(s..s.checked_add(ENTRY_WORDS)?))
            .ok_or(corrupt("entry index outside the table", idx))
    }

    /// The stats record of `owner` (`owner < MAX_OWNERS`).
    pub(crate) fn owner_record(&self, owner: u16) -> Record<'a> {
        let s = usize::from(owner) * RECORD_WORDS;
        Record(self.owners.get(s..s + RECORD_WORDS).unwrap_or(&[]))
    }

    /// Reads entry `idx` as a seqlock reader: meta `Acquire`, fields `Relaxed`,
    /// `fence(Acquire)`, meta re-check. Live fields are validated against the geometry.
    pub(crate) fn snapshot(&self, idx: u32) -> Result<Snap, AllocError> {
        let e = self.entry(idx)?;
        // Acquire: pairs with the Release store of meta in `alloc`, so the fields it published
        // are visible below.
        let m1 = e[E_META].load(Ordering::Acquire);
        let meta = Meta::decode(m1).ok_or(corrupt("entry meta word", idx))?;
        if !meta.live {
            return Ok(Snap::Free(meta));
        }
        // Relaxed: validated by the meta re-check below.
        let first = e[E_FIRST].load(Ordering::Relaxed);
        let len = e[E_LEN].load(Ordering::Relaxed);
        let stamp = e[E_STAMP].load(Ordering::Relaxed);
        // Acquire fence: pairs with the fence(Release) in `alloc` that precedes any rewrite of
        // these fields; if we read a rewritten field, the re-check sees the new meta.
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        if e[E_META].load(Ordering::Relaxed) != m1 {
            return Ok(Snap::Changed);
        }
        let granules = len.div_ceil(GRANULE_BYTES);
        match first.checked_add(granules) {
            Some(end) if len > 0 && end <= self.geometry.granules => Ok(Snap::Live {
                meta,
                first,
                len,
                granules,
                stamp,
            }),
            _ => Err(corrupt("entry range outside the arena", idx)),
        }
    }

    pub(crate) fn check_owner(owner: u16) -> Result<(), AllocError> {
        if owner < MAX_OWNERS {
            Ok(())
        } else {
            Err(AllocError::BadOwner { owner })
        }
    }

    /// Allocates `len` bytes for `owner` (an id below [`MAX_OWNERS`]), stamped with `now` (any
    /// clock the caller likes; the leak report's ages are in its units).
    ///
    /// # Errors
    ///
    /// [`AllocError::ZeroSize`], [`AllocError::BadOwner`]; [`AllocError::LiveCeiling`] and
    /// [`AllocError::ByteCeiling`] (counted in `ceiling_hits`); [`AllocError::OutOfSpace`]
    /// (counted in `out_of_space`); [`AllocError::Corrupt`] if the shared metadata was
    /// overwritten.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ring_core::AtomicU64;
    /// use ring_core::arena::{region_len, AllocConfig, AllocError, Allocator};
    /// # let words: Vec<AtomicU64> =
    /// #     (0..region_len(1024, 2).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let config = AllocConfig { arena_bytes: 1024, max_live: 2, byte_ceiling: 1024 };
    /// let mut alloc = Allocator::init(&words, config)?;
    /// alloc.alloc(1, 0, 0)?;
    /// alloc.alloc(1, 0, 0)?;
    /// assert_eq!(alloc.alloc(1, 0, 0), Err(AllocError::LiveCeiling { max_live: 2 }));
    /// assert_eq!(alloc.stats().ceiling_hits, 1);
    /// # Ok::<(), AllocError>(())
    /// ```
    pub fn alloc(&mut self, len: u64, owner: u16, now: u64) -> Result<Allocation, AllocError> {
        Self::check_owner(owner)?;
        if len == 0 {
            return Err(AllocError::ZeroSize);
        }
        let rec = self.owner_record(owner);
        if self.live >= self.geometry.max_live {
            self.stats.on_ceiling_hit();
            rec.on_ceiling_hit();
            return Err(AllocError::LiveCeiling {
                max_live: self.geometry.max_live,
            });
        }
        if self
            .live_bytes
            .checked_add(len)
            .is_none_or(|b| b > self.byte_ceiling)
        {
            self.stats.on_ceiling_hit();
            rec.on_ceiling_hit();
            return Err(AllocError::ByteCeiling {
                ceiling: self.byte_ceiling,
                live_bytes: self.live_bytes,
                requested: len,
            });
        }
        let need = len.div_ceil(GRANULE_BYTES);
        let g = self.geometry.granules;
        let rover = if self.rover < g { self.rover } else { 0 };
        let run = self.bitmap.find_run(rover, g, need).or_else(|| {
            // Wrap: runs that start before the rover, including those crossing it.
            self.bitmap
                .find_run(0, rover.saturating_add(need - 1).min(g), need)
        });
        let Some(first) = run else {
            self.stats.on_out_of_space();
            rec.on_out_of_space();
            let largest_free = self.bitmap.largest_free().saturating_mul(GRANULE_BYTES);
            return Err(AllocError::OutOfSpace {
                requested: len,
                largest_free,
            });
        };
        let (idx, meta) = self.free_entry()?;
        let e = self.entry(idx)?;
        self.bitmap.mark(first, need, true);
        self.rover = first + need;
        let meta = Meta {
            generation: meta.next_generation(),
            owner,
            live: true,
        };
        // Release fence: orders this entry's earlier free (its meta store) before the field
        // stores below, for the seqlock reader in `snapshot` (pairs with its fence(Acquire)).
        fence(Ordering::Release);
        // Relaxed: published by the meta store below.
        e[E_FIRST].store(first, Ordering::Relaxed);
        e[E_LEN].store(len, Ordering::Relaxed);
        e[E_STAMP].store(now, Ordering::Relaxed);
        // Release: pairs with the Acquire load of meta in `snapshot`.
        e[E_META].store(meta.encode(), Ordering::Release);
        self.live += 1;
        self.live_bytes += len;
        self.stats.on_alloc(len);
        rec.on_alloc(len);
        let handle = handle(idx, meta.generation);
        Ok(Allocation {
            handle,
            offset: first * GRANULE_BYTES,
            len,
        })
    }

    /// Finds a free entry, scanning from the rotating hint. Undecodable entries are skipped.
    fn free_entry(&mut self) -> Result<(u32, Meta), AllocError> {
        let n = self.geometry.max_live;
        for k in 0..n {
            let idx = ((u64::from(self.entry_hint) + u64::from(k)) % u64::from(n)) as u32;
            // Relaxed: the mutator reads its own writes.
            let raw = self.entry(idx)?[E_META].load(Ordering::Relaxed);
            if let Some(meta) = Meta::decode(raw).filter(|m| !m.live) {
                self.entry_hint = (idx + 1) % n;
                return Ok((idx, meta));
            }
        }
        Err(corrupt("no free entry below the live ceiling", self.live))
    }

    /// Frees entry `idx` (live, consistent, its granules marked) and does the accounting.
    fn release(&mut self, idx: u32, meta: Meta, first: u64, len: u64, granules: u64) {
        if let Ok(e) = self.entry(idx) {
            // Relaxed: a free publishes nothing; readers notice it by their meta re-check, and
            // the fence(Release) of the entry's next `alloc` orders it before the new fields.
            e[E_META].store(
                Meta {
                    live: false,
                    ..meta
                }
                .encode(),
                Ordering::Relaxed,
            );
        }
        self.bitmap.mark(first, granules, false);
        self.live = self.live.saturating_sub(1);
        self.live_bytes = self.live_bytes.saturating_sub(len);
        // Reuse what was just freed: the next search starts at the lowest granule freed since
        // the last allocation (bytes written again at once are still in the cache, where the
        // stretch after the rover is cold), and at the arena's start once nothing is live.
        if self.live == 0 {
            self.rover = 0;
        } else if first < self.rover {
            self.rover = first;
        }
        self.stats.on_free(len);
        self.owner_record(meta.owner).on_free(len);
    }

    /// Checks a live entry's granules are all marked before it is freed.
    fn check_marked(&self, idx: u32, first: u64, granules: u64) -> Result<(), AllocError> {
        if self.bitmap.all_set(first, granules) {
            Ok(())
        } else {
            Err(corrupt("live entry's granules are marked free", idx))
        }
    }

    /// Frees the allocation `handle` on behalf of `owner`, returning its length.
    ///
    /// # Errors
    ///
    /// [`AllocError::DoubleFree`], [`AllocError::ForeignFree`] (nothing freed),
    /// [`AllocError::InvalidHandle`] (out of range or stale), all counted in the caller's
    /// `bad_frees`; [`AllocError::BadOwner`]; [`AllocError::Corrupt`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ring_core::AtomicU64;
    /// use ring_core::arena::{DEFAULT_MAX_LIVE, region_len, AllocConfig, AllocError, Allocator};
    /// # let words: Vec<AtomicU64> =
    /// #     (0..region_len(1024, DEFAULT_MAX_LIVE).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let mut alloc = Allocator::init(&words, AllocConfig::new(1024))?;
    /// let a = alloc.alloc(100, 1, 0)?;
    /// assert_eq!(alloc.free(a.handle, 2), Err(AllocError::ForeignFree { owner: 2, actual: 1 }));
    /// assert_eq!(alloc.free(a.handle, 1), Ok(100));
    /// assert_eq!(alloc.free(a.handle, 1), Err(AllocError::DoubleFree { handle: a.handle }));
    /// # Ok::<(), AllocError>(())
    /// ```
    pub fn free(&mut self, handle: u64, owner: u16) -> Result<u64, AllocError> {
        Self::check_owner(owner)?;
        let result = self.free_checked(handle, owner);
        if matches!(
            result,
            Err(AllocError::DoubleFree { .. }
                | AllocError::ForeignFree { .. }
                | AllocError::InvalidHandle { .. })
        ) {
            self.stats.on_bad_free();
            self.owner_record(owner).on_bad_free();
        }
        result
    }

    fn free_checked(&mut self, handle: u64, owner: u16) -> Result<u64, AllocError> {
        let (idx, generation) = split_handle(handle);
        if idx >= self.geometry.max_live {
            return Err(AllocError::InvalidHandle { handle });
        }
        match self.snapshot(idx)? {
            Snap::Free(m) if m.generation == generation && generation != 0 => {
                Err(AllocError::DoubleFree { handle })
            }
            Snap::Live {
                meta,
                first,
                len,
                granules,
                ..
            } if meta.generation == generation => {
                if meta.owner != owner {
                    return Err(AllocError::ForeignFree {
                        owner,
                        actual: meta.owner,
                    });
                }
                self.check_marked(idx, first, granules)?;
                self.release(idx, meta, first, len, granules);
                Ok(len)
            }
            Snap::Changed => Err(corrupt("entry changed under the mutator", idx)),
            _ => Err(AllocError::InvalidHandle { handle }),
        }
    }

    /// Frees every live allocation of `owner` (reclaiming a dead owner). Inconsistent entries
    /// are left alone and counted in [`Freed::corrupt`].
    ///
    /// # Errors
    ///
    /// [`AllocError::BadOwner`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ring_core::AtomicU64;
    /// use ring_core::arena::{DEFAULT_MAX_LIVE, region_len, AllocConfig, Allocator, Freed};
    /// # let words: Vec<AtomicU64> =
    /// #     (0..region_len(1024, DEFAULT_MAX_LIVE).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let mut alloc = Allocator::init(&words, AllocConfig::new(1024))?;
    /// alloc.alloc(10, 7, 0)?;
    /// alloc.alloc(20, 7, 0)?;
    /// alloc.alloc(30, 8, 0)?;
    /// assert_eq!(alloc.free_all_of(7)?, Freed { count: 2, bytes: 30, corrupt: 0 });
    /// assert_eq!(alloc.stats().live, 1);
    /// # Ok::<(), ring_core::arena::AllocError>(())
    /// ```
    pub fn free_all_of(&mut self, owner: u16) -> Result<Freed, AllocError> {
        Self::check_owner(owner)?;
        let mut freed = Freed::default();
        for idx in 0..self.geometry.max_live {
            match self.snapshot(idx) {
                Ok(Snap::Live {
                    meta,
                    first,
                    len,
                    granules,
                    ..
                }) if meta.owner == owner => {
                    if self.check_marked(idx, first, granules).is_ok() {
                        self.release(idx, meta, first, len, granules);
                        freed.count += 1;
                        freed.bytes = freed.bytes.saturating_add(len);
                    } else {
                        freed.corrupt += 1;
                    }
                }
                Ok(_) => {}
                Err(_) => freed.corrupt += 1,
            }
        }
        Ok(freed)
    }
}
