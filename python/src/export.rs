//! The buffer-protocol half shared by `Message` (read-only) and `Claim` (writable): fill a view
//! over bytes in the ring and count it, so the owner refuses to give the bytes back while any
//! view is alive (as `mmap` refuses to close).

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

/// The `Py_buffer` the interpreter passes to `__getbuffer__` / `__releasebuffer__`.
pub(crate) type RawView = *mut ffi::Py_buffer;

/// Refuses a writable request (`PyBUF_WRITABLE` in `flags`) on read-only bytes with a
/// `BufferError` that says `why`.
pub(crate) fn refuse_writable(flags: c_int, why: &'static str) -> PyResult<()> {
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(pyo3::exceptions::PyBufferError::new_err(why));
    }
    Ok(())
}

/// Fills `view` over the `len` bytes at `ptr` for `obj` and counts one export in `exports`.
///
/// # Safety
///
/// `view` is a `Py_buffer` the interpreter passed to `__getbuffer__`; the bytes stay mapped,
/// stable (and, unless `readonly`, ours to write) while `exports` is non-zero.
pub(crate) unsafe fn fill(
    obj: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    bytes: (usize, usize),
    readonly: bool,
    flags: c_int,
    exports: &AtomicUsize,
) -> PyResult<()> {
    // SAFETY: the caller's contract, and the count below keeps the bytes while the view lives.
    unsafe { fill_view(obj, view, bytes, readonly, flags) }?;
    // Relaxed: every access to an export counter happens with the GIL held, which orders them.
    exports.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Fills `view` over the `len` bytes at `ptr` for `obj`, counting nothing: for an object whose
/// bytes live exactly as long as the object itself (the view holds a reference to it).
///
/// # Safety
///
/// `view` is a `Py_buffer` the interpreter passed to `__getbuffer__`; the bytes stay mapped,
/// stable (and, unless `readonly`, ours to write) while the view lives.
pub(crate) unsafe fn fill_view(
    obj: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    (ptr, len): (usize, usize),
    readonly: bool,
    flags: c_int,
) -> PyResult<()> {
    // SAFETY: the caller's contract; `PyBuffer_FillInfo` takes a reference to `obj` for
    // `view.obj`, so `obj` outlives the view, and it refuses a writable request on a read-only
    // view (BufferError).
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(
            view,
            obj.as_ptr(),
            ptr as *mut c_void,
            isize::try_from(len).unwrap_or(isize::MAX),
            c_int::from(readonly),
            flags,
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

/// Drops one export counted by [`fill`] (or by a DLPack capsule).
pub(crate) fn release(exports: &AtomicUsize) {
    // Relaxed: as in `fill`. Never below zero: each release pairs with one export.
    let before = exports.fetch_sub(1, Ordering::Relaxed);
    debug_assert!(before > 0, "an export was released twice");
}

/// Whether any export is alive.
pub(crate) fn live(exports: &AtomicUsize) -> bool {
    // Relaxed: as in `fill`.
    exports.load(Ordering::Relaxed) > 0
}
