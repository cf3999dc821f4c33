//! `ringctl list` and `ringctl clean`: our rings in /dev/shm and their owners' liveness.

use std::path::Path;

use ring_os::owner::Liveness;
use ring_os::stale::{self, Owners, SegmentInfo, SHM_DIR};
use serde::Serialize;

use crate::cli::{CleanArgs, ListArgs};
use crate::error::Result;

/// One listed ring, for JSON.
#[derive(Debug, Serialize)]
struct Listed {
    name: String,
    bytes: u64,
    status: &'static str,
    owners: Vec<ListedOwner>,
    note: Option<String>,
}

/// One participant of a listed ring: its role, the pid recorded for it (diagnostic) and whether
/// a process holds its role lock.
#[derive(Debug, Serialize)]
struct ListedOwner {
    role: String,
    /// The pid recorded in the owner id (usable only where `pid_namespace` is "here").
    pid: u32,
    /// `ring_os::owner::PidPlace`: "here", "another pid namespace", "gone", "unknown".
    pid_namespace: &'static str,
    alive: bool,
}

/// Our rings in /dev/shm.
fn scan() -> Result<Vec<SegmentInfo>> {
    // Owners come from each ring's header, validated as untrusted input (ring-os).
    Ok(stale::list()?)
}

fn listed(info: &SegmentInfo) -> Listed {
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
                        pid: id.map_or(0, ring_os::owner::pid_of),
                        pid_namespace: id.map_or("unknown", |id| {
                            ring_os::owner::pid_place(id, alive).as_str()
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
        status,
        owners,
        note,
    }
}

/// Runs `ringctl list`.
pub fn list(args: &ListArgs) -> Result<()> {
    let rows: Vec<Listed> = scan()?.iter().map(listed).collect();
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
        let owners = if let Some(note) = &r.note {
            note.clone()
        } else {
            r.owners
                .iter()
                .map(|o| {
                    let state = if o.alive { "alive" } else { "dead" };
                    let other = ring_os::owner::PidPlace::OtherNamespace.as_str();
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
    let mut infos = scan()?;
    if !args.names.is_empty() {
        infos.retain(|i| args.names.iter().any(|n| n == i.name.as_str()));
    }
    if args.dry_run {
        let mut n = 0;
        for info in &infos {
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
        println!("{n} stale ring(s); nothing removed (dry run)");
        return Ok(());
    }
    let report = stale::clean_listed(Path::new(SHM_DIR), infos);
    for name in &report.removed {
        println!("removed {}", name.as_str());
    }
    for (name, why) in &report.kept {
        println!("kept {}: {why}", name.as_str());
    }
    println!("{} stale ring(s) removed", report.removed.len());
    Ok(())
}
