//! Opening rings by name through ring-os ([`ShmRing`], [`Mapping`]), with the few helpers the
//! commands share: retrying opens, owner liveness, the clocks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ring_core::{AttachError, Config, Memory as _};
use ring_os::raw::lock::{Liveness, Role};
#[cfg(unix)]
pub use ring_os::raw::rendezvous::Server;
#[cfg(unix)]
use ring_os::raw::rendezvous::{Rendezvous, SocketPlace};

/// Windows: no rendezvous server (memfd rings are Unix-only), so nothing to hold.
#[cfg(windows)]
pub type Server = ();
use ring_os::raw::{CreateOptions, Mapping, SegmentKind, SegmentName, ShmRing};

use crate::error::{CliError, Result};

/// A ring in a named segment, mapped.
pub type Ring = Arc<Mapping>;

/// Validates a user-given segment name.
pub fn segment_name(name: &str) -> Result<SegmentName> {
    Ok(SegmentName::new(name)?)
}

/// Whether a process holds `role`'s lock on the ring (the kernel's word, see `ring_os::raw::lock`);
/// `None` when the header records no owner for it (`owner` 0).
pub fn alive(ring: &Ring, role: Role, owner: u64) -> Option<bool> {
    (owner != 0).then(|| ring.segment().probe(role) == Liveness::Alive)
}

/// Names the segment in an attach error (the bytes are not a valid ring).
fn with_name(name: &SegmentName, e: ring_os::Error) -> CliError {
    match e {
        ring_os::Error::Attach(source) => CliError::Attach {
            name: name.as_str().to_owned(),
            source,
        },
        e => CliError::Os(e),
    }
}

/// Creates the named ring for `config`.
pub fn create(name: &SegmentName, config: &Config) -> Result<Ring> {
    ShmRing::create_named(name, config, CreateOptions::new()).map_err(|e| with_name(name, e))
}

/// `config` made never-stall for readers that pin up to `max_pins` messages at once (the rule
/// of `RingBuilder::never_stall`: `slots >= max_pins + 2`).
pub fn never_stall(config: Config, max_pins: u32) -> Result<Config> {
    ring_os::check_never_stall(config.slots, max_pins)?;
    Ok(config.with_never_stall(true))
}

/// Refuses an existing ring that is not never-stall, or too small for `max_pins` pins.
pub fn check_never_stall(ring: &Ring, max_pins: u32) -> Result<()> {
    let config = ring.geometry().config();
    if !config.never_stall {
        return Err(CliError::Os(ring_os::Error::ConfigMismatch {
            field: "never_stall",
            found: 0,
            expected: 1,
        }));
    }
    Ok(ring_os::check_never_stall(config.slots, max_pins)?)
}

/// Opens an existing named ring, validating the file and its header as untrusted input.
pub fn open(name: &SegmentName) -> Result<Ring> {
    ShmRing::open_named(name).map_err(|e| with_name(name, e))
}

/// Opens a ring, retrying while it does not exist yet or is still being formatted, for at
/// most `timeout`.
pub fn open_wait(name: &SegmentName, timeout: Duration) -> Result<Ring> {
    let deadline = Instant::now() + timeout;
    loop {
        // Retried: what a ring looks like while its creator is still making it (no file yet, a
        // file not yet sized, zeroed bytes, the init barrier still closed).
        let err = match open(name) {
            Ok(ring) => return Ok(ring),
            Err(
                e @ CliError::Os(
                    ring_os::Error::NotFound { .. }
                    | ring_os::Error::SizeMismatch { .. }
                    | ring_os::Error::BadLength { .. },
                ),
            ) => e,
            Err(
                e @ CliError::Attach {
                    source: AttachError::NotInitialized { .. } | AttachError::BadMagic { found: 0 },
                    ..
                },
            ) => e,
            Err(e) => return Err(e),
        };
        if Instant::now() >= deadline {
            return Err(CliError::Timeout(format!(
                "no usable ring {:?} after {}: {err}",
                name.as_str(),
                crate::table::duration(timeout)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The rendezvous of a memfd ring called `name` (abstract socket, or a socket file in `dir`).
#[cfg(unix)]
pub fn rendezvous(name: &SegmentName, dir: Option<&std::path::Path>) -> Rendezvous {
    let place = dir.map_or(SocketPlace::Abstract, |d| SocketPlace::Dir(d.to_owned()));
    Rendezvous::new(name, place)
}

/// Receives a memfd ring from its publisher, waiting at most `timeout` for one to serve it.
#[cfg(unix)]
pub fn receive(
    name: &SegmentName,
    dir: Option<&std::path::Path>,
    timeout: Duration,
) -> Result<Ring> {
    let rdv = rendezvous(name, dir);
    rdv.connect(timeout).map_err(|e| match e {
        ring_os::Error::NotFound { what } => CliError::Timeout(format!(
            "nobody served memfd ring {:?} on the {what} within {} (start `ringctl pub --memfd {}`)",
            name.as_str(),
            crate::table::duration(timeout),
            name.as_str()
        )),
        e => with_name(name, e),
    })
}

/// Windows: no memfd rings (they travel as descriptors over Unix sockets).
#[cfg(windows)]
pub fn no_memfd() -> CliError {
    CliError::Usage(
        "--memfd rings travel over Unix sockets, which this Windows build does not use; use a \
         named ring (a section in this session's namespace)"
            .to_owned(),
    )
}

/// The error to report for a failed ring operation: the truncation when a peer truncated the
/// segment (the operation only saw its symptom), else `e`.
pub fn or_truncated(ring: &Ring, e: impl Into<CliError>) -> CliError {
    match ring.check_truncated() {
        Err(t) => CliError::Os(t),
        Ok(()) => e.into(),
    }
}

/// The ring's name (empty for a memfd ring, which has none).
pub fn name_of(ring: &Ring) -> String {
    match ring.segment().kind() {
        SegmentKind::Named(n) => n.as_str().to_owned(),
        SegmentKind::File(p) => p.display().to_string(),
        SegmentKind::Memfd => String::new(),
    }
}

/// Monotonic clock (`CLOCK_MONOTONIC`, system-wide, so comparable between processes) in ns.
#[cfg(unix)]
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Monotonic clock in ns, Windows: the performance counter, system-wide (so comparable between
/// processes) and monotonic.
#[cfg(windows)]
pub fn monotonic_ns() -> u64 {
    use windows_sys::Win32::System::Performance::{
        QueryPerformanceCounter, QueryPerformanceFrequency,
    };
    let (mut count, mut freq) = (0i64, 0i64);
    // SAFETY: both are valid out pointers; the calls cannot fail on Windows XP and later.
    unsafe {
        QueryPerformanceCounter(&raw mut count);
        QueryPerformanceFrequency(&raw mut freq);
    }
    let (count, freq) = (
        u128::from(count.unsigned_abs()),
        u128::from(freq.unsigned_abs()),
    );
    if freq == 0 {
        return 0;
    }
    u64::try_from(count * 1_000_000_000 / freq).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch: the allocator clock ring-os uses for leak ages.
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
