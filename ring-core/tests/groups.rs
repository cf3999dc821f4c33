//! Groups (competing consumers): members of one group share a cursor, so each message goes to
//! exactly one live member; the group gates the producer; a member that dies holding messages
//! gives them to another member, flagged as redelivered. Run under Miri by `ci/miri.sh`.
#![cfg(not(any(ring_loom, ring_shuttle)))]
#![allow(
    clippy::disallowed_methods,
    reason = "real threads, never loom's: the spin hint is core's, not the façade's (crate-private)"
)]

use ring_core::{
    ClaimError, Config, Consumer, HeapSegment, Memory, OwnerId, Producer, ReadError, MAX_HOLDS,
};

mod common;
use common::{grouped, id, member, members, msg, producer, publish_msgs, ring};

fn seg(slots: u32) -> HeapSegment {
    // 200-byte slots: 150-byte messages live in the payload area, small ones inline.
    ring(&Config::new(slots, 200).with_consumers(8))
}

/// Reads one message with a copy; returns (seq, first byte, redelivered).
fn take<M: Memory>(c: &mut Consumer<M>) -> Result<(u64, u8, bool), ReadError> {
    let mut buf = [0u8; 200];
    let got = c.try_copy(&mut buf)?;
    assert!(buf[..got.len].iter().all(|&b| b == buf[0]), "torn message");
    Ok((got.seq, buf[0], got.redelivered))
}

#[test]
fn each_message_goes_to_exactly_one_member_and_late_members_get_the_rest() {
    let s = seg(8);
    let mut p = producer(&s);
    let g = p.create_group("workers").unwrap();
    assert_eq!(
        p.create_group("workers").unwrap(),
        g,
        "create_group finds an existing group"
    );
    // Published before any member joined: the group keeps them for its first member.
    publish_msgs(&mut p, 0..4);
    let mut a = member(&s, "workers", 2);
    assert_eq!(a.group(), Some(g));
    assert_eq!(take(&mut a).unwrap(), (0, 0, false));
    let mut b = member(&s, "workers", 3);
    assert_eq!(
        take(&mut b).unwrap(),
        (1, 1, false),
        "a late member gets what is untaken"
    );
    assert_eq!(take(&mut a).unwrap(), (2, 2, false));
    assert_eq!(take(&mut b).unwrap(), (3, 3, false));
    assert_eq!(take(&mut a), Err(ReadError::Empty));
    assert_eq!(take(&mut b), Err(ReadError::Empty));
    p.try_publish(&msg(4)).unwrap();
    assert_eq!(take(&mut b).unwrap(), (4, 4, false));
    assert_eq!(take(&mut a), Err(ReadError::Empty));
    assert_eq!((a.received(), b.received()), (2, 3));
}

#[test]
fn the_group_gates_the_producer_until_a_member_finishes() {
    let s = seg(4);
    let mut p = producer(&s);
    let g = p.create_group("q").unwrap();
    publish_msgs(&mut p, 0..4);
    // Nobody took message 0: its slot is the group's.
    assert_eq!(
        p.try_publish(&msg(4)),
        Err(ClaimError::Full {
            consumer: g,
            cursor: 0
        })
    );
    let mut a = member(&s, "q", 2);
    let h = a.try_hold().unwrap();
    assert_eq!(a.held_bytes(&h), Some(&msg(0)[..]));
    // Taken but not finished: the member's claim gates now.
    assert_eq!(
        p.try_publish(&msg(4)),
        Err(ClaimError::Full {
            consumer: a.index(),
            cursor: 0
        })
    );
    a.release(h).unwrap();
    p.try_publish(&msg(4)).unwrap();
    // Message 1 is untaken: the group gates again.
    assert!(
        matches!(p.try_publish(&msg(5)), Err(ClaimError::Full { consumer, .. }) if consumer == g)
    );
}

#[test]
fn a_member_that_dies_holding_messages_gives_them_to_another_member() {
    let s = seg(8);
    let mut p = grouped(&s, "q", 0..6);
    let [mut doomed, mut live] = members(&s, "q");
    let h0 = doomed.try_hold().unwrap();
    let h1 = doomed.try_hold().unwrap();
    assert_eq!((h0.seq(), h1.seq()), (0, 1));
    doomed.release(h0).unwrap(); // finished: never redelivered
    assert_eq!(take(&mut live).unwrap(), (2, 2, false));
    let index = doomed.index();
    // The process dies: nothing of it runs again.
    core::mem::forget(doomed);
    // SAFETY: the consumer in `index` was forgotten: it is inside no call and holds no pin.
    let r = unsafe { p.reclaim(index, id(2)) }.unwrap();
    assert!(r.was_registered);
    assert_eq!(
        p.lost_readers().first_gating_unread,
        None,
        "a member's messages are not lost"
    );
    // Message 1 comes first, flagged; then the group's cursor resumes.
    assert_eq!(take(&mut live).unwrap(), (1, 1, true));
    assert_eq!(take(&mut live).unwrap(), (3, 3, false));
    assert_eq!(take(&mut live).unwrap(), (4, 4, false));
    assert_eq!(take(&mut live).unwrap(), (5, 5, false));
    assert_eq!(take(&mut live), Err(ReadError::Empty));
    // Everything finished: the producer may lap the ring.
    publish_msgs(&mut p, 6..14);
}

#[test]
fn a_dead_members_claims_wait_while_the_redelivery_queue_is_full() {
    let s = seg(32);
    let mut p = grouped(&s, "q", 0..20);
    let [mut first, mut second, mut live] = members(&s, "q");
    for c in [&mut first, &mut second] {
        c.set_max_holds(MAX_HOLDS).unwrap();
        for _ in 0..6 {
            let _kept = c.try_hold().unwrap();
        }
    }
    let (i1, i2) = (first.index(), second.index());
    core::mem::forget(first);
    core::mem::forget(second);
    // SAFETY: both consumers were forgotten: inside no call, holding no pin.
    unsafe {
        assert!(p.reclaim(i1, id(2)).unwrap().was_registered);
        // Six more do not fit in the eight-word queue (six are there): nothing moves.
        assert_eq!(
            p.reclaim(i2, id(3)),
            Err(ring_core::Error::RedeliveryFull { needed: 6, free: 2 })
        );
    }
    let mut again = Vec::new();
    for _ in 0..6 {
        let (seq, _, redelivered) = take(&mut live).unwrap();
        assert!(redelivered);
        again.push(seq);
    }
    again.sort_unstable();
    assert_eq!(again, [0, 1, 2, 3, 4, 5]);
    // SAFETY: as above.
    assert!(unsafe { p.reclaim(i2, id(3)) }.unwrap().was_registered);
    let mut all: Vec<u64> = (0..10).map(|_| take(&mut live).unwrap().0).collect();
    all.sort_unstable();
    assert_eq!(all, (6..16).collect::<Vec<_>>());
}

#[test]
fn misuse_and_limits_are_errors() {
    let s = seg(8);
    let mut p = producer(&s);
    assert_eq!(
        Consumer::join_group(&s, "nobody", id(2)).err(),
        Some(ring_core::Error::NoSuchGroup)
    );
    let g = p.create_group("q").unwrap();
    // A group's record is the ring's: no verdict reclaims it.
    let owner = OwnerId::new(ring_core::layout::OWNER_GROUP).unwrap();
    // SAFETY: the record has no process; nothing runs inside it.
    assert!(!unsafe { p.reclaim(g, owner) }.unwrap().was_registered);
    let mut a = member(&s, "q", 2);
    publish_msgs(&mut p, 0..8);
    // A buffer too small keeps the message for the retry.
    let mut small = [0u8; 10];
    assert_eq!(
        a.try_copy(&mut small),
        Err(ReadError::BufferTooSmall { needed: 150 })
    );
    assert_eq!(take(&mut a).unwrap(), (0, 0, true));
    // Holds beyond the limit are an error, not a hang.
    let holds: Vec<_> = (0..4).map(|_| a.try_hold().unwrap()).collect();
    assert_eq!(a.try_hold(), Err(ReadError::TooManyHolds { max: 4 }));
    for h in holds {
        a.release(h).unwrap();
    }
    // A leaked pin's message is handed out again, flagged.
    let pinned = a.try_pin().unwrap();
    assert_eq!((pinned.seq(), pinned.redelivered()), (5, false));
    core::mem::forget(pinned);
    let again = a.try_pin().unwrap();
    assert_eq!((again.seq(), again.redelivered()), (5, true));
    assert_eq!(again.bytes(), &msg(5)[..]);
    drop(again);
    assert_eq!(
        a.rewind(1),
        Err(ReadError::NotSupported(
            "a group member reads from its group's cursor"
        ))
    );
}

#[test]
fn members_drain_then_see_the_end() {
    let s = seg(8);
    let mut p = grouped(&s, "q", 0..0);
    let [mut a, mut b] = members(&s, "q");
    p.try_publish(b"last").unwrap();
    p.abort(7);
    let mut n = 0;
    let mut count = |r: Result<usize, ReadError>| match r {
        Ok(k) => n += k,
        Err(e) => assert_eq!(e, ReadError::Aborted { code: 7 }),
    };
    count(a.try_read_batch(8, |m| assert_eq!(m.bytes(), b"last")));
    count(b.try_read_batch(8, |m| assert_eq!(m.bytes(), b"last")));
    assert_eq!(n, 1);
    assert_eq!(a.try_copy(&mut [0; 8]), Err(ReadError::Aborted { code: 7 }));
    assert_eq!(b.try_copy(&mut [0; 8]), Err(ReadError::Aborted { code: 7 }));
}

#[test]
fn three_member_threads_share_3000_messages_exactly_once() {
    const N: u64 = if cfg!(miri) { 60 } else { 3000 };
    let s = seg(4);
    let mut p = grouped(&s, "q", 0..0);
    let mut got: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3u64)
            .map(|w| {
                let s = &s;
                scope.spawn(move || {
                    let mut c = Consumer::join_group(s, "q", id(10 + w)).unwrap();
                    let mut mine = Vec::new();
                    let mut buf = [0u8; 200];
                    loop {
                        match c.try_copy(&mut buf) {
                            Ok(m) => {
                                assert_eq!(&buf[..8], &m.seq.to_le_bytes(), "wrong or torn");
                                assert!(!m.redelivered);
                                mine.push(m.seq);
                            }
                            Err(ReadError::Empty) => core::hint::spin_loop(),
                            Err(ReadError::Closed) => return mine,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        for seq in 0..N {
            let mut m = [0u8; 150];
            m[..8].copy_from_slice(&seq.to_le_bytes());
            while let Err(e) = p.try_publish(&m) {
                assert!(matches!(e, ClaimError::Full { .. }), "{e}");
                core::hint::spin_loop();
            }
        }
        p.close();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for mine in &got {
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "each member takes in order"
        );
    }
    let mut all: Vec<u64> = got.concat();
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>());
    got.clear();
}

/// The single route from a member's reads to the producer's rewrite is its finish (the claim
/// cleared with Release, paired with the gating scan's Acquire): the member reads the pinned
/// bytes as plain memory, so under Miri a weaker finish is a reported data race.
#[test]
fn a_members_finish_orders_its_reads_before_the_rewrite() {
    use core::sync::atomic::Ordering::Relaxed;

    use ring_core::AtomicU32;
    let s = std::sync::Arc::new(ring(&Config::new(1, 200).with_consumers(2)));
    let mut p = Producer::new(std::sync::Arc::clone(&s), id(1)).unwrap();
    p.create_group("q").unwrap();
    p.try_publish(&msg(7)).unwrap();
    let mut c = Consumer::join_group(std::sync::Arc::clone(&s), "q", id(2)).unwrap();
    let member = c.index();
    let read = std::sync::Arc::new(AtomicU32::new(0));
    let read2 = std::sync::Arc::clone(&read);
    let reader = std::thread::spawn(move || {
        let pinned = c.try_pin().unwrap();
        assert_eq!(pinned.bytes(), &msg(7)[..], "message torn");
        read2.store(1, Relaxed);
        drop(pinned);
        c
    });
    while read.load(Relaxed) == 0 {
        core::hint::spin_loop();
    }
    // Relaxed: the claim's disappearance is the signal; the gating scan's Acquire is what
    // must order the member's reads before the write below.
    let claims = &s.consumer_entry(member).claims;
    while claims
        .iter()
        .any(|w| w.load(core::sync::atomic::Ordering::Relaxed) != 0)
    {
        core::hint::spin_loop();
    }
    // The producer may still see the cursor or the claim as they were (no order yet): it
    // retries, as every producer does after `Full`.
    loop {
        match p.try_publish(&msg(8)) {
            Ok(seq) => break assert_eq!(seq, 1),
            Err(ClaimError::Full { .. }) => core::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
    drop(reader.join().unwrap());
}

/// The group's stream ends for a member only when nothing is left anywhere: while another
/// member holds a message after the close, a drained member reads `Empty`, not `Closed`; if
/// that member dies, its message comes back (flagged) before the end.
#[test]
fn the_end_waits_for_messages_other_members_hold() {
    let s = seg(8);
    let mut p = grouped(&s, "q", 0..0);
    let [mut a, mut b] = members(&s, "q");
    publish_msgs(&mut p, 0..3);
    p.close();
    let held = b.try_hold().unwrap();
    assert_eq!(take(&mut a).unwrap().0, 1);
    assert_eq!(take(&mut a).unwrap().0, 2);
    assert_eq!(
        take(&mut a),
        Err(ReadError::Empty),
        "b still holds message 0"
    );
    b.release(held).unwrap();
    assert_eq!(take(&mut a), Err(ReadError::Closed));
    // Again, with the holder dying.
    let s = seg(8);
    let mut p = grouped(&s, "q", 0..0);
    let [mut a, mut b] = members(&s, "q");
    p.try_publish(&msg(0)).unwrap();
    p.close();
    let _held = b.try_hold().unwrap();
    assert_eq!(take(&mut a), Err(ReadError::Empty), "b holds message 0");
    let index = b.index();
    core::mem::forget(b);
    // SAFETY: the member was forgotten: it is inside no call and holds no pin.
    assert!(unsafe { p.reclaim(index, id(3)) }.unwrap().was_registered);
    assert_eq!(
        take(&mut a).unwrap(),
        (0, 0, true),
        "redelivered after the close"
    );
    assert_eq!(take(&mut a), Err(ReadError::Closed));
}
