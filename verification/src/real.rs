//! The real side of a model run: a producer, consumers that hold pins across operations, and
//! the segment's allocator, over any [`Memory`], driven by [`Op`]s.

use crate::ensure;
use crate::model::{
    batch_messages, group_name, pattern, DisplacedCall, Model, Op, Outcome, VictimCall,
    CONSUMER_OWNER_BASE, PRODUCER_OWNER,
};
use crate::model::{Failure, ALLOC_OWNERS};
use ring_core::arena::{AllocError, Allocator};
use ring_core::inspect::{consumer_info, producer_info, EntryState};
use ring_core::layout::{OWNER_GROUP, READER_MASK, WRITER};
use ring_core::{Consumer, Hold, Memory, OwnerId, Pinned, Producer, WriteSlot, MAX_HOLDS};
use std::ptr::NonNull;

/// A value on the heap plus a guard that mutably borrows it (a [`Pinned`] borrows its
/// [`Consumer`], a [`WriteSlot`] its [`Producer`]), so that a pin or a claim can be held across
/// operations.
struct Held<T, G> {
    /// From `Box::into_raw`; `None` once forgotten.
    raw: Option<NonNull<T>>,
    /// Borrows `*raw` while it exists.
    guard: Option<G>,
}

impl<T, G> Held<T, G> {
    fn new(value: T) -> Self {
        Self {
            raw: Some(NonNull::from(Box::leak(Box::new(value)))),
            guard: None,
        }
    }

    /// The value, when no guard borrows it.
    fn get(&mut self) -> Option<&mut T> {
        if self.guard.is_some() {
            return None;
        }
        // SAFETY: `raw` came from `Box::leak` and is freed only in `drop`/`forget`; no guard
        // borrows it (checked above), and the returned borrow is tied to `&mut self`.
        self.raw.map(|p| unsafe { &mut *p.as_ptr() })
    }

    /// Same as `get` but with the shared borrow.
    fn peek(&self) -> Option<&T> {
        if self.guard.is_some() {
            return None;
        }
        // SAFETY: as in `get`; no guard holds a mutable borrow.
        self.raw.map(|p| unsafe { &*p.as_ptr() })
    }

    /// Runs `f` on a long-lived borrow of the value and keeps the guard it returns.
    ///
    /// The `'b` borrow is manufactured from the raw pointer: sound because the guard is the only
    /// user of the value while it exists (`get` refuses), and it is always dropped (or
    /// forgotten) before the box is freed (`drop`, `forget`).
    fn hold<'b, E>(&mut self, f: impl FnOnce(&'b mut T) -> Result<G, E>) -> Option<Result<(), E>>
    where
        T: 'b,
    {
        if self.guard.is_some() {
            return None;
        }
        let p = self.raw?;
        // SAFETY: see the doc comment: exclusive for as long as the guard lives, and the box
        // outlives the guard.
        let r = f(unsafe { &mut *p.as_ptr() });
        Some(r.map(|g| self.guard = Some(g)))
    }

    /// Leaks nothing but runs no destructor: the guard and the value are forgotten (a crash).
    ///
    /// Takes `&mut self`, never `self`: a by-value `Held` holding a guard would protect the
    /// guard's borrow for the whole call (Stacked Borrows), and freeing the box under it is UB
    /// (Miri found exactly that).
    fn forget(&mut self) {
        std::mem::forget(self.guard.take());
        if let Some(p) = self.raw.take() {
            // SAFETY: `p` came from `Box::leak`, the guard that borrowed it is gone.
            let b = unsafe { Box::from_raw(p.as_ptr()) };
            std::mem::forget(*b);
        }
    }
}

impl<T, G> Drop for Held<T, G> {
    fn drop(&mut self) {
        drop(self.guard.take());
        if let Some(p) = self.raw.take() {
            // SAFETY: `p` came from `Box::leak`; the guard borrowing it was dropped just above.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}

type ProducerCell<'s, M> = Held<Producer<&'s M>, WriteSlot<'s, &'s M>>;
type ConsumerCell<'s, M> = Held<Consumer<&'s M>, Pinned<'s, &'s M>>;

/// A real ring driven by [`Op`]s.
pub struct Real<'s, M: Memory> {
    mem: &'s M,
    producer: Option<ProducerCell<'s, M>>,
    producer_owner: u64,
    consumers: Vec<Option<ConsumerCell<'s, M>>>,
    /// Each consumer's holds, in the order taken (the model keeps the same order).
    holds: Vec<Vec<Hold>>,
    registrations: u64,
    /// Consumers reclaimed while alive, still holding their handles ([`Op::ReclaimLive`]).
    victims: Vec<ConsumerCell<'s, M>>,
    /// Producers taken over while alive, still holding their handles ([`Op::TakeOverLive`]).
    displaced: Vec<ProducerCell<'s, M>>,
    alloc: Option<Allocator<'s>>,
}

/// A held message's bytes, through its words (loom and shuttle builds have no byte view).
fn held_bytes<M: Memory>(c: &Consumer<&M>, h: &Hold) -> Vec<u8> {
    let mut out: Vec<u8> = c
        .held_words(h)
        .unwrap_or_default()
        .iter()
        .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    out.truncate(h.len());
    out
}

fn owner(id: u64) -> OwnerId {
    OwnerId::new(id.max(1)).unwrap_or(OwnerId::new(1).expect("1 is not 0"))
}

impl<'s, M: Memory> Real<'s, M> {
    /// Becomes the producer of `mem` (a freshly formatted segment) and attaches its allocator.
    ///
    /// # Errors
    /// A [`Failure`] when the producer cannot be created or the allocator region is invalid.
    pub fn new(mem: &'s M) -> Result<Self, Failure> {
        // SAFETY: the harness is the only party on `mem` (a fresh segment for its run) that
        // reclaims or takes over, and it does so only through its explicit `ReclaimLive` /
        // `TakeOverLive` steps (the lying oracle it models), which hold no pin or slot when they
        // run and whose old handles are kept only to check that they are fenced out.
        let producer = unsafe { Producer::new_unchecked(mem, owner(PRODUCER_OWNER)) }
            .map_err(|e| Failure(format!("Producer::new: {e}")))?;
        let words = mem.alloc_words();
        let alloc = if words.is_empty() {
            None
        } else {
            Some(Allocator::attach(words).map_err(|e| Failure(format!("attach allocator: {e}")))?)
        };
        Ok(Self {
            mem,
            producer: Some(Held::new(producer)),
            producer_owner: PRODUCER_OWNER,
            consumers: (0..mem.geometry().consumers()).map(|_| None).collect(),
            holds: (0..mem.geometry().consumers())
                .map(|_| Vec::new())
                .collect(),
            registrations: 0,
            victims: Vec::new(),
            displaced: Vec::new(),
            alloc,
        })
    }

    fn index(&self, consumer: u8) -> usize {
        consumer as usize % self.consumers.len()
    }

    /// Whether entry `i` holds a live group member's handle.
    fn is_member(&self, i: usize) -> bool {
        self.consumers[i]
            .as_ref()
            .and_then(Held::peek)
            .is_some_and(|c| c.group().is_some())
    }

    fn take_consumer(&mut self, consumer: u8) -> Option<ConsumerCell<'s, M>> {
        let i = self.index(consumer);
        // Its holds' tokens go with it (inert: the consumer's drop, or its reclaim after a
        // death, ends the holds in shared memory).
        self.holds[i].clear();
        self.consumers[i].take()
    }

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
                    model.head,
                )),
            },
            Op::AllocWrite { which, seed, extra } => {
                let (Some(a), false) = (self.alloc.as_mut(), model.live.is_empty()) else {
                    return Outcome::Skipped;
                };
                let target = model.live[which as usize % model.live.len()].alloc;
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
            Op::ReadBatch { consumer, max } => self.read_batch(self.index(consumer), max, model),
            Op::CreateGroup { group } => match self.producer.as_mut().and_then(Held::get) {
                Some(p) => Outcome::Group(p.create_group(group_name(group))),
                // A held claim borrows the producer: the model skips, and so do we.
                None => Outcome::Skipped,
            },
            Op::Join { group } => self.join(group),
        }
    }

    /// [`Op::Join`]: a member allowed `MAX_HOLDS` holds (as many as its claim words).
    fn join(&mut self, group: u8) -> Outcome {
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
    fn adopt(&mut self, c: Consumer<&'s M>) -> Outcome {
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
    fn read_batch(&mut self, i: usize, max: u8, model: &Model) -> Outcome {
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

    fn register(&mut self, class: crate::model::Class, id: OwnerId) -> Outcome {
        // SAFETY: as in `Real::new`.
        match unsafe { Consumer::new_unchecked(self.mem, class.into(), id) } {
            Ok(c) => self.adopt(c),
            Err(e) => Outcome::RegisterFailed(e),
        }
    }

    /// [`Op::ReclaimLive`]: as the model, a live consumer without a `Pinned` (its pin, if
    /// any, leaked), by its right owner; the victim keeps its handle.
    fn reclaim_live(&mut self, i: usize, model: &Model) -> Outcome {
        // As the model: never a consumer that holds messages (their bytes would be rewritten).
        if !self.holds[i].is_empty() {
            return Outcome::Skipped;
        }
        let Some(victim) = self.consumers[i].take_if(|c| c.guard.is_none()) else {
            return Outcome::Skipped;
        };
        // The right owner, as the model knows it (a wrong one shows as a mismatch).
        let id = owner(model.consumers[i].as_ref().map_or(1, |c| c.owner));
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
    fn victim(&mut self, which: u8, call: VictimCall) -> Outcome {
        if self.victims.is_empty() {
            return Outcome::Skipped;
        }
        let k = which as usize % self.victims.len();
        if call == VictimCall::Drop {
            drop(self.victims.remove(k));
            return Outcome::Gone;
        }
        let Some(c) = self.victims[k].get() else {
            return Outcome::Skipped;
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
    fn take_over_live(&mut self, same_owner: bool) -> Outcome {
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
    fn displaced(&mut self, which: u8, call: DisplacedCall) -> Outcome {
        if self.displaced.is_empty() {
            return Outcome::Skipped;
        }
        let k = which as usize % self.displaced.len();
        if call == DisplacedCall::Drop {
            drop(self.displaced.remove(k));
            return Outcome::Gone;
        }
        let Some(p) = self.displaced[k].get() else {
            return Outcome::Skipped;
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

    fn claim(&mut self) -> Outcome {
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

    fn pin(&mut self, i: usize) -> Outcome {
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

    fn reclaim(&mut self, i: usize, model: &Model) -> Outcome {
        // As the model: a dead consumer's owner; a live one under a wrong owner.
        let expected = match &model.consumers[i] {
            Some(c) if c.alive => c.owner + 1_000_000,
            Some(c) => c.owner,
            // A group's record, as its owner: reclaim must still leave it alone.
            None if model.records[i].is_some() => OWNER_GROUP,
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

    /// Checks every invariant of `docs/DESIGN.md` on the real ring against `model`.
    ///
    /// # Errors
    /// The first [`Failure`] found.
    pub fn check(&self, model: &Model) -> Result<(), Failure> {
        let mem = self.mem;
        let n = mem.geometry().slots();
        let p = producer_info(mem);
        ensure!(
            p.head == model.head,
            "head {} != model {}",
            p.head,
            model.head
        );
        ensure!(
            p.closed == model.closed,
            "closed flag {} != model",
            p.closed
        );
        ensure!(
            p.owner == model.producer_owner,
            "producer owner {} != model {}",
            p.owner,
            model.producer_owner
        );
        // `is_claimable` (what a polling producer spins on): true exactly when a claim would
        // not be refused for a gating consumer or a pin.
        if let Some(prod) = self.producer.as_ref().and_then(Held::peek) {
            let blocked = model.claim_blocked();
            ensure!(
                prod.is_claimable() == blocked.is_none(),
                "is_claimable() {} but the model's claim would be {blocked:?}",
                prod.is_claimable()
            );
        }
        // Invariant 1 (one writer): at most one slot is being written, the claimed one, and
        // never one a reader pins.
        ensure!(
            p.writing == u32::from(model.claim.is_some()),
            "{} slots marked WRITER, model claim {:?}",
            p.writing,
            model.claim
        );
        let order = core::sync::atomic::Ordering::Relaxed;
        for (i, ms) in model.slots.iter().enumerate().take(n) {
            let h = mem.slot_header(i);
            let state = h.state.load(order);
            let writer = state & WRITER != 0;
            ensure!(
                writer == (model.claim.map(|c| c.slot) == Some(i)),
                "slot {i}: WRITER={writer}, model claim {:?}",
                model.claim
            );
            let readers = (state & READER_MASK) as u32;
            ensure!(
                !(writer && readers != 0),
                "slot {i}: written and pinned at once ({state:#x})"
            );
            ensure!(
                readers == model.readers(i),
                "slot {i}: reader bits {readers:#b} != model {:#b}",
                model.readers(i)
            );
            // A never-stall ring's route (and 0 on every other ring): where the newest message
            // whose home this slot is lives.
            let route = h.route.load(order);
            ensure!(
                route == model.route_word(i),
                "slot {i}: route word {route:#x} != model {:#x} ({:?})",
                model.route_word(i),
                model.routes[i]
            );
            let stamp = h.stamp.load(order);
            ensure!(
                stamp == ms.stamp,
                "slot {i}: stamp {stamp} != model {}",
                ms.stamp
            );
            let mut bytes = vec![0u8; ms.bytes.len()];
            for (k, w) in mem.payload(i).iter().enumerate() {
                let b = w.load(order).to_ne_bytes();
                let end = (k * 8 + 8).min(bytes.len());
                bytes[k * 8..end].copy_from_slice(&b[..end - k * 8]);
            }
            ensure!(
                bytes == ms.bytes,
                "slot {i}: payload {bytes:?} != model {:?}",
                ms.bytes
            );
            // The message line's inline words, all of them: a small message travels there
            // (written straight in, or copied from the payload area at publish, its last word
            // padded), and nothing else writes them.
            let mut inline = vec![0u8; ms.inline.len()];
            for (k, w) in h.inline.iter().enumerate() {
                inline[k * 8..k * 8 + 8].copy_from_slice(&w.load(order).to_ne_bytes());
            }
            ensure!(
                inline == ms.inline,
                "slot {i}: inline words {inline:?} != model {:?}",
                ms.inline
            );
            if stamp % 2 == 0 && stamp > 0 {
                let len = h.len.load(order);
                ensure!(
                    len == ms.len as u64,
                    "slot {i}: len {len} != model {}",
                    ms.len
                );
            }
        }
        for (i, mc) in model.consumers.iter().enumerate() {
            self.check_consumer(i, mc.as_ref(), model)?;
        }
        // The adversarial oracle's victims know they lost their entry or the ring.
        for (k, v) in self.victims.iter().enumerate() {
            ensure!(
                v.peek().is_some_and(|c| !c.is_registered()),
                "victim {k} still counts itself registered"
            );
        }
        for (k, d) in self.displaced.iter().enumerate() {
            ensure!(
                d.peek().is_some_and(Producer::is_displaced),
                "displaced producer {k} does not know it"
            );
        }
        ensure!(
            self.victims.len() == model.victims.len() && self.displaced.len() == model.displaced,
            "{} victims, {} displaced != model {} {}",
            self.victims.len(),
            self.displaced.len(),
            model.victims.len(),
            model.displaced
        );
        self.check_alloc(model)
    }

    fn check_consumer(
        &self,
        i: usize,
        mc: Option<&crate::model::ModelConsumer>,
        model: &Model,
    ) -> Result<(), Failure> {
        let info =
            consumer_info(self.mem, i).ok_or_else(|| Failure(format!("no consumer entry {i}")))?;
        let cell = self.consumers[i].as_ref();
        let words = |i: usize| -> Vec<u64> {
            self.mem
                .consumer_entry(i)
                .claims
                .iter()
                .map(|w| w.load(core::sync::atomic::Ordering::Relaxed))
                .collect()
        };
        if let Some(g) = &model.records[i] {
            // A group's record: the ring's, at the group's cursor, with its redelivery queue.
            let key = ring_core::group_key(crate::model::group_name(g.group));
            ensure!(
                info.state == EntryState::Active
                    && info.owner == OWNER_GROUP
                    && info.is_group
                    && info.group == key
                    && info.cursor == g.cursor
                    && info.pins == 0,
                "entry {i} should be group {}'s record at cursor {}: {info:?}",
                g.group,
                g.cursor
            );
            ensure!(
                words(i) == g.queue,
                "group {} (entry {i}): redelivery queue {:?} != model {:?}",
                g.group,
                words(i),
                g.queue
            );
            ensure!(cell.is_none(), "entry {i}: a consumer handle on a record");
            return self.check_group_floor(i, model);
        }
        let member = mc.and_then(|c| c.member.as_ref());
        let key = member.map_or(0, |m| {
            let g = model.records[m.record].as_ref().map_or(0, |g| g.group);
            ring_core::group_key(crate::model::group_name(g))
        });
        ensure!(
            // A freed entry keeps its last holder's key (as its class): not compared.
            (mc.is_none() || info.group == key) && !info.is_group,
            "entry {i}: group key {:#x} (record: {}) != model {key:#x}",
            info.group,
            info.is_group
        );
        let claims = member.map_or([0; ring_core::layout::GROUP_CLAIMS], |m| m.claims);
        ensure!(
            words(i) == claims && info.claims == claims.iter().filter(|&&v| v != 0).count() as u32,
            "entry {i}: claim words {:?} ({} counted) != model {claims:?}",
            words(i),
            info.claims
        );
        let Some(mc) = mc else {
            // Invariant 7: a reclaimed or departed entry holds nothing.
            ensure!(
                info.state == EntryState::Free && info.pins == 0 && info.owner == 0,
                "entry {i} should be free: {info:?}"
            );
            ensure!(cell.is_none(), "entry {i}: a handle outlived its entry");
            return Ok(());
        };
        ensure!(
            info.state == EntryState::Active && info.owner == mc.owner,
            "entry {i}: {info:?} != model {mc:?}"
        );
        ensure!(
            info.class == Some(mc.class.into()),
            "entry {i}: class {:?} != model {:?}",
            info.class,
            mc.class
        );
        ensure!(
            info.cursor == mc.cursor,
            "entry {i}: shared cursor {} != model {}",
            info.cursor,
            mc.cursor
        );
        ensure!(
            // A gating reader's pin (and hold) is its cursor: no reader bit.
            info.pins
                == if mc.class == crate::model::Class::Gating {
                    0
                } else {
                    u32::from(mc.pin.is_some()) + mc.holds.len() as u32
                },
            "entry {i}: {} pins != model {:?} and {} holds",
            info.pins,
            mc.pin,
            mc.holds.len()
        );
        // Every held message is still the one taken (the producer reused no held slot).
        for (slot, seq, _) in &mc.holds {
            let stamp = self
                .mem
                .slot_header(*slot)
                .stamp
                .load(core::sync::atomic::Ordering::Relaxed);
            ensure!(
                stamp == 2 * seq + 2,
                "consumer {i} holds message {seq}, but slot {slot} has stamp {stamp}"
            );
        }
        // Invariant 4, gating: nothing this consumer has not consumed is overwritten (a
        // member's cursor gates nothing: its group's floor does, checked with the record).
        if mc.class == crate::model::Class::Gating && mc.member.is_none() {
            self.intact_from(mc.cursor, model)
                .map_err(|f| Failure(format!("gating consumer {i} (cursor {}) {f}", mc.cursor)))?;
        }
        // Invariant 4, counting: everything between registration and the cursor was either
        // received or reported missed.
        // (A held pin at `seq` has skipped everything before `seq` but not consumed `seq` yet.)
        // (A member's cursor stays at its join: it counts the messages it took.)
        let upto = mc.pin.map_or(mc.next, |(_, seq)| seq);
        ensure!(
            mc.member.is_some() || mc.received + mc.missed == upto - mc.start,
            "model accounting broken for {i}: {mc:?}"
        );
        if !mc.alive {
            ensure!(
                cell.is_none(),
                "entry {i}: dead consumer still has a handle"
            );
            return Ok(());
        }
        let cell =
            cell.ok_or_else(|| Failure(format!("entry {i}: live consumer without a handle")))?;
        if let Some(pin) = cell.guard.as_ref() {
            // Invariant 2: a pinned read is the whole message it asked for, for as long as it
            // is held.
            let (slot, seq) = mc.pin.unwrap_or_default();
            let ms = &model.slots[slot];
            ensure!(
                pin.seq() == seq && pin.slot() == slot,
                "consumer {i} pins seq {} slot {}, model {seq} {slot}",
                pin.seq(),
                pin.slot()
            );
            ensure!(
                ms.stamp == 2 * seq + 2 && pin.bytes() == ms.message(),
                "consumer {i}: pinned message {seq} changed under the pin: {:?} vs {:?}",
                pin.bytes(),
                ms.message()
            );
        } else if let Some(c) = cell.peek() {
            ensure!(
                c.cursor() == mc.next && c.received() == mc.received && c.missed() == mc.missed,
                "consumer {i}: next/received/missed {}/{}/{} != model {}/{}/{}",
                c.cursor(),
                c.received(),
                c.missed(),
                mc.next,
                mc.received,
                mc.missed
            );
        }
        Ok(())
    }

    /// Invariant 4 for the group whose record is entry `record`: nothing it has not finished
    /// is overwritten — every message from the lowest of its cursor, its queue and its
    /// members' claims up to `head` is still in its slot.
    fn check_group_floor(&self, record: usize, model: &Model) -> Result<(), Failure> {
        let Some(g) = &model.records[record] else {
            return Ok(());
        };
        let mut floor = g.cursor;
        let claimed = g.queue.iter().chain(
            model
                .consumers
                .iter()
                .flatten()
                .filter_map(|c| c.member.as_ref())
                .filter(|m| m.record == record)
                .flat_map(|m| m.claims.iter()),
        );
        for &v in claimed {
            if v != 0 {
                floor = floor.min(v - 1);
            }
        }
        self.intact_from(floor, model)
            .map_err(|f| Failure(format!("group {} (floor {floor}) {f}", g.group)))
    }

    /// Every message from `from` up to `head` is still in its slot (on a never-stall ring, the
    /// slot its route names).
    fn intact_from(&self, from: u64, model: &Model) -> Result<(), Failure> {
        for seq in from..model.head {
            let Some(slot) = model.locate(seq) else {
                return Err(Failure(format!(
                    "lost message {seq}: its route names a later one"
                )));
            };
            let stamp = self
                .mem
                .slot_header(slot)
                .stamp
                .load(core::sync::atomic::Ordering::Relaxed);
            ensure!(
                stamp == 2 * seq + 2,
                "lost message {seq}: slot {slot} stamp {stamp}"
            );
        }
        Ok(())
    }

    fn check_alloc(&self, model: &Model) -> Result<(), Failure> {
        let Some(a) = self.alloc.as_ref() else {
            return Ok(());
        };
        // Invariant 8: accounting is exact, globally and per owner.
        let s = a.stats();
        let live_bytes: u64 = model.live.iter().map(|l| l.alloc.len).sum();
        ensure!(
            s.live == model.live.len() as u64 && s.live_bytes == live_bytes,
            "allocator stats {s:?} != model live {} bytes {live_bytes}",
            model.live.len()
        );
        for o in 0..u16::from(ALLOC_OWNERS) {
            let os = a
                .owner_stats(o)
                .map_err(|e| Failure(format!("owner_stats({o}): {e}")))?;
            let mine = model.live.iter().filter(|l| l.owner == o);
            let (n, b) = mine.fold((0u64, 0u64), |(n, b), l| (n + 1, b + l.alloc.len));
            ensure!(
                os.live == n && os.live_bytes == b,
                "owner {o}: stats {os:?} != model live {n} bytes {b}"
            );
        }
        let totals = a.leak_report(0, |_| {});
        ensure!(
            totals.count == model.live.len() as u64 && totals.corrupt == 0,
            "leak report {totals:?} != model live {}",
            model.live.len()
        );
        for l in &model.live {
            ensure!(
                a.lookup(l.alloc.handle) == Ok(l.alloc),
                "lookup({:#x}) != {:?}",
                l.alloc.handle,
                l.alloc
            );
            if let Some(want) = &l.bytes {
                let mut out = vec![0u8; want.len()];
                let got = a.read(&l.alloc, &mut out);
                ensure!(
                    got == Ok(want.len()) && &out == want,
                    "allocation {:?} holds {out:?}, model {want:?}",
                    l.alloc
                );
            }
        }
        for h in &model.freed {
            if !model.live.iter().any(|l| l.alloc.handle == *h) {
                ensure!(
                    matches!(a.lookup(*h), Err(AllocError::InvalidHandle { .. })),
                    "freed handle {h:#x} still looks live"
                );
            }
        }
        Ok(())
    }
}

/// Applies `ops` to a fresh model and the real ring over `mem` (a freshly formatted segment
/// of shape `cfg`), comparing outcomes and checking every invariant after every step; then
/// tears everything down and checks that the accounting returns to its baseline.
///
/// # Errors
/// The first [`Failure`], naming the step.
pub fn run_on<M: Memory>(
    mem: &M,
    cfg: &crate::model::ModelConfig,
    ops: &[Op],
) -> Result<(), Failure> {
    let mut model = Model::new(cfg);
    let mut real = Real::new(mem)?;
    real.check(&model)
        .map_err(|f| Failure(format!("before any op: {f}")))?;
    for (k, &op) in ops.iter().enumerate() {
        let got = real.apply(op, &model);
        let want = model
            .apply(op, &got)
            .map_err(|f| Failure(format!("step {k} {op:?}: {f}")))?;
        ensure!(
            got == want,
            "step {k} {op:?}: real {got:?} != model {want:?}"
        );
        real.check(&model)
            .map_err(|f| Failure(format!("after step {k} {op:?}: {f}")))?;
    }
    // Invariant 8: after the test, live allocations return to the baseline (zero).
    for o in 0..ALLOC_OWNERS {
        let op = Op::FreeAllOf { owner: o };
        let got = real.apply(op, &model);
        let want = model.apply(op, &got)?;
        ensure!(
            got == want,
            "teardown {op:?}: real {got:?} != model {want:?}"
        );
    }
    if let Some(a) = real.alloc.as_ref() {
        ensure!(a.stats().live == 0, "allocations leaked: {:?}", a.stats());
    }
    Ok(())
}

/// [`run_on`] over a fresh [`HeapSegment`](ring_core::HeapSegment).
///
/// # Errors
/// As [`run_on`], or when the segment cannot be built.
pub fn run(cfg: &crate::model::ModelConfig, ops: &[Op]) -> Result<(), Failure> {
    let seg = ring_core::HeapSegment::new(&cfg.config(), owner(PRODUCER_OWNER))
        .map_err(|e| Failure(format!("HeapSegment::new: {e}")))?;
    run_on(&seg, cfg, ops)
}
