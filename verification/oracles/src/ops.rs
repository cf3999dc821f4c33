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
//! The harness lives in [`harness`](super::harness); the [`hostile`](super::hostile) oracle
//! reuses it with the model switched off.

use super::harness::{owner, Harness};
use super::Outcome;
use arbitrary::Arbitrary;
use ring_core::{Config, DeliveryClass, HeapSegment};

/// Most operations one input runs (longer inputs are cut, to keep executions fast).
pub const MAX_OPS: usize = 256;

/// Ring shape: small enough that wrap-around, gating and a full table happen often.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Shape {
    /// Slots: `1 + slots % 8`; the top eight values (`0xF8..`) stand for `9 + 2 k` slots for
    /// `k = slots - 0xF8` (9 to 23: more than a group's 8-word redelivery queue takes, so
    /// `RedeliveryFull` can happen).
    pub slots: u8,
    /// Slot capacity: `8 * (1 + cap_words % 8)` bytes; the top seven values (`0xF9..`)
    /// stand for slots wider than the message line: [`ring_core::INLINE_CAPACITY`] `+ 8 k`
    /// bytes for `k = cap_words - 0xF9`, so messages travel inline and in the payload area.
    /// (A carved-out range no saved input uses, not a wider modulus: saved inputs keep their
    /// meaning.)
    pub cap_words: u8,
    /// Consumer-table entries: `1 + consumers % 5`. The top values (`0xE0..`) also make the
    /// ring never-stall when it has at least 3 slots (a carved-out range no saved seed uses:
    /// `Config::with_never_stall`, the producer writes around pinned slots).
    pub consumers: u8,
}

impl Shape {
    /// The ring configuration this shape stands for.
    pub fn config(self) -> Config {
        Config::new(self.slot_count(), self.capacity())
            .with_consumers(1 + u32::from(self.consumers % 5))
            .with_never_stall(self.never_stall())
    }

    /// Whether the ring is never-stall: `consumers` in `0xE0..` and at least 3 slots.
    pub fn never_stall(self) -> bool {
        self.consumers >= 0xE0 && self.slot_count() >= 3
    }

    /// The slot count.
    pub fn slot_count(self) -> u32 {
        match self.slots {
            k @ 0xF8.. => 9 + 2 * u32::from(k - 0xF8),
            k => 1 + u32::from(k % 8),
        }
    }

    /// The slot capacity in bytes.
    pub fn capacity(self) -> u32 {
        match self.cap_words {
            k @ 0xF9.. => ring_core::INLINE_CAPACITY as u32 + 8 * u32::from(k - 0xF9),
            k => 8 * (1 + u32::from(k % 8)),
        }
    }
}

/// A delivery class, as an operation parameter (the verification crate's model uses it too).
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
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
    /// `try_hold`: several messages pinned at once.
    Hold(u8),
    /// `release` of one of a consumer's holds (`which % holds`).
    Release {
        /// Which consumer.
        who: u8,
        /// Which of its holds.
        which: u8,
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
    /// `Producer::create_group` of [`group_name`](super::model::group_name)`(n)` (idempotent).
    /// Group members take messages with `Copy`, `Pin` and `Hold`, finish them with
    /// `Release`, crash with `Die` and `DieHoldingPin`, and `Reclaim` hands a dead member's
    /// unfinished messages to its group (a live member is never reclaimed: the lying-oracle
    /// case is the lone consumers').
    CreateGroup(u8),
    /// `Consumer::join_group` of [`group_name`](super::model::group_name)`(n)`, then
    /// `set_max_holds(MAX_HOLDS)` (as many holds as claim words).
    Join(u8),
}

/// The `ops` input.
#[derive(Arbitrary, Clone, Debug)]
pub struct OpsInput {
    /// Ring shape.
    pub shape: Shape,
    /// Operations, in order.
    pub ops: Vec<Op>,
}

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
