//! `ops`: structure-aware sequences of producer and consumer operations on one thread, checked
//! step by step against the reference [`model`](super::model).
//!
//! Every call's result is compared with the model's prediction, and after every operation the
//! whole shared state (each consumer entry, the producer line, every pin) and each consumer's
//! own counters are compared too; the accounting rule `next - start == received + missed` and
//! "a gating consumer misses nothing" are checked as properties of their own. Deaths are
//! simulated by forgetting a `Consumer`, a `Pinned`, a `Producer` or a `WriteSlot`
//! (`mem::forget` runs no destructor, exactly like a killed process).
//!
//! The [`hostile`](super::hostile) oracle reuses this harness with the model switched off.

use super::attach::{claim_error_documented, read_error_documented};
use super::model::{ReaderModel, RingModel};
use super::{displays, Outcome};
use arbitrary::Arbitrary;
use ring_core::inspect::{consumer_info, producer_info, total_pins, ConsumerInfo, EntryState};
use ring_core::{
    Config, Consumer, DeliveryClass, HeapSegment, Memory, Overflow, OwnerId, Producer, Spin,
};

/// Most operations one input runs (longer inputs are cut, to keep executions fast).
pub const MAX_OPS: usize = 256;

/// Ring shape: small enough that wrap-around, gating and a full table happen often.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Shape {
    /// Slots: `1 + slots % 8`.
    pub slots: u8,
    /// Slot capacity: `8 * (1 + cap_words % 8)` bytes.
    pub cap_words: u8,
    /// Consumer-table entries: `1 + consumers % 5`.
    pub consumers: u8,
}

impl Shape {
    /// The ring configuration this shape stands for.
    pub fn config(self) -> Config {
        Config::new(
            1 + u32::from(self.slots % 8),
            8 * (1 + u32::from(self.cap_words % 8)),
        )
        .with_consumers(1 + u32::from(self.consumers % 5))
    }
}

/// A delivery class.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Class {
    /// [`DeliveryClass::Gating`].
    Gating,
    /// [`DeliveryClass::LatestOnly`].
    LatestOnly,
    /// [`DeliveryClass::SkipOnLag`].
    SkipOnLag,
}

impl From<Class> for DeliveryClass {
    fn from(c: Class) -> Self {
        match c {
            Class::Gating => Self::Gating,
            Class::LatestOnly => Self::LatestOnly,
            Class::SkipOnLag => Self::SkipOnLag,
        }
    }
}

/// One call on a claimed [`ring_core::WriteSlot`].
#[derive(Arbitrary, Clone, Debug)]
pub enum Write {
    /// `write(&[fill; len])`.
    All {
        /// Length (taken modulo capacity + 9, so some overflow).
        len: u8,
        /// Byte value.
        fill: u8,
    },
    /// `write_at(offset, &[fill; len])`.
    At {
        /// Offset (modulo capacity + 9).
        offset: u8,
        /// Length (modulo capacity + 9).
        len: u8,
        /// Byte value.
        fill: u8,
    },
    /// `set_len(len)` (modulo capacity + 9).
    SetLen(u8),
    /// `set_meta`.
    Meta(u64, u64),
}

/// How a claim ends.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Finish {
    /// `publish()`.
    Publish,
    /// `abort()`.
    Abort,
    /// Drop the `WriteSlot` (an abort).
    Drop,
}

/// One operation. Consumers are picked by `who % live consumers`; ops that need a missing
/// producer or consumer do nothing.
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    /// `try_publish(&[fill; len % (cap + 9)])`.
    Publish {
        /// Length.
        len: u8,
        /// Byte value.
        fill: u8,
    },
    /// `try_claim` (or the bounded `claim`), some writes, then publish or abort.
    Claim {
        /// The writes.
        writes: Vec<Write>,
        /// The end.
        finish: Finish,
        /// Use `claim(&mut Spin)` instead of `try_claim`.
        blocking: bool,
    },
    /// `Consumer::new`.
    Register(Class),
    /// Drop a consumer.
    Leave(u8),
    /// Forget a consumer (its process died).
    Die(u8),
    /// Pin, then forget the pin and the consumer (died holding a pin).
    DieHoldingPin(u8),
    /// `Producer::reclaim` of entry `entry % (table + 1)`, naming its owner or a wrong one.
    Reclaim {
        /// Entry index.
        entry: u8,
        /// Name the entry's real owner.
        right_owner: bool,
    },
    /// `try_pin`; optionally try to publish while the pin is held.
    Pin {
        /// Which consumer.
        who: u8,
        /// Publish while pinned.
        claim_while_pinned: bool,
    },
    /// `try_copy` into a buffer of `buf % (cap + 9)` bytes.
    Copy {
        /// Which consumer.
        who: u8,
        /// Buffer length.
        buf: u8,
    },
    /// `wait_ready` with a small spin budget.
    WaitReady(u8),
    /// `wait_drained` with a small spin budget.
    WaitDrained,
    /// `Producer::close`.
    Close,
    /// `Producer::new` (fails while another producer owns the ring).
    ProducerNew,
    /// Drop the producer.
    ProducerDrop,
    /// Forget the producer (its process died).
    ProducerDie,
    /// Claim and write, then forget the slot and the producer (died mid-write).
    ProducerDieMidWrite {
        /// Length written.
        len: u8,
        /// Byte value.
        fill: u8,
    },
    /// `Producer::take_over` from the dead producer (or naming a wrong one).
    TakeOver {
        /// Name the real dead owner.
        right_owner: bool,
    },
    /// Compare every inspection view with the model.
    Inspect,
}

/// The `ops` input.
#[derive(Arbitrary, Clone, Debug)]
pub struct OpsInput {
    /// Ring shape.
    pub shape: Shape,
    /// Operations, in order.
    pub ops: Vec<Op>,
}

/// A live consumer and the model's view of it.
pub struct Reader<'s> {
    /// The consumer.
    pub consumer: Consumer<&'s HeapSegment>,
    /// The model's view (kept up to date in loose mode too, but not checked there).
    pub model: ReaderModel,
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

fn owner(id: u64) -> OwnerId {
    OwnerId::new(id).expect("the harness hands out non-zero owner ids")
}

/// A wrong owner id: never handed out by the harness.
const STRANGER: u64 = 0x5eed_dead_0000_0001;

/// Runs one `ops` input against the model.
pub fn run(input: &OpsInput) -> Outcome {
    let config = input.shape.config();
    let seg = HeapSegment::new(&config, owner(1))
        .map_err(|e| format!("HeapSegment::new({config:?}) failed: {e}"))?;
    let mut h = Harness::new(&seg, true);
    // Start with a producer, so that short inputs already publish.
    h.step(&Op::ProducerNew)?;
    for (step, op) in input.ops.iter().take(MAX_OPS).enumerate() {
        h.step(op)
            .map_err(|e| format!("step {step} ({op:?}): {e}"))?;
    }
    h.finish()?;
    // The segment a real run leaves behind attaches and serves every read.
    super::attach::run(&seg.to_bytes())
}

impl<'s> Harness<'s> {
    /// A harness over a freshly created `seg`; `checked` turns the model on.
    pub fn new(seg: &'s HeapSegment, checked: bool) -> Self {
        let g = *seg.geometry();
        Self {
            seg,
            model: checked.then(|| RingModel::new(g.slots(), g.slot_capacity(), g.consumers())),
            producer: None,
            readers: Vec::new(),
            next_owner: 100,
            cap: g.slot_capacity(),
            slots: g.slots(),
        }
    }

    fn fresh_owner(&mut self) -> u64 {
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
            Op::DieHoldingPin(who) => self.die_holding_pin(*who)?,
            Op::Reclaim { entry, right_owner } => self.reclaim(*entry, *right_owner)?,
            Op::Pin {
                who,
                claim_while_pinned,
            } => self.pin(*who, *claim_while_pinned)?,
            Op::Copy { who, buf } => self.copy(*who, self.fit(*buf))?,
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
                        m.closed = true;
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
        }
        self.check_state()
    }

    fn take_reader(&mut self, who: u8) -> Option<Reader<'s>> {
        if self.readers.is_empty() {
            return None;
        }
        let i = usize::from(who) % self.readers.len();
        Some(self.readers.swap_remove(i))
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
        let index = (seq % self.slots as u64) as usize;
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
                ensure!(got == seq, "publish returned {got}, claimed {seq}");
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

    fn register(&mut self, class: DeliveryClass) -> Outcome {
        let id = self.fresh_owner();
        let got = Consumer::new(self.seg, class, owner(id));
        let want = self.model.as_mut().map(|m| m.register(class, id));
        match (got, want) {
            (Ok(c), Some(Ok(rm))) => {
                ensure!(
                    c.index() == rm.index,
                    "registered at {}, model {}",
                    c.index(),
                    rm.index
                );
                self.readers.push(Reader {
                    consumer: c,
                    model: rm,
                });
            }
            (Ok(c), None) => {
                let model = ReaderModel {
                    index: c.index(),
                    owner: id,
                    class,
                    next: c.cursor(),
                    start: c.cursor(),
                    received: 0,
                    missed: 0,
                };
                self.readers.push(Reader { consumer: c, model });
            }
            (Err(e), want) => {
                displays(&e)?;
                ensure!(
                    matches!(e, ring_core::Error::ConsumerTableFull { .. }),
                    "Consumer::new: undocumented {e:?}"
                );
                ensure!(
                    want.as_ref().is_none_or(|w| *w == Err(e)),
                    "Consumer::new: got {e:?}, model {want:?}"
                );
            }
            (Ok(c), Some(Err(e))) => {
                return Err(format!("registered at {}, model says {e:?}", c.index()))
            }
        }
        Ok(())
    }

    fn pin(&mut self, who: u8, claim_while_pinned: bool) -> Outcome {
        if self.readers.is_empty() {
            return Ok(());
        }
        let i = usize::from(who) % self.readers.len();
        let (cap, slots) = (self.cap, self.slots);
        let Self {
            model,
            readers,
            producer,
            seg,
            ..
        } = self;
        let r = &mut readers[i];
        let bit = 1u32 << r.model.index;
        let want = model.as_ref().map(|m| m.read(&mut r.model, None));
        let pinned = match r.consumer.try_pin() {
            Ok(p) => p,
            Err(e) => {
                read_error_documented(&e, false)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_pin: got Err({e:?}), model {want:?}"
                );
                return Ok(());
            }
        };
        ensure!(
            pinned.len() <= cap,
            "pinned {} bytes of a {cap}-byte slot",
            pinned.len()
        );
        ensure!(
            pinned.bytes().len() == pinned.len(),
            "bytes() length differs from len()"
        );
        ensure!(
            pinned.words().len() == pinned.len().div_ceil(8),
            "words() length"
        );
        ensure!(
            pinned.slot() < slots,
            "pinned slot {} of {slots}",
            pinned.slot()
        );
        let (seq, slot) = (pinned.seq(), pinned.slot());
        if let Some(m) = model.as_mut() {
            let w = match want {
                Some(Ok(w)) => w,
                other => return Err(format!("try_pin pinned seq {seq}, model {other:?}")),
            };
            ensure!(
                (seq, slot, pinned.len(), pinned.missed(), pinned.meta())
                    == (w.seq, w.slot, w.len, w.missed, w.meta),
                "try_pin: got seq {seq} slot {slot} len {} missed {} meta {:?}, model {w:?}",
                pinned.len(),
                pinned.missed(),
                pinned.meta()
            );
            ensure!(
                pinned.bytes() == &m.slots[slot].bytes[..w.len],
                "pinned bytes differ from what was written"
            );
            let padded = w.len.div_ceil(8) * 8;
            let words: Vec<u8> = pinned
                .words()
                .iter()
                .flat_map(|x| x.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
                .collect();
            ensure!(
                words == m.slots[slot].bytes[..padded],
                "words() differ from the message (or are not zero-padded past len {}): {words:?}",
                w.len
            );
            let mut out = vec![0u8; w.len];
            ensure!(pinned.copy_to(&mut out) == w.len, "copy_to length");
            ensure!(out == m.slots[slot].bytes[..w.len], "copy_to bytes differ");
            m.slots[slot].readers |= bit;
            ensure!(
                total_pins(*seg) == m.slots.iter().map(|s| s.readers.count_ones()).sum::<u32>(),
                "total_pins while pinned disagrees with the model"
            );
        }
        if claim_while_pinned {
            if let Some(p) = producer.as_mut() {
                let data = vec![0xee; (seq as usize % cap) + 1];
                let got = p.try_publish(&data);
                if let Err(e) = &got {
                    claim_error_documented(e, slots, cap)?;
                }
                if let Some(m) = model.as_mut() {
                    let want = m.try_publish(&data);
                    ensure!(
                        got == want,
                        "try_publish while pinned: got {got:?}, model {want:?}"
                    );
                    if got.is_ok() {
                        // The pinned message must not have changed under the pin.
                        ensure!(
                            m.slots[slot].stamp == 2 * seq + 2,
                            "the producer overwrote a pinned slot"
                        );
                    }
                }
            }
        }
        drop(pinned);
        if let Some(m) = model.as_mut() {
            m.slots[slot].readers &= !bit;
            m.advance(&mut r.model, seq);
        }
        Ok(())
    }

    fn copy(&mut self, who: u8, buf_len: usize) -> Outcome {
        if self.readers.is_empty() {
            return Ok(());
        }
        let i = usize::from(who) % self.readers.len();
        let Self { model, readers, .. } = self;
        let r = &mut readers[i];
        let mut buf = vec![0u8; buf_len];
        let want = model.as_ref().map(|m| m.read(&mut r.model, Some(buf_len)));
        match r.consumer.try_copy(&mut buf) {
            Ok(got) => {
                ensure!(
                    got.len <= buf_len,
                    "copied {} bytes into {buf_len}",
                    got.len
                );
                if let Some(m) = model.as_mut() {
                    let w = match want {
                        Some(Ok(w)) => w,
                        other => return Err(format!("try_copy got {got:?}, model {other:?}")),
                    };
                    ensure!(
                        (got.seq, got.len, got.missed, got.meta)
                            == (w.seq, w.len, w.missed, w.meta),
                        "try_copy: got {got:?}, model {w:?}"
                    );
                    ensure!(
                        buf[..w.len] == m.slots[w.slot].bytes[..w.len],
                        "copied bytes differ from what was written"
                    );
                    m.advance(&mut r.model, w.seq);
                }
            }
            Err(e) => {
                read_error_documented(&e, true)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_copy: got Err({e:?}), model {want:?}"
                );
            }
        }
        Ok(())
    }

    fn wait_ready(&mut self, who: u8) -> Outcome {
        if self.readers.is_empty() {
            return Ok(());
        }
        let i = usize::from(who) % self.readers.len();
        let r = &mut self.readers[i];
        let got = r.consumer.wait_ready(&mut Spin::new(8));
        if let Err(e) = &got {
            displays(e)?;
            ensure!(
                matches!(
                    e,
                    ring_core::ReadError::Timeout | ring_core::ReadError::Evicted
                ),
                "wait_ready: undocumented {e:?}"
            );
        }
        if let Some(m) = &self.model {
            let want = m.wait_ready(&r.model);
            ensure!(got == want, "wait_ready: got {got:?}, model {want:?}");
        }
        Ok(())
    }

    fn die_holding_pin(&mut self, who: u8) -> Outcome {
        let Some(mut r) = self.take_reader(who) else {
            return Ok(());
        };
        let want = self.model.as_ref().map(|m| m.read(&mut r.model, None));
        match r.consumer.try_pin() {
            Ok(pinned) => {
                let slot = pinned.slot();
                if let Some(m) = self.model.as_mut() {
                    ensure!(
                        matches!(want, Some(Ok(w)) if w.seq == pinned.seq() && w.slot == slot),
                        "try_pin pinned seq {}, model {want:?}",
                        pinned.seq()
                    );
                    m.slots[slot].readers |= 1 << r.model.index;
                }
                core::mem::forget(pinned);
            }
            Err(e) => {
                read_error_documented(&e, false)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_pin: got Err({e:?}), model {want:?}"
                );
            }
        }
        core::mem::forget(r.consumer);
        Ok(())
    }

    fn reclaim(&mut self, entry: u8, right_owner: bool) -> Outcome {
        let Some(p) = self.producer.as_mut() else {
            return Ok(());
        };
        let k = self.seg.geometry().consumers();
        let index = usize::from(entry) % (k + 1);
        let real = consumer_info(self.seg, index).map_or(0, |i| i.owner);
        let expected = if right_owner && real != 0 {
            real
        } else {
            STRANGER
        };
        let got = p.reclaim(index, owner(expected));
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
                ensure!(
                    self.producer.is_none(),
                    "a second Producer::new succeeded while one is live"
                );
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
            Err(e) => {
                displays(&e)?;
                ensure!(
                    matches!(e, ring_core::Error::ProducerExists { .. }),
                    "Producer::new: undocumented {e:?}"
                );
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "Producer::new: got {e:?}, model {want:?}"
                );
            }
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
        let got = Producer::take_over(self.seg, owner(id), owner(dead));
        let want = self.model.as_mut().map(|m| m.take_over(id, dead));
        match got {
            Ok(p) => {
                ensure!(
                    want.is_none_or(|w| w.is_ok()),
                    "take_over succeeded, model {want:?}"
                );
                self.producer = Some(p);
            }
            Err(e) => {
                displays(&e)?;
                ensure!(
                    matches!(e, ring_core::Error::OwnerMismatch { .. }),
                    "take_over: undocumented {e:?}"
                );
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "take_over: got {e:?}, model {want:?}"
                );
            }
        }
        Ok(())
    }

    fn die_mid_write(&mut self, len: usize, fill: u8) -> Outcome {
        let Some(mut p) = self.producer.take() else {
            return Ok(());
        };
        let want = self.model.as_ref().map(|m| m.claim());
        match p.try_claim() {
            Ok(mut slot) => {
                let index = (slot.seq() % self.slots as u64) as usize;
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

    /// Compares every shared word the inspection API shows, and each consumer's own view, with
    /// the model; checks the accounting rules. Without a model, checks the views are sane.
    pub fn check_state(&self) -> Outcome {
        super::attach::inspect(self.seg)?;
        let Some(m) = &self.model else {
            return Ok(());
        };
        for (i, e) in m.entries.iter().enumerate() {
            let Some(info) = consumer_info(self.seg, i) else {
                return Err(format!("consumer_info({i}) is None"));
            };
            let want = ConsumerInfo {
                index: i,
                state: if e.active {
                    EntryState::Active
                } else {
                    EntryState::Free
                },
                class: DeliveryClass::from_u32(e.class),
                owner: e.owner,
                cursor: e.cursor,
                received: e.received,
                missed: e.missed,
                pins: m.pins_of(i),
            };
            ensure!(info == want, "entry {i}: got {info:?}, model {want:?}");
        }
        let p = producer_info(self.seg);
        let want = (m.head, m.owner_word, m.closed, m.epoch, m.writing());
        ensure!(
            (p.head, p.owner, p.closed, p.epoch, p.writing) == want,
            "producer line: got {p:?}, model (head, owner, closed, epoch, writing) = {want:?}"
        );
        let pins: u32 = m.slots.iter().map(|s| s.readers.count_ones()).sum();
        ensure!(
            total_pins(self.seg) == pins,
            "{} pins in the segment, model {pins} (only dead consumers hold pins between ops)",
            total_pins(self.seg)
        );
        for r in &self.readers {
            let (c, rm) = (&r.consumer, &r.model);
            ensure!(
                (c.index(), c.class(), c.cursor(), c.received(), c.missed())
                    == (rm.index, rm.class, rm.next, rm.received, rm.missed),
                "consumer {}: got (cursor {}, received {}, missed {}), model {rm:?}",
                c.index(),
                c.cursor(),
                c.received(),
                c.missed()
            );
            ensure!(
                c.cursor() - rm.start == c.received() + c.missed(),
                "consumer {} moved from {} to {} but received {} + missed {}",
                c.index(),
                rm.start,
                c.cursor(),
                c.received(),
                c.missed()
            );
            if c.class() == DeliveryClass::Gating && m.registered(rm) {
                ensure!(
                    c.missed() == 0,
                    "gating consumer {} missed {}",
                    c.index(),
                    c.missed()
                );
            }
        }
        Ok(())
    }

    /// Drops every handle (consumers first) and checks the table empties.
    pub fn finish(mut self) -> Outcome {
        for r in core::mem::take(&mut self.readers) {
            if let Some(m) = self.model.as_mut() {
                m.leave(&r.model);
            }
            drop(r.consumer);
        }
        if let Some(p) = self.producer.take() {
            let id = p.owner().get();
            drop(p);
            if let Some(m) = self.model.as_mut() {
                m.producer_drop(id);
            }
        }
        self.check_state()
    }
}

/// Checks a `WriteSlot` write/set_len result: Ok when it fits, else `Overflow` naming the end.
fn check_write(got: Result<(), Overflow>, fits: bool, cap: usize, end: usize) -> Outcome {
    match got {
        Ok(()) => ensure!(
            fits,
            "a write to byte {end} of a {cap}-byte slot was accepted"
        ),
        Err(o) => {
            displays(&o)?;
            ensure!(
                !fits,
                "a write to byte {end} of a {cap}-byte slot was refused: {o}"
            );
            ensure!(
                o == Overflow {
                    reserved: cap,
                    attempted: end
                },
                "Overflow {o:?} should name reserved {cap}, attempted {end}"
            );
        }
    }
    Ok(())
}
