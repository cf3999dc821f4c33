//! `shmring.Message`: one pinned message, exported zero-copy (buffer protocol, DLPack) and
//! released on its own, in any order with the consumer's other messages.

use core::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{lock, release_pin, Consumer};
use crate::errors::Fail;
use crate::export::{self, RawView};

/// A pinned message: exports the slot's bytes read-only through the buffer protocol
/// (`memoryview(msg)`, `np.frombuffer(msg, np.uint8)`, `pa.py_buffer(msg)`) without a copy.
/// The slot stays pinned until `release()` (or the end of a `with` block, the message's
/// collection, or the consumer's `close()`), and never while a buffer export is alive:
/// releasing early raises `BufferError`. Other messages of the same consumer stay pinned.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Message {
    pub(super) consumer: Py<Consumer>,
    /// This message's export count (shared with its record in the consumer's pins).
    pub(super) exports: Arc<AtomicUsize>,
    /// Its id in the consumer's pins.
    pub(super) id: u64,
    /// Address and length of its bytes (valid while it is pinned).
    pub(super) bytes: (usize, usize),
    pub(super) seq: u64,
    pub(super) missed: u64,
    pub(super) len: usize,
    pub(super) meta: [u64; 2],
    /// Handed out before, to a group member that died holding it.
    pub(super) redelivered: bool,
}

impl Message {
    /// This message's bytes if it is still pinned: with the GIL (`_py`) held they stay pinned
    /// until the caller releases the GIL (records leave only with it; see the module doc of
    /// `consumer`).
    fn pinned(&self, _py: Python<'_>) -> PyResult<(usize, usize)> {
        if lock(&self.consumer.get().pins).find(self.id).is_some() {
            return Ok(self.bytes);
        }
        Err(Fail::new(
            "Closed",
            "this message was released (release(), its with block, or the consumer's close)",
        )
        .into())
    }

    /// Releases the message (`BufferError` while an export is alive; nothing when released).
    fn let_go(&self, py: Python<'_>, what: &str) -> PyResult<()> {
        self.consumer
            .get()
            .let_go(py, self.id, what)
            .map_err(|f| f.into_py(py))
    }
}

#[pymethods]
impl Message {
    /// Sequence number.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Messages skipped just before this one.
    #[getter]
    fn missed(&self) -> u64 {
        self.missed
    }

    /// Whether a group member that died holding this message had it before (delivery in a
    /// group is at-least-once, and a repeat says so); always False outside groups.
    #[getter]
    fn redelivered(&self) -> bool {
        self.redelivered
    }

    /// The two metadata words.
    #[getter]
    fn meta(&self) -> (u64, u64) {
        (self.meta[0], self.meta[1])
    }

    /// Whether the message is released.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.pinned(py).is_err()
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// A copy of the bytes.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let (ptr, len) = self.pinned(py)?;
        // SAFETY: the message is pinned and the GIL is held since `pinned` checked it, so
        // these bytes are mapped and stable (a message is let go only with the GIL).
        Ok(PyBytes::new(py, unsafe {
            core::slice::from_raw_parts(ptr as *const u8, len)
        }))
    }

    /// Releases the message: the producer may reuse its slot. Raises `BufferError` while an
    /// export (a memoryview, a numpy array, an Arrow buffer, a DLPack capsule) is alive;
    /// does nothing when it was released already. The consumer's other messages stay pinned.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.let_go(py, "release the message")
    }

    /// The same as `release()`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.let_go(py, "close the message")
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.let_go(py, "release the message")?;
        Ok(false)
    }

    /// The DLPack device: `(kDLCPU, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// A DLPack capsule viewing the bytes as a 1-D uint8 tensor (read-only: do not write
    /// through it). The message counts it as an export until the capsule's consumer deletes
    /// it.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (stream, max_version, dl_device);
        if copy == Some(true) {
            return Err(PyValueError::new_err(
                "copy=True is not supported: the message is exported in place",
            ));
        }
        let py = slf.py();
        let me = slf.get();
        let (ptr, len) = me.pinned(py)?;
        // Relaxed: as in `export::fill`.
        me.exports.fetch_add(1, Ordering::Relaxed);
        crate::dlpack::capsule(
            py,
            slf.clone().into_any().unbind(),
            ptr,
            len,
            release_export,
        )
    }

    /// Exports the pinned bytes read-only.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `view` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: RawView, flags: c_int) -> PyResult<()> {
        let py = slf.py();
        export::refuse_writable(
            flags,
            "a pinned message is read-only (write in place with Producer.claim)",
        )?;
        let me = slf.get();
        let bytes = me.pinned(py)?;
        // SAFETY: `view` is the interpreter's; the message is pinned (checked with the GIL
        // held), and its bytes stay mapped and stable while the export count keeps it pinned
        // (`Pins::let_go` refuses).
        unsafe { export::fill(slf.as_any(), view, bytes, true, flags, &me.exports) }
    }

    /// Drops one export.
    ///
    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: RawView) {
        release_export(slf.py(), slf.as_any());
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Message(seq={}, len={}, missed={}{})",
            self.seq,
            self.len,
            self.missed,
            if self.closed(py) { ", released" } else { "" }
        )
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // A message that goes away releases its pin (no view can be alive: each export holds
        // a reference to the message). No Python call here (no error objects either): a
        // destructor may run while an exception is propagating, and calling into Python then
        // would clobber it.
        Python::with_gil(|_py| release_pin(&self.consumer, self.id));
    }
}

/// Drops one export of the message `obj` (a buffer view or a DLPack capsule went away).
fn release_export(_py: Python<'_>, obj: &Bound<'_, PyAny>) {
    if let Ok(msg) = obj.downcast::<Message>() {
        export::release(&msg.get().exports);
    }
}
