//! Unit tests: ceilings, accounting, leak report, bad frees, generations, reclaim, the bounded
//! writer, fragmentation, and readers racing the mutator.

extern crate std;

use super::layout::{ENTRIES_OFF, E_FIRST, E_LEN, E_META, STATS_OFF};
use super::*;
use crate::sync::new_u64;
use std::vec::Vec;

pub(super) fn region(arena_bytes: u64, max_live: u32) -> Vec<AtomicU64> {
    let words = region_len(arena_bytes, max_live).expect("valid test geometry") / 8;
    (0..words).map(|_| new_u64(0)).collect()
}

pub(super) fn config(arena_bytes: u64, max_live: u32, byte_ceiling: u64) -> AllocConfig {
    AllocConfig {
        arena_bytes,
        max_live,
        byte_ceiling,
    }
}

/// The byte pattern tests write into allocation `tag`.
pub(super) fn pattern(tag: u64, i: usize) -> u8 {
    (tag.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8
}

fn fill(alloc: &mut Allocator<'_>, a: &Allocation, tag: u64) {
    let data: Vec<u8> = (0..a.len as usize).map(|i| pattern(tag, i)).collect();
    alloc.writer(a).unwrap().write(&data).unwrap();
}

fn contents(alloc: &Allocator<'_>, a: &Allocation) -> Vec<u8> {
    let mut out = std::vec![0u8; a.len as usize];
    assert_eq!(alloc.read(a, &mut out).unwrap(), a.len as usize);
    out
}

#[test]
fn live_ceiling_is_enforced_and_counted() {
    let words = region(4096, 4);
    let mut al = Allocator::init(&words, config(4096, 4, u64::MAX)).unwrap();
    let held: Vec<_> = (0..4).map(|i| al.alloc(10, 1, i).unwrap()).collect();
    assert_eq!(
        al.alloc(10, 1, 9),
        Err(AllocError::LiveCeiling { max_live: 4 })
    );
    assert_eq!(
        al.alloc(10, 2, 9),
        Err(AllocError::LiveCeiling { max_live: 4 })
    );
    assert_eq!(al.stats().ceiling_hits, 2);
    assert_eq!(al.owner_stats(1).unwrap().ceiling_hits, 1);
    assert_eq!(al.owner_stats(2).unwrap().ceiling_hits, 1);
    al.free(held[2].handle, 1).unwrap();
    al.alloc(10, 2, 10).unwrap();
    assert_eq!(al.stats().live, 4);
    assert_eq!(al.stats().peak_live, 4);
}

#[test]
fn byte_ceiling_is_enforced_and_counted() {
    let words = region(4096, 16);
    let mut al = Allocator::init(&words, config(4096, 16, 300)).unwrap();
    al.alloc(200, 0, 0).unwrap();
    assert_eq!(
        al.alloc(101, 3, 0),
        Err(AllocError::ByteCeiling {
            ceiling: 300,
            live_bytes: 200,
            requested: 101
        })
    );
    assert_eq!(
        al.alloc(u64::MAX, 3, 0),
        Err(AllocError::ByteCeiling {
            ceiling: 300,
            live_bytes: 200,
            requested: u64::MAX
        })
    );
    al.alloc(100, 3, 0).unwrap();
    assert_eq!((al.stats().ceiling_hits, al.stats().live_bytes), (2, 300));
    assert_eq!(al.owner_stats(3).unwrap().ceiling_hits, 2);
    assert_eq!(al.owner_stats(0).unwrap().ceiling_hits, 0);
}

#[test]
fn argument_errors() {
    let words = region(1024, 4);
    let mut al = Allocator::init(&words, config(1024, 4, 1024)).unwrap();
    assert_eq!(al.alloc(0, 0, 0), Err(AllocError::ZeroSize));
    assert_eq!(
        al.alloc(1, MAX_OWNERS, 0),
        Err(AllocError::BadOwner { owner: MAX_OWNERS })
    );
    assert_eq!(
        al.free(1 << 32, MAX_OWNERS),
        Err(AllocError::BadOwner { owner: MAX_OWNERS })
    );
    assert_eq!(
        al.free_all_of(u16::MAX),
        Err(AllocError::BadOwner { owner: u16::MAX })
    );
    assert_eq!(al.owner_stats(64), Err(AllocError::BadOwner { owner: 64 }));
    assert_eq!(
        Allocator::init(&words, config(0, 4, 1)).unwrap_err(),
        AllocError::BadConfig
    );
    assert_eq!(
        Allocator::init(&words, config(64, 0, 1)).unwrap_err(),
        AllocError::BadConfig
    );
    let small = region(64, 1);
    assert!(matches!(
        Allocator::init(&small, config(1024, 4, 1)),
        Err(AllocError::RegionTooSmall { .. })
    ));
    assert_eq!(
        al.stats(),
        Stats::default(),
        "refused arguments count nowhere"
    );
}

#[test]
fn accounting_per_owner() {
    let words = region(8192, 32);
    let mut al = Allocator::init(&words, config(8192, 32, 8192)).unwrap();
    let a = al.alloc(100, 1, 0).unwrap();
    let b = al.alloc(50, 1, 0).unwrap();
    let c = al.alloc(70, 2, 0).unwrap();
    al.free(a.handle, 1).unwrap();
    let d = al.alloc(10, 1, 0).unwrap();
    let one = al.owner_stats(1).unwrap();
    assert_eq!(
        one,
        Stats {
            live: 2,
            live_bytes: 60,
            peak_live: 2,
            peak_bytes: 150,
            allocs: 3,
            frees: 1,
            ..Stats::default()
        }
    );
    let two = al.owner_stats(2).unwrap();
    assert_eq!(
        (
            two.live,
            two.live_bytes,
            two.allocs,
            two.frees,
            two.peak_bytes
        ),
        (1, 70, 1, 0, 70)
    );
    let all = al.stats();
    assert_eq!(
        (all.live, all.live_bytes, all.peak_live, all.peak_bytes),
        (3, 130, 3, 220)
    );
    assert_eq!((all.allocs, all.frees), (4, 1));
    for (h, o) in [(b.handle, 1), (c.handle, 2), (d.handle, 1)] {
        al.free(h, o).unwrap();
    }
    assert_eq!(
        (al.stats().live, al.stats().live_bytes),
        (0, 0),
        "back to baseline"
    );
    // A reader attached to the same words sees the same counters.
    assert_eq!(
        Allocator::attach(&words)
            .unwrap()
            .owner_stats(1)
            .unwrap()
            .frees,
        3
    );
}

#[test]
fn leak_report_names_every_live_allocation() {
    let words = region(8192, 16);
    let mut al = Allocator::init(&words, config(8192, 16, 8192)).unwrap();
    let mut expected = Vec::new();
    for (i, (len, owner)) in [(10u64, 4u16), (300, 5), (64, 4), (1, 63)]
        .into_iter()
        .enumerate()
    {
        let a = al.alloc(len, owner, 100 + i as u64).unwrap();
        expected.push(Leak {
            owner,
            handle: a.handle,
            offset: a.offset,
            len,
            age: 1000 - i as u64,
        });
    }
    let gone = al.alloc(7, 9, 0).unwrap();
    al.free(gone.handle, 9).unwrap();
    let mut seen = Vec::new();
    let totals = al.leak_report(1100, |l| seen.push(l));
    seen.sort_by_key(|l| l.offset);
    expected.sort_by_key(|l| l.offset);
    assert_eq!(seen, expected);
    assert_eq!(
        totals,
        LeakTotals {
            count: 4,
            bytes: 375,
            corrupt: 0
        }
    );
    // Ages saturate rather than wrap when the clock is behind the stamp.
    al.leak_report(0, |l| assert_eq!(l.age, 0));
}

#[test]
fn double_foreign_and_invalid_frees_are_refused_and_counted() {
    let words = region(1024, 4);
    let mut al = Allocator::init(&words, config(1024, 4, 1024)).unwrap();
    let a = al.alloc(10, 1, 0).unwrap();
    assert_eq!(
        al.free(a.handle, 2),
        Err(AllocError::ForeignFree {
            owner: 2,
            actual: 1
        })
    );
    assert_eq!(al.lookup(a.handle), Ok(a), "a foreign free frees nothing");
    assert_eq!(al.free(a.handle, 1), Ok(10));
    assert_eq!(
        al.free(a.handle, 1),
        Err(AllocError::DoubleFree { handle: a.handle })
    );
    for h in [0, 4, u64::MAX, a.handle + (1 << 32)] {
        assert_eq!(
            al.free(h, 1),
            Err(AllocError::InvalidHandle { handle: h }),
            "{h:#x}"
        );
    }
    assert_eq!(al.stats().bad_frees, 6);
    assert_eq!(al.owner_stats(1).unwrap().bad_frees, 5);
    assert_eq!(al.owner_stats(2).unwrap().bad_frees, 1);
    assert_eq!((al.stats().frees, al.stats().live), (1, 0));
}

#[test]
fn stale_handle_after_reuse_is_rejected() {
    let words = region(1024, 1);
    let mut al = Allocator::init(&words, config(1024, 1, 1024)).unwrap();
    let a = al.alloc(10, 1, 0).unwrap();
    al.free(a.handle, 1).unwrap();
    let b = al.alloc(20, 1, 0).unwrap();
    assert_eq!(a.handle as u32, b.handle as u32, "same entry reused");
    assert_ne!(a.handle, b.handle, "with a new generation");
    assert_eq!(
        al.lookup(a.handle),
        Err(AllocError::InvalidHandle { handle: a.handle })
    );
    assert_eq!(
        al.free(a.handle, 1),
        Err(AllocError::InvalidHandle { handle: a.handle })
    );
    assert!(al.writer(&a).is_err());
    assert_eq!(al.lookup(b.handle), Ok(b));
    assert_eq!(al.free(b.handle, 1), Ok(20));
}

#[test]
fn free_all_of_reclaims_exactly_one_owner() {
    let words = region(1024, 16);
    let mut al = Allocator::init(&words, config(1024, 16, 1024)).unwrap();
    let mine: Vec<_> = (0..5)
        .map(|i| al.alloc(64 * (i % 2 + 1), 3, 0).unwrap())
        .collect();
    let other = al.alloc(100, 4, 0).unwrap();
    assert_eq!(
        al.free_all_of(3),
        Ok(Freed {
            count: 5,
            bytes: 64 * 7,
            corrupt: 0
        })
    );
    assert_eq!(al.free_all_of(3), Ok(Freed::default()), "idempotent");
    for a in &mine {
        assert!(al.lookup(a.handle).is_err());
    }
    assert_eq!(al.lookup(other.handle), Ok(other));
    let s = al.owner_stats(3).unwrap();
    assert_eq!((s.live, s.live_bytes, s.frees), (0, 0, 5));
    // Their 7 granules are free again (and used first: the rover moved back to them), as are
    // the 7 after `other`'s two.
    assert_eq!(al.alloc(448, 5, 0).unwrap().offset, 0);
    assert_eq!(al.alloc(448, 5, 0).unwrap().offset, 576);
}

#[test]
fn bounded_writer_refuses_overflow_and_spares_the_neighbour() {
    let words = region(1024, 8);
    let mut al = Allocator::init(&words, config(1024, 8, 1024)).unwrap();
    let a = al.alloc(100, 0, 0).unwrap();
    let b = al.alloc(64, 0, 0).unwrap();
    assert_eq!(b.offset, 128, "b is a's neighbour");
    fill(&mut al, &b, 2);
    fill(&mut al, &a, 1);
    let before_b = contents(&al, &b);
    let mut w = al.writer(&a).unwrap();
    w.write(&[0xAA; 60]).unwrap();
    assert_eq!(
        w.write(&[0xBB; 50]),
        Err(AllocError::Overflow {
            reserved: 100,
            attempted: 110
        })
    );
    assert_eq!(w.position(), 60, "a refused write does not move the writer");
    w.write(&[0xCC; 40]).unwrap();
    assert_eq!(w.remaining(), 0);
    assert_eq!(
        w.write(&[0xDD]),
        Err(AllocError::Overflow {
            reserved: 100,
            attempted: 101
        })
    );
    assert!(w.write(&[]).is_ok());
    let got = contents(&al, &a);
    assert!(got[..60].iter().all(|&x| x == 0xAA) && got[60..].iter().all(|&x| x == 0xCC));
    assert_eq!(contents(&al, &b), before_b, "neighbour untouched");
    // The final partial word is zero-padded, and the rest of a's last granule untouched by the
    // refused writes.
    let mut tail = [0u64; 13];
    assert_eq!(al.read_words(&a, &mut tail), Ok(13));
    assert_eq!(
        tail[12],
        u64::from_le_bytes([0xCC, 0xCC, 0xCC, 0xCC, 0, 0, 0, 0])
    );
    // A forged allocation (longer than reserved) gets no writer.
    let forged = Allocation { len: 200, ..a };
    assert_eq!(
        al.writer(&forged).err(),
        Some(AllocError::InvalidHandle { handle: a.handle })
    );
    let forged = Allocation { offset: 128, ..a };
    assert!(al.writer(&forged).is_err());
}

#[test]
fn writer_handles_unaligned_appends() {
    let words = region(1024, 8);
    let mut al = Allocator::init(&words, config(1024, 8, 1024)).unwrap();
    let a = al.alloc(37, 0, 0).unwrap();
    let data: Vec<u8> = (0..37).map(|i| pattern(9, i)).collect();
    let mut w = al.writer(&a).unwrap();
    for chunk in data.chunks(3) {
        w.write(chunk).unwrap();
    }
    assert_eq!(contents(&al, &a), data);
    let mut short = [0u8; 5];
    assert_eq!(al.read(&a, &mut short), Ok(5));
    assert_eq!(short[..], data[..5]);
}

#[test]
fn fragmentation_reports_largest_free_run() {
    let words = region(640, 16);
    let mut al = Allocator::init(&words, config(640, 16, u64::MAX)).unwrap();
    let all: Vec<_> = (0..10).map(|_| al.alloc(64, 0, 0).unwrap()).collect();
    assert_eq!(
        al.alloc(1, 0, 0),
        Err(AllocError::OutOfSpace {
            requested: 1,
            largest_free: 0
        })
    );
    for a in all.iter().step_by(2) {
        al.free(a.handle, 0).unwrap();
    }
    assert_eq!(
        al.alloc(65, 1, 0),
        Err(AllocError::OutOfSpace {
            requested: 65,
            largest_free: 64
        })
    );
    assert_eq!(
        al.alloc(641, 1, 0),
        Err(AllocError::OutOfSpace {
            requested: 641,
            largest_free: 64
        })
    );
    assert_eq!(al.stats().out_of_space, 3);
    assert_eq!(al.owner_stats(1).unwrap().out_of_space, 2);
    assert!(al.alloc(64, 1, 0).is_ok(), "a one-granule hole still fits");
    al.free(all[1].handle, 0).unwrap();
    assert!(al.alloc(128, 1, 0).is_ok(), "two adjacent holes merge");
}

#[test]
fn next_fit_continues_after_the_last_allocation_and_wraps() {
    let words = region(256, 8);
    let mut al = Allocator::init(&words, config(256, 8, 256)).unwrap();
    let _a = al.alloc(64, 0, 0).unwrap();
    let b = al.alloc(64, 0, 0).unwrap();
    assert_eq!(b.offset, 64);
    let c = al.alloc(64, 0, 0).unwrap();
    assert_eq!(c.offset, 128, "continues after the last allocation");
    // Free the last block: the rover goes back to it (a run at the rover is not "before" it).
    al.free(c.handle, 0).unwrap();
    let d = al.alloc(128, 0, 0).unwrap();
    assert_eq!(d.offset, 128);
    al.free(b.handle, 0).unwrap();
    // The rover moved back to b's run (64), which fits 64 bytes: no wrap needed.
    assert_eq!(al.alloc(64, 0, 0).unwrap().offset, 64);
}

#[test]
fn a_freed_block_is_reused_before_the_cold_rest_of_the_arena() {
    let words = region(4096, 8);
    let mut al = Allocator::init(&words, config(4096, 8, 4096)).unwrap();
    // One block written, freed and written again (the side channel's echo): same bytes.
    let a = al.alloc(1000, 0, 0).unwrap();
    al.free(a.handle, 0).unwrap();
    assert_eq!(
        al.alloc(1000, 0, 0).unwrap().offset,
        a.offset,
        "nothing live: back to 0"
    );
    // Two blocks in turn, each freed after the next one is made: they alternate between two
    // places instead of walking the arena.
    let words = region(4096, 8);
    let mut al = Allocator::init(&words, config(4096, 8, 4096)).unwrap();
    let keep = al.alloc(64, 0, 0).unwrap();
    let mut prev = al.alloc(512, 0, 0).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let next = al.alloc(512, 0, 0).unwrap();
        al.free(prev.handle, 0).unwrap();
        seen.insert(next.offset);
        prev = next;
    }
    assert_eq!(seen.len(), 2, "two places, not a walk: {seen:?}");
    assert!(seen.iter().all(|&o| o < 64 + 2 * 512), "{seen:?}");
    assert_eq!(keep.offset, 0);
}

#[test]
fn an_empty_arena_starts_again_at_its_front() {
    let words = region(4096, 8);
    let mut al = Allocator::init(&words, config(4096, 8, 4096)).unwrap();
    let a = al.alloc(512, 0, 0).unwrap();
    let b = al.alloc(512, 0, 0).unwrap();
    let c = al.alloc(512, 0, 0).unwrap();
    al.free(a.handle, 0).unwrap();
    // 1 KiB does not fit a's hole: it goes after c, and the rover after it.
    let d = al.alloc(1024, 0, 0).unwrap();
    assert_eq!(d.offset, 1536);
    al.free(b.handle, 0).unwrap();
    al.free(c.handle, 0).unwrap();
    // The lowest run freed since d is b's (512); d's free empties the arena: back to 0.
    al.free(d.handle, 0).unwrap();
    assert_eq!(al.alloc(512, 0, 0).unwrap().offset, 0);
}

#[test]
fn reattach_recounts_the_ceilings() {
    let words = region(1024, 3);
    let mut al = Allocator::init(&words, config(1024, 3, 200)).unwrap();
    al.alloc(100, 0, 0).unwrap();
    al.alloc(50, 0, 0).unwrap();
    let mut again = Allocator::attach(&words).unwrap();
    assert_eq!(
        (again.max_live(), again.byte_ceiling(), again.arena_bytes()),
        (3, 200, 1024)
    );
    assert_eq!(
        again.alloc(51, 0, 0).unwrap_err(),
        AllocError::ByteCeiling {
            ceiling: 200,
            live_bytes: 150,
            requested: 51
        }
    );
    again.alloc(50, 0, 0).unwrap();
    assert_eq!(
        again.alloc(1, 0, 0),
        Err(AllocError::LiveCeiling { max_live: 3 })
    );
}

#[test]
fn corrupt_entries_are_refused_not_trusted() {
    let words = region(1024, 4);
    let mut al = Allocator::init(&words, config(1024, 4, 1024)).unwrap();
    let a = al.alloc(100, 1, 0).unwrap();
    let e = ENTRIES_OFF + 4 * (a.handle as u32 as usize);
    let good: Vec<u64> = (0..4)
        .map(|i| words[e + i].load(Ordering::Relaxed))
        .collect();
    let cases: [(usize, u64); 5] = [
        (E_META, good[0] | (7 << 48)),  // unknown state
        (E_META, good[0] | (99 << 32)), // owner out of range
        (E_FIRST, 16),                  // past the arena (16 granules)
        (E_FIRST, u64::MAX),            // overflowing range
        (E_LEN, 0),                     // zero length
    ];
    for (word, value) in cases {
        words[e + word].store(value, Ordering::Relaxed);
        assert!(
            matches!(al.lookup(a.handle), Err(AllocError::Corrupt { .. })),
            "{word} {value}"
        );
        assert!(matches!(
            al.free(a.handle, 1),
            Err(AllocError::Corrupt { .. })
        ));
        assert!(al.writer(&a).is_err());
        assert_eq!(
            al.leak_report(0, |_| panic!("corrupt entry reported"))
                .corrupt,
            1
        );
        assert_eq!(al.free_all_of(1).unwrap().corrupt, 1);
        words[e + word].store(good[word], Ordering::Relaxed);
    }
    // A live entry whose granules a peer marked free is not freed (it would free a stranger's).
    let bitmap = Allocator::attach(&words).unwrap().geometry.bitmap_off as usize;
    words[bitmap].store(0, Ordering::Relaxed);
    assert!(matches!(
        al.free(a.handle, 1),
        Err(AllocError::Corrupt { .. })
    ));
    words[bitmap].store(0b11, Ordering::Relaxed);
    assert_eq!(al.free(a.handle, 1), Ok(100));
    assert_eq!(
        words[STATS_OFF].load(Ordering::Relaxed),
        0,
        "live back to 0"
    );
}

#[test]
fn readers_never_see_bytes_of_a_later_allocation() {
    let rounds: u64 = if cfg!(miri) { 30 } else { 20_000 };
    let words = region(512, 4);
    let mut al = Allocator::init(&words, config(512, 4, 512)).unwrap();
    let published = new_u64(0);
    let done = new_u64(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..rounds {
                let a = al.alloc(40 + round % 200, 0, round).unwrap();
                fill(&mut al, &a, a.handle);
                // Release: pairs with the reader's Acquire, publishing the filled bytes.
                published.store(a.handle, Ordering::Release);
                al.free(a.handle, 0).unwrap();
            }
            // Release: ends the reader's loop (no data published).
            done.store(1, Ordering::Release);
        });
        s.spawn(|| {
            let reader = Allocator::attach(&words).unwrap();
            let mut buf = [0u8; 256];
            let mut checked = 0u64;
            // Acquire: pairs with the producer's final Release store.
            while done.load(Ordering::Acquire) == 0 {
                // Acquire: pairs with the producer's Release store of the handle.
                let h = published.load(Ordering::Acquire);
                let Ok(a) = reader.lookup(h) else { continue };
                if let Ok(n) = reader.read(&a, &mut buf) {
                    for (i, &x) in buf[..n].iter().enumerate() {
                        assert_eq!(x, pattern(h, i), "byte {i} of {h:#x}: a later allocation's");
                    }
                    checked += 1;
                }
            }
            std::println!("reader checked {checked} allocations");
        });
    });
}
