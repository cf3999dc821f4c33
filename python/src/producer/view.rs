//! Buffer-protocol views of the Python objects a producer sends from.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A contiguous buffer-protocol view of a Python object, released on drop.
pub(crate) struct View(ffi::Py_buffer);

impl View {
    /// A read-only view.
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::with_flags(obj, ffi::PyBUF_SIMPLE, "")
    }

    /// A writable view.
    pub(crate) fn writable(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::with_flags(obj, ffi::PyBUF_WRITABLE, "writable ")
    }

    /// The writable view's memory: its address and length.
    pub(crate) fn raw(&self) -> (usize, usize) {
        (
            self.0.buf as usize,
            usize::try_from(self.0.len).unwrap_or(0),
        )
    }

    fn with_flags(obj: &Bound<'_, PyAny>, flags: core::ffi::c_int, what: &str) -> PyResult<Self> {
        let mut v = core::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: `v` is writable storage for one `Py_buffer`; on success the interpreter
        // filled it and we release it exactly once in `Drop`.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), v.as_mut_ptr(), flags) };
        if rc != 0 {
            let e = PyErr::fetch(obj.py());
            return Err(PyTypeError::new_err(format!(
                "expected a C-contiguous {what}object supporting the buffer protocol (bytes, \
                 bytearray, memoryview, numpy array), got {}: {e}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            )));
        }
        // SAFETY: filled by `PyObject_GetBuffer` above.
        Ok(Self(unsafe { v.assume_init() }))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let len = usize::try_from(self.0.len).unwrap_or(0);
        if len == 0 {
            return &[];
        }
        // SAFETY: a PyBUF_SIMPLE view is `len` contiguous bytes at `buf`, alive until released.
        unsafe { core::slice::from_raw_parts(self.0.buf.cast::<u8>(), len) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the view was filled by `PyObject_GetBuffer` and is released once; every
        // `View` is dropped with the GIL held (it never leaves a GIL-holding scope).
        unsafe { ffi::PyBuffer_Release(&mut self.0) };
    }
}

/// The view's bytes, sent into the GIL-free closure (the view outlives the call).
#[derive(Clone, Copy)]
pub(super) struct Bytes(pub(super) *const u8, pub(super) usize);
// SAFETY: the bytes stay valid for the call (the `View` is held across it).
unsafe impl Send for Bytes {}
