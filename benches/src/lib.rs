//! Benchmarks for the slot ring: the cross-process `transport-bench` harness and the helpers the
//! criterion benches share.
//!
//! `transport-bench` runs every transport in one process tree: a parent that measures and two
//! child processes (the same executable, re-executed with a hidden `--child` argument) that play
//! the peers. Cases (metric × size) run one after the other; inside a case, rounds are
//! interleaved across transports after a warm-up, so machine noise spreads over all of them and
//! every figure can be read as a ratio to the floor and to `unix` measured in the same run.
//!
//! Peer crates (iceoryx2, crossbeam, rtrb) are compared in `benches/compare/`, a crate outside
//! the workspace with its own lockfile: the workspace's `Cargo.lock` never carries them. That
//! crate's `transport-bench` runs this harness with its iceoryx2 links ([`link::Peers`]) and
//! holds the criterion baselines against rtrb and crossbeam-queue.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

pub mod case;
pub mod child;
pub mod cli;
pub mod ctl;
pub mod error;
pub mod link;
pub mod micro;
pub mod runner;
pub mod shm;
pub mod stats;
pub mod wait;

pub use error::BenchError;
