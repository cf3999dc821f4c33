//! The in-process `batch` comparison interleaved: blocks of `ring-copy-local` (32 messages of
//! 64 bytes published with `try_publish`, then copied out with `try_copy`, on a `LocalSegment`)
//! and of crossbeam's `ArrayQueue` (32 pushes, then 32 pops) alternate in one process, so both
//! see the same machine state. Criterion measures its cases one after the other, seconds
//! apart, and this machine switches between states in which the two compare differently
//! (`docs/benchmarks.md`, "The seal as a plain store"); here each ratio comes from two blocks
//! a few milliseconds apart.
//!
//! ```text
//! cargo run --release --manifest-path benches/compare/Cargo.toml --example interleaved [BLOCKS]
//! ```
//!
//! Prints, per pair of blocks, ns per batch of each and `ArrayQueue` / ring (above 1: the ring
//! is faster), then the median ratio.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std example"
)]

use crossbeam_queue::ArrayQueue;
use ring_benches::micro::{self, BATCH, BATCH_BYTES};
use std::hint::black_box;
use std::time::Instant;

/// Batches per block.
const PER_BLOCK: u32 = 5000;

fn main() {
    let blocks: usize = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 20,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: interleaved [BLOCKS > 0]");
            std::process::exit(2);
        }
    };
    let msgs = [[7u8; BATCH_BYTES]; BATCH];
    let local = micro::local_segment(2 * BATCH as u32, BATCH_BYTES);
    let (mut tx, mut rx) = micro::local_pair(&local);
    let aq = ArrayQueue::<[u8; BATCH_BYTES]>::new(2 * BATCH);
    let per_batch = |t: Instant| t.elapsed().as_nanos() as f64 / f64::from(PER_BLOCK);
    let mut ratios = Vec::with_capacity(blocks);
    println!("{:>10} {:>10} {:>8}", "ring ns", "aq ns", "aq/ring");
    for _ in 0..blocks {
        let t = Instant::now();
        for _ in 0..PER_BLOCK {
            micro::ring_copy(&mut tx, &mut rx, black_box(&msgs));
        }
        let ring = per_batch(t);
        let t = Instant::now();
        for _ in 0..PER_BLOCK {
            for m in &msgs {
                aq.push(black_box(*m)).expect("room for a batch");
            }
            for _ in 0..BATCH {
                let m = aq.pop().expect("a whole batch");
                black_box((m.first(), m.last()));
            }
        }
        let queue = per_batch(t);
        println!("{ring:10.1} {queue:10.1} {:8.2}", queue / ring);
        ratios.push(queue / ring);
    }
    ratios.sort_by(f64::total_cmp);
    println!("median aq/ring {:.2}", ratios[ratios.len() / 2]);
}
