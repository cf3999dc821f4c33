//! Blocking the Python way: every wait runs with the GIL released, in slices of at most
//! [`SLICE`], and checks for signals between slices, so Ctrl-C raises `KeyboardInterrupt`
//! within one slice and other Python threads run meanwhile.

use core::time::Duration;
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::Fail;

/// The longest a blocking call stays in Rust before it looks at signals again.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// A validated timeout: `None` waits as long as it takes.
pub(crate) fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_finite() && t >= 0.0 => {
            // Capped at a year: `Instant + Duration` must not overflow.
            let t = Duration::from_secs_f64(t.min(365.0 * 86_400.0));
            Ok(Some(Instant::now() + t))
        }
        Some(t) => Err(PyValueError::new_err(format!(
            "timeout must be None or a finite number of seconds >= 0, not {t}"
        ))),
    }
}

/// Calls `attempt(slice)` with the GIL released until it returns `Some`, an error, or the
/// deadline passes (`Ok(None)`); signals are checked between slices. `attempt` gets at most
/// [`SLICE`] to wait, zero when the deadline has passed (one last non-blocking try).
pub(crate) fn sliced<T, F>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut attempt: F,
) -> PyResult<Option<T>>
where
    T: Send,
    F: FnMut(Duration) -> Result<Option<T>, Fail> + Send,
{
    loop {
        let slice = deadline.map_or(SLICE, |d| {
            d.saturating_duration_since(Instant::now()).min(SLICE)
        });
        match py.allow_threads(|| attempt(slice)) {
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
