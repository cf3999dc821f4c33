//! The conformance suite: generic test bodies over the [`Memory`] trait, run against every
//! backend (heap, owned, the ring-os mapping; `tests/conformance.rs` instantiates them).
//!
//! A backend is anything that can make a fresh, formatted segment for a [`Config`]. Every
//! check returns `Err(Failure)` on the first violation, naming it.
//!
//! Files by job: this one holds the backends, the helpers and the list; `single.rs` the
//! single-threaded checks and the model sequences; `threads.rs` the checks that race threads.

mod single;
mod threads;

pub use single::*;
pub use threads::*;

use core::sync::atomic::Ordering;
use ring_core::inspect::total_pins;
use ring_core::layout::WRITER;
use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, Memory, OwnerId, Producer, ReadError, Spin,
    SpinThenYield,
};
use ring_oracles::ensure;
use ring_oracles::machine::real::run_on;
use ring_oracles::machine::{Class, Failure, FreeMode, ModelConfig, Op};
use ring_oracles::seeds::PlainXorShift;
use std::sync::Arc;

/// A memory backend under test.
pub trait Backend {
    /// The memory handle it makes (shared between threads by the stress check).
    type Mem: Memory + Send + Sync + 'static;
    /// A fresh segment of shape `config`, formatted, created by owner 1.
    ///
    /// # Errors
    /// A [`Failure`] when the backend cannot make one.
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure>;
}

/// ring-core's owned segment (the loom shape), created by owner 1.
#[derive(Clone, Copy, Debug)]
pub struct Owned;

impl Backend for Owned {
    type Mem = ring_core::OwnedSegment;
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure> {
        ring_core::OwnedSegment::new(config, crate::support::id(1))
            .map_err(|e| Failure(e.to_string()))
    }
}

/// One named check's result.
pub type Check = Result<(), Failure>;

fn id(n: u64) -> OwnerId {
    OwnerId::new(n).unwrap_or(OwnerId::new(1).expect("1 is not 0"))
}

fn fail<E: core::fmt::Display>(what: &'static str) -> impl Fn(E) -> Failure {
    move |e| Failure(format!("{what}: {e}"))
}

// The suite's participants. Every memory it joins is a fresh segment from a `Backend` that no
// one else uses, and nothing in the suite judges a participant dead on a verdict of its own:
// its reclaims are explicit `unsafe` calls with their own promises. So the `*_unchecked`
// contract (no liveness verdict displaces this participant while it lives) holds.

fn join_producer<M: Memory>(m: M, owner: OwnerId) -> Result<Producer<M>, Failure> {
    // SAFETY: see above: no liveness oracle runs on the suite's memories.
    unsafe { Producer::new_unchecked(m, owner) }.map_err(fail("producer"))
}

fn join_consumer<M: Memory>(
    m: M,
    class: DeliveryClass,
    owner: OwnerId,
) -> Result<Consumer<M>, Failure> {
    // SAFETY: see above: no liveness oracle runs on the suite's memories.
    unsafe { Consumer::new_unchecked(m, class, owner) }.map_err(fail("consumer"))
}

/// A producer (owner 1) and a consumer of each of `classes` (owners 2, 3, ...), joined in
/// that order.
fn join_all<M: Memory + Copy, const N: usize>(
    m: M,
    classes: [DeliveryClass; N],
) -> Result<(Producer<M>, [Consumer<M>; N]), Failure> {
    let p = join_producer(m, id(1))?;
    let mut consumers = Vec::with_capacity(N);
    for (k, class) in classes.into_iter().enumerate() {
        consumers.push(join_consumer(m, class, id(2 + k as u64))?);
    }
    let consumers = consumers
        .try_into()
        .map_err(|_| Failure("joined a consumer of each class".into()))?;
    Ok((p, consumers))
}

/// Every check, by name, for `backend`.
pub fn all<B: Backend>(backend: &B) -> Vec<(&'static str, Check)> {
    vec![
        ("roundtrip", roundtrip(backend)),
        (
            "pinned_slot_is_not_claimable",
            pinned_slot_is_not_claimable(backend),
        ),
        ("gating_is_lossless", gating_is_lossless(backend)),
        (
            "skip_on_lag_counts_exactly",
            skip_on_lag_counts_exactly(backend),
        ),
        ("reclaim_is_exact", reclaim_is_exact(backend)),
        (
            "hostile_length_is_refused",
            hostile_length_is_refused(backend),
        ),
        (
            "hostile_stamp_is_refused",
            hostile_stamp_is_refused(backend),
        ),
        ("bounded_waits", bounded_waits(backend)),
        ("model_sequences", model_sequences(backend)),
        ("threaded_stress", threaded_stress(backend)),
        (
            "pin_unpin_claim_race_free",
            pin_unpin_claim_race_free(backend),
        ),
        (
            "batch_unpin_claim_race_free",
            batch_unpin_claim_race_free(backend),
        ),
    ]
}

/// Runs [`all`] and fails with every failing check named.
///
/// # Errors
/// A [`Failure`] listing each failing check.
pub fn run_all<B: Backend>(backend: &B) -> Check {
    let failed: Vec<String> = all(backend)
        .into_iter()
        .filter_map(|(name, r)| r.err().map(|f| format!("{name}: {f}")))
        .collect();
    ensure!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(())
}
