//! The portable parts of a segment's API: creation options, kinds, and the size check an
//! opener applies (shared by the Unix and Windows backends).

use std::path::PathBuf;

use crate::Error;

use crate::segment::SegmentName;

/// Options for creating a segment.
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateOptions {
    /// Back the segment with huge pages (memfd: `MFD_HUGETLB`; file: the path must be on
    /// hugetlbfs). Named segments live on tmpfs and refuse this with [`Error::HugePages`].
    pub huge_pages: bool,
    /// Pre-fault the mapping (`MAP_POPULATE`) so first touches do not page-fault.
    pub populate: bool,
}

impl CreateOptions {
    /// The defaults: ordinary pages, no pre-faulting.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            huge_pages: false,
            populate: false,
        }
    }

    /// Sets [`huge_pages`](Self::huge_pages).
    #[must_use]
    pub const fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// Sets [`populate`](Self::populate).
    #[must_use]
    pub const fn populate(mut self, on: bool) -> Self {
        self.populate = on;
        self
    }
}

/// Where a segment's file lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// A POSIX shared-memory object.
    Named(SegmentName),
    /// An anonymous, sealed memfd.
    Memfd,
    /// A file at a path.
    File(PathBuf),
}

/// What size an opened segment file must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeCheck {
    /// Exactly this many bytes (the caller knows the geometry).
    Exactly(u64),
    /// At least this many bytes (the caller reads the geometry from the header afterwards and
    /// checks it against the mapped length).
    AtLeast(u64),
}

impl SizeCheck {
    /// Whether `actual` passes.
    pub(crate) fn check(self, actual: u64) -> Result<(), Error> {
        match self {
            Self::Exactly(expected) if actual != expected => {
                Err(Error::SizeMismatch { expected, actual })
            }
            Self::AtLeast(expected) if actual < expected => {
                Err(Error::SizeMismatch { expected, actual })
            }
            _ => Ok(()),
        }
    }
}
