//! Baselines for the in-process ring benches: `rtrb` (a wait-free SPSC byte ring) and
//! `crossbeam-queue`'s `ArrayQueue` (a bounded MPMC queue), measured the way the ring benches
//! (`benches/benches/ring.rs`, in the workspace) measure the slot ring, with the same sizes
//! ([`ring_benches::micro`]), so that `docs/benchmarks.md` can give the ring's figures as ratios.
//!
//! - `publish_read/<peer>/<bytes>`: one message in (copied into the queue) and out (copied out),
//!   single thread: the cost of the data structure plus two copies.
//! - `handoff/<peer>`: a producer thread streams 8-byte messages to a consumer thread; time per
//!   message.
//! - `batch/<peer>/32`: 32 messages of 64 bytes in and out, single thread, per message
//!   (elements), beside the ring's own cases of `ring.rs` run here in the same criterion run
//!   (`ring-batch`, `ring-single`, `ring-copy` on a heap segment, and the same three with
//!   `-local` on ring-os's `LocalSegment`, a heap ring with asymmetric fences, from
//!   `ring_benches::micro`): `rtrb` (a
//!   ring of `[u8; 64]`) writes them with one `write_chunk_uninit` and reads them in place with
//!   one `read_chunk`; `ArrayQueue<[u8; 64]>` has no chunks: 32 pushes, then 32 pops (each pop
//!   copies the message out).
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std bench"
)]
#![allow(
    missing_docs,
    reason = "criterion_main! generates an undocumented main"
)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use ring_benches::micro::{self, BATCH, BATCH_BYTES, SIZES};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn publish_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("publish_read");
    for &n in &SIZES {
        g.throughput(Throughput::Bytes(n as u64));
        let src = vec![7u8; n];
        let mut dst = vec![0u8; n];
        let (mut p, mut q) = rtrb::RingBuffer::<u8>::new(2 * n);
        g.bench_with_input(BenchmarkId::new("rtrb", n), &n, |b, &n| {
            b.iter(|| {
                if let Ok(mut chunk) = p.write_chunk(n) {
                    let (a, rest) = chunk.as_mut_slices();
                    let split = a.len();
                    a.copy_from_slice(&src[..split]);
                    rest.copy_from_slice(&src[split..]);
                    chunk.commit_all();
                }
                if let Ok(chunk) = q.read_chunk(n) {
                    let (a, rest) = chunk.as_slices();
                    dst[..a.len()].copy_from_slice(a);
                    dst[a.len()..].copy_from_slice(rest);
                    chunk.commit_all();
                }
                black_box(&mut dst);
            });
        });
    }
    // ArrayQueue holds values: compare where a message is a small value.
    g.throughput(Throughput::Bytes(8));
    let q8 = ArrayQueue::<u64>::new(64);
    g.bench_function(BenchmarkId::new("crossbeam", 8), |b| {
        b.iter(|| {
            let _ = q8.push(black_box(42));
            black_box(q8.pop())
        });
    });
    g.throughput(Throughput::Bytes(64));
    let q64 = ArrayQueue::<[u8; 64]>::new(64);
    g.bench_function(BenchmarkId::new("crossbeam", 64), |b| {
        b.iter(|| {
            let _ = q64.push(black_box([7u8; 64]));
            black_box(q64.pop())
        });
    });
    g.finish();
}

/// Messages per handoff sample.
const HANDOFF: u64 = 10_000;

fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.throughput(Throughput::Elements(HANDOFF));
    g.bench_function("rtrb", |b| {
        b.iter_custom(|iters| {
            timed_handoffs(
                iters,
                || rtrb::RingBuffer::<u64>::new(256),
                |p, v| p.push(v).is_ok(),
                |q| q.pop().ok(),
            )
        });
    });
    g.bench_function("crossbeam", |b| {
        b.iter_custom(|iters| {
            timed_handoffs(
                iters,
                || {
                    let q = std::sync::Arc::new(ArrayQueue::<u64>::new(256));
                    (std::sync::Arc::clone(&q), q)
                },
                |q, v| q.push(v).is_ok(),
                |q| q.pop(),
            )
        });
    });
    g.finish();
}

/// The time of `iters` hand-offs of `HANDOFF` values from a producer thread to this one, each
/// through a fresh 256-deep queue from `make` (its sending and receiving ends): `push` says
/// whether the value went in, `pop` returns the next value out; both yield when they cannot.
fn timed_handoffs<P: Send, C>(
    iters: u64,
    make: impl Fn() -> (P, C),
    push: impl Fn(&mut P, u64) -> bool + Sync,
    pop: impl Fn(&mut C) -> Option<u64>,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (mut tx, mut rx) = make();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                while i < HANDOFF {
                    if push(&mut tx, i) {
                        i += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
            let mut got = 0;
            while got < HANDOFF {
                match pop(&mut rx) {
                    Some(v) => {
                        black_box(v);
                        got += 1;
                    }
                    None => std::thread::yield_now(),
                }
            }
        });
        total += t0.elapsed();
    }
    total
}

fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    let msgs = [[7u8; BATCH_BYTES]; BATCH];
    let (mut p, mut q) = rtrb::RingBuffer::<[u8; BATCH_BYTES]>::new(2 * BATCH);
    g.bench_with_input(BenchmarkId::new("rtrb", BATCH), &BATCH, |b, _| {
        b.iter(|| {
            let chunk = p.write_chunk_uninit(BATCH).expect("room for a batch");
            assert_eq!(chunk.fill_from_iter(msgs.iter().copied()), BATCH);
            let chunk = q.read_chunk(BATCH).expect("a whole batch");
            let (a, rest) = chunk.as_slices();
            for m in a.iter().chain(rest) {
                black_box((m.first(), m.last()));
            }
            chunk.commit_all();
        });
    });
    let seg = micro::segment(2 * BATCH as u32, BATCH_BYTES, 1);
    let (mut tx, mut rx) = micro::pair(&seg);
    for (name, case) in micro::ring_cases() {
        g.bench_with_input(BenchmarkId::new(name, BATCH), &BATCH, |b, _| {
            b.iter(|| case(&mut tx, &mut rx, &msgs));
        });
    }
    let local = micro::local_segment(2 * BATCH as u32, BATCH_BYTES);
    let (mut tx, mut rx) = micro::local_pair(&local);
    for (name, case) in micro::local_cases() {
        g.bench_with_input(BenchmarkId::new(name, BATCH), &BATCH, |b, _| {
            b.iter(|| case(&mut tx, &mut rx, &msgs));
        });
    }
    let aq = ArrayQueue::<[u8; BATCH_BYTES]>::new(2 * BATCH);
    g.bench_with_input(BenchmarkId::new("crossbeam", BATCH), &BATCH, |b, _| {
        b.iter(|| {
            for m in &msgs {
                aq.push(black_box(*m)).expect("room for a batch");
            }
            for _ in 0..BATCH {
                let m = aq.pop().expect("a whole batch");
                black_box((m.first(), m.last()));
            }
        });
    });
    g.finish();
}

criterion_group!(benches, publish_read, handoff, batch);
criterion_main!(benches);
