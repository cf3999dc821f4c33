//! loom models of groups (competing consumers; docs/PROTOCOL.md, "Groups"): ring-core built
//! with `--cfg ring_loom`, over the loom-shaped `OwnedSegment`. One slot, so the producer's
//! next message always wants the slot a member may be reading.
//!
//! Run: `RUSTFLAGS="--cfg ring_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!       cargo test -p ring-verification --release --test loom_groups`
#![cfg(ring_loom)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use loom::thread;
use ring_core::{Consumer, Producer, ReadError};
use ring_verification::support::{config16, id, model, msg16 as msg, publish16_within, ring, Seg};

/// Tries to publish `seq` twice (`Full` only); true when it went in.
fn try_twice(p: &mut Producer<Seg>, seq: u64) -> bool {
    publish16_within(p, seq, 2, false)
}

/// One copy read by a member: the sequence, checked whole (a claim that failed to keep the
/// producer off the slot shows as a message mixed with the next one).
fn copy(c: &mut Consumer<Seg>) -> Option<(u64, bool)> {
    let mut buf = [0u8; 16];
    match c.try_copy(&mut buf) {
        Ok(got) => {
            assert_eq!(buf, msg(got.seq), "member read message {} torn", got.seq);
            Some((got.seq, got.redelivered))
        }
        Err(ReadError::Empty) => None,
        Err(e) => panic!("member: {e}"),
    }
}

/// Two members race for the one published message while the producer tries to put the next
/// one into its slot: exactly one member takes message 0 (never both), it reads it whole, and
/// the producer gets the slot only after that member finished it.
#[test]
fn two_members_race_for_one_message() {
    model(|| {
        let (s, mut p) = ring(&config16(1, 3));
        p.create_group("g").unwrap();
        p.try_publish(&msg(0)).unwrap();
        let mut a = Consumer::join_group(s.clone(), "g", id(2)).unwrap();
        let mut b = Consumer::join_group(s.clone(), "g", id(3)).unwrap();
        let ta = thread::spawn(move || copy(&mut a));
        let tp = thread::spawn(move || try_twice(&mut p, 1));
        let got_b = copy(&mut b);
        let got_a = ta.join().unwrap();
        let sent = tp.join().unwrap();
        let mut seqs: Vec<u64> = [got_a, got_b].into_iter().flatten().map(|g| g.0).collect();
        seqs.sort_unstable();
        assert!(
            seqs == [0] || seqs == [0, 1],
            "each message to exactly one member: got {seqs:?}"
        );
        if sent {
            assert!(
                seqs.contains(&0),
                "the slot was reused before message 0 was taken"
            );
        }
    });
}

/// A member takes message 0 and dies before it finishes it (its claim stays behind), racing
/// the producer's attempts at the slot. The producer never gets the slot from the dead claim;
/// after the reclaim the other member takes message 0 (flagged as redelivered) while the
/// producer tries again: it reads it whole, and the producer gets the slot only after it.
/// The dying member sits *below* the group's record in the table, so the producer's scan
/// meets its entry first (the order the gating scan must not depend on).
#[test]
fn a_member_dies_between_its_claim_and_its_read() {
    model(|| {
        let (s, mut p) = ring(&config16(1, 4));
        // Entry 0 taken for a moment, so the record lands in entry 1 and the member in 0.
        let placeholder = Consumer::new(s.clone(), ring_core::DeliveryClass::SkipOnLag, id(9));
        assert_eq!(p.create_group("g").unwrap(), 1);
        drop(placeholder);
        p.try_publish(&msg(0)).unwrap();
        let mut doomed = Consumer::join_group(s.clone(), "g", id(2)).unwrap();
        let index = doomed.index();
        assert_eq!(index, 0);
        let t = thread::spawn(move || {
            let hold = doomed.try_hold().expect("message 0 is there");
            assert_eq!(hold.seq(), 0);
            // Dies holding it: nothing of this member runs again (a `Hold` has no drop; the
            // consumer's would finish the claim).
            let _ = hold;
            std::mem::forget(doomed);
        });
        let early = try_twice(&mut p, 1);
        t.join().unwrap();
        assert!(!early, "the producer reused a slot a member had claimed");
        // SAFETY: the member was forgotten: it is inside no call and holds no pin.
        assert!(unsafe { p.reclaim(index, id(2)) }.unwrap().was_registered);
        let mut live = Consumer::join_group(s.clone(), "g", id(3)).unwrap();
        let t = thread::spawn(move || copy(&mut live));
        let sent = try_twice(&mut p, 1);
        let got = t.join().unwrap();
        assert_eq!(got, Some((0, true)), "message 0 must come back, flagged");
        // Whole (checked in `copy`) even when the producer got the slot: it waited for the
        // finish.
        let _ = sent;
    });
}
