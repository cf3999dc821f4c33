//! Word-index layout of the allocator region: constants, the geometry computation and
//! [`region_len`]. The table in the module doc of [`crate::alloc`] lists every word.

use static_assertions::const_assert_eq;

/// Magic word at word 0 of an initialised region: `"RINGALC1"` in little-endian byte order.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RINGALC1");
/// Version of the region format described in the module doc. Bumped on any layout change.
pub const VERSION: u64 = 1;
/// Allocation granule in bytes: every allocation starts on a granule and spans whole granules.
pub const GRANULE_BYTES: u64 = 64;
/// Number of owners with their own accounting record: owner ids are `0..MAX_OWNERS`.
pub const MAX_OWNERS: u16 = 64;
/// The default live-allocation ceiling (the figure RPC side channels ran into, see `docs/DESIGN.md`).
pub const DEFAULT_MAX_LIVE: u32 = 4094;
/// The largest accepted `max_live` (entry indices must fit the handle's low 32 bits with room).
pub const MAX_LIVE_LIMIT: u32 = 1 << 24;

/// Words per granule.
pub(crate) const GRANULE_WORDS: u64 = GRANULE_BYTES / 8;
/// Every sub-region starts on a 128-byte boundary (16 words): the cache-line size of the
/// architectures we care about (x86_64, aarch64), so the mutator's stats line does not share a
/// line with entries that readers poll.
pub(crate) const LINE_WORDS: u64 = 16;

// Header words (sub-region 0, words 0..16). Immutable after `init`.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 1;
pub(crate) const H_GRANULE: usize = 2;
pub(crate) const H_ARENA_BYTES: usize = 3;
pub(crate) const H_MAX_LIVE: usize = 4;
pub(crate) const H_BYTE_CEILING: usize = 5;
pub(crate) const H_ENTRIES_OFF: usize = 6;
pub(crate) const H_OWNERS_OFF: usize = 7;
pub(crate) const H_BITMAP_OFF: usize = 8;
pub(crate) const H_ARENA_OFF: usize = 9;
pub(crate) const H_TOTAL_WORDS: usize = 10;
/// First reserved header word; words `H_RESERVED..HEADER_WORDS` must be zero.
pub(crate) const H_RESERVED: usize = 11;
pub(crate) const HEADER_WORDS: usize = 16;

/// The global stats record follows the header.
pub(crate) const STATS_OFF: usize = HEADER_WORDS;

// Counter indices inside a stats record (global record and each owner's record alike).
pub(crate) const C_LIVE: usize = 0;
pub(crate) const C_LIVE_BYTES: usize = 1;
pub(crate) const C_PEAK_LIVE: usize = 2;
pub(crate) const C_PEAK_BYTES: usize = 3;
pub(crate) const C_ALLOCS: usize = 4;
pub(crate) const C_FREES: usize = 5;
pub(crate) const C_CEILING_HITS: usize = 6;
pub(crate) const C_OUT_OF_SPACE: usize = 7;
pub(crate) const C_BAD_FREES: usize = 8;
/// Words per stats record (9 used, padded to one 128-byte line).
pub(crate) const RECORD_WORDS: usize = 16;

/// The entry table follows the global stats record.
pub(crate) const ENTRIES_OFF: usize = STATS_OFF + RECORD_WORDS;

// Entry words (4 per entry).
pub(crate) const E_META: usize = 0;
pub(crate) const E_FIRST: usize = 1;
pub(crate) const E_LEN: usize = 2;
pub(crate) const E_STAMP: usize = 3;
pub(crate) const ENTRY_WORDS: usize = 4;

const_assert_eq!(GRANULE_BYTES % 8, 0);
const_assert_eq!(GRANULE_WORDS * 8, GRANULE_BYTES);
const_assert_eq!(LINE_WORDS * 8, 128);
const_assert_eq!(HEADER_WORDS as u64, LINE_WORDS);
const_assert_eq!(RECORD_WORDS as u64, LINE_WORDS);
const_assert_eq!(H_RESERVED, H_TOTAL_WORDS + 1);
const_assert_eq!(STATS_OFF, 16);
const_assert_eq!(ENTRIES_OFF, 32);
const_assert_eq!(ENTRIES_OFF as u64 % LINE_WORDS, 0);
const_assert_eq!(C_BAD_FREES + 1, 9);
const_assert_eq!(E_STAMP + 1, ENTRY_WORDS);
const_assert_eq!(MAX_OWNERS as usize * RECORD_WORDS, 1024);

/// `?` for `Option` inside a `const fn`.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return None,
        }
    };
}

/// Rounds `words` up to a whole number of lines.
const fn round_line(words: u64) -> Option<u64> {
    Some(tri!(words.checked_add(LINE_WORDS - 1)) / LINE_WORDS * LINE_WORDS)
}

/// The geometry of a region, as word offsets from the start of the region. Computed from
/// `(arena_bytes, max_live)` alone, so `attach` recomputes it and compares with the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Arena size in bytes, rounded up to whole granules.
    pub arena_bytes: u64,
    /// Number of granules in the arena.
    pub granules: u64,
    /// Number of entries in the entry table.
    pub max_live: u32,
    /// Word offset of the entry table.
    pub entries_off: u64,
    /// Word offset of the owner table.
    pub owners_off: u64,
    /// Word offset of the free-granule bitmap.
    pub bitmap_off: u64,
    /// Word offset of the arena.
    pub arena_off: u64,
    /// Words in the whole region (a multiple of [`LINE_WORDS`]).
    pub total_words: u64,
}

impl Geometry {
    /// The geometry for an arena of at least `arena_bytes` bytes and `max_live` entries, or
    /// `None` when a size is zero, `max_live` exceeds [`MAX_LIVE_LIMIT`], or a byte count
    /// overflows `u64`.
    pub(crate) const fn compute(arena_bytes: u64, max_live: u32) -> Option<Self> {
        if arena_bytes == 0 || max_live == 0 || max_live > MAX_LIVE_LIMIT {
            return None;
        }
        let granules = tri!(arena_bytes.checked_add(GRANULE_BYTES - 1)) / GRANULE_BYTES;
        let rounded_arena = tri!(granules.checked_mul(GRANULE_BYTES));
        let entries_off = ENTRIES_OFF as u64;
        let entry_words = tri!(round_line(max_live as u64 * ENTRY_WORDS as u64));
        let owners_off = tri!(entries_off.checked_add(entry_words));
        let bitmap_off = tri!(owners_off.checked_add(MAX_OWNERS as u64 * RECORD_WORDS as u64));
        let bitmap_words = tri!(round_line(granules.div_ceil(64)));
        let arena_off = tri!(bitmap_off.checked_add(bitmap_words));
        let arena_words = tri!(round_line(tri!(granules.checked_mul(GRANULE_WORDS))));
        let total_words = tri!(arena_off.checked_add(arena_words));
        // The region's byte length must be representable too.
        tri!(total_words.checked_mul(8));
        Some(Self {
            arena_bytes: rounded_arena,
            granules,
            max_live,
            entries_off,
            owners_off,
            bitmap_off,
            arena_off,
            total_words,
        })
    }
}

/// Bytes a region needs for an arena of `arena_bytes` bytes (rounded up to whole
/// [`GRANULE_BYTES`] granules) and `max_live` live allocations, metadata included. Always a
/// multiple of 128. `None` when a size is zero, `max_live` exceeds [`MAX_LIVE_LIMIT`], or the
/// size overflows `u64`.
///
/// # Examples
///
/// ```
/// use ring_core::arena::{region_len, DEFAULT_MAX_LIVE};
///
/// let bytes = region_len(1 << 20, DEFAULT_MAX_LIVE).unwrap();
/// assert_eq!(bytes % 128, 0);
/// assert!(bytes > 1 << 20);
/// assert_eq!(region_len(u64::MAX, DEFAULT_MAX_LIVE), None);
/// assert_eq!(region_len(4096, 0), None);
/// ```
pub const fn region_len(arena_bytes: u64, max_live: u32) -> Option<u64> {
    match Geometry::compute(arena_bytes, max_live) {
        Some(g) => g.total_words.checked_mul(8),
        None => None,
    }
}

// The smallest region: 1 granule, 1 entry.
const_assert_eq!(
    match region_len(1, 1) {
        Some(n) => n,
        None => 0,
    },
    (32 + 16 + 1024 + 16 + 16) * 8
);
