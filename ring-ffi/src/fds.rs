//! The descriptor-based calls: memfd descriptors and their rendezvous over Unix sockets.

use core::ffi::{c_char, c_int};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;

use ring_os::prelude::*;
use ring_os::raw::rendezvous::{Rendezvous, SocketPlace};
use ring_os::raw::SegmentName;

use crate::args::{millis, put, text};
use crate::handles::{new_ring, shmring_ring};
use crate::status::{fail, Res};
use crate::{SHMRING_E_EXISTS, SHMRING_E_INVALID_ARGUMENT, SHMRING_E_OS, SHMRING_E_PANIC};

/// The socket of `dir` (null: the abstract namespace).
///
/// # Safety
///
/// `dir` is null or a NUL-terminated string valid for the call.
unsafe fn place(dir: *const c_char) -> Res<SocketPlace> {
    Ok(if dir.is_null() {
        SocketPlace::Abstract
    } else {
        // SAFETY: non-null and NUL-terminated (the caller's contract).
        SocketPlace::Dir(PathBuf::from(unsafe { text(dir, "dir") }?))
    })
}

/// # Safety
///
/// `out` is valid for a write; `fd` is open for the call or negative.
pub(super) unsafe fn from_fd(fd: c_int, out: *mut *mut shmring_ring) -> Res<()> {
    if fd < 0 {
        return Err(fail(
            SHMRING_E_INVALID_ARGUMENT,
            format!("fd {fd} is not a descriptor"),
        ));
    }
    // SAFETY: `fd` is an open descriptor of the caller's for the duration of this call
    // (header contract); it is only borrowed to duplicate it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let owned = borrowed
        .try_clone_to_owned()
        .map_err(|e| fail(SHMRING_E_INVALID_ARGUMENT, format!("dup(fd {fd}): {e}")))?;
    new_ring(Ring::from_fd(owned)?, out);
    Ok(())
}

/// # Safety
///
/// `fd` is non-null and valid for a write.
pub(super) unsafe fn fd(ring: &shmring_ring, fd: *mut c_int) -> Res<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: non-null and writable (the caller's contract).
    unsafe { put(fd, ring.ring.fd().as_raw_fd()) };
    Ok(())
}

/// # Safety
///
/// As [`place`].
pub(super) unsafe fn serve(ring: &shmring_ring, name: &SegmentName, dir: *const c_char) -> Res<()> {
    // SAFETY: the caller's contract.
    let place = unsafe { place(dir) }?;
    let mut server = ring
        .server
        .lock()
        .map_err(|_| fail(SHMRING_E_PANIC, "the server lock is poisoned"))?;
    if server.is_some() {
        return Err(fail(
            SHMRING_E_EXISTS,
            "this ring handle serves its descriptor already",
        ));
    }
    *server = Some(Rendezvous::new(name, place).serve(ring.ring.mapping())?);
    Ok(())
}

/// # Safety
///
/// As [`place`]; `out` is valid for a write.
pub(super) unsafe fn connect(
    name: &SegmentName,
    dir: *const c_char,
    timeout_ms: u64,
    out: *mut *mut shmring_ring,
) -> Res<()> {
    // SAFETY: the caller's contract.
    let place = unsafe { place(dir) }?;
    let mapping = Rendezvous::new(name, place).connect(millis(timeout_ms))?;
    // The front door's `Ring` is made from a descriptor: map the received memfd through it.
    let fd: OwnedFd = mapping
        .segment()
        .fd()
        .try_clone_to_owned()
        .map_err(|e| fail(SHMRING_E_OS, format!("dup: {e}")))?;
    drop(mapping);
    new_ring(Ring::from_fd(fd)?, out);
    Ok(())
}
