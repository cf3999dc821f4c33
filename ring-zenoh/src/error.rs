//! [`BridgeError`]: everything a bridge can fail with, one line each.

use core::fmt;

/// Why a bridge stopped or could not start.
#[derive(Debug)]
pub enum BridgeError {
    /// A ring operation of ring-os failed (open, register, take over).
    Ring(ring_os::Error),
    /// Reading the origin ring failed for good (corrupt or truncated segment, evicted).
    Read(ring_core::ReadError),
    /// Writing the far ring failed for good (closed by someone else, displaced, truncated).
    Write(ring_core::ClaimError),
    /// The Zenoh configuration is not valid (the message says which option).
    Config(String),
    /// Zenoh refused an operation (open, declare, put).
    Zenoh(String),
    /// A key expression is not valid.
    Key(String),
}

impl fmt::Display for BridgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ring(e) => write!(f, "{e}"),
            Self::Read(e) => write!(f, "reading the ring failed: {e}"),
            Self::Write(e) => write!(f, "writing the ring failed: {e}"),
            Self::Config(msg) | Self::Zenoh(msg) => f.write_str(msg),
            Self::Key(msg) => write!(f, "invalid key expression: {msg}"),
        }
    }
}

impl std::error::Error for BridgeError {}

impl From<ring_os::Error> for BridgeError {
    fn from(e: ring_os::Error) -> Self {
        Self::Ring(e)
    }
}

/// Wraps a Zenoh error with what was being done.
pub(crate) fn zenoh(what: &str) -> impl FnOnce(zenoh::Error) -> BridgeError + '_ {
    move |e| BridgeError::Zenoh(format!("{what}: {e}"))
}
