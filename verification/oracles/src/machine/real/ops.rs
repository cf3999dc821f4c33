//! The real side's operations with more to them than a call: registration, batches, the
//! adversarial oracle's victims and displaced producers, claims, pins and reclaims.

#[allow(clippy::wildcard_imports, reason = "the real side's own parts")]
use super::*;

impl<'s, M: Memory> Real<'s, M> {
    /// [`Op::Join`]: a member allowed `MAX_HOLDS` holds (as many as its claim words).
    pub(super) fn join(&mut self, group: u8) -> Outcome {
        let id = owner(CONSUMER_OWNER_BASE + self.registrations);
        // SAFETY: as in `Real::new`.
        match unsafe { Consumer::join_group_unchecked(self.mem, group_name(group), id) } {
            Ok(mut c) => match c.set_max_holds(MAX_HOLDS) {
                Ok(()) => self.adopt(c),
                Err(e) => Outcome::Broken(format!("set_max_holds({MAX_HOLDS}): {e}")),
            },
            Err(e) => Outcome::RegisterFailed(e),
        }
    }

    /// Keeps a consumer that just registered.
    pub(super) fn adopt(&mut self, c: Consumer<&'s M>) -> Outcome {
        self.registrations += 1;
        let i = c.index();
        if self.consumers[i].is_some() {
            // The model will disagree; keep the old handle to report it.
            std::mem::forget(c);
        } else {
            self.consumers[i] = Some(Held::new(c));
        }
        Outcome::Registered(i)
    }

    /// [`Op::ReadBatch`]: each item as the model's read outcome, and while the callback runs,
    /// the item must be pinned (our bit in its slot), whole, and its words padded.
    pub(super) fn read_batch(&mut self, i: usize, max: u8, model: &Model) -> Outcome {
        let mem = self.mem;
        let n = mem.geometry().slots() as u64;
        // Where each message is (a never-stall ring's route; the batch publishes nothing).
        let slot_of = |seq: u64| model.locate(seq).unwrap_or((seq % n) as usize);
        let Some(c) = self.consumers[i].as_mut().and_then(Held::get) else {
            return Outcome::Skipped;
        };
        let bit = 1u64 << c.index();
        let index = c.index();
        // A gating reader's pin is its cursor: no bit, but its shared cursor stays at or
        // below the message until the batch ends.
        let gating = c.class() == ring_core::DeliveryClass::Gating;
        let mut items = Vec::new();
        let mut broken = Vec::new();
        let r = c.try_read_batch(usize::from(max), |m| {
            let slot = slot_of(m.seq());
            let state = mem
                .slot_header(slot)
                .state
                .load(core::sync::atomic::Ordering::Relaxed);
            let held = if gating {
                ring_core::inspect::consumer_info(mem, index).is_some_and(|e| e.cursor <= m.seq())
            } else {
                state & bit != 0
            };
            if !held || state & WRITER != 0 {
                broken.push(format!(
                    "seq {}: slot {slot} state {state:#x} (gating: {gating}) not held during \
                     the callback",
                    m.seq()
                ));
            }
            let words = m.words();
            let mut padded = vec![0u8; m.len().div_ceil(8) * 8];
            padded[..m.len()].copy_from_slice(m.bytes());
            let got: Vec<u8> = words
                .iter()
                .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
                .collect();
            if got != padded {
                broken.push(format!(
                    "seq {}: words {got:?} != bytes padded {padded:?}",
                    m.seq()
                ));
            }
            let mut out = vec![0u8; m.len() + 3];
            if m.copy_to(&mut out) != m.len() || out[..m.len()] != *m.bytes() {
                broken.push(format!("seq {}: copy_to disagrees with bytes", m.seq()));
            }
            items.push(Outcome::Read {
                seq: m.seq(),
                missed: m.missed(),
                bytes: m.bytes().to_vec(),
                meta: m.meta(),
            });
        });
        if !broken.is_empty() {
            // Shows as a disagreement with the model, naming what broke.
            return Outcome::Broken(broken.join("; "));
        }
        match r {
            Ok(k) if k == items.len() => Outcome::ReadBatch(Ok(items)),
            Ok(k) => Outcome::Broken(format!(
                "try_read_batch returned {k}, called back {} times",
                items.len()
            )),
            Err(e) => Outcome::ReadBatch(Err(e)),
        }
    }

    pub(super) fn register(&mut self, class: crate::machine::Class, id: OwnerId) -> Outcome {
        // SAFETY: as in `Real::new`.
        match unsafe { Consumer::new_unchecked(self.mem, class.into(), id) } {
            Ok(c) => self.adopt(c),
            Err(e) => Outcome::RegisterFailed(e),
        }
    }

    /// [`Op::ReclaimLive`]: as the model, a live consumer without a `Pinned` (its pin, if
    /// any, leaked), by its right owner; the victim keeps its handle.
    pub(super) fn reclaim_live(&mut self, i: usize, model: &Model) -> Outcome {
        // As the model: never a consumer that holds messages (their bytes would be rewritten).
        if !self.holds[i].is_empty() {
            return Outcome::Skipped;
        }
        let Some(victim) = self.consumers[i].take_if(|c| c.guard.is_none()) else {
            return Outcome::Skipped;
        };
        // The right owner, as the model knows it (a wrong one shows as a mismatch).
        let id = owner(model.consumers[i].as_ref().map_or(1, |c| c.reader.owner));
        self.victims.push(victim);
        match self.producer.as_mut().and_then(Held::get) {
            // SAFETY: the victim is between calls (this thread makes them all) and holds no
            // `Pinned` (its guard is empty: none held, or leaked with `mem::forget`).
            Some(p) => Outcome::Reclaim(unsafe { p.reclaim(i, id) }),
            None => {
                // A held claim borrows the producer: the model skips, so give the handle back.
                self.consumers[i] = self.victims.pop();
                Outcome::Skipped
            }
        }
    }

    /// [`Op::Victim`]: every read fails with `Evicted`, a drop writes nothing (the check after
    /// the step compares the whole ring with the model, which did not change).
    pub(super) fn victim(&mut self, which: u8, call: VictimCall) -> Outcome {
        let c = match pick(&mut self.victims, which, call == VictimCall::Drop) {
            Ok(c) => c,
            Err(ended) => return ended,
        };
        let r = match call {
            VictimCall::Pin => c.try_pin().map(|m| m.seq()),
            _ => {
                let mut buf = vec![0u8; self.mem.geometry().config().slot_capacity as usize];
                c.try_copy(&mut buf).map(|got| got.seq)
            }
        };
        match r {
            Ok(seq) => Outcome::Claimed(seq), // a read that should not exist: reported as such
            Err(e) => Outcome::ReadFailed(e),
        }
    }

    /// [`Op::TakeOverLive`]: the current producer keeps its handle; a new one takes over.
    pub(super) fn take_over_live(&mut self, same_owner: bool) -> Outcome {
        match self.producer.as_ref() {
            Some(p) if p.guard.is_none() => {}
            // A held claim: the contract forbids the take-over (the model skips too).
            _ => return Outcome::Skipped,
        }
        let next = self.producer_owner + u64::from(!same_owner);
        let (dead, new) = (owner(self.producer_owner), owner(next));
        // SAFETY: the displaced producer is between calls (this thread makes them all) and
        // holds no `WriteSlot` (checked above).
        match unsafe { Producer::take_over(self.mem, new, dead) } {
            Ok(p) => {
                self.displaced.extend(self.producer.replace(Held::new(p)));
                self.producer_owner = next;
                Outcome::TookOver
            }
            Err(e) => Outcome::RegisterFailed(e),
        }
    }

    /// [`Op::Displaced`]: claims and publishes fail with `Displaced`, close and drop do
    /// nothing to the ring.
    pub(super) fn displaced(&mut self, which: u8, call: DisplacedCall) -> Outcome {
        let p = match pick(&mut self.displaced, which, call == DisplacedCall::Drop) {
            Ok(p) => p,
            Err(ended) => return ended,
        };
        match call {
            DisplacedCall::Claim => match p.try_claim() {
                // A claim that should not exist: reported (and aborted) so the model disagrees.
                Ok(slot) => Outcome::Claimed(slot.seq()),
                Err(e) => Outcome::ClaimFailed(e),
            },
            DisplacedCall::Publish => match p.try_publish(b"x") {
                Ok(seq) => Outcome::Published(seq),
                Err(e) => Outcome::ClaimFailed(e),
            },
            _ => {
                p.close();
                Outcome::Closed
            }
        }
    }

    pub(super) fn claim(&mut self) -> Outcome {
        let Some(p) = self.producer.as_mut() else {
            return Outcome::Skipped;
        };
        let mut seq = 0;
        match p.hold(|p| {
            p.try_claim().inspect(|s| {
                seq = s.seq();
            })
        }) {
            None => Outcome::Skipped,
            Some(Ok(())) => Outcome::Claimed(seq),
            Some(Err(e)) => Outcome::ClaimFailed(e),
        }
    }

    pub(super) fn pin(&mut self, i: usize) -> Outcome {
        let Some(c) = self.consumers[i].as_mut() else {
            return Outcome::Skipped;
        };
        let mut read = Outcome::Skipped;
        match c.hold(|c| {
            c.try_pin().inspect(|m| {
                read = Outcome::Read {
                    seq: m.seq(),
                    missed: m.missed(),
                    bytes: m.bytes().to_vec(),
                    meta: m.meta(),
                };
            })
        }) {
            None => Outcome::Skipped,
            Some(Ok(())) => read,
            Some(Err(e)) => Outcome::ReadFailed(e),
        }
    }

    pub(super) fn reclaim(&mut self, i: usize, model: &Model) -> Outcome {
        // As the model: a dead consumer's owner; a live one under a wrong owner.
        let expected = match &model.consumers[i] {
            Some(c) if c.alive => c.reader.owner + 1_000_000,
            Some(c) => c.reader.owner,
            // A group's record, as its owner: reclaim must still leave it alone.
            None if model.ring.entries[i].is_record() => OWNER_GROUP,
            None => 1,
        };
        // A held claim borrows the producer: the model skips reclaim then, and so do we.
        match self.producer.as_mut().and_then(Held::get) {
            // SAFETY: a dead consumer was leaked (`Kill`) and makes no calls; a live one is
            // named under a wrong owner, which reclaim refuses without touching anything.
            Some(p) => Outcome::Reclaim(unsafe { p.reclaim(i, owner(expected)) }),
            None => Outcome::Skipped,
        }
    }
}

/// Handle `which % len` of `handles` (the live victims or the displaced producers) for an
/// adversarial call; `Err` with the call's outcome when it ends here: none to pick, or its
/// handle lent out (`Skipped`), or the call is its drop (`Gone`: removed, and dropped).
fn pick<T, G>(handles: &mut Vec<Held<T, G>>, which: u8, drop_it: bool) -> Result<&mut T, Outcome> {
    if handles.is_empty() {
        return Err(Outcome::Skipped);
    }
    let k = which as usize % handles.len();
    if drop_it {
        drop(handles.remove(k));
        return Err(Outcome::Gone);
    }
    handles[k].get().ok_or(Outcome::Skipped)
}
