//! The allocator against the one allocator model (`ring_oracles::model::AllocModel`, shared
//! with the state machine and the `allocator` fuzz oracle): long pseudo-random sequences of
//! allocs (some past the ceilings or the free space), frees by the owner and by a wrong owner,
//! stale frees, reclaims of an owner and read-backs. Every result is predicted by the model
//! (placement checked against its free space: the policy is not modelled), and the stats, the
//! per-owner stats and the leak report are compared with it regularly.

use ring_core::arena::{region_len, AllocConfig, Allocator};
use ring_core::AtomicU64;
use ring_oracles::model::{read_back, AllocModel};
use ring_oracles::seeds::PlainXorShift;

/// The byte pattern written into allocation `tag`.
fn pattern(tag: u64, i: usize) -> u8 {
    (tag.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8
}

fn run_model(seed: u64, steps: u64) {
    const OWNERS: u16 = 4;
    let (arena, max_live, ceiling) = (4096, 24, 3000);
    let words: Vec<AtomicU64> = (0..region_len(arena, max_live).unwrap() / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    let config = AllocConfig {
        arena_bytes: arena,
        max_live,
        byte_ceiling: ceiling,
    };
    let mut al = Allocator::init(&words, config).unwrap();
    let mut m = AllocModel::new(arena, max_live, ceiling);
    let mut rng = PlainXorShift::new(seed);
    let fail = |step: u64, e: String| -> ! { panic!("seed {seed:#x} step {step}: {e}") };
    for step in 0..steps {
        match rng.below(12) {
            0..=4 => {
                let max = if rng.below(4) == 0 { 1500 } else { 200 };
                let len = 1 + rng.below(max);
                let owner = rng.below(u64::from(OWNERS)) as u16;
                let got = al.alloc(len, owner, step);
                let want = m
                    .alloc(len, owner, step, &got)
                    .unwrap_or_else(|e| fail(step, e));
                assert_eq!(got, want, "step {step}: alloc({len}, {owner})");
                if let Ok(a) = got {
                    let data: Vec<u8> = (0..len as usize).map(|i| pattern(a.handle, i)).collect();
                    al.writer(&a).unwrap().write(&data).unwrap();
                    m.wrote(m.live.len() - 1, 0, &data);
                }
            }
            5..=6 if !m.live.is_empty() => {
                let i = rng.below(m.live.len() as u64) as usize;
                let (h, owner) = (m.live[i].alloc.handle, m.live[i].owner);
                let owner = if rng.below(5) == 0 {
                    (owner + 1) % OWNERS
                } else {
                    owner
                };
                assert_eq!(al.free(h, owner), m.free(h, owner), "step {step}");
            }
            7 if !m.freed.is_empty() => {
                let h = m.freed[rng.below(m.freed.len() as u64) as usize].handle;
                let owner = rng.below(u64::from(OWNERS)) as u16;
                let want = m.free(h, owner);
                assert!(
                    want.is_err(),
                    "step {step}: a freed handle {h:#x} freed again"
                );
                assert_eq!(al.free(h, owner), want, "step {step}");
            }
            8 if rng.below(4) == 0 => {
                let owner = rng.below(u64::from(OWNERS)) as u16;
                let got = al.free_all_of(owner).map(|f| (f.count, f.bytes, f.corrupt));
                let want = m.free_all_of(owner).map(|(n, bytes)| (n, bytes, 0));
                assert_eq!(got, want, "step {step}: free_all_of({owner})");
            }
            9..=10 if !m.live.is_empty() => {
                let l = &m.live[rng.below(m.live.len() as u64) as usize];
                read_back(&al, l).unwrap_or_else(|e| fail(step, e));
            }
            _ => {}
        }
        if step % 64 == 0 || step + 1 == steps {
            m.check(&al, step).unwrap_or_else(|e| fail(step, e));
        }
    }
    if steps >= 5000 {
        let s = m.global;
        assert!(
            s.ceiling_hits > 0 && s.out_of_space > 0 && s.bad_frees > 0,
            "{s:?}"
        );
    }
}

#[test]
fn randomized_against_model() {
    let (seeds, steps) = if cfg!(miri) { (1, 300) } else { (16, 20_000) };
    for seed in 0..seeds {
        run_model(0x9e37_79b9_7f4a_7c15 ^ seed, steps);
    }
}
