//! The transports, each seen as a link between the parent and its children.
//!
//! A link has a sending half ([`Tx`]) and a receiving half ([`Rx`]). The parent's `Tx` reaches
//! every child of the case (fan-out publishes once where the transport can), its `Rx` listens to
//! each child separately; a child's halves talk to the parent only.
//!
//! Every message carries its sequence number in its first and last 8 bytes, and every receive
//! checks both: a framing bug or a torn message fails the run instead of producing a number.

use crate::case::Transport;
use crate::ctl::Setup;
use crate::BenchError;
use std::time::Instant;

pub mod floor;
pub mod floor_msg;
pub mod ring;
pub mod stream;

/// What [`Tx::send`] runs right before its message becomes visible to the peers.
pub type AtPublish<'a> = &'a mut dyn FnMut() -> Result<(), BenchError>;

/// Peer `peer`'s entry of a table kept per peer, or the error that names the missing peer.
///
/// # Errors
/// [`BenchError::Usage`] when there is no such peer.
pub fn peer_entry<T>(
    table: &mut [T],
    transport: Transport,
    peer: usize,
) -> Result<&mut T, BenchError> {
    table
        .get_mut(peer)
        .ok_or_else(|| BenchError::no_peer(transport, peer))
}

/// The first `len` bytes of a buffer sized for the case, or the error that says the message is
/// larger than the case.
///
/// # Errors
/// [`BenchError::Usage`] when `len` exceeds the buffer.
pub fn message_buf(
    buf: &mut [u8],
    transport: impl core::fmt::Display,
    len: usize,
) -> Result<&mut [u8], BenchError> {
    buf.get_mut(..len).ok_or_else(|| BenchError::Usage {
        what: format!("{transport}: {len} bytes exceed the case size"),
    })
}

/// The sending half of a link.
pub trait Tx {
    /// Sends one `len`-byte message to every peer. The message is fully prepared first (for a
    /// zero-copy transport: written into its shared buffer); `at_publish` runs right before it
    /// becomes visible to the peers, so a caller can start a clock or wait for a request there.
    fn send(&mut self, len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError>;

    /// Makes every message sent so far visible to the peers. A transport that groups messages
    /// (`ring-batch`) publishes its partial group here; the others publish in
    /// [`send`](Tx::send) and have nothing to do.
    fn flush(&mut self) -> Result<(), BenchError> {
        Ok(())
    }
}

/// The receiving half of a link.
pub trait Rx {
    /// Receives the next message from peer `peer` (0 for a child), which must be `len` bytes long,
    /// and returns once every byte of it is usable by the caller (in its buffer, or pinned in
    /// place). Fails at `deadline` where the transport can poll; blocking transports are bounded
    /// by the harness's watchdog, which kills a hung peer.
    fn recv(&mut self, peer: usize, len: usize, deadline: Instant) -> Result<(), BenchError>;
}

/// Both halves of one end of a transport.
pub struct Link {
    /// Sending half.
    pub tx: Box<dyn Tx>,
    /// Receiving half.
    pub rx: Box<dyn Rx>,
}

/// The parent's end of a transport whose children have not connected yet.
pub type Pending = Box<dyn FnOnce(Instant) -> Result<Link, BenchError>>;

/// Transports built outside this crate: the peer crates (iceoryx2) are compared from
/// `benches/compare/`, a crate outside the workspace, so that the library's lockfile never
/// carries them. That crate's `transport-bench` hands its links to [`crate::cli::main`]; the
/// children are re-executions of the same binary, so they have them too.
#[derive(Clone, Copy, Debug)]
pub struct Peers {
    /// The transports these links implement ([`Transport::is_peer`] ones).
    pub transports: &'static [Transport],
    /// The parent's half, as [`parent_begin`].
    pub parent_begin: fn(&mut [Setup]) -> Result<Pending, BenchError>,
    /// A child's half, as [`child_setup`].
    pub child_setup: fn(&Setup) -> Result<Link, BenchError>,
}

/// Whether this build can run `t`: every transport but the peer crates', which need `peers`.
pub fn built(t: Transport, peers: Option<&Peers>) -> bool {
    !t.is_peer() || peers.is_some_and(|p| p.transports.contains(&t))
}

/// The first child's setup (a transport's parent side needs at least one child).
///
/// # Errors
/// [`BenchError::Usage`] when `setups` is empty.
pub fn first_setup(setups: &[Setup]) -> Result<&Setup, BenchError> {
    setups.first().ok_or_else(|| BenchError::Usage {
        what: "a transport needs at least one child".to_owned(),
    })
}

/// The links of peer transport `t`, or the error that says where it is measured.
fn peer(t: Transport, peers: Option<&Peers>) -> Result<&Peers, BenchError> {
    peers
        .filter(|p| p.transports.contains(&t))
        .ok_or_else(|| BenchError::Usage {
            what: format!(
                "{t} is measured by benches/compare (outside the workspace): \
                 cargo run --release --manifest-path benches/compare/Cargo.toml"
            ),
        })
}

/// First half of the parent's setup: creates listeners, FIFOs, mappings or services, and fills
/// in `setups` (one per child) what the children need. Then send the setups, wait for every
/// child's `Ok`, and call the returned closure to finish. `peers` builds the peer crates'
/// transports (see [`Peers`]).
pub fn parent_begin(setups: &mut [Setup], peers: Option<&Peers>) -> Result<Pending, BenchError> {
    let transport = first_setup(setups)?.transport;
    (builder(transport, peers)?.parent_begin)(setups)
}

/// A child's setup: builds its end of the transport described by `setup`.
pub fn child_setup(setup: &Setup, peers: Option<&Peers>) -> Result<Link, BenchError> {
    (builder(setup.transport, peers)?.child_setup)(setup)
}

/// The module that builds transport `t`'s ends (as a [`Peers`]: its two halves), or the error
/// for `memcpy` (no link) and for a peer transport this build lacks.
fn builder(t: Transport, peers: Option<&Peers>) -> Result<Peers, BenchError> {
    let local = |parent_begin, child_setup| Peers {
        transports: &[],
        parent_begin,
        child_setup,
    };
    Ok(match t {
        Transport::Floor => local(floor::parent_begin, floor::child_setup),
        Transport::FloorMsg => local(floor_msg::parent_begin, floor_msg::child_setup),
        Transport::Unix | Transport::Tcp | Transport::Pipe => {
            local(stream::parent_begin, stream::child_setup)
        }
        Transport::Iceoryx2 | Transport::Iceoryx2Event => *peer(t, peers)?,
        Transport::RingPinned
        | Transport::RingCopy
        | Transport::RingFutex
        | Transport::RingBatch => local(ring::parent_begin, ring::child_setup),
        Transport::Memcpy => {
            return Err(BenchError::Usage {
                what: "memcpy runs in the parent alone".to_owned(),
            })
        }
    })
}

/// Message `seq` of `len` bytes, ready to send: the first `len` bytes of a buffer sized for the
/// case (see [`message_buf`]), stamped with `seq` (see [`stamp`]).
///
/// # Errors
/// [`BenchError::Usage`] when `len` exceeds the buffer.
pub fn stamped_message(
    buf: &mut [u8],
    transport: impl core::fmt::Display,
    len: usize,
    seq: u64,
) -> Result<&mut [u8], BenchError> {
    let msg = message_buf(buf, transport, len)?;
    stamp(msg, seq);
    Ok(msg)
}

/// Writes `seq` into the first and last 8 bytes of `msg` (only the first if shorter than 16).
pub fn stamp(msg: &mut [u8], seq: u64) {
    let b = seq.to_le_bytes();
    if let Some(head) = msg.get_mut(..8) {
        head.copy_from_slice(&b);
    }
    let len = msg.len();
    if len >= 16 {
        if let Some(tail) = msg.get_mut(len - 8..) {
            tail.copy_from_slice(&b);
        }
    }
}

/// Checks a received message's length and stamps.
pub fn check(msg: &[u8], len: usize, seq: u64, transport: Transport) -> Result<(), BenchError> {
    if msg.len() != len {
        return Err(BenchError::Corrupt {
            what: format!("{transport}: expected {len} bytes, got {}", msg.len()),
        });
    }
    let word = |r: core::ops::Range<usize>| {
        msg.get(r)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_le_bytes)
    };
    let head = word(0..8);
    let tail = if len >= 16 { word(len - 8..len) } else { head };
    if head != Some(seq) || tail != Some(seq) {
        return Err(BenchError::Corrupt {
            what: format!("{transport}: expected message {seq}, got head {head:?} tail {tail:?}"),
        });
    }
    Ok(())
}

/// A buffer of `len` bytes filled with a non-zero pattern (the "rendered" payload).
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 | 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_and_check() {
        let mut m = pattern(64);
        stamp(&mut m, 7);
        assert!(check(&m, 64, 7, Transport::Unix).is_ok());
        assert!(check(&m, 64, 8, Transport::Unix).is_err());
        assert!(check(&m, 65, 7, Transport::Unix).is_err());
        m[63] ^= 1;
        assert!(
            check(&m, 64, 7, Transport::Unix).is_err(),
            "a torn tail is caught"
        );
        let mut short = [0u8; 8];
        stamp(&mut short, 3);
        assert!(check(&short, 8, 3, Transport::Pipe).is_ok());
    }
}
