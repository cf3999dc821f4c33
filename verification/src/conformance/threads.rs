//! The checks that race threads: a stress run, pin/unpin/claim races with no other
//! synchronisation (for Miri), and allocator lookups racing the reuse of their entry.

#[allow(clippy::wildcard_imports, reason = "the suite's own helpers")]
use super::*;

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
