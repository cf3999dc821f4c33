//! Randomized test against a simple model: a list of live allocations, a granule occupancy
//! vector, per-entry generations and per-owner counters. Every result of the allocator is
//! predicted (or, for placement, checked against the model's free space) and the stats and the
//! leak report are compared with the model regularly.

extern crate std;

use super::tests::{config, pattern, region};
use super::*;
use std::vec;
use std::vec::Vec;

/// Marsaglia's xorshift64: a tiny deterministic PRNG (ring-core takes no test dependencies).
pub(super) struct XorShift(u64);

impl XorShift {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform enough in `0..n` for tests (`n > 0`).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Live {
    a: Allocation,
    owner: u16,
    stamp: u64,
}

struct Model {
    live: Vec<Live>,
    used: Vec<bool>,
    /// Per entry: (generation, live).
    entries: Vec<(u32, bool)>,
    global: Stats,
    owners: Vec<Stats>,
    ceiling: u64,
}

impl Model {
    fn largest_gap(&self) -> u64 {
        let (mut best, mut run) = (0, 0);
        for &u in &self.used {
            run = if u { 0 } else { run + 1 };
            best = best.max(run);
        }
        best
    }

    fn count(&mut self, owner: u16, f: impl Fn(&mut Stats)) {
        f(&mut self.global);
        f(&mut self.owners[owner as usize]);
    }

    fn on_alloc(&mut self, owner: u16, len: u64) {
        self.count(owner, |s| {
            s.live += 1;
            s.live_bytes += len;
            s.peak_live = s.peak_live.max(s.live);
            s.peak_bytes = s.peak_bytes.max(s.live_bytes);
            s.allocs += 1;
        });
    }

    fn remove(&mut self, i: usize) -> Live {
        let l = self.live.swap_remove(i);
        let g = (l.a.offset / GRANULE_BYTES) as usize;
        for u in &mut self.used[g..g + l.a.len.div_ceil(GRANULE_BYTES) as usize] {
            assert!(*u);
            *u = false;
        }
        self.entries[l.a.handle as u32 as usize].1 = false;
        let len = l.a.len;
        self.count(l.owner, |s| {
            s.live -= 1;
            s.live_bytes -= len;
            s.frees += 1;
        });
        l
    }
}

fn run_model(seed: u64, steps: u64) {
    const OWNERS: u16 = 4;
    let (arena, max_live, ceiling) = (4096, 24, 3000);
    let words = region(arena, max_live);
    let mut al = Allocator::init(&words, config(arena, max_live, ceiling)).unwrap();
    let mut m = Model {
        live: Vec::new(),
        used: vec![false; (arena / GRANULE_BYTES) as usize],
        entries: vec![(0, false); max_live as usize],
        global: Stats::default(),
        owners: vec![Stats::default(); MAX_OWNERS as usize],
        ceiling,
    };
    let mut dead: Vec<u64> = Vec::new();
    let mut rng = XorShift::new(seed);
    for step in 0..steps {
        match rng.below(12) {
            0..=4 => {
                let max = if rng.below(4) == 0 { 1500 } else { 200 };
                let len = 1 + rng.below(max);
                let owner = rng.below(u64::from(OWNERS)) as u16;
                let live_bytes: u64 = m.live.iter().map(|l| l.a.len).sum();
                let need = len.div_ceil(GRANULE_BYTES);
                let got = al.alloc(len, owner, step);
                if m.live.len() == max_live as usize {
                    assert_eq!(got, Err(AllocError::LiveCeiling { max_live }));
                    m.count(owner, |s| s.ceiling_hits += 1);
                } else if live_bytes + len > m.ceiling {
                    let want = AllocError::ByteCeiling {
                        ceiling,
                        live_bytes,
                        requested: len,
                    };
                    assert_eq!(got, Err(want));
                    m.count(owner, |s| s.ceiling_hits += 1);
                } else if m.largest_gap() < need {
                    let largest_free = m.largest_gap() * GRANULE_BYTES;
                    assert_eq!(
                        got,
                        Err(AllocError::OutOfSpace {
                            requested: len,
                            largest_free
                        })
                    );
                    m.count(owner, |s| s.out_of_space += 1);
                } else {
                    let a = got.unwrap_or_else(|e| panic!("step {step}: {e} (model has room)"));
                    assert_eq!(a.len, len);
                    let g = (a.offset / GRANULE_BYTES) as usize;
                    for u in &mut m.used[g..g + need as usize] {
                        assert!(!*u, "step {step}: {a:?} overlaps a live allocation");
                        *u = true;
                    }
                    let e = &mut m.entries[a.handle as u32 as usize];
                    assert!(!e.1 && (a.handle >> 32) as u32 != e.0, "fresh generation");
                    *e = ((a.handle >> 32) as u32, true);
                    let data: Vec<u8> = (0..len as usize).map(|i| pattern(a.handle, i)).collect();
                    al.writer(&a).unwrap().write(&data).unwrap();
                    m.on_alloc(owner, len);
                    m.live.push(Live {
                        a,
                        owner,
                        stamp: step,
                    });
                }
            }
            5..=6 if !m.live.is_empty() => {
                let i = rng.below(m.live.len() as u64) as usize;
                let (h, owner) = (m.live[i].a.handle, m.live[i].owner);
                if rng.below(5) == 0 {
                    let wrong = (owner + 1) % OWNERS;
                    let want = AllocError::ForeignFree {
                        owner: wrong,
                        actual: owner,
                    };
                    assert_eq!(al.free(h, wrong), Err(want));
                    m.count(wrong, |s| s.bad_frees += 1);
                } else {
                    let l = m.remove(i);
                    assert_eq!(al.free(h, owner), Ok(l.a.len));
                    dead.push(h);
                }
            }
            7 if !dead.is_empty() => {
                let h = dead[rng.below(dead.len() as u64) as usize];
                let owner = rng.below(u64::from(OWNERS)) as u16;
                let (gen, live) = m.entries[h as u32 as usize];
                let want = if !live && gen == (h >> 32) as u32 {
                    AllocError::DoubleFree { handle: h }
                } else {
                    AllocError::InvalidHandle { handle: h }
                };
                assert_eq!(al.free(h, owner), Err(want));
                m.count(owner, |s| s.bad_frees += 1);
            }
            8 if rng.below(4) == 0 => {
                let owner = rng.below(u64::from(OWNERS)) as u16;
                let (mut count, mut bytes) = (0, 0);
                while let Some(i) = m.live.iter().position(|l| l.owner == owner) {
                    let l = m.remove(i);
                    dead.push(l.a.handle);
                    count += 1;
                    bytes += l.a.len;
                }
                assert_eq!(
                    al.free_all_of(owner),
                    Ok(Freed {
                        count,
                        bytes,
                        corrupt: 0
                    })
                );
            }
            9..=10 if !m.live.is_empty() => {
                let l = &m.live[rng.below(m.live.len() as u64) as usize];
                assert_eq!(al.lookup(l.a.handle), Ok(l.a));
                let mut buf = vec![0u8; l.a.len as usize];
                assert_eq!(al.read(&l.a, &mut buf), Ok(buf.len()));
                assert!(buf
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == pattern(l.a.handle, i)));
            }
            _ => {}
        }
        if step % 64 == 0 || step + 1 == steps {
            check(&al, &m, step);
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

fn check(al: &Allocator<'_>, m: &Model, now: u64) {
    assert_eq!(al.stats(), m.global, "global stats at step {now}");
    for o in 0..MAX_OWNERS {
        assert_eq!(
            al.owner_stats(o),
            Ok(m.owners[o as usize]),
            "owner {o} at step {now}"
        );
    }
    let mut want: Vec<Leak> = m
        .live
        .iter()
        .map(|l| Leak {
            owner: l.owner,
            handle: l.a.handle,
            offset: l.a.offset,
            len: l.a.len,
            age: now - l.stamp,
        })
        .collect();
    let mut got = Vec::new();
    let totals = al.leak_report(now, |l| got.push(l));
    want.sort_by_key(|l| l.handle);
    got.sort_by_key(|l| l.handle);
    assert_eq!(got, want, "leak report at step {now}");
    assert_eq!(totals.corrupt, 0);
}

#[test]
fn randomized_against_model() {
    let (seeds, steps) = if cfg!(miri) { (1, 300) } else { (16, 20_000) };
    for seed in 0..seeds {
        run_model(0x9e37_79b9_7f4a_7c15 ^ seed, steps);
    }
}
