//! The harness's error type.

use std::fmt;
use std::io;

/// Everything that can go wrong while setting up or running a transport.
#[derive(Debug)]
pub enum BenchError {
    /// An operating-system call failed.
    Io {
        /// What the harness was doing.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A bounded wait ran out: a peer hung or is far too slow.
    Timeout {
        /// What the harness was waiting for.
        what: String,
    },
    /// A message arrived with the wrong length or sequence stamp (framing bug or torn data).
    Corrupt {
        /// What was wrong.
        what: String,
    },
    /// The peer process reported an error or broke the control protocol.
    Peer {
        /// The peer's message.
        what: String,
    },
    /// A transport library (iceoryx2, the ring) returned an error.
    Transport {
        /// The transport's name.
        transport: &'static str,
        /// The library's message.
        what: String,
    },
    /// The command line asked for something that does not exist.
    Usage {
        /// What was wrong.
        what: String,
    },
}

impl BenchError {
    /// Wraps an I/O error with what the harness was doing.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// A bounded wait ran out.
    pub fn timeout(what: impl Into<String>) -> Self {
        Self::Timeout { what: what.into() }
    }

    /// A receive from a peer the link does not have (`peer` is past its children).
    pub fn no_peer(transport: crate::case::Transport, peer: usize) -> Self {
        Self::Usage {
            what: format!("{transport}: no peer {peer}"),
        }
    }

    /// A transport library failed.
    pub fn transport(transport: &'static str, what: impl fmt::Display) -> Self {
        Self::Transport {
            transport,
            what: what.to_string(),
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { what, source } => write!(f, "{what}: {source}"),
            Self::Timeout { what } => write!(
                f,
                "timed out waiting for {what} (a peer hung or the machine is overloaded)"
            ),
            Self::Corrupt { what } => write!(f, "corrupt message: {what}"),
            Self::Peer { what } => write!(f, "peer process failed: {what}"),
            Self::Transport { transport, what } => write!(f, "{transport}: {what}"),
            Self::Usage { what } => write!(f, "usage: {what}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
