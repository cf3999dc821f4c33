//! Owner identities: who registered a role, as *diagnostic text only*.
//!
//! An owner id ([`OwnerId`], a non-zero `u64`) is the process id in the low 32 bits and a 32-bit
//! hash of the process's *start time* in the high 32 bits (field 22 of `/proc/<pid>/stat`, clock
//! ticks since boot). ring-core stores it in the producer line, each consumer entry and the
//! header's `creator`, and `ringctl` shows it.
//!
//! It decides nothing. Whether a role is alive is what the kernel says about its role lock
//! ([`crate::raw::lock`]): a pid means nothing in another pid namespace, a zombie leader with live
//! threads looks dead in `/proc`, and `hidepid=2` hides other users' processes. [`seen`] tells
//! what this process can see of an owner id, for messages and `ringctl inspect`.

use std::sync::Mutex;

use ring_core::OwnerId;

#[cfg(unix)]
use rustix::process::{getpid, Pid};

use crate::Error;

pub use crate::liveness::lock::Liveness;

/// What this process can see of the process behind an owner id (diagnostic only: liveness is
/// the role lock's, see [`crate::raw::lock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A process with that pid and start time runs in this pid namespace.
    Running,
    /// No such process here: it exited, is a zombie, its pid was reused, or it runs in another
    /// pid namespace (or is hidden by `hidepid`).
    NotHere,
    /// `/proc` could not tell (unreadable, or no start times on this platform).
    Unknown,
}

/// Packs a pid and a start time into an owner id.
#[must_use]
pub fn pack(pid: u32, start_ticks: u64) -> Option<OwnerId> {
    if pid == 0 {
        return None;
    }
    OwnerId::new(u64::from(pid) | (u64::from(hash_start(start_ticks)) << 32))
}

/// The pid stored in an owner id.
#[must_use]
pub fn pid_of(id: OwnerId) -> u32 {
    // Truncation intended: the pid is the low 32 bits.
    #[allow(clippy::cast_possible_truncation, reason = "low half by construction")]
    let pid = id.get() as u32;
    pid
}

/// The owner id of the running process.
///
/// # Errors
///
/// [`Error::Io`] when `/proc/self/stat` cannot be read or parsed (Linux).
pub fn current() -> Result<OwnerId, Error> {
    /// Cached per pid, so a forked child recomputes its own.
    static CACHE: Mutex<Option<(u32, OwnerId)>> = Mutex::new(None);
    let pid = pid_now();
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((cached_pid, id)) = *cache {
        if cached_pid == pid {
            return Ok(id);
        }
    }
    let start = start_ticks(pid)?.ok_or_else(|| {
        Error::io(
            "read /proc/self/stat",
            std::io::Error::other("own process not in /proc"),
        )
    })?;
    let id = pack(pid, start.unwrap_or(0))
        .ok_or_else(|| Error::io("getpid", std::io::Error::other("pid 0")))?;
    *cache = Some((pid, id));
    Ok(id)
}

/// What this process can see of the process behind `id` (see [`Seen`]). Never decides liveness.
#[must_use]
pub fn seen(id: OwnerId) -> Seen {
    let pid = pid_of(id);
    match start_ticks(pid) {
        Ok(None) => Seen::NotHere,
        Ok(Some(Some(start))) if pack(pid, start) == Some(id) => Seen::Running,
        Ok(Some(Some(_))) => Seen::NotHere,
        Ok(Some(None)) | Err(_) => Seen::Unknown,
    }
}

/// A one-line description of an owner id for messages: `pid 1234 (running here)`.
#[must_use]
pub fn describe(id: OwnerId) -> String {
    let what = match seen(id) {
        Seen::Running => "running here",
        Seen::NotHere => "not visible here",
        Seen::Unknown => "unknown here",
    };
    format!("pid {} ({what})", pid_of(id))
}

/// Where the pid in an owner id names its process, for a viewer who knows whether the role's
/// lock is held ([`pid_place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PidPlace {
    /// A process with that pid and start time runs in this pid namespace.
    Here,
    /// The lock is held, so the owner lives, but not as that pid here: it runs in another pid
    /// namespace (a container), or `hidepid` hides it. The pid means nothing to this viewer.
    OtherNamespace,
    /// The lock is free and no such process runs here.
    Gone,
    /// `/proc` could not tell.
    Unknown,
}

impl PidPlace {
    /// `"here"`, `"another pid namespace"`, `"gone"` or `"unknown"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Here => "here",
            Self::OtherNamespace => "another pid namespace",
            Self::Gone => "gone",
            Self::Unknown => "unknown",
        }
    }
}

/// Where the pid in `id` names its process, given whether the role's lock is held.
#[must_use]
pub fn pid_place(id: OwnerId, alive: bool) -> PidPlace {
    match (seen(id), alive) {
        (Seen::Running, _) => PidPlace::Here,
        (Seen::NotHere, true) => PidPlace::OtherNamespace,
        (Seen::NotHere, false) => PidPlace::Gone,
        (Seen::Unknown, _) => PidPlace::Unknown,
    }
}

/// The owner's pid as a viewer can use it: `pid 1234`, or `pid 3 in another pid namespace`
/// when the role's lock is held by a process this pid namespace does not show as that pid.
#[must_use]
pub fn shown_pid(id: OwnerId, alive: bool) -> String {
    match pid_place(id, alive) {
        PidPlace::OtherNamespace => format!("pid {} in another pid namespace", pid_of(id)),
        _ => format!("pid {}", pid_of(id)),
    }
}

/// This process's id.
#[cfg(unix)]
fn pid_now() -> u32 {
    pid_u32(getpid())
}

/// This process's id.
#[cfg(windows)]
fn pid_now() -> u32 {
    std::process::id()
}

/// A pid as the `u32` this module stores.
#[cfg(unix)]
fn pid_u32(pid: Pid) -> u32 {
    pid.as_raw_nonzero().get().unsigned_abs()
}

/// Mixes a start time into 32 bits (the splitmix64 finalizer, high half).
fn hash_start(ticks: u64) -> u32 {
    let mut z = ticks.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // Truncation intended: the high half of a well-mixed word.
    #[allow(clippy::cast_possible_truncation, reason = "high half")]
    let h = (z >> 32) as u32;
    h
}

/// Reads a process's start time.
///
/// `Ok(None)`: no such live process (missing, zombie or dead). `Ok(Some(None))`: it exists but
/// this platform has no start time. `Err`: `/proc` could not be read or parsed.
#[cfg(target_os = "linux")]
fn start_ticks(pid: u32) -> Result<Option<Option<u64>>, Error> {
    let path = format!("/proc/{pid}/stat");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read /proc/<pid>/stat", e)),
    };
    parse_stat(&text)
        .map(|(state, start)| {
            if matches!(state, 'Z' | 'X' | 'x') {
                None
            } else {
                Some(Some(start))
            }
        })
        .ok_or_else(|| Error::io("parse /proc/<pid>/stat", std::io::Error::other(text)))
}

/// Windows: the process's creation time (100 ns units since 1601) from `GetProcessTimes`;
/// `Ok(None)` when no running process has that id.
#[cfg(windows)]
fn start_ticks(pid: u32) -> Result<Option<Option<u64>>, Error> {
    Ok(crate::windows::sys::process_start(pid).map(Some))
}

/// Reads a process's start time: not available here, so only existence is checked.
#[cfg(all(unix, not(target_os = "linux")))]
fn start_ticks(pid: u32) -> Result<Option<Option<u64>>, Error> {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Ok(None);
    };
    match rustix::process::test_kill_process(pid) {
        Err(rustix::io::Errno::SRCH) => Ok(None),
        _ => Ok(Some(None)),
    }
}

/// Parses the state (field 3) and start time (field 22) of `/proc/<pid>/stat`.
///
/// Field 2 (`comm`) is in parentheses and may itself contain spaces and `)`, so parsing starts
/// after the *last* `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code, reason = "Linux only"))]
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4..=21 come before the start time: skip 18 of them.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// For tests: an owner id whose process is certainly dead (a reaped child's pid with a wrong
/// start time).
#[cfg(test)]
pub(crate) fn dead_owner() -> OwnerId {
    #[cfg(unix)]
    let mut child = std::process::Command::new("true").spawn().unwrap();
    #[cfg(windows)]
    let mut child = std::process::Command::new("cmd")
        .args(["/c", "exit"])
        .spawn()
        .unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pack(pid, 1).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_hostile_comm() {
        let line = "1234 (evil) R 1 2 3) S 1 1 1 1 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 \
                    1000 100 18446744073709551615";
        assert_eq!(parse_stat(line), Some(('S', 987_654)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) R 1 2"), None);
    }

    #[test]
    fn pack_round_trips_pid_and_rejects_zero() {
        let id = pack(4242, 777).unwrap();
        assert_eq!(pid_of(id), 4242);
        assert_ne!(pack(4242, 777), pack(4242, 778), "start time must matter");
        assert_eq!(pack(0, 777), None);
    }

    #[test]
    fn self_is_seen_and_a_reused_pid_is_not() {
        let me = current().unwrap();
        assert_eq!(pid_of(me), pid_now());
        assert_eq!(seen(me), Seen::Running);
        assert!(describe(me).contains("running here"));
        // Same pid, different start time: what PID reuse looks like.
        let impostor = OwnerId::new(me.get() ^ (1 << 40)).unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(seen(impostor), Seen::NotHere);
        }
    }

    #[test]
    #[cfg(unix)]
    fn killed_child_is_not_seen_even_before_reaping() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let id = pack(pid, start_ticks(pid).unwrap().unwrap().unwrap_or(0)).unwrap();
        assert_eq!(seen(id), Seen::Running);
        child.kill().unwrap();
        // Not yet reaped: a zombie must already count as dead.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen(id) == Seen::Running {
            assert!(
                std::time::Instant::now() < deadline,
                "killed child still looks running"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert_eq!(seen(id), Seen::NotHere);
    }
}
