//! Seed inputs: segments built by the real code in a few states (for `attach`), and
//! deterministic pseudo-random byte strings (for the structure-aware targets, whose bytes
//! `arbitrary` decodes into operations).
//!
//! `ring-core/tests/fuzz_oracles.rs` writes them into `fuzz/corpus/<target>/seed-*` when run
//! with `RING_FUZZ_WRITE_SEEDS=1`, and runs every oracle over them in any case.

use crate::ops::{Op, OpsInput};
use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, Memory, OwnerId, Producer};

/// A xorshift64* generator: deterministic inputs without a dependency.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (any value; 0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Marsaglia's xorshift64 (shifts 13, 7, 17), without [`XorShift`]'s multiply: the generator
/// of the conformance suite's model sequences and of ring-core's allocator tests (their
/// sequences were written with it).
#[derive(Clone, Debug)]
pub struct PlainXorShift(u64);

impl PlainXorShift {
    /// A generator in state `state | 1` (never 0).
    pub fn new(state: u64) -> Self {
        Self(state | 1)
    }

    /// The next 64 pseudo-random bits.
    #[allow(
        clippy::should_implement_trait,
        reason = "an endless generator, not an iterator"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform enough in `0..n` for tests (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn id(n: u64) -> OwnerId {
    OwnerId::new(n).expect("seed owner ids are non-zero")
}

/// Real segments in several states, as `(name, bytes)`.
pub fn attach_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let fresh = HeapSegment::new(&Config::new(2, 64).with_consumers(2), id(1))
        .expect("a small config lays out");
    out.push(("fresh", fresh.to_bytes()));

    // Published and partly read, one consumer of each class, a gating one behind.
    let busy = HeapSegment::new(&Config::new(4, 32).with_consumers(4), id(1))
        .expect("a small config lays out");
    {
        let mut p = Producer::new(&busy, id(2)).expect("a fresh ring has no producer");
        let mut g = Consumer::new(&busy, DeliveryClass::Gating, id(3)).expect("table has room");
        let l = Consumer::new(&busy, DeliveryClass::LatestOnly, id(4)).expect("table has room");
        let mut s = Consumer::new(&busy, DeliveryClass::SkipOnLag, id(5)).expect("table has room");
        for i in 0..3u8 {
            p.try_publish(&[i; 20])
                .expect("the gating consumer has room");
        }
        let mut buf = [0u8; 32];
        g.try_copy(&mut buf).expect("a message is there");
        s.try_copy(&mut buf).expect("a message is there");
        // Leave the consumers registered in the bytes (as if their processes still ran).
        core::mem::forget((g, l, s));
        core::mem::forget(p);
    }
    out.push(("busy", busy.to_bytes()));

    // Closed, producer gone, a message left unread.
    let closed = HeapSegment::new(&Config::new(1, 8).with_consumers(1), id(1))
        .expect("a small config lays out");
    {
        let mut p = Producer::new(&closed, id(2)).expect("a fresh ring has no producer");
        p.try_publish(b"last").expect("no consumer holds it back");
        p.close();
    }
    out.push(("closed", closed.to_bytes()));

    // A producer that died mid-write, and an allocator region with live allocations.
    let alloc = HeapSegment::new(
        &Config::new(2, 16).with_consumers(1).with_allocator(256, 2),
        id(1),
    )
    .expect("a small config lays out");
    {
        let mut al = ring_core::arena::Allocator::attach(alloc.alloc_words())
            .expect("a fresh segment's allocator attaches");
        let a = al.alloc(70, 3, 5).expect("the arena has room");
        al.writer(&a)
            .expect("a live allocation")
            .write(&[7; 70])
            .expect("fits");
        let mut p = Producer::new(&alloc, id(2)).expect("a fresh ring has no producer");
        let mut slot = p.try_claim().expect("nothing holds the ring back");
        slot.write(b"half").expect("fits");
        core::mem::forget(slot);
        core::mem::forget(p);
    }
    out.push(("alloc-dead-producer", alloc.to_bytes()));
    out
}

/// Seeds for a structure-aware target: `count` pseudo-random strings of `len` bytes, and for
/// `ops` the hand-written [`scenario_seeds`] after them (random bytes decode to a couple of
/// operations only: each element of the op list follows a "one more" flag byte).
pub fn random_seeds(target: &str, count: usize, len: usize) -> Vec<Vec<u8>> {
    let salt = target
        .bytes()
        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let mut rng = XorShift::new(salt);
    let mut out: Vec<Vec<u8>> = (0..count).map(|_| rng.bytes(len)).collect();
    if target == "ops" {
        out.extend(scenario_seeds().into_iter().map(|(_, bytes)| bytes));
    }
    out
}

/// Bytes that `arbitrary` (1.x, as `fuzz_target!` decodes them) reads back as an `ops` input
/// of `shape` (`[slots, cap_words, consumers]`) running `ops`. Covers the operations the
/// scenarios use; anything else panics.
fn encode_ops(shape: [u8; 3], ops: &[Op]) -> Vec<u8> {
    /// `Op`'s variants: `arbitrary` picks variant `(u32 * COUNT) >> 32`.
    const COUNT: u64 = 22;
    let variant = |index: u64| u32::try_from((index << 32).div_ceil(COUNT)).map(u32::to_le_bytes);
    let mut out = shape.to_vec();
    for op in ops {
        // A collection's "one more element" flag, then the variant, then its fields.
        out.push(1);
        let (index, fields): (u64, Vec<u8>) = match *op {
            Op::Publish { len, fill } => (0, vec![len, fill]),
            Op::Die(who) => (4, vec![who]),
            Op::DieHoldingPin(who) => (5, vec![who]),
            Op::Reclaim { entry, right_owner } => (6, vec![entry, u8::from(right_owner)]),
            Op::Pin {
                who,
                claim_while_pinned,
            } => (7, vec![who, u8::from(claim_while_pinned)]),
            Op::Hold(who) => (8, vec![who]),
            Op::Release { who, which } => (9, vec![who, which]),
            Op::Copy { who, buf } => (10, vec![who, buf]),
            Op::WaitReady(who) => (11, vec![who]),
            Op::WaitDrained => (12, vec![]),
            Op::Leave(who) => (3, vec![who]),
            Op::Inspect => (19, vec![]),
            Op::CreateGroup(g) => (20, vec![g]),
            Op::Join(g) => (21, vec![g]),
            ref other => panic!("encode_ops does not encode {other:?}"),
        };
        out.extend(variant(index).unwrap_or_default());
        out.extend(fields);
    }
    out.push(0);
    out
}

/// Hand-written `ops` inputs: `(name, bytes)`. `groups`: a group's whole life on 9 slots —
/// created (twice: idempotent), joined by two members, gating the producer before any take;
/// one member holding all 8 of its claim words (the 9th hold and a copy refused), the other
/// keeping a message its buffer was too small for and dying pinning it, flagged; a reclaim that
/// fills the redelivery queue, one refused (`RedeliveryFull`), one asked for the record; a third
/// member taking every unfinished message again, flagged, in queue order, publishing while it
/// pins one, and the rest once.
///
/// # Panics
/// When the bytes no longer decode to the scenario (`Op` or `arbitrary` changed): update
/// `encode_ops`.
pub fn scenario_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let (a, b) = (0, 1);
    let mut ops = vec![
        Op::CreateGroup(0),
        Op::CreateGroup(0),
        Op::Join(1),
        Op::Join(0),
        Op::Join(0),
    ];
    ops.extend((0..10).map(|k| Op::Publish { len: 8, fill: k }));
    ops.extend((0..9).map(|_| Op::Hold(a)));
    ops.extend([
        Op::Copy { who: a, buf: 16 },
        Op::Copy { who: b, buf: 0 },
        Op::WaitReady(b),
        Op::DieHoldingPin(b),
        Op::Die(a),
        Op::Publish { len: 8, fill: 9 },
        Op::Reclaim {
            entry: 1,
            right_owner: true,
        },
        Op::Reclaim {
            entry: 2,
            right_owner: true,
        },
        Op::Reclaim {
            entry: 0,
            right_owner: true,
        },
        Op::Inspect,
        Op::Join(0),
        Op::Copy { who: 0, buf: 16 },
        Op::Pin {
            who: 0,
            claim_while_pinned: true,
        },
        Op::Reclaim {
            entry: 2,
            right_owner: true,
        },
    ]);
    ops.extend((0..9).map(|_| Op::Copy { who: 0, buf: 16 }));
    ops.extend([Op::WaitDrained, Op::Leave(0)]);
    // 9 slots of 8 bytes, 4 table entries.
    let bytes = encode_ops([0xF8, 0, 3], &ops);
    let decoded = <OpsInput as arbitrary::Arbitrary>::arbitrary_take_rest(
        arbitrary::Unstructured::new(&bytes),
    );
    let same = decoded
        .is_ok_and(|i| i.shape.config().slots == 9 && format!("{:?}", i.ops) == format!("{ops:?}"));
    assert!(
        same,
        "the groups scenario no longer decodes to itself: update encode_ops"
    );
    vec![("groups", bytes)]
}
