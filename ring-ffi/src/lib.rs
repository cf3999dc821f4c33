//! The C ABI of the shared-memory ring (`include/shmring.h`, generated from this crate by
//! cbindgen; `include/shmring.hpp` is a header-only C++17 layer over it).
//!
//! Conventions (those of libgit2, zstd and iceoryx's C binding):
//!
//! - opaque handles (`shmring_ring`, `shmring_publisher`, `shmring_subscriber`,
//!   `shmring_pinned`, `shmring_loan`), created by the library and released by the matching
//!   `*_free` / release call;
//! - every function returns an `int` status: `SHMRING_OK` (0) or a negative `SHMRING_E_*` code,
//!   and [`shmring_last_error`] gives the calling thread's message for the last failure;
//! - no panic crosses the boundary (`catch_unwind` at every entry: `SHMRING_E_PANIC`);
//! - every pointer is checked (null where a value is required: `SHMRING_E_INVALID_ARGUMENT`)
//!   and every length against the slot;
//! - out-parameters are written only on success, except that an out-handle is set to `NULL`
//!   on failure.
//!
//! In-place writes follow ring-core's rule: a writable pointer into a claimed slot
//! ([`shmring_loan_data`]) is handed out only for pin-only rings, where no reader looks at a
//! payload without pinning it (and no pin succeeds while the slot is claimed). In other rings,
//! copy readers read slots optimistically at any moment, so the loan offers
//! [`shmring_loan_write`] (chunked writes at an offset, no staging buffer) instead.
//!
//! One module a job: `status` (the failures, their codes and the entry guard), `args` (checking
//! and writing the C arguments), `handles` (the opaque handles and who owns what), then the calls
//! of each handle (`ring`, with the descriptor-based ones in `fds`; `publisher`, `loan`,
//! `subscriber` with its pins) and `version`.

#![allow(
    non_camel_case_types,
    reason = "the C names of the opaque handle types are part of the ABI (shmring_ring, ...)"
)]
#![allow(
    clippy::missing_safety_doc,
    reason = "each function's pointer contract is stated in its doc comment, which is the C \
              header's documentation"
)]

use core::ffi::c_int;

// cbindgen writes the header's constants and functions in the order it reads them: this file's
// items first, then each module in the order declared here. This order keeps include/shmring.h
// as it was (shmring_version first, shmring_version_string last): keep it when adding a module.
mod status;

mod args;

mod handles;

mod ring;

#[cfg(unix)]
mod fds;

#[cfg(not(unix))]
#[path = "fds_unsupported.rs"]
mod fds;

mod publisher;

mod loan;

mod subscriber;

mod version;

pub use handles::{
    shmring_loan, shmring_pinned, shmring_publisher, shmring_ring, shmring_subscriber,
};
pub use loan::*;
pub use publisher::*;
pub use ring::*;
pub use status::*;
pub use subscriber::*;
pub use version::*;

// ---------------------------------------------------------------------------------------------
// Status codes.

/// Success.
pub const SHMRING_OK: c_int = 0;
/// Nothing to read yet (a call with timeout 0).
pub const SHMRING_E_EMPTY: c_int = -1;
/// The timeout ran out (nothing came, the ring stayed full, nobody served the name...).
pub const SHMRING_E_TIMEOUT: c_int = -2;
/// No message will come any more: the publisher closed the ring and everything was read, or
/// the publisher's process died.
pub const SHMRING_E_DISCONNECTED: c_int = -3;
/// The publisher aborted the stream (`shmring_publisher_abort`, or it was freed without
/// `shmring_publisher_close`) and everything was read: messages may be missing at the end. The
/// message names the abort code; `shmring_subscriber_abort_code` returns it.
pub const SHMRING_E_ABORTED: c_int = -4;
/// The ring is full for now (a gating subscriber or a pin holds the next slot), or the
/// subscriber table is full.
pub const SHMRING_E_FULL: c_int = -5;
/// A message does not fit in a slot (nothing was written).
pub const SHMRING_E_TOO_LARGE: c_int = -6;
/// A null pointer where a value is required, a string that is not UTF-8, an invalid name or
/// geometry, an unknown subscriber class, a handle used the wrong way.
pub const SHMRING_E_INVALID_ARGUMENT: c_int = -7;
/// No ring (or rendezvous server) has this name.
pub const SHMRING_E_NOT_FOUND: c_int = -8;
/// A ring (or rendezvous server) with this name exists already.
pub const SHMRING_E_EXISTS: c_int = -9;
/// The segment is not a valid ring (bad header, wrong size, missing seals): a stray file or a
/// corrupting peer.
pub const SHMRING_E_CORRUPT: c_int = -10;
/// A peer truncated the segment under this mapping; the mapping cannot be trusted any more.
pub const SHMRING_E_TRUNCATED: c_int = -11;
/// This subscriber was reclaimed as dead by the publisher: register a new one.
pub const SHMRING_E_EVICTED: c_int = -12;
/// The ring is closed: nothing more can be published.
pub const SHMRING_E_CLOSED: c_int = -13;
/// The handle is busy: a subscriber holds a pin (release it first), a publisher holds a loan
/// (send or abort it first).
pub const SHMRING_E_BUSY: c_int = -14;
/// A writable pointer into a slot was asked for in a ring that is not pin-only (use
/// `shmring_loan_write`, or create the ring with `pin_only`).
pub const SHMRING_E_NOT_PIN_ONLY: c_int = -15;
/// The caller's buffer is shorter than the message (nothing was consumed).
pub const SHMRING_E_BUFFER_TOO_SMALL: c_int = -16;
/// The existing ring's geometry differs from the one asked for.
pub const SHMRING_E_MISMATCH: c_int = -17;
/// The ring has a live publisher already.
pub const SHMRING_E_PRODUCER_ALIVE: c_int = -18;
/// Another publisher took the ring over: this one publishes nothing any more.
pub const SHMRING_E_DISPLACED: c_int = -19;
/// The operating system refused access, or the file belongs to another user.
pub const SHMRING_E_PERMISSION: c_int = -20;
/// Messages were overwritten faster than this subscriber read them: retry.
pub const SHMRING_E_LAGGING: c_int = -21;
/// Any other operating-system failure (out of space, huge pages, locks, I/O).
pub const SHMRING_E_OS: c_int = -22;
/// Not available on this platform: the descriptor-based calls (`shmring_ring_from_fd`,
/// `shmring_ring_fd`, `shmring_ring_serve`, `shmring_ring_connect`) are Unix-only and return
/// this code on Windows.
pub const SHMRING_E_UNSUPPORTED: c_int = -23;
/// A bug: the library panicked (the panic was caught; the message says where).
pub const SHMRING_E_PANIC: c_int = -99;

/// Wait as long as it takes (a `timeout_ms` argument).
pub const SHMRING_FOREVER: u64 = u64::MAX;

/// Subscriber class: holds the publisher back until it has read each message (nothing lost).
pub const SHMRING_GATING: u32 = 1;
/// Subscriber class: reads only the newest message, never holds the publisher back.
pub const SHMRING_LATEST_ONLY: u32 = 2;
/// Subscriber class: reads in order, skips what was overwritten, never holds the publisher back.
pub const SHMRING_SKIP_ON_LAG: u32 = 3;

/// The library's major version.
pub const SHMRING_VERSION_MAJOR: u32 = 0;
/// The library's minor version.
pub const SHMRING_VERSION_MINOR: u32 = 1;
/// The library's patch version.
pub const SHMRING_VERSION_PATCH: u32 = 0;

// Keeps the header's version the crate's.
const _: () = assert!(
    SHMRING_VERSION_MAJOR == parse(env!("CARGO_PKG_VERSION_MAJOR"))
        && SHMRING_VERSION_MINOR == parse(env!("CARGO_PKG_VERSION_MINOR"))
        && SHMRING_VERSION_PATCH == parse(env!("CARGO_PKG_VERSION_PATCH"))
);

const fn parse(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Version.

/// The library's version as `major << 16 | minor << 8 | patch` (compare with
/// `SHMRING_VERSION_MAJOR` etc. to detect a header/library mismatch). Never fails.
#[no_mangle]
pub extern "C" fn shmring_version() -> u32 {
    SHMRING_VERSION_MAJOR << 16 | SHMRING_VERSION_MINOR << 8 | SHMRING_VERSION_PATCH
}

#[cfg(test)]
mod tests {
    use core::ffi::CStr;
    use core::ptr;

    use super::*;

    #[test]
    fn null_handles_are_invalid_arguments() {
        // SAFETY: null pointers are what is under test; the library checks them.
        unsafe {
            assert_eq!(
                shmring_publisher_send(
                    ptr::null_mut(),
                    ptr::null(),
                    0,
                    ptr::null(),
                    0,
                    ptr::null_mut()
                ),
                SHMRING_E_INVALID_ARGUMENT
            );
        }
        // SAFETY: the library returns a NUL-terminated string it owns.
        let msg = unsafe { CStr::from_ptr(shmring_last_error()) };
        assert!(
            msg.to_str().unwrap().contains("publisher is NULL"),
            "{msg:?}"
        );
    }

    #[test]
    fn version_matches_the_crate() {
        assert_eq!(shmring_version(), 1 << 8);
        // SAFETY: a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(shmring_version_string()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
