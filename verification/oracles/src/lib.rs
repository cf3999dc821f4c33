//! The fuzz oracles, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`, built with nightly
//! and sanitizers) and by `ring-core/tests/fuzz_oracles.rs` (the same oracles on stable inside
//! `cargo test`, over the seed corpora, every saved crash reproducer and a pseudo-random budget).
//! Unpublished; not part of any product crate.
//!
//! Each oracle takes a structured input (decoded with `arbitrary`), drives
//! `ring-core` with it and returns `Err(description)` on the first violated property.
//!
//! | module | target | property |
//! |---|---|---|
//! | [`attach`] | `attach` | arbitrary bytes never panic or read out of bounds; accepted segments serve every read and inspection with documented errors only |
//! | [`ops`] | `ops` | single-threaded producer/consumer op sequences agree step by step with the reference [`model`] |
//! | [`hostile`] | `hostile_peer` | op sequences interleaved with a peer overwriting shared words: clear errors, bounded loops, no panic |
//! | [`allocator`] | `allocator` | alloc/free/write sequences keep the ceilings and the accounting of a model; the bounded writer stays inside its reservation |
//!
//! The oracles depend on `ring-core` and `arbitrary` alone (re-exported, so a user decodes
//! inputs with the same version). Under the model checkers' cfgs (`ring_loom`, `ring_shuttle`)
//! the crate is empty: ring-core's loom and shuttle builds compile its dev-dependencies too.
#![cfg(not(any(ring_loom, ring_shuttle)))]
#![allow(clippy::std_instead_of_core, reason = "a std test-support crate")]

pub use arbitrary;

/// Returns `Err(format!(...).into())` from the enclosing function when `cond` is false: the
/// one `ensure!` of the verification tree (an oracle's `String`, the state machine's
/// [`Failure`](machine::Failure), the conformance suite's).
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(::std::convert::From::from(format!($($arg)+)));
        }
    };
}

pub mod allocator;
pub mod attach;
pub mod harness;
mod harness_check;
mod harness_group;
mod harness_read;
pub mod hostile;
pub mod machine;
pub mod model;
pub mod ops;
pub mod seeds;

/// What an oracle returns: `Err` names the violated property and the values that broke it.
pub type Outcome = Result<(), String>;

/// Checks an error's `Display` says something (every error must tell the user what happened).
pub fn displays<E: core::fmt::Display>(e: &E) -> Outcome {
    let text = e.to_string();
    ensure!(
        !text.trim().is_empty(),
        "an error displays as an empty string"
    );
    Ok(())
}
