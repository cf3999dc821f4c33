//! shuttle whole-ring runs: one producer, four consumers (one of each class, plus a second
//! skip-on-lag reader that pins), eight slots, random crash injection, under shuttle's random
//! and PCT schedulers.
//!
//! ring-core is built with `--cfg ring_shuttle`, so its sync façade hands out shuttle's atomics
//! and every atomic access is a scheduling point (shuttle treats every ordering as SeqCst: this
//! layer finds protocol-logic bugs with 3+ consumers and deaths; loom finds ordering bugs).
//!
//! Run: `RUSTFLAGS="--cfg ring_shuttle" CARGO_TARGET_DIR=target/shuttle \
//!       cargo test -p ring-verification --release --test shuttle_ring`
//! (`SHUTTLE_ITERATIONS` overrides the 1000 iterations per scheduler.)
#![cfg(ring_shuttle)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use ring_core::inspect::total_pins;
use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, Hold, Memory as _, Producer, ReadError,
};
use ring_verification::support::{id, publish_range, ring, Seg};
use shuttle::rand::{thread_rng, Rng};
use shuttle::sync::atomic::{AtomicBool, Ordering};
use shuttle::thread;
use std::sync::Arc;

const SLOTS: u32 = 8;
const MESSAGES: u64 = 20;
/// One consumer in `CRASH_ONE_IN` crashes, at a random step below `CRASH_STEPS`.
const CRASH_ONE_IN: u32 = 3;
const CRASH_STEPS: u32 = 40;

fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Message `seq`: 16 bytes, each `seq` mixed with its position, so torn or misplaced reads show.
fn msg(seq: u64) -> [u8; 16] {
    core::array::from_fn(|i| (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
}

/// What a consumer thread reports.
struct Report {
    class: DeliveryClass,
    crashed: bool,
    seqs: Vec<u64>,
    missed: u64,
    cursor: u64,
    start: u64,
    received: u64,
}

impl Report {
    /// The report of consumer `c`, which lived (started at `start`, read `seqs`); drops it.
    fn lived(c: Consumer<Seg>, start: u64, seqs: Vec<u64>) -> Self {
        Self {
            class: c.class(),
            crashed: false,
            missed: c.missed(),
            cursor: c.cursor(),
            start,
            received: c.received(),
            seqs,
        }
    }

    /// The report of a consumer of `class` that crashed after reading `seqs`.
    fn crashed(class: DeliveryClass, start: u64, seqs: Vec<u64>) -> Self {
        Self {
            class,
            crashed: true,
            seqs,
            missed: 0,
            cursor: 0,
            start,
            received: 0,
        }
    }
}

/// The step a consumer crashes at: one consumer in [`CRASH_ONE_IN`], at a random step below
/// [`CRASH_STEPS`].
fn crash_step() -> Option<u32> {
    let mut rng = thread_rng();
    (rng.gen_range(0..CRASH_ONE_IN) == 0).then(|| rng.gen_range(0..CRASH_STEPS))
}

/// A crash: the handle `c` is leaked (no destructor runs, as in a killed process: whatever it
/// holds stays held), then the death is announced.
fn die<T>(c: T, dead: &AtomicBool) {
    std::mem::forget(c);
    // Release: the liveness oracle (ring-os checks the process) sees the death after
    // everything the consumer did.
    dead.store(true, Ordering::Release);
}

/// What a reader does with a refused read: true at the end of the stream (`Closed`); on
/// `Empty` (and `Lagging` where `lag_ok`) it yields; anything else fails the run.
fn ended(e: ReadError, lag_ok: bool, who: impl core::fmt::Debug) -> bool {
    match e {
        ReadError::Closed => true,
        ReadError::Empty => {
            thread::yield_now();
            false
        }
        ReadError::Lagging if lag_ok => {
            thread::yield_now();
            false
        }
        e => panic!("{who:?}: {e}"),
    }
}

/// Records `seq`, read after `seqs`: a reader's sequences only go forward.
fn push_forward(seqs: &mut Vec<u64>, seq: u64, who: impl core::fmt::Debug) {
    assert!(
        seqs.last().is_none_or(|&l| seq > l),
        "{who:?} went backwards"
    );
    seqs.push(seq);
}

/// Pins the next message and checks it whole: its sequence and what it missed.
fn pin_whole(c: &mut Consumer<Seg>) -> Result<(u64, u64), ReadError> {
    let m = c.try_pin()?;
    let mut a = [0u8; 16];
    assert_eq!(m.copy_to(&mut a), 16);
    assert_eq!(a, msg(m.seq()), "pinned read of {} torn", m.seq());
    Ok((m.seq(), m.missed()))
}

/// Copies the next message and checks it whole: its sequence and what it missed.
fn copy_whole(c: &mut Consumer<Seg>) -> Result<(u64, u64), ReadError> {
    let mut buf = [0u8; 16];
    let got = c.try_copy(&mut buf)?;
    assert_eq!(buf, msg(got.seq), "copied read of {} torn", got.seq);
    Ok((got.seq, got.missed))
}

/// A schedule test pair for a whole-ring run: shuttle's random scheduler and PCT (depth 3),
/// each for [`iterations`].
macro_rules! schedules {
    ($run:ident: $random:ident, $pct:ident) => {
        #[test]
        fn $random() {
            shuttle::check_random($run, iterations());
        }

        #[test]
        fn $pct() {
            shuttle::check_pct($run, iterations(), 3);
        }
    };
}

fn consumer(
    seg: Seg,
    class: DeliveryClass,
    pin: bool,
    owner: u64,
    dead: Arc<AtomicBool>,
) -> Report {
    let mut c = Consumer::new(seg, class, id(owner)).expect("table has room");
    let start = c.cursor();
    let mut seqs = Vec::new();
    let crash_at = crash_step();
    for step in 0..400 {
        if crash_at == Some(step) {
            // Crash, possibly holding a pin: nothing is released.
            if pin {
                if let Ok(m) = c.try_pin() {
                    std::mem::forget(m);
                }
            }
            die(c, &dead);
            return Report::crashed(class, start, seqs);
        }
        let r = if pin {
            pin_whole(&mut c)
        } else {
            copy_whole(&mut c)
        };
        match r {
            Ok((seq, _)) => push_forward(&mut seqs, seq, class),
            Err(e) if ended(e, true, class) => break,
            Err(_) => {}
        }
    }
    Report::lived(c, start, seqs)
}

fn whole_ring() {
    let (seg, mut p) = ring(&Config::new(SLOTS, 16).with_consumers(4));
    let classes = [
        (DeliveryClass::Gating, false),
        (DeliveryClass::LatestOnly, true),
        (DeliveryClass::SkipOnLag, false),
        (DeliveryClass::SkipOnLag, true),
    ];
    let dead: Vec<Arc<AtomicBool>> = classes.iter().map(|_| Arc::default()).collect();
    let handles: Vec<_> = classes
        .iter()
        .zip(&dead)
        .enumerate()
        .map(|(k, (&(class, pin), d))| {
            let (s, d) = (seg.clone(), d.clone());
            thread::spawn(move || consumer(s, class, pin, 10 + k as u64, d))
        })
        .collect();
    publish_reclaim_and_check(&seg, &mut p, &dead, handles, 1);
}

/// The producer side of a whole-ring run: publishes `MESSAGES` messages, reclaiming the
/// consumers that announced their death (consumer `k` registered as owner `10 + k`; a reclaim
/// clears at most `max_pins` pins), closes, joins the consumers, reclaims the rest, and checks
/// invariant 7 (no pin outlives its consumer) and invariant 4 (exact counts; the gating reader
/// lossless and in order) on the reports of those that lived.
fn publish_reclaim_and_check(
    seg: &Seg,
    p: &mut Producer<Seg>,
    dead: &[Arc<AtomicBool>],
    handles: Vec<thread::JoinHandle<Report>>,
    max_pins: u32,
) {
    let entries = seg.geometry().consumers();
    let mut reclaimed = vec![false; dead.len()];
    let mut reclaim_dead = |p: &mut Producer<Seg>| {
        for (k, d) in dead.iter().enumerate() {
            // Acquire: pairs with the consumer's Release store of its death.
            if !reclaimed[k] && d.load(Ordering::Acquire) {
                // Its table index: the entry whose owner it was (registration order varies).
                for i in 0..entries {
                    if p.consumer_info(i).is_some_and(|e| e.owner == 10 + k as u64) {
                        // SAFETY: the consumer announced its death after leaking its handle
                        // (and its pins; a hold's token is inert): it makes no more calls.
                        let r = unsafe { p.reclaim(i, id(10 + k as u64)) }.expect("reclaim");
                        assert!(r.was_registered && r.pins_cleared <= max_pins);
                    }
                }
                reclaimed[k] = true;
            }
        }
    };
    publish_range(p, &mut 0, MESSAGES, 2000, true, msg, &mut reclaim_dead);
    p.close();
    let reports: Vec<Report> = handles
        .into_iter()
        .map(|h| h.join().expect("consumer"))
        .collect();
    reclaim_dead(p);
    // Invariant 7: once every dead consumer is reclaimed, no pin is left anywhere.
    assert_eq!(total_pins(&**seg), 0, "a pin outlived its consumer");
    for r in reports.iter().filter(|r| !r.crashed) {
        // Invariant 4: counts are exact for every class.
        assert_eq!(r.received, r.seqs.len() as u64);
        assert_eq!(
            r.received + r.missed,
            r.cursor - r.start,
            "{:?} lost count",
            r.class
        );
        if r.class == DeliveryClass::Gating {
            // Lossless: everything from its start, in order.
            assert_eq!(r.missed, 0);
            if let (Some(&first), Some(&last)) = (r.seqs.first(), r.seqs.last()) {
                assert_eq!(
                    r.seqs.len() as u64,
                    last - first + 1,
                    "gating consumer skipped"
                );
            }
        }
    }
}

schedules!(whole_ring: whole_ring_random_schedules, whole_ring_pct_schedules);

/// Waits (yielding) until `flag` is set; false if it never was within the bound.
fn wait_for(flag: &AtomicBool) -> bool {
    for _ in 0..10_000 {
        // Acquire: pairs with the Release store that set it (the "idle" or "done" handshake).
        if flag.load(Ordering::Acquire) {
            return true;
        }
        thread::yield_now();
    }
    false
}

/// Pins the next message and checks its bytes twice, a scheduling point apart: a pinned
/// message never changes. Returns its sequence.
fn pin_and_recheck(c: &mut Consumer<Seg>) -> Result<u64, ReadError> {
    let m = c.try_pin()?;
    let mut a = [0u8; 16];
    assert_eq!(m.copy_to(&mut a), 16);
    assert_eq!(a, msg(m.seq()), "pinned read of {} torn", m.seq());
    // A scheduling point while pinned: the producer may try to claim the slot.
    thread::yield_now();
    let mut b = [0u8; 16];
    m.copy_to(&mut b);
    assert_eq!(a, b, "pinned message {} changed under the pin", m.seq());
    Ok(m.seq())
}

/// The adversarial liveness oracle: the verdict "dead" is wrong. A consumer that is alive (and,
/// as the contract asks, between calls and holding no `Pinned`; it may have leaked one) is
/// reclaimed, and a second consumer of the same owner id registers into the freed entry; the
/// live producer is taken over (same owner id) while it holds no claim. From then on every
/// call of the victims fails (`Evicted`, `Displaced`) and writes nothing: the same-owner
/// consumer's pins never change, the gating consumer loses nothing, and no sequence number is
/// published twice.
fn lying_liveness_oracle() {
    const SPLIT: u64 = 10;
    let (seg, mut p) = ring(&Config::new(4, 16).with_consumers(2));
    let mut gating = Consumer::new(seg.clone(), DeliveryClass::Gating, id(30)).expect("room");
    let victim = Consumer::new(seg.clone(), DeliveryClass::SkipOnLag, id(20)).expect("room");
    let victim_index = victim.index();
    let flags = || Arc::new(AtomicBool::new(false));
    let (idle, reclaimed, p_idle, taken) = (flags(), flags(), flags(), flags());
    // The victim: reads (leaking some pins), goes idle, and after its reclaim only fails.
    let v = {
        let (idle, reclaimed) = (idle.clone(), reclaimed.clone());
        thread::spawn(move || {
            let mut c = victim;
            let mut rng = thread_rng();
            for _ in 0..6 {
                if rng.gen_bool(0.3) {
                    // A leaked pin: the next read (or the reclaim) takes it back.
                    if let Ok(m) = c.try_pin() {
                        std::mem::forget(m);
                    }
                } else {
                    let _ = pin_and_recheck(&mut c);
                }
                thread::yield_now();
            }
            // Release: the "idle, no Pinned" verdict the reclaimer relies on.
            idle.store(true, Ordering::Release);
            assert!(wait_for(&reclaimed), "never reclaimed");
            assert!(!c.is_registered());
            let mut buf = [0u8; 16];
            for _ in 0..3 {
                assert_eq!(c.try_pin().err(), Some(ReadError::Evicted));
                assert_eq!(c.try_copy(&mut buf).err(), Some(ReadError::Evicted));
                thread::yield_now();
            }
            drop(c);
        })
    };
    // The same process's second consumer: same owner id, registered into the freed entry.
    let twin = {
        let (seg, reclaimed) = (seg.clone(), reclaimed.clone());
        thread::spawn(move || {
            assert!(wait_for(&reclaimed), "never reclaimed");
            let mut c = Consumer::new(seg, DeliveryClass::SkipOnLag, id(20)).expect("room");
            assert_eq!(c.index(), victim_index, "the twin takes the freed entry");
            let mut last = None;
            for _ in 0..400 {
                match pin_and_recheck(&mut c) {
                    Ok(seq) => {
                        assert!(last.is_none_or(|l| seq > l), "twin went backwards");
                        last = Some(seq);
                    }
                    Err(e) if ended(e, true, "twin") => break,
                    Err(_) => {}
                }
            }
        })
    };
    // The successor producer: takes over once the first one is idle, publishes the rest.
    let successor = {
        let (seg, p_idle, taken) = (seg.clone(), p_idle.clone(), taken.clone());
        thread::spawn(move || {
            assert!(wait_for(&p_idle), "the first producer never went idle");
            // SAFETY: the first producer announced it is between calls and holds no claim;
            // it is alive (the lying verdict) and must be fenced out by the epoch.
            let mut p2 = unsafe { Producer::take_over(seg, id(1), id(1)) }.expect("take over");
            // Release: the displaced producer now makes its calls.
            taken.store(true, Ordering::Release);
            let mut seq = SPLIT;
            publish_range(&mut p2, &mut seq, MESSAGES, 4000, true, msg, |_| {});
            assert_eq!(seq, MESSAGES, "the successor was held back for good");
            p2.close();
            p2
        })
    };
    // The gating reader, in its own thread: lossless across the take-over.
    let reader = thread::spawn(move || {
        let mut seqs = Vec::new();
        for _ in 0..4000 {
            match copy_whole(&mut gating) {
                Ok((seq, _)) => seqs.push(seq),
                Err(e) if ended(e, true, "gating") => break,
                Err(_) => {}
            }
        }
        assert_eq!(
            seqs,
            (0..MESSAGES).collect::<Vec<_>>(),
            "gating lost or repeated"
        );
    });
    let mut seq = 0;
    let mut reclaim_done = false;
    for _ in 0..4000 {
        // Acquire: pairs with the victim's Release "idle" store.
        if !reclaim_done && idle.load(Ordering::Acquire) {
            // SAFETY: the victim announced it is between calls and holds no `Pinned`; it is
            // alive (the lying verdict) and must be fenced out by the generation.
            let r = unsafe { p.reclaim(victim_index, id(20)) }.expect("reclaim");
            assert!(r.was_registered && r.pins_cleared <= 1);
            reclaim_done = true;
            // Release: the victim and its twin go on.
            reclaimed.store(true, Ordering::Release);
        }
        if seq == SPLIT && reclaim_done {
            break;
        }
        if seq < SPLIT {
            match p.try_publish(&msg(seq)) {
                Ok(_) => seq += 1,
                Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {}
                Err(e) => panic!("producer: {e}"),
            }
        }
        thread::yield_now();
    }
    assert!(
        seq == SPLIT && reclaim_done,
        "the first producer was held back"
    );
    // Release: idle, no claim: the take-over may happen.
    p_idle.store(true, Ordering::Release);
    assert!(wait_for(&taken), "never taken over");
    assert!(p.is_displaced());
    for _ in 0..3 {
        assert!(matches!(
            p.try_publish(&msg(99)),
            Err(ClaimError::Displaced { .. })
        ));
        assert!(matches!(p.try_claim(), Err(ClaimError::Displaced { .. })));
        p.close();
        thread::yield_now();
    }
    drop(p);
    v.join().expect("victim");
    twin.join().expect("twin");
    reader.join().expect("gating reader");
    let p2 = successor.join().expect("successor");
    assert!(
        !p2.is_displaced(),
        "the displaced producer's drop touched the ring"
    );
    drop(p2);
    assert_eq!(total_pins(&*seg), 0, "a pin outlived its consumer");
}

schedules!(lying_liveness_oracle:
    lying_liveness_oracle_random_schedules,
    lying_liveness_oracle_pct_schedules
);

/// Slot capacity of the batch runs: wider than the message line, so messages of both kinds.
const WIDE: u32 = 160;
/// Messages published by the batch runs.
const BATCH_MESSAGES: u64 = 18;

/// Length of message `seq` in the batch runs: inline (at most `INLINE_CAPACITY` bytes) and
/// payload-area lengths mixed, exact boundaries included.
fn wide_len(seq: u64) -> usize {
    let inline = ring_core::INLINE_CAPACITY.min(WIDE as usize);
    [0, inline, inline + 1, WIDE as usize, 13, inline - 5, 120, 1][(seq % 8) as usize]
}

/// Message `seq` of the batch runs: its length says `seq`, and each byte is `seq` mixed with
/// its position, so a torn, misplaced or mis-sized read shows.
fn wide_msg(seq: u64) -> Vec<u8> {
    (0..wide_len(seq))
        .map(|i| (seq as u8).wrapping_mul(37).wrapping_add(i as u8) ^ 0x5A)
        .collect()
}

/// Checks one message of the batch runs (bytes, and the words' zero padding past `len`) and
/// the delivery order: `seq` is the consumer's next sequence (before the read, or after the
/// batch's previous message) plus exactly what the read says it missed. Returns the next
/// expected sequence.
fn check_wide(
    class: DeliveryClass,
    expect: u64,
    seq: u64,
    missed: u64,
    bytes: &[u8],
    words: Option<&[ring_core::AtomicU64]>,
) -> u64 {
    assert_eq!(
        bytes,
        wide_msg(seq),
        "{class:?}: message {seq} torn or mis-sized"
    );
    if let Some(words) = words {
        assert_eq!(
            words.len(),
            bytes.len().div_ceil(8),
            "message {seq}: word count"
        );
        let mut padded: Vec<u8> = words
            .iter()
            // Relaxed: the message is pinned; nothing writes it.
            .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
            .collect();
        assert!(
            padded[bytes.len()..].iter().all(|&b| b == 0),
            "message {seq}: last word not padded"
        );
        padded.truncate(bytes.len());
        assert_eq!(padded, bytes, "message {seq}: words != bytes");
    }
    assert_eq!(
        seq,
        expect + missed,
        "{class:?}: read {seq} after {} with {missed} missed",
        expect.wrapping_sub(1)
    );
    if class == DeliveryClass::Gating {
        assert_eq!(missed, 0, "gating missed {missed} before {seq}");
    }
    seq + 1
}

/// A consumer of the batch runs: batch reads (`try_read_batch` of up to 1..4) and single reads
/// (pin or copy), chosen at random per call.
fn batch_consumer(seg: Seg, class: DeliveryClass, owner: u64) -> (Report, bool) {
    let mut c = Consumer::new(seg, class, id(owner)).expect("table has room");
    let start = c.cursor();
    let mut expect = start;
    let mut seqs = Vec::new();
    let mut rng = thread_rng();
    let mut buf = vec![0u8; WIDE as usize];
    let mut closed = false;
    for _ in 0..20_000 {
        // The read's first message is its next sequence plus exactly what the read reports
        // missed (a failed read may have stepped `next` past overwritten messages already,
        // and counted them in the total: see the accounting check after the run).
        let before = c.cursor();
        assert!(
            before >= expect,
            "{class:?}: next went back from {expect} to {before}"
        );
        expect = before;
        let r = match rng.gen_range(0..4) {
            0 => c.try_pin().map(|m| {
                let mut out = vec![0u8; m.len()];
                assert_eq!(m.copy_to(&mut out), m.len());
                expect = check_wide(class, expect, m.seq(), m.missed(), &out, Some(m.words()));
                seqs.push(m.seq());
                1
            }),
            1 => c.try_copy(&mut buf).map(|got| {
                expect = check_wide(class, expect, got.seq, got.missed, &buf[..got.len], None);
                seqs.push(got.seq);
                1
            }),
            _ => {
                let max = rng.gen_range(1..5);
                let mut n = 0;
                let r = c.try_read_batch(max, |m| {
                    let mut out = vec![0u8; m.len()];
                    assert_eq!(m.copy_to(&mut out), m.len());
                    expect = check_wide(class, expect, m.seq(), m.missed(), &out, Some(m.words()));
                    seqs.push(m.seq());
                    n += 1;
                    // A scheduling point while pinned: the producer may try to claim it.
                    thread::yield_now();
                });
                if let Ok(k) = r {
                    assert!(k >= 1 && k <= max, "batch of {k} for max {max}");
                    assert_eq!(k, n, "batch count != callbacks");
                }
                r
            }
        };
        match r {
            Ok(_) => {}
            Err(e) if ended(e, true, class) => {
                closed = true;
                break;
            }
            Err(_) => {}
        }
    }
    (Report::lived(c, start, seqs), closed)
}

/// The batch APIs on a ring of 160-byte slots: the producer publishes messages of mixed
/// sizes (inline and payload-area) with `try_publish_batch` (random batch sizes, a prefix
/// when the ring fills) and now and then `try_publish`; a gating, a latest-only and two
/// skip-on-lag consumers mix `try_read_batch` with single pins and copies. Every message is
/// whole and of its own length, the gating consumer gets everything from its start in order,
/// every consumer's missed count is exactly the sequences it jumped over, the producer gets
/// every message out (batch reads release their pins and store their cursors), every consumer
/// reaches the end, and no pin is left.
fn batches_whole_ring() {
    let (seg, mut p) = ring(&Config::new(4, WIDE).with_consumers(4));
    let classes = [
        DeliveryClass::Gating,
        DeliveryClass::LatestOnly,
        DeliveryClass::SkipOnLag,
        DeliveryClass::SkipOnLag,
    ];
    let handles: Vec<_> = classes
        .iter()
        .enumerate()
        .map(|(k, &class)| {
            let s = seg.clone();
            thread::spawn(move || batch_consumer(s, class, 10 + k as u64))
        })
        .collect();
    let mut rng = thread_rng();
    let mut seq = 0;
    for _ in 0..20_000 {
        if seq == BATCH_MESSAGES {
            break;
        }
        let k = rng.gen_range(1..5).min(BATCH_MESSAGES - seq);
        let msgs: Vec<Vec<u8>> = (seq..seq + k).map(wide_msg).collect();
        let r = if k == 1 && rng.gen_bool(0.5) {
            p.try_publish(&msgs[0]).map(|s| {
                assert_eq!(s, seq);
                1
            })
        } else {
            p.try_publish_batch(&msgs)
        };
        match r {
            Ok(n) => {
                assert!(n >= 1 && n as u64 <= k, "published {n} of {k}");
                seq += n as u64;
                assert_eq!(p.published(), seq, "published count");
            }
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => thread::yield_now(),
            Err(e) => panic!("producer: {e}"),
        }
    }
    // Progress: the consumers release what they read (unpin, cursor), so the producer is
    // never held back for good.
    assert_eq!(seq, BATCH_MESSAGES, "the producer was held back for good");
    p.close();
    for (h, class) in handles.into_iter().zip(classes) {
        let (r, closed) = h.join().expect("consumer");
        assert!(closed, "{class:?} never saw the end of the stream");
        assert_eq!(r.received, r.seqs.len() as u64, "{class:?} received");
        assert_eq!(
            r.received + r.missed,
            r.cursor - r.start,
            "{class:?} lost count"
        );
        if class == DeliveryClass::Gating {
            // Lossless: everything from its start to the end, in order.
            assert_eq!(r.missed, 0);
            assert_eq!(r.seqs, (r.start..seq).collect::<Vec<_>>(), "gating lost");
        }
        assert_eq!(r.cursor, seq, "{class:?} closed before the end");
    }
    assert_eq!(total_pins(&*seg), 0, "a pin outlived its batch");
}

schedules!(batches_whole_ring: batches_random_schedules, batches_pct_schedules);

/// A consumer that holds up to three messages at once and releases a random one (or, with
/// one chance in `CRASH_ONE_IN`, dies holding them at a random step). Every held message is
/// checked whole when it is taken and again just before its release.
fn holding_consumer(seg: Seg, class: DeliveryClass, owner: u64, dead: Arc<AtomicBool>) -> Report {
    let mut c = Consumer::new(seg, class, id(owner)).expect("table has room");
    c.set_max_holds(3).expect("3 holds");
    let start = c.cursor();
    let crash_at = crash_step();
    let mut held = Vec::new();
    let mut seqs = Vec::new();
    for step in 0..400 {
        if crash_at == Some(step) {
            die(c, &dead);
            return Report::crashed(class, start, seqs);
        }
        match hold_or_release(&mut c, &mut held, 3) {
            Ok(None) => {}
            Ok(Some((seq, _))) => push_forward(&mut seqs, seq, class),
            Err(e) if ended(e, true, class) => break,
            Err(_) => {}
        }
    }
    release_all(&mut c, held);
    Report::lived(c, start, seqs)
}

/// One step of a reader that holds up to `max` messages: when it holds `max`, or with one
/// chance in three when it holds any, it releases a random one of `held` (checked whole
/// first) and returns `Ok(None)`; otherwise it takes a new hold, checks it whole, keeps it and
/// returns its sequence and redelivered flag.
fn hold_or_release(
    c: &mut Consumer<Seg>,
    held: &mut Vec<Hold>,
    max: usize,
) -> Result<Option<(u64, bool)>, ReadError> {
    let mut rng = thread_rng();
    if held.len() == max || (!held.is_empty() && rng.gen_range(0..3) == 0) {
        let h = held.remove(rng.gen_range(0..held.len()));
        check_held(c, &h);
        c.release(h).expect("release");
        return Ok(None);
    }
    let h = c.try_hold()?;
    check_held(c, &h);
    let got = (h.seq(), h.redelivered());
    held.push(h);
    Ok(Some(got))
}

/// Releases every hold of `held`, each checked whole first.
fn release_all(c: &mut Consumer<Seg>, held: Vec<Hold>) {
    for h in held {
        check_held(c, &h);
        c.release(h).expect("release");
    }
}

/// Holds under random schedules and deaths: one producer, a gating and a skip-on-lag consumer
/// that each hold up to three messages and release them in random order; the producer never
/// rewrites a held message, reclaims the dead, and at the end no pin is left; the gating
/// reader (if it lived) got everything from its start, in order.
fn holds_whole_ring() {
    let (seg, mut p) = ring(&Config::new(SLOTS, 16).with_consumers(2));
    let classes = [DeliveryClass::Gating, DeliveryClass::SkipOnLag];
    let dead: Vec<Arc<AtomicBool>> = classes.iter().map(|_| Arc::default()).collect();
    let handles: Vec<_> = classes
        .iter()
        .zip(&dead)
        .enumerate()
        .map(|(k, (&class, d))| {
            let (s, d) = (seg.clone(), d.clone());
            thread::spawn(move || holding_consumer(s, class, 10 + k as u64, d))
        })
        .collect();
    publish_reclaim_and_check(&seg, &mut p, &dead, handles, 3);
}

schedules!(holds_whole_ring: holds_random_schedules, holds_pct_schedules);

/// What a group member thread reports: every message it took (with the redelivered flag) and
/// whether it crashed.
struct MemberReport {
    taken: Vec<(u64, bool)>,
    /// What it held when it crashed (empty if it lived).
    held_at_death: Vec<u64>,
    crashed: bool,
}

/// A member of group "g": holds up to two messages, releases them in random order, and may
/// crash (leak itself, holding what it holds) at a random step.
fn member(seg: Seg, owner: u64, dead: Arc<AtomicBool>) -> MemberReport {
    let mut c = Consumer::join_group(seg, "g", id(owner)).expect("table has room");
    c.set_max_holds(2).expect("2 holds");
    let crash_at = crash_step();
    let mut held = Vec::new();
    let mut taken = Vec::new();
    for step in 0..400 {
        if crash_at == Some(step) {
            let held_at_death = held.iter().map(Hold::seq).collect();
            die(c, &dead);
            return MemberReport {
                taken,
                held_at_death,
                crashed: true,
            };
        }
        match hold_or_release(&mut c, &mut held, 2) {
            Ok(None) => {}
            Ok(Some(got)) => taken.push(got),
            Err(e) if ended(e, false, "member") => break,
            Err(_) => {}
        }
    }
    release_all(&mut c, held);
    MemberReport {
        taken,
        held_at_death: Vec::new(),
        crashed: false,
    }
}

fn check_held(c: &Consumer<Seg>, h: &Hold) {
    let bytes: Vec<u8> = c
        .held_words(h)
        .expect("a hold it has")
        .iter()
        .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    assert_eq!(
        bytes[..16],
        msg(h.seq()),
        "held message {} changed",
        h.seq()
    );
}

/// Groups under random schedules and deaths: three members hold and release at random and may
/// crash holding messages; the producer reclaims the dead (their claims go to the group's
/// queue). Then a fresh member drains what is left. Every published message was taken at
/// least once, none twice without the redelivered flag, and no held message ever changed.
fn groups_whole_ring() {
    let (seg, mut p) = ring(&Config::new(SLOTS, 16).with_consumers(5));
    p.create_group("g").expect("group");
    let dead: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::default()).collect();
    let handles: Vec<_> = dead
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let (s, d) = (seg.clone(), d.clone());
            thread::spawn(move || member(s, 10 + k as u64, d))
        })
        .collect();
    let entries = seg.geometry().consumers();
    let mut reclaimed = [false; 3];
    let mut reclaim_dead = |p: &mut Producer<Seg>| {
        for (k, d) in dead.iter().enumerate() {
            // Acquire: pairs with the member's Release store of its death.
            if reclaimed[k] || !d.load(Ordering::Acquire) {
                continue;
            }
            let owner = 10 + k as u64;
            for i in 0..entries {
                if p.consumer_info(i).is_some_and(|e| e.owner == owner) {
                    // SAFETY: the member announced its death after leaking its handle: it
                    // makes no more calls.
                    match unsafe { p.reclaim(i, id(owner)) } {
                        Ok(r) => reclaimed[k] = r.was_registered,
                        // The queue is full for now: its claims keep gating; retried later.
                        Err(ring_core::Error::RedeliveryFull { .. }) => {}
                        Err(e) => panic!("reclaim: {e}"),
                    }
                }
            }
        }
    };
    let mut published = 0;
    publish_range(
        &mut p,
        &mut published,
        MESSAGES,
        2000,
        false,
        msg,
        &mut reclaim_dead,
    );
    p.close();
    let mut reports: Vec<MemberReport> = handles
        .into_iter()
        .map(|h| h.join().expect("member"))
        .collect();
    reclaim_dead(&mut p);
    // What the dead left behind (their claims, now queued) goes to a new member.
    let mut drainer = Consumer::join_group(seg.clone(), "g", id(20)).expect("room");
    let mut taken = Vec::new();
    loop {
        match drainer.try_hold() {
            Ok(h) => {
                check_held(&drainer, &h);
                taken.push((h.seq(), h.redelivered()));
                drainer.release(h).expect("release");
            }
            Err(ReadError::Closed) => break,
            Err(e) => panic!("drainer: {e}"),
        }
    }
    reports.push(MemberReport {
        taken,
        held_at_death: Vec::new(),
        crashed: false,
    });
    // A message a member died holding comes again, flagged, to another member.
    for (k, r) in reports.iter().enumerate() {
        for &seq in &r.held_at_death {
            assert!(
                reports
                    .iter()
                    .enumerate()
                    .any(|(j, o)| j != k && o.taken.contains(&(seq, true))),
                "message {seq}, held by a member that died, was not redelivered"
            );
        }
    }
    let all: Vec<(u64, bool)> = reports.iter().flat_map(|r| r.taken.clone()).collect();
    let mut first: Vec<u64> = all.iter().filter(|t| !t.1).map(|t| t.0).collect();
    first.sort_unstable();
    let n = first.len();
    first.dedup();
    assert_eq!(first.len(), n, "a message was taken twice without the flag");
    let mut seqs: Vec<u64> = all.iter().map(|t| t.0).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(
        seqs,
        (0..published).collect::<Vec<_>>(),
        "a published message was never taken (crashed: {:?})",
        reports.iter().map(|r| r.crashed).collect::<Vec<_>>()
    );
}

schedules!(groups_whole_ring: groups_random_schedules, groups_pct_schedules);

/// Never-stall rings: slots, and the most messages the latest-only reader holds at once. With
/// the skip-on-lag reader's one pin that is 3 pinned slots at most, so `NS_SLOTS >= 3 + 2`: the
/// producer must never be refused for a pin.
const NS_SLOTS: u32 = 5;
const NS_HOLDS: usize = 2;

/// The latest-only frame grabber of a never-stall ring: holds up to [`NS_HOLDS`] messages,
/// releases a random one, checks each whole when taken and again before its release.
fn ns_grabber(mut c: Consumer<Seg>) -> Vec<u64> {
    c.set_max_holds(NS_HOLDS).expect("holds");
    let (mut held, mut seqs) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        match hold_or_release(&mut c, &mut held, NS_HOLDS) {
            Ok(None) => {}
            Ok(Some((seq, _))) => push_forward(&mut seqs, seq, "latest-only"),
            Err(e) if ended(e, false, "latest-only") => break,
            Err(_) => {}
        }
    }
    release_all(&mut c, held);
    seqs
}

/// A skip-on-lag (`pin`) or gating reader of a never-stall ring: every message whole, in order,
/// and `missed` exactly the sequences stepped over. Returns what it read, its `missed`, and
/// whether it read to the end (it gives up after a bounded number of tries).
fn ns_reader(mut c: Consumer<Seg>) -> (Vec<u64>, u64, bool) {
    let class = c.class();
    let mut seqs: Vec<u64> = Vec::new();
    let mut at_end = false;
    for _ in 0..2000 {
        let next = c.cursor();
        let got = if class == DeliveryClass::SkipOnLag {
            pin_whole(&mut c)
        } else {
            copy_whole(&mut c)
        };
        match got {
            Ok((seq, missed)) => {
                assert!(seq >= next, "{class:?} went backwards");
                assert_eq!(seq - next, missed, "{class:?}: missed must be exact");
                seqs.push(seq);
            }
            Err(e) if ended(e, true, class) => {
                at_end = true;
                break;
            }
            Err(_) => {}
        }
    }
    assert_eq!(
        c.received() + c.missed(),
        c.cursor(),
        "{class:?}: received + missed"
    );
    (seqs, c.missed(), at_end)
}

/// A never-stall ring under random schedules: a latest-only reader holding up to two messages,
/// a skip-on-lag reader that pins, a gating reader that copies. No read is torn or of the wrong
/// message, the gating reader loses nothing, the skip-on-lag reader counts what it loses
/// exactly, and the producer is never refused for a pin (`slots >= pinned + 2`), only made to
/// wait for the gating reader (`Full`).
fn never_stall_whole_ring() {
    let (seg, mut p) = ring(
        &Config::new(NS_SLOTS, 16)
            .with_consumers(3)
            .with_never_stall(true),
    );
    // The readers register before the first message: the gating one then must get them all.
    let reader = |class, owner| Consumer::new(seg.clone(), class, id(owner)).expect("room");
    let grabber = reader(DeliveryClass::LatestOnly, 10);
    let grabber = thread::spawn(move || ns_grabber(grabber));
    let readers: Vec<_> = [DeliveryClass::SkipOnLag, DeliveryClass::Gating]
        .into_iter()
        .enumerate()
        .map(|(k, class)| {
            let c = reader(class, 20 + k as u64);
            thread::spawn(move || ns_reader(c))
        })
        .collect();
    // Never refused for a pin (slots >= pinned + 2): `Pinned` fails the run.
    let mut seq = 0;
    publish_range(&mut p, &mut seq, MESSAGES, usize::MAX, false, msg, |_| {});
    p.close();
    let latest = grabber.join().expect("latest-only reader");
    assert!(latest.iter().all(|&s| s < MESSAGES));
    let mut reports = readers.into_iter().map(|h| h.join().expect("reader"));
    let (skip, _, _) = reports.next().expect("skip-on-lag");
    let (gating, missed, ended) = reports.next().expect("gating");
    assert!(skip.last().is_none_or(|&s| s < MESSAGES));
    assert_eq!(missed, 0, "the gating reader missed messages");
    // Lossless and in order: everything so far, and all of it if it read to the end.
    assert_eq!(
        gating,
        (0..gating.len() as u64).collect::<Vec<_>>(),
        "gating: in order"
    );
    assert!(
        !ended || gating.len() as u64 == MESSAGES,
        "gating: lost messages"
    );
    drop(p);
    assert_eq!(total_pins(&*seg), 0, "pins left behind");
}

schedules!(never_stall_whole_ring: never_stall_random_schedules, never_stall_pct_schedules);
