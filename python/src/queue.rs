//! The queue's native half: one message of several *parts* (a pickle stream and its out-of-band
//! buffers) per slot, the large parts in one allocation of the ring's in-segment allocator.
//!
//! # Message layout
//!
//! The slot holds a header, then the parts that fit ("inline"), each at a 64-byte-aligned
//! offset; the parts that do not fit are packed (64-byte aligned) into one allocation whose
//! handle and length are the slot's metadata words (`meta = [handle, len]`, as ring-os's
//! `AllocProducer` does). All words little-endian:
//!
//! | bytes | what |
//! |-------|------|
//! | 0..4 | magic `"SRQ2"` |
//! | 4..8 | number of parts `n` (at least 1: part 0 is the pickle stream) |
//! | 8 + 24 i .. | part `i`: where (0 inline in the slot, 1 in the allocation, 2 in the spill segment), offset, length |
//!
//! A spilled message (magic `"SRQS"`, see `spill`) has no allocation: after the part table
//! comes the spill record (the segment's length, its name's length, the name; 8-byte aligned),
//! and its out-of-slot parts lie in that segment.
//!
//! # Allocation lifetime
//!
//! As in `ring_os::raw::alloc`: the allocation belongs to the producer (owner
//! [`PRODUCER_ALLOC_OWNER`]) and is freed when its slot is claimed for a later message — a claim
//! succeeds only when no reader pins the slot and no gating consumer still needs it — so a
//! receiver that dies cannot leak it. A producer that takes over frees what a dead one
//! allocated and no slot references. Messages are allocated and freed in sequence order, so the
//! allocator's next-fit search uses the arena as a circular buffer. One message takes at most
//! a `min(slots, 8) + 1`-th of the arena; a message larger than that, or one that finds no room
//! (the unread messages hold the arena), spills into a segment of its own (see `spill`), so
//! the arena is never reserved for `slots` maximal messages and a `put` never waits for it.
//!
//! # Untrusted peer
//!
//! The receiver validates everything it reads from the segment: the magic, the part count
//! against the slot length, each inline part against the slot, the handle against the
//! allocator's entry table (`Allocator::lookup`), the allocation's length against the metadata
//! and each part against the allocation. Copies are sized by those validated lengths, which the
//! receiver's own mapping bounds.

use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use ring_core::arena::{AllocError, Allocation, Allocator};
use ring_core::Memory as _;
use ring_os::raw::alloc::PRODUCER_ALLOC_OWNER;
use ring_os::raw::Mapping;

use crate::errors::Fail;

/// `"SRQ2"`.
pub(crate) const MAGIC: [u8; 4] = *b"SRQ2";
/// `"SRQS"`: a spilled message.
pub(crate) const MAGIC_SPILL: [u8; 4] = *b"SRQS";
/// Bytes before the part table.
pub(crate) const HEAD: usize = 8;
/// Bytes of one part-table entry.
pub(crate) const ENTRY: usize = 24;
/// Alignment of every part, in the slot and in the allocation.
pub(crate) const ALIGN: usize = 64;
/// Parts at least this long copy with the GIL released.
pub(crate) const RELEASE_GIL_AT: usize = 1 << 16;
/// The allocator header word holding the arena's offset in words (ring-core's allocator
/// region layout, documented in `ring-core/src/alloc/mod.rs`: word 9).
const ARENA_OFF_WORD: usize = 9;

/// Rounds `n` up to [`ALIGN`]; `None` on overflow.
pub(crate) fn align(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v / ALIGN * ALIGN)
}

/// Where one part goes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    /// In the allocation (else in the slot).
    pub(crate) arena: bool,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// The layout of one message: each part's place, the slot bytes used, the allocation length.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) places: Vec<Place>,
    pub(crate) slot_len: usize,
    pub(crate) arena_len: usize,
}

/// Lays out parts of `lens` bytes: inline in order while they fit in `capacity` (the parts
/// from index `outside_from` on never), the rest in the allocation (or spill segment); `extra`
/// bytes after the part table are kept for the spill record. `None` when the header alone does
/// not fit (too many parts) or on overflow.
pub(crate) fn plan(
    lens: &[usize],
    capacity: usize,
    extra: usize,
    outside_from: usize,
) -> Option<Plan> {
    let head = ENTRY
        .checked_mul(lens.len())?
        .checked_add(HEAD)?
        .checked_add(extra)?;
    if head > capacity || u32::try_from(lens.len()).is_err() {
        return None;
    }
    let mut places = Vec::with_capacity(lens.len());
    let (mut slot_len, mut arena_len) = (head, 0usize);
    for (i, &len) in lens.iter().enumerate() {
        if len == 0 {
            places.push(Place {
                arena: false,
                offset: 0,
                len,
            });
            continue;
        }
        let at = align(slot_len)?;
        if i < outside_from && at.checked_add(len)? <= capacity {
            places.push(Place {
                arena: false,
                offset: at,
                len,
            });
            slot_len = at + len;
        } else {
            let at = align(arena_len)?;
            places.push(Place {
                arena: true,
                offset: at,
                len,
            });
            arena_len = at.checked_add(len)?;
        }
    }
    Some(Plan {
        places,
        slot_len,
        arena_len,
    })
}

/// Writes the header of `plan` into `out` (at least `HEAD + ENTRY * parts` bytes, and the
/// spill record's with `spill`: the segment's name and length).
pub(crate) fn write_header(plan: &Plan, out: &mut [u8], spill: Option<(&str, u64)>) {
    out[..4].copy_from_slice(if spill.is_some() {
        &MAGIC_SPILL
    } else {
        &MAGIC
    });
    let n = plan.places.len();
    out[4..8].copy_from_slice(&(n as u32).to_le_bytes());
    let outside: u64 = if spill.is_some() { 2 } else { 1 };
    if let Some((name, len)) = spill {
        let at = HEAD + ENTRY * n;
        crate::spill::write_record(&mut out[at..at + crate::spill::record_len(name)], len, name);
    }
    for (i, p) in plan.places.iter().enumerate() {
        let e = &mut out[HEAD + ENTRY * i..HEAD + ENTRY * (i + 1)];
        let kind = if p.arena { outside } else { 0 };
        e[..8].copy_from_slice(&kind.to_le_bytes());
        e[8..16].copy_from_slice(&(p.offset as u64).to_le_bytes());
        e[16..24].copy_from_slice(&(p.len as u64).to_le_bytes());
    }
}

/// The ring's allocator with the address of its arena in this process.
pub(crate) struct Arena {
    /// Validated once (`Allocator::attach`); borrows `mapping`'s region (declared first, so
    /// dropped first).
    pub(crate) alloc: Allocator<'static>,
    /// Address of the arena's first byte.
    base: usize,
    /// Arena bytes from `base` that lie inside the allocator region.
    len: usize,
    /// Keeps the region mapped for `alloc` and `base`.
    _mapping: Arc<Mapping>,
}

impl Arena {
    /// The allocator of `mapping`'s ring; `None` when the ring has none.
    pub(crate) fn attach(mapping: &Arc<Mapping>) -> Result<Option<Self>, Fail> {
        let mapping = Arc::clone(mapping);
        // SAFETY: the words live inside `*mapping`, which `_mapping` keeps alive and which is
        // dropped after `alloc` (field order); a `Memory` region stays valid as long as the
        // memory value does.
        let words: &'static [ring_core::AtomicU64] =
            unsafe { &*core::ptr::from_ref(mapping.alloc_words()) };
        if words.is_empty() {
            return Ok(None);
        }
        let corrupt = |what: &str| Fail::new("Corrupt", format!("allocator region: {what}"));
        let alloc = Allocator::attach(words).map_err(|e| corrupt(&e.to_string()))?;
        // Relaxed: written once by the creator before the ring was published (attach checked
        // the magic, which the creator stores last with Release, through an Acquire load).
        let off_words = words[ARENA_OFF_WORD].load(core::sync::atomic::Ordering::Relaxed);
        let region = core::mem::size_of_val(words);
        let start = usize::try_from(off_words)
            .ok()
            .and_then(|w| w.checked_mul(8))
            .filter(|&s| s <= region)
            .ok_or_else(|| corrupt("arena offset out of the region"))?;
        let arena = usize::try_from(alloc.arena_bytes()).unwrap_or(usize::MAX);
        let len = arena.min(region - start);
        Ok(Some(Self {
            base: words.as_ptr() as usize + start,
            len,
            alloc,
            _mapping: mapping,
        }))
    }

    /// The address of allocation `a` in this process, checked to lie inside the arena.
    pub(crate) fn address(&self, a: &Allocation) -> Result<usize, Fail> {
        let off = usize::try_from(a.offset).ok();
        let len = usize::try_from(a.len).ok();
        match (off, len) {
            (Some(o), Some(l)) if o.checked_add(l).is_some_and(|e| e <= self.len) => {
                Ok(self.base + o)
            }
            _ => Err(Fail::new("Corrupt", "an allocation lies outside the arena")),
        }
    }

    /// The largest allocation the arena can hold.
    pub(crate) fn bytes(&self) -> usize {
        self.len
    }
}

/// The producer side: the arena and the allocation each slot's message refers to.
pub(crate) struct SendState {
    pub(crate) arena: Option<Arena>,
    /// Per slot: the handle of its message's allocation (0: none).
    pub(crate) slot_handles: Vec<u64>,
    /// The largest allocation one message may take (a share of the arena, see the module doc).
    pub(crate) max_alloc: usize,
    /// Per slot: the name of its message's spill segment, if it spilled (see `spill`).
    pub(crate) slot_spills: Vec<Option<String>>,
    /// The queue's name, the prefix of its spill names (`None`: not a named ring, no spills).
    pub(crate) name: Option<String>,
    /// The spill segments kept for reuse (see `spill`).
    pub(crate) pool: crate::spill::Pool,
}

impl SendState {
    /// Attaches to `mapping`'s allocator and frees the producer allocations no slot refers to
    /// (a dead predecessor's message in the making).
    pub(crate) fn new(mapping: &Arc<Mapping>) -> Result<Self, Fail> {
        let mut arena = Arena::attach(mapping)?;
        let slots = mapping.geometry().slots();
        // Relaxed: only the producer (us, now) writes slot metadata.
        let slot_handles: Vec<u64> = (0..slots)
            .map(|i| mapping.slot_header(i).meta[0].load(core::sync::atomic::Ordering::Relaxed))
            .collect();
        let mut max_alloc = 0;
        if let Some(a) = arena.as_mut() {
            let mut orphans = Vec::new();
            a.alloc.leak_report(now_ms(), |l| {
                if l.owner == PRODUCER_ALLOC_OWNER && !slot_handles.contains(&l.handle) {
                    orphans.push(l.handle);
                }
            });
            for h in orphans {
                let _ = a.alloc.free(h, PRODUCER_ALLOC_OWNER);
            }
            // A share that leaves room for the messages of up to 8 slots; a message that finds
            // no room spills (see `spill`) instead of waiting.
            max_alloc = a.bytes() / (slots.min(8) + 1) / ALIGN * ALIGN;
        }
        let name = match mapping.segment().kind() {
            ring_os::raw::SegmentKind::Named(n) => Some(n.as_str().to_owned()),
            _ => None,
        };
        Ok(Self {
            arena,
            slot_handles,
            max_alloc,
            slot_spills: vec![None; slots],
            name,
            pool: crate::spill::Pool::default(),
        })
    }

    /// Slot `index` was claimed: the message it held is consumed; free its allocation, give
    /// its pooled spill segment back to the pool, remove its spill segment of its own (if its
    /// reader has not).
    pub(crate) fn reclaim(&mut self, index: usize) {
        self.pool.reclaim(index);
        if let Some(name) = self.slot_spills.get_mut(index).and_then(Option::take) {
            crate::spill::remove(&name);
        }
        if let (Some(a), Some(h)) = (self.arena.as_mut(), self.slot_handles.get_mut(index)) {
            if *h != 0 {
                // A handle that is not live (a peer scribbled) is refused and counted; nothing
                // else to do about it here.
                let _ = a.alloc.free(*h, PRODUCER_ALLOC_OWNER);
                *h = 0;
            }
        }
    }

    /// Allocates `len` bytes for slot `index`'s message: `(handle, address)`; `None` when the
    /// arena has no room now (or the ring has none): the message spills then.
    pub(crate) fn allocate(
        &mut self,
        index: usize,
        len: usize,
    ) -> Result<Option<(u64, usize)>, Fail> {
        let Some(arena) = self.arena.as_mut() else {
            return Ok(None);
        };
        let a = match arena
            .alloc
            .alloc(len as u64, PRODUCER_ALLOC_OWNER, now_ms())
        {
            Ok(a) => a,
            Err(AllocError::OutOfSpace { .. } | AllocError::LiveCeiling { .. }) => return Ok(None),
            Err(other) => return Err(Fail::new("Corrupt", format!("allocator: {other}"))),
        };
        let addr = arena.address(&a)?;
        if let Some(h) = self.slot_handles.get_mut(index) {
            *h = a.handle;
        }
        Ok(Some((a.handle, addr)))
    }
}

/// Milliseconds since the Unix epoch (the allocator's clock for leak ages).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A part of a received message, validated: its address and length in this process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Got {
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

/// The spill record of the message in `slot`, if it is a spilled one: `(segment length,
/// name)`. Validates the header as far as the record.
pub(crate) fn spill_of(slot: &[u8]) -> Result<Option<(u64, &str)>, Fail> {
    if slot.len() < HEAD || slot[..4] != MAGIC_SPILL {
        return Ok(None);
    }
    let n = u32::from_le_bytes([slot[4], slot[5], slot[6], slot[7]]) as usize;
    let at = n
        .checked_mul(ENTRY)
        .and_then(|t| t.checked_add(HEAD))
        .filter(|&t| t <= slot.len())
        .ok_or_else(|| Fail::new("Corrupt", "not a valid queue message: part table"))?;
    let (len, name, _) = crate::spill::read_record(&slot[at..])?;
    Ok(Some((len, name)))
}

/// Parses and validates the message in the pinned `slot` (`meta` its metadata words) against
/// the ring's `arena`, or, for a spilled message, the mapped spill segment `spill` (address
/// and length).
pub(crate) fn parse(
    slot: &[u8],
    meta: [u64; 2],
    arena: Option<&Arena>,
    spill: Option<(usize, usize)>,
) -> Result<Vec<Got>, Fail> {
    let corrupt = |what: &str| Fail::new("Corrupt", format!("not a valid queue message: {what}"));
    let spilled = slot.len() >= HEAD && slot[..4] == MAGIC_SPILL;
    if slot.len() < HEAD || !(slot[..4] == MAGIC || spilled) {
        return Err(corrupt("bad magic"));
    }
    let n = u32::from_le_bytes([slot[4], slot[5], slot[6], slot[7]]) as usize;
    let table = n
        .checked_mul(ENTRY)
        .and_then(|t| t.checked_add(HEAD))
        .filter(|&t| t <= slot.len() && n > 0)
        .ok_or_else(|| corrupt("part table"))?;
    // Inline parts start after the table and, in a spilled message, its record.
    let table = if spilled {
        table + crate::spill::read_record(&slot[table..])?.2
    } else {
        table
    };
    if table > slot.len() {
        return Err(corrupt("spill record"));
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&slot[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let mut allocation: Option<(usize, usize)> = None;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let e = HEAD + ENTRY * i;
        let (kind, off, len) = (word(e), word(e + 8), word(e + 16));
        let (off, len) = match (usize::try_from(off), usize::try_from(len)) {
            (Ok(o), Ok(l)) => (o, l),
            _ => return Err(corrupt("part range")),
        };
        let end = off.checked_add(len).ok_or_else(|| corrupt("part range"))?;
        let (base, limit) = match kind {
            0 => {
                if len > 0 && off < table {
                    return Err(corrupt("an inline part overlaps the header"));
                }
                (slot.as_ptr() as usize, slot.len())
            }
            2 => spill
                .filter(|_| spilled)
                .ok_or_else(|| corrupt("a spilled part in a message without a spill segment"))?,
            1 if spilled => return Err(corrupt("an allocation in a spilled message")),
            1 => {
                let (addr, alen) = match allocation {
                    Some(a) => a,
                    None => {
                        let a = arena
                            .ok_or_else(|| corrupt("an allocation in a ring without allocator"))?;
                        let found = a
                            .alloc
                            .lookup(meta[0])
                            .map_err(|e| corrupt(&format!("allocation: {e}")))?;
                        if found.len != meta[1] {
                            return Err(corrupt("allocation length"));
                        }
                        let got = (a.address(&found)?, usize::try_from(found.len).unwrap_or(0));
                        allocation = Some(got);
                        got
                    }
                };
                (addr, alen)
            }
            _ => return Err(corrupt("part kind")),
        };
        if len > 0 && end > limit {
            return Err(corrupt("a part runs past its slot or allocation"));
        }
        out.push(Got {
            addr: if len == 0 { base } else { base + off },
            len,
        });
    }
    Ok(out)
}

/// A new `bytearray` (or, with `as_bytes`, `bytes`) of `len` uninitialised bytes and its data
/// pointer; the caller fills all `len` bytes before Python code sees the object.
pub(crate) fn new_buffer(
    py: Python<'_>,
    len: usize,
    as_bytes: bool,
) -> PyResult<(Bound<'_, PyAny>, *mut u8)> {
    let n = isize::try_from(len)
        .map_err(|_| Fail::new("TooLarge", "a part is too large for this process"))?;
    // SAFETY: a NULL source makes an uninitialised object of `n` bytes (the C API's idiom for
    // filling one in place); the result is a new reference or NULL with an exception set.
    let obj = unsafe {
        let raw = if as_bytes {
            ffi::PyBytes_FromStringAndSize(core::ptr::null(), n)
        } else {
            ffi::PyByteArray_FromStringAndSize(core::ptr::null(), n)
        };
        Bound::from_owned_ptr_or_err(py, raw)?
    };
    // SAFETY: `obj` is the bytes or bytearray just made; its buffer holds `n` bytes (plus a
    // NUL), valid while `obj` lives and not resized by anyone before we return it.
    let ptr = unsafe {
        if as_bytes {
            ffi::PyBytes_AsString(obj.as_ptr())
        } else {
            ffi::PyByteArray_AsString(obj.as_ptr())
        }
    };
    Ok((obj, ptr.cast::<u8>()))
}
