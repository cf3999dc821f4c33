//! Verification suite for `ring-core`: a reference model and its driver (shared with the fuzz
//! targets), the conformance suite over every [`Memory`](ring_core::Memory) backend, and the
//! loom, proptest and shuttle tests under `tests/`. `docs/VERIFICATION.md` maps every `docs/DESIGN.md`
//! invariant to the tests that check it.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

#[cfg(not(any(ring_loom, ring_shuttle)))]
pub mod conformance;
#[cfg(not(any(ring_loom, ring_shuttle)))]
pub mod model;
#[cfg(not(any(ring_loom, ring_shuttle)))]
pub mod real;
pub mod support;
