//! Blocking the Python way: every wait runs with the GIL released, in slices of at most
//! [`SLICE`], and checks for signals between slices, so Ctrl-C raises `KeyboardInterrupt`
//! within one slice and other Python threads run meanwhile. A try that cannot block (its
//! deadline already passed: `timeout=0`) keeps the GIL instead ([`sliced`]).
//!
//! # Interpreter exit
//!
//! While the interpreter finalizes, a thread other than the finalizing one that takes the GIL
//! back is terminated by CPython (3.11-3.13 call `pthread_exit`), and that forced unwind
//! through this module's Rust frames aborts the process (`FATAL: exception not rethrown`). So
//! a thread never takes the GIL back once the interpreter started to exit: the package
//! registers [`interpreter_exiting`] with `atexit` (which runs before CPython marks the
//! runtime finalizing), and [`unlocked`] parks a returning thread for good instead — after it
//! gave back what it holds ([`GiveBack`]) — until the process ends. A daemon thread blocked in
//! a `get` at exit thus dies with the process, as one blocked in `time.sleep` does.
//!
//! The race between a thread that decided to take the GIL back and the exit hook is closed
//! the way Dekker's algorithm does (both sides `SeqCst`): a returning thread counts itself in
//! [`TRANSIT`] and then reads [`EXITING`]; the hook sets `EXITING` and then waits, with the
//! GIL released, until `TRANSIT` is zero. Either the thread sees the flag and parks, or the
//! hook sees the thread and lets it back into Python before finalization begins.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;
use std::cell::Cell;
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::Fail;

/// The longest a blocking call stays in Rust before it looks at signals again.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// Set once by [`interpreter_exiting`]; never cleared. `SeqCst`: pairs with [`TRANSIT`]
/// (see the module doc).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Threads between "decided to take the GIL back" and "holds it": 0 or more, incremented
/// before reading [`EXITING`], decremented with the GIL held. `SeqCst`: pairs with `EXITING`.
static TRANSIT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread ran the exit hook: it is the one finalizing, which CPython never
    /// terminates, so it may keep taking the GIL back.
    static FINALIZER: Cell<bool> = const { Cell::new(false) };
}

/// A validated timeout: `None` (or infinity) waits as long as it takes.
pub(crate) fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t == f64::INFINITY => Ok(None),
        Some(t) if t.is_finite() && t >= 0.0 => {
            // Capped at a year: `Instant + Duration` must not overflow.
            let t = Duration::from_secs_f64(t.min(365.0 * 86_400.0));
            Ok(Some(Instant::now() + t))
        }
        Some(t) => Err(PyValueError::new_err(format!(
            "timeout must be None or a number of seconds >= 0 (inf: no timeout), not {t}"
        ))),
    }
}

/// What a blocking call holds while the GIL is released and must hand back before its thread
/// is parked at interpreter exit (an endpoint's lease, see `handoff`).
pub(crate) trait GiveBack: Send {
    /// Returns what is held to its owner, without the GIL.
    fn give_back(&mut self);
}

impl GiveBack for () {
    fn give_back(&mut self) {}
}

/// Runs `f(held)` with the GIL released. If the interpreter started to exit meanwhile, this
/// thread never returns: it drops `f`'s result, gives `held` back and parks until the process
/// ends (see the module doc).
pub(crate) fn unlocked<L, T, F>(py: Python<'_>, held: &mut L, f: F) -> T
where
    L: GiveBack,
    T: Send,
    F: FnOnce(&mut L) -> T + Send,
{
    let out = py.allow_threads(move || {
        let out = f(held);
        // SeqCst: the increment and the load below pair with the store and the load in
        // `interpreter_exiting` (Dekker, see the module doc).
        TRANSIT.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) && !FINALIZER.with(Cell::get) {
            TRANSIT.fetch_sub(1, Ordering::SeqCst);
            drop(out);
            held.give_back();
            loop {
                std::thread::park();
            }
        }
        out
    });
    // SeqCst: as above; the GIL is held again.
    TRANSIT.fetch_sub(1, Ordering::SeqCst);
    out
}

/// The largest copy a non-blocking try makes with the GIL held (see [`sliced_copying`]).
pub(crate) const GIL_COPY_MAX: usize = 64 * 1024;

/// Calls `attempt(held, slice)` with the GIL released until it returns `Some`, an error, or
/// the deadline passes (`Ok(None)`); signals are checked between slices. `attempt` gets at
/// most [`SLICE`] to wait, zero when the deadline has passed (one last non-blocking try).
///
/// A try with a zero slice (`timeout=0`, or the last try once the deadline passed) cannot
/// block, so it runs with the GIL held: releasing and retaking it would cost more than the
/// try itself (a non-blocking `recv` or `publish` is a few hundred nanoseconds, and taking
/// the GIL back wakes whichever thread waits for it).
pub(crate) fn sliced<L, T, F>(
    py: Python<'_>,
    deadline: Option<Instant>,
    held: &mut L,
    attempt: F,
) -> PyResult<Option<T>>
where
    L: GiveBack,
    T: Send,
    F: FnMut(&mut L, Duration) -> Result<Option<T>, Fail> + Send,
{
    sliced_copying(py, deadline, held, 0, attempt)
}

/// [`sliced`] for an `attempt` that copies up to `copies` bytes when it succeeds: a zero-slice
/// try keeps the GIL only when that copy is at most [`GIL_COPY_MAX`], so a large copy still
/// lets other Python threads run.
pub(crate) fn sliced_copying<L, T, F>(
    py: Python<'_>,
    deadline: Option<Instant>,
    held: &mut L,
    copies: usize,
    mut attempt: F,
) -> PyResult<Option<T>>
where
    L: GiveBack,
    T: Send,
    F: FnMut(&mut L, Duration) -> Result<Option<T>, Fail> + Send,
{
    loop {
        let slice = deadline.map_or(SLICE, |d| {
            d.saturating_duration_since(Instant::now()).min(SLICE)
        });
        let tried = if slice.is_zero() && copies <= GIL_COPY_MAX {
            attempt(held, slice)
        } else {
            unlocked(py, held, |h| attempt(h, slice))
        };
        match tried {
            Ok(Some(v)) => return Ok(Some(v)),
            Ok(None) => {}
            Err(f) => return Err(f.into_py(py)),
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// The `atexit` hook (`shmring._shmring._interpreter_exiting`): from now on a thread leaving
/// a wait parks instead of taking the GIL back; returns once every thread already on its way
/// back holds the GIL (or gave it up again).
#[pyfunction]
pub(crate) fn _interpreter_exiting(py: Python<'_>) {
    FINALIZER.with(|f| f.set(true));
    // SeqCst: pairs with the load in `unlocked` (see the module doc).
    EXITING.store(true, Ordering::SeqCst);
    // SeqCst: pairs with the increment in `unlocked`.
    while TRANSIT.load(Ordering::SeqCst) > 0 {
        py.allow_threads(|| std::thread::sleep(Duration::from_millis(1)));
    }
}
