//! `ringctl inspect`: a read-only view of one ring (geometry, producer, consumers, allocator,
//! leaks), validated as untrusted input first.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::time::Duration;

use ring_core::arena::Allocator;
use ring_core::inspect::{consumer_info, producer_info, total_pins, EntryState};
use ring_core::{DeliveryClass, Memory, OwnerId};
use ring_os::raw::lock::Role;
use serde::Serialize;

use crate::cli::InspectArgs;
use crate::error::{CliError, Result};
use crate::ring::{self, Ring};
use crate::table;

/// Leaks listed one by one (the totals count all of them).
const LEAKS_LISTED: usize = 20;

/// An owner id, its pid (diagnostic) and whether a process holds its role lock.
#[derive(Clone, Debug, Serialize)]
pub struct Owner {
    /// The raw owner id (0: none).
    pub id: u64,
    /// The pid in it.
    pub pid: u32,
    /// Whether a process holds the role's lock (the kernel's word, valid across pid namespaces).
    pub alive: bool,
    /// Where `pid` names that process (`ring_os::raw::owner::PidPlace`): "here", "another pid
    /// namespace", "gone" or "unknown".
    pub pid_namespace: &'static str,
}

impl Owner {
    /// Describes the raw owner id recorded for `role`; `None` for 0.
    pub fn of(ring: &Ring, role: Role, id: u64) -> Option<Self> {
        let nz = OwnerId::new(id)?;
        let alive = ring::alive(ring, role, id).unwrap_or(false);
        Some(Self {
            id,
            pid: ring_os::raw::owner::pid_of(nz),
            alive,
            pid_namespace: ring_os::raw::owner::pid_place(nz, alive).as_str(),
        })
    }

    /// `pid N`, or `pid N in another pid namespace` (a pid the viewer cannot use).
    fn pid_text(&self) -> String {
        match OwnerId::new(self.id) {
            Some(id) => ring_os::raw::owner::shown_pid(id, self.alive),
            None => format!("pid {}", self.pid),
        }
    }

    fn describe(owner: Option<&Self>) -> String {
        match owner {
            Some(o) => format!(
                "{} ({})",
                o.pid_text(),
                if o.alive { "alive" } else { "dead" }
            ),
            None => "none".to_owned(),
        }
    }
}

/// One registered consumer entry.
#[derive(Clone, Debug, Serialize)]
struct ConsumerView {
    index: usize,
    state: String,
    class: String,
    owner: Option<Owner>,
    /// As the consumer last published it: a latest-only or skip-on-lag reader that streams
    /// publishes every `ring_core::PROGRESS_EVERY` reads, so `cursor`, `lag`, `received` and
    /// `missed` may be that far behind until it idles.
    cursor: u64,
    lag: u64,
    pins: u32,
    received: u64,
    missed: u64,
}

/// One live allocation.
#[derive(Clone, Debug, Serialize)]
struct LeakView {
    owner: u16,
    handle: u64,
    offset: u64,
    len: u64,
    age_ms: u64,
}

/// The allocator region's state.
#[derive(Clone, Debug, Serialize)]
struct AllocView {
    arena_bytes: u64,
    max_live: u32,
    live: u64,
    live_bytes: u64,
    peak_live: u64,
    allocs: u64,
    frees: u64,
    ceiling_hits: u64,
    out_of_space: u64,
    bad_frees: u64,
    leak_count: u64,
    leak_bytes: u64,
    corrupt_entries: u64,
    leaks: Vec<LeakView>,
}

/// Everything `inspect` shows.
#[derive(Clone, Debug, Serialize)]
struct View {
    name: String,
    mapped_bytes: usize,
    creator: Option<Owner>,
    slots: usize,
    slot_capacity: usize,
    consumer_entries: usize,
    segment_bytes: usize,
    /// A never-stall ring (`ringctl pub --never-stall`): latest and skip pins never make the
    /// producer wait.
    never_stall: bool,
    /// Marked for asymmetric fences (`ringctl pub --asymmetric-fences`): compiler fences per
    /// message, `membarrier(2)` per park.
    asymmetric_fences: bool,
    producer: Option<Owner>,
    head: u64,
    closed: bool,
    epoch: u32,
    writing: u32,
    total_pins: u32,
    consumers: Vec<ConsumerView>,
    allocator: Option<AllocView>,
}

/// Runs `ringctl inspect`.
pub fn run(args: &InspectArgs) -> Result<()> {
    if args.watch && !(args.interval.is_finite() && args.interval > 0.0) {
        return Err(CliError::Usage(
            "--interval must be a positive number of seconds".into(),
        ));
    }
    let name = ring::segment_name(&args.name)?;
    let ring = ring::open(&name)?;
    let clear = args.watch && !args.json && std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        let view = snapshot(&ring)?;
        let text = if args.json {
            serde_json::to_string(&view).map_err(|e| CliError::Usage(e.to_string()))? + "\n"
        } else {
            render(&view)
        };
        if clear {
            // Best effort: a terminal that cannot be cleared just scrolls.
            let _ = console::Term::stdout().clear_screen();
        }
        print!("{text}");
        shown += 1;
        if !args.watch || args.count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
        if !args.json {
            println!();
        }
        std::thread::sleep(Duration::from_secs_f64(args.interval));
    }
}

/// Reads everything once.
fn snapshot(ring: &Ring) -> Result<View> {
    let g = *ring.geometry();
    let p = producer_info(ring);
    let consumers = (0..g.consumers())
        .filter_map(|i| consumer_info(ring, i))
        .filter(|c| c.state != EntryState::Free)
        .map(|c| ConsumerView {
            index: c.index,
            state: match c.state {
                EntryState::Free => "free".into(),
                EntryState::Joining => "joining".into(),
                EntryState::Active => "active".into(),
                EntryState::Reclaiming => "reclaiming".into(),
                EntryState::Corrupt(v) => format!("corrupt({v})"),
            },
            class: match c.class {
                _ if c.is_group => "group".into(),
                Some(DeliveryClass::Gating) if c.group != 0 => "member".into(),
                Some(DeliveryClass::Gating) => "gating".into(),
                Some(DeliveryClass::LatestOnly) => "latest".into(),
                Some(DeliveryClass::SkipOnLag) => "skip".into(),
                None => "invalid".into(),
            },
            owner: Owner::of(ring, Role::Consumer(c.index), c.owner),
            cursor: c.cursor,
            lag: p.head.saturating_sub(c.cursor),
            pins: c.pins,
            received: c.received,
            missed: c.missed,
        })
        .collect();
    // Relaxed: an identity for display.
    let creator = ring
        .header()
        .creator
        .load(core::sync::atomic::Ordering::Relaxed);
    Ok(View {
        name: ring::name_of(ring),
        mapped_bytes: ring.segment().len(),
        creator: Owner::of(ring, Role::Creator, creator),
        slots: g.slots(),
        slot_capacity: g.slot_capacity(),
        consumer_entries: g.consumers(),
        segment_bytes: g.total_len(),
        never_stall: g.config().never_stall,
        asymmetric_fences: g.config().asymmetric_fences,
        producer: Owner::of(ring, Role::Producer, p.owner),
        head: p.head,
        closed: p.closed,
        epoch: p.epoch,
        writing: p.writing,
        total_pins: total_pins(ring),
        consumers,
        allocator: allocator(ring)?,
    })
}

/// The allocator's stats and leak report; `None` when the ring has no allocator.
fn allocator(ring: &Ring) -> Result<Option<AllocView>> {
    if ring.geometry().alloc_region().1 == 0 {
        return Ok(None);
    }
    let alloc = Allocator::attach(ring.alloc_words())?;
    let s = alloc.stats();
    let mut leaks = Vec::new();
    let now_ms = ring::epoch_ms();
    let totals = alloc.leak_report(now_ms, |l| {
        if leaks.len() < LEAKS_LISTED {
            leaks.push(LeakView {
                owner: l.owner,
                handle: l.handle,
                offset: l.offset,
                len: l.len,
                age_ms: l.age,
            });
        }
    });
    Ok(Some(AllocView {
        arena_bytes: alloc.arena_bytes(),
        max_live: alloc.max_live(),
        live: s.live,
        live_bytes: s.live_bytes,
        peak_live: s.peak_live,
        allocs: s.allocs,
        frees: s.frees,
        ceiling_hits: s.ceiling_hits,
        out_of_space: s.out_of_space,
        bad_frees: s.bad_frees,
        leak_count: totals.count,
        leak_bytes: totals.bytes,
        corrupt_entries: totals.corrupt,
        leaks,
    }))
}

/// The human-readable form.
fn render(v: &View) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ring {:?}: {} mapped, created by {}",
        v.name,
        table::bytes(v.mapped_bytes),
        Owner::describe(v.creator.as_ref())
    );
    let _ = writeln!(
        o,
        "geometry: {} slots x {} bytes, {} consumer entries, {} in all{}{}",
        v.slots,
        v.slot_capacity,
        v.consumer_entries,
        table::bytes(v.segment_bytes),
        if v.never_stall {
            ", never-stall (pins of latest and skip readers never hold the producer back)"
        } else {
            ""
        },
        if v.asymmetric_fences {
            ", asymmetric fences (no fence per message; a membarrier per park)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "producer: {}, head {}, {}, epoch {}, writing {} slot(s), {} pin(s) held",
        Owner::describe(v.producer.as_ref()),
        v.head,
        if v.closed { "closed" } else { "open" },
        v.epoch,
        v.writing,
        v.total_pins
    );
    if v.consumers.is_empty() {
        let _ = writeln!(o, "consumers: none registered");
    } else {
        let mut t = table::new(
            &[
                "entry", "state", "class", "pid", "alive", "cursor", "lag", "pins", "received",
                "missed",
            ],
            &[0, 3, 5, 6, 7, 8, 9],
        );
        for c in &v.consumers {
            let (pid, alive) = c.owner.as_ref().map_or(("-".to_owned(), "-"), |w| {
                let other = ring_os::raw::owner::PidPlace::OtherNamespace.as_str();
                let pid = if w.pid_namespace == other {
                    format!("{} (other pid ns)", w.pid)
                } else {
                    w.pid.to_string()
                };
                (pid, if w.alive { "yes" } else { "DEAD" })
            });
            t.add_row([
                c.index.to_string(),
                c.state.clone(),
                c.class.clone(),
                pid,
                alive.to_owned(),
                c.cursor.to_string(),
                c.lag.to_string(),
                c.pins.to_string(),
                c.received.to_string(),
                c.missed.to_string(),
            ]);
        }
        o.push_str(&table::render(&t));
    }
    match &v.allocator {
        None => {
            let _ = writeln!(o, "allocator: none");
        }
        Some(a) => {
            let _ = writeln!(
                o,
                "allocator: {} of {} live ({}, peak {}), {} allocs, {} frees, {} ceiling hits, \
                 {} out of space, {} bad frees, arena {}",
                a.live,
                a.max_live,
                table::bytes(a.live_bytes),
                a.peak_live,
                a.allocs,
                a.frees,
                a.ceiling_hits,
                a.out_of_space,
                a.bad_frees,
                table::bytes(a.arena_bytes)
            );
            let _ = writeln!(
                o,
                "leak report: {} live allocation(s), {}{}",
                a.leak_count,
                table::bytes(a.leak_bytes),
                if a.corrupt_entries > 0 {
                    format!(", {} corrupt entries skipped", a.corrupt_entries)
                } else {
                    String::new()
                }
            );
            for l in &a.leaks {
                let _ = writeln!(
                    o,
                    "  owner {} handle {:#x} offset {} len {} age {}",
                    l.owner,
                    l.handle,
                    l.offset,
                    l.len,
                    table::duration(Duration::from_millis(l.age_ms))
                );
            }
        }
    }
    o
}
