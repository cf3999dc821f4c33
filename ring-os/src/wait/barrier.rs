//! Asymmetric fences for the two wake-up handshakes (docs/PROTOCOL.md, "Asymmetric fences"):
//! the per-message side ([`light`]) is a compiler fence and the parking side ([`heavy`]) a
//! `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, which runs a full barrier on every CPU that is
//! running a thread of a process registered for it. Together they act as a `SeqCst` fence on
//! each side, as liburcu's and folly's asymmetric barriers do within one process; the global
//! command makes it work between processes.
//!
//! A process is in one of three modes, probed once (and again in a forked child, whose kernel
//! registration this code does not rely on):
//! - [`Mode::Asymmetric`]: it can issue the command and is registered for it. Light fences are
//!   compiler fences, heavy ones the system call (after a `SeqCst` fence).
//! - [`Mode::Full`]: the kernel has no such command (before Linux 4.16, or not Linux, or the
//!   `portable` build). Both are `SeqCst` fences. No process on this kernel can be asymmetric,
//!   so the handshake is exact.
//! - [`Mode::FullNapping`]: the kernel has the command but this process may not run it (a
//!   seccomp filter that answers `EPERM`, say), while a peer in another container may be
//!   asymmetric. Our heavy fence cannot order that peer, so our sleeps are bounded by [`NAP`]:
//!   a wake-up lost to the weak pair costs at most that long, never a hang.

use core::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU8, Ordering};
use core::time::Duration;

/// The longest sleep of a [`Mode::FullNapping`] process (it then re-checks).
pub(crate) const NAP: Duration = Duration::from_millis(1);

/// How this process runs the two fences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `SeqCst` fences on both sides; the handshake is exact (no peer can be asymmetric).
    Full,
    /// `SeqCst` fences on both sides, and sleeps bounded by [`NAP`] (peers may be asymmetric).
    FullNapping,
    /// Compiler fences on the per-message side, `membarrier` on the parking side.
    Asymmetric,
}

/// What the probe's system calls answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    not(all(target_os = "linux", not(ring_portable))),
    allow(
        dead_code,
        reason = "only Linux's probe sees the command run or refused"
    )
)]
pub(crate) enum Issue {
    /// `MEMBARRIER_CMD_GLOBAL_EXPEDITED` ran.
    Ran,
    /// The kernel has no such command (`ENOSYS`, `EINVAL`), or this is not Linux.
    Absent,
    /// The kernel has it but refused this process (any other error: a seccomp filter).
    Refused,
}

impl Mode {
    /// The mode for a probe whose command `issue`d as given and whose registration for the
    /// command succeeded or not. Asymmetric needs both: a process whose light fences are
    /// compiler fences must be reachable by its peers' heavy ones (registered), and its own
    /// heavy fences must reach theirs (the command runs).
    pub(crate) fn decide(issue: Issue, registered: bool) -> Self {
        match (issue, registered) {
            (Issue::Ran, true) => Self::Asymmetric,
            (Issue::Ran | Issue::Refused, _) => Self::FullNapping,
            (Issue::Absent, _) => Self::Full,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Full => 1,
            Self::FullNapping => 2,
            Self::Asymmetric => 3,
        }
    }
}

/// This process's mode: 0 until probed, then [`Mode::code`]. A forked child starts again at 0
/// (`pthread_atfork`), so it registers itself before it runs a light fence as a compiler fence.
static MODE: AtomicU8 = AtomicU8::new(0);

/// This process's mode, probing it on first use.
pub(crate) fn mode() -> Mode {
    // Relaxed: the mode is this process's own decision; a thread that reads a stale 0 probes
    // again, which is idempotent (registration may be repeated).
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Full,
        2 => Mode::FullNapping,
        3 => Mode::Asymmetric,
        _ => probe(),
    }
}

#[cold]
fn probe() -> Mode {
    let mode = sys::probe();
    // Relaxed: see `mode`. Stored after the registration, so no light fence of this process
    // is a compiler fence before the kernel counts the process as registered.
    MODE.store(mode.code(), Ordering::Relaxed);
    mode
}

/// The per-message side: a compiler fence in an asymmetric process, `SeqCst` otherwise.
/// Returns whether it was a full fence.
#[inline(always)]
pub(crate) fn light() -> bool {
    // Relaxed: as in `mode`; only an asymmetric process (registered before it stored 3) skips
    // the hardware fence.
    if MODE.load(Ordering::Relaxed) == 3 {
        compiler_fence(Ordering::SeqCst);
        false
    } else {
        light_full()
    }
}

#[cold]
#[inline(never)]
fn light_full() -> bool {
    // SeqCst: the per-message side of the wake-up handshakes (P9, C10 in docs/PROTOCOL.md);
    // pairs with the parking side's SeqCst fence in `heavy` (W2, W4), ours or a peer's.
    fence(Ordering::SeqCst);
    // Probe now if nobody has: our next light fences may then be light.
    let _ = mode();
    true
}

/// The parking side: a `SeqCst` fence, then in an asymmetric process the global membarrier,
/// after which every registered process's threads have run a full barrier (so their stores
/// before their light fences are visible to our re-check, or they see our store).
pub(crate) fn heavy() {
    // SeqCst: the parking side (W2, W4); pairs with a full light fence (`light_full`) of a
    // peer that is not asymmetric. An asymmetric peer's compiler fence is ordered by the
    // system call below instead.
    fence(Ordering::SeqCst);
    if mode() == Mode::Asymmetric && !sys::global_barrier() {
        // The command ran at the probe and fails now (it cannot, short of a changed seccomp
        // filter): fall back for good. Our light fences become full ones at once; sleeps nap.
        // Relaxed: see `mode`.
        MODE.store(Mode::FullNapping.code(), Ordering::Relaxed);
    }
}

/// Whether this process has mapped a ring marked for asymmetric fences (its waits may then
/// depend on the barrier). Never cleared: a bounded sleep is only slower.
static JOINED: AtomicBool = AtomicBool::new(false);

/// Called for every mapping of a ring marked for asymmetric fences: probes the mode now and
/// makes this process's sleeps bounded ([`nap`]).
pub(crate) fn joined_asymmetric_ring() {
    let _ = mode();
    // Relaxed: a process-local switch read by this process's waits; a wait that started before
    // it was set belongs to a ring opened earlier, which is not asymmetric.
    JOINED.store(true, Ordering::Relaxed);
}

/// The longest sleep of an [`Mode::Asymmetric`] process that mapped a marked ring: the
/// liveness period of ring-os's blocking calls, so a `FutexWait` used directly loses no more
/// to a skipped barrier than they do.
pub(crate) const ASYMMETRIC_NAP: Duration = Duration::from_millis(20);

/// The longest a wait of this process may sleep before it re-checks, where a wake-up can be
/// lost once it mapped a ring marked for asymmetric fences: [`NAP`] in a
/// [`Mode::FullNapping`] process (its heavy fences cannot reach asymmetric peers);
/// [`ASYMMETRIC_NAP`] in an asymmetric one, because the kernel's global command may skip a
/// running thread of a registered process (a peer's, or ours) whose CPU has not switched
/// processes since the kernel's per-CPU copy of the registration went unset (docs/PROTOCOL.md,
/// "What the global command may skip"). `None` (unbounded) otherwise.
pub(crate) fn nap() -> Option<Duration> {
    // Relaxed: see `joined_asymmetric_ring`.
    if !JOINED.load(Ordering::Relaxed) {
        return None;
    }
    match mode() {
        Mode::FullNapping => Some(NAP),
        Mode::Asymmetric => Some(ASYMMETRIC_NAP),
        Mode::Full => None,
    }
}

/// The barrier for rings whose participants are all threads of this process (ring-os's
/// `LocalSegment`): `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, which interrupts every CPU whose
/// current thread belongs to this process.
///
/// Not the global command: that one finds the CPUs to interrupt through a per-CPU copy of the
/// process's registration, which the kernel (6.18 here) clears when a thread of the process
/// exits on that CPU and does not set again when the next thread of the same process comes to
/// it from idle. A thread that then runs there is skipped until the CPU runs another process
/// (`ring-os/tests/membarrier.rs` reproduces it). The private command checks each CPU's current
/// thread itself.
pub(crate) mod private {
    use super::sys;

    /// Registers this process for the private barrier and issues it once; `true` when both
    /// succeeded (the process may then run compiler fences as the light side for memory only
    /// its own threads use).
    pub(crate) fn register() -> bool {
        sys::register_private()
    }

    /// The heavy side for such memory: a `SeqCst` fence, then the private barrier; where that
    /// fails (a forked child whose registration the kernel did not copy, say), the global
    /// non-expedited barrier, which needs no registration (it waits for every CPU to pass a
    /// quiescent state: milliseconds, but exact). `false` when neither ran: the caller then
    /// runs full fences on both sides from now on.
    pub(crate) fn heavy() -> bool {
        // SeqCst: the parking side (W2, W4); pairs with a full light fence of this memory's
        // other threads, and orders our own store before the system call.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        sys::private_barrier() || sys::slow_global_barrier()
    }
}

#[cfg(all(target_os = "linux", not(ring_portable)))]
mod sys {
    use super::{Issue, Mode, MODE};
    use rustix::io::Errno;
    use rustix::thread::{membarrier, MembarrierCommand};
    use std::sync::Once;

    pub(super) fn probe() -> Mode {
        static AT_FORK: Once = Once::new();
        AT_FORK.call_once(|| {
            // SAFETY: `child_reset` is async-signal-safe (one atomic store) and lives for the
            // whole program; registering a handler has no other precondition.
            let _ = unsafe { libc::pthread_atfork(None, None, Some(child_reset)) };
        });
        let issue = match membarrier(MembarrierCommand::GlobalExpedited) {
            Ok(()) => Issue::Ran,
            Err(Errno::NOSYS | Errno::INVAL) => Issue::Absent,
            Err(_) => Issue::Refused,
        };
        let registered =
            issue == Issue::Ran && membarrier(MembarrierCommand::RegisterGlobalExpedited).is_ok();
        Mode::decide(issue, registered)
    }

    /// In a forked child: probe again (and register) before any light fence is light.
    extern "C" fn child_reset() {
        // Relaxed: the child is single-threaded here.
        MODE.store(0, core::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn global_barrier() -> bool {
        membarrier(MembarrierCommand::GlobalExpedited).is_ok()
    }

    pub(super) fn register_private() -> bool {
        membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok() && private_barrier()
    }

    pub(super) fn private_barrier() -> bool {
        membarrier(MembarrierCommand::PrivateExpedited).is_ok()
    }

    pub(super) fn slow_global_barrier() -> bool {
        membarrier(MembarrierCommand::Global).is_ok()
    }
}

#[cfg(not(all(target_os = "linux", not(ring_portable))))]
mod sys {
    use super::{Issue, Mode};

    pub(super) fn probe() -> Mode {
        Mode::decide(Issue::Absent, false)
    }

    pub(super) fn global_barrier() -> bool {
        false
    }

    pub(super) fn register_private() -> bool {
        false
    }

    pub(super) fn private_barrier() -> bool {
        false
    }

    pub(super) fn slow_global_barrier() -> bool {
        false
    }
}

/// Held by the tests of this crate that issue the command or count its interrupts, so that
/// they do not run at the same time (one's calls would interrupt the other's threads).
#[cfg(test)]
pub(crate) static MEMBARRIER_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::{heavy, light, mode, Issue, Mode, MEMBARRIER_TESTS};

    #[test]
    fn barrier_only_a_process_that_both_runs_and_is_registered_for_the_command_is_asymmetric() {
        assert_eq!(Mode::decide(Issue::Ran, true), Mode::Asymmetric);
        // Registered-less: peers' heavy fences would not reach our compiler fences.
        assert_eq!(Mode::decide(Issue::Ran, false), Mode::FullNapping);
        // Refused: our heavy fences cannot reach asymmetric peers, so we nap.
        assert_eq!(Mode::decide(Issue::Refused, false), Mode::FullNapping);
        assert_eq!(Mode::decide(Issue::Refused, true), Mode::FullNapping);
        // Absent: nobody on this kernel is asymmetric; the handshake is exact.
        assert_eq!(Mode::decide(Issue::Absent, false), Mode::Full);
    }

    /// The private barrier and its fallback both run on this machine's kernel (Linux >= 4.14,
    /// no seccomp filter), so a local segment is asymmetric here and its fallback is exact.
    #[cfg(all(target_os = "linux", not(ring_portable)))]
    #[test]
    fn barrier_private_command_and_its_fallback_run_here() {
        let _serial = MEMBARRIER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            super::private::register(),
            "the private barrier cannot be registered"
        );
        assert!(super::private::heavy(), "the private barrier does not run");
        assert!(
            super::sys::slow_global_barrier(),
            "the global barrier does not run"
        );
    }

    /// Once the process mapped a marked ring its sleeps are bounded in every mode that can
    /// lose a wake-up: napping ones by `NAP`, asymmetric ones by `ASYMMETRIC_NAP` (the global
    /// command can skip a thread).
    #[test]
    fn barrier_sleeps_are_bounded_after_joining_a_marked_ring_unless_the_handshake_is_exact() {
        super::joined_asymmetric_ring();
        let expected = match mode() {
            Mode::Full => None,
            Mode::FullNapping => Some(super::NAP),
            Mode::Asymmetric => Some(super::ASYMMETRIC_NAP),
        };
        assert_eq!(super::nap(), expected);
        assert!(super::ASYMMETRIC_NAP <= crate::raw::LIVENESS_PERIOD);
    }

    #[test]
    fn barrier_light_fence_is_full_exactly_when_the_process_is_not_asymmetric() {
        let _serial = MEMBARRIER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        heavy();
        let asymmetric = mode() == Mode::Asymmetric;
        assert_eq!(light(), !asymmetric);
        #[cfg(all(target_os = "linux", not(ring_portable)))]
        {
            // This machine's kernel has the command (Linux >= 4.16) and the tests run
            // without a seccomp filter: the Linux build is asymmetric here.
            assert!(asymmetric, "mode {:?}", mode());
        }
    }
}
