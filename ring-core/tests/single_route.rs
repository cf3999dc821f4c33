//! Happens-before with a single route, for Miri's race detector: in each test one
//! acquire/release pair (in one test, two pairs that each cover the other, weakened together)
//! orders a plain (non-atomic) read of a message against the producer's writes of that slot.
//! The threads signal each other with Relaxed flags only, and neither runs a fence between the
//! signal and the access that would race (under Miri a SeqCst fence synchronises with every
//! earlier one, which would hide the race). Weaken the route and Miri reports a data race on
//! every seed and schedule; with it, the run is clean. Each test names
//! the mutant of `verification/mutants.txt` it catches. Runs under Miri (`ci/miri.sh`).
#![cfg(not(any(ring_loom, ring_shuttle)))]
#![allow(
    clippy::disallowed_methods,
    reason = "real threads, never loom's: the spin hint is core's, not the façade's (crate-private)"
)]

use std::sync::Arc;

use core::hint::spin_loop;
use core::sync::atomic::Ordering;

use ring_core::AtomicU32;
use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, HeapSegment, Memory, ReadError, INLINE_CAPACITY,
};

mod common;
use common::{consumer, producer, ring};

/// Longer than the inline words: readers read the payload area.
const LEN: usize = INLINE_CAPACITY + 40;

/// A one-slot ring: every message after the first reuses the slot the last one was read in.
fn one_slot() -> Arc<HeapSegment> {
    Arc::new(ring(&Config::new(1, 256).with_consumers(4)))
}

/// Spins until `flag` is set. Relaxed: a signal, not a synchronisation point (see the module
/// doc); `spin_loop` lets Miri run the other thread.
fn wait_for(flag: &AtomicU32) {
    while flag.load(Ordering::Relaxed) == 0 {
        spin_loop();
    }
}

/// `drop-bits-release`: a skip-on-lag consumer pins message 0 (a reader bit), reads its bytes
/// in place, leaks the pin and is dropped; `Consumer::drop`'s Release bit clear is then the
/// only route from those reads to the producer's rewrite of the slot. The producer's claim
/// refused while the pin is held takes the gating scan (whose Acquire loads could read the
/// drop's FREE store), so the claim that succeeds runs no scan and no fence (the last publish
/// fenced); the producer polls the slot's state word with Relaxed loads until the bit is
/// gone, then claims and writes. With the clear Relaxed, its claim CAS synchronises only with
/// the pin's `fetch_or` (before the reads): a data race between the reads and the rewrite.
#[test]
fn a_dropped_consumers_bit_clear_orders_its_leaked_pins_reads_before_the_rewrite() {
    rewrite_after_let_go(|mut c, pinned| {
        let m = c.try_pin().unwrap();
        assert_eq!(m.bytes(), &[0xAB; LEN][..], "message 0 torn");
        core::mem::forget(m);
        pinned();
        drop(c);
    });
}

/// What the tests of a let-go's Release share (the dropped consumer's bit clear above, the
/// hold's release below): on a one-slot ring, a skip-on-lag consumer's thread `read`s message
/// 0 (`0xAB`s) in place, calls its second argument once it holds the slot (which returns once
/// the producer's claim was refused as `Pinned`), then lets go of the slot. The producer polls
/// the slot's state word with Relaxed loads until the bit is gone, then claims (no scan, no
/// fence: the last publish fenced) and rewrites the slot. What `read` returns is dropped after
/// that rewrite.
fn rewrite_after_let_go<R: Send + 'static>(
    read: impl FnOnce(Consumer<Arc<HeapSegment>>, &dyn Fn()) -> R + Send + 'static,
) {
    let s = one_slot();
    let mut p = producer(Arc::clone(&s));
    let c = consumer(Arc::clone(&s), DeliveryClass::SkipOnLag, 2);
    assert_eq!(p.try_publish(&[0xAB; LEN]), Ok(0));
    let holding = Arc::new(AtomicU32::new(0));
    let refused = Arc::new(AtomicU32::new(0));
    let (holding2, refused2) = (Arc::clone(&holding), Arc::clone(&refused));
    let reader = std::thread::spawn(move || {
        let signal = || {
            holding2.store(1, Ordering::Relaxed);
            wait_for(&refused2);
        };
        read(c, &signal)
    });
    wait_for(&holding);
    assert!(matches!(p.try_claim(), Err(ClaimError::Pinned { .. })));
    refused.store(1, Ordering::Relaxed);
    // Relaxed: the bit's disappearance is the signal; the claim CAS (Acquire) is what must
    // order the reader's reads before the write below.
    while s.slot_header(0).state.load(Ordering::Relaxed) != 0 {
        spin_loop();
    }
    assert_eq!(p.try_publish(&[0xCD; LEN]), Ok(1));
    drop(reader.join().unwrap());
}

/// `stamp-follow-acquires`: a skip-on-lag consumer follows slot 0's stamp for message 1 and
/// pins it. Two pairs order the producer's payload writes before its plain reads: the final
/// stamp (Release) read by `stamp_of` (Acquire), and `finish`'s WRITER clear (Release) read by
/// the pin's `fetch_or` (Acquire); each alone suffices, so only both weakened race. The
/// reader polls without a fence, and message 0 has the same length, so whichever length
/// store the pin reads, it reads the payload area in place.
#[test]
fn a_stamp_following_pin_sees_the_payload_through_the_stamp_or_the_writer_clear() {
    let s = one_slot();
    let mut p = producer(Arc::clone(&s));
    assert_eq!(p.try_publish(&[0x11; LEN]), Ok(0));
    // Registered after message 0: it starts at message 1.
    let mut c = consumer(Arc::clone(&s), DeliveryClass::SkipOnLag, 2);
    let reader = std::thread::spawn(move || loop {
        match c.try_pin() {
            Ok(m) => {
                assert_eq!((m.seq(), m.missed()), (1, 0));
                assert_eq!(m.bytes(), &[0x22; LEN][..], "message 1 torn");
                return;
            }
            Err(ReadError::Empty) => spin_loop(),
            Err(e) => panic!("reader: {e}"),
        }
    });
    assert_eq!(p.try_publish(&[0x22; LEN]), Ok(1));
    reader.join().unwrap();
}

/// `pin-only-copy-pins`: in a pin-only ring a copy read pins, so its unpin (`refuse_pin`'s
/// Release, which `takeback-release` weakens too) is the only route from its loads of message
/// 0 to the producer's `&mut` loan of the slot for message 1. The producer claims once the reader says (Relaxed) that it has copied; the
/// reader keeps its consumer until the loan is published (`Consumer::drop` clears reader bits
/// with Release, a second route). A copy that reads optimistically instead leaves the claim
/// unordered after its loads: a data race with the loan's plain writes.
#[test]
fn a_pin_only_copy_read_is_ordered_before_the_next_loan_by_its_unpin() {
    let config = Config::new(1, 256).with_consumers(4).with_pin_only(true);
    let s = Arc::new(ring(&config));
    let mut p = producer(Arc::clone(&s));
    let mut c = consumer(Arc::clone(&s), DeliveryClass::SkipOnLag, 2);
    let mut slot = p.try_claim().unwrap();
    slot.loan(LEN).unwrap().fill(0x33);
    assert_eq!(slot.publish(), Ok(0));
    let copied = Arc::new(AtomicU32::new(0));
    let published = Arc::new(AtomicU32::new(0));
    let (copied2, published2) = (Arc::clone(&copied), Arc::clone(&published));
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let m = c.try_copy(&mut buf).unwrap();
        assert_eq!(
            (m.seq, &buf[..m.len]),
            (0, &[0x33; LEN][..]),
            "message 0 torn"
        );
        copied2.store(1, Ordering::Relaxed);
        wait_for(&published2);
        drop(c);
    });
    wait_for(&copied);
    let mut slot = p.try_claim().unwrap();
    slot.loan(LEN).unwrap().fill(0x44);
    assert_eq!(slot.publish(), Ok(1));
    published.store(1, Ordering::Relaxed);
    reader.join().unwrap();
}

/// `hold-release-release`: a skip-on-lag consumer holds message 0, reads its bytes in place
/// and releases the hold; the release's Release bit clear is the only route from those reads
/// to the producer's rewrite of the slot (the same shape as the dropped consumer's above: the
/// refused claim, then Relaxed polling of the state word, then a claim with no scan and no
/// fence). With the clear Relaxed, a data race between the reads and the rewrite.
#[test]
fn a_hold_release_orders_the_held_reads_before_the_rewrite() {
    rewrite_after_let_go(|mut c, held| {
        let h = c.try_hold().unwrap();
        assert_eq!(c.held_bytes(&h), Some(&[0xAB; LEN][..]), "message 0 torn");
        held();
        c.release(h).unwrap();
        c
    });
}
