//! A minimal DLPack (v0.8, unversioned `DLManagedTensor`) exporter: a 1-D `uint8` CPU tensor
//! over bytes that the exporting object keeps alive until the tensor's deleter runs.

use core::ffi::c_void;
use std::ffi::CStr;

use pyo3::ffi;
use pyo3::prelude::*;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What the deleter frees: the shape and the reference to the exporter.
struct Ctx {
    shape: [i64; 1],
    owner: Py<PyAny>,
    release: fn(Python<'_>, &Bound<'_, PyAny>),
}

const NAME: &CStr = c"dltensor";

/// The tensor's deleter: drops the export and frees what `capsule` allocated.
unsafe extern "C" fn deleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` and its `manager_ctx` were made by `capsule` with `Box::into_raw`, and the
    // DLPack protocol calls the deleter once.
    let (t, ctx) = unsafe {
        let t = Box::from_raw(t);
        let ctx = Box::from_raw(t.manager_ctx.cast::<Ctx>());
        (t, ctx)
    };
    Python::with_gil(|py| (ctx.release)(py, ctx.owner.bind(py)));
    drop(t);
}

/// The capsule's destructor: runs the deleter if no consumer took the tensor.
unsafe extern "C" fn destructor(cap: *mut ffi::PyObject) {
    // SAFETY: `cap` is the capsule being destroyed; a consumed capsule was renamed to
    // "used_dltensor" and its tensor is the consumer's to delete.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()).cast::<DLManagedTensor>();
            deleter(t);
        } else {
            ffi::PyErr_Clear();
        }
    }
}

/// A "dltensor" capsule over `len` bytes at `ptr`, kept alive by `owner`; `release` runs when
/// the tensor is deleted (the caller has counted one export for it).
pub(crate) fn capsule<'py>(
    py: Python<'py>,
    owner: Py<PyAny>,
    ptr: usize,
    len: usize,
    release: fn(Python<'_>, &Bound<'_, PyAny>),
) -> PyResult<Bound<'py, PyAny>> {
    let ctx = Box::into_raw(Box::new(Ctx {
        shape: [i64::try_from(len).unwrap_or(i64::MAX)],
        owner,
        release,
    }));
    let t = Box::into_raw(Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: ptr as *mut c_void,
            device: DLDevice {
                device_type: 1,
                device_id: 0,
            },
            ndim: 1,
            dtype: DLDataType {
                code: 1,
                bits: 8,
                lanes: 1,
            },
            // SAFETY: `ctx` is the live box made above.
            shape: unsafe { (*ctx).shape.as_mut_ptr() },
            strides: core::ptr::null_mut(),
            byte_offset: 0,
        },
        manager_ctx: ctx.cast(),
        deleter: Some(deleter),
    }));
    // SAFETY: `t` is a valid tensor whose ownership passes to the capsule (freed by
    // `destructor`, or by the consumer through `deleter`); the name is a static C string.
    let cap = unsafe { ffi::PyCapsule_New(t.cast(), NAME.as_ptr(), Some(destructor)) };
    if cap.is_null() {
        // SAFETY: the capsule was not made, so the tensor is still ours to delete.
        unsafe { deleter(t) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `cap` is a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}
