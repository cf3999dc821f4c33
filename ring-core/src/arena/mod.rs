//! The in-segment allocator: variable-size payload regions carved out of an arena inside the
//! shared segment, with a live-allocation ceiling, a byte ceiling, per-owner accounting, a leak
//! report, double/foreign-free detection and a hard-bounded writer.
//!
//! All state lives in the region the caller provides, a slice of `AtomicU64` words (the
//! crate's sync façade type, so the same code runs over loom's model atomics); nothing is
//! allocated on the heap and no byte is reinterpreted as a struct. `ring-os` places the region
//! in a segment and exposes it; this module is the algorithm.
//!
//! # Region layout
//!
//! Every offset is in 8-byte words from the start of the region; every sub-region starts on a
//! 128-byte line. `E = max_live`, `G = ceil(arena_bytes / 64)` granules, `round(x)` rounds up
//! to a multiple of 16 words. The layout is a pure function of `(arena_bytes, max_live)`, so
//! [`Allocator::attach`] recomputes it and compares it with the header word by word
//! (`const` assertions in `layout.rs` pin the fixed indices).
//!
//! | words | what | encoding / writers |
//! |-------|------|--------------------|
//! | 0 | magic | `"RINGALC1"` LE; stored last by `init` (Release): the init barrier |
//! | 1 | version | [`VERSION`] |
//! | 2 | granule | [`GRANULE_BYTES`] (64) |
//! | 3 | arena_bytes | `G * 64` |
//! | 4 | max_live | `E`, `1..=`[`MAX_LIVE_LIMIT`] |
//! | 5 | byte_ceiling | live requested bytes allowed (any value) |
//! | 6 | entries offset | 32 |
//! | 7 | owners offset | `32 + round(4E)` |
//! | 8 | bitmap offset | owners offset + 64 × 16 |
//! | 9 | arena offset | bitmap offset + `round(ceil(G / 64))` |
//! | 10 | total words | arena offset + `round(8G)` |
//! | 11..16 | reserved | zero |
//! | 16..32 | global stats | 9 counters, see [`Stats`] and `stats.rs` |
//! | 32.. | entry table | `E` entries of 4 words: meta, first granule, len, stamp (`entry.rs`) |
//! | owners.. | owner table | [`MAX_OWNERS`] stats records of 16 words |
//! | bitmap.. | granule bitmap | bit `g` set while granule `g` is allocated (`bitmap.rs`) |
//! | arena.. | arena | payload bytes, 8 per word, little-endian |
//!
//! Words 0..16 are written once by [`Allocator::init`]. Everything else is written by the
//! single mutator only (the segment's producer, through `&mut self`).
//!
//! # Algorithm and complexity
//!
//! Allocations take whole 64-byte granules. `alloc` checks the ceilings (O(1)), finds a free
//! entry by a scan from a rotating hint (O(E)), then a run of free granules by **next-fit with
//! the rover moved back on free**: a rover remembers where the last allocation ended and the
//! search continues from there, wrapping once (O(G / 64) word steps plus the bits inspected at
//! run boundaries); a `free` of a run that starts before the rover moves the rover back to that
//! run, and the last `free` (nothing live) puts it at granule 0. So a block freed and allocated
//! again reuses the same bytes, still in the cache, instead of the cold stretch after the rover
//! (measured with `shmring.vgi`, docs/benchmarks.md: a 4 MiB write about 3x slower into a cold
//! stretch), and allocations freed in the order they were made (a FIFO, as the Python queue's)
//! find the hole the oldest left first. The rover is the mutator's own: placement is not part
//! of the region's protocol. `free` is O(granules of the allocation / 64). `free_all_of` and
//! `leak_report` scan the entry table (O(E)); `OutOfSpace` computes the largest free run
//! (O(G / 64)). Measured (release, x86_64, 3070 live of 4094, sizes 64 B..4 KiB, 16-256 MiB
//! arena): a free + alloc pair about 200 ns, a full leak report about 35-45 µs.
//!
//! # Concurrency
//!
//! One mutator; any number of readers, possibly in other processes, calling [`Allocator::stats`],
//! [`Allocator::owner_stats`], [`Allocator::lookup`], [`Allocator::read`] and
//! [`Allocator::leak_report`]. Stats are `Relaxed` counters (exact one by one, not a snapshot).
//! An entry is read like a seqlock: meta `Acquire`, fields `Relaxed`, `fence(Acquire)`, meta
//! re-check; `alloc` issues `fence(Release)` before it rewrites an entry's fields and stores its
//! meta `Release`. Arena bytes are `Relaxed` word loads and stores; that an allocation's bytes
//! are complete is for the ring protocol to publish, not the allocator. A handle a reader looked
//! up may be freed right after: `read` re-checks the entry after copying and reports the handle
//! invalid if it changed.
//!
//! # Untrusted region
//!
//! `attach` checks every header word (magic, version, granule, sizes, each offset, reserved
//! words) with overflow-checked arithmetic and keeps a local copy of the geometry. Entry words are
//! re-validated every time they are read (state, owner, range inside the arena, bitmap agreement
//! on free); a peer that scribbles over the region gets [`AllocError::Corrupt`], never a panic
//! or an out-of-bounds access.
//!
//! # References
//!
//! Next-fit: D. E. Knuth, *The Art of Computer Programming* vol. 1, §2.5 (exercise 6); that a
//! rover which never looks back scatters allocations over the arena and fragments it more than
//! address-ordered first fit: Wilson et al. (below), on next fit. Granule bitmaps: the
//! "bitmapped" allocators of Wilson et al., *Dynamic Storage Allocation: A Survey and Critical
//! Review* (1995), §4.3. Generation-tagged handles: the slot-map / generational index pattern.
//! The 4094 live-allocation ceiling and the hard-bounded writer come from the RPC side-channel
//! experience recorded in `docs/DESIGN.md`.

mod bitmap;
mod entry;
mod error;
mod layout;
mod ops;
#[cfg(feature = "alloc")]
mod payload;
mod report;
mod stats;
mod writer;

#[cfg(all(test, not(ring_loom)))]
mod tests;
#[cfg(all(test, not(ring_loom)))]
mod tests_hostile;

pub use error::{AllocError, HeaderField};
pub use layout::{
    region_len, DEFAULT_MAX_LIVE, GRANULE_BYTES, MAGIC, MAX_LIVE_LIMIT, MAX_OWNERS, VERSION,
};
#[cfg(feature = "alloc")]
pub use payload::{
    leak_report, owner_stats, stats, Clock, PayloadError, PayloadProducer, PayloadReader,
    PRODUCER_OWNER,
};
pub use stats::{Freed, Leak, LeakTotals, OwnerStats, Stats};
pub use writer::BoundedWriter;

use crate::sync::{AtomicU64, Ordering};
use bitmap::Bitmap;
use layout::{
    Geometry, HEADER_WORDS, H_ARENA_BYTES, H_ARENA_OFF, H_BITMAP_OFF, H_BYTE_CEILING,
    H_ENTRIES_OFF, H_GRANULE, H_MAGIC, H_MAX_LIVE, H_OWNERS_OFF, H_RESERVED, H_TOTAL_WORDS,
    H_VERSION, MAX_LIVE_LIMIT as LIMIT, RECORD_WORDS, STATS_OFF,
};
use stats::Record;

/// What [`Allocator::init`] formats a region for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocConfig {
    /// Arena size in bytes (rounded up to whole [`GRANULE_BYTES`] granules).
    pub arena_bytes: u64,
    /// Live-allocation ceiling: the entry table's size. [`DEFAULT_MAX_LIVE`] unless you know
    /// better.
    pub max_live: u32,
    /// Ceiling on the requested bytes of all live allocations together.
    pub byte_ceiling: u64,
}

impl AllocConfig {
    /// An arena of `arena_bytes` with the default live ceiling and a byte ceiling equal to the
    /// arena size (so only the arena bounds it).
    pub const fn new(arena_bytes: u64) -> Self {
        Self {
            arena_bytes,
            max_live: DEFAULT_MAX_LIVE,
            byte_ceiling: arena_bytes,
        }
    }
}

/// A live allocation: what `alloc` returns and `lookup` confirms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Allocation {
    /// `generation << 32 | entry index`; stale once the allocation is freed and its entry reused.
    pub handle: u64,
    /// Byte offset of the allocation in the arena (a multiple of [`GRANULE_BYTES`]).
    pub offset: u64,
    /// Requested length in bytes; the writer refuses to write past it.
    pub len: u64,
}

/// The allocator over one region. See the module doc for the layout and the rules.
pub struct Allocator<'a> {
    /// Header words (immutable after `init`).
    header: &'a [AtomicU64],
    /// Global stats record.
    stats: Record<'a>,
    /// Entry table, at least `4 * max_live` words.
    entries: &'a [AtomicU64],
    /// Owner table, `MAX_OWNERS` records.
    owners: &'a [AtomicU64],
    /// Granule bitmap.
    bitmap: Bitmap<'a>,
    /// Arena words, at least `8 * granules`.
    arena: &'a [AtomicU64],
    /// The validated geometry; the header is never re-read for it.
    geometry: Geometry,
    /// The validated byte ceiling.
    byte_ceiling: u64,
    /// Mutator-local count of live entries (decisions never trust the shared counters).
    live: u32,
    /// Mutator-local sum of live requested bytes.
    live_bytes: u64,
    /// Next-fit rover: where the next search for free granules starts (the granule after
    /// the last allocation, or the lowest granule freed since, see `release`).
    rover: u64,
    /// Where the next free-entry scan starts.
    entry_hint: u32,
}

impl core::fmt::Debug for Allocator<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Allocator")
            .field("geometry", &self.geometry)
            .field("byte_ceiling", &self.byte_ceiling)
            .field("live", &self.live)
            .field("live_bytes", &self.live_bytes)
            .finish_non_exhaustive()
    }
}

/// An allocator's validated geometry and mutator-local state without its region: what a
/// holder of the memory keeps between operations (the payload binding), so that no allocator
/// has to borrow the memory it is stored beside.
#[cfg(feature = "alloc")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Detached {
    geometry: Geometry,
    byte_ceiling: u64,
    live: u32,
    live_bytes: u64,
    rover: u64,
    entry_hint: u32,
}

/// Bytes in `words` words, saturating (for error reports).
fn bytes_of(words: usize) -> u64 {
    (words as u64).saturating_mul(8)
}

impl<'a> Allocator<'a> {
    /// Splits `words` along `g`, checking that it is long enough.
    fn build(words: &'a [AtomicU64], g: Geometry, byte_ceiling: u64) -> Result<Self, AllocError> {
        let needed = g.total_words.saturating_mul(8);
        let too_small = AllocError::RegionTooSmall {
            needed,
            actual: bytes_of(words.len()),
        };
        let total = usize::try_from(g.total_words).map_err(|_| too_small)?;
        let words = words.get(..total).ok_or(too_small)?;
        // All offsets are <= total (Geometry::compute adds them up monotonically), hence fit.
        let off = |w: u64| usize::try_from(w).map_err(|_| too_small);
        let (eo, oo, bo, ao) = (
            off(g.entries_off)?,
            off(g.owners_off)?,
            off(g.bitmap_off)?,
            off(g.arena_off)?,
        );
        let part = |a: usize, b: usize| words.get(a..b).ok_or(too_small);
        let bitmap = part(bo, ao)?;
        Ok(Self {
            header: part(0, HEADER_WORDS)?,
            stats: Record(part(STATS_OFF, STATS_OFF + RECORD_WORDS)?),
            entries: part(eo, oo)?,
            owners: part(oo, bo)?,
            bitmap: Bitmap::new(bitmap, g.granules),
            arena: part(ao, total)?,
            geometry: g,
            byte_ceiling,
            live: 0,
            live_bytes: 0,
            rover: 0,
            entry_hint: 0,
        })
    }

    /// Formats `words` as an empty allocator region for `config` and returns its mutator.
    ///
    /// `words` must hold at least [`region_len`]`(config.arena_bytes, config.max_live) / 8`
    /// words; extra words are left alone. No other process may use the region while it is
    /// formatted: the magic word is cleared first and stored last (`Release`), so an `attach`
    /// that races with `init` fails with [`HeaderField::Magic`] rather than seeing half a
    /// header. Arena contents are not cleared: a fresh allocation holds whatever was there.
    ///
    /// # Errors
    ///
    /// [`AllocError::BadConfig`] for a zero size, `max_live` above [`MAX_LIVE_LIMIT`] or an
    /// overflowing size; [`AllocError::RegionTooSmall`] when `words` is too short.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::AtomicU64;
    /// use ring_core::arena::{region_len, AllocConfig, Allocator};
    ///
    /// let config = AllocConfig { arena_bytes: 4096, max_live: 16, byte_ceiling: 2048 };
    /// let words: Vec<AtomicU64> =
    ///     (0..region_len(4096, 16).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let mut alloc = Allocator::init(&words, config)?;
    /// let a = alloc.alloc(100, 3, 0)?;
    /// assert_eq!((a.offset, a.len), (0, 100));
    /// assert_eq!(alloc.stats().live, 1);
    /// # Ok::<(), ring_core::arena::AllocError>(())
    /// ```
    pub fn init(words: &'a [AtomicU64], config: AllocConfig) -> Result<Self, AllocError> {
        let g =
            Geometry::compute(config.arena_bytes, config.max_live).ok_or(AllocError::BadConfig)?;
        let this = Self::build(words, g, config.byte_ceiling)?;
        // Relaxed everywhere below: the region is published by the magic store at the end.
        this.header[H_MAGIC].store(0, Ordering::Relaxed);
        let fields = [
            (H_VERSION, VERSION),
            (H_GRANULE, GRANULE_BYTES),
            (H_ARENA_BYTES, g.arena_bytes),
            (H_MAX_LIVE, u64::from(g.max_live)),
            (H_BYTE_CEILING, config.byte_ceiling),
            (H_ENTRIES_OFF, g.entries_off),
            (H_OWNERS_OFF, g.owners_off),
            (H_BITMAP_OFF, g.bitmap_off),
            (H_ARENA_OFF, g.arena_off),
            (H_TOTAL_WORDS, g.total_words),
        ];
        for (i, v) in fields {
            this.header[i].store(v, Ordering::Relaxed);
        }
        for w in &this.header[H_RESERVED..] {
            w.store(0, Ordering::Relaxed);
        }
        this.stats.clear();
        for w in this.entries.iter().chain(this.owners) {
            w.store(0, Ordering::Relaxed);
        }
        this.bitmap.clear_all();
        // Release: pairs with the Acquire load of the magic in `attach`, which then sees every
        // store above (the init barrier).
        this.header[H_MAGIC].store(MAGIC, Ordering::Release);
        Ok(this)
    }

    /// Attaches to a region formatted by [`init`](Self::init), treating its words as
    /// untrusted: every header word is validated before use. Readers attach to call the
    /// read-only methods; the producer re-attaches after a restart to mutate again (the live
    /// count and bytes it enforces ceilings with are recounted from the entry table).
    ///
    /// # Errors
    ///
    /// [`AllocError::BadHeader`] naming the first wrong header word,
    /// [`AllocError::RegionTooSmall`] when `words` is shorter than the header says.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::AtomicU64;
    /// use ring_core::arena::{DEFAULT_MAX_LIVE, region_len, AllocConfig, AllocError, Allocator, HeaderField};
    ///
    /// let words: Vec<AtomicU64> =
    ///     (0..region_len(4096, DEFAULT_MAX_LIVE).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let err = Allocator::attach(&words).unwrap_err();
    /// assert_eq!(err, AllocError::BadHeader { field: HeaderField::Magic, found: 0 });
    ///
    /// let mut producer = Allocator::init(&words, AllocConfig::new(4096))?;
    /// let a = producer.alloc(10, 0, 0)?;
    /// let reader = Allocator::attach(&words)?;
    /// assert_eq!(reader.lookup(a.handle)?, a);
    /// # Ok::<(), AllocError>(())
    /// ```
    pub fn attach(words: &'a [AtomicU64]) -> Result<Self, AllocError> {
        let header = words
            .get(..HEADER_WORDS)
            .ok_or(AllocError::RegionTooSmall {
                needed: bytes_of(HEADER_WORDS),
                actual: bytes_of(words.len()),
            })?;
        let bad = |field, found| AllocError::BadHeader { field, found };
        // Acquire: pairs with the Release store of the magic at the end of `init`.
        let magic = header[H_MAGIC].load(Ordering::Acquire);
        // Relaxed: the words below are immutable after `init`, ordered by the magic's Acquire.
        let word = |i: usize| header[i].load(Ordering::Relaxed);
        if magic != MAGIC {
            return Err(bad(HeaderField::Magic, magic));
        }
        if word(H_VERSION) != VERSION {
            return Err(bad(HeaderField::Version, word(H_VERSION)));
        }
        if word(H_GRANULE) != GRANULE_BYTES {
            return Err(bad(HeaderField::Granule, word(H_GRANULE)));
        }
        let arena_bytes = word(H_ARENA_BYTES);
        if arena_bytes == 0 || arena_bytes % GRANULE_BYTES != 0 {
            return Err(bad(HeaderField::ArenaBytes, arena_bytes));
        }
        let max_live = word(H_MAX_LIVE);
        let max_live = match u32::try_from(max_live) {
            Ok(m) if (1..=LIMIT).contains(&m) => m,
            _ => return Err(bad(HeaderField::MaxLive, max_live)),
        };
        let g = Geometry::compute(arena_bytes, max_live)
            .ok_or(bad(HeaderField::ArenaBytes, arena_bytes))?;
        let expected = [
            (H_ENTRIES_OFF, HeaderField::EntriesOffset, g.entries_off),
            (H_OWNERS_OFF, HeaderField::OwnersOffset, g.owners_off),
            (H_BITMAP_OFF, HeaderField::BitmapOffset, g.bitmap_off),
            (H_ARENA_OFF, HeaderField::ArenaOffset, g.arena_off),
            (H_TOTAL_WORDS, HeaderField::TotalWords, g.total_words),
        ];
        for (i, field, want) in expected {
            if word(i) != want {
                return Err(bad(field, word(i)));
            }
        }
        for i in H_RESERVED..HEADER_WORDS {
            if word(i) != 0 {
                return Err(bad(HeaderField::Reserved, word(i)));
            }
        }
        let mut this = Self::build(words, g, word(H_BYTE_CEILING))?;
        this.recount();
        Ok(this)
    }

    /// The allocator's state without its region, to [`rebind`](Self::rebind) later.
    #[cfg(feature = "alloc")]
    pub(crate) fn detach(&self) -> Detached {
        Detached {
            geometry: self.geometry,
            byte_ceiling: self.byte_ceiling,
            live: self.live,
            live_bytes: self.live_bytes,
            rover: self.rover,
            entry_hint: self.entry_hint,
        }
    }

    /// The allocator over `words` with a state [`detach`](Self::detach)ed from an allocator of
    /// the same region: no header is re-read (the geometry was validated when the state was
    /// attached), only the region's length is checked again.
    ///
    /// # Errors
    ///
    /// [`AllocError::RegionTooSmall`] when `words` is shorter than the geometry.
    #[cfg(feature = "alloc")]
    pub(crate) fn rebind(words: &'a [AtomicU64], d: Detached) -> Result<Self, AllocError> {
        let mut this = Self::build(words, d.geometry, d.byte_ceiling)?;
        this.live = d.live;
        this.live_bytes = d.live_bytes;
        this.rover = d.rover;
        this.entry_hint = d.entry_hint;
        Ok(this)
    }

    /// Recounts the mutator-local live count and bytes from the entry table, skipping
    /// inconsistent entries.
    fn recount(&mut self) {
        let (mut live, mut bytes) = (0u32, 0u64);
        for idx in 0..self.geometry.max_live {
            if let Ok(ops::Snap::Live { len, .. }) = self.snapshot(idx) {
                live += 1;
                bytes = bytes.saturating_add(len);
            }
        }
        self.live = live;
        self.live_bytes = bytes;
    }

    /// The live-allocation ceiling (entry count).
    pub fn max_live(&self) -> u32 {
        self.geometry.max_live
    }

    /// The arena size in bytes (a multiple of [`GRANULE_BYTES`]).
    pub fn arena_bytes(&self) -> u64 {
        self.geometry.arena_bytes
    }

    /// The ceiling on live requested bytes.
    pub fn byte_ceiling(&self) -> u64 {
        self.byte_ceiling
    }
}
