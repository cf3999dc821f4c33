//! The front door's errors, named after crossbeam-channel's: a read finds nothing yet (`Empty`,
//! `Timeout`) or will never find anything again (`Disconnected`: the producer closed the ring,
//! or its process died); a write is refused for now (`Full`) or for good (`Closed`). Whatever
//! else ring-core reports (a corrupt segment, an eviction, a buffer that is too small) is
//! `Failed` with ring-core's own error inside. Each converts into [`crate::Error`] with `?`.
//!
//! ```
//! use core::time::Duration;
//! use ring_os::prelude::*;
//!
//! // One function, every error type of a pub/sub, each converted by `?`.
//! fn round_trip(ring: &Ring) -> Result<u64, Error> {
//!     let t = Duration::from_secs(1);
//!     let mut publisher = ring.publisher()?; // ring_os::Error
//!     let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
//!     publisher.try_send(b"a")?; // TrySendError
//!     publisher.send(b"b")?; // SendError
//!     publisher.send_timeout(b"c", t)?; // SendTimeoutError
//!     publisher.inner().try_publish(b"d")?; // ring_core::ClaimError
//!     let mut buf = [0u8; 64];
//!     subscriber.try_recv(&mut buf)?; // TryRecvError
//!     subscriber.recv(&mut buf)?; // RecvError
//!     subscriber.recv_timeout(&mut buf, t)?; // RecvTimeoutError
//!     subscriber.inner().try_copy(&mut buf)?; // ring_core::ReadError
//!     let id = ring_core::OwnerId::new(9).unwrap();
//!     let heap = ring_core::HeapSegment::new(&ring_core::Config::new(2, 16), id).unwrap();
//!     drop(ring_core::Consumer::new(&heap, DeliveryClass::Gating, id)?); // ring_core::Error
//!     Ok(publisher.sent())
//! }
//!
//! let ring = Ring::memfd().slots(8).slot_size(64).create()?;
//! assert_eq!(round_trip(&ring)?, 4);
//! // And the failures read as sentences (Display), not as Debug dumps:
//! let err: Error = TryRecvError::Disconnected.into();
//! assert!(err.to_string().contains("disconnected"));
//! # Ok::<(), Error>(())
//! ```

use core::fmt;

use ring_core::{ClaimError, ReadError};

use crate::ShmReadError;

/// Why [`Subscriber::try_recv`](crate::Subscriber::try_recv) returned no message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing new yet.
    Empty,
    /// No message will come: the ring was closed and drained, or the producer died.
    Disconnected,
    /// The read failed (see the inner error: evicted, corrupt segment, buffer too small).
    Failed(ReadError),
}

/// Why [`Subscriber::recv_timeout`](crate::Subscriber::recv_timeout) returned no message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvTimeoutError {
    /// Nothing came within the timeout.
    Timeout,
    /// No message will come: the ring was closed and drained, or the producer died.
    Disconnected,
    /// The read failed (see the inner error).
    Failed(ReadError),
}

/// Why [`Subscriber::recv`](crate::Subscriber::recv) returned no message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// No message will come: the ring was closed and drained, or the producer died.
    Disconnected,
    /// The read failed (see the inner error).
    Failed(ReadError),
}

/// Why [`Publisher::try_send`](crate::Publisher::try_send) sent nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrySendError {
    /// A gating subscriber (or a pin) holds the next slot: retry, or use `send`.
    Full,
    /// The ring is closed (this publisher closed it).
    Closed,
    /// The message does not fit in a slot.
    TooLarge {
        /// The message length.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
    /// The claim failed for good (see the inner error: displaced by another producer, corrupt).
    Failed(ClaimError),
}

/// Why [`Publisher::send`](crate::Publisher::send) sent nothing (it waits as long as the ring
/// is full, so there is no `Full` or `Timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The ring is closed.
    Closed,
    /// The message does not fit in a slot.
    TooLarge {
        /// The message length.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
    /// The claim failed for good (see the inner error).
    Failed(ClaimError),
}

/// Why [`Publisher::send_timeout`](crate::Publisher::send_timeout) sent nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendTimeoutError {
    /// The ring stayed full for the whole timeout.
    Timeout,
    /// The ring is closed.
    Closed,
    /// The message does not fit in a slot.
    TooLarge {
        /// The message length.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
    /// The claim failed for good (see the inner error).
    Failed(ClaimError),
}

/// What a read's failure means to the front door: the one table both read errors come from.
///
/// | the read's reason              | `try_recv` (no wait) | `recv_timeout` (a bounded wait) |
/// |--------------------------------|----------------------|---------------------------------|
/// | `Empty`                        | `Empty`              | `Timeout`                       |
/// | `Lagging`                      | `Empty`              | `Failed(Lagging)`               |
/// | `Timeout`                      | `Failed(Timeout)`    | `Timeout`                       |
/// | `Closed`, `ProducerGone`       | `Disconnected`       | `Disconnected`                  |
/// | anything else                  | `Failed(e)`          | `Failed(e)`                     |
enum Outcome {
    /// Nothing yet (`Empty` / `Timeout`).
    Nothing,
    /// Nothing ever again.
    Disconnected,
    /// Failed for a reason of ring-core's.
    Failed(ReadError),
}

impl Outcome {
    /// The row of `e`, in the `try_recv` column or (`waited`) the `recv_timeout` one.
    fn of(e: ShmReadError, waited: bool) -> Self {
        match e {
            ShmReadError::ProducerGone | ShmReadError::Read(ReadError::Closed) => {
                Self::Disconnected
            }
            ShmReadError::Read(ReadError::Empty) => Self::Nothing,
            ShmReadError::Read(ReadError::Lagging) if !waited => Self::Nothing,
            ShmReadError::Read(ReadError::Timeout) if waited => Self::Nothing,
            ShmReadError::Read(e) => Self::Failed(e),
        }
    }
}

impl TryRecvError {
    pub(crate) fn from_read(e: impl Into<ShmReadError>) -> Self {
        match Outcome::of(e.into(), false) {
            Outcome::Nothing => Self::Empty,
            Outcome::Disconnected => Self::Disconnected,
            Outcome::Failed(e) => Self::Failed(e),
        }
    }
}

impl RecvTimeoutError {
    pub(crate) fn from_read(e: impl Into<ShmReadError>) -> Self {
        match Outcome::of(e.into(), true) {
            Outcome::Nothing => Self::Timeout,
            Outcome::Disconnected => Self::Disconnected,
            Outcome::Failed(e) => Self::Failed(e),
        }
    }
}

impl SendTimeoutError {
    pub(crate) fn from_claim(e: ClaimError) -> Self {
        match e {
            ClaimError::Full { .. } | ClaimError::Pinned { .. } => Self::Timeout,
            ClaimError::Closed => Self::Closed,
            ClaimError::TooLarge { len, capacity } => Self::TooLarge { len, capacity },
            e => Self::Failed(e),
        }
    }
}

impl TrySendError {
    pub(crate) fn from_claim(e: ClaimError) -> Self {
        match SendTimeoutError::from_claim(e) {
            SendTimeoutError::Timeout => Self::Full,
            SendTimeoutError::Closed => Self::Closed,
            SendTimeoutError::TooLarge { len, capacity } => Self::TooLarge { len, capacity },
            SendTimeoutError::Failed(e) => Self::Failed(e),
        }
    }
}

impl SendTimeoutError {
    /// The same outcome without waiting: `Full` becomes `Timeout`.
    fn from_try(e: TrySendError) -> Self {
        match e {
            TrySendError::Full => Self::Timeout,
            TrySendError::Closed => Self::Closed,
            TrySendError::TooLarge { len, capacity } => Self::TooLarge { len, capacity },
            TrySendError::Failed(e) => Self::Failed(e),
        }
    }
}

impl SendError {
    /// `None` for the transient outcome (`Timeout`), which `send` retries.
    pub(crate) fn from_timeout(e: SendTimeoutError) -> Option<Self> {
        match e {
            SendTimeoutError::Timeout => None,
            SendTimeoutError::Closed => Some(Self::Closed),
            SendTimeoutError::TooLarge { len, capacity } => Some(Self::TooLarge { len, capacity }),
            SendTimeoutError::Failed(e) => Some(Self::Failed(e)),
        }
    }
}

const DISCONNECTED: &str =
    "the ring is disconnected: its producer closed it (everything was read) or died";

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("no message yet"),
            Self::Disconnected => f.write_str(DISCONNECTED),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("no message came within the timeout"),
            Self::Disconnected => f.write_str(DISCONNECTED),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disconnected => f.write_str(DISCONNECTED),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for TrySendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match SendError::from_timeout(SendTimeoutError::from_try(*self)) {
            None => f.write_str("the ring is full: a gating subscriber or a pin holds it"),
            Some(e) => e.fmt(f),
        }
    }
}

impl fmt::Display for SendTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("the ring stayed full for the whole timeout"),
            Self::Closed => f.write_str("the ring is closed"),
            Self::TooLarge { len, capacity } => {
                write!(
                    f,
                    "a {len}-byte message does not fit in a {capacity}-byte slot"
                )
            }
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Closed => SendTimeoutError::Closed.fmt(f),
            Self::TooLarge { len, capacity } => SendTimeoutError::TooLarge { len, capacity }.fmt(f),
            Self::Failed(e) => SendTimeoutError::Failed(e).fmt(f),
        }
    }
}

impl std::error::Error for SendError {}
impl std::error::Error for TryRecvError {}
impl std::error::Error for RecvTimeoutError {}
impl std::error::Error for RecvError {}
impl std::error::Error for TrySendError {}
impl std::error::Error for SendTimeoutError {}

impl From<TryRecvError> for crate::Error {
    fn from(e: TryRecvError) -> Self {
        match e {
            TryRecvError::Empty => Self::Read(ReadError::Empty),
            TryRecvError::Disconnected => Self::RingDisconnected,
            TryRecvError::Failed(e) => Self::Read(e),
        }
    }
}

impl From<RecvTimeoutError> for crate::Error {
    fn from(e: RecvTimeoutError) -> Self {
        match e {
            RecvTimeoutError::Timeout => Self::TimedOut,
            RecvTimeoutError::Disconnected => Self::RingDisconnected,
            RecvTimeoutError::Failed(e) => Self::Read(e),
        }
    }
}

impl From<RecvError> for crate::Error {
    fn from(e: RecvError) -> Self {
        match e {
            RecvError::Disconnected => Self::RingDisconnected,
            RecvError::Failed(e) => Self::Read(e),
        }
    }
}

impl From<SendTimeoutError> for crate::Error {
    fn from(e: SendTimeoutError) -> Self {
        match e {
            SendTimeoutError::Timeout => Self::TimedOut,
            SendTimeoutError::Closed => Self::Claim(ClaimError::Closed),
            SendTimeoutError::TooLarge { len, capacity } => {
                Self::Claim(ClaimError::TooLarge { len, capacity })
            }
            SendTimeoutError::Failed(e) => Self::Claim(e),
        }
    }
}

impl From<TrySendError> for crate::Error {
    fn from(e: TrySendError) -> Self {
        match e {
            TrySendError::Full => Self::Full,
            e => SendTimeoutError::from_try(e).into(),
        }
    }
}

impl From<SendError> for crate::Error {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Closed => Self::Claim(ClaimError::Closed),
            SendError::TooLarge { len, capacity } => {
                Self::Claim(ClaimError::TooLarge { len, capacity })
            }
            SendError::Failed(e) => Self::Claim(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_table_row_by_row() {
        let rows: [(ShmReadError, TryRecvError, RecvTimeoutError); 6] = [
            (
                ReadError::Empty.into(),
                TryRecvError::Empty,
                RecvTimeoutError::Timeout,
            ),
            (
                ReadError::Lagging.into(),
                TryRecvError::Empty,
                RecvTimeoutError::Failed(ReadError::Lagging),
            ),
            (
                ReadError::Timeout.into(),
                TryRecvError::Failed(ReadError::Timeout),
                RecvTimeoutError::Timeout,
            ),
            (
                ReadError::Closed.into(),
                TryRecvError::Disconnected,
                RecvTimeoutError::Disconnected,
            ),
            (
                ShmReadError::ProducerGone,
                TryRecvError::Disconnected,
                RecvTimeoutError::Disconnected,
            ),
            (
                ReadError::Evicted.into(),
                TryRecvError::Failed(ReadError::Evicted),
                RecvTimeoutError::Failed(ReadError::Evicted),
            ),
        ];
        for (e, try_recv, recv_timeout) in rows {
            assert_eq!(TryRecvError::from_read(e), try_recv, "{e:?}");
            assert_eq!(RecvTimeoutError::from_read(e), recv_timeout, "{e:?}");
        }
    }
}
