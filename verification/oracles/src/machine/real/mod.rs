//! The real side of a model run: a producer, consumers that hold pins across operations, and
//! the segment's allocator, over any [`Memory`], driven by [`Op`]s. Files by job: this one
//! holds the handles and [`run`]; `apply.rs` the dispatch; `ops.rs` the operations with more
//! to them; `check.rs` the whole-state comparison with the model after every step.

mod apply;
mod check;
mod ops;

use crate::machine::{
    batch_messages, group_name, pattern, DisplacedCall, Model, Op, Outcome, VictimCall,
    CONSUMER_OWNER_BASE, PRODUCER_OWNER,
};
use crate::machine::{Failure, ALLOC_OWNERS};
use ring_core::arena::Allocator;
use ring_core::inspect::{consumer_info, producer_info, EntryState};
use ring_core::layout::{OWNER_GROUP, READER_MASK, WRITER};
use ring_core::{Consumer, Hold, Memory, OwnerId, Pinned, Producer, WriteSlot, MAX_HOLDS};
use std::ptr::NonNull;

/// A value on the heap plus a guard that mutably borrows it (a [`Pinned`] borrows its
/// [`Consumer`], a [`WriteSlot`] its [`Producer`]), so that a pin or a claim can be held across
/// operations.
struct Held<T, G> {
    /// From `Box::into_raw`; `None` once forgotten.
    raw: Option<NonNull<T>>,
    /// Borrows `*raw` while it exists.
    guard: Option<G>,
}

impl<T, G> Held<T, G> {
    fn new(value: T) -> Self {
        Self {
            raw: Some(NonNull::from(Box::leak(Box::new(value)))),
            guard: None,
        }
    }

    /// The value, when no guard borrows it.
    fn get(&mut self) -> Option<&mut T> {
        if self.guard.is_some() {
            return None;
        }
        // SAFETY: `raw` came from `Box::leak` and is freed only in `drop`/`forget`; no guard
        // borrows it (checked above), and the returned borrow is tied to `&mut self`.
        self.raw.map(|p| unsafe { &mut *p.as_ptr() })
    }

    /// Same as `get` but with the shared borrow.
    fn peek(&self) -> Option<&T> {
        if self.guard.is_some() {
            return None;
        }
        // SAFETY: as in `get`; no guard holds a mutable borrow.
        self.raw.map(|p| unsafe { &*p.as_ptr() })
    }

    /// Runs `f` on a long-lived borrow of the value and keeps the guard it returns.
    ///
    /// The `'b` borrow is manufactured from the raw pointer: sound because the guard is the only
    /// user of the value while it exists (`get` refuses), and it is always dropped (or
    /// forgotten) before the box is freed (`drop`, `forget`).
    fn hold<'b, E>(&mut self, f: impl FnOnce(&'b mut T) -> Result<G, E>) -> Option<Result<(), E>>
    where
        T: 'b,
    {
        if self.guard.is_some() {
            return None;
        }
        let p = self.raw?;
        // SAFETY: see the doc comment: exclusive for as long as the guard lives, and the box
        // outlives the guard.
        let r = f(unsafe { &mut *p.as_ptr() });
        Some(r.map(|g| self.guard = Some(g)))
    }

    /// Leaks nothing but runs no destructor: the guard and the value are forgotten (a crash).
    ///
    /// Takes `&mut self`, never `self`: a by-value `Held` holding a guard would protect the
    /// guard's borrow for the whole call (Stacked Borrows), and freeing the box under it is UB
    /// (Miri found exactly that).
    fn forget(&mut self) {
        std::mem::forget(self.guard.take());
        if let Some(p) = self.raw.take() {
            // SAFETY: `p` came from `Box::leak`, the guard that borrowed it is gone.
            let b = unsafe { Box::from_raw(p.as_ptr()) };
            std::mem::forget(*b);
        }
    }
}

impl<T, G> Drop for Held<T, G> {
    fn drop(&mut self) {
        drop(self.guard.take());
        if let Some(p) = self.raw.take() {
            // SAFETY: `p` came from `Box::leak`; the guard borrowing it was dropped just above.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}

type ProducerCell<'s, M> = Held<Producer<&'s M>, WriteSlot<'s, &'s M>>;
type ConsumerCell<'s, M> = Held<Consumer<&'s M>, Pinned<'s, &'s M>>;

/// A real ring driven by [`Op`]s.
pub struct Real<'s, M: Memory> {
    mem: &'s M,
    producer: Option<ProducerCell<'s, M>>,
    producer_owner: u64,
    consumers: Vec<Option<ConsumerCell<'s, M>>>,
    /// Each consumer's holds, in the order taken (the model keeps the same order).
    holds: Vec<Vec<Hold>>,
    registrations: u64,
    /// Consumers reclaimed while alive, still holding their handles ([`Op::ReclaimLive`]).
    victims: Vec<ConsumerCell<'s, M>>,
    /// Producers taken over while alive, still holding their handles ([`Op::TakeOverLive`]).
    displaced: Vec<ProducerCell<'s, M>>,
    alloc: Option<Allocator<'s>>,
}

/// A held message's bytes, through its words (loom and shuttle builds have no byte view).
fn held_bytes<M: Memory>(c: &Consumer<&M>, h: &Hold) -> Vec<u8> {
    let mut out: Vec<u8> = c
        .held_words(h)
        .unwrap_or_default()
        .iter()
        .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    out.truncate(h.len());
    out
}

fn owner(id: u64) -> OwnerId {
    OwnerId::new(id.max(1)).unwrap_or(OwnerId::new(1).expect("1 is not 0"))
}

impl<'s, M: Memory> Real<'s, M> {
    /// Becomes the producer of `mem` (a freshly formatted segment) and attaches its allocator.
    ///
    /// # Errors
    /// A [`Failure`] when the producer cannot be created or the allocator region is invalid.
    pub fn new(mem: &'s M) -> Result<Self, Failure> {
        // SAFETY: the harness is the only party on `mem` (a fresh segment for its run) that
        // reclaims or takes over, and it does so only through its explicit `ReclaimLive` /
        // `TakeOverLive` steps (the lying oracle it models), which hold no pin or slot when they
        // run and whose old handles are kept only to check that they are fenced out.
        let producer = unsafe { Producer::new_unchecked(mem, owner(PRODUCER_OWNER)) }
            .map_err(|e| Failure(format!("Producer::new: {e}")))?;
        let words = mem.alloc_words();
        let alloc = if words.is_empty() {
            None
        } else {
            Some(Allocator::attach(words).map_err(|e| Failure(format!("attach allocator: {e}")))?)
        };
        Ok(Self {
            mem,
            producer: Some(Held::new(producer)),
            producer_owner: PRODUCER_OWNER,
            consumers: (0..mem.geometry().consumers()).map(|_| None).collect(),
            holds: (0..mem.geometry().consumers())
                .map(|_| Vec::new())
                .collect(),
            registrations: 0,
            victims: Vec::new(),
            displaced: Vec::new(),
            alloc,
        })
    }

    fn index(&self, consumer: u8) -> usize {
        consumer as usize % self.consumers.len()
    }

    /// Whether entry `i` holds a live group member's handle.
    fn is_member(&self, i: usize) -> bool {
        self.consumers[i]
            .as_ref()
            .and_then(Held::peek)
            .is_some_and(|c| c.group().is_some())
    }

    fn take_consumer(&mut self, consumer: u8) -> Option<ConsumerCell<'s, M>> {
        let i = self.index(consumer);
        // Its holds' tokens go with it (inert: the consumer's drop, or its reclaim after a
        // death, ends the holds in shared memory).
        self.holds[i].clear();
        self.consumers[i].take()
    }
}

/// Applies `ops` to a fresh model and the real ring over `mem` (a freshly formatted segment
/// of shape `cfg`), comparing outcomes and checking every invariant after every step; then
/// tears everything down and checks that the accounting returns to its baseline.
///
/// # Errors
/// The first [`Failure`], naming the step.
pub fn run_on<M: Memory>(
    mem: &M,
    cfg: &crate::machine::ModelConfig,
    ops: &[Op],
) -> Result<(), Failure> {
    let mut model = Model::new(cfg);
    let mut real = Real::new(mem)?;
    real.check(&model)
        .map_err(|f| Failure(format!("before any op: {f}")))?;
    for (k, &op) in ops.iter().enumerate() {
        let got = real.apply(op, &model);
        let want = model
            .apply(op, &got)
            .map_err(|f| Failure(format!("step {k} {op:?}: {f}")))?;
        ensure!(
            got == want,
            "step {k} {op:?}: real {got:?} != model {want:?}"
        );
        real.check(&model)
            .map_err(|f| Failure(format!("after step {k} {op:?}: {f}")))?;
    }
    // Invariant 8: after the test, live allocations return to the baseline (zero).
    for o in 0..ALLOC_OWNERS {
        let op = Op::FreeAllOf { owner: o };
        let got = real.apply(op, &model);
        let want = model.apply(op, &got)?;
        ensure!(
            got == want,
            "teardown {op:?}: real {got:?} != model {want:?}"
        );
    }
    if let Some(a) = real.alloc.as_ref() {
        ensure!(a.stats().live == 0, "allocations leaked: {:?}", a.stats());
    }
    Ok(())
}

/// [`run_on`] over a fresh [`HeapSegment`](ring_core::HeapSegment).
///
/// # Errors
/// As [`run_on`], or when the segment cannot be built.
pub fn run(cfg: &crate::machine::ModelConfig, ops: &[Op]) -> Result<(), Failure> {
    let seg = ring_core::HeapSegment::new(&cfg.config(), owner(PRODUCER_OWNER))
        .map_err(|e| Failure(format!("HeapSegment::new: {e}")))?;
    run_on(&seg, cfg, ops)
}
