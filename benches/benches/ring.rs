//! In-process criterion benches of the slot ring (ring-core over a `HeapSegment`), named so that
//! each compares with a baseline in benches/compare's `baselines.rs` (rtrb, crossbeam-queue;
//! outside the workspace: `cargo bench --manifest-path benches/compare/Cargo.toml`), with the
//! sizes of [`ring_benches::micro`]:
//!
//! - `claim_publish/ring/<bytes>`: claim a slot, write the payload, publish;
//! - `publish_read/ring-pinned/<bytes>` and `publish_read/ring-copy/<bytes>`: one message in and
//!   out (pin and touch it in place, or copy it out): compare with `publish_read/rtrb/<bytes>`;
//! - `read/pinned/<bytes>` and `read/copy/<bytes>`: the read alone (the publish is not timed);
//! - `readers/<k>`: a producer thread streams 64-byte messages to `k` = 1..3 gating consumer
//!   threads; time per message: compare `readers/1` with `handoff/rtrb`;
//! - `batch/ring-batch/32` and `batch/ring-single/32`: 32 messages of 64 bytes in and out,
//!   single thread: one `try_publish_batch` of 32 then one `try_read_batch` touching each
//!   message in place, against 32 `try_publish` then 32 `try_pin`; per message (elements):
//!   compare with `batch/rtrb/32` and `batch/crossbeam/32`;
//! - `front/send-try_recv/64`: ring-os's front door on a memfd ring: `Publisher::send` (the
//!   blocking send, which waits only when the ring is full) then `Subscriber::try_recv`, one
//!   64-byte message each;
//! - `meta/claim-set_meta/64` and `meta/publish_with_meta/64`: a 64-byte message with two
//!   metadata words on a memfd ring, through the claim and through the one-pass publish, then
//!   `try_copy`;
//! - `alloc/alloc_free` and `alloc/alloc_free_64_live`: the in-segment allocator.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std bench"
)]
#![allow(
    missing_docs,
    reason = "criterion_main! generates an undocumented main"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "bench setup with constant, valid arguments"
)]

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use ring_benches::micro::{self, owner, pair, segment, touch, BATCH, BATCH_BYTES, SIZES};
use ring_core::arena::{region_len, AllocConfig, Allocator};
use ring_core::{AtomicU64, Consumer, DeliveryClass, HeapSegment, Producer, SpinThenYield};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn claim_publish(c: &mut Criterion) {
    let mut g = c.benchmark_group("claim_publish");
    for &n in &SIZES {
        g.throughput(Throughput::Bytes(n as u64));
        let seg = segment(8, n, 1);
        let mut tx = Producer::new(&seg, owner(1)).unwrap();
        let src = vec![7u8; n];
        g.bench_with_input(BenchmarkId::new("ring", n), &n, |b, _| {
            b.iter(|| {
                let mut slot = tx.try_claim().unwrap();
                slot.write(&src).unwrap();
                black_box(slot.publish())
            });
        });
    }
    g.finish();
}

/// What each message size's cases get: an 8-slot ring's producer and one gating consumer, a
/// source message and a destination buffer of that size.
struct Ends<'a> {
    tx: Producer<&'a HeapSegment>,
    rx: Consumer<&'a HeapSegment>,
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl Ends<'_> {
    /// `iters` rounds of a publish of `src` (untimed) then `read` by the consumer into `dst`
    /// (timed): the read alone.
    fn time_reads(
        &mut self,
        iters: u64,
        mut read: impl FnMut(&mut Consumer<&HeapSegment>, &mut [u8]),
    ) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            self.tx.try_publish(&self.src).unwrap();
            let t0 = Instant::now();
            read(&mut self.rx, &mut self.dst);
            total += t0.elapsed();
        }
        total
    }
}

/// The benchmark group `name` over [`SIZES`]: for each size, its throughput and fresh [`Ends`]
/// handed to `cases`.
fn over_sizes(
    c: &mut Criterion,
    name: &str,
    mut cases: impl FnMut(&mut BenchmarkGroup<'_, WallTime>, usize, Ends<'_>),
) {
    let mut g = c.benchmark_group(name);
    for &n in &SIZES {
        g.throughput(Throughput::Bytes(n as u64));
        let seg = segment(8, n, 1);
        let (tx, rx) = pair(&seg);
        let ends = Ends {
            tx,
            rx,
            src: vec![7u8; n],
            dst: vec![0u8; n],
        };
        cases(&mut g, n, ends);
    }
    g.finish();
}

fn publish_read(c: &mut Criterion) {
    over_sizes(c, "publish_read", |g, n, mut e| {
        g.bench_with_input(BenchmarkId::new("ring-pinned", n), &n, |b, _| {
            b.iter(|| {
                e.tx.try_publish(&e.src).unwrap();
                touch(e.rx.try_pin().unwrap().bytes());
            });
        });
        g.bench_with_input(BenchmarkId::new("ring-copy", n), &n, |b, _| {
            b.iter(|| {
                e.tx.try_publish(&e.src).unwrap();
                black_box(e.rx.try_copy(&mut e.dst).unwrap());
            });
        });
    });
}

fn read(c: &mut Criterion) {
    over_sizes(c, "read", |g, n, mut e| {
        g.bench_with_input(BenchmarkId::new("pinned", n), &n, |b, _| {
            b.iter_custom(|iters| {
                e.time_reads(iters, |rx, _| touch(rx.try_pin().unwrap().bytes()))
            });
        });
        g.bench_with_input(BenchmarkId::new("copy", n), &n, |b, _| {
            b.iter_custom(|iters| {
                e.time_reads(iters, |rx, dst| {
                    black_box(rx.try_copy(dst).unwrap());
                })
            });
        });
        // Half a page of skew between source and destination: no 4 KiB aliasing (which made
        // 16 KiB - 256 KiB copies several times slower on the reference machine).
        let mut skewed = vec![0u8; n + 2048];
        g.bench_with_input(BenchmarkId::new("memcpy", n), &n, |b, _| {
            b.iter(|| {
                skewed[2048..].copy_from_slice(&e.src);
                black_box(&mut skewed);
            });
        });
    });
}

/// Messages per `readers` sample.
const STREAM: u64 = 10_000;

fn readers(c: &mut Criterion) {
    let mut g = c.benchmark_group("readers");
    g.throughput(Throughput::Elements(STREAM));
    for k in 1..=3u32 {
        g.bench_with_input(BenchmarkId::from_parameter(k), &k, |b, &k| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let seg = segment(256, 64, k);
                    let mut tx = Producer::new(&seg, owner(1)).unwrap();
                    let mut rxs: Vec<_> = (0..k)
                        .map(|i| {
                            Consumer::new(&seg, DeliveryClass::Gating, owner(2 + u64::from(i)))
                                .unwrap()
                        })
                        .collect();
                    let msg = [7u8; 64];
                    let t0 = Instant::now();
                    std::thread::scope(|s| {
                        for rx in &mut rxs {
                            s.spawn(move || {
                                let mut wait = SpinThenYield::new(64, u64::MAX);
                                for _ in 0..STREAM {
                                    let p = rx.pin(&mut wait).unwrap();
                                    black_box(p.bytes().first());
                                }
                            });
                        }
                        let mut wait = SpinThenYield::new(64, u64::MAX);
                        for _ in 0..STREAM {
                            let mut slot = tx.claim(&mut wait).unwrap();
                            slot.write(&msg).unwrap();
                            slot.publish().unwrap();
                        }
                    });
                    total += t0.elapsed();
                }
                total
            });
        });
    }
    g.finish();
}

fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    let seg = segment(2 * BATCH as u32, BATCH_BYTES, 1);
    let (mut tx, mut rx) = pair(&seg);
    let msgs = [[7u8; BATCH_BYTES]; BATCH];
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
    g.finish();
}

fn front(c: &mut Criterion) {
    use ring_os::prelude::*;
    let mut g = c.benchmark_group("front");
    g.throughput(Throughput::Elements(1));
    let ring = Ring::memfd().slots(8).slot_size(64).create().unwrap();
    let mut publisher = ring.publisher().unwrap();
    let mut subscriber = ring.subscriber(DeliveryClass::Gating).unwrap();
    let msg = [7u8; 64];
    let mut buf = [0u8; 64];
    g.bench_function(BenchmarkId::new("send-try_recv", 64), |b| {
        b.iter(|| {
            publisher.send(black_box(&msg)).unwrap();
            black_box(subscriber.try_recv(&mut buf).unwrap());
        });
    });
    g.finish();
}

/// A 64-byte message with metadata, as the C ABI's `shmring_publisher_send` sends one: through
/// the claim (`claim_with`, `write`, `set_meta`, `publish`: the C ABI's path for metadata until
/// 2026-12-06) and through the one-pass `publish_with_meta`; each then `try_copy`.
fn meta(c: &mut Criterion) {
    use ring_core::Config;
    use ring_os::raw::{CreateOptions, ProducerExt as _, ShmRing};
    let mut g = c.benchmark_group("meta");
    g.throughput(Throughput::Elements(1));
    let ring = ShmRing::create_memfd(&Config::new(8, 64), CreateOptions::new()).unwrap();
    let mut p = ShmRing::producer(&ring).unwrap();
    let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
    let msg = [7u8; 64];
    let mut buf = [0u8; 64];
    let wait = Duration::from_secs(5);
    let mut i = 0u64;
    g.bench_function(BenchmarkId::new("claim-set_meta", 64), |b| {
        b.iter(|| {
            i += 1;
            p.claim_with(wait, |mut slot| {
                let _ = slot.write(black_box(&msg));
                slot.set_meta([i, 7]);
                slot.publish()
            })
            .unwrap()
            .unwrap();
            black_box(c.try_copy(&mut buf).unwrap());
        });
    });
    g.bench_function(BenchmarkId::new("publish_with_meta", 64), |b| {
        b.iter(|| {
            i += 1;
            p.publish_with_meta(black_box(&msg), [i, 7], wait).unwrap();
            black_box(c.try_copy(&mut buf).unwrap());
        });
    });
    g.finish();
}

fn alloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc");
    let arena = 1 << 20;
    let words: Vec<AtomicU64> = (0..region_len(arena, 4094).unwrap() / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    let mut a = Allocator::init(&words, AllocConfig::new(arena)).unwrap();
    // One 256-byte allocation and its free.
    let alloc_free = |a: &mut Allocator<'_>, b: &mut criterion::Bencher<'_>| {
        b.iter(|| {
            let x = a.alloc(black_box(256), 1, 0).unwrap();
            a.free(x.handle, 1).unwrap();
        });
    };
    g.bench_function("alloc_free", |b| alloc_free(&mut a, b));
    // With 64 allocations live the bitmap search has to skip over them.
    let live: Vec<_> = (0..64).map(|_| a.alloc(1024, 2, 0).unwrap()).collect();
    g.bench_function("alloc_free_64_live", |b| alloc_free(&mut a, b));
    for x in live {
        a.free(x.handle, 2).unwrap();
    }
    g.finish();
}

criterion_group!(
    benches,
    claim_publish,
    publish_read,
    read,
    readers,
    batch,
    front,
    meta,
    alloc
);
criterion_main!(benches);
