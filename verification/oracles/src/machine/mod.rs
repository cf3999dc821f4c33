//! The op-level state machine over the one ring model: [`Model`] applies an [`Op`] to a
//! [`RingModel`] (the ring's shared state, `crate::model`) plus what the handles hold between
//! calls (a consumer's pin, its holds' bytes, leaked pins, the adversarial oracle's victims and
//! displaced producers) and the allocator's model.
//!
//! [`Real`](real::Real) drives a real ring over any [`Memory`](ring_core::Memory) with the
//! same [`Op`]s. [`run`](real::run) applies a sequence to both, compares every [`Outcome`],
//! and after every step checks every invariant of `docs/DESIGN.md`
//! ([`Real::check`](real::Real::check) against the model). The proptest state machine, the
//! conformance suite and the `model_ops` fuzz target all go through it; the `ops` and
//! `hostile_peer` oracles drive the same [`RingModel`] call by call.
//!
//! Files by job: this one holds the state and the dispatch; `producer.rs` claims, writes and
//! publishes; `consumers.rs` registration, reads, holds and reclaims; `groups.rs` group
//! members; `alloc.rs` the allocator ops (over the one allocator model,
//! [`AllocModel`]); `op.rs` the operations and outcomes; `real/` the real side.

mod alloc;
mod consumers;
mod groups;
mod op;
mod producer;
pub mod real;

pub use op::*;

use crate::model::{AllocModel, ReaderModel, RingModel};
use ring_core::{ClaimError, DeliveryClass, ReadError};

/// The producer's claim in the model.
#[derive(Clone, Copy, Debug)]
pub struct ModelClaim {
    /// Slot index.
    pub slot: usize,
    /// Sequence.
    pub seq: u64,
    /// Message length so far.
    pub len: usize,
}

/// A consumer handle in the model: the ring model's view of the reader, and what the handle
/// holds between calls.
#[derive(Clone, Debug)]
pub struct ModelConsumer {
    /// The reader as the ring model sees it (owner, class, cursor, counters, holds, group).
    pub reader: ReaderModel,
    /// False once killed: the entry stays until reclaimed.
    pub alive: bool,
    /// The held pin: (slot, seq).
    pub pin: Option<(usize, u64)>,
    /// The pin was leaked (`mem::forget`): its bit stays, but no `Pinned` exists.
    pub leaked: bool,
    /// Each hold's bytes when it was taken, in the order of `reader.holds`.
    pub held: Vec<Vec<u8>>,
}

impl ModelConsumer {
    /// Whether this consumer is a group member.
    pub fn is_member(&self) -> bool {
        self.reader.member.is_some()
    }

    /// Whether it gates the producer with its cursor (no reader bits).
    pub fn gating(&self) -> bool {
        self.reader.class == DeliveryClass::Gating
    }
}

/// The reference model: the ring, the handles, the allocator.
#[derive(Clone, Debug)]
pub struct Model {
    /// Shape.
    pub cfg: ModelConfig,
    /// The ring's shared state.
    pub ring: RingModel,
    /// Owner ids of consumers reclaimed while alive that still hold their handles.
    pub victims: Vec<u64>,
    /// Producers taken over while alive that still hold their handles.
    pub displaced: usize,
    /// The claim in progress.
    pub claim: Option<ModelClaim>,
    /// Consumer handles, by table index.
    pub consumers: Vec<Option<ModelConsumer>>,
    /// Registrations so far (for owner ids).
    pub registrations: u64,
    /// The segment's allocator (`None` without an arena: allocator ops are skipped). ring-core
    /// formats it with a byte ceiling equal to the arena.
    pub alloc: Option<AllocModel>,
}

/// Returns [`Outcome::Skipped`] from the enclosing op when the option is `None`.
macro_rules! or_skip {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Outcome::Skipped,
        }
    };
}
use or_skip;

impl Model {
    /// An empty ring of shape `cfg` (slot capacity rounded up to 8 as ring-core does), its
    /// producer [`PRODUCER_OWNER`].
    pub fn new(cfg: &ModelConfig) -> Self {
        let cap = cfg.capacity.div_ceil(8) as usize * 8;
        let mut ring = RingModel::new(cfg.slots as usize, cap, cfg.consumers as usize)
            .with_never_stall(cfg.never_stall);
        ring.producer_new(PRODUCER_OWNER)
            .expect("a fresh ring has no producer");
        Self {
            cfg: *cfg,
            ring,
            victims: Vec::new(),
            displaced: 0,
            claim: None,
            consumers: vec![None; cfg.consumers as usize],
            registrations: 0,
            alloc: (cfg.arena != 0).then(|| AllocModel::new(cfg.arena, cfg.max_live, cfg.arena)),
        }
    }

    /// Messages published.
    pub fn head(&self) -> u64 {
        self.ring.head
    }

    /// The current producer's owner id.
    pub fn producer_owner(&self) -> u64 {
        self.ring.owner_word
    }

    /// The slot message `seq` (published) is in, as readers find it: its home slot on a plain
    /// ring; on a never-stall ring the slot its home slot's route names, `None` when the route
    /// names a later message (an overrun). The caller still checks the slot's stamp.
    pub fn locate(&self, seq: u64) -> Option<usize> {
        self.ring.locate(seq)
    }

    /// Why a claim of the next sequence would be refused for a gating consumer or a pin
    /// (`Full`, `Pinned`), if it would: what `Producer::is_claimable` tells without claiming.
    pub fn claim_blocked(&self) -> Option<ClaimError> {
        self.ring.claim_blocked()
    }

    /// Slot capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.ring.cap
    }

    /// Reader bits of `slot`: bit `i` when consumer `i` (alive or dead) pins or holds it. A
    /// gating consumer sets none: its pin is its cursor (the gating check keeps the producer
    /// off).
    pub fn readers(&self, slot: usize) -> u32 {
        self.ring.slots[slot].readers
    }

    fn index(&self, consumer: u8) -> usize {
        consumer as usize % self.consumers.len()
    }

    /// The next owner id a registration gets.
    pub fn next_consumer_owner(&self) -> u64 {
        CONSUMER_OWNER_BASE + self.registrations
    }

    /// Whether entry `i` holds a group member (alive or dead).
    pub fn is_member(&self, i: usize) -> bool {
        self.consumers[i]
            .as_ref()
            .is_some_and(ModelConsumer::is_member)
    }

    /// The record of group `group`, if created.
    pub fn record_of(&self, group: u8) -> Option<usize> {
        self.ring.record_of(group_name(group))
    }

    /// Applies `op`; `observed` is the real ring's outcome of the same op, used only to learn
    /// where the allocator placed an allocation (after checking the placement is valid) and to
    /// check a group member's read against its group's ledger.
    ///
    /// # Errors
    /// A [`Failure`] when the real allocator's placement is invalid or a member's read breaks
    /// its group's ledger.
    pub fn apply(&mut self, op: Op, observed: &Outcome) -> Result<Outcome, Failure> {
        Ok(match op {
            Op::Claim => self.claim(),
            Op::Write { offset, len, seed } => self.write(offset as usize, len as usize, seed),
            Op::Publish => self.publish(),
            Op::Abort => match self.claim.take() {
                None => Outcome::Skipped,
                Some(c) => {
                    self.ring.abort(c.slot);
                    Outcome::Aborted
                }
            },
            Op::Pin { consumer } if self.is_member(self.index(consumer)) => Outcome::Skipped,
            Op::Pin { consumer } => self.read(self.index(consumer), None),
            Op::Hold { consumer } if self.is_member(self.index(consumer)) => {
                self.member_take(self.index(consumer), None, observed)?
            }
            Op::Hold { consumer } => self.hold(self.index(consumer)),
            Op::Release { consumer, which } if self.is_member(self.index(consumer)) => {
                self.member_release(self.index(consumer), which)
            }
            Op::Release { consumer, which } => self.release(self.index(consumer), which),
            Op::CopyRead { consumer, buf } if self.is_member(self.index(consumer)) => {
                self.member_take(self.index(consumer), Some(buf as usize), observed)?
            }
            Op::CopyRead { consumer, buf } => self.read(self.index(consumer), Some(buf as usize)),
            Op::Unpin { consumer } => self.unpin(self.index(consumer)),
            Op::Register { class } => self.register(class, self.next_consumer_owner()),
            Op::Deregister { consumer } => self.deregister(self.index(consumer)),
            Op::Kill { consumer } => {
                let i = self.index(consumer);
                match &mut self.consumers[i] {
                    Some(c) if c.alive => {
                        c.alive = false;
                        Outcome::Gone
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::Reclaim { consumer } => self.reclaim(self.index(consumer)),
            Op::Close if self.claim.is_some() => Outcome::Skipped,
            Op::Close => {
                self.ring.close();
                Outcome::Closed
            }
            Op::TakeOver => {
                // The dead producer's claim is dropped (its stamp made odd); the ring reopens.
                self.claim = None;
                let dead = self.ring.owner_word;
                match self.ring.take_over(dead + 1, dead) {
                    Ok(()) => Outcome::TookOver,
                    Err(e) => Outcome::RegisterFailed(e),
                }
            }
            Op::ReclaimLive { consumer } if self.is_member(self.index(consumer)) => {
                Outcome::Skipped
            }
            Op::ReclaimLive { consumer } => self.reclaim_live(self.index(consumer)),
            Op::Victim { which, call } => {
                if self.victims.is_empty() {
                    return Ok(Outcome::Skipped);
                }
                match call {
                    VictimCall::Pin | VictimCall::Copy => Outcome::ReadFailed(ReadError::Evicted),
                    VictimCall::Drop => {
                        self.victims.remove(which as usize % self.victims.len());
                        Outcome::Gone
                    }
                }
            }
            Op::RegisterAs { class, which } => match self.victims.len() {
                0 => Outcome::Skipped,
                n => self.register(class, self.victims[which as usize % n]),
            },
            // The live producer holds a claim: the contract forbids taking over then.
            Op::TakeOverLive { .. } if self.claim.is_some() => Outcome::Skipped,
            Op::TakeOverLive { same_owner } => {
                let old = self.ring.owner_word;
                match self.ring.take_over(old + u64::from(!same_owner), old) {
                    Ok(()) => {
                        self.displaced += 1;
                        Outcome::TookOver
                    }
                    Err(e) => Outcome::RegisterFailed(e),
                }
            }
            Op::Displaced { .. } if self.displaced == 0 => Outcome::Skipped,
            Op::Displaced { call, .. } => match call {
                DisplacedCall::Claim | DisplacedCall::Publish => {
                    Outcome::ClaimFailed(ClaimError::Displaced {
                        owner: self.ring.owner_word,
                        epoch: self.ring.epoch,
                    })
                }
                DisplacedCall::Close => Outcome::Closed,
                DisplacedCall::Drop => {
                    self.displaced -= 1;
                    Outcome::Gone
                }
            },
            Op::ForgetPin { consumer } => {
                let i = self.index(consumer);
                match &mut self.consumers[i] {
                    Some(c) if c.alive && c.pin.is_some() && !c.leaked => {
                        c.leaked = true;
                        Outcome::Leaked
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::Alloc { len, owner } => self.alloc(u64::from(len), owner, observed)?,
            Op::AllocWrite { which, seed, extra } => self.alloc_write(which, seed, extra),
            Op::Free { which, mode } => self.free(which, mode),
            Op::FreeAllOf { owner } => self.free_all_of(owner),
            Op::PublishBatch { count, len, seed } => self.publish_batch(count, len, seed),
            Op::PublishMeta { len, seed } => self.publish_meta(len, seed),
            Op::ReadBatch { consumer, .. } if self.is_member(self.index(consumer)) => {
                Outcome::Skipped
            }
            Op::ReadBatch { consumer, max } => self.read_batch(self.index(consumer), max),
            Op::CreateGroup { group } => self.create_group(group),
            Op::Join { group } => self.join(group),
        })
    }
}
