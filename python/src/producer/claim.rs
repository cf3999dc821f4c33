//! In-place writes: `shmring.Claim` (a slot of a pin-only ring, `Producer.claim`) and
//! `shmring.QueueClaim` (the out-of-band buffer of a queue message, `Producer._claim_parts`).

use core::ffi::c_int;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use ring_os::raw::Segment;

use super::{put, Lent, Producer};
use crate::errors::{self, exported_fail, Fail};
use crate::export::{self, RawView};

/// A slot claimed for writing in place (`Producer.claim`). Exports exactly `nbytes` writable
/// bytes of the slot through the buffer protocol; `publish()` or `abort()` ends it (the `with`
/// block does one of them). Neither runs while a view of the buffer is alive (`BufferError`):
/// the slot stays claimed until the views are released; a claim that is garbage-collected
/// unpublished gives its slot back.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Claim {
    pub(super) producer: Py<Producer>,
    /// The loan's export count (see [`Lent::exports`]).
    pub(super) exports: Arc<AtomicUsize>,
    pub(super) loan_id: u64,
    pub(super) nbytes: usize,
    /// The memoryview `__enter__` handed out, released at `__exit__`.
    pub(super) view: Mutex<Option<Py<PyAny>>>,
}

impl Claim {
    /// Runs `f` on the producer state if this claim's loan is still open. `f` runs under the
    /// producer's lock: it must not call Python.
    fn with_loan<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Lent) -> Result<T, Fail>,
    ) -> PyResult<T> {
        let id = self.loan_id;
        let done = self
            .producer
            .get()
            .lent
            .with(|l| (l.loan.is_some() && l.loan_id == id).then(|| f(l)))
            .flatten();
        done.unwrap_or_else(|| {
            Err(Fail::new(
                "Closed",
                "this claim was already published or aborted",
            ))
        })
        .map_err(|f| f.into_py(py))
    }

    /// Releases the memoryview handed out by `__enter__` (raises if views of it are alive).
    fn release_view(&self, py: Python<'_>) -> PyResult<()> {
        // Taken even when the release fails: a reference kept here would form a cycle with the
        // view (which references this claim) and keep the slot claimed forever.
        let taken = self.view.lock().map_or(None, |mut v| v.take());
        match taken {
            Some(v) => v.bind(py).call_method0("release").map(|_| ()),
            None => Ok(()),
        }
    }

    /// Ends the loan: publishes it (`publish`) or gives the slot back.
    fn finish(&self, py: Python<'_>, publish: bool) -> PyResult<Option<u64>> {
        let what = if publish {
            "publish the claim"
        } else {
            "abort the claim"
        };
        self.release_view(py)
            .map_err(|_| exported_fail(what).into_py(py))?;
        // Sent (or dropped) under the producer's lock: the loan borrows the publisher.
        let seq = self.with_loan(py, |l| {
            if export::live(&l.exports) {
                return Err(exported_fail(what));
            }
            match l.loan.take() {
                Some(loan) if publish => loan.send().map(Some).map_err(errors::send),
                _ => Ok(None),
            }
        })?;
        Ok(seq.map(|s| self.producer.get().published(s)))
    }
}

#[pymethods]
impl Claim {
    /// The reserved length.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    fn __len__(&self) -> usize {
        self.nbytes
    }

    /// Publishes the written bytes; returns the sequence number.
    fn publish(&self, py: Python<'_>) -> PyResult<u64> {
        self.finish(py, true)?.ok_or_else(|| {
            Fail::new("Closed", "this claim was already published or aborted").into()
        })
    }

    /// Gives the slot back unpublished.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false).map(|_| ())
    }

    /// A writable memoryview of exactly `nbytes` bytes of the slot.
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let mv = py
            .import("builtins")?
            .getattr("memoryview")?
            .call1((slf,))?;
        if let Ok(mut v) = slf.get().view.lock() {
            *v = Some(mv.clone().unbind());
        }
        Ok(mv.unbind())
    }

    /// Publishes on a clean exit, aborts on an exception.
    #[pyo3(signature = (*args))]
    fn __exit__(&self, py: Python<'_>, args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let failed = crate::errors::raised(args);
        match self.finish(py, !failed) {
            Err(e) if !failed => Err(e),
            // An exception is already propagating: do not replace it.
            _ => Ok(false),
        }
    }

    /// Exports the claimed bytes, writable.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `view` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: RawView, flags: c_int) -> PyResult<()> {
        let py = slf.py();
        let me = slf.get();
        let bytes = me.with_loan(py, |l| Ok(l.bytes))?;
        // SAFETY: `view` is the interpreter's; the loan's bytes (exactly `nbytes`: a view cannot
        // reach past the reservation) stay ours to write while the export count keeps the loan
        // open (`finish` refuses).
        unsafe { export::fill(slf.as_any(), view, bytes, false, flags, &me.exports) }
    }

    /// Drops one export.
    ///
    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: RawView) {
        export::release(&slf.get().exports);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // A claim that goes away unpublished gives its slot back (no view can be alive: each
        // holds a reference to the claim).
        // No Python call here (no error objects either): a destructor may run while an
        // exception is propagating, and calling into Python then would clobber it.
        let id = self.loan_id;
        self.producer.get().lent.with(|l| {
            if l.loan_id == id && !export::live(&l.exports) {
                l.loan = None;
            }
        });
    }
}

/// The out-of-band buffer of a queue message being written in place (`Sender.claim` in
/// `shmring.queue`): exports exactly `nbytes` writable bytes of the message's allocation or
/// spill segment (never its slot) until `publish()` or `abort()`. An array made over it may
/// outlive the claim (the `as` target of a `with`): the queue makes it read-only when it
/// publishes, and the memory stays mapped while it lives (the ring's mapping through the
/// producer, a spill segment's through this object); writes through another view after the
/// publish would change the message under its reader, as any writer of shared memory could,
/// and never reach memory outside the message's place. A claim garbage-collected unpublished
/// gives its slot back.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct QueueClaim {
    producer: Py<Producer>,
    loan_id: u64,
    bytes: (usize, usize),
    /// The spill segment the buffer lies in, mapped while this object lives.
    _spill: Option<Arc<Segment>>,
}

impl QueueClaim {
    pub(super) fn new(
        producer: Py<Producer>,
        loan_id: u64,
        bytes: (usize, usize),
        spill: Option<Arc<Segment>>,
    ) -> Self {
        Self {
            producer,
            loan_id,
            bytes,
            _spill: spill,
        }
    }

    /// Runs `f` on the producer state while this claim's loan is open; `None` otherwise.
    fn open<T>(&self, f: impl FnOnce(&mut Lent) -> T) -> Option<T> {
        let id = self.loan_id;
        self.producer
            .get()
            .lent
            .with(|l| (l.loan.is_some() && l.loan_id == id).then(|| f(l)))
            .flatten()
    }

    /// Drops the loan (the slot goes back) and what was made for the message.
    fn give_up(l: &mut Lent) {
        l.loan = None;
        if let Some(p) = l.pending.take() {
            p.abandon();
        }
    }
}

/// A claim already published or aborted.
fn ended() -> Fail {
    Fail::new("Closed", "this claim was already published or aborted")
}

#[pymethods]
impl QueueClaim {
    /// The buffer's length.
    #[getter]
    fn nbytes(&self) -> usize {
        self.bytes.1
    }

    /// Publishes the message; returns its sequence number.
    fn publish(&self, py: Python<'_>) -> PyResult<u64> {
        let sent = self.open(|l| {
            let loan = l.loan.take().ok_or_else(ended)?;
            let pending = l.pending.take().ok_or_else(ended)?;
            put::publish(l, loan, pending)
        });
        let seq = sent
            .unwrap_or_else(|| Err(ended()))
            .map_err(|f| f.into_py(py))?;
        Ok(self.producer.get().published(seq))
    }

    /// Gives the slot back unpublished.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.open(Self::give_up).ok_or_else(|| ended().into_py(py))
    }

    /// Exports the buffer, writable, while the claim is open.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `view` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: RawView, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        me.open(|_| ()).ok_or_else(|| ended().into_py(slf.py()))?;
        // SAFETY: `view` is the interpreter's; the bytes (exactly `nbytes`) are the message's
        // allocation in the ring's mapping (kept by the producer this object references) or
        // its part of a spill segment (kept mapped by `_spill`), never a slot: they stay
        // mapped for as long as the view (which references this object) lives.
        unsafe { export::fill_view(slf.as_any(), view, me.bytes, false, flags) }
    }

    /// Nothing to count: a view may outlive the claim (see the type's doc).
    ///
    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(_slf: Bound<'_, Self>, _view: RawView) {}
}

impl Drop for QueueClaim {
    fn drop(&mut self) {
        // Unpublished: the slot goes back (no Python call here, see `Claim`'s drop).
        let _ = self.open(Self::give_up);
    }
}
