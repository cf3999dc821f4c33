//! The one error type of this crate: every variant says what went wrong *and* what to do.

use core::fmt;
use std::io;

/// Everything that can go wrong while creating, opening, mapping or using a segment.
///
/// Bad input (a name, a size, a file descriptor or bytes from a peer) always ends here, never in
/// a panic. [`Display`](fmt::Display) says what to do about it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A segment name broke one of the naming rules (see [`SegmentName`](crate::raw::SegmentName)).
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A segment or file with this name already exists (creation uses `O_EXCL`).
    AlreadyExists {
        /// The path or name that exists.
        what: String,
    },
    /// No segment or file with this name exists.
    NotFound {
        /// The path or name that is missing.
        what: String,
    },
    /// The operating system refused access.
    PermissionDenied {
        /// The path or name.
        what: String,
    },
    /// The backing file system cannot hold the segment: reserving its pages failed.
    NoSpace {
        /// Bytes the segment needs.
        needed: u64,
        /// Bytes the file system said were available (`statvfs`), when known.
        available: u64,
    },
    /// Huge pages were asked for and cannot be had.
    HugePages {
        /// Why, and what to do.
        reason: String,
    },
    /// A message in the ring is longer than the bound the reader gave: nothing was allocated or
    /// copied (a peer's length never sizes an allocation beyond the caller's bound).
    MessageTooLarge {
        /// The length the segment claims.
        len: u64,
        /// The reader's bound.
        max: u64,
    },
    /// A read failed (ring-core's reason inside).
    Read(ring_core::ReadError),
    /// The ring is disconnected: its producer closed it and everything was read, or it died.
    RingDisconnected,
    /// A blocking read found nothing and the producer's process is dead
    /// ([`ShmReadError::ProducerGone`]).
    ProducerGone,
    /// An existing ring's geometry is not the one asked for (`RingBuilder::open`).
    ConfigMismatch {
        /// The field that differs.
        field: &'static str,
        /// The ring's value.
        found: u64,
        /// The value asked for.
        expected: u64,
    },
    /// A never-stall ring ([`RingBuilder::never_stall`](crate::RingBuilder::never_stall))
    /// with too few slots for the pins its readers may hold at once: it needs
    /// `slots >= max_pins + 2` (and at least 3).
    NeverStallPins {
        /// The ring's slot count.
        slots: u32,
        /// The pins the readers may hold at once, together.
        max_pins: u32,
    },
    /// The ring is full for now: a gating subscriber or a pin holds the next slot.
    Full,
    /// A requested segment length is zero or too large for this platform.
    BadLength {
        /// The length asked for, in bytes.
        len: u64,
    },
    /// The file's size is not the size the segment must have (truncated, grown or too small).
    SizeMismatch {
        /// The size the segment must have, or its minimum.
        expected: u64,
        /// The size `fstat` reports.
        actual: u64,
    },
    /// The file is not a regular file (a directory, a FIFO, a device...).
    NotRegularFile {
        /// The path, name or `fd`.
        what: String,
    },
    /// The file belongs to another user, or is writable by group or others.
    Insecure {
        /// The path, name or `fd`.
        what: String,
        /// Its owner uid.
        uid: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// A memfd received from a peer lacks seals that make it safe to map.
    MissingSeals {
        /// The seals it has (`F_SEAL_*` bits).
        have: u32,
        /// The seals it lacks.
        missing: u32,
    },
    /// A message on the Unix socket carried no file descriptor.
    NoFdReceived,
    /// The peer closed the Unix socket.
    Disconnected,
    /// A wait ran out of time.
    TimedOut,
    /// The ring configuration is invalid (ring-core's geometry check).
    Layout(ring_core::LayoutError),
    /// The segment's bytes are not a valid ring (ring-core's header validation).
    Attach(ring_core::AttachError),
    /// ring-core refused a producer or consumer operation.
    Ring(ring_core::Error),
    /// A claim was refused (closed, held back past the timeout, too large).
    Claim(ring_core::ClaimError),
    /// The in-segment allocator refused (ceiling, out of space, corrupt region).
    Alloc(ring_core::arena::AllocError),
    /// A take-over was asked for, but the ring's producer is alive.
    ProducerAlive {
        /// Its owner id.
        owner: u64,
    },
    /// A role lock (the kernel-held liveness lock, see [`lock`](crate::raw::lock)) could not be taken
    /// or checked: the file system or platform may not support OFD locks.
    Lock {
        /// Which role (`"producer"`, `"consumer 3"`, ...).
        role: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The name or path now names another file than the one this handle opened (someone removed
    /// ours and created a new one): it was left alone.
    Replaced {
        /// The path or name.
        what: String,
    },
    /// A peer truncated the segment under this mapping (or its pages could not be backed): the
    /// SIGBUS guard replaced the lost pages with zeros, and the mapping cannot be trusted any more.
    Truncated {
        /// The mapped length in bytes.
        mapped: u64,
        /// The file's size now (`fstat`), when it could be read.
        actual: Option<u64>,
    },
    /// The SIGBUS guard's registry is full: this process maps too many segments at once.
    TooManyMappings {
        /// How many segments one process can map at once.
        max: usize,
    },
    /// The process at the other end of a rendezvous socket runs as another user.
    ForeignPeer {
        /// The socket.
        what: String,
        /// The peer's uid.
        uid: u32,
    },
    /// A system call failed in a way none of the variants above describes.
    Io {
        /// What was being done (for example `"mmap"`).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
}

impl Error {
    /// Wraps an OS error from `op`.
    pub(crate) fn io(op: &'static str, source: impl Into<io::Error>) -> Self {
        Self::Io {
            op,
            source: source.into(),
        }
    }
}

/// Formats a byte count in MiB with one decimal, for messages.
struct Mib(u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Precision loss in the display is fine: this is a human-readable figure.
        #[allow(clippy::cast_precision_loss, reason = "display only")]
        let mib = self.0 as f64 / (1024.0 * 1024.0);
        write!(f, "{mib:.1} MiB")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName { name, reason } => write!(
                f,
                "invalid segment name {name:?}: {reason}; use 1-200 characters from [A-Za-z0-9._-], \
                 not starting with '.' and without \"..\""
            ),
            Self::AlreadyExists { what } => write!(
                f,
                "{what} already exists; pick another name, open it instead, or remove it if it is \
                 stale (`ringctl clean`)"
            ),
            Self::NotFound { what } => {
                write!(f, "{what} does not exist; check the name and that the creator is running")
            }
            Self::PermissionDenied { what } => write!(
                f,
                "permission denied on {what}; segments are private to the user that created them \
                 (mode 0600): run as that user"
            ),
            Self::NoSpace { needed, available } => write!(
                f,
                "not enough space for the segment: needs {} but only {} are available; free space \
                 (`ringctl clean` removes stale segments), make the ring smaller, or enlarge the \
                 file system (Docker: `--shm-size`, Kubernetes: an emptyDir with medium Memory)",
                Mib(*needed),
                Mib(*available)
            ),
            Self::HugePages { reason } => write!(f, "huge pages unavailable: {reason}"),
            Self::MessageTooLarge { len, max } => write!(
                f,
                "the message claims {len} bytes, more than this reader accepts ({max}); raise the \
                 reader's bound if the producer really sends such messages"
            ),
            Self::Read(e) => write!(f, "{e}"),
            Self::ProducerGone => f.write_str(PRODUCER_GONE),
            Self::RingDisconnected => f.write_str(
                "the ring is disconnected: its producer closed it (everything was read) or died",
            ),
            Self::ConfigMismatch {
                field,
                found,
                expected,
            } => write!(
                f,
                "the existing ring has {field} = {found}, not {expected}: open it without \
                 setting {field}, or remove it (`ringctl clean`, Ring::remove) and create it anew"
            ),
            Self::NeverStallPins { slots, max_pins } => write!(
                f,
                "a never-stall ring whose readers pin up to {max_pins} messages at once needs at \
                 least {} slots (slots >= max_pins + 2: one keeps the newest message, one takes \
                 the next), got {slots}: add slots or pin fewer messages",
                max_pins.saturating_add(2).max(3)
            ),
            Self::Full => f.write_str(
                "the ring is full: a gating subscriber or a pin holds the next slot; retry",
            ),
            Self::BadLength { len } => write!(
                f,
                "segment length {len} is zero or larger than this platform can map; check the ring \
                 geometry"
            ),
            Self::SizeMismatch { expected, actual } => write!(
                f,
                "segment file is {actual} bytes but must be {expected}: a peer truncated or resized \
                 it, or it is not a segment of this geometry; recreate the segment"
            ),
            Self::NotRegularFile { what } => {
                write!(f, "{what} is not a regular file and cannot back a segment")
            }
            Self::Insecure { what, uid, mode } => write!(
                f,
                "{what} is owned by uid {uid} with mode {mode:o}; refusing to map a segment another \
                 user could write: remove it and recreate it as this user (mode 0600)"
            ),
            Self::MissingSeals { have, missing } => write!(
                f,
                "memfd seals {have:#x} lack {missing:#x} (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL are \
                 required so the peer cannot resize it under us); the sender must create it with \
                 ring-os or seal it"
            ),
            Self::NoFdReceived => write!(
                f,
                "the message on the Unix socket carried no file descriptor; the peer must send the \
                 segment with SCM_RIGHTS"
            ),
            Self::Disconnected => write!(f, "the peer closed the socket before sending a segment"),
            Self::TimedOut => write!(f, "timed out; the peer may be stuck or gone"),
            Self::Layout(e) => write!(f, "invalid ring configuration: {e}"),
            Self::Attach(e) => write!(f, "not a usable ring segment: {e}"),
            Self::Ring(e) => write!(f, "{e}"),
            Self::Claim(e) => write!(f, "{e}"),
            Self::Alloc(e) => write!(f, "allocator: {e}"),
            Self::ProducerAlive { owner } => write!(
                f,
                "the ring's producer (owner {owner:#x}, pid {}) is alive; only a dead producer's ring \
                 can be taken over",
                owner & 0xffff_ffff
            ),
            Self::Lock { role, source } => write!(
                f,
                "cannot take or check the {role} lock on the segment file ({source}); liveness \
                 needs open-file-description locks (Linux >= 3.15 on tmpfs, ext4, xfs, btrfs): put \
                 the segment on such a file system or use a memfd segment"
            ),
            Self::Replaced { what } => write!(
                f,
                "{what} now names another file than the one opened (it was removed and re-created); \
                 left it alone"
            ),
            Self::Truncated { mapped, actual } => {
                write!(f, "a peer truncated the segment under this {mapped}-byte mapping")?;
                if let Some(actual) = actual {
                    write!(f, " (the file is {actual} bytes now)")?;
                }
                write!(
                    f,
                    ", or its pages could not be backed; the lost pages read as zeros, so the ring \
                     is unusable: recreate it (a memfd ring, `--memfd`, cannot be truncated)"
                )
            }
            Self::TooManyMappings { max } => write!(
                f,
                "this process already maps {max} segments, the most the SIGBUS guard can track; \
                 drop some mappings first"
            ),
            Self::ForeignPeer { what, uid } => write!(
                f,
                "the peer on {what} runs as uid {uid}, not as this user; refusing to exchange a \
                 ring with it (someone else may have taken the name)"
            ),
            Self::Io { op, source } => write!(f, "{op} failed: {source}"),
        }
    }
}

impl From<ring_core::LayoutError> for Error {
    fn from(e: ring_core::LayoutError) -> Self {
        Self::Layout(e)
    }
}

impl From<ring_core::AttachError> for Error {
    fn from(e: ring_core::AttachError) -> Self {
        Self::Attach(e)
    }
}

impl From<ring_core::Error> for Error {
    fn from(e: ring_core::Error) -> Self {
        Self::Ring(e)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } | Self::Lock { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why a blocking read ([`ConsumerExt`](crate::raw::ConsumerExt)) returned no message: one of
/// ring-core's reasons, or the one only the OS can tell (the producer's role lock is free).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmReadError {
    /// ring-core's reason: timed out, closed, aborted, evicted, a corrupt or truncated segment...
    Read(ring_core::ReadError),
    /// Nothing is readable and the producer's process died.
    ProducerGone,
}

const PRODUCER_GONE: &str = "the producer process died";

impl fmt::Display for ShmReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(e) => write!(f, "{e}"),
            Self::ProducerGone => f.write_str(PRODUCER_GONE),
        }
    }
}

impl std::error::Error for ShmReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read(e) => Some(e),
            Self::ProducerGone => None,
        }
    }
}

impl From<ring_core::ReadError> for ShmReadError {
    fn from(e: ring_core::ReadError) -> Self {
        Self::Read(e)
    }
}

impl From<ShmReadError> for Error {
    fn from(e: ShmReadError) -> Self {
        match e {
            ShmReadError::Read(e) => Self::Read(e),
            ShmReadError::ProducerGone => Self::ProducerGone,
        }
    }
}

impl From<ring_core::ReadError> for Error {
    fn from(e: ring_core::ReadError) -> Self {
        Self::Read(e)
    }
}

impl From<ring_core::arena::PayloadError> for Error {
    fn from(e: ring_core::arena::PayloadError) -> Self {
        use ring_core::arena::PayloadError as P;
        match e {
            P::Alloc(e) => Self::Alloc(e),
            P::Claim(e) => Self::Claim(e),
            P::TooLarge { len, max } => Self::MessageTooLarge { len, max },
        }
    }
}

impl From<ring_core::ClaimError> for Error {
    fn from(e: ring_core::ClaimError) -> Self {
        Self::Claim(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_space_message_tells_what_to_do() {
        let e = Error::NoSpace {
            needed: 3 << 20,
            available: 1 << 20,
        };
        let s = e.to_string();
        assert!(s.contains("3.0 MiB"), "{s}");
        assert!(s.contains("1.0 MiB"), "{s}");
        assert!(s.contains("--shm-size"), "{s}");
    }
}
