//! [`Real::apply`]: each [`Op`] on the real ring.

#[allow(clippy::wildcard_imports, reason = "the real side's own parts")]
use super::*;

impl<'s, M: Memory> Real<'s, M> {
    /// Applies `op` to the real ring. `model` (before the op) names allocator handles and
    /// owners so that both sides pick the same ones.
    pub fn apply(&mut self, op: Op, model: &Model) -> Outcome {
        match op {
            Op::Claim => self.claim(),
            Op::Write { offset, len, seed } => {
                let Some(slot) = self.producer.as_mut().and_then(|p| p.guard.as_mut()) else {
                    return Outcome::Skipped;
                };
                let r = slot.write_at(offset as usize, &pattern(seed, len as usize));
                Outcome::Wrote(r.map_err(|o| (o.reserved, o.attempted)))
            }
            Op::Publish => match self.producer.as_mut().and_then(|p| p.guard.take()) {
                None => Outcome::Skipped,
                Some(mut slot) => {
                    let seq = slot.seq();
                    // The model's length: the highest byte written (`WriteSlot` tracks it).
                    let len = model.claim.map_or(0, |c| c.len);
                    slot.set_meta([seq, len as u64]);
                    match slot.publish() {
                        Ok(seq) => Outcome::Published(seq),
                        Err(e) => Outcome::ClaimFailed(e),
                    }
                }
            },
            Op::Abort => match self.producer.as_mut().and_then(|p| p.guard.take()) {
                None => Outcome::Skipped,
                Some(slot) => {
                    slot.abort();
                    Outcome::Aborted
                }
            },
            // Members: as the model, no pins (see `Op::Join`).
            Op::Pin { consumer }
            | Op::ReadBatch { consumer, .. }
            | Op::ReclaimLive { consumer }
                if self.is_member(self.index(consumer)) =>
            {
                Outcome::Skipped
            }
            Op::Pin { consumer } => self.pin(self.index(consumer)),
            Op::Hold { consumer } => {
                let i = self.index(consumer);
                let Some(c) = self.consumers[i].as_mut().and_then(Held::get) else {
                    return Outcome::Skipped;
                };
                let member = c.group().is_some();
                match c.try_hold() {
                    Ok(h) => {
                        let out = if member {
                            Outcome::Taken {
                                seq: h.seq(),
                                bytes: held_bytes(c, &h),
                                meta: h.meta(),
                                redelivered: h.redelivered(),
                            }
                        } else {
                            Outcome::Read {
                                seq: h.seq(),
                                missed: h.missed(),
                                bytes: held_bytes(c, &h),
                                meta: h.meta(),
                            }
                        };
                        self.holds[i].push(h);
                        out
                    }
                    Err(e) => Outcome::ReadFailed(e),
                }
            }
            Op::Release { consumer, which } => {
                let i = self.index(consumer);
                let n = self.holds[i].len();
                let Some(c) = self.consumers[i].as_mut().and_then(Held::get) else {
                    return Outcome::Skipped;
                };
                if n == 0 {
                    return Outcome::Skipped;
                }
                let h = self.holds[i].remove(which as usize % n);
                let out = Outcome::Released {
                    seq: h.seq(),
                    bytes: held_bytes(c, &h),
                };
                match c.release(h) {
                    Ok(()) => out,
                    Err(e) => Outcome::Broken(format!("release of a hold it has: {e}")),
                }
            }
            Op::Unpin { consumer } => {
                let i = self.index(consumer);
                match self.consumers[i].as_mut().and_then(|c| c.guard.take()) {
                    Some(pin) => {
                        drop(pin);
                        Outcome::Unpinned
                    }
                    None => Outcome::Skipped,
                }
            }
            Op::CopyRead { consumer, buf } => {
                let i = self.index(consumer);
                let Some(c) = self.consumers[i].as_mut().and_then(Held::get) else {
                    return Outcome::Skipped;
                };
                let mut out = vec![0u8; buf as usize];
                match c.try_copy(&mut out) {
                    Ok(got) if c.group().is_some() => Outcome::Taken {
                        seq: got.seq,
                        bytes: out[..got.len].to_vec(),
                        meta: got.meta,
                        redelivered: got.redelivered,
                    },
                    Ok(got) => Outcome::Read {
                        seq: got.seq,
                        missed: got.missed,
                        bytes: out[..got.len].to_vec(),
                        meta: got.meta,
                    },
                    Err(e) => Outcome::ReadFailed(e),
                }
            }
            Op::Register { class } => {
                self.register(class, owner(CONSUMER_OWNER_BASE + self.registrations))
            }
            Op::RegisterAs { class, which } => match model.victims.len() {
                0 => Outcome::Skipped,
                n => self.register(class, owner(model.victims[which as usize % n])),
            },
            Op::ReclaimLive { consumer } => self.reclaim_live(self.index(consumer), model),
            Op::Victim { which, call } => self.victim(which, call),
            Op::TakeOverLive { same_owner } => self.take_over_live(same_owner),
            Op::Displaced { which, call } => self.displaced(which, call),
            Op::ForgetPin { consumer } => {
                let i = self.index(consumer);
                match self.consumers[i].as_mut().and_then(|c| c.guard.take()) {
                    Some(pin) => {
                        std::mem::forget(pin);
                        Outcome::Leaked
                    }
                    None => Outcome::Skipped,
                }
            }
            Op::Deregister { consumer } => match self.take_consumer(consumer) {
                Some(mut c) => {
                    // The pin first, in place (see `Held::forget` for why not by value).
                    drop(c.guard.take());
                    drop(c);
                    Outcome::Gone
                }
                None => Outcome::Skipped,
            },
            Op::Kill { consumer } => match self.take_consumer(consumer) {
                Some(mut c) => {
                    c.forget();
                    Outcome::Gone
                }
                None => Outcome::Skipped,
            },
            Op::Reclaim { consumer } => self.reclaim(self.index(consumer), model),
            Op::Close => match self.producer.as_mut().and_then(Held::get) {
                Some(p) => {
                    p.close();
                    Outcome::Closed
                }
                // A held claim borrows the producer: the model skips close then, and so do we.
                None => Outcome::Skipped,
            },
            Op::TakeOver => {
                if let Some(mut p) = self.producer.take() {
                    p.forget();
                }
                let dead = owner(self.producer_owner);
                let new = owner(self.producer_owner + 1);
                // SAFETY: the previous producer (and any claim it held) was leaked above: it
                // makes no more calls.
                match unsafe { Producer::take_over(self.mem, new, dead) } {
                    Ok(p) => {
                        self.producer = Some(Held::new(p));
                        self.producer_owner += 1;
                        Outcome::TookOver
                    }
                    Err(e) => Outcome::RegisterFailed(e),
                }
            }
            Op::Alloc { len, owner } => match self.alloc.as_mut() {
                None => Outcome::Skipped,
                Some(a) => Outcome::Alloc(a.alloc(
                    u64::from(len),
                    u16::from(owner % ALLOC_OWNERS),
                    model.head(),
                )),
            },
            Op::AllocWrite { which, seed, extra } => {
                let live = model.alloc.as_ref().map_or(&[][..], |m| &m.live);
                let (Some(a), false) = (self.alloc.as_mut(), live.is_empty()) else {
                    return Outcome::Skipped;
                };
                let target = live[which as usize % live.len()].alloc;
                let mut w = match a.writer(&target) {
                    Ok(w) => w,
                    Err(e) => return Outcome::AllocWrote(Err(e), Err(e)),
                };
                let first = w.write(&pattern(seed, target.len as usize));
                let over = if extra == 0 {
                    Ok(())
                } else {
                    w.write(&vec![0xEE; extra as usize])
                };
                Outcome::AllocWrote(first, over)
            }
            Op::Free { which, mode } => match self.alloc.as_mut() {
                None => Outcome::Skipped,
                Some(a) => match model.free_target(which, mode) {
                    None => Outcome::Skipped,
                    Some((handle, owner)) => Outcome::Free(a.free(handle, owner)),
                },
            },
            Op::FreeAllOf { owner } => match self.alloc.as_mut() {
                None => Outcome::Skipped,
                Some(a) => Outcome::FreedAll(
                    a.free_all_of(u16::from(owner % ALLOC_OWNERS))
                        .map(|f| (f.count, f.bytes)),
                ),
            },
            Op::PublishBatch { count, len, seed } => {
                // A held claim borrows the producer: the model skips, and so do we.
                match self.producer.as_mut().and_then(Held::get) {
                    Some(p) => Outcome::PublishedBatch(
                        p.try_publish_batch(&batch_messages(count, len, seed)),
                    ),
                    None => Outcome::Skipped,
                }
            }
            Op::PublishMeta { len, seed } => match self.producer.as_mut().and_then(Held::get) {
                Some(p) => {
                    let meta = [u64::from(seed), u64::from(len)];
                    match p.try_publish_with_meta(&pattern(seed, usize::from(len)), meta) {
                        Ok(seq) => Outcome::Published(seq),
                        Err(e) => Outcome::ClaimFailed(e),
                    }
                }
                // A held claim borrows the producer: the model skips, and so do we.
                None => Outcome::Skipped,
            },
            Op::ReadBatch { consumer, max } => self.read_batch(self.index(consumer), max, model),
            Op::CreateGroup { group } => match self.producer.as_mut().and_then(Held::get) {
                Some(p) => Outcome::Group(p.create_group(group_name(group))),
                // A held claim borrows the producer: the model skips, and so do we.
                None => Outcome::Skipped,
            },
            Op::Join { group } => self.join(group),
        }
    }
}
