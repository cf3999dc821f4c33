//! Checking the C arguments (null pointers, strings, lengths) and writing the out-parameters.

use core::ffi::{c_char, CStr};
use core::ptr;
use core::time::Duration;

use crate::status::{fail, null, Res};
use crate::SHMRING_E_INVALID_ARGUMENT;

/// `p` as a shared reference, or `INVALID_ARGUMENT` naming `what`.
///
/// # Safety
///
/// `p` is null or points to a live `T` not mutated for `'a`.
pub(crate) unsafe fn arg<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    // SAFETY: the caller's contract (null or valid).
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// `p` itself when it is not null (an out-parameter to write through, say), or
/// `INVALID_ARGUMENT` naming `what`.
pub(crate) fn non_null<T>(p: *mut T, what: &str) -> Res<*mut T> {
    if p.is_null() {
        Err(null(what))
    } else {
        Ok(p)
    }
}

/// `p` as a unique reference, or `INVALID_ARGUMENT` naming `what`.
///
/// # Safety
///
/// `p` is null or points to a live `T` used by nobody else for `'a`.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller's contract (null or valid and unshared).
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

/// Writes `v` to the out-parameter `p` when `p` is not null.
///
/// # Safety
///
/// `p` is null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller's contract; `write` drops no old value (it may be uninitialized).
        unsafe { p.write(v) };
    }
}

/// Clears an out-handle (if any) so a failed call leaves `NULL` there, and checks it.
///
/// # Safety
///
/// `out` is null or valid for a write of a pointer.
pub(crate) unsafe fn out_handle<T>(out: *mut *mut T) -> Res<()> {
    if out.is_null() {
        return Err(null("the out-handle pointer"));
    }
    // SAFETY: checked non-null; valid by the caller's contract.
    unsafe { out.write(ptr::null_mut()) };
    Ok(())
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
///
/// `s` is null or a NUL-terminated string valid for the call.
pub(crate) unsafe fn text<'a>(s: *const c_char, what: &str) -> Res<&'a str> {
    if s.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let c = unsafe { CStr::from_ptr(s) };
    c.to_str()
        .map_err(|_| fail(SHMRING_E_INVALID_ARGUMENT, format!("{what} is not UTF-8")))
}

/// `len` bytes at `data` (`data` may be null when `len` is 0).
///
/// # Safety
///
/// `data` is null or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(data: *const u8, len: usize, what: &str) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(null(what));
    }
    if len > isize::MAX as usize {
        return Err(fail(
            SHMRING_E_INVALID_ARGUMENT,
            format!("{what}: length {len} is impossible"),
        ));
    }
    // SAFETY: non-null, valid for `len` bytes by the caller's contract, len ≤ isize::MAX.
    Ok(unsafe { core::slice::from_raw_parts(data, len) })
}

/// Drops the handle `p` (NULL: nothing).
///
/// # Safety
///
/// `p` is null or came from `Box::into_raw` and is freed only now.
pub(crate) unsafe fn free_handle<T>(p: *mut T) -> Res {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(p) });
    }
    Ok(())
}

pub(crate) fn millis(timeout_ms: u64) -> Duration {
    Duration::from_millis(timeout_ms)
}
