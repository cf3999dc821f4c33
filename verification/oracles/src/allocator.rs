//! `allocator`: alloc/free/write/read sequences on the in-segment allocator, checked against a
//! model of its ceilings and accounting.
//!
//! The model does not copy the placement policy (next-fit); it checks what any correct policy
//! must do: an allocation lies inside the arena on a granule boundary and overlaps no live one;
//! `OutOfSpace` comes only when no free run is long enough and names the longest one; the
//! live and byte ceilings refuse exactly when they should, in the documented order; handles are
//! generation-tagged (stale ones are `DoubleFree` until their entry is reused, then
//! `InvalidHandle`); every counter of the global and per-owner stats and every line of the leak
//! report match. Each bounded-writer session snapshots the raw arena before and after: no byte
//! outside the allocation's words may change, and every other live allocation reads back what
//! was written into it.

use super::{displays, Outcome};
use arbitrary::Arbitrary;
use ring_core::arena::{region_len, AllocConfig, AllocError, Allocation, Allocator, Stats};
use ring_core::AtomicU64;

/// Most operations one input runs.
pub const MAX_OPS: usize = 256;
/// Word 9 of the region header: the arena's word offset (see `ring_core::arena`'s layout table).
const H_ARENA_OFF: usize = 9;
/// Owner ids with an accounting record.
const OWNERS: u16 = ring_core::arena::MAX_OWNERS;
/// Granule size.
const GRANULE: u64 = ring_core::arena::GRANULE_BYTES;

/// One allocator call.
#[derive(Arbitrary, Clone, Debug)]
pub enum AllocOp {
    /// `alloc(len % 700, owner % 66, now)` (owners 64 and 65 are out of range).
    Alloc {
        /// Length.
        len: u16,
        /// Owner.
        owner: u8,
        /// Clock value.
        now: u8,
    },
    /// `free` of a live allocation, by its owner or (`Some`) by another.
    Free {
        /// Which live allocation.
        pick: u8,
        /// Free as this owner instead.
        as_owner: Option<u8>,
    },
    /// `free` of a handle that was freed before.
    FreeStale {
        /// Which freed allocation.
        pick: u8,
    },
    /// `free` of an arbitrary handle.
    FreeRaw {
        /// The handle.
        handle: u64,
        /// Owner.
        owner: u8,
    },
    /// A bounded-writer session: one `write` per chunk.
    Write {
        /// Which live allocation.
        pick: u8,
        /// Chunk lengths.
        chunks: Vec<u8>,
        /// First byte value.
        fill: u8,
    },
    /// `read` and `read_words` of a live allocation.
    Read {
        /// Which live allocation.
        pick: u8,
    },
    /// `read`, `writer` and `lookup` of a freed allocation.
    ReadStale {
        /// Which freed allocation.
        pick: u8,
    },
    /// `free_all_of(owner % 66)`.
    FreeAllOf {
        /// Owner.
        owner: u8,
    },
    /// `Allocator::attach` again (a producer restart): the live count is recounted.
    Reattach,
    /// `lookup` of an arbitrary handle.
    Lookup {
        /// The handle.
        handle: u64,
    },
}

/// The `allocator` input.
#[derive(Arbitrary, Clone, Debug)]
pub struct AllocInput {
    /// Arena bytes: `1 + arena % 2048`.
    pub arena: u16,
    /// Live ceiling: `1 + max_live % 16`.
    pub max_live: u8,
    /// Byte ceiling (default: the arena size).
    pub byte_ceiling: Option<u16>,
    /// Calls, in order.
    pub ops: Vec<AllocOp>,
}

/// A live allocation in the model.
#[derive(Clone, Debug)]
struct Live {
    a: Allocation,
    owner: u16,
    now: u64,
    /// Bytes written so far by writer sessions (`None`: never written, content unspecified).
    bytes: Vec<Option<u8>>,
}

/// One entry-table slot as handles reveal it.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    generation: u32,
    live: bool,
}

#[derive(Default)]
struct Model {
    granules: u64,
    max_live: u32,
    ceiling: u64,
    live: Vec<Live>,
    freed: Vec<Allocation>,
    entries: Vec<Entry>,
    global: Stats,
    owners: Vec<Stats>,
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

impl Model {
    fn live_bytes(&self) -> u64 {
        self.live.iter().map(|l| l.a.len).sum()
    }

    /// The longest run of granules no live allocation covers.
    fn largest_free(&self) -> u64 {
        let mut used = vec![false; self.granules as usize];
        for l in &self.live {
            let first = l.a.offset / GRANULE;
            for g in first..first + l.a.len.div_ceil(GRANULE) {
                used[g as usize] = true;
            }
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

    fn bad_free(&mut self, owner: u16) {
        self.global.bad_frees += 1;
        self.owners[usize::from(owner)].bad_frees += 1;
    }

    fn release(&mut self, i: usize) -> Live {
        let l = self.live.swap_remove(i);
        on_free(&mut self.global, l.a.len);
        on_free(&mut self.owners[usize::from(l.owner)], l.a.len);
        self.entries[(l.a.handle & 0xffff_ffff) as usize].live = false;
        self.freed.push(l.a);
        l
    }

    /// What `free(handle, owner)` must return, with its accounting applied.
    fn free(&mut self, handle: u64, owner: u16) -> Result<u64, AllocError> {
        if owner >= OWNERS {
            return Err(AllocError::BadOwner { owner });
        }
        let (idx, generation) = ((handle & 0xffff_ffff) as usize, (handle >> 32) as u32);
        let result = match self.entries.get(idx) {
            None => Err(AllocError::InvalidHandle { handle }),
            Some(e) if e.live && e.generation == generation => {
                let i = self
                    .live
                    .iter()
                    .position(|l| l.a.handle == handle)
                    .expect("a live entry has a live allocation in the model");
                let actual = self.live[i].owner;
                if actual != owner {
                    Err(AllocError::ForeignFree { owner, actual })
                } else {
                    Ok(self.release(i).a.len)
                }
            }
            Some(e) if !e.live && e.generation == generation && generation != 0 => {
                Err(AllocError::DoubleFree { handle })
            }
            Some(_) => Err(AllocError::InvalidHandle { handle }),
        };
        if result.is_err() {
            self.bad_free(owner);
        }
        result
    }
}

fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// Reads the raw arena bytes (the oracle's view from outside the allocator).
fn arena_bytes(words: &[AtomicU64], granules: u64) -> Vec<u8> {
    // Relaxed: one thread; a snapshot.
    let off = words[H_ARENA_OFF].load(core::sync::atomic::Ordering::Relaxed) as usize;
    words[off..off + (granules * GRANULE / 8) as usize]
        .iter()
        .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_le_bytes())
        .collect()
}

/// Runs one `allocator` input against the model.
pub fn run(input: &AllocInput) -> Outcome {
    let arena = 1 + u64::from(input.arena) % 2048;
    let max_live = 1 + u32::from(input.max_live % 16);
    let ceiling = input.byte_ceiling.map_or(arena, u64::from);
    let config = AllocConfig {
        arena_bytes: arena,
        max_live,
        byte_ceiling: ceiling,
    };
    let len = region_len(arena, max_live).ok_or("region_len refused a small config")? as usize;
    let words: Vec<AtomicU64> = (0..len / 8).map(|_| AtomicU64::new(0)).collect();
    let mut al = Allocator::init(&words, config).map_err(|e| format!("init: {e}"))?;
    let granules = arena.div_ceil(GRANULE);
    ensure!(
        al.arena_bytes() == granules * GRANULE,
        "arena_bytes {}",
        al.arena_bytes()
    );
    ensure!(
        al.max_live() == max_live && al.byte_ceiling() == ceiling,
        "config not kept"
    );
    let mut m = Model {
        granules,
        max_live,
        ceiling,
        entries: vec![Entry::default(); max_live as usize],
        owners: vec![Stats::default(); usize::from(OWNERS)],
        ..Model::default()
    };
    for (n, op) in input.ops.iter().take(MAX_OPS).enumerate() {
        step(&words, &mut al, &mut m, op).map_err(|e| format!("step {n} ({op:?}): {e}"))?;
        check(&al, &m).map_err(|e| format!("after step {n} ({op:?}): {e}"))?;
    }
    Ok(())
}

fn pick(n: usize, p: u8) -> Option<usize> {
    (n > 0).then(|| usize::from(p) % n)
}

fn step<'w>(
    words: &'w [AtomicU64],
    al: &mut Allocator<'w>,
    m: &mut Model,
    op: &AllocOp,
) -> Outcome {
    match *op {
        AllocOp::Alloc { len, owner, now } => {
            let (len, owner, now) = (u64::from(len % 700), u16::from(owner % 66), u64::from(now));
            let got = al.alloc(len, owner, now);
            alloc_step(m, got, len, owner, now)?;
        }
        AllocOp::Free { pick: p, as_owner } => {
            if let Some(i) = pick(m.live.len(), p) {
                let handle = m.live[i].a.handle;
                let owner = as_owner.map_or(m.live[i].owner, |o| u16::from(o % 66));
                let got = al.free(handle, owner);
                let want = m.free(handle, owner);
                ensure!(
                    got == want,
                    "free({handle:#x}, {owner}): got {got:?}, model {want:?}"
                );
            }
        }
        AllocOp::FreeStale { pick: p } => {
            if let Some(i) = pick(m.freed.len(), p) {
                let handle = m.freed[i].handle;
                let got = al.free(handle, 0);
                let want = m.free(handle, 0);
                ensure!(
                    got == want,
                    "stale free({handle:#x}): got {got:?}, model {want:?}"
                );
            }
        }
        AllocOp::FreeRaw { handle, owner } => {
            let owner = u16::from(owner % 66);
            let got = al.free(handle, owner);
            let want = m.free(handle, owner);
            ensure!(
                got == want,
                "free({handle:#x}, {owner}): got {got:?}, model {want:?}"
            );
        }
        AllocOp::Write {
            pick: p,
            ref chunks,
            fill,
        } => {
            if let Some(i) = pick(m.live.len(), p) {
                write_session(words, al, m, i, chunks, fill)?;
            }
        }
        AllocOp::Read { pick: p } => {
            if let Some(i) = pick(m.live.len(), p) {
                read_back(al, &m.live[i])?;
            }
        }
        AllocOp::ReadStale { pick: p } => {
            if let Some(i) = pick(m.freed.len(), p) {
                let a = m.freed[i];
                let invalid = Err(AllocError::InvalidHandle { handle: a.handle });
                let mut out = [0u8; 16];
                let got = al.read(&a, &mut out);
                ensure!(got == invalid, "read of a freed allocation: {got:?}");
                let got = al.lookup(a.handle);
                ensure!(
                    got == invalid.map(|_: usize| a),
                    "lookup of a freed handle: {got:?}"
                );
                ensure!(
                    al.writer(&a).err() == Some(AllocError::InvalidHandle { handle: a.handle }),
                    "writer for a freed allocation was not refused"
                );
            }
        }
        AllocOp::FreeAllOf { owner } => {
            let owner = u16::from(owner % 66);
            let got = al.free_all_of(owner);
            if owner >= OWNERS {
                ensure!(
                    got == Err(AllocError::BadOwner { owner }),
                    "free_all_of({owner}): {got:?}"
                );
            } else {
                let (mut count, mut bytes) = (0, 0);
                while let Some(i) = m.live.iter().position(|l| l.owner == owner) {
                    bytes += m.release(i).a.len;
                    count += 1;
                }
                let got = got.map_err(|e| format!("free_all_of({owner}): {e}"))?;
                ensure!(
                    (got.count, got.bytes, got.corrupt) == (count, bytes, 0),
                    "free_all_of({owner}): got {got:?}, model count {count} bytes {bytes}"
                );
            }
        }
        AllocOp::Reattach => {
            *al = Allocator::attach(words).map_err(|e| format!("re-attach refused: {e}"))?;
            ensure!(
                al.byte_ceiling() == m.ceiling,
                "re-attach lost the byte ceiling"
            );
        }
        AllocOp::Lookup { handle } => {
            let got = al.lookup(handle);
            match m.live.iter().find(|l| l.a.handle == handle) {
                Some(l) => ensure!(
                    got == Ok(l.a),
                    "lookup({handle:#x}): {got:?}, model {:?}",
                    l.a
                ),
                None => ensure!(
                    got == Err(AllocError::InvalidHandle { handle }),
                    "lookup of a non-live handle {handle:#x}: {got:?}"
                ),
            }
        }
    }
    Ok(())
}

/// Checks one `alloc` result against the ceilings and the free space, and records it.
fn alloc_step(
    m: &mut Model,
    got: Result<Allocation, AllocError>,
    len: u64,
    owner: u16,
    now: u64,
) -> Outcome {
    if let Err(e) = &got {
        displays(e)?;
    }
    if owner >= OWNERS {
        ensure!(
            got == Err(AllocError::BadOwner { owner }),
            "alloc by owner {owner}: {got:?}"
        );
        return Ok(());
    }
    if len == 0 {
        ensure!(got == Err(AllocError::ZeroSize), "alloc(0): {got:?}");
        return Ok(());
    }
    if m.live.len() as u32 >= m.max_live {
        let want = Err(AllocError::LiveCeiling {
            max_live: m.max_live,
        });
        ensure!(
            got == want,
            "alloc at the live ceiling: got {got:?}, want {want:?}"
        );
        m.ceiling_hit(owner);
        return Ok(());
    }
    let live_bytes = m.live_bytes();
    if live_bytes + len > m.ceiling {
        let want = Err(AllocError::ByteCeiling {
            ceiling: m.ceiling,
            live_bytes,
            requested: len,
        });
        ensure!(
            got == want,
            "alloc past the byte ceiling: got {got:?}, want {want:?}"
        );
        m.ceiling_hit(owner);
        return Ok(());
    }
    let need = len.div_ceil(GRANULE);
    let largest = m.largest_free();
    match got {
        Err(AllocError::OutOfSpace {
            requested,
            largest_free,
        }) => {
            ensure!(
                requested == len,
                "OutOfSpace names {requested} bytes, {len} asked"
            );
            ensure!(
                largest_free == largest * GRANULE,
                "OutOfSpace says the largest free run is {largest_free} B, model {} B",
                largest * GRANULE
            );
            ensure!(
                largest < need,
                "OutOfSpace although a run of {largest} granules is free"
            );
            m.global.out_of_space += 1;
            m.owners[usize::from(owner)].out_of_space += 1;
        }
        Err(e) => return Err(format!("alloc({len}, {owner}): unexpected {e:?}")),
        Ok(a) => {
            ensure!(
                a.len == len,
                "allocation of {} bytes for {len} asked",
                a.len
            );
            ensure!(
                a.offset % GRANULE == 0,
                "offset {} is not granule-aligned",
                a.offset
            );
            let (first, end) = (a.offset / GRANULE, a.offset / GRANULE + need);
            ensure!(
                end <= m.granules,
                "granules {first}..{end} pass the arena ({})",
                m.granules
            );
            for l in &m.live {
                let (f2, e2) = (
                    l.a.offset / GRANULE,
                    l.a.offset / GRANULE + l.a.len.div_ceil(GRANULE),
                );
                ensure!(
                    end <= f2 || e2 <= first,
                    "granules {first}..{end} overlap live {f2}..{e2}"
                );
            }
            let (idx, generation) = ((a.handle & 0xffff_ffff) as usize, (a.handle >> 32) as u32);
            let Some(entry) = m.entries.get_mut(idx) else {
                return Err(format!(
                    "handle {:#x} names entry {idx} of {}",
                    a.handle, m.max_live
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
            on_alloc(&mut m.global, len);
            on_alloc(&mut m.owners[usize::from(owner)], len);
            m.live.push(Live {
                a,
                owner,
                now,
                bytes: vec![None; len as usize],
            });
        }
    }
    Ok(())
}

/// A bounded-writer session on live allocation `i`, with the neighbours checked.
fn write_session<'w>(
    words: &'w [AtomicU64],
    al: &mut Allocator<'w>,
    m: &mut Model,
    i: usize,
    chunks: &[u8],
    fill: u8,
) -> Outcome {
    let before = arena_bytes(words, m.granules);
    let l = &mut m.live[i];
    let reserved = l.a.len;
    {
        let mut w = al
            .writer(&l.a)
            .map_err(|e| format!("writer for a live allocation: {e}"))?;
        ensure!(
            w.reserved() == reserved && w.position() == 0,
            "a fresh writer's state"
        );
        let mut pos = 0u64;
        for (k, &c) in chunks.iter().take(16).enumerate() {
            let c = u64::from(c) % (reserved + 9);
            let data = vec![fill.wrapping_add(k as u8); c as usize];
            let got = w.write(&data);
            if pos + c <= reserved {
                ensure!(
                    got.is_ok(),
                    "write of {c} at {pos} of {reserved} refused: {got:?}"
                );
                for (j, b) in data.iter().enumerate() {
                    l.bytes[pos as usize + j] = Some(*b);
                }
                pos += c;
                // A non-empty write zero-pads the rest of the word it ended in (documented).
                let pad_end = if c == 0 {
                    pos
                } else {
                    (pos.div_ceil(8) * 8).min(reserved)
                };
                for b in &mut l.bytes[pos as usize..pad_end as usize] {
                    *b = Some(0);
                }
            } else {
                let want = Err(AllocError::Overflow {
                    reserved,
                    attempted: pos + c,
                });
                ensure!(
                    got == want,
                    "write of {c} at {pos} of {reserved}: {got:?}, want {want:?}"
                );
            }
            ensure!(
                w.position() == pos && w.remaining() == reserved - pos,
                "writer at {} (remaining {}), model {pos}",
                w.position(),
                w.remaining()
            );
        }
    }
    let after = arena_bytes(words, m.granules);
    let start = l.a.offset as usize;
    let end = start + reserved.div_ceil(8) as usize * 8;
    for (b, (x, y)) in before.iter().zip(&after).enumerate() {
        ensure!(
            x == y || (start..end).contains(&b),
            "the writer of arena bytes {start}..{} changed byte {b} ({x:#x} -> {y:#x})",
            start + reserved as usize
        );
    }
    for other in &m.live {
        read_back(al, other)?;
    }
    Ok(())
}

/// `read`/`read_words`/`lookup` of a live allocation return what was written.
fn read_back(al: &Allocator<'_>, l: &Live) -> Outcome {
    let mut out = vec![0u8; l.a.len as usize + 5];
    let n = al
        .read(&l.a, &mut out)
        .map_err(|e| format!("read of live {:?}: {e}", l.a))?;
    ensure!(n as u64 == l.a.len, "read {n} bytes of {}", l.a.len);
    for (j, want) in l.bytes.iter().enumerate() {
        if let Some(w) = want {
            ensure!(
                out[j] == *w,
                "byte {j} of {:?} reads {:#x}, wrote {w:#x}",
                l.a,
                out[j]
            );
        }
    }
    let mut ws = vec![0u64; l.a.len.div_ceil(8) as usize];
    let nw = al
        .read_words(&l.a, &mut ws)
        .map_err(|e| format!("read_words of live {:?}: {e}", l.a))?;
    ensure!(nw == ws.len(), "read_words returned {nw} of {}", ws.len());
    let bytes: Vec<u8> = ws.iter().flat_map(|w| w.to_le_bytes()).collect();
    ensure!(bytes[..n] == out[..n], "read_words and read disagree");
    ensure!(al.lookup(l.a.handle) == Ok(l.a), "lookup of live {:?}", l.a);
    Ok(())
}

/// Stats, per-owner stats and the leak report agree with the model.
fn check(al: &Allocator<'_>, m: &Model) -> Outcome {
    ensure!(
        al.stats() == m.global,
        "stats {:?}, model {:?}",
        al.stats(),
        m.global
    );
    for (o, want) in m.owners.iter().enumerate() {
        let got = al.owner_stats(o as u16);
        ensure!(got == Ok(*want), "owner {o} stats {got:?}, model {want:?}");
    }
    ensure!(
        al.owner_stats(OWNERS) == Err(AllocError::BadOwner { owner: OWNERS }),
        "owner_stats past the table"
    );
    let now = 1000;
    let mut seen = Vec::new();
    let totals = al.leak_report(now, |leak| seen.push(leak));
    ensure!(
        (totals.count, totals.bytes, totals.corrupt) == (m.live.len() as u64, m.live_bytes(), 0),
        "leak totals {totals:?}, model {} live, {} bytes",
        m.live.len(),
        m.live_bytes()
    );
    for leak in &seen {
        let Some(l) = m.live.iter().find(|l| l.a.handle == leak.handle) else {
            return Err(format!("leak report names {leak:?}, not live in the model"));
        };
        ensure!(
            (leak.owner, leak.offset, leak.len, leak.age)
                == (l.owner, l.a.offset, l.a.len, now - l.now),
            "leak report {leak:?}, model {l:?}"
        );
    }
    Ok(())
}
