//! `hostile_peer`: the `ops` harness, with a buggy or malicious peer overwriting shared words
//! between operations.
//!
//! The peer writes through the same atomics every party uses (the [`Memory`] accessors), so the
//! run stays free of data races; it can write any word of the segment header, the producer line,
//! any consumer entry, any slot header, payload words and the allocator region. After its first
//! write the model is switched off (the peer's words have no specified meaning) and the oracle
//! checks what invariant 6 of `docs/DESIGN.md` promises instead: every call returns (the harness only uses
//! bounded waits, and libFuzzer's `-timeout` catches a loop that does not end), nothing panics
//! or reads out of bounds (AddressSanitizer), every error is one the call documents and displays
//! a message, reads never return more than the slot or the buffer holds, and the corrupted
//! segment still attaches or is refused cleanly afterwards.

use super::attach::{claim_error_documented, read_error_documented};
use super::harness::Harness;
use super::ops::{Op, Shape, MAX_OPS};
use super::Outcome;
use arbitrary::Arbitrary;
use ring_core::{AtomicU32, AtomicU64, HeapSegment, Memory, OwnerId};

/// A value the peer writes, relative to what the word holds.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Value {
    /// Exactly this.
    Raw(u64),
    /// A small number.
    Small(u8),
    /// `u64::MAX - k` (or `u32::MAX - k`).
    NearMax(u8),
    /// `2^63 - k`: sequence numbers whose doubled stamps overflow.
    NearHalf(u8),
    /// The current value with one bit flipped.
    Flip(u8),
    /// The current value plus a small signed delta.
    Delta(i8),
}

impl Value {
    fn apply64(self, cur: u64) -> u64 {
        match self {
            Self::Raw(v) => v,
            Self::Small(k) => u64::from(k),
            Self::NearMax(k) => u64::MAX - u64::from(k),
            Self::NearHalf(k) => (1u64 << 63) - u64::from(k),
            Self::Flip(b) => cur ^ (1u64 << (b % 64)),
            Self::Delta(d) => cur.wrapping_add(i64::from(d) as u64),
        }
    }

    fn apply32(self, cur: u32) -> u32 {
        match self {
            Self::NearMax(k) => u32::MAX - u32::from(k),
            Self::NearHalf(k) => (1u32 << 31) - u32::from(k),
            Self::Flip(b) => cur ^ (1u32 << (b % 32)),
            // Truncation is the point: the low half of a 64-bit pattern.
            other => other.apply64(u64::from(cur)) as u32,
        }
    }
}

/// Which shared word the peer writes.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Target {
    /// Segment header field `field % 18` (in declaration order).
    Header {
        /// Field number.
        field: u8,
    },
    /// Producer line field `field % 8`.
    Producer {
        /// Field number.
        field: u8,
    },
    /// Consumer entry `index % table`, field `field % 6`.
    Entry {
        /// Entry.
        index: u8,
        /// Field number.
        field: u8,
    },
    /// Slot header `index % slots`, field `field % 5`; `field` in `0xF0..` names the route
    /// word (the pin line's, read only on a never-stall ring: a scribbled route must give a
    /// clear error, an overrun or the right message); `field` in `0xE0..0xF0` names the claim
    /// marker (ABI 5: a scribbled marker must give a clear error or an overrun). (Carved-out
    /// ranges: saved inputs below `0xE0` keep their meaning.)
    Slot {
        /// Slot.
        index: u8,
        /// Field number.
        field: u8,
    },
    /// Payload word `word % words` of slot `index % slots`; `word` in `0xF0..` names the slot
    /// header's inline word `(word - 0xF0) % INLINE_WORDS` instead (the message line's copy of
    /// a small message). (A carved-out range, not a new variant: saved inputs keep their
    /// meaning.)
    Payload {
        /// Slot.
        index: u8,
        /// Word.
        word: u8,
    },
    /// Allocator-region word `word % words` (header, stats, entries, bitmap, arena), when the
    /// ring has an allocator.
    Alloc {
        /// Word.
        word: u16,
    },
}

/// One step: an operation, or a peer's write.
#[derive(Arbitrary, Clone, Debug)]
pub enum Step {
    /// A protocol operation (as in `ops`).
    Op(Op),
    /// The peer writes `value` into `target`.
    Poke {
        /// Where.
        target: Target,
        /// What.
        value: Value,
    },
}

/// The `hostile_peer` input.
#[derive(Arbitrary, Clone, Debug)]
pub struct HostileInput {
    /// Ring shape.
    pub shape: Shape,
    /// Give the ring an allocator region too (its words are fair game for the attach checks).
    pub with_allocator: bool,
    /// Steps, in order.
    pub steps: Vec<Step>,
}

fn poke64(word: &AtomicU64, value: Value) {
    // Relaxed: the peer's write is an arbitrary value; nothing is published by it.
    let cur = word.load(core::sync::atomic::Ordering::Relaxed);
    word.store(value.apply64(cur), core::sync::atomic::Ordering::Relaxed);
}

fn poke32(word: &AtomicU32, value: Value) {
    // Relaxed: as `poke64`.
    let cur = word.load(core::sync::atomic::Ordering::Relaxed);
    word.store(value.apply32(cur), core::sync::atomic::Ordering::Relaxed);
}

/// A shared word of either width.
enum Word<'a> {
    D(&'a AtomicU64),
    S(&'a AtomicU32),
}
use Word::{D, S};

/// Writes `value` into word `field % len` of `words` (a header's or a line's fields, in
/// layout order).
fn poke_in(words: &[Word<'_>], field: u8, value: Value) {
    match words[usize::from(field) % words.len()] {
        D(w) => poke64(w, value),
        S(w) => poke32(w, value),
    }
}

/// Writes `value` into the word `target` names, through the segment's atomics.
pub fn poke<M: Memory>(mem: &M, target: Target, value: Value) {
    let g = *mem.geometry();
    match target {
        Target::Header { field } => {
            let h = mem.header();
            #[rustfmt::skip]
            let words = [
                D(&h.magic), S(&h.abi_version), S(&h.init_state), D(&h.fingerprint), S(&h.slots),
                S(&h.slot_capacity), S(&h.consumers), S(&h.alloc_max_live), D(&h.alloc_arena),
                D(&h.producer_off), D(&h.consumers_off), D(&h.slots_off), D(&h.payloads_off),
                D(&h.alloc_off), D(&h.alloc_len), D(&h.total_len), D(&h.creator),
                D(&h.ring_flags),
            ];
            poke_in(&words, field, value);
        }
        Target::Producer { field } => {
            let p = mem.producer_line();
            #[rustfmt::skip]
            let words = [
                D(&p.head), D(&p.owner), S(&p.flags), S(&p.epoch), S(&p.publish_futex),
                S(&p.consumer_waiters), S(&p.drain_futex), S(&p.producer_waiting),
            ];
            poke_in(&words, field, value);
        }
        Target::Entry { index, field } => {
            let e = mem.consumer_entry(usize::from(index) % g.consumers());
            #[rustfmt::skip]
            let words = [
                S(&e.state), S(&e.class), D(&e.owner), D(&e.cursor), D(&e.missed),
                D(&e.received),
            ];
            poke_in(&words, field, value);
        }
        Target::Slot { index, field } => {
            let s = mem.slot_header(usize::from(index) % g.slots());
            if field >= 0xF0 {
                return poke_route(&s.route, field, value, g.slots());
            }
            if field >= 0xE0 {
                // The claim marker (ABI 5; carved out so saved inputs keep their meaning).
                return poke64(&s.claim, value);
            }
            let words = [&s.state, &s.stamp, &s.len, &s.meta[0], &s.meta[1]].map(D);
            poke_in(&words, field, value);
        }
        Target::Payload { index, word } if word >= 0xF0 => {
            let inline = &mem.slot_header(usize::from(index) % g.slots()).inline;
            poke64(&inline[usize::from(word - 0xF0) % inline.len()], value);
        }
        Target::Payload { index, word } => {
            let words = mem.payload(usize::from(index) % g.slots());
            if !words.is_empty() {
                poke64(&words[usize::from(word) % words.len()], value);
            }
        }
        Target::Alloc { word } => {
            let words = mem.alloc_words();
            if !words.is_empty() {
                // Mostly the metadata at the front (header, stats, entry table).
                poke64(&words[usize::from(word) % words.len().min(512)], value);
            }
        }
    }
}

/// A route word scribble: mostly a well-formed route (`field` bit 0: the value's low bits
/// as its sequence tag and `field / 2` modulo a little more than the slot count as its slot,
/// so it names a real slot for a message that is not there, a later or an earlier one, or a
/// slot beyond the table), else the raw value.
fn poke_route(word: &AtomicU64, field: u8, value: Value, slots: usize) {
    if field % 2 == 0 {
        return poke64(word, value);
    }
    // Relaxed: as `poke64`.
    let cur = word.load(core::sync::atomic::Ordering::Relaxed);
    let tag = value.apply64(cur >> ring_core::layout::ROUTE_SLOT_BITS);
    let slot = usize::from(field / 2) % (slots + 2);
    let seq = tag.wrapping_sub(1);
    word.store(
        ring_core::layout::route_word(seq, slot),
        core::sync::atomic::Ordering::Relaxed,
    );
}

/// Runs one `hostile_peer` input.
pub fn run(input: &HostileInput) -> Outcome {
    let mut config = input.shape.config();
    if input.with_allocator {
        config = config.with_allocator(1024, 4);
    }
    let creator = OwnerId::new(1).expect("1 is non-zero");
    let seg = HeapSegment::new(&config, creator)
        .map_err(|e| format!("HeapSegment::new({config:?}) failed: {e}"))?;
    let mut h = Harness::new(&seg, true);
    h.step(&Op::ProducerNew)?;
    for (n, step) in input.steps.iter().take(MAX_OPS).enumerate() {
        match step {
            Step::Op(op) => h.step(op).map_err(|e| format!("step {n} ({op:?}): {e}"))?,
            Step::Poke { target, value } => {
                // A pin is only ever held inside one operation, so no reference to payload
                // bytes is live while the peer writes.
                poke(&seg, *target, *value);
                h.model = None;
            }
        }
    }
    if h.model.is_none() {
        // The peer wrote: the batch calls on whatever it left (after the steps, so the steps
        // of a saved input run as they always did).
        batch_probe(&mut h)?;
    }
    h.finish()?;
    // Whatever the peer left behind: attach refuses it cleanly, or serves it safely.
    super::attach::run(&seg.to_bytes())
}

/// Every live consumer reads a batch (`try_read_batch`), the producer publishes a batch of
/// a small and a slot-sized message (`try_publish_batch`: inline and, in a ring wider than
/// the message line, payload area), and every consumer reads a batch again. Whatever the peer
/// wrote (a stamp rolled back, a length across `INLINE_CAPACITY` or past the slot, junk in the
/// inline words), each call returns a documented error or messages no longer than the slot,
/// whose bytes, words and copies agree, and never more than it was asked for.
pub fn batch_probe(h: &mut Harness<'_>) -> Outcome {
    let cap = h.cap;
    for round in 0..2 {
        if round == 1 {
            if let Some(p) = h.producer.as_mut() {
                let msgs = [vec![0x11u8; cap.min(5)], vec![0x22u8; cap]];
                match p.try_publish_batch(&msgs) {
                    Ok(n) => ensure!(n <= msgs.len(), "try_publish_batch published {n} of 2"),
                    Err(e) => claim_error_documented(&e, h.slots, cap)?,
                }
            }
        }
        for (k, r) in h.readers.iter_mut().enumerate() {
            let mut broken = Vec::new();
            let mut calls = 0;
            let got = r.consumer.try_read_batch(3, |m| {
                calls += 1;
                let len = m.len();
                if len > cap {
                    broken.push(format!(
                        "a batch item of {len} bytes from a {cap}-byte slot"
                    ));
                    return;
                }
                if m.bytes().len() != len || m.words().len() != len.div_ceil(8) {
                    broken.push(format!(
                        "item of len {len}: {} bytes, {} words",
                        m.bytes().len(),
                        m.words().len()
                    ));
                    return;
                }
                let mut out = vec![0u8; len];
                if m.copy_to(&mut out) != len || out != m.bytes() {
                    broken.push(format!("item of len {len}: copy_to disagrees with bytes()"));
                }
            });
            ensure!(broken.is_empty(), "reader {k}: {}", broken.join("; "));
            match got {
                Ok(n) => ensure!(
                    n == calls && n <= 3,
                    "reader {k}: try_read_batch returned {n} after {calls} callbacks (max 3)"
                ),
                Err(e) => {
                    read_error_documented(&e, false)?;
                    ensure!(calls == 0, "reader {k}: an error after {calls} callbacks");
                }
            }
        }
    }
    Ok(())
}
