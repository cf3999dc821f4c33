//! The crate's error type: every failure a caller can see, each with a message that says what
//! to do about it.

use core::fmt;
use core::time::Duration;
use std::collections::HashMap;

use crate::handle::ResourceKind;

/// Everything that can go wrong in `ring-cuda`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (`libcuda.so`) could not be loaded: no NVIDIA driver on this
    /// machine, or it is not on the loader path.
    NoDriver,
    /// The driver loaded, but it reports no usable device (none installed, none visible to this
    /// container, or `CUDA_VISIBLE_DEVICES` hides them all).
    NoDevice,
    /// The requested device ordinal does not exist.
    BadOrdinal {
        /// Ordinal asked for.
        ordinal: u32,
        /// Devices present.
        count: u32,
    },
    /// A driver call failed.
    Driver {
        /// The driver entry point that failed.
        call: &'static str,
        /// The `CUresult` code.
        code: u32,
    },
    /// The allocation (buffers) or open (mappings) would take the bytes of that kind past its
    /// configured ceiling.
    BytesCeiling {
        /// Buffers ([`Limits::max_bytes`](crate::Limits::max_bytes)) or mappings
        /// ([`Limits::max_mapped_bytes`](crate::Limits::max_mapped_bytes)).
        kind: ResourceKind,
        /// Bytes asked for (padded as the driver pads them).
        requested: u64,
        /// Bytes live now.
        live: u64,
        /// The ceiling.
        limit: u64,
    },
    /// The allocation would take the live count of this kind of resource past its ceiling.
    CountCeiling {
        /// What kind of resource.
        kind: ResourceKind,
        /// Live count now.
        live: u32,
        /// The ceiling.
        limit: u32,
    },
    /// The device has no room left for the allocation (below the configured ceiling).
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
    },
    /// A zero-length or absurdly long allocation, copy or fill.
    InvalidLength {
        /// Length asked for.
        len: u64,
    },
    /// An id that this device never issued, or one already freed/closed/destroyed.
    UnknownId {
        /// What kind of resource the id named.
        kind: ResourceKind,
        /// The raw id.
        id: u64,
    },
    /// An access outside a buffer or mapping.
    OutOfBounds {
        /// Offset of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the buffer or mapping.
        size: u64,
    },
    /// A buffer cannot be freed while it still has an exported handle that is open elsewhere
    /// in this device (emulated device only), or an operation is not valid on this kind of id.
    InvalidOperation(&'static str),
    /// The bytes of an IPC handle are not a handle this backend issued (wrong magic, size
    /// mismatch, seals missing).
    InvalidHandle(&'static str),
    /// The handle was valid once, but its exporter freed the buffer or exited.
    StaleHandle,
    /// The device does not support this operation (e.g. VMM export on an old GPU).
    Unsupported(&'static str),
    /// A bounded wait ran out.
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// The bound.
        after: Duration,
    },
    /// An emulated stream stopped executing work (an earlier operation on it failed or timed out).
    StreamFault(&'static str),
    /// An operating-system call failed (emulated device: memfd, mmap, /proc).
    Io(std::io::Error),
}

impl Error {
    /// [`Error::UnknownId`] for id `id` of `kind`.
    pub(crate) const fn unknown(kind: ResourceKind, id: u64) -> Self {
        Self::UnknownId { kind, id }
    }
}

/// A copy of what a device's `table` of `kind` holds for `id`, or [`Error::UnknownId`].
pub(crate) fn found<V: Clone>(table: &HashMap<u64, V>, kind: ResourceKind, id: u64) -> Result<V> {
    table.get(&id).cloned().ok_or(Error::unknown(kind, id))
}

/// Takes `id`'s entry out of a device's `table` of `kind`, or [`Error::UnknownId`].
pub(crate) fn taken<V>(table: &mut HashMap<u64, V>, kind: ResourceKind, id: u64) -> Result<V> {
    table.remove(&id).ok_or(Error::unknown(kind, id))
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoDriver => write!(
                f,
                "no CUDA driver: libcuda.so could not be loaded (install the NVIDIA driver, or \
                 run with the emulated device)"
            ),
            Self::NoDevice => write!(
                f,
                "the CUDA driver reports no device (check nvidia-smi, CUDA_VISIBLE_DEVICES and \
                 the container's --gpus option)"
            ),
            Self::BadOrdinal { ordinal, count } => {
                write!(
                    f,
                    "device ordinal {ordinal} does not exist ({count} devices present)"
                )
            }
            Self::Driver { call, code } => write!(
                f,
                "CUDA driver call {call} failed with CUresult {code} ({})",
                cu_result_name(*code)
            ),
            Self::BytesCeiling {
                kind,
                requested,
                live,
                limit,
            } => {
                let knob = if *kind == ResourceKind::Mapping {
                    "close mappings or raise Limits::max_mapped_bytes"
                } else {
                    "free buffers or raise Limits::max_bytes"
                };
                write!(
                    f,
                    "{kind} byte ceiling: {requested} bytes requested with {live} live, limit \
                     {limit} ({knob})"
                )
            }
            Self::CountCeiling { kind, live, limit } => write!(
                f,
                "{kind} count ceiling: {live} live, limit {limit} (free some or raise the limit)"
            ),
            Self::OutOfMemory { requested } => {
                write!(f, "device out of memory allocating {requested} bytes")
            }
            Self::InvalidLength { len } => write!(f, "invalid length {len}"),
            Self::UnknownId { kind, id } => write!(
                f,
                "unknown {kind} id {id}: never issued by this device, or already released"
            ),
            Self::OutOfBounds { offset, len, size } => write!(
                f,
                "access of {len} bytes at offset {offset} is outside a region of {size} bytes"
            ),
            Self::InvalidOperation(what) => write!(f, "invalid operation: {what}"),
            Self::InvalidHandle(what) => write!(f, "invalid IPC handle: {what}"),
            Self::StaleHandle => write!(
                f,
                "stale IPC handle: the exporting process freed the buffer or exited"
            ),
            Self::Unsupported(what) => write!(f, "not supported by this device: {what}"),
            Self::Timeout { what, after } => {
                write!(f, "timed out after {after:?} waiting for {what}")
            }
            Self::StreamFault(what) => write!(f, "stream fault: {what}"),
            Self::Io(e) => write!(f, "operating-system error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        Self::Io(e.into())
    }
}

/// The symbolic name of the `CUresult` codes this crate meets most, without calling the driver
/// (which may be absent).
#[must_use]
pub fn cu_result_name(code: u32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        35 => "CUDA_ERROR_INSUFFICIENT_DRIVER",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        208 => "CUDA_ERROR_ALREADY_MAPPED",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "see cuda.h",
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;
