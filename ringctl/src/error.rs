//! The tool's one error type: every variant renders as one line that says what went wrong and,
//! where there is something to do, what to do.

use core::fmt;

/// Everything a `ringctl` command can fail with.
#[derive(Debug)]
pub enum CliError {
    /// A segment operation of ring-os failed (create, open, map, name).
    Os(ring_os::Error),
    /// The bytes of a segment are not a valid ring.
    Attach {
        /// The segment's name.
        name: String,
        /// What is wrong with it.
        source: ring_core::AttachError,
    },
    /// The requested ring geometry cannot be laid out.
    Layout(ring_core::LayoutError),
    /// Registration or ownership was refused by the ring.
    Ring(ring_core::Error),
    /// Claiming a slot failed for good.
    Claim(ring_core::ClaimError),
    /// A read failed for good (ring-core's reason, or the producer's process died).
    Read(ring_os::raw::ShmReadError),
    /// The segment's allocator region is not valid.
    Alloc(ring_core::arena::AllocError),
    /// A command-line value was refused (the message says which and why).
    Usage(String),
    /// A bounded wait ran out.
    Timeout(String),
    /// Reading or writing a stream or spawning a process failed.
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// SIGINT or SIGTERM arrived; what the command made has been removed.
    Interrupted,
    /// A child process of the demo failed or reported nonsense.
    Child(String),
}

impl CliError {
    /// Wraps an I/O error from `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Os(e) => write!(f, "{e}"),
            Self::Attach { name, source } => write!(f, "segment {name:?} is unusable: {source}"),
            Self::Layout(e) => write!(f, "invalid ring geometry: {e}"),
            Self::Ring(e) => write!(f, "{e}"),
            Self::Claim(e) => write!(f, "publishing failed: {e}"),
            Self::Read(e) => write!(f, "reading failed: {e}"),
            Self::Alloc(e) => write!(f, "allocator region: {e}"),
            Self::Usage(msg) | Self::Timeout(msg) | Self::Child(msg) => f.write_str(msg),
            Self::Io { what, source } => write!(f, "{what}: {source}"),
            Self::Interrupted => f.write_str("interrupted; the demo's processes and ring are gone"),
        }
    }
}

impl std::error::Error for CliError {}

/// `From` for each error a command passes on wrapped in one of [`CliError`]'s variants.
macro_rules! wrap_errors {
    ($($source:ty => $variant:ident),* $(,)?) => {
        $(
            impl From<$source> for CliError {
                fn from(e: $source) -> Self {
                    Self::$variant(e)
                }
            }
        )*
    };
}

wrap_errors! {
    ring_os::Error => Os,
    ring_core::LayoutError => Layout,
    ring_core::Error => Ring,
    ring_core::ClaimError => Claim,
    ring_os::raw::ShmReadError => Read,
    ring_core::arena::AllocError => Alloc,
}

impl From<ring_core::ReadError> for CliError {
    fn from(e: ring_core::ReadError) -> Self {
        Self::Read(e.into())
    }
}

/// The result type of every command.
pub type Result<T, E = CliError> = core::result::Result<T, E>;
