//! The allocator's model: the live set, the freed handles and the granule map. Placement is
//! policy (next-fit today): the model does not predict offsets; it checks that the offset the
//! real allocator chose is valid (aligned, inside the arena, overlapping no live allocation)
//! and that `OutOfSpace` is reported exactly when no free run is long enough.

use super::{pattern, Failure, FreeMode, Model, Outcome, ALLOC_OWNERS};
use ring_core::arena::{AllocError, Allocation, GRANULE_BYTES};

/// A live allocation in the model.
#[derive(Clone, Debug)]
pub struct ModelAlloc {
    /// The allocation the real allocator returned (validated).
    pub alloc: Allocation,
    /// Owner.
    pub owner: u16,
    /// Contents, once written through the bounded writer.
    pub bytes: Option<Vec<u8>>,
}

impl Model {
    fn live_bytes(&self) -> u64 {
        self.live.iter().map(|a| a.alloc.len).sum()
    }

    /// Length of the longest run of free granules.
    pub fn largest_free(&self) -> u64 {
        let (mut best, mut run) = (0u64, 0u64);
        for &used in &self.granules {
            run = if used { 0 } else { run + 1 };
            best = best.max(run);
        }
        best
    }

    pub(super) fn alloc(
        &mut self,
        len: u64,
        owner: u8,
        observed: &Outcome,
    ) -> Result<Outcome, Failure> {
        if self.granules.is_empty() {
            return Ok(Outcome::Skipped);
        }
        let owner = u16::from(owner % ALLOC_OWNERS);
        if len == 0 {
            return Ok(Outcome::Alloc(Err(AllocError::ZeroSize)));
        }
        if self.live.len() >= self.cfg.max_live as usize {
            return Ok(Outcome::Alloc(Err(AllocError::LiveCeiling {
                max_live: self.cfg.max_live,
            })));
        }
        let live_bytes = self.live_bytes();
        // ring-core formats the segment's allocator with a byte ceiling equal to the arena.
        let ceiling = self.cfg.arena;
        if live_bytes + len > ceiling {
            return Ok(Outcome::Alloc(Err(AllocError::ByteCeiling {
                ceiling,
                live_bytes,
                requested: len,
            })));
        }
        let need = len.div_ceil(GRANULE_BYTES);
        if self.largest_free() < need {
            return Ok(Outcome::Alloc(Err(AllocError::OutOfSpace {
                requested: len,
                largest_free: self.largest_free() * GRANULE_BYTES,
            })));
        }
        let Outcome::Alloc(Ok(a)) = observed else {
            return Err(Failure(format!(
                "alloc({len}) should succeed (a free run of {need} granules exists), real: {observed:?}"
            )));
        };
        let first = a.offset / GRANULE_BYTES;
        ensure!(
            a.len == len && a.offset % GRANULE_BYTES == 0,
            "alloc({len}) returned a bad allocation {a:?}"
        );
        ensure!(
            first + need <= self.granules.len() as u64,
            "alloc({len}) at {a:?} runs past the arena"
        );
        ensure!(
            self.granules[first as usize..(first + need) as usize]
                .iter()
                .all(|u| !u),
            "alloc({len}) at {a:?} overlaps a live allocation"
        );
        let index = a.handle as u32;
        ensure!(
            index < self.cfg.max_live && !self.live.iter().any(|l| l.alloc.handle as u32 == index),
            "alloc returned handle {:#x} whose entry is in use or out of range",
            a.handle
        );
        ensure!(
            a.handle >> 32 != 0 && !self.freed.contains(&a.handle),
            "alloc returned a handle {:#x} that was used before",
            a.handle
        );
        for g in first..first + need {
            self.granules[g as usize] = true;
        }
        self.live.push(ModelAlloc {
            alloc: *a,
            owner,
            bytes: None,
        });
        Ok(Outcome::Alloc(Ok(*a)))
    }

    pub(super) fn alloc_write(&mut self, which: u8, seed: u8, extra: u8) -> Outcome {
        if self.live.is_empty() {
            return Outcome::Skipped;
        }
        let k = which as usize % self.live.len();
        let a = &mut self.live[k];
        a.bytes = Some(pattern(seed, a.alloc.len as usize));
        let over = if extra == 0 {
            Ok(())
        } else {
            Err(AllocError::Overflow {
                reserved: a.alloc.len,
                attempted: a.alloc.len + u64::from(extra),
            })
        };
        Outcome::AllocWrote(Ok(()), over)
    }

    fn release_alloc(&mut self, k: usize) -> ModelAlloc {
        let a = self.live.remove(k);
        let first = a.alloc.offset / GRANULE_BYTES;
        for g in first..first + a.alloc.len.div_ceil(GRANULE_BYTES) {
            self.granules[g as usize] = false;
        }
        self.freed.push(a.alloc.handle);
        a
    }

    /// The handle a [`Op::Free`] names, and the owner it frees as (for both sides).
    pub fn free_target(&self, which: u8, mode: FreeMode) -> Option<(u64, u16)> {
        match mode {
            FreeMode::Owner | FreeMode::Foreign => {
                if self.live.is_empty() {
                    return None;
                }
                let a = &self.live[which as usize % self.live.len()];
                let owner = if mode == FreeMode::Owner {
                    a.owner
                } else {
                    (a.owner + 1) % u16::from(ALLOC_OWNERS)
                };
                Some((a.alloc.handle, owner))
            }
            FreeMode::Stale => {
                if self.freed.is_empty() {
                    return None;
                }
                Some((self.freed[which as usize % self.freed.len()], 0))
            }
        }
    }

    pub(super) fn free(&mut self, which: u8, mode: FreeMode) -> Outcome {
        if self.granules.is_empty() {
            return Outcome::Skipped;
        }
        let Some((handle, owner)) = self.free_target(which, mode) else {
            return Outcome::Skipped;
        };
        let index = handle as u32;
        if let Some(k) = self.live.iter().position(|a| a.alloc.handle == handle) {
            let a = &self.live[k];
            if a.owner != owner {
                return Outcome::Free(Err(AllocError::ForeignFree {
                    owner,
                    actual: a.owner,
                }));
            }
            let len = self.release_alloc(k).alloc.len;
            return Outcome::Free(Ok(len));
        }
        // Not live: a double free while its entry is still free, otherwise stale.
        let reused = self.live.iter().any(|a| a.alloc.handle as u32 == index);
        let last_at_entry = self.freed.iter().rev().find(|h| **h as u32 == index);
        if !reused && last_at_entry == Some(&handle) {
            Outcome::Free(Err(AllocError::DoubleFree { handle }))
        } else {
            Outcome::Free(Err(AllocError::InvalidHandle { handle }))
        }
    }

    pub(super) fn free_all_of(&mut self, owner: u8) -> Outcome {
        if self.granules.is_empty() {
            return Outcome::Skipped;
        }
        let owner = u16::from(owner % ALLOC_OWNERS);
        let (mut count, mut bytes) = (0, 0);
        while let Some(k) = self.live.iter().position(|a| a.owner == owner) {
            bytes += self.release_alloc(k).alloc.len;
            count += 1;
        }
        Outcome::FreedAll(Ok((count, bytes)))
    }
}
