//! Windows has no descriptors to pass: every descriptor-based call is `SHMRING_E_UNSUPPORTED`
//! (rings are shared by name there).

use core::ffi::{c_char, c_int};

use ring_os::raw::SegmentName;

use crate::handles::shmring_ring;
use crate::status::{fail, Fail, Res};
use crate::SHMRING_E_UNSUPPORTED;

fn unix_only(call: &str) -> Fail {
    fail(
        SHMRING_E_UNSUPPORTED,
        format!("{call} is Unix-only (descriptor passing): share a named ring instead"),
    )
}

pub(super) unsafe fn from_fd(_fd: c_int, _out: *mut *mut shmring_ring) -> Res<()> {
    Err(unix_only("shmring_ring_from_fd"))
}

pub(super) unsafe fn fd(_ring: &shmring_ring, _fd: *mut c_int) -> Res<()> {
    Err(unix_only("shmring_ring_fd"))
}

pub(super) unsafe fn serve(
    _ring: &shmring_ring,
    _name: &SegmentName,
    _dir: *const c_char,
) -> Res<()> {
    Err(unix_only("shmring_ring_serve"))
}

pub(super) unsafe fn connect(
    _name: &SegmentName,
    _dir: *const c_char,
    _timeout_ms: u64,
    _out: *mut *mut shmring_ring,
) -> Res<()> {
    Err(unix_only("shmring_ring_connect"))
}
