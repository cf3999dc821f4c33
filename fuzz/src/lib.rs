//! Oracles for the cargo-fuzz targets of `ring-core`.
//!
//! The targets in `fuzz_targets/` are thin: each decodes its input with `arbitrary` and calls one
//! oracle from [`oracles`], panicking on the first violation it reports. The same oracle files
//! are compiled into `ring-core/tests/fuzz_oracles.rs` (by `#[path]`), which runs them on stable
//! over deterministic pseudo-random inputs, the seed corpora and every saved crash reproducer,
//! so anything fuzzing finds stays caught.
//!
//! A fifth target, `model_ops`, drives the verification crate's shared reference model and
//! real-ring driver (`ring_verification::real::run`) instead: a second, independently written
//! model under coverage guidance. Its stable counterpart is that crate's proptest state machine.
#![allow(
    clippy::std_instead_of_core,
    reason = "a std test-support crate; the oracles also build inside a std test binary"
)]

pub mod oracles;
