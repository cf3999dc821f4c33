//! Removing the segments of queues whose processes all died: `shmring.create_pair` calls
//! [`_sweep_stale_queues`] before it creates a queue, so a queue killed by a signal (its
//! segment left in `/dev/shm`) is removed when the next one starts.
//!
//! The rule is ring-os's `stale` one, the one `ringctl clean` applies: a segment is removed
//! only when no role lock of it is held (creator, producer, consumer: the kernel drops them
//! with their process) and it is a valid ring of ours or a half-created one; the removal is
//! re-checked under every role lock of the file. Only names a queue makes by default
//! (`q-<pid>-<12 hex digits>`, see [`is_queue_name`]) are swept here; `ringctl clean` removes
//! every stale segment.
//!
//! A queue's spill segments (see `spill`) are not rings, so the `stale` rule does not know
//! them: one is removed when its queue's segment is gone or was just removed as stale, and no
//! process holds a role lock of the spill itself (its creator holds one while it writes it, and
//! for as long as the segment stays in its sender's pool, see `spill`),
//! re-checked under all its role locks.

use pyo3::prelude::*;

/// Whether `name` (without the `shmring.` prefix) is one `create_pair` makes when given no
/// name: `q-`, the creating pid in decimal, `-`, 12 lowercase hex digits. (The sweep runs on
/// Unix only.)
#[cfg(unix)]
pub(crate) fn is_queue_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("q-") else {
        return false;
    };
    let Some((pid, tag)) = rest.split_once('-') else {
        return false;
    };
    !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && tag.len() == 12
        && tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Removes stale queue segments from `/dev/shm` for at most about `budget` seconds (the
/// listing, then one removal after another until the budget is spent; one removal is always
/// tried). Returns the names removed and, when `/dev/shm` could not be listed, why; never
/// raises for a sweep failure (a segment that cannot be removed is left alone).
#[pyfunction]
#[pyo3(signature = (budget = 1.0))]
pub(crate) fn _sweep_stale_queues(py: Python<'_>, budget: f64) -> (Vec<String>, Option<String>) {
    let budget = if budget.is_finite() && budget > 0.0 {
        core::time::Duration::from_secs_f64(budget.min(3600.0))
    } else {
        core::time::Duration::ZERO
    };
    py.allow_threads(|| sweep(budget))
}

/// The sweep itself (Unix: named segments live in `/dev/shm`).
#[cfg(unix)]
fn sweep(budget: core::time::Duration) -> (Vec<String>, Option<String>) {
    use ring_os::raw::stale;
    let end = std::time::Instant::now() + budget;
    let listed = match stale::list() {
        Ok(l) => l,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let mut removed = Vec::new();
    let queues: std::collections::HashSet<String> = listed
        .iter()
        .filter(|i| is_queue_name(i.name.as_str()))
        .map(|i| i.name.as_str().to_owned())
        .collect();
    let spills: Vec<String> = listed
        .iter()
        .filter(|i| i.locks == ring_os::raw::lock::Liveness::Dead)
        .filter_map(|i| {
            let q = crate::spill::queue_of(i.name.as_str())?;
            is_queue_name(q).then(|| i.name.as_str().to_owned())
        })
        .collect();
    let candidates = listed
        .into_iter()
        .filter(|i| is_queue_name(i.name.as_str()) && i.is_stale());
    for (n, info) in candidates.enumerate() {
        if n > 0 && std::time::Instant::now() >= end {
            break;
        }
        // `clean_listed` re-checks the candidate under all its role locks before removing it.
        let report = stale::clean_listed(std::path::Path::new(stale::SHM_DIR), vec![info]);
        removed.extend(report.removed.iter().map(|s| s.as_str().to_owned()));
    }
    for spill in spills {
        if std::time::Instant::now() >= end {
            break;
        }
        let queue = crate::spill::queue_of(&spill).unwrap_or_default();
        let orphan = !queues.contains(queue) || removed.iter().any(|r| r == queue);
        if orphan && remove_unheld(&spill) {
            removed.push(spill);
        }
    }
    (removed, None)
}

/// Removes the spill segments of the queue `name` that are left once nobody is in it: called
/// by the queue's `close()` after its endpoint left. Does nothing while a producer or consumer
/// of the ring is alive (the last one to leave cleans up), or when the queue's name is gone
/// (the sweep's business then); a spill is removed only when no role lock of it is held.
/// Returns the names removed.
#[pyfunction]
pub(crate) fn _remove_idle_spills(py: Python<'_>, name: &str) -> Vec<String> {
    py.allow_threads(|| {
        if !queue_is_idle(name) {
            return Vec::new();
        }
        spills_in_dir(name)
            .into_iter()
            .filter(|s| remove_unheld(s))
            .collect()
    })
}

/// Whether the named queue exists and no producer or consumer of it is alive (by their role
/// locks; the creator's does not count).
#[cfg(unix)]
fn queue_is_idle(name: &str) -> bool {
    use ring_os::raw::lock::{Liveness, Role};
    let Some(seg) = crate::spill::open_existing(name) else {
        return false;
    };
    ring_os::raw::stale::ring_participants(&seg).is_ok_and(|ps| {
        ps.iter()
            .all(|p| p.role == Role::Creator || p.liveness == Liveness::Dead)
    })
}

/// Elsewhere spills are not listed (`spills_in_dir`), so there is nothing to sweep: never idle.
#[cfg(not(unix))]
fn queue_is_idle(_name: &str) -> bool {
    false
}

/// The spill names of queue `queue` in `/dev/shm`.
#[cfg(unix)]
fn spills_in_dir(queue: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(ring_os::raw::stale::SHM_DIR) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let file = e.ok()?.file_name();
        let name = file.to_str()?.strip_prefix(ring_os::raw::NAME_PREFIX)?;
        crate::spill::is_spill_of(name, queue).then(|| name.to_owned())
    })
    .collect()
}

/// Windows: no spills are left behind by name.
#[cfg(not(unix))]
fn spills_in_dir(_queue: &str) -> Vec<String> {
    Vec::new()
}

/// Windows: nothing to remove (see `spills_in_dir`).
#[cfg(not(unix))]
fn remove_unheld(_name: &str) -> bool {
    false
}

/// Removes the segment `name` if no process holds any role lock of it (checked by taking them
/// all, as `stale::clean_listed` does); whether it did.
#[cfg(unix)]
fn remove_unheld(name: &str) -> bool {
    let Some(seg) = crate::spill::open_existing(name) else {
        return false;
    };
    match seg.lock_all_roles() {
        // Removes the name only while it names the file just opened and locked.
        Ok(Some(_all)) => seg.unlink().is_ok(),
        _ => false,
    }
}

/// Windows: section objects vanish with their last handle; nothing is left to sweep.
#[cfg(not(unix))]
fn sweep(_budget: core::time::Duration) -> (Vec<String>, Option<String>) {
    (Vec::new(), None)
}
