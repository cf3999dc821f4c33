//! `ringctl list` and `ringctl clean`: our rings in /dev/shm and their owners' liveness, and
//! the Python queue's spill segments (`<queue>.s<seq>-<16 hex>`, a message too large for its
//! ring; see `ring_os::raw::stale::spill_queue`), judged by their queue's ring.
//!
//! A file with a spill's name is classified by that name, whatever its bytes: it is removed
//! only when its queue's ring is gone or no process holds any role lock of it, and no process
//! holds a role lock of the spill itself (its creator holds one while it writes it), re-checked
//! under all the spill's role locks. A queue whose ring name was removed while its processes
//! still run (see docs/python.md) cannot be told from a gone one.

use std::path::Path;

use ring_os::raw::owner::Liveness;
use ring_os::raw::stale::{self, Owners, SegmentInfo, SHM_DIR};
use serde::Serialize;

use crate::cli::{CleanArgs, ListArgs};
use crate::error::Result;

/// One listed segment, for JSON (`ringctl list --json` prints an array of these).
#[derive(Debug, Serialize)]
struct Listed {
    /// The name (the file /dev/shm/shmring.NAME).
    name: String,
    /// The file's size.
    bytes: u64,
    /// "ring", or "spill" (a Python queue's message in a segment of its own).
    kind: &'static str,
    /// A ring: `ring_os::raw::stale::SegmentInfo::status` ("live", "stale", "creating", "abandoned",
    /// "unreadable"). A spill: "orphaned" (its queue is gone or all its owners are dead, and
    /// no process holds the spill: `clean` removes it) or "in use".
    status: &'static str,
    /// A ring's participants (a spill: none).
    owners: Vec<ListedOwner>,
    /// Why a ring's owners are unknown; for a spill, what holds it if anything.
    note: Option<String>,
    /// A spill: the queue ring it belongs to (`null` for a ring).
    queue: Option<String>,
    /// A spill: its queue ring's state: "missing" (no such segment), "dead" (no role lock of it
    /// held) or "live" (`null` for a ring).
    queue_status: Option<&'static str>,
}

/// What a spill's queue ring is, by the listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueueState {
    /// No segment of that name.
    Missing,
    /// Listed, and no role lock of it held: every owner dead.
    Dead,
    /// Listed with a role lock held.
    Live,
}

impl QueueState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Dead => "dead",
            Self::Live => "live",
        }
    }

    /// How a person reads it.
    fn describe(self) -> &'static str {
        match self {
            Self::Missing => "its queue's ring is gone",
            Self::Dead => "its queue's owners are all dead",
            Self::Live => "its queue is live",
        }
    }
}

/// The queue of spill `info` and its state in `all` (the whole listing); `None` when `info` is
/// not a spill.
fn spill_of<'a>(info: &'a SegmentInfo, all: &[SegmentInfo]) -> Option<(&'a str, QueueState)> {
    let queue = stale::spill_queue(info.name.as_str())?;
    let state = match all.iter().find(|i| i.name.as_str() == queue) {
        None => QueueState::Missing,
        Some(q) if q.locks == ring_os::raw::lock::Liveness::Dead => QueueState::Dead,
        Some(_) => QueueState::Live,
    };
    Some((queue, state))
}

/// Whether `clean` removes spill `info` whose queue is in `state` (re-checked at removal).
fn spill_orphaned(info: &SegmentInfo, state: QueueState) -> bool {
    state != QueueState::Live && info.locks == ring_os::raw::lock::Liveness::Dead
}

/// One participant of a listed ring: its role, the pid recorded for it (diagnostic) and whether
/// a process holds its role lock.
#[derive(Debug, Serialize)]
struct ListedOwner {
    role: String,
    /// The pid recorded in the owner id (usable only where `pid_namespace` is "here").
    pid: u32,
    /// `ring_os::raw::owner::PidPlace`: "here", "another pid namespace", "gone", "unknown".
    pid_namespace: &'static str,
    alive: bool,
}

/// Our rings in /dev/shm.
fn scan() -> Result<Vec<SegmentInfo>> {
    // Owners come from each ring's header, validated as untrusted input (ring-os).
    Ok(stale::list()?)
}

fn listed(info: &SegmentInfo, all: &[SegmentInfo]) -> Listed {
    if let Some((queue, state)) = spill_of(info, all) {
        let orphaned = spill_orphaned(info, state);
        return Listed {
            name: info.name.as_str().to_owned(),
            bytes: info.len,
            kind: "spill",
            status: if orphaned { "orphaned" } else { "in use" },
            owners: Vec::new(),
            note: (info.locks == ring_os::raw::lock::Liveness::Alive)
                .then(|| "a process holds it (being written)".to_owned()),
            queue: Some(queue.to_owned()),
            queue_status: Some(state.as_str()),
        };
    }
    let (owners, note) = match &info.owners {
        Owners::Known(parts) => (
            parts
                .iter()
                .filter(|p| p.owner != 0)
                .map(|p| {
                    let alive = p.liveness == Liveness::Alive;
                    let id = ring_core::OwnerId::new(p.owner);
                    ListedOwner {
                        role: p.role.to_string(),
                        pid: id.map_or(0, ring_os::raw::owner::pid_of),
                        pid_namespace: id.map_or("unknown", |id| {
                            ring_os::raw::owner::pid_place(id, alive).as_str()
                        }),
                        alive,
                    }
                })
                .collect(),
            None,
        ),
        Owners::HalfCreated(why) | Owners::Unreadable(why) => (Vec::new(), Some(why.clone())),
    };
    let status = info.status();
    Listed {
        name: info.name.as_str().to_owned(),
        bytes: info.len,
        kind: "ring",
        status,
        owners,
        note,
        queue: None,
        queue_status: None,
    }
}

/// Runs `ringctl list`.
pub fn list(args: &ListArgs) -> Result<()> {
    let all = scan()?;
    let rows: Vec<Listed> = all.iter().map(|i| listed(i, &all)).collect();
    if args.json {
        let text = serde_json::to_string(&rows)
            .map_err(|e| crate::error::CliError::Usage(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    if rows.is_empty() {
        println!("no rings in {SHM_DIR}");
        return Ok(());
    }
    let mut t = crate::table::new(&["name", "size", "status", "owners"], &[1]);
    for r in &rows {
        let owners = if let (Some(queue), Some(state)) = (&r.queue, r.queue_status) {
            let held = r
                .note
                .as_ref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default();
            format!("spill of queue {queue} (queue {state}){held}")
        } else if let Some(note) = &r.note {
            note.clone()
        } else {
            r.owners
                .iter()
                .map(|o| {
                    let state = if o.alive { "alive" } else { "dead" };
                    let other = ring_os::raw::owner::PidPlace::OtherNamespace.as_str();
                    let elsewhere = if o.pid_namespace == other {
                        " in another pid namespace"
                    } else {
                        ""
                    };
                    format!("{} pid {}{elsewhere} ({state})", o.role, o.pid)
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        t.add_row([
            r.name.clone(),
            crate::table::bytes(r.bytes),
            r.status.to_string(),
            owners,
        ]);
    }
    print!("{}", crate::table::render(&t));
    Ok(())
}

/// Runs `ringctl clean`.
pub fn clean(args: &CleanArgs) -> Result<()> {
    let all = scan()?;
    let wanted =
        |i: &SegmentInfo| args.names.is_empty() || args.names.iter().any(|n| n == i.name.as_str());
    // Spills are judged by their queue (in the whole listing), rings by the stale rule.
    let mut spills = Vec::new();
    let mut rings = Vec::new();
    for info in all.iter().filter(|i| wanted(i)) {
        match spill_of(info, &all) {
            Some((queue, state)) => spills.push((info.clone(), queue.to_owned(), state)),
            None => rings.push(info.clone()),
        }
    }
    if args.dry_run {
        let mut n = 0;
        for info in &rings {
            if info.is_stale() {
                println!(
                    "would remove {} ({} bytes, {}): no role lock is held",
                    info.name.as_str(),
                    info.len,
                    info.status()
                );
                n += 1;
            } else {
                println!("would keep {}: {}", info.name.as_str(), info.status());
            }
        }
        let mut m = 0;
        for (info, queue, state) in &spills {
            let what = format!("spill of queue {queue}: {}", state.describe());
            if spill_orphaned(info, *state) {
                println!(
                    "would remove {} ({} bytes, {what}): no role lock is held",
                    info.name.as_str(),
                    info.len
                );
                m += 1;
            } else if *state == QueueState::Live {
                println!("would keep {}: {what}", info.name.as_str());
            } else {
                println!(
                    "would keep {}: {what}, but a process holds it",
                    info.name.as_str()
                );
            }
        }
        println!("{n} stale ring(s), {m} orphaned spill(s); nothing removed (dry run)");
        return Ok(());
    }
    let report = stale::clean_listed(Path::new(SHM_DIR), rings);
    for name in &report.removed {
        println!("removed {}", name.as_str());
    }
    for (name, why) in &report.kept {
        println!("kept {}: {why}", name.as_str());
    }
    let mut m = 0;
    for (info, queue, state) in &spills {
        let name = info.name.as_str();
        // A queue listed as dead that `clean_listed` just kept has a participant again.
        let revived = report.kept.iter().any(|(k, _)| k.as_str() == queue);
        let what = format!("spill of queue {queue}");
        if *state == QueueState::Live || revived {
            println!("kept {name}: {what}: its queue is live");
            continue;
        }
        match stale::remove_unheld(Path::new(SHM_DIR), info) {
            Ok(()) => {
                println!("removed {name} ({what}: {})", state.describe());
                m += 1;
            }
            Err(why) => println!("kept {name}: {what}: {why}"),
        }
    }
    println!(
        "{} stale ring(s) removed, {m} orphaned spill(s) removed",
        report.removed.len()
    );
    Ok(())
}
