//! `allocator`: alloc/free/write/read sequences on the in-segment allocator, checked against
//! the one allocator model ([`AllocModel`]: placement validity, the refusals and their order,
//! handle generations, every counter and the leak report, after every call). Each
//! bounded-writer session also snapshots the raw arena before and after: no byte outside the
//! allocation's words may change, and every other live allocation reads back what was written
//! into it.

use super::{displays, Outcome};
use crate::model::{read_back, AllocModel};
use arbitrary::Arbitrary;
use ring_core::arena::{region_len, AllocConfig, AllocError, Allocator};
use ring_core::AtomicU64;

/// Most operations one input runs.
pub const MAX_OPS: usize = 256;
/// Word 9 of the region header: the arena's word offset (see `ring_core::arena`'s layout table).
const H_ARENA_OFF: usize = 9;
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

/// Reads the raw arena bytes (the oracle's view from outside the allocator).
fn arena_bytes(words: &[AtomicU64], granules: u64) -> Vec<u8> {
    // Relaxed: one thread; a snapshot.
    let off = words[H_ARENA_OFF].load(core::sync::atomic::Ordering::Relaxed) as usize;
    words[off..off + (granules * GRANULE / 8) as usize]
        .iter()
        .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_le_bytes())
        .collect()
}

/// The leak report's clock in [`AllocModel::check`]: later than any `now` an input passes.
const REPORT_NOW: u64 = 1000;

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
    let al = Allocator::init(&words, config).map_err(|e| format!("init: {e}"))?;
    let m = AllocModel::new(arena, max_live, ceiling);
    ensure!(
        al.arena_bytes() == m.granules * GRANULE,
        "arena_bytes {}",
        al.arena_bytes()
    );
    ensure!(
        al.max_live() == max_live && al.byte_ceiling() == ceiling,
        "config not kept"
    );
    let mut run = Run {
        words: &words,
        al,
        m,
    };
    for (n, op) in input.ops.iter().take(MAX_OPS).enumerate() {
        run.step(op)
            .map_err(|e| format!("step {n} ({op:?}): {e}"))?;
        run.m
            .check(&run.al, REPORT_NOW)
            .map_err(|e| format!("after step {n} ({op:?}): {e}"))?;
    }
    Ok(())
}

fn pick(n: usize, p: u8) -> Option<usize> {
    (n > 0).then(|| usize::from(p) % n)
}

/// One input's run: the region's words, the allocator over them and the model.
struct Run<'w> {
    words: &'w [AtomicU64],
    al: Allocator<'w>,
    m: AllocModel,
}

impl Run<'_> {
    /// `free(handle, owner)` on both sides.
    fn free_both(&mut self, handle: u64, owner: u16) -> Outcome {
        let got = self.al.free(handle, owner);
        let want = self.m.free(handle, owner);
        ensure!(
            got == want,
            "free({handle:#x}, {owner}): got {got:?}, model {want:?}"
        );
        Ok(())
    }

    fn step(&mut self, op: &AllocOp) -> Outcome {
        match *op {
            AllocOp::Alloc { len, owner, now } => {
                let (len, owner, now) =
                    (u64::from(len % 700), u16::from(owner % 66), u64::from(now));
                let got = self.al.alloc(len, owner, now);
                if let Err(e) = &got {
                    displays(e)?;
                }
                let want = self.m.alloc(len, owner, now, &got)?;
                ensure!(
                    got == want,
                    "alloc({len}, {owner}): got {got:?}, model {want:?}"
                );
            }
            AllocOp::Free { pick: p, as_owner } => {
                if let Some(i) = pick(self.m.live.len(), p) {
                    let l = &self.m.live[i];
                    let owner = as_owner.map_or(l.owner, |o| u16::from(o % 66));
                    self.free_both(l.alloc.handle, owner)?;
                }
            }
            AllocOp::FreeStale { pick: p } => {
                if let Some(i) = pick(self.m.freed.len(), p) {
                    self.free_both(self.m.freed[i].handle, 0)?;
                }
            }
            AllocOp::FreeRaw { handle, owner } => self.free_both(handle, u16::from(owner % 66))?,
            AllocOp::Write {
                pick: p,
                ref chunks,
                fill,
            } => {
                if let Some(i) = pick(self.m.live.len(), p) {
                    self.write_session(i, chunks, fill)?;
                }
            }
            AllocOp::Read { pick: p } => {
                if let Some(i) = pick(self.m.live.len(), p) {
                    read_back(&self.al, &self.m.live[i])?;
                }
            }
            AllocOp::ReadStale { pick: p } => {
                if let Some(i) = pick(self.m.freed.len(), p) {
                    let a = self.m.freed[i];
                    let invalid = Err(AllocError::InvalidHandle { handle: a.handle });
                    let mut out = [0u8; 16];
                    let got = self.al.read(&a, &mut out);
                    ensure!(got == invalid, "read of a freed allocation: {got:?}");
                    let got = self.al.lookup(a.handle);
                    ensure!(
                        got == invalid.map(|_: usize| a),
                        "lookup of a freed handle: {got:?}"
                    );
                    ensure!(
                        self.al.writer(&a).err()
                            == Some(AllocError::InvalidHandle { handle: a.handle }),
                        "writer for a freed allocation was not refused"
                    );
                }
            }
            AllocOp::FreeAllOf { owner } => {
                let owner = u16::from(owner % 66);
                let got = self
                    .al
                    .free_all_of(owner)
                    .map(|f| (f.count, f.bytes, f.corrupt));
                let want = self
                    .m
                    .free_all_of(owner)
                    .map(|(count, bytes)| (count, bytes, 0));
                ensure!(
                    got == want,
                    "free_all_of({owner}): got {got:?}, model (count, bytes, corrupt) {want:?}"
                );
            }
            AllocOp::Reattach => {
                self.al =
                    Allocator::attach(self.words).map_err(|e| format!("re-attach refused: {e}"))?;
                ensure!(
                    self.al.byte_ceiling() == self.m.ceiling,
                    "re-attach lost the byte ceiling"
                );
            }
            AllocOp::Lookup { handle } => {
                let got = self.al.lookup(handle);
                match self.m.live.iter().find(|l| l.alloc.handle == handle) {
                    Some(l) => ensure!(
                        got == Ok(l.alloc),
                        "lookup({handle:#x}): {got:?}, model {:?}",
                        l.alloc
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

    /// A bounded-writer session on live allocation `i`, with the neighbours checked.
    fn write_session(&mut self, i: usize, chunks: &[u8], fill: u8) -> Outcome {
        let (al, m) = (&mut self.al, &mut self.m);
        let before = arena_bytes(self.words, m.granules);
        let a = m.live[i].alloc;
        let reserved = a.len;
        {
            let mut w = al
                .writer(&a)
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
                let want = m.write_refusal(i, pos, c);
                ensure!(
                    got == want,
                    "write of {c} at {pos} of {reserved}: {got:?}, want {want:?}"
                );
                if want.is_ok() {
                    pos = m.wrote(i, pos, &data);
                }
                ensure!(
                    w.position() == pos && w.remaining() == reserved - pos,
                    "writer at {} (remaining {}), model {pos}",
                    w.position(),
                    w.remaining()
                );
            }
        }
        let after = arena_bytes(self.words, m.granules);
        let start = a.offset as usize;
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
}
