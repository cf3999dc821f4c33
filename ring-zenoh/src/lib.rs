//! A bridge between slot rings and [Zenoh](https://zenoh.io): past one machine without a socket
//! loop of our own.
//!
//! - [`BridgeOut`] is a subscriber of a local ring that publishes every message (payload,
//!   sequence number, metadata) to a Zenoh key expression.
//! - [`BridgeIn`] is a Zenoh subscriber that is the producer of a local ring.
//! - [`ZenohOptions`] says explicitly which session they open: mode, endpoints, an optional
//!   Zenoh configuration file; multicast scouting is off unless asked for, so nothing reaches
//!   outside the machine by default.
//!
//! `ringctl bridge out RING --key KEY` and `ringctl bridge in KEY RING` run them.
//!
//! # Delivery classes and Zenoh's quality of service
//!
//! | class of the sending bridge | Zenoh publisher | receiving inbox | what the far ring sees |
//! |---|---|---|---|
//! | gating | reliable, `CongestionControl::Block` | waits for room | every message, in order; a slow far consumer fills the origin ring |
//! | latest-only | reliable, `CongestionControl::Drop` | newest sample replaces older ones | whole messages, the newest first; gaps counted |
//! | skip-on-lag | reliable, `CongestionControl::Block` | waits for room | the sequence with gaps where the sending bridge lagged; the far side's `missed` equals the sending side's |
//!
//! Every sample carries a small versioned [wire header](wire) as its attachment: the origin
//! sequence number, what the sending bridge skipped just before it, the two metadata words.
//! Messages that are ready together travel together: a gating or skip-on-lag sending bridge
//! packs those that fit into one batch sample (a [frame of records](wire#batch-samples-version-2-kind-3),
//! at most [`BATCH_BYTES`]), so a stream of small messages costs one Zenoh put and one
//! hand-off per batch, not per message; a message alone or a large one goes as a sample of
//! its own, its bytes unchanged as the payload. The receiving bridge validates header and
//! frame (untrusted input: never a panic, never a peer-sized allocation) and counts every gap
//! in the origin sequence ([`InStats::missed`]).
//!
//! A bridge that dies is a consumer (out) or producer (in) of its local ring that died: the
//! ring-os recovery rules apply (`docs/OS.md`), and a restarted bridge takes its place. See
//! `docs/BRIDGE.md` for the failure rules and how to run across two hosts.
//!
//! # Examples
//!
//! ```
//! use core::time::Duration;
//! use ring_os::prelude::*;
//! use ring_zenoh::{BridgeIn, BridgeOut, ZenohOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! let endpoint = format!("tcp/127.0.0.1:{port}");
//! let origin = Ring::memfd().slots(8).slot_size(64).create()?;
//! let far = Ring::memfd().slots(8).slot_size(64).create()?;
//! let mut reader = far.subscriber(DeliveryClass::Gating)?;
//!
//! let a = ZenohOptions::new().listen(&endpoint).open()?;
//! let b = ZenohOptions::new().connect(&endpoint).open()?;
//! let mut inbound = BridgeIn::new(&b, &far, "doc/ring")?;
//! let mut out = BridgeOut::new(&a, &origin, "doc/ring", DeliveryClass::Gating)?;
//! assert!(out.wait_matched(Duration::from_secs(10)));
//!
//! let mut producer = origin.publisher()?;
//! producer.send(b"hello")?;
//! let stop = std::sync::atomic::AtomicBool::new(false);
//! out.step(Duration::from_secs(5))?;
//! while inbound.stats().written == 0 {
//!     inbound.step(Duration::from_millis(100), &stop)?;
//! }
//! let mut buf = [0u8; 64];
//! let got = reader.recv(&mut buf)?;
//! assert_eq!(&buf[..got.len], b"hello");
//! # Ok(())
//! # }
//! ```
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate: Zenoh needs threads and sockets"
)]

mod config;
mod error;
mod inbound;
mod out;
pub mod wire;

pub use config::{Mode, ZenohOptions, GATING_WAIT_BEFORE_CLOSE_US};
pub use error::BridgeError;
pub use inbound::{BridgeIn, InStats};
pub use out::{BridgeOut, OutStats, BATCH_BYTES};
pub use zenoh;

use core::time::Duration;

use ring_core::DeliveryClass;
use zenoh::qos::CongestionControl;

/// How long one wait of a bridge's loop lasts before it looks at its stop flag again.
pub const POLL: Duration = Duration::from_millis(100);

/// How long a busy bridge polls its ring (yielding the CPU between looks) before it parks on
/// the ring's futex: a bridge parked on its ring makes the peer that writes or reads the
/// other side pay a wake-up system call per message until the bridge runs again, which on a
/// loaded machine can be many messages later. Only after a step that moved messages; an idle
/// bridge parks at once.
pub const POLL_BEFORE_PARK: Duration = Duration::from_micros(200);

/// Calls `ready` until it is true (returns true) or [`POLL_BEFORE_PARK`] passed (false),
/// yielding the CPU between calls.
fn poll_briefly(mut ready: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        if ready() {
            return true;
        }
        if t0.elapsed() >= POLL_BEFORE_PARK {
            return false;
        }
        std::thread::yield_now();
    }
}

/// How a bridge's stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The origin ring's producer closed it (the stream is complete).
    Closed,
    /// The origin ring's stream was aborted with this code.
    Aborted(u16),
    /// The caller's stop flag was set.
    Stopped,
}

/// The congestion control a sending bridge of `class` publishes with.
#[must_use]
pub fn congestion_control(class: DeliveryClass) -> CongestionControl {
    match class {
        DeliveryClass::LatestOnly => CongestionControl::Drop,
        DeliveryClass::Gating | DeliveryClass::SkipOnLag => CongestionControl::Block,
    }
}

/// An owned key expression.
fn key_expr(key: &str) -> Result<zenoh::key_expr::KeyExpr<'static>, BridgeError> {
    zenoh::key_expr::KeyExpr::try_from(key.to_owned())
        .map_err(|e| BridgeError::Key(format!("{key:?}: {e}")))
}

/// A fresh, non-zero bridge instance id: a different one for every bridge, also across
/// restarts in the same pid.
fn new_epoch() -> u64 {
    use core::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish().max(1)
}
