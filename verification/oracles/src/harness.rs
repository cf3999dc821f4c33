//! The harness the `ops` and `hostile_peer` oracles share: a ring, its live producer and
//! consumers, and (while checking) the reference model. This file holds the dispatch, the
//! producer-side operations and the whole-state comparison; `harness_read.rs` the consumer side.

use super::attach::claim_error_documented;
use super::harness_check::check_write;
use super::model::{ReaderModel, RingModel};
use super::ops::{Finish, Op, Write};
use super::{displays, Outcome};
use ring_core::inspect::{consumer_info, producer_info};
use ring_core::{Consumer, HeapSegment, Memory, OwnerId, Producer, Spin};

/// A live consumer and the model's view of it.
pub struct Reader<'s> {
    /// The consumer.
    pub consumer: Consumer<&'s HeapSegment>,
    /// The model's view (kept up to date in loose mode too, but not checked there).
    pub model: ReaderModel,
    /// Its holds' tokens, in the order taken (as `model.holds`).
    pub holds: Vec<ring_core::Hold>,
}

/// The ring under test, its live handles and (while checking) the model.
pub struct Harness<'s> {
    /// The segment.
    pub seg: &'s HeapSegment,
    /// The model; `None` once a hostile peer has written the segment.
    pub model: Option<RingModel>,
    /// The live producer, if any.
    pub producer: Option<Producer<&'s HeapSegment>>,
    /// Live consumers.
    pub readers: Vec<Reader<'s>>,
    /// Next owner id to hand out.
    pub next_owner: u64,
    /// Slot capacity.
    pub cap: usize,
    /// Slot count.
    pub slots: usize,
}

pub(super) fn owner(id: u64) -> OwnerId {
    OwnerId::new(id).expect("the harness hands out non-zero owner ids")
}

/// A wrong owner id: never handed out by the harness.
pub(super) const STRANGER: u64 = 0x5eed_dead_0000_0001;

impl<'s> Harness<'s> {
    /// A harness over a freshly created `seg`; `checked` turns the model on.
    pub fn new(seg: &'s HeapSegment, checked: bool) -> Self {
        let g = *seg.geometry();
        Self {
            seg,
            model: checked.then(|| {
                RingModel::new(g.slots(), g.slot_capacity(), g.consumers())
                    .with_never_stall(g.config().never_stall)
            }),
            producer: None,
            readers: Vec::new(),
            next_owner: 100,
            cap: g.slot_capacity(),
            slots: g.slots(),
        }
    }

    pub(super) fn fresh_owner(&mut self) -> u64 {
        self.next_owner += 1;
        self.next_owner
    }

    fn fit(&self, v: u8) -> usize {
        usize::from(v) % (self.cap + 9)
    }

    /// Runs one operation and, while checking, compares everything with the model.
    pub fn step(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Publish { len, fill } => self.publish(self.fit(*len), *fill)?,
            Op::Claim {
                writes,
                finish,
                blocking,
            } => self.claim(writes, *finish, *blocking)?,
            Op::Register(class) => self.register((*class).into())?,
            Op::Leave(who) => {
                if let Some(r) = self.take_reader(*who) {
                    if let Some(m) = self.model.as_mut() {
                        m.leave(&r.model);
                    }
                    drop(r.consumer);
                }
            }
            Op::Die(who) => {
                if let Some(r) = self.take_reader(*who) {
                    core::mem::forget(r.consumer);
                }
            }
            Op::DieHoldingPin(who) if self.is_member(*who) => {
                if let Some(r) = self.take_reader(*who) {
                    self.member_die_holding_pin(r)?;
                }
            }
            Op::DieHoldingPin(who) => self.die_holding_pin(*who)?,
            Op::Reclaim { entry, right_owner } => self.reclaim(*entry, *right_owner)?,
            Op::Pin {
                who,
                claim_while_pinned,
            } if self.is_member(*who) => self.member_pin(*who, *claim_while_pinned)?,
            Op::Pin {
                who,
                claim_while_pinned,
            } => self.pin(*who, *claim_while_pinned)?,
            Op::Copy { who, buf } if self.is_member(*who) => {
                self.member_copy(*who, self.fit(*buf))?;
            }
            Op::Copy { who, buf } => self.copy(*who, self.fit(*buf))?,
            Op::Hold(who) if self.is_member(*who) => self.member_hold(*who)?,
            Op::Hold(who) => self.hold(*who)?,
            Op::Release { who, which } => self.release(*who, *which)?,
            Op::WaitReady(who) => self.wait_ready(*who)?,
            Op::WaitDrained => {
                if let Some(p) = self.producer.as_mut() {
                    let got = p.wait_drained(&mut Spin::new(8));
                    if let Some(m) = &self.model {
                        ensure!(
                            got == m.drained(),
                            "wait_drained {got}, model {}",
                            m.drained()
                        );
                    }
                }
            }
            Op::Close => {
                if let Some(p) = self.producer.as_mut() {
                    p.close();
                    if let Some(m) = self.model.as_mut() {
                        m.close();
                    }
                }
            }
            Op::ProducerNew => self.producer_new()?,
            Op::ProducerDrop => {
                if let Some(p) = self.producer.take() {
                    let id = p.owner().get();
                    drop(p);
                    if let Some(m) = self.model.as_mut() {
                        m.producer_drop(id);
                    }
                }
            }
            Op::ProducerDie => {
                if let Some(p) = self.producer.take() {
                    core::mem::forget(p);
                }
            }
            Op::ProducerDieMidWrite { len, fill } => self.die_mid_write(self.fit(*len), *fill)?,
            Op::TakeOver { right_owner } => self.take_over(*right_owner)?,
            Op::Inspect => {}
            Op::CreateGroup(group) => self.create_group(*group)?,
            Op::Join(group) => self.join(*group)?,
        }
        self.check_state()
    }

    pub(super) fn take_reader(&mut self, who: u8) -> Option<Reader<'s>> {
        let i = self.reader_index(who)?;
        Some(self.readers.swap_remove(i))
    }

    /// The reader an op names (`who % readers`), if there is any.
    pub(super) fn reader_index(&self, who: u8) -> Option<usize> {
        (!self.readers.is_empty()).then(|| usize::from(who) % self.readers.len())
    }

    /// The ring model (if checked) and the reader an op names, if there is any.
    pub(super) fn model_and_reader(
        &mut self,
        who: u8,
    ) -> Option<(&mut Option<RingModel>, &mut Reader<'s>)> {
        let i = self.reader_index(who)?;
        Some((&mut self.model, &mut self.readers[i]))
    }

    fn publish(&mut self, len: usize, fill: u8) -> Outcome {
        let Some(p) = self.producer.as_mut() else {
            return Ok(());
        };
        let data = vec![fill; len];
        let got = p.try_publish(&data);
        if let Err(e) = &got {
            claim_error_documented(e, self.slots, self.cap)?;
        }
        if let Some(m) = self.model.as_mut() {
            let want = m.try_publish(&data);
            ensure!(got == want, "try_publish: got {got:?}, model {want:?}");
        }
        Ok(())
    }

    fn claim(&mut self, writes: &[Write], finish: Finish, blocking: bool) -> Outcome {
        let cap = self.cap;
        let fit = |v: u8| usize::from(v) % (cap + 9);
        let Some(p) = self.producer.as_mut() else {
            return Ok(());
        };
        let want = self.model.as_ref().map(|m| m.claim());
        let got = if blocking {
            p.claim(&mut Spin::new(8))
        } else {
            p.try_claim()
        };
        let mut slot = match (got, want) {
            (Err(e), want) => {
                claim_error_documented(&e, self.slots, cap)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "claim: got Err({e:?}), model {want:?}"
                );
                return Ok(());
            }
            (Ok(slot), Some(Err(e))) => {
                return Err(format!(
                    "claim of seq {} succeeded, model says {e:?}",
                    slot.seq()
                ))
            }
            (Ok(slot), _) => slot,
        };
        let seq = slot.seq();
        // The slot the model chose (a never-stall ring's need not be the home slot); without a
        // model the index is not used.
        let index = match want {
            Some(Ok(index)) => index,
            _ => (seq % self.slots as u64) as usize,
        };
        ensure!(
            slot.capacity() == cap,
            "WriteSlot capacity {} != {cap}",
            slot.capacity()
        );
        if let Some(m) = self.model.as_mut() {
            ensure!(seq == m.head, "claimed seq {seq}, model head {}", m.head);
            m.begin(index);
        }
        let (mut len, mut meta) = (0usize, [0u64; 2]);
        for w in writes.iter().take(8) {
            match *w {
                Write::All { len: l, fill } => {
                    let data = vec![fill; fit(l)];
                    let got = slot.write(&data);
                    let ok = data.len() <= cap;
                    check_write(got, ok, cap, data.len())?;
                    if ok {
                        len = data.len();
                        if let Some(m) = self.model.as_mut() {
                            m.write_at(index, 0, &data);
                        }
                    }
                }
                Write::At {
                    offset,
                    len: l,
                    fill,
                } => {
                    let (off, data) = (fit(offset), vec![fill; fit(l)]);
                    let got = slot.write_at(off, &data);
                    let ok = off + data.len() <= cap;
                    check_write(got, ok, cap, off + data.len())?;
                    if ok {
                        len = len.max(off + data.len());
                        if let Some(m) = self.model.as_mut() {
                            m.write_at(index, off, &data);
                        }
                    }
                }
                Write::SetLen(l) => {
                    let l = fit(l);
                    let got = slot.set_len(l);
                    check_write(got, l <= cap, cap, l)?;
                    if l <= cap {
                        len = l;
                    }
                }
                Write::Meta(a, b) => {
                    meta = [a, b];
                    slot.set_meta(meta);
                }
            }
        }
        match finish {
            Finish::Publish => {
                let got = slot.publish();
                ensure!(got == Ok(seq), "publish returned {got:?}, claimed {seq}");
                if let Some(m) = self.model.as_mut() {
                    m.publish(index, len, meta);
                }
            }
            Finish::Abort | Finish::Drop => {
                if matches!(finish, Finish::Abort) {
                    slot.abort();
                } else {
                    drop(slot);
                }
                if let Some(m) = self.model.as_mut() {
                    m.abort(index);
                }
            }
        }
        Ok(())
    }

    fn reclaim(&mut self, entry: u8, right_owner: bool) -> Outcome {
        let Some(p) = self.producer.as_mut() else {
            return Ok(());
        };
        let k = self.seg.geometry().consumers();
        let index = usize::from(entry) % (k + 1);
        if right_owner
            && self
                .readers
                .iter()
                .any(|r| r.model.index == index && r.model.member.is_some())
        {
            // A live member reclaimed by a lying verdict would have its claims handed to
            // another member while it still reads them: that case is the lone consumers'.
            return Ok(());
        }
        let real = consumer_info(self.seg, index).map_or(0, |i| i.owner);
        let expected = if right_owner && real != 0 {
            real
        } else {
            STRANGER
        };
        // SAFETY: operations run one at a time and no `Pinned` outlives the operation that
        // made it, so the entry's consumer — alive or not: this is the lying-oracle case —
        // is inside no call and holds no pin, which is all `reclaim` asks.
        let got = unsafe { p.reclaim(index, owner(expected)) };
        match &got {
            Ok(r) => {
                ensure!(r.index == index, "reclaim({index}) reports {}", r.index);
                ensure!(
                    r.pins_cleared as usize <= self.slots,
                    "cleared {} pins",
                    r.pins_cleared
                );
            }
            Err(e) => {
                displays(e)?;
                ensure!(
                    matches!(
                        e,
                        ring_core::Error::NoSuchConsumer { .. }
                            | ring_core::Error::OwnerMismatch { .. }
                            | ring_core::Error::RedeliveryFull { .. }
                    ),
                    "reclaim: undocumented {e:?}"
                );
            }
        }
        if let Some(m) = self.model.as_mut() {
            let want = m.reclaim(index, expected);
            ensure!(
                got == want,
                "reclaim({index}, {expected:#x}): got {got:?}, model {want:?}"
            );
        }
        Ok(())
    }

    fn producer_new(&mut self) -> Outcome {
        let id = self.fresh_owner();
        let got = Producer::new(self.seg, owner(id));
        let want = self.model.as_mut().map(|m| m.producer_new(id));
        match got {
            Ok(p) => {
                if self.producer.is_some() {
                    // Only a peer that cleared the owner word lets a second producer in; the
                    // model (which has no such peer) calls it a bug.
                    ensure!(
                        self.model.is_none(),
                        "a second Producer::new succeeded while one is live"
                    );
                    drop(p);
                    return Ok(());
                }
                ensure!(
                    want.is_none_or(|w| w.is_ok()),
                    "Producer::new succeeded, model {want:?}"
                );
                if let Some(m) = &self.model {
                    ensure!(
                        p.published() == m.head,
                        "published {} != head {}",
                        p.published(),
                        m.head
                    );
                }
                self.producer = Some(p);
            }
            Err(e) => refused(
                "Producer::new",
                e,
                matches!(e, ring_core::Error::ProducerExists { .. }),
                want,
            )?,
        }
        Ok(())
    }

    fn take_over(&mut self, right_owner: bool) -> Outcome {
        if self.producer.is_some() {
            // Taking over from a live producer breaks the one-writer rule by the caller's fault.
            return Ok(());
        }
        let id = self.fresh_owner();
        let word = producer_info(self.seg).owner;
        let dead = if right_owner && word != 0 {
            word
        } else {
            STRANGER
        };
        // SAFETY: no producer handle exists here (checked above), so none holds a `WriteSlot`.
        let got = unsafe { Producer::take_over(self.seg, owner(id), owner(dead)) };
        let want = self.model.as_mut().map(|m| m.take_over(id, dead));
        let p = match got {
            Ok(p) => p,
            Err(e) => {
                let documented = matches!(e, ring_core::Error::OwnerMismatch { .. });
                return refused("take_over", e, documented, want);
            }
        };
        ensure!(
            want.is_none_or(|w| w.is_ok()),
            "take_over succeeded, model {want:?}"
        );
        self.producer = Some(p);
        Ok(())
    }

    fn die_mid_write(&mut self, len: usize, fill: u8) -> Outcome {
        let Some(mut p) = self.producer.take() else {
            return Ok(());
        };
        let want = self.model.as_ref().map(|m| m.claim());
        match p.try_claim() {
            Ok(mut slot) => {
                let index = match want {
                    Some(Ok(index)) => index,
                    _ => (slot.seq() % self.slots as u64) as usize,
                };
                let data = vec![fill; len];
                let ok = len <= self.cap;
                check_write(slot.write(&data), ok, self.cap, len)?;
                if let Some(m) = self.model.as_mut() {
                    ensure!(
                        want == Some(Ok(index)),
                        "claim of slot {index}, model {want:?}"
                    );
                    m.begin(index);
                    if ok {
                        m.write_at(index, 0, &data);
                    }
                }
                core::mem::forget(slot);
            }
            Err(e) => {
                claim_error_documented(&e, self.slots, self.cap)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "claim: got {e:?}, model {want:?}"
                );
            }
        }
        core::mem::forget(p);
        Ok(())
    }
}

/// A producer join (`call`) refused with `e`: the error displays, is one the call documents
/// (`documented`), and is what the model, while it is on, says (`want`).
fn refused(
    call: &str,
    e: ring_core::Error,
    documented: bool,
    want: Option<Result<(), ring_core::Error>>,
) -> Outcome {
    displays(&e)?;
    ensure!(documented, "{call}: undocumented {e:?}");
    ensure!(
        want.is_none_or(|w| w == Err(e)),
        "{call}: got {e:?}, model {want:?}"
    );
    Ok(())
}
