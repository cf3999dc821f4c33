//! The slot ring across processes: `ring-pinned` (busy-polling consumer, zero-copy pin),
//! `ring-copy` (busy-polling consumer, seqlock copy-out) and `ring-futex` (consumer and producer
//! block on the segment's futex words; zero-copy pin).
//!
//! Each direction is its own ring (`ring_os::ShmRing` in a file of the case directory, pages
//! reserved and pre-faulted; its `Mapping` wakes futex waiters across processes): parent → children (one producer, one gating consumer per child) and
//! child → parent (one per child). The producer writes the message into a claimed slot before the
//! timed publish, as a renderer that draws into the slot would.

use super::{check, pattern, stamp, Link, Pending, Rx, Tx};
use crate::case::Transport;
use crate::ctl::Setup;
use crate::wait::spin_until;
use crate::BenchError;
use ring_core::{Config, DeliveryClass, ReadError};
use ring_os::{
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
        _ => Mode::Pinned,
    }
}

struct RingTx {
    producer: ShmProducer,
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
        // The deadline is read from the clock only when a wait begins: the floor pays no clock
        // read per message, and neither does a claim that finds its slot free.
        let deadline = || Instant::now() + crate::child::RUN_TIMEOUT;
        let mut slot = if self.mode == Mode::Futex {
            // Blocks on the segment's drain futex while a gating consumer holds the ring full.
            self.producer
                .claim(&mut FutexWait::until(deadline()))
                .map_err(err)?
        } else {
            // Busy claim: a gating consumer that has not caught up holds us back. Spin on
            // the claim condition and claim once (a claim that is dropped aborts, and an
            // abort is a store the polling consumer sees).
            let producer = &mut self.producer;
            if !producer.is_claimable() {
                spin_until(deadline(), "a free ring slot", || {
                    Ok(producer.is_claimable().then_some(()))
                })?;
            }
            self.producer.try_claim().map_err(err)?
        };
        slot.write(src).map_err(err)?;
        at_publish()?;
        slot.publish().map_err(err)?;
        self.seq += 1;
        Ok(())
    }
}

struct RingRx {
    transport: Transport,
    mode: Mode,
    consumers: Vec<ShmConsumer>,
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

fn config(case_bytes: usize, depth: usize, consumers: usize) -> Result<Config, BenchError> {
    let cap = u32::try_from(case_bytes).map_err(|_| err("message too large for a slot"))?;
    let slots = u32::try_from(depth).map_err(|_| err("too many slots"))?;
    let consumers = u32::try_from(consumers).map_err(|_| err("too many consumers"))?;
    Ok(Config::new(slots, cap).with_consumers(consumers))
}

/// Creates a ring in a file of the case directory, every page reserved and pre-faulted so that
/// no timed iteration pays for a first touch.
fn create(
    path: &std::path::Path,
    config: &Config,
) -> Result<std::sync::Arc<ring_os::Mapping>, BenchError> {
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
    let Some(first) = setups.first() else {
        return Err(BenchError::Usage {
            what: "no children".to_owned(),
        });
    };
    let transport = first.transport;
    let case = first.case.clone();
    let down = create(
        &down_path(first),
        &config(case.down_bytes(), case.depth(), setups.len())?,
    )?;
    let producer = ShmRing::producer(&down).map_err(err)?;
    let mut consumers = Vec::new();
    for s in setups.iter() {
        let up = create(
            &up_path(s, s.child),
            &config(case.up_bytes(), case.depth(), 1)?,
        )?;
        consumers.push(ShmRing::consumer(&up, DeliveryClass::Gating).map_err(err)?);
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
    let down = ShmRing::open_file(&down_path(s)).map_err(err)?;
    let consumer = ShmRing::consumer(&down, DeliveryClass::Gating).map_err(err)?;
    let up = ShmRing::open_file(&up_path(s, s.child)).map_err(err)?;
    let producer = ShmRing::producer(&up).map_err(err)?;
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
