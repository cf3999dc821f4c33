//! ring-os errors as `shmring` exceptions. The classes live in `shmring/errors.py` (so they can
//! also derive from `queue.Full`, `TimeoutError`, `FileNotFoundError`...); this module picks the
//! class for each ring-os error, one to one, and builds the exception once the GIL is held.

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use ring_core::{ClaimError, ReadError};
use ring_os::{Error, RecvTimeoutError, SendTimeoutError};

/// An error computed without the GIL: the `shmring.errors` class name and the message.
#[derive(Debug)]
pub(crate) struct Fail {
    kind: &'static str,
    msg: String,
    code: Option<u16>,
}

impl Fail {
    /// A failure of class `kind` (a name in `shmring.errors`).
    pub(crate) fn new(kind: &'static str, msg: impl Into<String>) -> Self {
        Self {
            kind,
            msg: msg.into(),
            code: None,
        }
    }

    /// The Python exception (an instance of `shmring.errors.<kind>`).
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        if self.kind == "BufferError" {
            return PyBufferError::new_err(self.msg);
        }
        let made = py
            .import("shmring.errors")
            .and_then(|m| m.getattr(self.kind))
            .and_then(|cls| cls.call1((self.msg,)));
        match made {
            Ok(exc) => {
                if let Some(code) = self.code {
                    if let Err(e) = exc.setattr("code", code) {
                        return e;
                    }
                }
                PyErr::from_value(exc)
            }
            Err(e) => e,
        }
    }
}

impl From<Fail> for PyErr {
    fn from(f: Fail) -> Self {
        Python::with_gil(|py| f.into_py(py))
    }
}

/// The class of a ring-core read error.
/// Whether a `with` block is leaving by an exception: `__exit__`'s arguments (taken as
/// `*args`) start with an exception type that is not `None`.
pub(crate) fn raised(exit_args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
    exit_args.get_item(0).is_ok_and(|t| !t.is_none())
}

pub(crate) fn read(e: ReadError) -> Fail {
    let kind = match e {
        ReadError::Empty => "Empty",
        ReadError::Closed => "Disconnected",
        ReadError::Aborted { code } => {
            let mut f = Fail::new("Aborted", format!("{e}"));
            f.code = Some(code);
            return f;
        }
        ReadError::Lagging => "Lagging",
        ReadError::BufferTooSmall { .. } => "TooLarge",
        ReadError::Corrupt(why) if why == ring_os::raw::TRUNCATED => "Truncated",
        ReadError::Corrupt(_) => "Corrupt",
        ReadError::Evicted => "Evicted",
        ReadError::Timeout => "Timeout",
        ReadError::TooManyHolds { max } => {
            return Fail::new(
                "TooManyPins",
                format!(
                    "this consumer already keeps {max} messages pinned, its max_pins: release \
                     one (msg.release(), the end of its with block, or dropping it and its \
                     views) before reading another"
                ),
            )
        }
        ReadError::NotHeld => "Error",
        ReadError::NotSupported(_) => "Error",
    };
    Fail::new(kind, format!("{e}"))
}

/// The class of a ring-core claim error.
pub(crate) fn claim(e: ClaimError) -> Fail {
    let kind = match e {
        ClaimError::Full { .. } | ClaimError::Pinned { .. } => "Full",
        ClaimError::Closed => "Closed",
        ClaimError::Corrupt(why) if why == ring_os::raw::TRUNCATED => "Truncated",
        ClaimError::Corrupt(_) => "Corrupt",
        ClaimError::Displaced { .. } => "Displaced",
        ClaimError::TooLarge { .. } => "TooLarge",
    };
    Fail::new(kind, format!("{e}"))
}

/// The class of a blocking receive's error (`Timeout` is the caller's business).
pub(crate) fn recv(e: RecvTimeoutError) -> Fail {
    match e {
        RecvTimeoutError::Timeout => Fail::new("Timeout", format!("{e}")),
        RecvTimeoutError::Disconnected => Fail::new("Disconnected", format!("{e}")),
        RecvTimeoutError::Failed(e) => read(e),
    }
}

/// The class of a blocking send's error.
pub(crate) fn send(e: SendTimeoutError) -> Fail {
    match e {
        SendTimeoutError::Timeout => Fail::new("Timeout", format!("{e}")),
        SendTimeoutError::Closed => Fail::new("Closed", format!("{e}")),
        SendTimeoutError::TooLarge { .. } => Fail::new("TooLarge", format!("{e}")),
        SendTimeoutError::Failed(e) => claim(e),
    }
}

/// The class of a ring-os error.
pub(crate) fn os(e: Error) -> Fail {
    let kind = match &e {
        Error::InvalidName { .. } => "InvalidName",
        Error::AlreadyExists { .. } => "AlreadyExists",
        Error::NotFound { .. } => "NotFound",
        Error::PermissionDenied { .. } | Error::Insecure { .. } | Error::ForeignPeer { .. } => {
            "PermissionDenied"
        }
        Error::MessageTooLarge { .. } => "TooLarge",
        Error::NoSpace { .. } => "NoSpace",
        Error::Read(r) => return read(*r),
        Error::Claim(c) => return claim(*c),
        Error::RingDisconnected | Error::Disconnected | Error::ProducerGone => "Disconnected",
        Error::ConfigMismatch { .. } => "ConfigMismatch",
        Error::Full => "Full",
        Error::TimedOut => "Timeout",
        Error::Layout(_) | Error::BadLength { .. } | Error::NeverStallPins { .. } => {
            "InvalidConfig"
        }
        Error::Attach(_)
        | Error::SizeMismatch { .. }
        | Error::NotRegularFile { .. }
        | Error::MissingSeals { .. } => "Corrupt",
        Error::Truncated { .. } => "Truncated",
        Error::ProducerAlive { .. } => "Busy",
        Error::Ring(r) => match r {
            ring_core::Error::ProducerExists { .. }
            | ring_core::Error::ConsumerTableFull { .. } => "Busy",
            ring_core::Error::Evicted => "Evicted",
            ring_core::Error::NoSuchGroup => "NoSuchGroup",
            _ => "Error",
        },
        _ => "Error",
    };
    Fail::new(kind, format!("{e}"))
}

/// Shorthand: a ring-os error as a Python exception.
pub(crate) fn os_err(e: Error) -> PyErr {
    os(e).into()
}

/// The `BufferError` raised when something is released while a buffer export is alive (made
/// without calling Python, so it may be made under an endpoint's lock).
pub(crate) fn exported_fail(what: &str) -> Fail {
    Fail::new(
        "BufferError",
        format!(
            "cannot {what}: a buffer export (a memoryview, a numpy array, an Arrow buffer) \
             still views the slot; release those views first"
        ),
    )
}
