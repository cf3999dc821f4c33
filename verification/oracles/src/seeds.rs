//! Seed inputs: segments built by the real code in a few states (for `attach`), and
//! deterministic pseudo-random byte strings (for the structure-aware targets, whose bytes
//! `arbitrary` decodes into operations).
//!
//! `ring-core/tests/fuzz_oracles.rs` writes them into `fuzz/corpus/<target>/seed-*` when run
//! with `RING_FUZZ_WRITE_SEEDS=1`, and runs every oracle over them in any case.

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

/// Pseudo-random seeds for a structure-aware target: `count` strings of `len` bytes.
pub fn random_seeds(target: &str, count: usize, len: usize) -> Vec<Vec<u8>> {
    let salt = target
        .bytes()
        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
    let mut rng = XorShift::new(salt);
    (0..count).map(|_| rng.bytes(len)).collect()
}
