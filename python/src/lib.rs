//! `shmring._shmring`: the native half of the `shmring` Python package (PyO3). It wraps
//! ring-os's front door — `Ring`, its producer and consumers, pinned zero-copy reads and
//! in-place writes — and never re-implements the protocol. The Python half
//! (`pysrc/shmring/`) holds the exception classes and the queue.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

mod aio;
mod arena;
mod consumer;
mod copy;
mod dlpack;
mod errors;
mod export;
mod handoff;
mod producer;
mod queue;
mod recycle;
mod ring;
mod spill;
mod sweep;
mod wait;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _shmring(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ring::Ring>()?;
    m.add_class::<producer::Producer>()?;
    m.add_class::<producer::Claim>()?;
    m.add_class::<producer::QueueClaim>()?;
    m.add_class::<consumer::Consumer>()?;
    m.add_class::<consumer::Message>()?;
    m.add_class::<consumer::Part>()?;
    m.add_class::<arena::Allocator>()?;
    m.add_class::<arena::Allocations>()?;
    m.add_class::<arena::Block>()?;
    m.add_class::<recycle::Buffer>()?;
    m.add_class::<aio::Notifier>()?;
    m.add_class::<aio::Driver>()?;
    m.add_function(wrap_pyfunction!(aio::_async_pending, m)?)?;
    m.add("SLICE_SECONDS", wait::SLICE.as_secs_f64())?;
    m.add_function(wrap_pyfunction!(wait::_interpreter_exiting, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::_sweep_stale_queues, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::_remove_idle_spills, m)?)?;
    Ok(())
}
