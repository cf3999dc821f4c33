//! The one allocator model: what every call of ring-core's in-segment allocator
//! (`ring_core::arena`) must return, and what its accounting must say afterwards. Used by the
//! op-level state machine ([`machine`](crate::machine): the segment's allocator beside the
//! ring), the `allocator` fuzz oracle ([`allocator`](crate::allocator)) and ring-core's
//! randomized allocator test (`ring-core/tests/arena_model.rs`).
//!
//! It does not copy the placement policy (next fit with a rover that moves back on free): it
//! checks what any correct policy must do. An allocation lies inside the arena on a granule
//! boundary and overlaps no live one; `OutOfSpace` comes exactly when no free run is long
//! enough and names the longest one; the refusals come in the documented order (owner, zero
//! size, live ceiling, byte ceiling, space); handles are generation-tagged (a freed one is
//! `DoubleFree` until its entry is reused, then `InvalidHandle`); every counter of the global
//! and per-owner stats and every line of the leak report match; a live allocation reads back
//! the bytes written into it, a freed one is no longer found.

use crate::Outcome;
use ring_core::arena::{AllocError, Allocation, Allocator, Stats, GRANULE_BYTES, MAX_OWNERS};

/// A live allocation in the model.
#[derive(Clone, Debug)]
pub struct LiveAlloc {
    /// The allocation the real allocator returned (validated).
    pub alloc: Allocation,
    /// Owner.
    pub owner: u16,
    /// The clock value it was allocated at (the leak report's age counts from it).
    pub now: u64,
    /// Bytes written so far through the bounded writer (`None`: never written, unspecified).
    pub bytes: Vec<Option<u8>>,
}

/// One entry-table slot as handles reveal it.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    generation: u32,
    live: bool,
}

/// The allocator's model: the live set (in allocation order), the freed allocations, the
/// entry table's generations and the accounting.
#[derive(Clone, Debug)]
pub struct AllocModel {
    /// Arena granules.
    pub granules: u64,
    /// Live ceiling.
    pub max_live: u32,
    /// Byte ceiling.
    pub ceiling: u64,
    /// Live allocations, in allocation order.
    pub live: Vec<LiveAlloc>,
    /// Freed allocations, most recent last.
    pub freed: Vec<Allocation>,
    entries: Vec<Entry>,
    /// The global stats.
    pub global: Stats,
    /// The stats of each owner id below [`MAX_OWNERS`].
    pub owners: Vec<Stats>,
}

fn on_alloc(s: &mut Stats, len: u64) {
    s.live += 1;
    s.live_bytes += len;
    s.peak_live = s.peak_live.max(s.live);
    s.peak_bytes = s.peak_bytes.max(s.live_bytes);
    s.allocs += 1;
}

fn on_free(s: &mut Stats, len: u64) {
    s.live -= 1;
    s.live_bytes -= len;
    s.frees += 1;
}

fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// The granules `a` covers.
fn span(a: &Allocation) -> (u64, u64) {
    let first = a.offset / GRANULE_BYTES;
    (first, first + a.len.div_ceil(GRANULE_BYTES))
}

impl AllocModel {
    /// A freshly formatted allocator of `arena_bytes` (rounded up to granules), `max_live`
    /// entries and a byte ceiling of `ceiling`.
    pub fn new(arena_bytes: u64, max_live: u32, ceiling: u64) -> Self {
        Self {
            granules: arena_bytes.div_ceil(GRANULE_BYTES),
            max_live,
            ceiling,
            live: Vec::new(),
            freed: Vec::new(),
            entries: vec![Entry::default(); max_live as usize],
            global: Stats::default(),
            owners: vec![Stats::default(); usize::from(MAX_OWNERS)],
        }
    }

    /// Bytes live.
    pub fn live_bytes(&self) -> u64 {
        self.live.iter().map(|l| l.alloc.len).sum()
    }

    /// The longest run of granules no live allocation covers.
    pub fn largest_free(&self) -> u64 {
        let mut used = vec![false; self.granules as usize];
        for l in &self.live {
            let (first, end) = span(&l.alloc);
            used[first as usize..end as usize].fill(true);
        }
        let (mut best, mut run) = (0, 0);
        for u in used {
            run = if u { 0 } else { run + 1 };
            best = best.max(run);
        }
        best
    }

    fn ceiling_hit(&mut self, owner: u16) {
        self.global.ceiling_hits += 1;
        self.owners[usize::from(owner)].ceiling_hits += 1;
    }

    /// What `alloc(len, owner, now)` must return, with its accounting applied. `got` is what
    /// the real allocator returned: the model does not choose a place, so when the call must
    /// succeed it checks `got`'s placement and handle and takes them.
    ///
    /// # Errors
    /// The property `got` breaks: a refusal although the model has room, a bad placement
    /// (unaligned, past the arena, over a live allocation), a handle whose entry is live or
    /// whose generation is not the entry's next one.
    pub fn alloc(
        &mut self,
        len: u64,
        owner: u16,
        now: u64,
        got: &Result<Allocation, AllocError>,
    ) -> Result<Result<Allocation, AllocError>, String> {
        if owner >= MAX_OWNERS {
            return Ok(Err(AllocError::BadOwner { owner }));
        }
        if len == 0 {
            return Ok(Err(AllocError::ZeroSize));
        }
        if self.live.len() as u32 >= self.max_live {
            self.ceiling_hit(owner);
            return Ok(Err(AllocError::LiveCeiling {
                max_live: self.max_live,
            }));
        }
        let live_bytes = self.live_bytes();
        if live_bytes + len > self.ceiling {
            self.ceiling_hit(owner);
            return Ok(Err(AllocError::ByteCeiling {
                ceiling: self.ceiling,
                live_bytes,
                requested: len,
            }));
        }
        let need = len.div_ceil(GRANULE_BYTES);
        let largest = self.largest_free();
        if largest < need {
            self.global.out_of_space += 1;
            self.owners[usize::from(owner)].out_of_space += 1;
            return Ok(Err(AllocError::OutOfSpace {
                requested: len,
                largest_free: largest * GRANULE_BYTES,
            }));
        }
        let a = match got {
            Ok(a) => *a,
            Err(e) => {
                return Err(format!(
                    "alloc({len}, {owner}) refused ({e:?}) although a free run of {largest} granules exists ({need} needed)"
                ))
            }
        };
        self.place(&a, len)?;
        on_alloc(&mut self.global, len);
        on_alloc(&mut self.owners[usize::from(owner)], len);
        self.live.push(LiveAlloc {
            alloc: a,
            owner,
            now,
            bytes: vec![None; len as usize],
        });
        Ok(Ok(a))
    }

    /// Checks that `a`, returned for `len` bytes, is a valid place and a fresh handle, and
    /// records its entry's new generation.
    fn place(&mut self, a: &Allocation, len: u64) -> Outcome {
        ensure!(a.len == len, "allocation {a:?} for {len} bytes asked");
        ensure!(
            a.offset % GRANULE_BYTES == 0,
            "offset of {a:?} is not granule-aligned"
        );
        let (first, end) = span(a);
        ensure!(
            end <= self.granules,
            "granules {first}..{end} of {a:?} pass the arena ({})",
            self.granules
        );
        for l in &self.live {
            let (f2, e2) = span(&l.alloc);
            ensure!(
                end <= f2 || e2 <= first,
                "granules {first}..{end} of {a:?} overlap live {f2}..{e2}"
            );
        }
        let (idx, generation) = ((a.handle & 0xffff_ffff) as usize, (a.handle >> 32) as u32);
        let Some(entry) = self.entries.get_mut(idx) else {
            return Err(format!(
                "handle {:#x} names entry {idx} of {}",
                a.handle, self.max_live
            ));
        };
        ensure!(!entry.live, "handle {:#x} reuses a live entry", a.handle);
        ensure!(
            generation == next_generation(entry.generation),
            "entry {idx} went from generation {} to {generation}",
            entry.generation
        );
        *entry = Entry {
            generation,
            live: true,
        };
        Ok(())
    }

    fn release(&mut self, i: usize) -> LiveAlloc {
        let l = self.live.remove(i);
        on_free(&mut self.global, l.alloc.len);
        on_free(&mut self.owners[usize::from(l.owner)], l.alloc.len);
        self.entries[(l.alloc.handle & 0xffff_ffff) as usize].live = false;
        self.freed.push(l.alloc);
        l
    }

    /// What `free(handle, owner)` must return, with its accounting applied.
    pub fn free(&mut self, handle: u64, owner: u16) -> Result<u64, AllocError> {
        if owner >= MAX_OWNERS {
            return Err(AllocError::BadOwner { owner });
        }
        let (idx, generation) = ((handle & 0xffff_ffff) as usize, (handle >> 32) as u32);
        let result = match self.entries.get(idx) {
            None => Err(AllocError::InvalidHandle { handle }),
            Some(e) if e.live && e.generation == generation => {
                let i = self
                    .live
                    .iter()
                    .position(|l| l.alloc.handle == handle)
                    .expect("a live entry has a live allocation in the model");
                let actual = self.live[i].owner;
                if actual != owner {
                    Err(AllocError::ForeignFree { owner, actual })
                } else {
                    Ok(self.release(i).alloc.len)
                }
            }
            Some(e) if !e.live && e.generation == generation && generation != 0 => {
                Err(AllocError::DoubleFree { handle })
            }
            Some(_) => Err(AllocError::InvalidHandle { handle }),
        };
        if result.is_err() {
            self.global.bad_frees += 1;
            self.owners[usize::from(owner)].bad_frees += 1;
        }
        result
    }

    /// What `free_all_of(owner)` must return, `(count, bytes)` of the freed allocations, with
    /// its accounting applied.
    pub fn free_all_of(&mut self, owner: u16) -> Result<(u64, u64), AllocError> {
        if owner >= MAX_OWNERS {
            return Err(AllocError::BadOwner { owner });
        }
        let (mut count, mut bytes) = (0, 0);
        while let Some(i) = self.live.iter().position(|l| l.owner == owner) {
            bytes += self.release(i).alloc.len;
            count += 1;
        }
        Ok((count, bytes))
    }

    /// Records a bounded-writer `write` of `data` that live allocation `i`'s writer accepted
    /// at `pos`; returns the writer's position after it. A non-empty write zero-pads the rest
    /// of the word it ends in (documented).
    pub fn wrote(&mut self, i: usize, pos: u64, data: &[u8]) -> u64 {
        let l = &mut self.live[i];
        let (start, end) = (pos as usize, pos as usize + data.len());
        for (b, d) in l.bytes[start..end].iter_mut().zip(data) {
            *b = Some(*d);
        }
        if !data.is_empty() {
            let pad_end = (end.div_ceil(8) * 8).min(l.bytes.len());
            l.bytes[end..pad_end].fill(Some(0));
        }
        end as u64
    }

    /// What a bounded writer at `pos` of live allocation `i` must return for a write of `n`
    /// bytes: `Overflow` past the reservation.
    pub fn write_refusal(&self, i: usize, pos: u64, n: u64) -> Result<(), AllocError> {
        let reserved = self.live[i].alloc.len;
        if pos + n <= reserved {
            Ok(())
        } else {
            Err(AllocError::Overflow {
                reserved,
                attempted: pos + n,
            })
        }
    }

    /// The stats, every owner's stats and the leak report (at clock `now`, no earlier than
    /// any allocation's) agree with the model.
    ///
    /// # Errors
    /// The first disagreement.
    pub fn check(&self, al: &Allocator<'_>, now: u64) -> Outcome {
        ensure!(
            al.stats() == self.global,
            "stats {:?}, model {:?}",
            al.stats(),
            self.global
        );
        for (o, want) in self.owners.iter().enumerate() {
            let got = al.owner_stats(o as u16);
            ensure!(got == Ok(*want), "owner {o} stats {got:?}, model {want:?}");
        }
        ensure!(
            al.owner_stats(MAX_OWNERS) == Err(AllocError::BadOwner { owner: MAX_OWNERS }),
            "owner_stats past the table"
        );
        let mut seen = Vec::new();
        let totals = al.leak_report(now, |leak| seen.push(leak));
        ensure!(
            (totals.count, totals.bytes, totals.corrupt)
                == (self.live.len() as u64, self.live_bytes(), 0),
            "leak totals {totals:?}, model {} live, {} bytes",
            self.live.len(),
            self.live_bytes()
        );
        ensure!(
            seen.len() == self.live.len(),
            "the leak report lists {} allocations, model {}",
            seen.len(),
            self.live.len()
        );
        for leak in &seen {
            let Some(l) = self.live.iter().find(|l| l.alloc.handle == leak.handle) else {
                return Err(format!("leak report names {leak:?}, not live in the model"));
            };
            ensure!(
                (leak.owner, leak.offset, leak.len, leak.age)
                    == (l.owner, l.alloc.offset, l.alloc.len, now - l.now),
                "leak report {leak:?}, model {l:?}"
            );
        }
        Ok(())
    }

    /// Every live allocation reads back what was written ([`read_back`]) and every freed one
    /// that is not live again is no longer found.
    ///
    /// # Errors
    /// The first allocation that does not.
    pub fn check_contents(&self, al: &Allocator<'_>) -> Outcome {
        for l in &self.live {
            read_back(al, l)?;
        }
        for a in &self.freed {
            if !self.live.iter().any(|l| l.alloc.handle == a.handle) {
                let got = al.lookup(a.handle);
                ensure!(
                    got == Err(AllocError::InvalidHandle { handle: a.handle }),
                    "lookup of freed handle {:#x}: {got:?}",
                    a.handle
                );
            }
        }
        Ok(())
    }
}

/// `read`, `read_words` and `lookup` of live allocation `l` return what was written.
///
/// # Errors
/// The first byte or call that does not.
pub fn read_back(al: &Allocator<'_>, l: &LiveAlloc) -> Outcome {
    let mut out = vec![0u8; l.alloc.len as usize + 5];
    let n = al
        .read(&l.alloc, &mut out)
        .map_err(|e| format!("read of live {:?}: {e}", l.alloc))?;
    ensure!(n as u64 == l.alloc.len, "read {n} bytes of {}", l.alloc.len);
    for (j, want) in l.bytes.iter().enumerate() {
        if let Some(w) = want {
            ensure!(
                out[j] == *w,
                "byte {j} of {:?} reads {:#x}, wrote {w:#x}",
                l.alloc,
                out[j]
            );
        }
    }
    let mut ws = vec![0u64; l.alloc.len.div_ceil(8) as usize];
    let nw = al
        .read_words(&l.alloc, &mut ws)
        .map_err(|e| format!("read_words of live {:?}: {e}", l.alloc))?;
    ensure!(nw == ws.len(), "read_words returned {nw} of {}", ws.len());
    let bytes: Vec<u8> = ws.iter().flat_map(|w| w.to_le_bytes()).collect();
    ensure!(bytes[..n] == out[..n], "read_words and read disagree");
    ensure!(
        al.lookup(l.alloc.handle) == Ok(l.alloc),
        "lookup of live {:?}",
        l.alloc
    );
    Ok(())
}
