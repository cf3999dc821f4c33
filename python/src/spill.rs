//! Spilled queue messages: a message whose out-of-slot parts do not fit the ring's arena (too
//! large, or the arena is full of unread messages) travels in a named segment of its own.
//!
//! # Layout
//!
//! A spill segment (`<queue name>.s<seq>-<16 hex>`, every page reserved, so a full `/dev/shm` is
//! `NoSpace` at once and never a `SIGBUS`) starts with a [`SEG_HEAD`]-byte header of two words,
//! then the message's out-of-slot parts:
//!
//! - the *state* word: `4 g + SENT` while the message of generation `g` is unread, `4 g + DONE`
//!   once its reader acknowledged it ([`Received::done`]);
//! - the *gone* word: `g + 1` when the sender will not reuse the segment after generation `g`
//!   (a segment outside its pool, or the sender closed): the reader that acknowledges `g` then
//!   removes the name.
//!
//! The slot names the segment (the record after the part table, see `queue`).
//!
//! # Lifetime: a pool owned by the sender
//!
//! Making a segment costs the kernel's zeroing of every page and a fault per page in each
//! process that maps it; removing it, the freeing. So the sender keeps up to [`KEEP`] segments
//! mapped ([`Pool`]) and reuses one for a later message once its message is consumed: when the
//! reader acknowledged it (`DONE` of that generation), or when the message's slot is claimed
//! again (the claim proves it consumed, also when its reader died after the copy). An idle
//! segment that took no message for [`IDLE`] is removed at the next `put`; the pool's drop (the
//! producer's close) removes the idle ones and marks the others gone, so their readers remove
//! them. A message that finds every pooled segment busy goes into one made for it alone (gone
//! from the start): its reader removes the name once it has the message, the sender when the
//! slot comes round again. [`crate::sweep`] removes spills whose queue is gone or stale and
//! that no creator holds (processes killed by a signal; a pooled segment's creator lock is held
//! by the sender while it lives).
//!
//! A reader keeps the segments it mapped ([`Mapped`], up to [`KEEP`]) for the next messages the
//! sender puts in them, and lets one go once the sender marked it gone.
//!
//! A reader acknowledges only a message that is its alone (a group member's, or the only
//! reader's): with several broadcast readers, the slot's next claim frees the segment.
//!
//! # Untrusted peer
//!
//! A receiver opens only a name of this very queue's spill pattern ([`is_spill_of`]), checks the
//! segment's size against the record, and the part table against that size. The header words
//! are only compared and swapped: a wrong value makes a reader skip its acknowledgement or
//! remove a name early (the next reader of that segment then gets `Corrupt`), never touch
//! memory outside the segment.

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring_os::raw::{CreateOptions, Segment, SegmentName, SizeCheck};

use crate::errors::Fail;

/// Bytes of a spill segment's header (the state and gone words) before its parts.
pub(crate) const SEG_HEAD: usize = 64;
/// The state word's low bits: the message of its generation is unread.
const SENT: u64 = 1;
/// ... acknowledged by its reader.
const DONE: u64 = 2;
/// Spill segments a sender keeps for reuse (busy and idle together).
pub(crate) const KEEP: usize = 4;
/// A pooled segment that took no message for this long is removed, once idle, at the next
/// `put`.
pub(crate) const IDLE: Duration = Duration::from_secs(2);
/// New segments' data is a whole number of these (messages of nearly equal sizes share them).
const GRAIN: usize = 1 << 20;

/// The header words of `seg` (at least [`SEG_HEAD`] bytes long): `(state, gone)`.
fn words(seg: &Segment) -> (&AtomicU64, &AtomicU64) {
    debug_assert!(seg.len() >= SEG_HEAD);
    let base = seg.as_ptr().as_ptr().cast::<AtomicU64>();
    // SAFETY: the mapping is page-aligned and at least `SEG_HEAD` (64) bytes long (checked by
    // `create` and `Received::open`), so both words are aligned and inside it; the references
    // borrow `seg`, which keeps the mapping alive. Other processes touch these words only
    // atomically (a hostile one may write anything, and any bits are a valid `u64`).
    unsafe { (&*base, &*base.add(1)) }
}

/// Bytes of the spill record before the name: the segment's length and the name's length.
pub(crate) const RECORD_HEAD: usize = 16;

/// A new spill name for message `seq` of the queue `queue`: `<queue>.s<seq>-<16 hex>`.
pub(crate) fn name(queue: &str, seq: u64) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(seq);
    h.write_u32(std::process::id());
    format!("{queue}.s{seq}-{:016x}", h.finish())
}

/// Whether `name` is a spill name of queue `queue` (see [`name`]; the rule is ring-os's, which
/// `ringctl list`/`clean` share).
pub(crate) fn is_spill_of(name: &str, queue: &str) -> bool {
    ring_os::raw::stale::is_spill_of(name, queue)
}

/// The queue a spill name belongs to (the part before `.s`), if it is one (for the sweep, Unix
/// only).
#[cfg(unix)]
pub(crate) fn queue_of(name: &str) -> Option<&str> {
    ring_os::raw::stale::spill_queue(name)
}

/// The record's length for `name` (rounded to 8 bytes).
pub(crate) fn record_len(name: &str) -> usize {
    (RECORD_HEAD + name.len()).div_ceil(8) * 8
}

/// Writes the record (segment length, name) into `out` (`record_len(name)` bytes).
pub(crate) fn write_record(out: &mut [u8], len: u64, name: &str) {
    out[..8].copy_from_slice(&len.to_le_bytes());
    out[8..16].copy_from_slice(&(name.len() as u64).to_le_bytes());
    out[RECORD_HEAD..RECORD_HEAD + name.len()].copy_from_slice(name.as_bytes());
}

/// Reads the record at the start of `bytes`: `(segment length, name, record length)`.
pub(crate) fn read_record(bytes: &[u8]) -> Result<(u64, &str, usize), Fail> {
    let corrupt = |what: &str| Fail::new("Corrupt", format!("not a valid spill record: {what}"));
    if bytes.len() < RECORD_HEAD {
        return Err(corrupt("too short"));
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let len = word(0);
    let n = usize::try_from(word(8))
        .ok()
        .filter(|&n| n <= ring_os::raw::MAX_NAME_LEN && RECORD_HEAD + n <= bytes.len())
        .ok_or_else(|| corrupt("name length"))?;
    let name = core::str::from_utf8(&bytes[RECORD_HEAD..RECORD_HEAD + n])
        .map_err(|_| corrupt("name is not UTF-8"))?;
    Ok((len, name, (RECORD_HEAD + n).div_ceil(8) * 8))
}

/// The length of a new segment for `data` bytes of parts (header included, whole grains).
pub(crate) fn segment_len(data: usize) -> Option<usize> {
    data.checked_next_multiple_of(GRAIN)?.checked_add(SEG_HEAD)
}

/// Creates the spill segment `name` of `len` bytes (at least [`SEG_HEAD`]; every page
/// reserved).
pub(crate) fn create(name: &str, len: usize) -> Result<Segment, Fail> {
    let seg_name = SegmentName::new(name).map_err(crate::errors::os)?;
    // Populated: the pages are reserved anyway, and mapping them in one go is cheaper than a
    // fault per page during the copy.
    let opts = CreateOptions::new().populate(true);
    Segment::create_named(&seg_name, len.max(SEG_HEAD) as u64, opts).map_err(|e| match e {
        ring_os::Error::NoSpace { .. } => Fail::new(
            "NoSpace",
            format!(
                "a message of {len} bytes needs a shared-memory segment of its own and \
                     there is no room for it: {e} (the queue stays usable)"
            ),
        ),
        other => crate::errors::os(other),
    })
}

/// Opens the spill segment `name`, which must be `len` bytes.
fn open(name: &str, len: u64) -> Result<Segment, Fail> {
    if len < SEG_HEAD as u64 {
        return Err(Fail::new(
            "Corrupt",
            format!("not a valid spill record: a {len}-byte segment"),
        ));
    }
    let seg_name = SegmentName::new(name).map_err(crate::errors::os)?;
    Segment::open_named(&seg_name, SizeCheck::Exactly(len)).map_err(|e| match e {
        ring_os::Error::NotFound { .. } => Fail::new(
            "Corrupt",
            format!("the message's spill segment {name:?} is gone (removed by a cleaner?)"),
        ),
        other => crate::errors::os(other),
    })
}

/// The segment named `name` (any size but empty), if the name is valid and exists.
pub(crate) fn open_existing(name: &str) -> Option<Segment> {
    let seg_name = SegmentName::new(name).ok()?;
    Segment::open_named(&seg_name, SizeCheck::AtLeast(1)).ok()
}

/// Removes the name `name` if it still exists (already removed: nothing to do).
pub(crate) fn remove(name: &str) {
    if let Some(seg) = open_existing(name) {
        // Removes the name only while it names the file just opened.
        let _ = seg.unlink();
    }
}

/// A spill segment a reader mapped for one message, and the message's generation.
pub(crate) struct Received {
    /// The mapping (shared with the zero-copy parts that view it).
    pub(crate) seg: Arc<Segment>,
    name: String,
    generation: u64,
}

impl Received {
    /// The message in `seg` (named `name`): reads which generation it holds.
    fn of(seg: Arc<Segment>, name: &str) -> Self {
        // Relaxed: the sender wrote the word before it published the slot (Release), and this
        // reader pinned that slot (Acquire) before it read the record naming the segment.
        let generation = words(&seg).0.load(Ordering::Relaxed) / 4;
        Self {
            seg,
            name: name.to_owned(),
            generation,
        }
    }

    /// The parts' bytes: `(address, length)` after the header.
    pub(crate) fn data(&self) -> (usize, usize) {
        (
            self.seg.as_ptr().as_ptr() as usize + SEG_HEAD,
            self.seg.len() - SEG_HEAD,
        )
    }

    /// Acknowledges the message: its reader is done with the bytes (copied, or every view of
    /// them released), so the sender may reuse the segment; removes the name when the sender
    /// will not (gone after this generation).
    pub(crate) fn done(&self) {
        let (state, gone) = words(&self.seg);
        let g = self.generation;
        // SeqCst: the acknowledgement and the gone check below, against the sender's gone
        // store and state check in `Pool::drop` (one of the two sides sees the other's store,
        // so one of them removes the name). Release part: this reader's reads of the parts
        // happen before the sender's Acquire load that sees DONE lets it write them again.
        let acked = state
            .compare_exchange(
                g.wrapping_mul(4) | SENT,
                g.wrapping_mul(4) | DONE,
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok();
        // SeqCst: see above.
        if acked && gone.load(Ordering::SeqCst) == g.wrapping_add(1) {
            remove(&self.name);
        }
    }
}

/// The spill segments a reader mapped, kept for the next messages the sender puts in them (it
/// reuses its pooled segments): a message in a kept segment costs no `open`, `mmap` and page
/// faults. At most [`KEEP`] (the sender's pool), the least recently used dropped first; one the
/// sender marked gone (outside its pool, removed when idle, or the sender closed) is dropped at
/// the next open, so a reader keeps the memory of a removed segment only until its next `get`
/// (or its close). A kept segment is known by name and length: the sender never makes two
/// segments of one name (the name carries the sequence number and a random tag); a hostile one
/// that replaces a name under a reader only shows it stale bytes of the old file.
#[derive(Default)]
pub(crate) struct Mapped {
    kept: std::sync::Mutex<Vec<(String, u64, Arc<Segment>)>>,
}

impl Mapped {
    /// The message in the spill segment `name` of `len` bytes: a kept mapping, else the
    /// segment opened now (and kept unless the sender marked it gone).
    pub(crate) fn open(&self, name: &str, len: u64) -> Result<Received, Fail> {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Relaxed: a hint only; a segment dropped late or early is only opened once more.
        kept.retain(|(_, _, seg)| words(seg).1.load(Ordering::Relaxed) == 0);
        if let Some(i) = kept.iter().position(|(n, l, _)| n == name && *l == len) {
            let entry = kept.remove(i);
            let seg = Arc::clone(&entry.2);
            kept.push(entry); // the most recently used last
            return Ok(Received::of(seg, name));
        }
        let seg = Arc::new(open(name, len)?);
        // Relaxed: as above.
        if words(&seg).1.load(Ordering::Relaxed) == 0 {
            if kept.len() >= KEEP {
                kept.remove(0);
            }
            kept.push((name.to_owned(), len, Arc::clone(&seg)));
        }
        Ok(Received::of(seg, name))
    }

    /// How many segments are kept (for the tests).
    pub(crate) fn kept(&self) -> usize {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// One segment of a sender's pool.
struct Pooled {
    /// Shared with the in-place claims (`QueueClaim`) whose buffers lie in it.
    seg: Arc<Segment>,
    name: String,
    /// The generation of the message it holds or held last.
    generation: u64,
    /// The slot whose message it holds, while that message may be unread.
    busy: Option<usize>,
    /// When it last took a message.
    used: Instant,
}

impl Pooled {
    /// Marks the segment gone after its generation (so a reader that keeps it mapped lets it
    /// go, see [`Mapped`]) and removes the name while it names this segment (the mapping goes
    /// with the last reference).
    fn remove(self) {
        // SeqCst: as the busy segments' mark in `Pool::drop`.
        words(&self.seg)
            .1
            .store(self.generation.wrapping_add(1), Ordering::SeqCst);
        let _ = self.seg.unlink();
    }
}

/// Where a spilled message goes (see [`Pool::target`]).
pub(crate) struct Target {
    pub(crate) name: String,
    /// The segment's whole length (the record's).
    pub(crate) len: usize,
    generation: u64,
    /// A pooled segment reused: its index in the pool and the segment.
    reuse: Option<(usize, Arc<Segment>)>,
    /// A new segment joins the pool (else it is gone from the start).
    keep: bool,
}

impl Target {
    /// The address of the data of a reused segment (`None`: one to create).
    pub(crate) fn reused_data(&self) -> Option<usize> {
        self.reuse
            .as_ref()
            .map(|(_, seg)| seg.as_ptr().as_ptr() as usize + SEG_HEAD)
    }

    /// The reused segment (`None`: one to create).
    pub(crate) fn reused(&self) -> Option<&Arc<Segment>> {
        self.reuse.as_ref().map(|(_, seg)| seg)
    }

    /// Creates the new segment this target names and writes its header; returns it and the
    /// address of its data. Runs without the GIL.
    pub(crate) fn create(&self) -> Result<(Segment, usize), Fail> {
        let seg = create(&self.name, self.len)?;
        let (state, gone) = words(&seg);
        // Relaxed: published to readers by the slot's Release publish.
        state.store(self.generation.wrapping_mul(4) | SENT, Ordering::Relaxed);
        let gone_at = if self.keep {
            0
        } else {
            self.generation.wrapping_add(1)
        };
        // Relaxed: as `state`.
        gone.store(gone_at, Ordering::Relaxed);
        let data = seg.as_ptr().as_ptr() as usize + SEG_HEAD;
        Ok((seg, data))
    }
}

/// A sender's spill segments kept for reuse (see the module doc).
#[derive(Default)]
pub(crate) struct Pool {
    kept: Vec<Pooled>,
    /// The last generation handed out.
    generation: u64,
}

impl Pool {
    /// Takes back the segments whose messages were acknowledged, and removes those idle for
    /// longer than [`IDLE`].
    fn collect(&mut self, now: Instant) {
        for p in &mut self.kept {
            if p.busy.is_none() {
                continue;
            }
            let (state, _) = words(&p.seg);
            // Acquire: pairs with the reader's acknowledgement (`Received::done`), so its reads
            // of the old parts happen before this sender writes new ones.
            if state.load(Ordering::Acquire) == p.generation.wrapping_mul(4) | DONE {
                p.busy = None;
            }
        }
        let (old, kept): (Vec<_>, Vec<_>) = core::mem::take(&mut self.kept)
            .into_iter()
            .partition(|p| p.busy.is_none() && now.duration_since(p.used) > IDLE);
        self.kept = kept;
        old.into_iter().for_each(Pooled::remove);
    }

    /// Slot `index` was claimed again (by any `put`): the message it held is consumed. Also
    /// takes back acknowledged segments and removes old idle ones.
    pub(crate) fn reclaim(&mut self, index: usize) {
        if self.kept.is_empty() {
            return;
        }
        for p in self.kept.iter_mut().filter(|p| p.busy == Some(index)) {
            p.busy = None;
        }
        self.collect(Instant::now());
    }

    /// Where the spilled message of sequence number `seq` of queue `queue`, `data` bytes of
    /// parts, goes: the smallest idle pooled segment that holds it, else a new one (pooled
    /// while the pool has room, idle segments too small for it removed first). `None` on
    /// overflow.
    pub(crate) fn target(&mut self, queue: &str, seq: u64, data: usize) -> Option<Target> {
        self.collect(Instant::now());
        self.generation += 1;
        let generation = self.generation;
        let fits = self
            .kept
            .iter()
            .enumerate()
            .filter(|(_, p)| p.busy.is_none() && p.seg.len() - SEG_HEAD >= data)
            .min_by_key(|(_, p)| p.seg.len())
            .map(|(i, _)| i);
        if let Some(i) = fits {
            let p = &mut self.kept[i];
            p.generation = generation;
            let (state, gone) = words(&p.seg);
            // Relaxed: published to readers by the slot's Release publish; the last reader of
            // the segment acknowledged (Acquire in `collect`) or its slot was claimed again.
            gone.store(0, Ordering::Relaxed);
            state.store(generation.wrapping_mul(4) | SENT, Ordering::Relaxed);
            return Some(Target {
                name: p.name.clone(),
                len: p.seg.len(),
                generation,
                reuse: Some((i, Arc::clone(&p.seg))),
                keep: true,
            });
        }
        // A new segment: the idle ones are all too small, so they go first.
        let (idle, busy): (Vec<_>, Vec<_>) = core::mem::take(&mut self.kept)
            .into_iter()
            .partition(|p| p.busy.is_none());
        self.kept = busy;
        idle.into_iter().for_each(Pooled::remove);
        Some(Target {
            name: name(queue, seq),
            len: segment_len(data)?,
            generation,
            reuse: None,
            keep: self.kept.len() < KEEP,
        })
    }

    /// The message of `target` was written into `created` (a new segment) or its reused one,
    /// for slot `index`: the segment is busy until the message is consumed. Returns the name
    /// of a segment outside the pool (the slot's to remove when it comes round again).
    pub(crate) fn sent(
        &mut self,
        target: &Target,
        created: Option<Arc<Segment>>,
        index: usize,
    ) -> Option<String> {
        if let Some((i, _)) = &target.reuse {
            let i = *i;
            if let Some(p) = self.kept.get_mut(i) {
                p.busy = Some(index);
                p.used = Instant::now();
            }
            return None;
        }
        let seg = created?;
        if !target.keep {
            return Some(target.name.clone());
        }
        self.kept.push(Pooled {
            seg,
            name: target.name.clone(),
            generation: target.generation,
            busy: Some(index),
            used: Instant::now(),
        });
        None
    }
}

impl Drop for Pool {
    /// Removes the idle segments; marks the busy ones gone after their generation, so their
    /// readers remove them once they have the message (removed here when one already did).
    fn drop(&mut self) {
        for p in core::mem::take(&mut self.kept) {
            if p.busy.is_none() {
                p.remove();
                continue;
            }
            let (state, gone) = words(&p.seg);
            // SeqCst: against the reader's acknowledgement and gone check (`Received::done`).
            gone.store(p.generation.wrapping_add(1), Ordering::SeqCst);
            // SeqCst: as above.
            if state.load(Ordering::SeqCst) == p.generation.wrapping_mul(4) | DONE {
                p.remove();
            }
        }
    }
}
