//! loom models of the ABI 3 fast path (docs/PROTOCOL.md, "One line per message, one writer per
//! line"): consumers that follow the slot's stamp, small messages inline in the slot header,
//! publish = WRITER clear then final stamp, `head` stored once per publish or batch, the
//! `publish_futex` bump only for parked consumers, batches on both sides, and a batch reader
//! whose callback panics.
//!
//! Run as `loom_ring.rs` says. Every message byte is a function of the sequence number and the
//! byte's position, so a read that mixes two messages (or words of one message with stale
//! words) is visible.
#![cfg(ring_loom)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use loom::thread;
use ring_core::{
    BatchItem, ClaimError, Config, Consumer, DeliveryClass, Memory, Producer, ReadError,
    INLINE_CAPACITY,
};
use ring_verification::support::futex::{futex_ring, FutexWait};
use ring_verification::support::{id, model, owned, publish_range, ring, ring_with, Seg};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Message `seq`, `len` bytes long: byte `i` is `seq * 31 + i` (mod 256).
fn msg(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

/// Small (inline) messages: 24 bytes, three inline words.
const SMALL: usize = 24;

fn small(seq: u64) -> Vec<u8> {
    msg(seq, SMALL)
}

/// A ring of `slots` 32-byte slots (a [`small`] message fits inline), its producer and a
/// consumer of `class`.
fn small_ring(slots: u32, class: DeliveryClass) -> (Seg, Producer<Seg>, Consumer<Seg>) {
    ring_with(&Config::new(slots, 32).with_consumers(1), class)
}

fn assert_whole(bytes: &[u8], seq: u64, len: usize) {
    assert_eq!(
        bytes,
        &msg(seq, len)[..],
        "message {seq} read torn or wrong"
    );
}

/// The panic a model's batch callback raises on purpose ("the consumer dies"). The hook
/// stays silent for it (every execution would print it) and reports every other panic.
const DIES: &str = "consumer callback dies (on purpose)";

fn quiet_deliberate_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&DIES) {
                default(info);
            }
        }));
    });
}

/// Publishes small message `seq`, retrying (with a yield) while the ring is full or pinned, at
/// most `tries` times; true when published.
fn publish_retrying(p: &mut Producer<Seg>, seq: u64, tries: usize) -> bool {
    let mut next = seq;
    publish_range(p, &mut next, seq + 1, tries, true, small, |_| {});
    next > seq
}

/// After a model's threads are done: publishes `n` more small messages as batches, all of
/// which must go in (nothing pins or gates the ring any more).
///
/// One refusal is allowed, `Pinned { readers: 0 }`, which is how a claim reports (and clears)
/// a stale `WRITER` bit. loom can leave one behind where no C11 execution can: `finish` clears
/// `WRITER` with a plain store of 0, and a pin that found `WRITER` set takes its bit back with
/// a `fetch_and`; loom orders a plain store only after the stores its thread has seen, so the
/// two stay unordered in its (partial) modification order and a later RMW may read the
/// `fetch_and`'s `WRITER` value instead of the 0. In C11 the modification order is total and
/// the `fetch_and` reads the value just before it, so the 0 comes last. (loom's RMW atomicity
/// against plain stores; see docs/VERIFICATION.md.)
fn publish_on(p: &mut Producer<Seg>, n: u64) {
    let head = p.published();
    let msgs: Vec<Vec<u8>> = (head..head + n).map(small).collect();
    let mut done = 0;
    let mut stale_writer = false;
    while done < msgs.len() {
        match p.try_publish_batch(&msgs[done..]) {
            Ok(k) => done += k,
            Err(ClaimError::Pinned { readers: 0, .. }) if !stale_writer => stale_writer = true,
            Err(e) => panic!("the producer cannot publish on: {e}"),
        }
    }
    assert_eq!(p.published(), head + n);
}

/// One read of a small message by `c`, pinning or copying; None when the ring is empty.
/// Returns (seq, missed).
fn read_small(c: &mut Consumer<Seg>, pin: bool) -> Option<(u64, u64)> {
    let mut buf = [0u8; SMALL];
    let got = if pin {
        c.try_pin().map(|m| {
            assert_eq!(m.len(), SMALL);
            m.copy_to(&mut buf);
            (m.seq(), m.missed())
        })
    } else {
        c.try_copy(&mut buf).map(|g| {
            assert_eq!(g.len, SMALL);
            (g.seq, g.missed)
        })
    };
    match got {
        Ok((seq, missed)) => {
            assert_whole(&buf, seq, SMALL);
            Some((seq, missed))
        }
        Err(ReadError::Empty) => None,
        Err(e) => panic!("consumer: {e}"),
    }
}

/// Checks that a gating read (`read_small`'s sequence number and missed count) is message
/// `*next`, none missed, and moves `next` on.
fn gating_next(next: &mut u64, (seq, missed): (u64, u64)) {
    assert_eq!(
        (seq, missed),
        (*next, 0),
        "gating consumer skipped or repeated"
    );
    *next += 1;
}

/// A gating consumer that follows its slot's stamp (the target reads the slot line, never
/// `head`) against a producer publishing three small (inline) messages into a 2-slot ring.
/// Every read is whole, in order, none missed, and after the producer is done the consumer
/// has received all three exactly once. Reads alternate between pin and copy.
///
/// Fails when the final stamp is not Release (a copy pairs the final stamp with stale inline
/// words), when the stamp is stored before WRITER is cleared (a pin that saw the final stamp
/// finds the message's own WRITER bit and skips it as overrun: a gating consumer loses it),
/// or when `target` takes a lower stamp for published (`Corrupt` on an empty poll).
#[test]
fn stamp_polling_gating_consumer_reads_every_inline_message() {
    const { assert!(SMALL <= INLINE_CAPACITY) };
    model(|| {
        let (_, mut p, mut g) = small_ring(2, DeliveryClass::Gating);
        let t = thread::spawn(move || {
            let mut published = 0;
            while published < 3 && publish_retrying(&mut p, published, 3) {
                published += 1;
            }
            // Returned, not dropped: a dropped producer aborts the stream.
            (p, published)
        });
        let mut next = 0;
        for k in 0..3 {
            if let Some(got) = read_small(&mut g, k % 2 == 0) {
                gating_next(&mut next, got);
            }
        }
        let (_p, published) = t.join().unwrap();
        while let Some(got) = read_small(&mut g, next % 2 == 1) {
            gating_next(&mut next, got);
        }
        assert_eq!(
            next, published,
            "gating consumer did not receive every message"
        );
        assert_eq!((g.received(), g.missed()), (published, 0));
    });
}

/// A skip-on-lag consumer that follows its slot's stamp, on a 1-slot ring the producer
/// rewrites three times (only a pin holds it back). Every read is whole and in order, each
/// read's `missed` is exactly the gap it stepped over, and received + missed = cursor.
#[test]
fn stamp_polling_skip_on_lag_counts_missed_exactly() {
    model(|| {
        let (_, mut p, mut c) = small_ring(1, DeliveryClass::SkipOnLag);
        p.try_publish(&small(0)).unwrap();
        let t = thread::spawn(move || {
            for seq in 1..3 {
                assert!(publish_retrying(&mut p, seq, 3), "held back for good");
            }
            p
        });
        let mut last = None;
        for k in 0..2 {
            let before = c.cursor();
            if let Some((seq, missed)) = read_small(&mut c, k == 0) {
                assert!(last.is_none_or(|l| seq > l), "sequence went backwards");
                assert_eq!(missed, seq - before, "missed is not the gap stepped over");
                last = Some(seq);
            }
            assert_eq!(
                c.received() + c.missed(),
                c.cursor(),
                "counts do not add up"
            );
        }
        let _p = t.join().unwrap();
        // Everything published: the last message is there, and the counts add up to it.
        if let Some((seq, _)) = read_small(&mut c, true) {
            assert_eq!(seq, 2);
        }
        assert_eq!(c.cursor(), 3, "the last message was not reached");
        assert_eq!(c.received() + c.missed(), 3, "missed not counted exactly");
    });
}

/// Message `seq` of the alternating models: even ones small (inline), odd ones 120 bytes
/// (payload area of a 128-byte slot).
fn alt_len(seq: u64) -> usize {
    if seq % 2 == 0 {
        16
    } else {
        120
    }
}

/// Copies batch item `item` (a small message) out and checks it whole; its sequence number.
fn whole_small(item: &BatchItem<'_>) -> u64 {
    let mut buf = [0u8; SMALL];
    item.copy_to(&mut buf);
    assert_whole(&buf, item.seq(), SMALL);
    item.seq()
}

/// The alternating models' ring: one 128-byte slot (room for [`alt_len`] messages of both
/// kinds), its producer and a skip-on-lag reader.
fn alt_ring() -> (Producer<Seg>, Consumer<Seg>) {
    let (_, p, c) = ring_with(
        &Config::new(1, 128).with_consumers(1),
        DeliveryClass::SkipOnLag,
    );
    (p, c)
}

/// Reads twice with `read` (which checks the message it read and returns its sequence number):
/// each read finds a message, in increasing order, or nothing yet.
fn reads_twice_in_order(mut read: impl FnMut() -> Result<u64, ReadError>) {
    let mut last = None;
    for _ in 0..2 {
        match read() {
            Ok(seq) => {
                assert!(last.is_none_or(|l| seq > l));
                last = Some(seq);
            }
            Err(ReadError::Empty) => {}
            Err(e) => panic!("consumer: {e}"),
        }
    }
}

/// Inline and payload messages in the same slot, pinning reader: message 0 (16 bytes, which
/// `write` puts in the payload area and `publish` copies into the inline words) is published, then the producer rewrites the slot with message 1
/// (120 bytes, `write` into the payload area) while the reader pins twice. Each pin is
/// message 0 or 1 whole (the length says where it lies), or refused; never a mix.
#[test]
fn inline_then_payload_in_one_slot_pinning_reader() {
    assert!(alt_len(1) > INLINE_CAPACITY && alt_len(0) <= INLINE_CAPACITY);
    model(|| {
        let (mut p, mut c) = alt_ring();
        p.try_publish(&msg(0, alt_len(0))).unwrap();
        let t = thread::spawn(move || {
            match p.try_publish(&msg(1, alt_len(1))) {
                Ok(seq) => assert_eq!(seq, 1),
                Err(ClaimError::Pinned { .. }) => {}
                Err(e) => panic!("producer: {e}"),
            }
            p
        });
        reads_twice_in_order(|| {
            c.try_pin().map(|m| {
                let seq = m.seq();
                assert_eq!(m.len(), alt_len(seq), "length of another message");
                let mut buf = [0u8; 128];
                let n = m.copy_to(&mut buf);
                assert_whole(&buf[..n], seq, alt_len(seq));
                seq
            })
        });
        drop(t.join().unwrap());
    });
}

/// Inline and payload messages in the same slot, copying (seqlock) reader: message 0
/// (120 bytes, payload area) is published, then the producer rewrites the slot with message 1
/// (16 bytes written with `write_at`, i.e. into the payload area, which `publish` copies into
/// the inline words) while the reader copies twice. Each copy is message 0 or 1 whole, or
/// refused; never inline words of one with the length of the other, never torn.
#[test]
fn payload_then_inline_in_one_slot_copying_reader() {
    model(|| {
        let (mut p, mut c) = alt_ring();
        p.try_publish(&msg(1, alt_len(1))).unwrap();
        // Sequence 0 holds the 120-byte message: name messages by their content's seq.
        let t = thread::spawn(move || {
            let mut w = p.try_claim().unwrap();
            w.write_at(0, &msg(2, alt_len(2))).unwrap();
            assert_eq!(w.publish(), Ok(1));
            p
        });
        let content = |seq: u64| seq + 1;
        reads_twice_in_order(|| {
            let mut buf = [0u8; 128];
            c.try_copy(&mut buf).map(|got| {
                let want = content(got.seq);
                assert_eq!(got.len, alt_len(want), "length of another message");
                assert_whole(&buf[..got.len], want, got.len);
                got.seq
            })
        });
        drop(t.join().unwrap());
    });
}

/// Lazy progress: a batch stores `head` once, at its end, so a claim inside a batch that needs
/// the gating scan stores the stale `head` first (the registration handshake needs it). A
/// gating consumer registers while the producer publishes a batch of two into a 1-slot ring
/// (message 0 published before): whatever head it starts at, it never finds its first message
/// overwritten (missed stays 0), and a message it reads is whole.
///
/// Without the stale-head store (mutant `batch-stale-head`) the consumer can load `head` = 1
/// after the batch finished message 1 and the producer's scan for message 2 miss it: message 1
/// is overwritten under it.
#[test]
fn registration_races_a_batch() {
    model(|| {
        let (s, mut p) = ring(&Config::new(1, 32).with_consumers(1));
        p.try_publish(&small(0)).unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let mut g = Consumer::new(s2, DeliveryClass::Gating, id(2)).unwrap();
            let start = g.cursor();
            let mut buf = [0u8; SMALL];
            match g.try_copy(&mut buf) {
                Ok(got) => {
                    assert_eq!((got.seq, got.missed), (start, 0), "gating consumer missed");
                    assert_whole(&buf, got.seq, SMALL);
                }
                Err(ReadError::Empty) => {}
                Err(e) => panic!("gating consumer: {e}"),
            }
            assert_eq!(g.missed(), 0, "gating consumer missed");
        });
        match p.try_publish_batch(&[small(1), small(2)]) {
            Ok(n) => assert!(n >= 1),
            Err(e) => panic!("producer: {e}"),
        }
        t.join().unwrap();
    });
}

/// Batches on both sides: `try_publish_batch` of three messages into a 2-slot ring (retrying
/// the rest while the gating consumer holds it full) against `try_read_batch`. Every message
/// is whole, in order, exactly once; and once the consumer has drained, the producer is free
/// again (the batch read stored its cursor: `publish_progress`).
#[test]
fn batch_publish_vs_batch_read() {
    model(|| {
        let (_, mut p, mut g) = small_ring(2, DeliveryClass::Gating);
        let msgs: Vec<Vec<u8>> = (0..3).map(small).collect();
        let t = thread::spawn(move || {
            let mut done = 0;
            for _ in 0..3 {
                match p.try_publish_batch(&msgs[done..]) {
                    Ok(n) => done += n,
                    Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {}
                    Err(e) => panic!("producer: {e}"),
                }
                if done == msgs.len() {
                    break;
                }
                thread::yield_now();
            }
            (p, done)
        });
        let mut next = 0u64;
        let mut read = |g: &mut Consumer<Seg>| -> usize {
            match g.try_read_batch(4, |item| {
                assert_eq!((item.seq(), item.missed()), (next, 0), "batch read order");
                let mut buf = [0u8; SMALL];
                assert_eq!(item.copy_to(&mut buf), SMALL);
                assert_whole(&buf, item.seq(), SMALL);
                next += 1;
            }) {
                Ok(n) => n,
                Err(ReadError::Empty) => 0,
                Err(e) => panic!("consumer: {e}"),
            }
        };
        read(&mut g);
        read(&mut g);
        let (mut p, done) = t.join().unwrap();
        while read(&mut g) > 0 {}
        assert_eq!(g.received(), done as u64, "not every message exactly once");
        assert_eq!(g.missed(), 0);
        // Drained: the producer can fill both slots again (the batch read's progress is
        // visible to it).
        publish_on(&mut p, 2);
    });
}

/// A consumer dies inside a batch read: its callback panics on the second message it is
/// handed (the model's "death": it never calls again), leaving that message pinned.
/// Meanwhile the producer tries to publish (a gating consumer holds it back by its cursor; a
/// skip-on-lag one only by its pins, so the producer rewrites the slots under the batch).
/// Once the death is known (the thread is joined) the producer reclaims the entry: exactly
/// the dying read's pin is cleared (a skip-on-lag reader's bit; a gating reader holds by its
/// cursor, which the reclaim frees), no pin is left, and the producer publishes on, filling
/// the ring.
#[test]
fn consumer_dies_mid_batch_and_is_reclaimed() {
    quiet_deliberate_panics();
    for class in [DeliveryClass::Gating, DeliveryClass::SkipOnLag] {
        model(move || consumer_dies_mid_batch(class));
    }
}

fn consumer_dies_mid_batch(class: DeliveryClass) {
    let (s, mut p) = ring(&Config::new(2, 32).with_consumers(1));
    let mut c = Consumer::new(s.clone(), class, id(2)).unwrap();
    let index = c.index();
    p.try_publish_batch(&[small(0), small(1)]).unwrap();
    let t = thread::spawn(move || {
        let mut handed = 0;
        let r = catch_unwind(AssertUnwindSafe(|| {
            c.try_read_batch(4, |item| {
                whole_small(&item);
                handed += 1;
                if handed == 2 {
                    std::panic::panic_any(DIES);
                }
            })
        }));
        std::mem::forget(c);
        r.is_err()
    });
    // Gating: slot 0 holds message 0 until the cursor passes it (it never will). Skip-on-lag:
    // the producer rewrites slot 0, then slot 1, unless the batch holds it pinned.
    for seq in 2..4 {
        match p.try_publish(&small(seq)) {
            Ok(_) | Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {}
            Err(e) => panic!("producer: {e}"),
        }
    }
    let died = t.join().unwrap();
    // SAFETY: the consumer thread was joined after leaking its handle: it makes no more calls.
    let r = unsafe { p.reclaim(index, id(2)) }.unwrap();
    assert!(r.was_registered);
    // A gating reader's pin is its cursor (no reader bit): reclaim frees its gating hold.
    let pinning = class != DeliveryClass::Gating;
    assert_eq!(
        r.pins_cleared,
        u32::from(died && pinning),
        "the dying batch read's pin was not cleared exactly"
    );
    if class == DeliveryClass::Gating {
        assert!(died, "a gating batch read reaches message 1");
    }
    assert_eq!(ring_core::inspect::total_pins(&*s), 0, "reclaim left a pin");
    publish_on(&mut p, 2);
}

/// A live consumer's batch callback panics on the second message while the producer tries to
/// publish. Its next read takes the pin back (the leaked pin, `held`) and reads the same
/// message again, whole; after it has read everything the producer is free again.
#[test]
fn live_consumer_batch_panic_rereads_the_message() {
    quiet_deliberate_panics();
    model(|| {
        let (s, mut p, mut c) = small_ring(2, DeliveryClass::Gating);
        p.try_publish_batch(&[small(0), small(1)]).unwrap();
        let t = thread::spawn(move || {
            let mut first = true;
            let r = catch_unwind(AssertUnwindSafe(|| {
                c.try_read_batch(4, |item| {
                    if item.seq() == 1 && first {
                        first = false;
                        std::panic::panic_any(DIES);
                    }
                })
            }));
            assert!(r.is_err());
            assert_eq!(c.cursor(), 1, "message 0 was consumed, message 1 not");
            let mut seqs = Vec::new();
            let n = c
                .try_read_batch(4, |item| seqs.push(whole_small(&item)))
                .unwrap();
            assert!(n >= 1 && seqs[0] == 1, "message 1 not read again: {seqs:?}");
            // Nothing pinned now: the only reader is between calls.
            c
        });
        let published = p.try_publish(&small(2)).is_ok();
        let mut c = t.join().unwrap();
        while c.try_read_batch(4, |_| {}).is_ok() {}
        assert_eq!(c.received(), 2 + u64::from(published));
        assert_eq!(
            ring_core::inspect::total_pins(&*s),
            0,
            "a pin was left behind"
        );
        publish_on(&mut p, 2);
    });
}

/// A stamp-following (gating) consumer parks in `wait_ready` while the producer publishes a
/// batch of two; `announce` bumps `publish_futex` only when it sees `consumer_waiters != 0`
/// after its SeqCst fence. No lost wake-up (a deadlock loom would report), no spurious
/// `Corrupt` from the check before parking (`head` is stored after the stamps, Release), and
/// the batch read after the wait gets message 0 first, whole.
#[test]
fn parked_stamp_follower_is_woken_by_a_batch() {
    model(|| {
        let (s, mut p, mut c) = futex_ring(2, 32, DeliveryClass::Gating);
        let t = thread::spawn(move || {
            assert_eq!(p.try_publish_batch(&[small(0), small(1)]), Ok(2));
            // Returned, not dropped: the drop's abort would wake the consumer and hide a lost
            // wake-up of the publish.
            p
        });
        let mut w = FutexWait(s.clone());
        c.wait_ready(&mut w).unwrap();
        let mut first = None;
        let n = c
            .try_read_batch(2, |item| {
                first.get_or_insert(whole_small(&item));
            })
            .unwrap();
        assert!(n >= 1);
        assert_eq!(first, Some(0));
        drop(t.join().unwrap());
    });
}

/// A latest-only consumer (it targets by `head`) parks in `wait_ready` while the producer
/// publishes once; woken, it copies the message whole. Fails when `announce`'s `head` store is
/// not Release: the copy then pairs the new `head` with the slot's old stamp (`Corrupt`).
#[test]
fn parked_head_follower_is_woken_by_a_publish() {
    model(|| {
        let (s, mut p, mut c) = futex_ring(2, 32, DeliveryClass::LatestOnly);
        let t = thread::spawn(move || {
            assert_eq!(p.try_publish(&small(0)), Ok(0));
            p // Not dropped here: see above.
        });
        let mut w = FutexWait(s.clone());
        c.wait_ready(&mut w).unwrap();
        let mut buf = [0u8; SMALL];
        let got = c.try_copy(&mut buf).unwrap();
        assert_eq!(got.seq, 0);
        assert_whole(&buf, 0, SMALL);
        drop(t.join().unwrap());
    });
}

/// A message that panics on its second `as_ref` (`try_publish_batch` calls it once to check
/// the size, once to write): the producer "dies" inside the batch, after message 0's final
/// stamp and before the batch's `head` store.
struct Bomb {
    data: Vec<u8>,
    calls: std::cell::Cell<u32>,
}

impl AsRef<[u8]> for Bomb {
    fn as_ref(&self) -> &[u8] {
        let n = self.calls.get() + 1;
        self.calls.set(n);
        if n == 2 {
            std::panic::panic_any(DIES);
        }
        &self.data
    }
}

/// The producer dies inside a batch: message 0 is published by its stamp, `head` still says 0
/// (`announce` never ran), and message 1's slot was claimed and given back. A stamp-following
/// gating consumer may read message 0 meanwhile. The new producer (take-over, after the death
/// is known) must start past message 0 (`start` moves `head` past final stamps): it publishes
/// at sequence 1, and the consumer receives every message exactly once.
#[test]
fn take_over_after_death_inside_a_batch() {
    quiet_deliberate_panics();
    model(|| {
        let (s, mut p, mut c) = small_ring(2, DeliveryClass::Gating);
        let reader = thread::spawn(move || {
            let got = read_small(&mut c, false);
            if let Some((seq, missed)) = got {
                assert_eq!((seq, missed), (0, 0));
            }
            c
        });
        // Message 0's never goes off; message 1's at its second call (the write).
        let msgs = [
            Bomb {
                data: small(0),
                calls: std::cell::Cell::new(100),
            },
            Bomb {
                data: small(1),
                calls: std::cell::Cell::new(0),
            },
        ];
        let r = catch_unwind(AssertUnwindSafe(|| p.try_publish_batch(&msgs)));
        assert!(r.is_err(), "the producer did not die");
        std::mem::forget(p);
        let mut c = reader.join().unwrap();
        // SAFETY: the dead producer leaked its handle; its batch call unwound and ended.
        let mut new = unsafe { Producer::take_over(s.clone(), id(3), id(1)) }.unwrap();
        assert_eq!(
            new.published(),
            1,
            "the new producer would publish message 0 again"
        );
        assert_eq!(new.try_publish(&small(1)), Ok(1));
        while read_small(&mut c, true).is_some() {}
        assert_eq!((c.received(), c.missed()), (2, 0));
    });
}

/// `write` of a message longer than the slot (but short enough for the inline words) is
/// refused and writes nothing: the inline fast path keeps the slot's bound.
#[test]
fn inline_write_keeps_the_slot_bound() {
    model(|| {
        let (_s, mut p) = ring(&Config::new(1, 16).with_consumers(1));
        let mut w = p.try_claim().unwrap();
        assert!(
            w.write(&small(0)).is_err(),
            "a 24-byte write into a 16-byte slot"
        );
        w.abort();
    });
}

/// `publish_futex` never repeats a value across close and reopen while a consumer is counted
/// as parked (`announce` bumps it only then): a bump, never a value derived from `head`, which
/// a close's bump and a reopened producer's next publish could both produce (the waiter would
/// sleep through it). One execution: the check is of the values, not of an interleaving.
#[test]
fn publish_futex_never_repeats_with_a_waiter() {
    model(|| {
        let s = owned(&Config::new(4, 32).with_consumers(1));
        let line = s.producer_line();
        // Relaxed: single-threaded; stands for a consumer parked in `wait_ready`.
        line.consumer_waiters
            .store(1, core::sync::atomic::Ordering::Relaxed);
        let word = || {
            line.publish_futex
                .load(core::sync::atomic::Ordering::Relaxed)
        };
        let mut seen = vec![word()];
        for round in 0..3 {
            let mut p = Producer::new(s.clone(), id(1)).unwrap();
            for _ in 0..=round {
                let before = word();
                p.try_publish(&small(p.published())).unwrap();
                // With a waiter, every publish moves the word (else the waiter sleeps on).
                assert_ne!(
                    word(),
                    before,
                    "a publish left the futex word unchanged: {seen:?}"
                );
                seen.push(word());
            }
            p.close();
            seen.push(word());
            drop(p);
            seen.push(word());
        }
        // Each value once: a run of equal values is one value, and no run comes back.
        let mut runs = seen.clone();
        runs.dedup();
        let distinct: std::collections::BTreeSet<u32> = runs.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            runs.len(),
            "a futex value repeated: {seen:?}"
        );
    });
}

/// A skip-on-lag pinner races the only publish of a 2-slot ring: nothing overwrites message 0,
/// so it must never be counted missed. The reader either pins it (whole, missed 0) or finds
/// nothing yet, and after the producer is done it reads it. Catches a publish that stores the
/// final stamp before clearing WRITER (`finish-order-swap`): a pin that saw the final stamp
/// would find the message's own WRITER and count it as overrun.
#[test]
fn a_skip_pinner_never_misses_a_message_nothing_overwrote() {
    model(|| {
        let (_, mut p, mut c) = ring_with(
            &Config::new(2, SMALL as u32).with_consumers(1),
            DeliveryClass::SkipOnLag,
        );
        let t = thread::spawn(move || {
            p.try_publish(&small(0)).unwrap();
            p
        });
        let mut got = false;
        match c.try_pin() {
            Ok(m) => {
                assert_eq!((m.seq(), m.missed()), (0, 0));
                let mut buf = [0u8; SMALL];
                m.copy_to(&mut buf);
                assert_whole(&buf, 0, SMALL);
                got = true;
            }
            Err(ReadError::Empty) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        let _p = t.join().unwrap();
        if !got {
            let m = c
                .try_pin()
                .expect("message 0, published and never overwritten");
            assert_eq!((m.seq(), m.missed()), (0, 0));
        }
        assert_eq!(
            c.missed(),
            0,
            "a message nothing overwrote was counted missed"
        );
    });
}
