//! Verification suite for `ring-core`: the conformance suite over every
//! [`Memory`](ring_core::Memory) backend, the helpers the model checkers share, and the loom,
//! proptest and shuttle tests under `tests/`. The specification they check against (the one
//! ring model, the op-level state machine and its real-ring driver) is the `ring-oracles`
//! crate (`verification/oracles`), which the fuzz targets and ring-core's tests use too.
//! `docs/VERIFICATION.md` maps every `docs/DESIGN.md` invariant to the tests that check it.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

#[cfg(not(any(ring_loom, ring_shuttle)))]
pub mod conformance;
pub mod support;
