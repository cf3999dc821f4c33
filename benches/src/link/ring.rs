//! The slot ring across processes: `ring-pinned` (busy-polling consumer, zero-copy pin),
//! `ring-copy` (busy-polling consumer, seqlock copy-out), `ring-futex` (consumer and producer
//! block on the segment's futex words; zero-copy pin) and `ring-batch` (throughput only: the
//! child publishes groups of [`BATCH_GROUP`] messages with `try_publish_batch`, the busy-polling
//! parent reads up to [`BATCH_READ`] at a time with `try_read_batch`, zero-copy; the parent's
//! one request per sample goes down the single-message `ring-pinned` path).
//!
//! Each direction is its own ring (`ring_os::raw::ShmRing` in a file of the case directory, pages
//! reserved and pre-faulted; its `Mapping` wakes futex waiters across processes): parent → children (one producer, one gating consumer per child) and
//! child → parent (one per child). The producer writes the message into a claimed slot before the
//! timed publish, as a renderer that draws into the slot would.

use super::{
    check, first_setup, pattern, peer_entry, stamped_message, AtPublish, Link, Pending, Rx, Tx,
};
use crate::case::Transport;
use crate::ctl::Setup;
use crate::wait::spin_until;
use crate::BenchError;
use ring_core::layout::INLINE_CAPACITY;
use ring_core::{ClaimError, Config, DeliveryClass, ReadError};
use ring_os::raw::{
    ConsumerExt as _, CreateOptions, FutexWait, ShmConsumer, ShmProducer, ShmReadError, ShmRing,
};
use std::path::PathBuf;
use std::time::Instant;

const NAME: &str = "ring";

fn err(e: impl core::fmt::Display) -> BenchError {
    BenchError::transport(NAME, e)
}

/// How a consumer reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pinned,
    Copy,
    Futex,
}

fn mode(t: Transport) -> Mode {
    match t {
        Transport::RingCopy => Mode::Copy,
        Transport::RingFutex => Mode::Futex,
        // `ring-batch`'s single-message halves (the parent's request, the child's read of it).
        _ => Mode::Pinned,
    }
}

/// Messages `ring-batch` groups into one `try_publish_batch`.
pub const BATCH_GROUP: usize = 32;

/// Most messages `ring-batch` reads in one `try_read_batch`.
pub const BATCH_READ: usize = 64;

struct RingTx {
    producer: ShmProducer,
    mode: Mode,
    buf: Vec<u8>,
    seq: u64,
}

impl Tx for RingTx {
    fn send(&mut self, len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        let src = stamped_message(&mut self.buf, NAME, len, self.seq)?;
        // The deadline is read from the clock only when a wait begins: the floor pays no clock
        // read per message, and neither does a claim that finds its slot free.
        let deadline = || Instant::now() + crate::wait::RUN_TIMEOUT;
        if self.mode != Mode::Futex && len <= INLINE_CAPACITY {
            // A message that fits the slot's message line goes out the way a sender of small
            // messages sends it: `try_publish`, the one-pass copy into the line (the path
            // `benches/icount.sh` counts). So the write is inside the timed span here, before
            // the instant `at_publish` reads (as the floors write theirs).
            at_publish()?;
            publish_small(&mut self.producer, src, deadline)?;
        } else {
            publish_claimed(&mut self.producer, self.mode, src, at_publish, deadline)?;
        }
        self.seq += 1;
        Ok(())
    }
}

/// `try_publish`, spinning on the claim condition while a gating consumer holds the ring full
/// or readers pin the next slot (a refused publish changed nothing).
fn publish_small(
    producer: &mut ShmProducer,
    src: &[u8],
    deadline: impl Fn() -> Instant,
) -> Result<(), BenchError> {
    loop {
        match producer.try_publish(src) {
            Ok(_) => return Ok(()),
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {
                spin_until(deadline(), "a free ring slot", || {
                    Ok(producer.is_claimable().then_some(()))
                })?;
            }
            Err(e) => return Err(err(e)),
        }
    }
}

/// A claim written in place (what a sender of frames does), published right after
/// `at_publish`.
fn publish_claimed(
    producer: &mut ShmProducer,
    mode: Mode,
    src: &[u8],
    at_publish: AtPublish<'_>,
    deadline: impl Fn() -> Instant,
) -> Result<(), BenchError> {
    let mut slot = if mode == Mode::Futex {
        // Blocks on the segment's drain futex while a gating consumer holds the ring full.
        producer
            .claim(&mut FutexWait::until(deadline()))
            .map_err(err)?
    } else {
        // Busy claim: a gating consumer that has not caught up holds us back. Spin on
        // the claim condition and claim once (a claim that is dropped aborts, and an
        // abort is a store the polling consumer sees).
        if !producer.is_claimable() {
            spin_until(deadline(), "a free ring slot", || {
                Ok(producer.is_claimable().then_some(()))
            })?;
        }
        producer.try_claim().map_err(err)?
    };
    slot.write(src).map_err(err)?;
    at_publish()?;
    slot.publish().map_err(err)?;
    Ok(())
}

/// What a receiving half keeps per peer.
struct RingPeer {
    consumer: ShmConsumer,
    /// The sequence number the next message read must carry.
    seq: u64,
    /// `ring-batch`: messages read and checked, not yet handed out by `recv`.
    ready: usize,
}

impl RingPeer {
    fn new(consumer: ShmConsumer) -> Self {
        Self {
            consumer,
            seq: 0,
            ready: 0,
        }
    }
}

struct RingRx {
    transport: Transport,
    mode: Mode,
    peers: Vec<RingPeer>,
    buf: Vec<u8>,
}

impl Rx for RingRx {
    fn recv(&mut self, peer: usize, len: usize, deadline: Instant) -> Result<(), BenchError> {
        let transport = self.transport;
        let RingPeer {
            consumer: c, seq, ..
        } = peer_entry(&mut self.peers, transport, peer)?;
        match self.mode {
            Mode::Pinned => spin_until(deadline, "a ring message", || match c.try_pin() {
                // Every byte is usable in place: check the stamps at both ends.
                Ok(p) => check(p.bytes(), len, *seq, transport).map(Some),
                Err(ReadError::Empty) => Ok(None),
                Err(e) => Err(err(e)),
            })?,
            Mode::Copy => {
                let buf = &mut self.buf;
                spin_until(deadline, "a ring message", || match c.try_copy(buf) {
                    Ok(copied) => {
                        let got = buf.get(..copied.len).ok_or_else(|| err("copy overran"))?;
                        check(got, len, *seq, transport).map(Some)
                    }
                    Err(ReadError::Empty) => Ok(None),
                    Err(e) => Err(err(e)),
                })?
            }
            Mode::Futex => {
                let left = deadline.saturating_duration_since(Instant::now());
                let p = c.recv_pinned(left).map_err(|e| match e {
                    ShmReadError::Read(ReadError::Timeout) => {
                        BenchError::timeout("a ring message (futex)")
                    }
                    e => err(e),
                })?;
                check(p.bytes(), len, *seq, transport)?;
            }
        }
        *seq += 1;
        Ok(())
    }
}

/// One message of a `ring-batch` group: a case-sized buffer, of which `len` bytes are sent.
struct Queued {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Queued {
    fn as_ref(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&self.buf)
    }
}

/// `ring-batch`'s sending half: stamps each message into the next buffer of its group, and
/// publishes the group with `try_publish_batch` once it holds [`BATCH_GROUP`] messages (or at
/// [`Tx::flush`]).
struct RingBatchTx {
    producer: ShmProducer,
    group: Vec<Queued>,
    /// Messages of `group` stamped but not yet published.
    queued: usize,
    seq: u64,
}

impl RingBatchTx {
    fn new(producer: ShmProducer, bytes: usize) -> Self {
        Self {
            producer,
            group: (0..BATCH_GROUP)
                .map(|_| Queued {
                    buf: pattern(bytes),
                    len: bytes,
                })
                .collect(),
            queued: 0,
            seq: 0,
        }
    }
}

impl Tx for RingBatchTx {
    /// Queues the message; it becomes visible when its group is published. `at_publish` runs
    /// when the message is queued (`ring-batch` takes part in `throughput` only, whose child
    /// passes a no-op).
    fn send(&mut self, len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        let q = self
            .group
            .get_mut(self.queued)
            .ok_or_else(|| err("batch group overran"))?;
        stamped_message(&mut q.buf, NAME, len, self.seq)?;
        q.len = len;
        self.queued += 1;
        self.seq += 1;
        at_publish()?;
        if self.queued == BATCH_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    /// Publishes the queued messages, as few `try_publish_batch` calls as the consumer allows:
    /// each publishes the prefix that fits, and the rest waits (spinning on `is_claimable`, as
    /// `ring-pinned` does) for the consumer to free slots.
    fn flush(&mut self) -> Result<(), BenchError> {
        let deadline = Instant::now() + crate::wait::RUN_TIMEOUT;
        let mut done = 0;
        while done < self.queued {
            let producer = &mut self.producer;
            let rest = self
                .group
                .get(done..self.queued)
                .ok_or_else(|| err("batch group overran"))?;
            done += spin_until(deadline, "free ring slots", || {
                if !producer.is_claimable() {
                    return Ok(None);
                }
                match producer.try_publish_batch(rest) {
                    Ok(n) => Ok(Some(n)),
                    // Transient (another pin came in meanwhile): spin again.
                    Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => Ok(None),
                    Err(e) => Err(err(e)),
                }
            })?;
        }
        self.queued = 0;
        Ok(())
    }
}

/// `ring-batch`'s receiving half: a `try_read_batch` takes up to [`BATCH_READ`] ready messages
/// at once and checks each inside the callback, while it is pinned; the `recv` calls that follow
/// are served from that count until it runs out.
struct RingBatchRx {
    transport: Transport,
    peers: Vec<RingPeer>,
}

impl Rx for RingBatchRx {
    fn recv(&mut self, peer: usize, len: usize, deadline: Instant) -> Result<(), BenchError> {
        let transport = self.transport;
        let RingPeer {
            consumer: c,
            seq,
            ready,
        } = peer_entry(&mut self.peers, transport, peer)?;
        if *ready == 0 {
            let mut bad = None;
            let n = spin_until(deadline, "ring messages", || {
                let read = c.try_read_batch(BATCH_READ, |item| {
                    // Every byte is usable in place while pinned: check the stamps at both ends.
                    if bad.is_none() {
                        bad = check(item.bytes(), len, *seq, transport).err();
                    }
                    *seq += 1;
                });
                match read {
                    Ok(n) => Ok(Some(n)),
                    Err(ReadError::Empty) => Ok(None),
                    Err(e) => Err(err(e)),
                }
            })?;
            if let Some(e) = bad {
                return Err(e);
            }
            *ready = n;
        }
        *ready = ready
            .checked_sub(1)
            .ok_or_else(|| err("try_read_batch read nothing"))?;
        Ok(())
    }
}

/// The ring of a case. The polling transports (every one but `ring-futex`, whose reads
/// sleep) mark it for asymmetric fences, as a user whose ends poll would
/// ([`Config::with_asymmetric_fences`]).
fn config(
    case_bytes: usize,
    depth: usize,
    consumers: usize,
    transport: Transport,
) -> Result<Config, BenchError> {
    let cap = u32::try_from(case_bytes).map_err(|_| err("message too large for a slot"))?;
    let slots = u32::try_from(depth).map_err(|_| err("too many slots"))?;
    let consumers = u32::try_from(consumers).map_err(|_| err("too many consumers"))?;
    Ok(Config::new(slots, cap)
        .with_consumers(consumers)
        .with_asymmetric_fences(transport != Transport::RingFutex))
}

/// Creates a ring in a file of the case directory, every page reserved and pre-faulted so that
/// no timed iteration pays for a first touch.
fn create(
    path: &std::path::Path,
    config: &Config,
) -> Result<std::sync::Arc<ring_os::raw::Mapping>, BenchError> {
    ShmRing::create_file(path, config, CreateOptions::new().populate(true)).map_err(err)
}

fn down_path(s: &Setup) -> PathBuf {
    s.dir.join(format!("ring-{}-down", s.transport))
}

fn up_path(s: &Setup, child: usize) -> PathBuf {
    s.dir.join(format!("ring-{}-up{child}", s.transport))
}

/// Parent side, first half (see [`super::parent_begin`]).
pub fn parent_begin(setups: &mut [Setup]) -> Result<Pending, BenchError> {
    let first = first_setup(setups)?;
    let transport = first.transport;
    let case = first.case.clone();
    let down = create(
        &down_path(first),
        &config(case.down_bytes(), case.depth, setups.len(), transport)?,
    )?;
    let producer = ShmRing::producer(&down).map_err(err)?;
    let mut peers = Vec::new();
    for s in setups.iter() {
        let up = create(
            &up_path(s, s.child),
            &config(case.up_bytes(), case.depth, 1, transport)?,
        )?;
        peers.push(RingPeer::new(
            ShmRing::consumer(&up, DeliveryClass::Gating).map_err(err)?,
        ));
    }
    Ok(Box::new(move |_| {
        let rx: Box<dyn Rx> = if transport == Transport::RingBatch {
            Box::new(RingBatchRx { transport, peers })
        } else {
            Box::new(RingRx {
                transport,
                mode: mode(transport),
                peers,
                buf: vec![0; case.up_bytes()],
            })
        };
        Ok(Link {
            tx: Box::new(RingTx {
                producer,
                mode: mode(transport),
                buf: pattern(case.down_bytes()),
                seq: 0,
            }),
            rx,
        })
    }))
}

/// Child side (see [`super::child_setup`]).
pub fn child_setup(s: &Setup) -> Result<Link, BenchError> {
    let down = ShmRing::open_file(&down_path(s)).map_err(err)?;
    let consumer = ShmRing::consumer(&down, DeliveryClass::Gating).map_err(err)?;
    let up = ShmRing::open_file(&up_path(s, s.child)).map_err(err)?;
    let producer = ShmRing::producer(&up).map_err(err)?;
    let tx: Box<dyn Tx> = if s.transport == Transport::RingBatch {
        Box::new(RingBatchTx::new(producer, s.case.up_bytes()))
    } else {
        Box::new(RingTx {
            producer,
            mode: mode(s.transport),
            buf: pattern(s.case.up_bytes()),
            seq: 0,
        })
    };
    Ok(Link {
        tx,
        rx: Box::new(RingRx {
            transport: s.transport,
            mode: mode(s.transport),
            peers: vec![RingPeer::new(consumer)],
            buf: vec![0; s.case.down_bytes()],
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{plan, Metric};
    use std::time::Duration;

    /// Both directions' rings have as many slots as the case's depth: the 64-byte round trip
    /// at the default depth and at 2 (`--round-trip-depth`), which the ring's numbers depend on.
    #[test]
    fn round_trip_rings_have_the_case_depth() {
        for depth in [crate::case::ROUND_TRIP_DEPTH.into(), 2] {
            let dir = std::env::temp_dir()
                .join(format!("ring-depth-test-{}-{depth}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let case = plan(false, depth)
                .into_iter()
                .find(|c| c.metric == Metric::RoundTrip && c.bytes == 64)
                .unwrap();
            let s = Setup {
                transport: Transport::RingCopy,
                case,
                child: 0,
                children: 1,
                dir: dir.clone(),
                tag: String::new(),
                port: 0,
            };
            let mut setups = [s.clone()];
            let pending = parent_begin(&mut setups).unwrap();
            for path in [down_path(&s), up_path(&s, 0)] {
                let ring = ShmRing::open_file(&path).unwrap();
                assert_eq!(
                    ring_core::Memory::geometry(&*ring).config().slots as usize,
                    depth,
                    "{path:?}"
                );
            }
            drop(pending);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn batch_link_groups_flushes_and_checks() {
        let dir = std::env::temp_dir().join(format!("ring-batch-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let case = plan(true, crate::case::ROUND_TRIP_DEPTH.into())
            .into_iter()
            .find(|c| c.metric == Metric::Throughput)
            .unwrap();
        let mut setups = [Setup {
            transport: Transport::RingBatch,
            case: case.clone(),
            child: 0,
            children: 1,
            dir: dir.clone(),
            tag: String::new(),
            port: 0,
        }];
        let pending = parent_begin(&mut setups).unwrap();
        let mut child = child_setup(&setups[0]).unwrap();
        let mut parent = pending(Instant::now()).unwrap();
        let soon = || Instant::now() + Duration::from_millis(50);
        let (up, mut nothing) = (case.up_bytes(), || Ok(()));

        // The request goes down the single-message path.
        parent.tx.send(case.down_bytes(), &mut nothing).unwrap();
        child.rx.recv(0, case.down_bytes(), soon()).unwrap();

        // Two whole groups are published as they fill; the last five wait for the flush.
        for _ in 0..2 * BATCH_GROUP + 5 {
            child.tx.send(up, &mut nothing).unwrap();
        }
        for _ in 0..2 * BATCH_GROUP {
            parent.rx.recv(0, up, soon()).unwrap();
        }
        assert!(matches!(
            parent.rx.recv(0, up, soon()),
            Err(BenchError::Timeout { .. })
        ));
        child.tx.flush().unwrap();
        for _ in 0..5 {
            parent.rx.recv(0, up, soon()).unwrap();
        }
        // Nothing more, and a flush with nothing queued publishes nothing.
        child.tx.flush().unwrap();
        assert!(parent.rx.recv(0, up, soon()).is_err());
        drop((parent, child));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
