//! The allocator's error type.

use core::fmt;

/// A header word checked by [`Allocator::attach`](super::Allocator::attach).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderField {
    /// Word 0: the magic `"RINGALC1"` (absent until `init` finished: the init barrier).
    Magic,
    /// Word 1: the region format version.
    Version,
    /// Word 2: the granule size in bytes.
    Granule,
    /// Word 3: the arena size in bytes.
    ArenaBytes,
    /// Word 4: the live-allocation ceiling (entry count).
    MaxLive,
    /// Word 6: the entry table's word offset.
    EntriesOffset,
    /// Word 7: the owner table's word offset.
    OwnersOffset,
    /// Word 8: the bitmap's word offset.
    BitmapOffset,
    /// Word 9: the arena's word offset.
    ArenaOffset,
    /// Word 10: the region's length in words.
    TotalWords,
    /// Words 11..16: reserved, must be zero.
    Reserved,
}

impl fmt::Display for HeaderField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Magic => "magic",
            Self::Version => "version",
            Self::Granule => "granule size",
            Self::ArenaBytes => "arena size",
            Self::MaxLive => "live-allocation ceiling",
            Self::EntriesOffset => "entry table offset",
            Self::OwnersOffset => "owner table offset",
            Self::BitmapOffset => "bitmap offset",
            Self::ArenaOffset => "arena offset",
            Self::TotalWords => "region length",
            Self::Reserved => "reserved word",
        })
    }
}

/// Why an allocator call failed. Nothing here is a panic: bad arguments, full ceilings and
/// corrupt shared metadata all come back as one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocError {
    /// `alloc` was asked for zero bytes.
    ZeroSize,
    /// The owner id is not below [`MAX_OWNERS`](super::MAX_OWNERS).
    BadOwner {
        /// The owner id given.
        owner: u16,
    },
    /// The live-allocation ceiling is reached: free something first.
    LiveCeiling {
        /// The ceiling.
        max_live: u32,
    },
    /// The allocation would take live (requested) bytes past the byte ceiling.
    ByteCeiling {
        /// The ceiling in bytes.
        ceiling: u64,
        /// Bytes live before this request.
        live_bytes: u64,
        /// Bytes requested.
        requested: u64,
    },
    /// No run of free granules is long enough (the arena is full or fragmented).
    OutOfSpace {
        /// Bytes requested.
        requested: u64,
        /// The longest free run, in bytes.
        largest_free: u64,
    },
    /// The handle was freed already (and its entry not reused since).
    DoubleFree {
        /// The handle.
        handle: u64,
    },
    /// The handle belongs to another owner; nothing was freed.
    ForeignFree {
        /// The owner that tried to free.
        owner: u16,
        /// The owner that holds the allocation.
        actual: u16,
    },
    /// The handle does not name a live allocation: out of range, stale (its entry was reused,
    /// or freed while being read), or not matching the [`Allocation`](super::Allocation) given.
    InvalidHandle {
        /// The handle.
        handle: u64,
    },
    /// A bounded writer refused a write past its reservation; nothing was written.
    Overflow {
        /// Bytes reserved.
        reserved: u64,
        /// The end offset the refused write would have reached.
        attempted: u64,
    },
    /// The region given to `init` or `attach` is shorter than the geometry needs.
    RegionTooSmall {
        /// Bytes needed.
        needed: u64,
        /// Bytes given.
        actual: u64,
    },
    /// The configuration given to `init` is invalid (zero size, `max_live` above
    /// [`MAX_LIVE_LIMIT`](super::MAX_LIVE_LIMIT), or a size that overflows).
    BadConfig,
    /// A header word of an attached region is wrong: the region is not (or not yet) an
    /// allocator region of this version, or it was overwritten.
    BadHeader {
        /// Which word.
        field: HeaderField,
        /// The value found.
        found: u64,
    },
    /// Shared metadata is inconsistent (an entry, the bitmap or a counter was overwritten by a
    /// peer). The allocator refused to act on it.
    Corrupt {
        /// What was inconsistent.
        what: &'static str,
        /// The entry index or granule concerned.
        index: u64,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroSize => f.write_str("zero-size allocation requested"),
            Self::BadOwner { owner } => write!(
                f,
                "owner id {owner} is out of range (owners are 0..{})",
                super::MAX_OWNERS
            ),
            Self::LiveCeiling { max_live } => write!(
                f,
                "live-allocation ceiling of {max_live} reached: free allocations (see the leak report)"
            ),
            Self::ByteCeiling { ceiling, live_bytes, requested } => write!(
                f,
                "byte ceiling of {ceiling} B would be exceeded: {live_bytes} B live + {requested} B requested"
            ),
            Self::OutOfSpace { requested, largest_free } => write!(
                f,
                "no free run of {requested} B in the arena (largest free run: {largest_free} B)"
            ),
            Self::DoubleFree { handle } => write!(f, "handle {handle:#x} was already freed"),
            Self::ForeignFree { owner, actual } => write!(
                f,
                "owner {owner} tried to free an allocation held by owner {actual}; nothing freed"
            ),
            Self::InvalidHandle { handle } => {
                write!(f, "handle {handle:#x} does not name a live allocation")
            }
            Self::Overflow { reserved, attempted } => write!(
                f,
                "write refused: it would reach byte {attempted} of a {reserved}-byte reservation"
            ),
            Self::RegionTooSmall { needed, actual } => {
                write!(f, "allocator region too small: {needed} B needed, {actual} B given")
            }
            Self::BadConfig => f.write_str(
                "invalid allocator configuration: sizes must be non-zero, max_live at most 2^24, and the region size must fit in u64",
            ),
            Self::BadHeader { field, found } => {
                write!(f, "allocator region header: bad {field} ({found:#x})")
            }
            Self::Corrupt { what, index } => write!(
                f,
                "allocator metadata corrupt: {what} (index {index}); a peer overwrote the region"
            ),
        }
    }
}

impl core::error::Error for AllocError {}

#[cfg(feature = "alloc")]
/// Why the payload binding ([`PayloadProducer`](super::PayloadProducer),
/// [`PayloadReader`](super::PayloadReader)) refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadError {
    /// The allocator refused (ceiling, out of space, invalid handle, corrupt region).
    Alloc(AllocError),
    /// The ring refused the publish.
    Claim(crate::ClaimError),
    /// A message claims more bytes than the reader's bound (nothing was allocated).
    TooLarge {
        /// The length the message claims.
        len: u64,
        /// The reader's bound.
        max: u64,
    },
}

#[cfg(feature = "alloc")]
impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Alloc(e) => write!(f, "allocator: {e}"),
            Self::Claim(e) => write!(f, "{e}"),
            Self::TooLarge { len, max } => write!(
                f,
                "message of {len} bytes exceeds the reader's bound of {max} bytes: read it with a larger bound"
            ),
        }
    }
}

#[cfg(feature = "alloc")]
impl core::error::Error for PayloadError {}

#[cfg(feature = "alloc")]
impl From<AllocError> for PayloadError {
    fn from(e: AllocError) -> Self {
        Self::Alloc(e)
    }
}
