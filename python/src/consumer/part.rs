//! `shmring.Part`: one part of a queue message received with `zero_copy` (see `get`).

use core::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use super::Consumer;
use crate::errors::Fail;
use crate::export::{self, RawView};

/// One part of a message received with `zero_copy`: exports the part's bytes in the ring
/// (slot or allocation) read-only, counted as exports of the consumer's pin, so the pin is
/// not released while a view lives (the next `get` raises `BufferError` then).
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Part {
    pub(crate) consumer: Py<Consumer>,
    pub(crate) exports: Arc<AtomicUsize>,
    /// The parts of this message still alive (shared by them): the last one to go releases
    /// the pin, so a receiver that dropped everything does not hold the sender back.
    pub(crate) siblings: Arc<AtomicUsize>,
    pub(crate) pin_id: u64,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    /// A spilled message's segment, mapped while any of its parts lives (only kept, never
    /// read: `addr` points into it).
    pub(crate) _spill: Option<Arc<ring_os::raw::Segment>>,
}

impl Drop for Part {
    fn drop(&mut self) {
        // Relaxed: every Part is created and dropped with the GIL held, which orders them.
        if self.siblings.fetch_sub(1, Ordering::Relaxed) != 1 {
            return;
        }
        // No Python call and no error object here (as in `Message`'s destructor): a
        // destructor may run while an exception propagates.
        Python::with_gil(|_py| super::release_pin(&self.consumer, self.pin_id));
    }
}

#[pymethods]
impl Part {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Exports the bytes read-only.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `view` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: RawView, flags: c_int) -> PyResult<()> {
        export::refuse_writable(
            flags,
            "a zero-copy queue buffer is read-only (use get() for a writable copy)",
        )?;
        let me = slf.get();
        if !super::pin_is(slf.py(), &me.consumer, me.pin_id) {
            return Err(Fail::new(
                "Closed",
                "this zero-copy buffer's message was released (a later get, or close)",
            )
            .into());
        }
        // SAFETY: `view` is the interpreter's; the bytes stay mapped and unchanged while the
        // export count keeps the pin (the consumer refuses to unpin) and the pin keeps the
        // slot, and so its allocation, from being reclaimed.
        unsafe {
            export::fill(
                slf.as_any(),
                view,
                (me.addr, me.len),
                true,
                flags,
                &me.exports,
            )
        }
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
