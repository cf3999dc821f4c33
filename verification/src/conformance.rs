//! The conformance suite: generic test bodies over the [`Memory`] trait, run against every
//! backend (heap, owned, the ring-os mapping; `tests/conformance.rs` instantiates them).
//!
//! A backend is anything that can make a fresh, formatted segment for a [`Config`]. Every
//! check returns `Err(Failure)` on the first violation, naming it.

use crate::ensure;
use crate::model::{Class, Failure, FreeMode, ModelConfig, Op};
use crate::real::run_on;
use ring_core::inspect::total_pins;
use ring_core::layout::WRITER;
use core::sync::atomic::Ordering;
use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, Memory, OwnerId, Producer, ReadError, Spin,
    SpinThenYield,
};
use std::sync::Arc;

/// A memory backend under test.
pub trait Backend {
    /// The memory handle it makes (shared between threads by the stress check).
    type Mem: Memory + Send + Sync + 'static;
    /// A fresh segment of shape `config`, formatted, created by owner 1.
    ///
    /// # Errors
    /// A [`Failure`] when the backend cannot make one.
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure>;
}

/// ring-core's owned segment (the loom shape), created by owner 1.
#[derive(Clone, Copy, Debug)]
pub struct Owned;

impl Backend for Owned {
    type Mem = ring_core::OwnedSegment;
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure> {
        ring_core::OwnedSegment::new(config, crate::support::id(1))
            .map_err(|e| Failure(e.to_string()))
    }
}

/// One named check's result.
pub type Check = Result<(), Failure>;

fn id(n: u64) -> OwnerId {
    OwnerId::new(n).unwrap_or(OwnerId::new(1).expect("1 is not 0"))
}

fn fail<E: core::fmt::Display>(what: &'static str) -> impl Fn(E) -> Failure {
    move |e| Failure(format!("{what}: {e}"))
}

// The suite's participants. Every memory it joins is a fresh segment from a `Backend` that no
// one else uses, and nothing in the suite judges a participant dead on a verdict of its own:
// its reclaims are explicit `unsafe` calls with their own promises. So the `*_unchecked`
// contract (no liveness verdict displaces this participant while it lives) holds.

fn join_producer<M: Memory>(m: M, owner: OwnerId) -> Result<Producer<M>, Failure> {
    // SAFETY: see above: no liveness oracle runs on the suite's memories.
    unsafe { Producer::new_unchecked(m, owner) }.map_err(fail("producer"))
}

fn join_consumer<M: Memory>(
    m: M,
    class: DeliveryClass,
    owner: OwnerId,
) -> Result<Consumer<M>, Failure> {
    // SAFETY: see above: no liveness oracle runs on the suite's memories.
    unsafe { Consumer::new_unchecked(m, class, owner) }.map_err(fail("consumer"))
}

/// Every check, by name, for `backend`.
pub fn all<B: Backend>(backend: &B) -> Vec<(&'static str, Check)> {
    vec![
        ("roundtrip", roundtrip(backend)),
        (
            "pinned_slot_is_not_claimable",
            pinned_slot_is_not_claimable(backend),
        ),
        ("gating_is_lossless", gating_is_lossless(backend)),
        (
            "skip_on_lag_counts_exactly",
            skip_on_lag_counts_exactly(backend),
        ),
        ("reclaim_is_exact", reclaim_is_exact(backend)),
        (
            "hostile_length_is_refused",
            hostile_length_is_refused(backend),
        ),
        (
            "hostile_stamp_is_refused",
            hostile_stamp_is_refused(backend),
        ),
        ("bounded_waits", bounded_waits(backend)),
        ("model_sequences", model_sequences(backend)),
        ("threaded_stress", threaded_stress(backend)),
        (
            "pin_unpin_claim_race_free",
            pin_unpin_claim_race_free(backend),
        ),
        (
            "batch_unpin_claim_race_free",
            batch_unpin_claim_race_free(backend),
        ),
    ]
}

/// Runs [`all`] and fails with every failing check named.
///
/// # Errors
/// A [`Failure`] listing each failing check.
pub fn run_all<B: Backend>(backend: &B) -> Check {
    let failed: Vec<String> = all(backend)
        .into_iter()
        .filter_map(|(name, r)| r.err().map(|f| format!("{name}: {f}")))
        .collect();
    ensure!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(())
}

/// Publish, then pin and copy the message back; metadata and emptiness after.
pub fn roundtrip<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(4, 64).with_consumers(2))?;
    let mut p = join_producer(&m, id(1))?;
    let mut pin = join_consumer(&m, DeliveryClass::Gating, id(2))?;
    let mut copy = join_consumer(&m, DeliveryClass::SkipOnLag, id(3))?;
    let mut slot = p.try_claim().map_err(fail("claim"))?;
    slot.write(b"conformance").map_err(fail("write"))?;
    slot.set_meta([5, 6]);
    ensure!(slot.publish() == Ok(0), "first sequence is not 0");
    {
        let got = pin.try_pin().map_err(fail("pin"))?;
        ensure!(
            got.bytes() == b"conformance",
            "pinned bytes {:?}",
            got.bytes()
        );
        ensure!(got.meta() == [5, 6], "pinned meta {:?}", got.meta());
        // A gating reader's pin is its cursor (no reader bit): the producer is held back by
        // the gating check instead.
        ensure!(total_pins(&m) == 0, "a gating read set a reader bit");
    }
    ensure!(total_pins(&m) == 0, "unpin left a bit behind");
    let mut buf = [0u8; 64];
    let got = copy.try_copy(&mut buf).map_err(fail("copy"))?;
    ensure!(
        &buf[..got.len] == b"conformance" && got.meta == [5, 6],
        "copied {got:?}"
    );
    ensure!(
        pin.try_pin().err() == Some(ReadError::Empty),
        "pin after the end"
    );
    ensure!(
        copy.try_copy(&mut buf).err() == Some(ReadError::Empty),
        "copy after the end"
    );
    Ok(())
}

/// Invariant 1: a slot a reader pins cannot be claimed; after the unpin it can.
pub fn pinned_slot_is_not_claimable<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(1, 16).with_consumers(2))?;
    let mut p = join_producer(&m, id(1))?;
    let mut c = join_consumer(&m, DeliveryClass::SkipOnLag, id(2))?;
    p.try_publish(b"one").map_err(fail("publish"))?;
    let bit = 1u32 << c.index();
    let pinned = c.try_pin().map_err(fail("pin"))?;
    match p.try_claim() {
        Err(ClaimError::Pinned { slot: 0, readers }) if readers == bit => {}
        other => {
            return Err(Failure(format!(
                "claim of a pinned slot: {:?}",
                other.map(|s| s.seq())
            )))
        }
    }
    ensure!(pinned.bytes() == b"one", "pinned message changed");
    drop(pinned);
    let s = p.try_claim().map_err(fail("claim after unpin"))?;
    ensure!(
        m.slot_header(0).state.load(Ordering::Relaxed) == WRITER,
        "claimed slot state is not WRITER alone"
    );
    drop(s);
    Ok(())
}

/// Invariant 4 (gating): the producer is refused, never overwrites, and names the consumer.
pub fn gating_is_lossless<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(2, 16).with_consumers(2))?;
    let mut p = join_producer(&m, id(1))?;
    let mut g = join_consumer(&m, DeliveryClass::Gating, id(2))?;
    let mut buf = [0u8; 16];
    for round in 0..5u8 {
        p.try_publish(&[round; 3]).map_err(fail("publish a"))?;
        p.try_publish(&[round + 100; 3])
            .map_err(fail("publish b"))?;
        match p.try_publish(b"x") {
            Err(ClaimError::Full { consumer, .. }) if consumer == g.index() => {}
            other => return Err(Failure(format!("overwrote an unconsumed slot: {other:?}"))),
        }
        for want in [[round; 3], [round + 100; 3]] {
            let got = g.try_copy(&mut buf).map_err(fail("copy"))?;
            ensure!(
                got.missed == 0 && buf[..got.len] == want,
                "gating read {got:?}"
            );
        }
    }
    Ok(())
}

/// Invariant 4 (skip-on-lag, latest-only): exactly what was missed is reported, also when a
/// 1-slot ring is rewritten under the reader.
pub fn skip_on_lag_counts_exactly<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(4, 16).with_consumers(2))?;
    let mut p = join_producer(&m, id(1))?;
    let mut s = join_consumer(&m, DeliveryClass::SkipOnLag, id(2))?;
    let mut l = join_consumer(&m, DeliveryClass::LatestOnly, id(3))?;
    for i in 0..10u8 {
        p.try_publish(&[i]).map_err(fail("publish"))?;
    }
    let got = s.try_pin().map_err(fail("pin"))?;
    ensure!(
        (got.seq(), got.missed()) == (6, 6),
        "skip-on-lag read {} missed {}",
        got.seq(),
        got.missed()
    );
    drop(got);
    let mut buf = [0u8; 16];
    let got = l.try_copy(&mut buf).map_err(fail("copy"))?;
    ensure!((got.seq, got.missed) == (9, 9), "latest-only read {got:?}");
    // The regression the model found: a 1-slot ring whose only message is being rewritten.
    let m1 = b.create(&Config::new(1, 16).with_consumers(1))?;
    let mut p1 = join_producer(&m1, id(1))?;
    let mut c1 = join_consumer(&m1, DeliveryClass::LatestOnly, id(2))?;
    p1.try_publish(b"a").map_err(fail("publish"))?;
    let claim = p1.try_claim().map_err(fail("claim"))?;
    ensure!(
        c1.try_copy(&mut buf).err() == Some(ReadError::Empty),
        "read a slot being rewritten"
    );
    ensure!(
        c1.missed() == 1 && c1.cursor() == 1,
        "missed {} cursor {}",
        c1.missed(),
        c1.cursor()
    );
    drop(claim);
    Ok(())
}

/// Invariant 7: reclaiming a dead consumer clears exactly its pins and its gating hold.
pub fn reclaim_is_exact<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(2, 16).with_consumers(3))?;
    let mut p = join_producer(&m, id(1))?;
    let mut dead = join_consumer(&m, DeliveryClass::Gating, id(2))?;
    let mut live = join_consumer(&m, DeliveryClass::SkipOnLag, id(3))?;
    p.try_publish(b"0").map_err(fail("publish"))?;
    p.try_publish(b"1").map_err(fail("publish"))?;
    let (di, li) = (dead.index(), live.index());
    let live_pin = live.try_pin().map_err(fail("pin"))?;
    std::mem::forget(dead.try_pin().map_err(fail("pin"))?);
    std::mem::forget(dead);
    // The live skip-on-lag reader's bit; the dead gating reader holds slot 0 by its cursor.
    ensure!(total_pins(&m) == 1, "one pin expected");
    ensure!(
        // SAFETY: the dead consumer and its pin were leaked: they make no more calls.
        unsafe { p.reclaim(di, id(99)) }.err()
            == Some(ring_core::Error::OwnerMismatch { found: 2 }),
        "reclaim under a wrong owner was not refused"
    );
    // SAFETY: as above.
    let r = unsafe { p.reclaim(di, id(2)) }.map_err(fail("reclaim"))?;
    ensure!(
        r.was_registered && r.pins_cleared == 0 && r.cursor == 0,
        "reclaim {r:?}"
    );
    ensure!(
        total_pins(&m) == 1,
        "reclaim touched another consumer's pin"
    );
    let still = m.slot_header(0).state.load(Ordering::Relaxed);
    ensure!(still == 1 << li, "slot word after reclaim {still:#x}");
    drop(live_pin);
    p.try_publish(b"2").map_err(fail("publish after reclaim"))?;
    ensure!(
        // SAFETY: as above.
        !unsafe { p.reclaim(di, id(2)) }
            .map_err(fail("reclaim again"))?
            .was_registered,
        "not idempotent"
    );
    Ok(())
}

/// Invariant 6: a length beyond the slot capacity written by a hostile peer is refused, by pin
/// and by copy, never read out of bounds.
pub fn hostile_length_is_refused<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(2, 16).with_consumers(2))?;
    let mut p = join_producer(&m, id(1))?;
    let mut pin = join_consumer(&m, DeliveryClass::SkipOnLag, id(2))?;
    let mut copy = join_consumer(&m, DeliveryClass::SkipOnLag, id(3))?;
    p.try_publish(b"ok").map_err(fail("publish"))?;
    m.slot_header(0).len.store(17, Ordering::Relaxed);
    ensure!(
        matches!(pin.try_pin().err(), Some(ReadError::Corrupt(_))),
        "pin accepted len 17 > 16"
    );
    ensure!(total_pins(&m) == 0, "a refused pin left its bit");
    let mut big = [0u8; 64];
    ensure!(
        matches!(copy.try_copy(&mut big).err(), Some(ReadError::Corrupt(_))),
        "copy accepted len 17 > 16"
    );
    Ok(())
}

/// Invariant 6: a stamp behind the published head (a peer rolled it back) is refused.
pub fn hostile_stamp_is_refused<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(2, 16).with_consumers(1))?;
    let mut p = join_producer(&m, id(1))?;
    let mut c = join_consumer(&m, DeliveryClass::Gating, id(2))?;
    p.try_publish(b"ok").map_err(fail("publish"))?;
    m.slot_header(0).stamp.store(0, Ordering::Relaxed);
    // A consumer that follows its slot's stamp cannot tell a scribbled stamp from a message
    // not yet published when it polls: `Empty`, never the message.
    ensure!(
        matches!(c.try_pin().err(), Some(ReadError::Empty)),
        "pin accepted stamp 0"
    );
    let mut buf = [0u8; 16];
    ensure!(
        matches!(c.try_copy(&mut buf).err(), Some(ReadError::Empty)),
        "copy accepted stamp 0"
    );
    // Before it waits, it compares with `head`, which says the message was published.
    ensure!(
        matches!(
            c.pin(&mut ring_core::Spin::new(4)).err(),
            Some(ReadError::Corrupt(_))
        ),
        "a blocking pin waited on a stamp behind head"
    );
    ensure!(
        matches!(
            c.copy(&mut buf, &mut ring_core::Spin::new(4)).err(),
            Some(ReadError::Corrupt(_))
        ),
        "a blocking copy waited on a stamp behind head"
    );
    // A skip-on-lag reader targets by `head` once its slot holds a later message; a stamp of
    // that later message that goes backwards is refused by the pin's own check.
    Ok(())
}

/// Invariant 6: blocked waits end at their bound.
pub fn bounded_waits<B: Backend>(b: &B) -> Check {
    let m = b.create(&Config::new(1, 16).with_consumers(1))?;
    let mut p = join_producer(&m, id(1))?;
    let mut c = join_consumer(&m, DeliveryClass::Gating, id(2))?;
    ensure!(
        c.wait_ready(&mut Spin::new(100)) == Err(ReadError::Timeout),
        "consumer wait unbounded"
    );
    p.try_publish(b"a").map_err(fail("publish"))?;
    ensure!(
        matches!(
            p.claim(&mut SpinThenYield::new(10, 10)).err(),
            Some(ClaimError::Full { .. })
        ),
        "producer wait unbounded"
    );
    ensure!(!p.wait_drained(&mut Spin::new(100)), "drain wait unbounded");
    let mut buf = [0u8; 16];
    c.try_copy(&mut buf).map_err(fail("copy"))?;
    ensure!(
        p.wait_drained(&mut Spin::new(100)),
        "drained ring not seen drained"
    );
    Ok(())
}

/// A small xorshift generator: the model sequences are the same on every backend and run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Deterministic op sequence `n` for the model runs, for 32-byte slots.
pub fn sequence(seed: u64, len: usize) -> Vec<Op> {
    sequence_for(seed, len, 32)
}

/// Deterministic op sequence `n` for the model runs, with writes and batches sized for
/// `cap`-byte slots (some longer: refused).
pub fn sequence_for(seed: u64, len: usize, cap: u16) -> Vec<Op> {
    let mut r = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let cap = cap.max(8);
    (0..len)
        .map(|_| {
            let x = r.next();
            let b = (x >> 8) as u8;
            match x % 27 {
                0..=2 => Op::Claim,
                3 | 4 => Op::Write {
                    offset: (x >> 40) as u16 % (cap + 8),
                    len: (x >> 16) as u16 % (cap / 2 + 4),
                    seed: b,
                },
                20 | 21 => Op::PublishBatch {
                    count: (x >> 24) as u8 % 6,
                    len: (x >> 32) as u16 % (cap + 4),
                    seed: b,
                },
                22 | 23 => Op::ReadBatch {
                    consumer: b,
                    max: (x >> 24) as u8 % 5,
                },
                5..=7 => Op::Publish,
                8 => Op::Abort,
                9 | 10 => Op::Pin { consumer: b },
                24 | 25 => Op::Hold { consumer: b },
                26 => Op::Release {
                    consumer: b,
                    which: (x >> 24) as u8,
                },
                11 => Op::Unpin { consumer: b },
                12 => Op::CopyRead {
                    consumer: b,
                    buf: cap,
                },
                13 => Op::Register {
                    class: [Class::Gating, Class::LatestOnly, Class::SkipOnLag][b as usize % 3],
                },
                14 => Op::Kill { consumer: b },
                15 => Op::Reclaim { consumer: b },
                16 => Op::Alloc {
                    len: (x >> 16) as u16 % 300,
                    owner: b,
                },
                17 => Op::AllocWrite {
                    which: b,
                    seed: b,
                    extra: (x >> 24) as u8 % 3,
                },
                18 => Op::Free {
                    which: b,
                    mode: [FreeMode::Owner, FreeMode::Foreign, FreeMode::Stale][b as usize % 3],
                },
                _ => Op::Deregister { consumer: b },
            }
        })
        .collect()
}

/// Every invariant against the reference model, for fixed op sequences: on 32-byte slots
/// (every message inline) and on 160-byte slots (inline and payload-area messages).
pub fn model_sequences<B: Backend>(b: &B) -> Check {
    let (runs, len) = if cfg!(miri) { (2, 60) } else { (40, 300) };
    for cfg in [ModelConfig::small(), ModelConfig::wide()] {
        for seed in 0..runs {
            let m = b.create(&cfg.config())?;
            let ops = sequence_for(seed, len, cfg.capacity as u16);
            run_on(&m, &cfg, &ops).map_err(|f| Failure(format!("{cfg:?} seed {seed}: {f}")))?;
        }
    }
    Ok(())
}

/// A producer and three consumer threads (pin, copy, gating) on a small ring, with bounded
/// waits: every read is a whole message, the gating consumer gets all of them in order.
/// Under Miri this is the data-race check of the in-process kernels.
pub fn threaded_stress<B: Backend>(b: &B) -> Check {
    let n: u64 = if cfg!(miri) { 40 } else { 20_000 };
    let m = Arc::new(b.create(&Config::new(4, 24).with_consumers(3))?);
    let msg = |seq: u64| -> [u8; 24] {
        core::array::from_fn(|i| (seq as u8).wrapping_mul(7).wrapping_add(i as u8))
    };
    let mut consumers = Vec::new();
    for (k, class) in [
        DeliveryClass::Gating,
        DeliveryClass::SkipOnLag,
        DeliveryClass::LatestOnly,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = join_consumer(m.clone(), class, id(10 + k as u64))?;
        consumers.push(std::thread::spawn(move || -> Check {
            let mut last = None;
            let mut buf = [0u8; 24];
            loop {
                c.wait_ready(&mut SpinThenYield::new(64, 1_000_000))
                    .map_err(fail("wait"))?;
                let got = if k == 1 {
                    c.try_copy(&mut buf)
                        .map(|g| (g.seq, buf == msg(g.seq), g.missed))
                } else {
                    c.try_pin()
                        .map(|p| (p.seq(), p.bytes() == msg(p.seq()), p.missed()))
                };
                match got {
                    Ok((seq, whole, missed)) => {
                        ensure!(whole, "{class:?}: message {seq} torn");
                        ensure!(last.is_none_or(|l| seq > l), "{class:?}: went backwards");
                        ensure!(
                            class != DeliveryClass::Gating || missed == 0,
                            "gating missed"
                        );
                        last = Some(seq);
                    }
                    Err(ReadError::Closed) => break,
                    Err(ReadError::Empty | ReadError::Lagging) => {}
                    Err(e) => return Err(Failure(format!("{class:?}: {e}"))),
                }
            }
            ensure!(c.received() + c.missed() == c.cursor(), "{class:?}: counts");
            ensure!(
                class != DeliveryClass::Gating || c.received() == n,
                "gating lost messages"
            );
            Ok(())
        }));
    }
    let mut p = join_producer(m.clone(), id(1))?;
    for seq in 0..n {
        let mut slot = p
            .claim(&mut SpinThenYield::new(64, 1_000_000))
            .map_err(fail("claim"))?;
        slot.write(&msg(seq)).map_err(fail("write"))?;
        slot.publish().map_err(fail("publish"))?;
    }
    p.close();
    for t in consumers {
        t.join()
            .map_err(|_| Failure("consumer thread panicked".into()))??;
    }
    Ok(())
}

/// A 1-slot ring, a pinning reader and a producer that never parks and no gating consumer, so
/// the only order between the reader's (non-atomic, zero-copy) reads of a message and the
/// producer's next writes to the slot is unpin (Release) → claim (Acquire). Under Miri, a
/// weakened unpin or claim is a data race; elsewhere every pinned message must be whole.
pub fn pin_unpin_claim_race_free<B: Backend>(b: &B) -> Check {
    unpin_claim_race(b, |c| match c.try_pin() {
        Ok(p) => {
            ensure!(
                p.bytes() == race_msg(p.seq()),
                "pinned message {} torn",
                p.seq()
            );
            Ok(Ok(1))
        }
        Err(e) => Ok(Err(e)),
    })
}

/// [`pin_unpin_claim_race_free`] for batch reads: the reader's zero-copy reads happen inside
/// `try_read_batch`'s callback, and the only order between them and the producer's next writes
/// to the slot is the batch's per-message unpin (Release) → claim (Acquire). Under Miri, a
/// weakened batch unpin is a data race; elsewhere every message must be whole.
pub fn batch_unpin_claim_race_free<B: Backend>(b: &B) -> Check {
    unpin_claim_race(b, |c| {
        let mut torn = None;
        let read = c.try_read_batch(4, |item| {
            if item.bytes() != race_msg(item.seq()) {
                torn = Some(item.seq());
            }
        });
        ensure!(torn.is_none(), "batch-read message {torn:?} torn");
        Ok(read.map(|k| k as u64))
    })
}

/// Message `seq` of the unpin/claim races: 16 bytes of `seq`.
fn race_msg(seq: u64) -> [u8; 16] {
    [seq as u8; 16]
}

/// The two unpin/claim races: on a 1-slot ring, a skip-on-lag reader thread calls `read` (one
/// non-blocking read that checks what it read: the messages it saw, or the ring's answer) until
/// the close, while a producer that never parks publishes [`race_msg`]s into the slot.
fn unpin_claim_race<B, R>(b: &B, mut read: R) -> Check
where
    B: Backend,
    R: FnMut(&mut Consumer<Arc<B::Mem>>) -> Result<Result<u64, ReadError>, Failure>
        + Send
        + 'static,
{
    let n: u64 = if cfg!(miri) { 12 } else { 5_000 };
    let m = Arc::new(b.create(&Config::new(1, 16).with_consumers(1))?);
    let mut c = join_consumer(m.clone(), DeliveryClass::SkipOnLag, id(2))?;
    let reader = std::thread::spawn(move || -> Check {
        let mut seen = 0;
        for _ in 0..10_000_000u64 {
            match read(&mut c)? {
                Ok(k) => seen += k,
                Err(ReadError::Closed) => break,
                Err(ReadError::Empty | ReadError::Lagging) => std::thread::yield_now(),
                Err(e) => return Err(Failure(format!("reader: {e}"))),
            }
        }
        ensure!(seen > 0, "the reader saw nothing");
        Ok(())
    });
    let mut p = join_producer(m.clone(), id(1))?;
    let mut seq = 0;
    for _ in 0..10_000_000u64 {
        if seq == n {
            break;
        }
        match p.try_publish(&race_msg(seq)) {
            Ok(_) => seq += 1,
            Err(ClaimError::Pinned { .. }) => std::thread::yield_now(),
            Err(e) => return Err(Failure(format!("producer: {e}"))),
        }
    }
    ensure!(seq == n, "the producer was held back for good");
    p.close();
    reader
        .join()
        .map_err(|_| Failure("reader panicked".into()))?
}

/// The segment's allocator: the producer frees and re-allocates the only entry over and over
/// (lengths alternate with the generation) while a reader looks up handles it saw. A lookup
/// returns the allocation its handle named, exactly, or `InvalidHandle`: never the old entry's
/// meta with a newer allocation's fields. Under Miri (weak-memory emulation) this is the check
/// of the entry snapshot's fence.
pub fn alloc_lookup_races_reuse<B: Backend>(b: &B) -> Check {
    alloc_lookup_races_reuse_for(b, if cfg!(miri) { 30 } else { 2_000 })
}

/// [`alloc_lookup_races_reuse`] with a chosen number of reuse rounds (`tests/alloc_race.rs`
/// runs enough under Miri for its weak-memory emulation to find a missing fence).
pub fn alloc_lookup_races_reuse_for<B: Backend>(b: &B, rounds: u64) -> Check {
    use ring_core::arena::{AllocError, Allocator};
    use std::sync::atomic::AtomicU64;
    let m = Arc::new(b.create(&Config::new(1, 8).with_consumers(1).with_allocator(64, 1))?);
    let len_of = |handle: u64| if (handle >> 32) % 2 == 1 { 8 } else { 16 };
    let latest = Arc::new(AtomicU64::new(0));
    let (m2, latest2) = (m.clone(), latest.clone());
    let reader = std::thread::spawn(move || -> Check {
        let r = Allocator::attach(m2.alloc_words()).map_err(fail("attach"))?;
        for _ in 0..rounds * 4 {
            // Acquire: pairs with the producer's Release store of a handle it just allocated.
            let h = latest2.load(std::sync::atomic::Ordering::Acquire);
            if h == 0 {
                std::thread::yield_now();
                continue;
            }
            match r.lookup(h) {
                Ok(a) => ensure!(
                    a.handle == h && a.offset == 0 && a.len == len_of(h),
                    "lookup({h:#x}) returned {a:?}: fields of another allocation"
                ),
                Err(AllocError::InvalidHandle { .. }) => {}
                Err(e) => return Err(Failure(format!("lookup: {e}"))),
            }
        }
        Ok(())
    });
    let mut w = Allocator::attach(m.alloc_words()).map_err(fail("attach"))?;
    let mut prev: Option<u64> = None;
    for round in 0..rounds {
        if let Some(h) = prev {
            w.free(h, 1).map_err(fail("free"))?;
        }
        // The generation is bumped by each allocation of the entry: pick the length it implies.
        let next_gen = round + 1;
        let a = w
            .alloc(if next_gen % 2 == 1 { 8 } else { 16 }, 1, round)
            .map_err(fail("alloc"))?;
        ensure!(
            a.len == len_of(a.handle),
            "generation/length bookkeeping: {a:?}"
        );
        latest.store(a.handle, std::sync::atomic::Ordering::Release);
        prev = Some(a.handle);
    }
    reader
        .join()
        .map_err(|_| Failure("reader panicked".into()))??;
    if let Some(h) = prev {
        w.free(h, 1).map_err(fail("free"))?;
    }
    ensure!(w.stats().live == 0, "allocation leaked");
    Ok(())
}
