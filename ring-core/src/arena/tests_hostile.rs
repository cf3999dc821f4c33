//! Hostile-region tests: each corrupt header word fails `attach` with its own error, and a peer
//! scribbling over the metadata between calls causes errors, never a panic or a bad range.

extern crate std;

use super::layout::{
    HEADER_WORDS, H_ARENA_BYTES, H_ARENA_OFF, H_BITMAP_OFF, H_BYTE_CEILING, H_ENTRIES_OFF,
    H_GRANULE, H_MAGIC, H_MAX_LIVE, H_OWNERS_OFF, H_RESERVED, H_TOTAL_WORDS, H_VERSION,
};
use super::tests::{config, region};
use super::*;
use ring_oracles::seeds::PlainXorShift as XorShift;
use std::vec::Vec;

#[test]
fn attach_rejects_each_corrupt_header_field() {
    use HeaderField as F;
    let words = region(4096, 16);
    assert!(Allocator::init(&words, config(4096, 16, 1000)).is_ok());
    let at = |i: usize| words[i].load(Ordering::Relaxed);
    let total = at(H_TOTAL_WORDS);
    let mut cases: Vec<(usize, u64, HeaderField, u64)> = std::vec![
        (H_MAGIC, 0, F::Magic, 0),
        (H_MAGIC, MAGIC ^ 1, F::Magic, MAGIC ^ 1),
        (H_VERSION, VERSION + 1, F::Version, VERSION + 1),
        (H_GRANULE, 128, F::Granule, 128),
        (H_ARENA_BYTES, 0, F::ArenaBytes, 0),
        (H_ARENA_BYTES, 4095, F::ArenaBytes, 4095),
        (H_ARENA_BYTES, u64::MAX - 63, F::ArenaBytes, u64::MAX - 63),
        // A plausible but different size is caught by the derived length.
        (H_ARENA_BYTES, 8192, F::TotalWords, total),
        (H_MAX_LIVE, 0, F::MaxLive, 0),
        (
            H_MAX_LIVE,
            u64::from(MAX_LIVE_LIMIT) + 1,
            F::MaxLive,
            u64::from(MAX_LIVE_LIMIT) + 1
        ),
        (H_MAX_LIVE, 1 << 40, F::MaxLive, 1 << 40),
        (H_MAX_LIVE, 32, F::OwnersOffset, at(H_OWNERS_OFF)),
        (
            H_ENTRIES_OFF,
            at(H_ENTRIES_OFF) + 1,
            F::EntriesOffset,
            at(H_ENTRIES_OFF) + 1
        ),
        (H_OWNERS_OFF, 0, F::OwnersOffset, 0),
        (H_BITMAP_OFF, u64::MAX, F::BitmapOffset, u64::MAX),
        (
            H_ARENA_OFF,
            at(H_ARENA_OFF) - 16,
            F::ArenaOffset,
            at(H_ARENA_OFF) - 16
        ),
        (H_TOTAL_WORDS, total + 16, F::TotalWords, total + 16),
    ];
    for i in H_RESERVED..HEADER_WORDS {
        cases.push((i, 1 << i, F::Reserved, 1 << i));
    }
    for (word, value, field, found) in cases {
        let good = at(word);
        words[word].store(value, Ordering::Relaxed);
        let err = Allocator::attach(&words).unwrap_err();
        assert_eq!(
            err,
            AllocError::BadHeader { field, found },
            "word {word} = {value:#x}"
        );
        assert!(!std::format!("{err}").is_empty());
        words[word].store(good, Ordering::Relaxed);
        assert!(Allocator::attach(&words).is_ok(), "restored word {word}");
    }
    // The byte ceiling is policy, not geometry: any value attaches and is enforced.
    words[H_BYTE_CEILING].store(5, Ordering::Relaxed);
    let mut al = Allocator::attach(&words).unwrap();
    assert_eq!(al.byte_ceiling(), 5);
    assert!(matches!(
        al.alloc(6, 0, 0),
        Err(AllocError::ByteCeiling { ceiling: 5, .. })
    ));
}

#[test]
fn attach_rejects_short_regions() {
    let words = region(4096, 16);
    assert!(Allocator::init(&words, config(4096, 16, 4096)).is_ok());
    let n = words.len();
    assert_eq!(
        Allocator::attach(&words[..n - 1]).unwrap_err(),
        AllocError::RegionTooSmall {
            needed: n as u64 * 8,
            actual: (n as u64 - 1) * 8
        }
    );
    assert_eq!(
        Allocator::attach(&words[..3]).unwrap_err(),
        AllocError::RegionTooSmall {
            needed: 128,
            actual: 24
        }
    );
    assert!(Allocator::attach(&[]).is_err());
}

#[test]
fn scribbling_peer_causes_errors_never_panics() {
    let steps = if cfg!(miri) { 400 } else { 200_000 };
    let arena = 2048;
    let words = region(arena, 8);
    let mut al = Allocator::init(&words, config(arena, 8, 1500)).unwrap();
    let metadata = al.geometry.arena_off as usize;
    let mut rng = XorShift::new(0x5eed_5c1b_b1e5);
    let mut handles: Vec<u64> = Vec::new();
    let (mut ok, mut refused) = (0u64, 0u64);
    for step in 0..steps {
        match rng.below(10) {
            0 => {
                // The peer: a random metadata word gets a random, small or flipped value.
                let i = rng.below(metadata as u64) as usize;
                let old = words[i].load(Ordering::Relaxed);
                let v = match rng.below(4) {
                    0 => rng.next(),
                    1 => rng.below(64),
                    2 => old ^ (1 << rng.below(64)),
                    _ => u64::MAX,
                };
                words[i].store(v, Ordering::Relaxed);
            }
            1..=4 => match al.alloc(1 + rng.below(400), rng.below(66) as u16, step) {
                Ok(a) => {
                    assert!(
                        a.offset % GRANULE_BYTES == 0 && a.offset + a.len <= arena,
                        "{a:?}"
                    );
                    let mut w = al.writer(&a).unwrap();
                    w.write(&[0x5a; 8]).ok();
                    assert!(w.write(&[0; 512]).is_err());
                    handles.push(a.handle);
                    ok += 1;
                }
                Err(_) => refused += 1,
            },
            5..=6 => {
                let h = if handles.is_empty() {
                    rng.next()
                } else {
                    handles.swap_remove(0)
                };
                let _ = al.free(h, rng.below(66) as u16);
            }
            7 => {
                let _ = al.free_all_of(rng.below(66) as u16);
            }
            8 => {
                if let Ok(r) = Allocator::attach(&words) {
                    r.leak_report(step, |l| assert!(l.offset + l.len <= arena));
                    let _ = r.stats();
                }
            }
            _ => {
                let h = handles.last().copied().unwrap_or_else(|| rng.next());
                if let Ok(a) = al.lookup(h) {
                    assert!(a.offset + a.len <= arena);
                    let mut buf = [0u8; 64];
                    let _ = al.read(&a, &mut buf);
                }
            }
        }
    }
    assert!(
        ok > 0 && refused > 0,
        "both paths exercised: {ok} ok, {refused} refused"
    );
}
