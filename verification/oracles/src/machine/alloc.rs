//! The allocator ops of the state machine, over the one allocator model
//! ([`AllocModel`](crate::model::AllocModel)): the model checks where the real allocator placed
//! an allocation (it does not predict offsets) and predicts every other result.

use super::{pattern, Failure, FreeMode, Model, Outcome, ALLOC_OWNERS};

impl Model {
    pub(super) fn alloc(
        &mut self,
        len: u64,
        owner: u8,
        observed: &Outcome,
    ) -> Result<Outcome, Failure> {
        let now = self.head();
        let Some(m) = self.alloc.as_mut() else {
            return Ok(Outcome::Skipped);
        };
        let got = match observed {
            Outcome::Alloc(got) => *got,
            other => {
                return Err(Failure(format!(
                    "alloc({len}): the real ring did {other:?}"
                )))
            }
        };
        Ok(Outcome::Alloc(m.alloc(
            len,
            u16::from(owner % ALLOC_OWNERS),
            now,
            &got,
        )?))
    }

    pub(super) fn alloc_write(&mut self, which: u8, seed: u8, extra: u8) -> Outcome {
        let Some(m) = self.alloc.as_mut().filter(|m| !m.live.is_empty()) else {
            return Outcome::Skipped;
        };
        let k = which as usize % m.live.len();
        let len = m.live[k].alloc.len;
        let pos = m.wrote(k, 0, &pattern(seed, len as usize));
        Outcome::AllocWrote(Ok(()), m.write_refusal(k, pos, u64::from(extra)))
    }

    /// The handle a [`Op::Free`](super::Op::Free) names, and the owner it frees as (for both
    /// sides).
    pub fn free_target(&self, which: u8, mode: FreeMode) -> Option<(u64, u16)> {
        let m = self.alloc.as_ref()?;
        match mode {
            FreeMode::Owner | FreeMode::Foreign => {
                if m.live.is_empty() {
                    return None;
                }
                let a = &m.live[which as usize % m.live.len()];
                let owner = if mode == FreeMode::Owner {
                    a.owner
                } else {
                    (a.owner + 1) % u16::from(ALLOC_OWNERS)
                };
                Some((a.alloc.handle, owner))
            }
            FreeMode::Stale => {
                if m.freed.is_empty() {
                    return None;
                }
                Some((m.freed[which as usize % m.freed.len()].handle, 0))
            }
        }
    }

    pub(super) fn free(&mut self, which: u8, mode: FreeMode) -> Outcome {
        let Some((handle, owner)) = self.free_target(which, mode) else {
            return Outcome::Skipped;
        };
        let m = self.alloc.as_mut().expect("free_target found an allocator");
        Outcome::Free(m.free(handle, owner))
    }

    pub(super) fn free_all_of(&mut self, owner: u8) -> Outcome {
        match self.alloc.as_mut() {
            None => Outcome::Skipped,
            Some(m) => Outcome::FreedAll(m.free_all_of(u16::from(owner % ALLOC_OWNERS))),
        }
    }
}
