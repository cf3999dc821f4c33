//! Failures: the status codes they carry, the calling thread's last message, and the guard
//! every entry runs in (no panic crosses the boundary).

use core::cell::RefCell;
use core::ffi::{c_char, c_int, CStr};
use core::panic::AssertUnwindSafe;
use std::ffi::CString;
use std::panic::catch_unwind;

use ring_core::{ClaimError, ReadError};
use ring_os::prelude::*;
use ring_os::raw::TRUNCATED;

use crate::{
    SHMRING_E_ABORTED, SHMRING_E_BUFFER_TOO_SMALL, SHMRING_E_BUSY, SHMRING_E_CLOSED,
    SHMRING_E_CORRUPT, SHMRING_E_DISCONNECTED, SHMRING_E_DISPLACED, SHMRING_E_EMPTY,
    SHMRING_E_EVICTED, SHMRING_E_EXISTS, SHMRING_E_FULL, SHMRING_E_INVALID_ARGUMENT,
    SHMRING_E_LAGGING, SHMRING_E_MISMATCH, SHMRING_E_NOT_FOUND, SHMRING_E_NOT_PIN_ONLY,
    SHMRING_E_OS, SHMRING_E_PANIC, SHMRING_E_PERMISSION, SHMRING_E_PRODUCER_ALIVE,
    SHMRING_E_TIMEOUT, SHMRING_E_TOO_LARGE, SHMRING_E_TRUNCATED, SHMRING_E_UNSUPPORTED, SHMRING_OK,
};

/// A failure: its status code and its message.
pub(crate) struct Fail {
    code: c_int,
    msg: String,
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

pub(crate) fn fail(code: c_int, msg: impl Into<String>) -> Fail {
    Fail {
        code,
        msg: msg.into(),
    }
}

pub(crate) fn null(what: &str) -> Fail {
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
pub(crate) fn guard(f: impl FnOnce() -> Res) -> c_int {
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

pub(crate) fn read_code(e: ReadError) -> c_int {
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
        Error::InvalidName { .. }
        | Error::BadLength { .. }
        | Error::Layout(_)
        | Error::NeverStallPins { .. } => SHMRING_E_INVALID_ARGUMENT,
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
pub(crate) trait AbortCode {
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
pub(crate) fn read_fail<E: AbortCode + Into<Fail>>(slot: &mut Option<u16>, e: E) -> Fail {
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
pub(crate) fn claim_timeout(e: ClaimError, timeout: u64) -> Fail {
    match e {
        ClaimError::Full { .. } | ClaimError::Pinned { .. } if timeout != 0 => fail(
            SHMRING_E_TIMEOUT,
            format!("the ring stayed full for the whole timeout ({timeout} ms): {e}"),
        ),
        e => e.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// The calling thread's message and the codes' names.

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
