//! The single-threaded checks, and the model sequences run on every backend.

#[allow(clippy::wildcard_imports, reason = "the suite's own helpers")]
use super::*;

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
    let (mut p, [mut c]) = join_all(&m, [DeliveryClass::SkipOnLag])?;
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
    let (mut p, [mut g]) = join_all(&m, [DeliveryClass::Gating])?;
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
    let (mut p, [mut s, mut l]) =
        join_all(&m, [DeliveryClass::SkipOnLag, DeliveryClass::LatestOnly])?;
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
    let (mut p1, [mut c1]) = join_all(&m1, [DeliveryClass::LatestOnly])?;
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
    let (mut p, [mut dead, mut live]) =
        join_all(&m, [DeliveryClass::Gating, DeliveryClass::SkipOnLag])?;
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
    let (mut p, [mut pin, mut copy]) =
        join_all(&m, [DeliveryClass::SkipOnLag, DeliveryClass::SkipOnLag])?;
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
    let (mut p, [mut c]) = join_all(&m, [DeliveryClass::Gating])?;
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
    let (mut p, [mut c]) = join_all(&m, [DeliveryClass::Gating])?;
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

/// Deterministic op sequence `n` for the model runs, for 32-byte slots.
pub fn sequence(seed: u64, len: usize) -> Vec<Op> {
    sequence_for(seed, len, 32)
}

/// Deterministic op sequence `n` for the model runs, with writes and batches sized for
/// `cap`-byte slots (some longer: refused).
pub fn sequence_for(seed: u64, len: usize, cap: u16) -> Vec<Op> {
    let mut r = PlainXorShift::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
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
