//! The C ABI of the shared-memory ring (`include/shmring.h`, generated from this file by
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

#![allow(
    non_camel_case_types,
    reason = "the C names of the opaque handle types are part of the ABI (shmring_ring, ...)"
)]
#![allow(
    clippy::missing_safety_doc,
    reason = "each function's pointer contract is stated in its doc comment, which is the C \
              header's documentation"
)]

use core::cell::RefCell;
use core::ffi::{c_char, c_int, CStr};
use core::panic::AssertUnwindSafe;
use core::ptr;
use core::time::Duration;
use std::ffi::CString;
#[cfg(unix)]
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::catch_unwind;
#[cfg(unix)]
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(unix)]
use std::sync::Mutex;

use ring_core::{ClaimError, Copied, DeliveryClass, Memory as _, Pinned, ReadError, WriteSlot};
use ring_os::prelude::*;
#[cfg(unix)]
use ring_os::rendezvous::{Rendezvous, Server, SocketPlace};
use ring_os::{Mapping, ProducerExt as _, SegmentName, TRUNCATED};

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
// Plain C structs.

/// A ring's geometry. For create: a zero field takes the default (8 slots of 65536 bytes, 8
/// subscribers). For open: a zero field is not checked; a non-zero one must match the ring
/// (else `SHMRING_E_MISMATCH`), and `pin_only` is not checked (read it with
/// `shmring_ring_get_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct shmring_config {
    /// Number of slots (messages in flight).
    pub slots: u32,
    /// Payload bytes per slot (rounded up to a multiple of 8).
    pub slot_size: u32,
    /// Subscriber-table entries (1..=32).
    pub consumers: u32,
    /// Non-zero: subscribers only read what they pin, so the publisher may write in place
    /// (`shmring_loan_data`).
    pub pin_only: u32,
    /// How long an open waits for the ring to appear and its creator to finish formatting,
    /// in milliseconds (0: 5000).
    pub open_timeout_ms: u32,
    /// History for late joiners (0..=slots; 0: none): a gating or skip-on-lag subscriber that
    /// joins starts up to this many messages back, as far as the ring still holds them.
    pub history: u32,
}

/// What `shmring_ring_get_info` reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct shmring_ring_info {
    /// Number of slots.
    pub slots: u32,
    /// Payload bytes per slot.
    pub slot_size: u32,
    /// Subscriber-table entries.
    pub consumers: u32,
    /// 1 for a pin-only ring.
    pub pin_only: u32,
}

/// One message, as a pin or a copy-out read reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct shmring_message {
    /// The bytes: inside the ring for a pin (valid until the pin is released), the caller's
    /// buffer for a copy-out read.
    pub data: *const u8,
    /// The message length in bytes.
    pub len: usize,
    /// Its sequence number.
    pub seq: u64,
    /// Messages skipped just before it (latest-only and skip-on-lag subscribers).
    pub missed: u64,
    /// Its two metadata words.
    pub meta: [u64; 2],
    /// 1 for a group member's message that was handed out before (to a member that died):
    /// delivery in a group is at-least-once, and a repeat says so; 0 otherwise.
    pub redelivered: u32,
}

// ---------------------------------------------------------------------------------------------
// Handles.

/// A ring mapping (named, or a memfd). Owned by the caller; release with `shmring_ring_free`.
///
/// Thread safety: functions taking a `const shmring_ring *` may be called from several threads
/// at once; `shmring_ring_free` and `shmring_ring_keep_name` need exclusive use.
pub struct shmring_ring {
    ring: Ring,
    /// A rendezvous server that hands the memfd to subscribers (`shmring_ring_serve`).
    #[cfg(unix)]
    server: Mutex<Option<Server>>,
}

/// The ring's one publisher. Owned by the caller; release with `shmring_publisher_free` (which
/// aborts the stream unless `shmring_publisher_close` was called). It keeps the mapping alive,
/// so it may outlive its `shmring_ring`.
///
/// Thread safety: one thread at a time (it may move between threads).
pub struct shmring_publisher {
    lender: Lender<Publisher, shmring_loan>,
}

/// A registered subscriber. Owned by the caller; release with `shmring_subscriber_free` (which
/// also releases a pin it still holds). It keeps the mapping alive, so it may outlive its
/// `shmring_ring`.
///
/// Thread safety: one thread at a time (it may move between threads).
pub struct shmring_subscriber {
    lender: Lender<Subscriber, shmring_pinned>,
    /// The publisher's abort code, once a read returned `SHMRING_E_ABORTED`
    /// (`shmring_subscriber_abort_code`).
    abort_code: Option<u16>,
    /// The messages held by `shmring_subscriber_hold`: hold id `i + 1` is entry `i`.
    holds: Vec<Option<Hold>>,
}

/// A value at a stable heap address, lent to at most one child handle at a time: a publisher
/// and its loan, a subscriber and its pin (both borrow their parent mutably in ring-core).
/// While the child lives, the parent refuses every call (`SHMRING_E_BUSY`); dropping the lender
/// drops the child first.
struct Lender<T, C> {
    /// From `Box::into_raw`; freed in `drop`.
    value: *mut T,
    /// The outstanding child (from `Box::into_raw`), or null.
    child: *mut C,
    /// What to say when a call comes while the child lives.
    busy: &'static str,
}

impl<T, C> Lender<T, C> {
    fn new(value: T, busy: &'static str) -> Self {
        Self {
            value: Box::into_raw(Box::new(value)),
            child: ptr::null_mut(),
            busy,
        }
    }

    /// The value, unless it is lent.
    fn get(&mut self) -> Res<&mut T> {
        if !self.child.is_null() {
            return Err(fail(SHMRING_E_BUSY, self.busy));
        }
        // SAFETY: `value` came from `Box::into_raw` and lives as long as `self`; with no child
        // out, nothing else refers to it, and `&mut self` makes this borrow unique.
        Ok(unsafe { &mut *self.value })
    }

    /// Records `child` as the outstanding child.
    fn lend(&mut self, child: C) -> *mut C {
        self.child = Box::into_raw(Box::new(child));
        self.child
    }

    /// Takes the outstanding child back, if `child` is it.
    fn take(&mut self, child: *mut C, what: &str) -> Res<Box<C>> {
        if self.child != child {
            return Err(fail(
                SHMRING_E_INVALID_ARGUMENT,
                format!("this {what} is not the outstanding one of its parent"),
            ));
        }
        self.child = ptr::null_mut();
        // SAFETY: made by `Box::into_raw` in `lend`, and detached from `self` just now.
        Ok(unsafe { Box::from_raw(child) })
    }
}

impl<T, C> Drop for Lender<T, C> {
    fn drop(&mut self) {
        if !self.child.is_null() {
            // SAFETY: the outstanding child (from `lend`), dropped before the value it borrows.
            drop(unsafe { Box::from_raw(self.child) });
        }
        // SAFETY: from `Box::into_raw` in `new`; no child refers to it any more.
        drop(unsafe { Box::from_raw(self.value) });
    }
}

/// A pinned message: a zero-copy view the publisher cannot overwrite until it is released
/// with `shmring_pinned_release`. Owned by the caller; it belongs to its subscriber, which
/// accepts no other call until it is released (`SHMRING_E_BUSY`); freeing the subscriber
/// releases it too (the pointer is then invalid).
///
/// Thread safety: as its subscriber.
pub struct shmring_pinned {
    pin: Pinned<'static, Arc<Mapping>>,
    owner: *mut shmring_subscriber,
}

/// A slot claimed for writing in place. Owned by the caller until `shmring_loan_send` or
/// `shmring_loan_abort`, which both consume it; it belongs to its publisher, which accepts no
/// other call until then (`SHMRING_E_BUSY`); freeing the publisher aborts it too (the pointer
/// is then invalid).
///
/// Thread safety: as its publisher.
pub struct shmring_loan {
    slot: WriteSlot<'static, Arc<Mapping>>,
    owner: *mut shmring_publisher,
    /// The writable bytes of a pin-only ring's slot (null in other rings).
    data: *mut u8,
    capacity: usize,
}

// The ring handle is shared between threads (see its docs); the others move between them.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Ring>();
    #[cfg(unix)]
    shared::<Mutex<Option<Server>>>();
    const fn sendable<T: Send>() {}
    sendable::<Publisher>();
    sendable::<Subscriber>();
};

// ---------------------------------------------------------------------------------------------
// Errors and the entry guard.

/// A failure: its status code and its message.
struct Fail {
    code: c_int,
    msg: String,
}

type Res<T = ()> = Result<T, Fail>;

fn fail(code: c_int, msg: impl Into<String>) -> Fail {
    Fail {
        code,
        msg: msg.into(),
    }
}

fn null(what: &str) -> Fail {
    fail(
        SHMRING_E_INVALID_ARGUMENT,
        format!("{what} is NULL: pass a valid pointer"),
    )
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    let text = CString::new(msg.replace('\0', "?")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `f`, turning its failure or panic into a status code and the thread's message.
fn guard(f: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SHMRING_OK,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last_error(&format!("internal error (a bug, please report it): {what}"));
            SHMRING_E_PANIC
        }
    }
}

fn read_code(e: ReadError) -> c_int {
    match e {
        ReadError::Empty => SHMRING_E_EMPTY,
        ReadError::Closed => SHMRING_E_DISCONNECTED,
        ReadError::Aborted { .. } => SHMRING_E_ABORTED,
        ReadError::Lagging => SHMRING_E_LAGGING,
        ReadError::BufferTooSmall { .. } => SHMRING_E_BUFFER_TOO_SMALL,
        ReadError::Corrupt(what) if what == TRUNCATED => SHMRING_E_TRUNCATED,
        ReadError::Corrupt(_) => SHMRING_E_CORRUPT,
        ReadError::Evicted => SHMRING_E_EVICTED,
        ReadError::Timeout => SHMRING_E_TIMEOUT,
        // Holds are not in the C ABI yet; a Rust caller's hold errors read as these.
        ReadError::TooManyHolds { .. } => SHMRING_E_BUSY,
        ReadError::NotHeld => SHMRING_E_INVALID_ARGUMENT,
        ReadError::NotSupported(_) => SHMRING_E_UNSUPPORTED,
    }
}

fn claim_code(e: ClaimError) -> c_int {
    match e {
        ClaimError::Full { .. } | ClaimError::Pinned { .. } => SHMRING_E_FULL,
        ClaimError::Closed => SHMRING_E_CLOSED,
        ClaimError::Corrupt(what) if what == TRUNCATED => SHMRING_E_TRUNCATED,
        ClaimError::Corrupt(_) => SHMRING_E_CORRUPT,
        ClaimError::Displaced { .. } => SHMRING_E_DISPLACED,
        ClaimError::TooLarge { .. } => SHMRING_E_TOO_LARGE,
    }
}

fn os_code(e: &Error) -> c_int {
    match e {
        Error::InvalidName { .. } | Error::BadLength { .. } | Error::Layout(_) => {
            SHMRING_E_INVALID_ARGUMENT
        }
        Error::AlreadyExists { .. } => SHMRING_E_EXISTS,
        Error::NotFound { .. } => SHMRING_E_NOT_FOUND,
        Error::PermissionDenied { .. } | Error::Insecure { .. } | Error::ForeignPeer { .. } => {
            SHMRING_E_PERMISSION
        }
        Error::MessageTooLarge { .. } => SHMRING_E_TOO_LARGE,
        Error::Read(e) => read_code(*e),
        Error::RingDisconnected | Error::Disconnected | Error::ProducerGone => {
            SHMRING_E_DISCONNECTED
        }
        Error::ConfigMismatch { .. } => SHMRING_E_MISMATCH,
        Error::Full => SHMRING_E_FULL,
        Error::SizeMismatch { .. }
        | Error::Attach(_)
        | Error::MissingSeals { .. }
        | Error::NotRegularFile { .. } => SHMRING_E_CORRUPT,
        Error::TimedOut => SHMRING_E_TIMEOUT,
        Error::Ring(ring_core::Error::Evicted) => SHMRING_E_EVICTED,
        Error::Ring(ring_core::Error::ProducerExists { .. }) | Error::ProducerAlive { .. } => {
            SHMRING_E_PRODUCER_ALIVE
        }
        Error::Ring(ring_core::Error::ConsumerTableFull { .. }) => SHMRING_E_FULL,
        Error::Ring(ring_core::Error::NoSuchGroup) => SHMRING_E_NOT_FOUND,
        Error::Claim(e) => claim_code(*e),
        Error::Truncated { .. } => SHMRING_E_TRUNCATED,
        _ => SHMRING_E_OS,
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        fail(os_code(&e), e.to_string())
    }
}

impl From<TryRecvError> for Fail {
    fn from(e: TryRecvError) -> Self {
        let code = match e {
            TryRecvError::Empty => SHMRING_E_EMPTY,
            TryRecvError::Disconnected => SHMRING_E_DISCONNECTED,
            TryRecvError::Failed(e) => read_code(e),
        };
        fail(code, e.to_string())
    }
}

impl From<RecvTimeoutError> for Fail {
    fn from(e: RecvTimeoutError) -> Self {
        let code = match e {
            RecvTimeoutError::Timeout => SHMRING_E_TIMEOUT,
            RecvTimeoutError::Disconnected => SHMRING_E_DISCONNECTED,
            RecvTimeoutError::Failed(e) => read_code(e),
        };
        fail(code, e.to_string())
    }
}

impl From<RecvError> for Fail {
    fn from(e: RecvError) -> Self {
        let code = match e {
            RecvError::Disconnected => SHMRING_E_DISCONNECTED,
            RecvError::Failed(e) => read_code(e),
        };
        fail(code, e.to_string())
    }
}

/// The producer's abort code carried by a read error, if it is `ReadError::Aborted`.
trait AbortCode {
    fn abort_code(&self) -> Option<u16>;
}

impl AbortCode for ReadError {
    fn abort_code(&self) -> Option<u16> {
        match *self {
            ReadError::Aborted { code } => Some(code),
            _ => None,
        }
    }
}

impl AbortCode for TryRecvError {
    fn abort_code(&self) -> Option<u16> {
        match self {
            TryRecvError::Failed(e) => e.abort_code(),
            _ => None,
        }
    }
}

impl AbortCode for RecvTimeoutError {
    fn abort_code(&self) -> Option<u16> {
        match self {
            RecvTimeoutError::Failed(e) => e.abort_code(),
            _ => None,
        }
    }
}

impl AbortCode for RecvError {
    fn abort_code(&self) -> Option<u16> {
        match self {
            RecvError::Failed(e) => e.abort_code(),
            _ => None,
        }
    }
}

/// Records an abort code in the subscriber handle (`slot`) and converts the error.
fn read_fail<E: AbortCode + Into<Fail>>(slot: &mut Option<u16>, e: E) -> Fail {
    if let Some(code) = e.abort_code() {
        *slot = Some(code);
    }
    e.into()
}

impl From<ClaimError> for Fail {
    fn from(e: ClaimError) -> Self {
        fail(claim_code(e), e.to_string())
    }
}

/// The failure of a claim that waited `timeout` (a full ring is a timeout there).
fn claim_timeout(e: ClaimError, timeout: u64) -> Fail {
    match e {
        ClaimError::Full { .. } | ClaimError::Pinned { .. } if timeout != 0 => fail(
            SHMRING_E_TIMEOUT,
            format!("the ring stayed full for the whole timeout ({timeout} ms): {e}"),
        ),
        e => e.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Argument helpers.

/// `p` as a shared reference, or `INVALID_ARGUMENT` naming `what`.
///
/// # Safety
///
/// `p` is null or points to a live `T` not mutated for `'a`.
unsafe fn arg<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    // SAFETY: the caller's contract (null or valid).
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// `p` as a unique reference, or `INVALID_ARGUMENT` naming `what`.
///
/// # Safety
///
/// `p` is null or points to a live `T` used by nobody else for `'a`.
unsafe fn arg_mut<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller's contract (null or valid and unshared).
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

/// Writes `v` to the out-parameter `p` when `p` is not null.
///
/// # Safety
///
/// `p` is null or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T) {
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
unsafe fn out_handle<T>(out: *mut *mut T) -> Res<()> {
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
unsafe fn text<'a>(s: *const c_char, what: &str) -> Res<&'a str> {
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
unsafe fn bytes<'a>(data: *const u8, len: usize, what: &str) -> Res<&'a [u8]> {
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
unsafe fn free_handle<T>(p: *mut T) -> Res {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(p) });
    }
    Ok(())
}

fn millis(timeout_ms: u64) -> Duration {
    Duration::from_millis(timeout_ms)
}

fn class(class: u32) -> Res<DeliveryClass> {
    match class {
        SHMRING_GATING => Ok(DeliveryClass::Gating),
        SHMRING_LATEST_ONLY => Ok(DeliveryClass::LatestOnly),
        SHMRING_SKIP_ON_LAG => Ok(DeliveryClass::SkipOnLag),
        other => Err(fail(
            SHMRING_E_INVALID_ARGUMENT,
            format!(
                "unknown subscriber class {other}: use SHMRING_GATING (1), SHMRING_LATEST_ONLY \
                 (2) or SHMRING_SKIP_ON_LAG (3)"
            ),
        )),
    }
}

fn builder(b: RingBuilder, cfg: Option<&shmring_config>) -> RingBuilder {
    let Some(cfg) = cfg else { return b };
    let mut b = b;
    if cfg.slots != 0 {
        b = b.slots(cfg.slots);
    }
    if cfg.slot_size != 0 {
        b = b.slot_size(cfg.slot_size);
    }
    if cfg.consumers != 0 {
        b = b.consumers(cfg.consumers);
    }
    if cfg.open_timeout_ms != 0 {
        b = b.open_timeout(millis(cfg.open_timeout_ms.into()));
    }
    if cfg.history != 0 {
        b = b.history(cfg.history);
    }
    b
}

fn new_ring(ring: Ring, out: *mut *mut shmring_ring) {
    let handle = Box::into_raw(Box::new(shmring_ring {
        ring,
        #[cfg(unix)]
        server: Mutex::new(None),
    }));
    // SAFETY: `out` was checked by `out_handle` at entry.
    unsafe { out.write(handle) };
}

// ---------------------------------------------------------------------------------------------
// Version and errors.

/// The library's version as `major << 16 | minor << 8 | patch` (compare with
/// `SHMRING_VERSION_MAJOR` etc. to detect a header/library mismatch). Never fails.
#[no_mangle]
pub extern "C" fn shmring_version() -> u32 {
    SHMRING_VERSION_MAJOR << 16 | SHMRING_VERSION_MINOR << 8 | SHMRING_VERSION_PATCH
}

/// The calling thread's message for the last call that returned a negative code (an empty
/// string before any). Never NULL. The string belongs to the library and stays valid until the
/// thread's next `shmring_*` call that fails; copy it to keep it.
#[no_mangle]
pub extern "C" fn shmring_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"panic".as_ptr())
}

/// The name of a status code (`"SHMRING_E_TIMEOUT"`, ...; `"SHMRING_E_UNKNOWN"` for a code
/// this library does not define). A static string: never NULL, never freed.
#[no_mangle]
pub extern "C" fn shmring_code_name(code: c_int) -> *const c_char {
    let name: &'static CStr = match code {
        SHMRING_OK => c"SHMRING_OK",
        SHMRING_E_EMPTY => c"SHMRING_E_EMPTY",
        SHMRING_E_TIMEOUT => c"SHMRING_E_TIMEOUT",
        SHMRING_E_DISCONNECTED => c"SHMRING_E_DISCONNECTED",
        SHMRING_E_ABORTED => c"SHMRING_E_ABORTED",
        SHMRING_E_FULL => c"SHMRING_E_FULL",
        SHMRING_E_TOO_LARGE => c"SHMRING_E_TOO_LARGE",
        SHMRING_E_INVALID_ARGUMENT => c"SHMRING_E_INVALID_ARGUMENT",
        SHMRING_E_NOT_FOUND => c"SHMRING_E_NOT_FOUND",
        SHMRING_E_EXISTS => c"SHMRING_E_EXISTS",
        SHMRING_E_CORRUPT => c"SHMRING_E_CORRUPT",
        SHMRING_E_TRUNCATED => c"SHMRING_E_TRUNCATED",
        SHMRING_E_EVICTED => c"SHMRING_E_EVICTED",
        SHMRING_E_CLOSED => c"SHMRING_E_CLOSED",
        SHMRING_E_BUSY => c"SHMRING_E_BUSY",
        SHMRING_E_NOT_PIN_ONLY => c"SHMRING_E_NOT_PIN_ONLY",
        SHMRING_E_BUFFER_TOO_SMALL => c"SHMRING_E_BUFFER_TOO_SMALL",
        SHMRING_E_MISMATCH => c"SHMRING_E_MISMATCH",
        SHMRING_E_PRODUCER_ALIVE => c"SHMRING_E_PRODUCER_ALIVE",
        SHMRING_E_DISPLACED => c"SHMRING_E_DISPLACED",
        SHMRING_E_PERMISSION => c"SHMRING_E_PERMISSION",
        SHMRING_E_LAGGING => c"SHMRING_E_LAGGING",
        SHMRING_E_OS => c"SHMRING_E_OS",
        SHMRING_E_UNSUPPORTED => c"SHMRING_E_UNSUPPORTED",
        SHMRING_E_PANIC => c"SHMRING_E_PANIC",
        _ => c"SHMRING_E_UNKNOWN",
    };
    name.as_ptr()
}

// ---------------------------------------------------------------------------------------------
// Rings.

/// Creates the named ring `name` (`/dev/shm/shmring.<name>`) with geometry `config` (NULL:
/// defaults) and stores a new handle in `*out`. The creating handle removes the name when freed
/// unless `shmring_ring_keep_name` is called.
///
/// Errors: `SHMRING_E_EXISTS`, `SHMRING_E_INVALID_ARGUMENT` (name, geometry, NULL `name` or
/// `out`), `SHMRING_E_PERMISSION`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_create(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: `out` is null or writable (header contract); checked inside.
        unsafe { out_handle(out) }?;
        // SAFETY: `name` is null or NUL-terminated (header contract).
        let name = unsafe { text(name, "name") }?;
        // SAFETY: `config` is null or points to a config (header contract).
        let cfg = unsafe { config.as_ref() };
        let pin_only = cfg.is_some_and(|c| c.pin_only != 0);
        let ring = builder(Ring::builder(name), cfg)
            .pin_only(pin_only)
            .create()?;
        new_ring(ring, out);
        Ok(())
    })
}

/// Opens the existing named ring `name`, waiting up to `config->open_timeout_ms` for it to
/// appear; non-zero geometry fields of `config` (NULL: none) must match. The handle does not
/// remove the name when freed.
///
/// Errors: `SHMRING_E_NOT_FOUND`, `SHMRING_E_MISMATCH`, `SHMRING_E_CORRUPT` (the file is not a
/// ring), `SHMRING_E_PERMISSION`, `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_open(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_create`.
        let name = unsafe { text(name, "name") }?;
        // SAFETY: as in `shmring_ring_create`.
        let cfg = unsafe { config.as_ref() };
        let ring = builder(Ring::builder(name), cfg).open()?;
        new_ring(ring, out);
        Ok(())
    })
}

/// Creates the named ring, or opens it if it exists (then its geometry must match `config`'s
/// non-zero fields). Only a handle that created the ring removes the name when freed.
///
/// Errors: as `shmring_ring_create` and `shmring_ring_open`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_open_or_create(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_create`.
        let name = unsafe { text(name, "name") }?;
        // SAFETY: as in `shmring_ring_create`.
        let cfg = unsafe { config.as_ref() };
        let pin_only = cfg.is_some_and(|c| c.pin_only != 0);
        let ring = builder(Ring::builder(name), cfg)
            .pin_only(pin_only)
            .open_or_create()?;
        new_ring(ring, out);
        Ok(())
    })
}

/// Creates a ring in a new sealed memfd (no name; share it with `shmring_ring_serve` or pass
/// `shmring_ring_fd` over a Unix socket yourself).
///
/// On Windows: an unnamed section, for a ring within this process only (nothing can share it).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_create_memfd(
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_create`.
        let cfg = unsafe { config.as_ref() };
        let pin_only = cfg.is_some_and(|c| c.pin_only != 0);
        let ring = builder(Ring::memfd(), cfg).pin_only(pin_only).create()?;
        new_ring(ring, out);
        Ok(())
    })
}

/// Opens a memfd ring from descriptor `fd` (received from a peer). The library duplicates
/// `fd`: the caller still owns `fd` and closes it when it likes.
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (no descriptor passing there).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT` (negative `fd`), `SHMRING_E_CORRUPT` (missing seals,
/// wrong size, not a ring), `SHMRING_E_OS`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_from_fd(fd: c_int, out: *mut *mut shmring_ring) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: `out` was checked; `fd` is the caller's (header contract).
        unsafe { fds::from_fd(fd, out) }
    })
}

/// Stores the ring's descriptor (the memfd, or the `/dev/shm` file) in `*fd`. The descriptor
/// belongs to the ring handle: do not close it; duplicate it to keep it past the handle.
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (`*fd` is not written).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_fd(ring: *const shmring_ring, fd: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: `ring` is null or a live handle (header contract).
        let ring = unsafe { arg(ring, "ring") }?;
        if fd.is_null() {
            return Err(null("fd"));
        }
        // SAFETY: non-null and writable (header contract).
        unsafe { fds::fd(ring, fd) }
    })
}

/// Serves this memfd ring's descriptor to subscribers that call `shmring_ring_connect` with
/// the same `name` and `dir`: `dir` NULL for the abstract socket `@shmring.<name>` (gone with
/// the process), or a directory for a socket file `<dir>/shmring.<name>.sock`. The server runs
/// on a background thread until the ring handle is freed. One server per handle.
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (share a named ring there instead).
///
/// Errors: `SHMRING_E_EXISTS` (someone serves the name, or this handle serves already),
/// `SHMRING_E_CORRUPT` (not a memfd ring: only a sealed memfd can be served),
/// `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_serve(
    ring: *const shmring_ring,
    name: *const c_char,
    dir: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        // SAFETY: as in `shmring_ring_create`.
        let name = SegmentName::new(unsafe { text(name, "name") }?)?;
        // SAFETY: `dir` is null or NUL-terminated (header contract).
        unsafe { fds::serve(ring, &name, dir) }
    })
}

/// Connects to the rendezvous server of ring `name` (`dir` as in `shmring_ring_serve`),
/// retrying for at most `timeout_ms` while nobody serves it yet, and maps the ring it hands
/// over (its seals and header checked).
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (open a named ring there instead).
///
/// Errors: `SHMRING_E_NOT_FOUND` (nobody served it in time), `SHMRING_E_PERMISSION` (the server
/// runs as another user), `SHMRING_E_CORRUPT`, `SHMRING_E_DISCONNECTED`, `SHMRING_E_TIMEOUT`,
/// `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_connect(
    name: *const c_char,
    dir: *const c_char,
    timeout_ms: u64,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_create`.
        let name = SegmentName::new(unsafe { text(name, "name") }?)?;
        // SAFETY: `dir` is null or NUL-terminated, `out` was checked (header contract).
        unsafe { fds::connect(&name, dir, timeout_ms, out) }
    })
}

/// The descriptor-based calls: memfd descriptors and their rendezvous over Unix sockets.
#[cfg(unix)]
mod fds {
    use super::*;

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
    pub(super) unsafe fn serve(
        ring: &shmring_ring,
        name: &SegmentName,
        dir: *const c_char,
    ) -> Res<()> {
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
}

/// Windows has no descriptors to pass: every descriptor-based call is `SHMRING_E_UNSUPPORTED`
/// (rings are shared by name there).
#[cfg(not(unix))]
mod fds {
    use super::*;

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
}

/// Reports the ring's geometry in `*info`.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_get_info(
    ring: *const shmring_ring,
    info: *mut shmring_ring_info,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        if info.is_null() {
            return Err(null("info"));
        }
        let geometry = ring.ring.mapping().geometry();
        let cfg = geometry.config();
        let value = shmring_ring_info {
            slots: cfg.slots,
            slot_size: u32::try_from(geometry.slot_capacity()).unwrap_or(u32::MAX),
            consumers: cfg.consumers,
            pin_only: u32::from(cfg.pin_only),
        };
        // SAFETY: non-null and writable (header contract).
        unsafe { put(info, value) };
        Ok(())
    })
}

/// Keeps the name when this (creating) handle is freed, for rings meant to outlive their
/// creator.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_keep_name(ring: *mut shmring_ring) -> c_int {
    guard(|| {
        // SAFETY: `ring` is null or a live handle nobody else uses now (header contract).
        let ring = unsafe { arg_mut(ring, "ring") }?;
        ring.ring.keep_name();
        Ok(())
    })
}

/// Frees the ring handle: stops its rendezvous server, removes the name if this handle created
/// it (see `shmring_ring_keep_name`) and unmaps the ring once no publisher or subscriber made
/// from it is left. NULL is allowed (nothing happens). `ring` is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_free(ring: *mut shmring_ring) -> c_int {
    // SAFETY: null or a handle made by `Box::into_raw` in `new_ring`, freed once (header
    // contract: invalid afterwards).
    guard(|| unsafe { free_handle(ring) })
}

// ---------------------------------------------------------------------------------------------
// Publishers.

/// Becomes the ring's one publisher (taking over from a dead one) and stores it in `*out`.
///
/// Errors: `SHMRING_E_PRODUCER_ALIVE`, `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_publisher(
    ring: *const shmring_ring,
    out: *mut *mut shmring_publisher,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        let handle = Box::into_raw(Box::new(shmring_publisher {
            lender: Lender::new(
                ring.ring.publisher()?,
                "the publisher holds a loan: send or abort it first",
            ),
        }));
        // SAFETY: checked by `out_handle`.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// The publisher behind `p`, unless a loan is out.
///
/// # Safety
///
/// `p` is null or a live publisher handle used by nobody else now.
unsafe fn publisher<'a>(p: *mut shmring_publisher) -> Res<&'a mut Publisher> {
    // SAFETY: the caller's contract.
    unsafe { arg_mut(p, "publisher") }?.lender.get()
}

/// Claims a slot (once `deadline` is reached, the ring's last refusal), waiting with reclaim.
fn claim_loop<R>(
    publisher: &mut Publisher,
    timeout_ms: u64,
    mut write: impl FnMut(WriteSlot<'_, Arc<Mapping>>) -> R,
) -> Res<R> {
    let inner = publisher.inner();
    if timeout_ms == 0 {
        return Ok(write(inner.try_claim()?));
    }
    // A wait without end is a series of long waits: the ring-os claim reclaims dead
    // subscribers at each slice end.
    let slice = if timeout_ms == SHMRING_FOREVER {
        Duration::from_secs(1)
    } else {
        millis(timeout_ms)
    };
    loop {
        match inner.claim_with(slice, &mut write) {
            Ok(r) => return Ok(r),
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. })
                if timeout_ms == SHMRING_FOREVER => {}
            Err(e) => return Err(claim_timeout(e, timeout_ms)),
        }
    }
}

/// Copies `len` bytes at `data` into the next slot and publishes them with metadata `meta`
/// (NULL: zeros; else two words), waiting at most `timeout_ms` (0: do not wait;
/// `SHMRING_FOREVER`) while the ring is full, reclaiming subscribers whose process died. Stores
/// the sequence number in `*seq` (NULL: not wanted). Works in every ring.
///
/// Errors: `SHMRING_E_TOO_LARGE`, `SHMRING_E_FULL` (timeout 0), `SHMRING_E_TIMEOUT`,
/// `SHMRING_E_CLOSED`, `SHMRING_E_DISPLACED`, `SHMRING_E_TRUNCATED`, `SHMRING_E_BUSY` (a loan
/// is out), `SHMRING_E_INVALID_ARGUMENT` (NULL `publisher`, NULL `data` with `len` > 0).
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_send(
    publisher: *mut shmring_publisher,
    data: *const u8,
    len: usize,
    meta: *const u64,
    timeout_ms: u64,
    seq: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: `publisher` is null or a live handle used only by this thread (header).
        let p = unsafe { self::publisher(publisher) }?;
        // SAFETY: `data` is null or readable for `len` bytes (header contract).
        let data = unsafe { bytes(data, len, "data") }?;
        let meta = if meta.is_null() {
            [0; 2]
        } else {
            // SAFETY: non-null: two readable words (header contract).
            unsafe { [meta.read(), meta.add(1).read()] }
        };
        let capacity = p.inner().memory().geometry().slot_capacity();
        if len > capacity {
            return Err(ClaimError::TooLarge { len, capacity }.into());
        }
        let sent = claim_loop(p, timeout_ms, |mut slot| {
            // Cannot overflow: the length was checked against the capacity above.
            let _ = slot.write(data);
            slot.set_meta(meta);
            slot.publish()
        })??;
        // SAFETY: null or writable (header contract).
        unsafe { put(seq, sent) };
        Ok(())
    })
}

/// Claims the next slot for writing in place, waiting at most `timeout_ms` as
/// `shmring_publisher_send` does, and stores the loan in `*out`. The message is empty until
/// written: in a pin-only ring, write through `shmring_loan_data` and set the length with
/// `shmring_loan_set_len`; in any ring, `shmring_loan_write` writes at an offset. Then
/// `shmring_loan_send` or `shmring_loan_abort`. Until then the publisher accepts no other call.
///
/// Errors: as `shmring_publisher_send`, and `SHMRING_E_BUSY` (a loan is out already).
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_loan(
    publisher: *mut shmring_publisher,
    timeout_ms: u64,
    out: *mut *mut shmring_loan,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_publisher_send`.
        let handle = unsafe { arg_mut(publisher, "publisher") }?;
        let p = handle.lender.get()?;
        // Wait (reclaiming dead subscribers) until a slot can be claimed, give it back, and
        // claim it again outside the wait, as the front door's `Publisher::loan` does: one
        // producer, so the second claim succeeds.
        claim_loop(p, timeout_ms, |slot| slot.abort())?;
        let pin_only = p.inner().memory().geometry().config().pin_only;
        let slot = p.inner().try_claim()?;
        // SAFETY: the slot borrows the `Publisher` in `handle.lender`, a box at a stable address
        // that lives until `shmring_publisher_free`, whose lender drops an outstanding loan
        // before the publisher; every other publisher call refuses to touch the publisher while
        // the loan is out (`Lender::get`: `SHMRING_E_BUSY`). So the borrow stays unique and is
        // outlived by its referent, as `'static` claims for the loan's life.
        let mut slot: WriteSlot<'static, Arc<Mapping>> = unsafe { core::mem::transmute(slot) };
        let capacity = slot.capacity();
        let data = if pin_only {
            let whole = slot
                .loan(capacity)
                .map_err(|e| fail(SHMRING_E_NOT_PIN_ONLY, format!("loaning the slot: {e:?}")))?;
            let data = whole.as_mut_ptr();
            // An empty message until the caller sets a length.
            let _ = slot.loan(0);
            data
        } else {
            ptr::null_mut()
        };
        let loan = handle.lender.lend(shmring_loan {
            slot,
            owner: publisher,
            data,
            capacity,
        });
        // SAFETY: checked by `out_handle`.
        unsafe { out.write(loan) };
        Ok(())
    })
}

/// Waits at most `timeout_ms` until at least `n` subscribers are registered and their start
/// point is final: each then receives (by its class) everything published after this returns.
///
/// Errors: `SHMRING_E_TIMEOUT`, `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_wait_for_subscribers(
    publisher: *mut shmring_publisher,
    n: usize,
    timeout_ms: u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        let p = unsafe { self::publisher(publisher) }?;
        loop {
            let slice = if timeout_ms == SHMRING_FOREVER {
                Duration::from_secs(1)
            } else {
                millis(timeout_ms)
            };
            if p.wait_for_subscribers(n, slice) {
                return Ok(());
            }
            if timeout_ms != SHMRING_FOREVER {
                return Err(fail(
                    SHMRING_E_TIMEOUT,
                    format!(
                        "fewer than {n} subscribers registered within {timeout_ms} ms ({} ready)",
                        p.subscribers()
                    ),
                ));
            }
        }
    })
}

/// Waits at most `timeout_ms` until every gating subscriber consumed everything published
/// (reclaiming dead ones).
///
/// Errors: `SHMRING_E_TIMEOUT`, `SHMRING_E_TRUNCATED`, `SHMRING_E_BUSY`,
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_wait_drained(
    publisher: *mut shmring_publisher,
    timeout_ms: u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        let p = unsafe { self::publisher(publisher) }?;
        loop {
            let slice = if timeout_ms == SHMRING_FOREVER {
                Duration::from_secs(1)
            } else {
                millis(timeout_ms)
            };
            if p.wait_drained(slice) {
                return Ok(());
            }
            if p.inner().memory().is_truncated() {
                return Err(fail(SHMRING_E_TRUNCATED, TRUNCATED));
            }
            if timeout_ms != SHMRING_FOREVER {
                return Err(fail(
                    SHMRING_E_TIMEOUT,
                    format!("gating subscribers did not drain the ring within {timeout_ms} ms"),
                ));
            }
        }
    })
}

/// Reports the messages published so far (the next sequence number) in `*published` and the
/// subscribers whose start point is final in `*subscribers` (either may be NULL).
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_counters(
    publisher: *mut shmring_publisher,
    published: *mut u64,
    subscribers: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        let p = unsafe { self::publisher(publisher) }?;
        // SAFETY: null or writable (header contract).
        unsafe {
            put(published, p.sent());
            put(subscribers, p.subscribers());
        }
        Ok(())
    })
}

/// Reports the subscribers this publisher reclaimed because their processes died without
/// leaving (a subscriber that was freed is not one of them): `*total` of them, `*gating` of
/// those gating, and in `*unread` how many messages the first gating subscriber that died with
/// messages unread had not read (0 when none did: then no gating subscriber lost data). Any
/// pointer may be NULL. A publisher that promised its gating subscribers every message checks
/// `*unread` before it reports success.
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_lost_subscribers(
    publisher: *mut shmring_publisher,
    total: *mut u64,
    gating: *mut u64,
    unread: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        let lost = unsafe { self::publisher(publisher) }?.lost_subscribers();
        // SAFETY: null or writable (header contract).
        unsafe {
            put(total, lost.total);
            put(gating, lost.gating);
            put(unread, lost.first_gating_unread.map_or(0, |l| l.unread()));
        }
        Ok(())
    })
}

/// Creates group `name` (competing consumers, joined with `shmring_ring_join_group`), or finds
/// it, and stores its subscriber-table index in `*index` (NULL: not wanted). Messages sent from
/// now on wait for the group: each goes to exactly one member, and the group holds the
/// publisher back as one gating subscriber would, even before its first member joins.
///
/// Errors: `SHMRING_E_FULL` (no free subscriber entry), `SHMRING_E_BUSY`,
/// `SHMRING_E_INVALID_ARGUMENT` (NULL or non-UTF-8 name).
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_create_group(
    publisher: *mut shmring_publisher,
    name: *const c_char,
    index: *mut u32,
) -> c_int {
    guard(|| {
        // SAFETY: null or NUL-terminated (header contract).
        let name = unsafe { text(name, "name") }?;
        // SAFETY: as in `shmring_publisher_send`.
        let at = unsafe { self::publisher(publisher) }?.create_group(name)?;
        // SAFETY: null or writable (header contract); an index is below the 32-entry table.
        unsafe { put(index, at as u32) };
        Ok(())
    })
}

/// Ends the stream as complete: subscribers drain what is there, then get
/// `SHMRING_E_DISCONNECTED`. Later sends fail with `SHMRING_E_CLOSED`.
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_close(publisher: *mut shmring_publisher) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        unsafe { self::publisher(publisher) }?.close();
        Ok(())
    })
}

/// Ends the stream as aborted with `code`: subscribers drain, then get `SHMRING_E_ABORTED`
/// (the message names `code`). Later sends fail with `SHMRING_E_CLOSED`.
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_abort(
    publisher: *mut shmring_publisher,
    code: u16,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        unsafe { self::publisher(publisher) }?.abort(code);
        Ok(())
    })
}

/// Frees the publisher: aborts an outstanding loan, and ends the stream as aborted (code 0)
/// unless `shmring_publisher_close` or `shmring_publisher_abort` was called. NULL is allowed.
/// `publisher` (and its loan) are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_free(publisher: *mut shmring_publisher) -> c_int {
    // SAFETY: null or a handle made by `Box::into_raw` in `shmring_ring_publisher`, freed once
    // (header contract); its lender aborts an outstanding loan first.
    guard(|| unsafe { free_handle(publisher) })
}

// ---------------------------------------------------------------------------------------------
// Loans.

/// Stores the slot's writable bytes in `*data` and its capacity in `*capacity` (either may be
/// NULL). Only in a pin-only ring: no reader looks at the slot while it is loaned. The pointer
/// is valid until `shmring_loan_send` or `shmring_loan_abort`; the library owns the memory.
///
/// Errors: `SHMRING_E_NOT_PIN_ONLY` (use `shmring_loan_write`), `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_data(
    loan: *mut shmring_loan,
    data: *mut *mut u8,
    capacity: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: `loan` is null or a live loan used only by this thread (header contract).
        let loan = unsafe { arg_mut(loan, "loan") }?;
        if loan.data.is_null() {
            return Err(fail(
                SHMRING_E_NOT_PIN_ONLY,
                "a writable pointer into a slot needs a pin-only ring (copy readers of other \
                 rings read slots at any moment): use shmring_loan_write, or create the ring \
                 with pin_only",
            ));
        }
        // SAFETY: null or writable (header contract).
        unsafe {
            put(data, loan.data);
            put(capacity, loan.capacity);
        }
        Ok(())
    })
}

/// Copies `len` bytes at `data` into the slot at byte `offset`; the message grows to cover
/// them. Works in every ring (chunked writes without a staging buffer).
///
/// Errors: `SHMRING_E_TOO_LARGE` (past the slot's end; nothing written),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_write(
    loan: *mut shmring_loan,
    offset: usize,
    data: *const u8,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_loan_data`.
        let loan = unsafe { arg_mut(loan, "loan") }?;
        // SAFETY: null or readable for `len` bytes (header contract).
        let data = unsafe { bytes(data, len, "data") }?;
        loan.slot.write_at(offset, data).map_err(|_| {
            fail(
                SHMRING_E_TOO_LARGE,
                format!(
                    "writing {len} bytes at offset {offset} passes the end of a {}-byte slot",
                    loan.capacity
                ),
            )
        })
    })
}

/// Sets the message length (bytes not written read as whatever the slot held).
///
/// Errors: `SHMRING_E_TOO_LARGE`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_set_len(loan: *mut shmring_loan, len: usize) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_loan_data`.
        let loan = unsafe { arg_mut(loan, "loan") }?;
        let too_large = || {
            fail(
                SHMRING_E_TOO_LARGE,
                format!(
                    "a {len}-byte message does not fit in a {}-byte slot",
                    loan.capacity
                ),
            )
        };
        if len > loan.capacity {
            return Err(too_large());
        }
        if loan.data.is_null() {
            loan.slot.set_len(len).map_err(|_| too_large())
        } else {
            // In a pin-only ring a loan of `len` sets the length and zeroes the last word's
            // padding (so readers of whole words see zeros past the end).
            loan.slot.loan(len).map(|_| ()).map_err(|_| too_large())
        }
    })
}

/// Sets the message's two metadata words.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_set_meta(
    loan: *mut shmring_loan,
    meta0: u64,
    meta1: u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_loan_data`.
        let loan = unsafe { arg_mut(loan, "loan") }?;
        loan.slot.set_meta([meta0, meta1]);
        Ok(())
    })
}

/// Takes the loan out of its publisher and frees the handle.
///
/// # Safety
///
/// `loan` is null or a live loan handle, used only by this thread, freed by nobody else.
unsafe fn take_loan(loan: *mut shmring_loan) -> Res<Box<shmring_loan>> {
    if loan.is_null() {
        return Err(null("loan"));
    }
    // SAFETY: live by the caller's contract; its owner outlives it (freeing the owner frees
    // the loan) and is used by this thread only.
    let owner = unsafe { &mut *(*loan).owner };
    owner.lender.take(loan, "loan")
}

/// Publishes the loaned slot and stores its sequence number in `*seq` (NULL: not wanted). The
/// loan is consumed whatever the outcome: `loan` is invalid afterwards.
///
/// Errors: `SHMRING_E_DISPLACED` (another publisher took over; nothing published),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_send(loan: *mut shmring_loan, seq: *mut u64) -> c_int {
    guard(|| {
        // SAFETY: the header contract for `loan`.
        let loan = unsafe { take_loan(loan) }?;
        let sent = loan.slot.publish()?;
        // SAFETY: null or writable (header contract).
        unsafe { put(seq, sent) };
        Ok(())
    })
}

/// Gives the slot back without publishing (the sequence number is reused). The loan is
/// consumed: `loan` is invalid afterwards.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_abort(loan: *mut shmring_loan) -> c_int {
    guard(|| {
        // SAFETY: the header contract for `loan`.
        let loan = unsafe { take_loan(loan) }?;
        loan.slot.abort();
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Subscribers.

/// Registers a subscriber of `class` (`SHMRING_GATING`, `SHMRING_LATEST_ONLY`,
/// `SHMRING_SKIP_ON_LAG`) and stores it in `*out`. It receives what is published from now on.
///
/// Errors: `SHMRING_E_FULL` (the subscriber table is full), `SHMRING_E_INVALID_ARGUMENT`
/// (unknown class), `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_subscriber(
    ring: *const shmring_ring,
    class: u32,
    out: *mut *mut shmring_subscriber,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        let subscriber = ring.ring.subscriber(self::class(class)?)?;
        let handle = Box::into_raw(Box::new(shmring_subscriber {
            lender: Lender::new(
                subscriber,
                "the subscriber holds a pin: release it first (shmring_pinned_release)",
            ),
            abort_code: None,
            holds: Vec::new(),
        }));
        // SAFETY: checked by `out_handle`.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Joins group `name` (created by the publisher with `shmring_publisher_create_group`) as a new
/// member and stores the subscriber in `*out`: members share one cursor, so each message goes
/// to exactly one of them; a member that dies holding messages gives them to another, with
/// `redelivered` set in their `shmring_message`. Read with the subscriber functions as usual.
///
/// Errors: `SHMRING_E_NOT_FOUND` (no such group yet), `SHMRING_E_FULL` (the subscriber table is
/// full), `SHMRING_E_INVALID_ARGUMENT` (NULL or non-UTF-8 name), `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_join_group(
    ring: *const shmring_ring,
    name: *const c_char,
    out: *mut *mut shmring_subscriber,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        // SAFETY: null or NUL-terminated (header contract).
        let name = unsafe { text(name, "name") }?;
        let subscriber = ring.ring.join_group(name)?;
        let handle = Box::into_raw(Box::new(shmring_subscriber {
            lender: Lender::new(
                subscriber,
                "the subscriber holds a pin: release it first (shmring_pinned_release)",
            ),
            abort_code: None,
            holds: Vec::new(),
        }));
        // SAFETY: checked by `out_handle`.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// The subscriber behind `s`, unless a pin is out.
///
/// # Safety
///
/// `s` is null or a live subscriber handle used by nobody else now.
unsafe fn subscriber<'a>(s: *mut shmring_subscriber) -> Res<&'a mut Subscriber> {
    // SAFETY: the caller's contract.
    unsafe { arg_mut(s, "subscriber") }?.lender.get()
}

fn message(data: *const u8, c: Copied) -> shmring_message {
    shmring_message {
        data,
        len: c.len,
        seq: c.seq,
        missed: c.missed,
        meta: c.meta,
        redelivered: u32::from(c.redelivered),
    }
}

/// Copies the next message into the caller's `buf` (`cap` bytes), waiting at most
/// `timeout_ms` (0: do not wait; `SHMRING_FOREVER`), and describes it in `*msg` (`data` is
/// `buf`; NULL `msg`: not wanted). Works in every ring but pin-only ones (use
/// `shmring_subscriber_pin` there).
///
/// Errors: `SHMRING_E_EMPTY` (timeout 0), `SHMRING_E_TIMEOUT`, `SHMRING_E_DISCONNECTED`,
/// `SHMRING_E_ABORTED`, `SHMRING_E_BUFFER_TOO_SMALL` (nothing consumed), `SHMRING_E_EVICTED`,
/// `SHMRING_E_CORRUPT`, `SHMRING_E_TRUNCATED`, `SHMRING_E_BUSY` (a pin is out),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_recv(
    subscriber: *mut shmring_subscriber,
    buf: *mut u8,
    cap: usize,
    timeout_ms: u64,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        // SAFETY: `subscriber` is null or live and used only by this thread (header contract).
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let buf: &mut [u8] = if cap == 0 {
            &mut []
        } else if buf.is_null() {
            return Err(null("buf"));
        } else if cap > isize::MAX as usize {
            return Err(fail(SHMRING_E_INVALID_ARGUMENT, "cap is impossible"));
        } else {
            // SAFETY: non-null and writable for `cap` bytes (header contract).
            unsafe { core::slice::from_raw_parts_mut(buf, cap) }
        };
        let data = buf.as_ptr();
        let aborted = &mut handle.abort_code;
        let got = match timeout_ms {
            0 => s.try_recv(buf).map_err(|e| read_fail(aborted, e))?,
            SHMRING_FOREVER => s.recv(buf).map_err(|e| read_fail(aborted, e))?,
            t => s
                .recv_timeout(buf, millis(t))
                .map_err(|e| read_fail(aborted, e))?,
        };
        // SAFETY: null or writable (header contract).
        unsafe { put(msg, message(data, got)) };
        Ok(())
    })
}

/// Pins the next message, waiting at most `timeout_ms` (0: do not wait; `SHMRING_FOREVER`):
/// a zero-copy view the publisher cannot overwrite until `shmring_pinned_release`. Stores the
/// pin in `*out` and describes the message in `*msg` (NULL: not wanted; `data` points into
/// the ring, valid until the release). Until then the subscriber accepts no other call.
///
/// Errors: as `shmring_subscriber_recv` (no `BUFFER_TOO_SMALL`), and `SHMRING_E_LAGGING`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_pin(
    subscriber: *mut shmring_subscriber,
    timeout_ms: u64,
    out: *mut *mut shmring_pinned,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let aborted = &mut handle.abort_code;
        let pin = match timeout_ms {
            0 => s.try_recv_pinned().map_err(|e| read_fail(aborted, e))?,
            SHMRING_FOREVER => s.recv_pinned().map_err(|e| read_fail(aborted, e))?,
            t => s
                .recv_pinned_timeout(millis(t))
                .map_err(|e| read_fail(aborted, e))?,
        };
        // SAFETY: the pin borrows the `Subscriber` in `handle.lender`, a box at a stable address
        // that lives until `shmring_subscriber_free`, whose lender drops an outstanding pin
        // before the subscriber; every other subscriber call refuses to touch the subscriber
        // while the pin is out (`Lender::get`: `SHMRING_E_BUSY`). So the borrow stays unique
        // and is outlived by its referent, as `'static` claims for the pin's life.
        let pin: Pinned<'static, Arc<Mapping>> = unsafe { core::mem::transmute(pin) };
        let info = pinned_message(&pin);
        let pinned = handle.lender.lend(shmring_pinned {
            pin,
            owner: subscriber,
        });
        // SAFETY: checked by `out_handle`; `msg` null or writable (header contract).
        unsafe {
            out.write(pinned);
            put(msg, info);
        }
        Ok(())
    })
}

/// Holds the next message, waiting at most `timeout_ms` (0: do not wait; `SHMRING_FOREVER`):
/// like a pin, the publisher cannot overwrite it until `shmring_subscriber_release_hold`, but
/// the subscriber stays free for other reads and holds, so several messages can be kept at
/// once (up to `shmring_subscriber_set_max_holds`, 4 by default, at most 8) and released in
/// any order. Stores the hold's id (never 0) in `*hold` and describes the message in `*msg`
/// (NULL: not wanted; `data` points into the ring, valid until the release). Holds not
/// released end with `shmring_subscriber_free`.
///
/// Errors: as `shmring_subscriber_pin`, and `SHMRING_E_BUSY` when the subscriber already holds
/// as many messages as it may (nothing is read) or a pin is out.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_hold(
    subscriber: *mut shmring_subscriber,
    timeout_ms: u64,
    hold: *mut u32,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        if hold.is_null() {
            return Err(null("hold"));
        }
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let wait = match timeout_ms {
            SHMRING_FOREVER => Duration::MAX,
            t => millis(t),
        };
        let got = match s.recv_held_timeout(wait) {
            Ok(h) => h,
            Err(RecvTimeoutError::Timeout) if timeout_ms == 0 => {
                return Err(fail(SHMRING_E_EMPTY, "no new message"));
            }
            Err(e) => return Err(read_fail(&mut handle.abort_code, e)),
        };
        let info = shmring_message {
            data: s.held_bytes(&got).unwrap_or_default().as_ptr(),
            len: got.len(),
            seq: got.seq(),
            missed: got.missed(),
            meta: got.meta(),
            redelivered: u32::from(got.redelivered()),
        };
        let free = handle.holds.iter().position(Option::is_none);
        let index = free.unwrap_or(handle.holds.len());
        let id = u32::try_from(index + 1).map_err(|_| fail(SHMRING_E_BUSY, "too many holds"))?;
        match free {
            Some(i) => handle.holds[i] = Some(got),
            None => handle.holds.push(Some(got)),
        }
        // SAFETY: `hold` is non-null (checked) and writable, `msg` null or writable (header
        // contract).
        unsafe {
            hold.write(id);
            put(msg, info);
        }
        Ok(())
    })
}

/// Releases the message held as `hold` (from `shmring_subscriber_hold`): the publisher may
/// reuse its slot; its `data` is invalid afterwards.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT` (NULL subscriber, or no such hold: released already),
/// `SHMRING_E_BUSY` (a pin is out).
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_release_hold(
    subscriber: *mut shmring_subscriber,
    hold: u32,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let slot = (hold as usize)
            .checked_sub(1)
            .and_then(|i| handle.holds.get_mut(i))
            .and_then(Option::take)
            .ok_or_else(|| {
                fail(
                    SHMRING_E_INVALID_ARGUMENT,
                    "no such hold (released already?)",
                )
            })?;
        s.release(slot)
            .map_err(|e| fail(read_code(e), e.to_string()))
    })
}

/// Starts a gating or skip-on-lag subscriber up to `n` messages back, as far as the ring still
/// holds them (history for a late joiner), before its first read; stores in `*back` (NULL: not
/// wanted) how many back it now starts. A gating subscriber is lossless from where it joined;
/// history overwritten before it read it counts as missed.
///
/// Errors: `SHMRING_E_UNSUPPORTED` (a latest-only subscriber or a group member, or after a read),
/// `SHMRING_E_EVICTED`, `SHMRING_E_CORRUPT`, `SHMRING_E_BUSY` (a pin is out),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_rewind(
    subscriber: *mut shmring_subscriber,
    n: u64,
    back: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let got = handle
            .lender
            .get()?
            .rewind(n)
            .map_err(|e| fail(read_code(e), e.to_string()))?;
        // SAFETY: null or writable (header contract).
        unsafe { put(back, got) };
        Ok(())
    })
}

/// Sets how many messages the subscriber may hold at once (0 to 8; 4 by default).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT` (above 8, below the number held now, NULL),
/// `SHMRING_E_BUSY` (a pin is out).
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_set_max_holds(
    subscriber: *mut shmring_subscriber,
    max: usize,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        handle
            .lender
            .get()?
            .set_max_holds(max)
            .map_err(|e| fail(SHMRING_E_INVALID_ARGUMENT, e.to_string()))
    })
}

fn pinned_message(pin: &Pinned<'_, Arc<Mapping>>) -> shmring_message {
    shmring_message {
        data: pin.bytes().as_ptr(),
        len: pin.len(),
        seq: pin.seq(),
        missed: pin.missed(),
        meta: pin.meta(),
        redelivered: u32::from(pin.redelivered()),
    }
}

/// Describes the pinned message in `*msg` again (as `shmring_subscriber_pin` did).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_pinned_message(
    pinned: *const shmring_pinned,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        // SAFETY: `pinned` is null or a live pin (header contract).
        let pinned = unsafe { arg(pinned, "pinned") }?;
        if msg.is_null() {
            return Err(null("msg"));
        }
        // SAFETY: non-null and writable (header contract).
        unsafe { put(msg, pinned_message(&pinned.pin)) };
        Ok(())
    })
}

/// Releases the pin (the publisher may then reuse the slot). `pinned` and the `data` pointer
/// it gave are invalid afterwards.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_pinned_release(pinned: *mut shmring_pinned) -> c_int {
    guard(|| {
        if pinned.is_null() {
            return Err(null("pinned"));
        }
        // SAFETY: a live pin (header contract); its owner outlives it (freeing the owner frees
        // the pin) and is used by this thread only.
        let owner = unsafe { &mut *(*pinned).owner };
        drop(owner.lender.take(pinned, "pin")?);
        Ok(())
    })
}

/// Reports the messages received so far in `*received` and those skipped (latest-only and
/// skip-on-lag subscribers) in `*missed` (either may be NULL).
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_counters(
    subscriber: *mut shmring_subscriber,
    received: *mut u64,
    missed: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let s = unsafe { self::subscriber(subscriber) }?;
        // SAFETY: null or writable (header contract).
        unsafe {
            put(received, s.received());
            put(missed, s.missed());
        }
        Ok(())
    })
}

/// Stores in `*code` the code the publisher aborted the stream with (its
/// `shmring_publisher_abort` code; 0 when it was freed without closing), once a read of this
/// subscriber (`shmring_subscriber_recv` or `shmring_subscriber_pin`) has returned
/// `SHMRING_E_ABORTED`. May be called while a pin is out.
///
/// Errors: `SHMRING_E_EMPTY` (no read of this subscriber has returned `SHMRING_E_ABORTED`: the
/// stream was not aborted, or is not drained yet; `*code` is not written),
/// `SHMRING_E_INVALID_ARGUMENT` (NULL `subscriber` or `code`).
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_abort_code(
    subscriber: *const shmring_subscriber,
    code: *mut u16,
) -> c_int {
    guard(|| {
        // SAFETY: `subscriber` is null or a live handle used only by this thread (header
        // contract); the pin it may have out borrows the boxed `Subscriber`, not this field.
        let handle = unsafe { arg(subscriber, "subscriber") }?;
        if code.is_null() {
            return Err(null("code"));
        }
        let Some(value) = handle.abort_code else {
            return Err(fail(
                SHMRING_E_EMPTY,
                "no read of this subscriber has returned SHMRING_E_ABORTED (the stream was not \
                 aborted, or is not drained yet)",
            ));
        };
        // SAFETY: non-null and writable (header contract).
        unsafe { put(code, value) };
        Ok(())
    })
}

/// Frees the subscriber (it leaves the ring), releasing a pin it still holds. NULL is allowed.
/// `subscriber` (and its pin) are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_free(subscriber: *mut shmring_subscriber) -> c_int {
    // SAFETY: null or a handle made by `Box::into_raw` in `shmring_ring_subscriber`, freed once
    // (header contract); its lender releases an outstanding pin first.
    guard(|| unsafe { free_handle(subscriber) })
}

/// The library's version as a static string (`"0.1.0"`): never NULL, never freed.
#[no_mangle]
pub extern "C" fn shmring_version_string() -> *const c_char {
    const V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"?",
        };
    V.as_ptr()
}

#[cfg(test)]
mod tests {
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
