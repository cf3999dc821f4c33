//! The slot ring across processes: `ring-pinned` (busy-polling consumer, zero-copy pin),
//! `ring-copy` (busy-polling consumer, seqlock copy-out) and `ring-futex` (consumer and producer
//! block on the segment's futex words; zero-copy pin).
//!
//! Each direction is its own segment (a `ring-os` file segment in the case directory, pages
//! reserved and pre-faulted): parent → children (one producer, one gating consumer per child) and
//! child → parent (one per child). The producer writes the message into a claimed slot before the
//! timed publish, as a renderer that draws into the slot would.

use super::{check, pattern, stamp, Link, Pending, Rx, Tx};
use crate::case::Transport;
use crate::ctl::Setup;
use crate::wait::spin_until;
use crate::BenchError;
use ring_core::layout::{ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader};
use ring_core::{
    AtomicU32, AtomicU64, ClaimError, Config, Consumer, DeliveryClass, Geometry, Memory, OwnerId,
    Producer, RawMemory, ReadError, WaitStrategy,
};
use ring_os::{CreateOptions, Segment, SizeCheck};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "ring";

fn err(e: impl core::fmt::Display) -> BenchError {
    BenchError::transport(NAME, e)
}

/// A ring segment in an OS mapping, whose wakes are shared futex wakes.
struct ShmMem {
    // `raw` points into `seg`'s mapping; it has no destructor, and `seg` (dropped after it,
    // in field order) unmaps.
    raw: RawMemory,
    _seg: Segment,
}

/// Views ring-core's atomic (portable-atomic) as the core atomic the futex calls take.
fn core_word(word: &AtomicU32) -> &core::sync::atomic::AtomicU32 {
    // SAFETY: portable-atomic's `AtomicU32` has the size and alignment of `u32` and, on the
    // targets ring-os builds for (CROSS_PROCESS_SAFE), is the native atomic; `as_ptr` points at
    // that word, which lives as long as the borrow of `word`; every access to it is atomic.
    unsafe { core::sync::atomic::AtomicU32::from_ptr(word.as_ptr()) }
}

// SAFETY: every accessor forwards to `raw`, whose bytes are `seg`'s mapping, which lives (mapped)
// as long as `self`; `notify` only adds a futex wake.
unsafe impl Memory for ShmMem {
    fn geometry(&self) -> &Geometry {
        self.raw.geometry()
    }
    fn header(&self) -> &SegmentHeader {
        self.raw.header()
    }
    fn producer_line(&self) -> &ProducerLine {
        self.raw.producer_line()
    }
    fn consumer_entry(&self, index: usize) -> &ConsumerEntry {
        self.raw.consumer_entry(index)
    }
    fn slot_header(&self, index: usize) -> &SlotHeader {
        self.raw.slot_header(index)
    }
    fn payload(&self, index: usize) -> &[AtomicU64] {
        self.raw.payload(index)
    }
    fn alloc_words(&self) -> &[AtomicU64] {
        self.raw.alloc_words()
    }
    fn notify(&self, word: &AtomicU32) {
        ring_os::futex::wake_all(core_word(word));
    }
}

type Mem = Arc<ShmMem>;

fn owner() -> Result<OwnerId, BenchError> {
    ring_os::owner::current().map_err(err)
}

fn create(path: &Path, config: &Config) -> Result<Mem, BenchError> {
    let geometry = Geometry::new(config).map_err(err)?;
    let seg = Segment::create_file(
        path,
        geometry.total_len() as u64,
        CreateOptions::new().populate(true),
    )
    .map_err(err)?;
    // SAFETY: the mapping is fresh (created exclusively just now), page-aligned, `seg.len()`
    // bytes long and stays mapped while `seg` lives, which is as long as the `RawMemory` (both
    // live in the same `ShmMem`); every later access goes through ring-core's atomics.
    let raw =
        unsafe { RawMemory::initialize(seg.as_ptr(), seg.len(), config, owner()?) }.map_err(err)?;
    Ok(Arc::new(ShmMem { raw, _seg: seg }))
}

fn attach(path: &Path) -> Result<Mem, BenchError> {
    let seg = Segment::open_file(path, SizeCheck::AtLeast(1)).map_err(err)?;
    // SAFETY: the mapping is `seg.len()` bytes, page-aligned, and stays mapped while `seg` lives
    // (as long as the `RawMemory`); `attach` validates the bytes as untrusted.
    let raw = unsafe { RawMemory::attach(seg.as_ptr(), seg.len()) }.map_err(err)?;
    Ok(Arc::new(ShmMem { raw, _seg: seg }))
}

/// Futex waits with a deadline (ring-os's futex, bounded by `deadline`).
struct FutexWait {
    deadline: Instant,
}

impl WaitStrategy for FutexWait {
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let _ = ring_os::futex::wait(
            core_word(word),
            expected,
            left.min(Duration::from_millis(100)),
        );
        true
    }
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
        _ => Mode::Pinned,
    }
}

struct RingTx {
    producer: Producer<Mem>,
    mode: Mode,
    buf: Vec<u8>,
    seq: u64,
}

impl Tx for RingTx {
    fn send(
        &mut self,
        len: usize,
        at_publish: &mut dyn FnMut() -> Result<(), BenchError>,
    ) -> Result<(), BenchError> {
        let src = self.buf.get_mut(..len).ok_or_else(|| BenchError::Usage {
            what: format!("{NAME}: {len} bytes exceed the case size"),
        })?;
        stamp(src, self.seq);
        let deadline = Instant::now() + crate::child::RUN_TIMEOUT;
        let mut slot = if self.mode == Mode::Futex {
            self.producer
                .claim(&mut FutexWait { deadline })
                .map_err(err)?
        } else {
            // Busy claim: a gating consumer that has not caught up holds us back.
            let producer = &mut self.producer;
            spin_until(deadline, "a free ring slot", || {
                match producer.try_claim() {
                    Ok(_) => Ok(Some(())),
                    Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => Ok(None),
                    Err(e) => Err(err(e)),
                }
            })?;
            // The loop proved a slot is free; nobody else claims (one producer), so this
            // second claim succeeds (claiming twice keeps the borrow checker simple).
            self.producer.try_claim().map_err(err)?
        };
        slot.write(src).map_err(err)?;
        at_publish()?;
        slot.publish();
        self.seq += 1;
        Ok(())
    }
}

struct RingRx {
    transport: Transport,
    mode: Mode,
    consumers: Vec<Consumer<Mem>>,
    buf: Vec<u8>,
    seq: Vec<u64>,
}

impl Rx for RingRx {
    fn recv(&mut self, peer: usize, len: usize, deadline: Instant) -> Result<(), BenchError> {
        let transport = self.transport;
        let (Some(c), Some(seq)) = (self.consumers.get_mut(peer), self.seq.get_mut(peer)) else {
            return Err(BenchError::Usage {
                what: format!("{transport}: no peer {peer}"),
            });
        };
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
                    Err(ReadError::Empty | ReadError::Busy) => Ok(None),
                    Err(e) => Err(err(e)),
                })?
            }
            Mode::Futex => {
                let p = c.pin(&mut FutexWait { deadline }).map_err(|e| match e {
                    ReadError::Timeout => BenchError::timeout("a ring message (futex)"),
                    e => err(e),
                })?;
                check(p.bytes(), len, *seq, transport)?;
            }
        }
        *seq += 1;
        Ok(())
    }
}

fn config(case_bytes: usize, depth: usize, consumers: usize) -> Result<Config, BenchError> {
    let cap = u32::try_from(case_bytes).map_err(|_| err("message too large for a slot"))?;
    let slots = u32::try_from(depth).map_err(|_| err("too many slots"))?;
    let consumers = u32::try_from(consumers).map_err(|_| err("too many consumers"))?;
    Ok(Config::new(slots, cap).with_consumers(consumers))
}

fn down_path(s: &Setup) -> PathBuf {
    s.dir.join(format!("ring-{}-down", s.transport))
}

fn up_path(s: &Setup, child: usize) -> PathBuf {
    s.dir.join(format!("ring-{}-up{child}", s.transport))
}

/// Parent side, first half (see [`super::parent_begin`]).
pub fn parent_begin(setups: &mut [Setup]) -> Result<Pending, BenchError> {
    let Some(first) = setups.first() else {
        return Err(BenchError::Usage {
            what: "no children".to_owned(),
        });
    };
    let transport = first.transport;
    let case = first.case.clone();
    let me = owner()?;
    let down = create(
        &down_path(first),
        &config(case.down_bytes(), case.depth(), setups.len())?,
    )?;
    let producer = Producer::new(down, me).map_err(err)?;
    let mut consumers = Vec::new();
    for s in setups.iter() {
        let up = create(
            &up_path(s, s.child),
            &config(case.up_bytes(), case.depth(), 1)?,
        )?;
        consumers.push(Consumer::new(up, DeliveryClass::Gating, me).map_err(err)?);
    }
    let n = consumers.len();
    Ok(Box::new(move |_| {
        Ok(Link {
            tx: Box::new(RingTx {
                producer,
                mode: mode(transport),
                buf: pattern(case.down_bytes()),
                seq: 0,
            }),
            rx: Box::new(RingRx {
                transport,
                mode: mode(transport),
                consumers,
                buf: vec![0; case.up_bytes()],
                seq: vec![0; n],
            }),
        })
    }))
}

/// Child side (see [`super::child_setup`]).
pub fn child_setup(s: &Setup) -> Result<Link, BenchError> {
    let me = owner()?;
    let consumer = Consumer::new(attach(&down_path(s))?, DeliveryClass::Gating, me).map_err(err)?;
    let producer = Producer::new(attach(&up_path(s, s.child))?, me).map_err(err)?;
    Ok(Link {
        tx: Box::new(RingTx {
            producer,
            mode: mode(s.transport),
            buf: pattern(s.case.up_bytes()),
            seq: 0,
        }),
        rx: Box::new(RingRx {
            transport: s.transport,
            mode: mode(s.transport),
            consumers: vec![consumer],
            buf: vec![0; s.case.down_bytes()],
            seq: vec![0],
        }),
    })
}
