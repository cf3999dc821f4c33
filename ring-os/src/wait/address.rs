//! Address waits across processes where there is no futex: macOS's `os_sync_wait_on_address`
//! (macOS 14.4) or `__ulock_wait`, FreeBSD's `_umtx_op`, each in its *shared* form (keyed by the
//! backing object, so a wake in one process reaches a waiter in another that maps the segment at
//! another address). Where none is found, [`crate::raw::futex`]'s polling fallback runs.
//!
//! # References
//! - macOS: `<os/os_sync_wait_on_address.h>` (`OS_SYNC_WAIT_ON_ADDRESS_SHARED`); XNU
//!   `bsd/sys/ulock.h` (`UL_COMPARE_AND_WAIT_SHARED`, the operation Rust's std and libc++ use
//!   on older systems).
//! - FreeBSD: `_umtx_op(2)`, `UMTX_OP_WAIT_UINT` (not `_PRIVATE`: the key is the shared object)
//!   and `UMTX_OP_WAKE`.

use core::sync::atomic::AtomicU32;
use core::time::Duration;

use crate::wait::futex::WaitOutcome;

/// Sleeps on `word` while it holds `expected`, for at most `timeout`; `None` where this platform
/// offers no address wait (the caller polls).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Option<WaitOutcome> {
    imp::wait(word, expected, timeout)
}

/// Wakes every waiter on `word`, in every process; 0 (the count is not reported).
pub(crate) fn wake_all(word: &AtomicU32) -> usize {
    imp::wake_all(word);
    0
}

/// The outcome of a wait call that returned -1 with `errno`.
#[cfg(any(target_os = "macos", target_os = "freebsd"))]
fn failed(errno: Option<i32>) -> WaitOutcome {
    match errno {
        Some(libc::ETIMEDOUT) => WaitOutcome::TimedOut,
        // EINTR, EFAULT, EINVAL, an interrupted wait...: a spurious wake, the caller re-checks
        // (its own deadline bounds the loop).
        _ => WaitOutcome::Woken,
    }
}

#[cfg(target_os = "macos")]
mod imp {
    use core::ffi::{c_int, c_void};
    use core::sync::atomic::AtomicU32;
    use core::time::Duration;
    use std::sync::OnceLock;

    use crate::wait::futex::WaitOutcome;

    /// `os_sync_wait_on_address_with_timeout`.
    type OsWait = unsafe extern "C" fn(*mut c_void, u64, usize, u32, u32, u64) -> c_int;
    /// `os_sync_wake_by_address_all`.
    type OsWake = unsafe extern "C" fn(*mut c_void, usize, u32) -> c_int;
    /// `__ulock_wait(operation, address, value, timeout_us)`.
    type UlockWait = unsafe extern "C" fn(u32, *mut c_void, u64, u32) -> c_int;
    /// `__ulock_wake(operation, address, wake_value)`.
    type UlockWake = unsafe extern "C" fn(u32, *mut c_void, u64) -> c_int;

    /// `UL_COMPARE_AND_WAIT_SHARED` (XNU `bsd/sys/ulock.h`): a 32-bit compare-and-wait keyed by
    /// the backing object, across processes.
    const UL_COMPARE_AND_WAIT_SHARED: u32 = 3;
    /// `ULF_WAKE_ALL`.
    const ULF_WAKE_ALL: u32 = 0x100;

    /// The calls this system has, looked up once (`dlsym`, so binaries still load on systems
    /// without them).
    #[derive(Clone, Copy)]
    enum Calls {
        /// macOS 14.4 and later: the public API.
        OsSync(OsWait, OsWake),
        /// Older systems: the private calls beneath it.
        Ulock(UlockWait, UlockWake),
        /// Neither: poll.
        None,
    }

    /// Looks `name` up in the loaded images.
    fn symbol(name: &core::ffi::CStr) -> Option<*mut c_void> {
        // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches every loaded image.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    fn calls() -> Calls {
        static CALLS: OnceLock<Calls> = OnceLock::new();
        *CALLS.get_or_init(|| {
            if let (Some(w), Some(k)) = (
                symbol(c"os_sync_wait_on_address_with_timeout"),
                symbol(c"os_sync_wake_by_address_all"),
            ) {
                // SAFETY: these symbols are the functions of <os/os_sync_wait_on_address.h>,
                // whose C signatures the two types spell out.
                return unsafe {
                    Calls::OsSync(
                        core::mem::transmute::<*mut c_void, OsWait>(w),
                        core::mem::transmute::<*mut c_void, OsWake>(k),
                    )
                };
            }
            if let (Some(w), Some(k)) = (symbol(c"__ulock_wait"), symbol(c"__ulock_wake")) {
                // SAFETY: libsystem_kernel's `__ulock_wait`/`__ulock_wake`, whose signatures
                // (bsd/sys/ulock.h) the two types spell out.
                return unsafe {
                    Calls::Ulock(
                        core::mem::transmute::<*mut c_void, UlockWait>(w),
                        core::mem::transmute::<*mut c_void, UlockWake>(k),
                    )
                };
            }
            Calls::None
        })
    }

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Option<WaitOutcome> {
        let addr = word.as_ptr().cast::<c_void>();
        let rc = match calls() {
            Calls::OsSync(wait, _) => {
                // 0 is refused: wait at least a nanosecond.
                let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1);
                // SAFETY: `addr` is a live, aligned 4-byte atomic for the call; the kernel only
                // compares it with `expected` and sleeps.
                unsafe {
                    wait(
                        addr,
                        u64::from(expected),
                        4,
                        libc::OS_SYNC_WAIT_ON_ADDRESS_SHARED,
                        libc::OS_CLOCK_MACH_ABSOLUTE_TIME,
                        ns,
                    )
                }
            }
            Calls::Ulock(wait, _) => {
                // 0 means "forever" to __ulock_wait: at least a microsecond, at most u32::MAX
                // (the caller loops to its deadline).
                let us = u32::try_from(timeout.as_micros())
                    .unwrap_or(u32::MAX)
                    .max(1);
                // SAFETY: as above.
                unsafe { wait(UL_COMPARE_AND_WAIT_SHARED, addr, u64::from(expected), us) }
            }
            Calls::None => return None,
        };
        if rc >= 0 {
            return Some(WaitOutcome::Woken);
        }
        Some(super::failed(
            std::io::Error::last_os_error().raw_os_error(),
        ))
    }

    pub(super) fn wake_all(word: &AtomicU32) {
        let addr = word.as_ptr().cast::<c_void>();
        match calls() {
            // SAFETY: `addr` is a live, aligned 4-byte atomic; a wake only looks up waiters.
            Calls::OsSync(_, wake) => unsafe {
                wake(addr, 4, libc::OS_SYNC_WAKE_BY_ADDRESS_SHARED);
            },
            // SAFETY: as above.
            Calls::Ulock(_, wake) => unsafe {
                wake(UL_COMPARE_AND_WAIT_SHARED | ULF_WAKE_ALL, addr, 0);
            },
            Calls::None => {}
        }
    }
}

#[cfg(target_os = "freebsd")]
mod imp {
    use core::ffi::c_void;
    use core::sync::atomic::AtomicU32;
    use core::time::Duration;

    use crate::wait::futex::WaitOutcome;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Option<WaitOutcome> {
        let mut time = libc::_umtx_time {
            _timeout: libc::timespec {
                tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: timeout.subsec_nanos().into(),
            },
            // Relative to now on the monotonic clock.
            _flags: 0,
            _clockid: libc::CLOCK_MONOTONIC.unsigned_abs(),
        };
        // _umtx_op takes the size of the timeout structure in `uaddr` (a number, not a pointer).
        let size =
            core::ptr::without_provenance_mut::<c_void>(core::mem::size_of::<libc::_umtx_time>());
        // SAFETY: `word` is a live, aligned 4-byte atomic and `time` a valid `_umtx_time` for the
        // call; UMTX_OP_WAIT_UINT (shared: keyed by the backing object) only compares and sleeps.
        let rc = unsafe {
            libc::_umtx_op(
                word.as_ptr().cast::<c_void>(),
                libc::UMTX_OP_WAIT_UINT,
                libc::c_ulong::from(expected),
                size,
                (&raw mut time).cast::<c_void>(),
            )
        };
        if rc == 0 {
            // Woken, or the word already differed (FreeBSD does not tell them apart).
            return Some(WaitOutcome::Woken);
        }
        Some(super::failed(
            std::io::Error::last_os_error().raw_os_error(),
        ))
    }

    pub(super) fn wake_all(word: &AtomicU32) {
        // SAFETY: `word` is a live, aligned 4-byte atomic; UMTX_OP_WAKE only looks up waiters.
        unsafe {
            libc::_umtx_op(
                word.as_ptr().cast::<c_void>(),
                libc::UMTX_OP_WAKE,
                libc::c_ulong::try_from(i32::MAX).unwrap_or(1),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            );
        }
    }
}

/// Other systems (and Linux with the `portable` feature): no address wait, the caller polls.
#[cfg(not(any(target_os = "macos", target_os = "freebsd")))]
mod imp {
    use core::sync::atomic::AtomicU32;
    use core::time::Duration;

    use crate::wait::futex::WaitOutcome;

    pub(super) fn wait(_: &AtomicU32, _: u32, _: Duration) -> Option<WaitOutcome> {
        None
    }

    pub(super) fn wake_all(_: &AtomicU32) {}
}
