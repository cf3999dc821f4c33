//! Bounded busy-waiting shared by the polling transports.

use crate::case::Transport;
use crate::BenchError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Longest a single `Run` may take on either side before the peer is declared hung (the bound
/// of every wait a transport makes within one).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Spins between deadline checks (roughly 10 µs).
const SPINS_PER_CHECK: u32 = 512;

/// Deadline checks between yields (see [`set_yield_every`]).
static CHECKS_PER_YIELD: AtomicU32 = AtomicU32::new(1);

/// Sets how often a poller yields its core: every `checks` deadline checks.
///
/// On two cores shared with other work there is no single right answer, so the harness picks per
/// metric (see [`Case::yield_every`](crate::case::Case::yield_every)): a ping-pong (round trip, acquire) keeps its core and
/// yields about once a millisecond, because a yield hands the core to whatever else is runnable
/// for a whole time slice (measured: the floor's median went from ~0.5 µs to ~29 µs with a
/// yield every 10 µs on a loaded machine); a stream or a fan-out yields every ~10 µs, because a
/// producer spinning on a full ring on the consumer's core burns its whole slice (measured:
/// 64-byte throughput went from ~0.25 µs to ~20 µs per message with rare yields).
pub fn set_yield_every(checks: u32) {
    // Relaxed: a tuning knob of this process; nothing is published through it.
    CHECKS_PER_YIELD.store(checks.max(1), Ordering::Relaxed);
}

/// The CPUs this process may run on (empty when the affinity cannot be read).
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(allowed) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| allowed.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Lets the calling process run on any of `cpus`. Returns whether the kernel accepted it.
pub fn set_cpus(cpus: &[usize]) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus
        .iter()
        .filter(|&&c| c < rustix::thread::CpuSet::MAX_CPU)
    {
        set.set(c);
    }
    !cpus.is_empty() && rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// Places the calling process for a run of `transport`: a busy-polling transport gets the
/// process's own core (`cpus[slot % len]`: the parent takes slot 0, child `i` slot `i + 1`), so
/// that a poller and the peer it waits for never share a core and take turns a time slice at a
/// time (measured without pinning: acquire medians of ~1.5 ms instead of µs); a blocking
/// transport may run anywhere, so that a woken sleeper goes to whichever core is free
/// (measured with pinning on a busy machine: 33 MB over `unix` went from ~12 ms to ~90 ms).
pub fn place(transport: Transport, cpus: &[usize], slot: usize) {
    if cpus.len() < 2 {
        return;
    }
    if transport.polls() {
        if let Some(&cpu) = cpus.get(slot % cpus.len()) {
            set_cpus(&[cpu]);
        }
    } else {
        set_cpus(cpus);
    }
}

/// Polls `ready` until it returns `Some`, spinning with `spin_loop` hints, checking `deadline`
/// every `SPINS_PER_CHECK` (512) polls and yielding as [`set_yield_every`] says; fails once
/// `deadline` has passed.
pub fn spin_until<T>(
    deadline: Instant,
    what: &str,
    mut ready: impl FnMut() -> Result<Option<T>, BenchError>,
) -> Result<T, BenchError> {
    // Relaxed: see `set_yield_every`.
    let per_yield = CHECKS_PER_YIELD.load(Ordering::Relaxed);
    let mut spins = 0u32;
    let mut checks = 0u32;
    loop {
        if let Some(v) = ready()? {
            return Ok(v);
        }
        spins = spins.wrapping_add(1);
        if spins % SPINS_PER_CHECK == 0 {
            if Instant::now() > deadline {
                return Err(BenchError::timeout(what));
            }
            checks = checks.wrapping_add(1);
            if checks % per_yield == 0 {
                std::thread::yield_now();
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn returns_value_and_times_out() {
        let mut n = 0;
        let v = spin_until(Instant::now() + Duration::from_secs(5), "n", || {
            n += 1;
            Ok((n == 3).then_some(n))
        });
        assert_eq!(v.unwrap(), 3);
        let t = spin_until::<()>(Instant::now() + Duration::from_millis(20), "never", || {
            Ok(None)
        });
        assert!(matches!(t, Err(BenchError::Timeout { .. })));
    }
}
