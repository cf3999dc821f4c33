//! Accounting of device resources: ceilings, per-owner live/peak counters, leak reports.
//!
//! Every [`Device`](crate::Device) charges each buffer, mapping, event and stream it creates to
//! an [`Owner`] here *before* asking the driver for it, and releases the charge when the
//! resource is released. Ceilings are checked at charge time, so a runaway producer gets a clear
//! [`Error::BytesCeiling`]/[`Error::CountCeiling`] instead of exhausting the GPU (the RPC side
//! channel that walked into a 4094-allocation wall is the cautionary tale in the design brief).
//! What is still live when the device is dropped is reported — owner, kind, size and age — through
//! the leak hook (stderr by default) and then released.

use core::fmt;
use core::time::Duration;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::handle::{ExportKind, Owner, ResourceKind};

/// The granularity the driver rounds big `cuMemAlloc` allocations and VMM allocations to on
/// every current NVIDIA GPU (a large page; `cuMemGetAllocationGranularity` reports it for VMM).
pub const LARGE_PAGE: u64 = 2 << 20;

/// The bytes the driver really takes for a buffer of `len` bytes allocated for `kind`, which
/// is what the ledger charges (`None` on overflow).
///
/// - VMM (`cuMemCreate`): the size must be a multiple of the allocation granularity
///   (`cuMemGetAllocationGranularity`, 2 MiB on current GPUs), so a 4 KiB buffer takes 2 MiB.
/// - Legacy (`cuMemAlloc`): the API documents only the alignment (suitable for any type, at
///   least 256 bytes), but the driver backs allocations of a large page or more with whole
///   2 MiB pages, so an NV12 1080p frame (3,110,400 bytes) takes 4 MiB. Smaller allocations
///   are sub-allocated from shared 2 MiB pages; they are charged at 512-byte multiples, an
///   estimate that at least never under-counts the documented alignment. Charging big
///   buffers this way makes the ledger's bytes comparable with `cuMemGetInfo`.
#[must_use]
pub fn padded_len(len: u64, kind: ExportKind, vmm_granularity: u64) -> Option<u64> {
    let to = match kind {
        ExportKind::Fd => vmm_granularity.max(1),
        ExportKind::Ipc if len >= LARGE_PAGE / 2 => LARGE_PAGE,
        ExportKind::Ipc => 512,
    };
    len.checked_next_multiple_of(to)
}

/// Ceilings enforced at allocation time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most device bytes this device may hold in live buffers.
    pub max_bytes: u64,
    /// Most live buffers.
    pub max_buffers: u32,
    /// Most live opened mappings.
    pub max_mappings: u32,
    /// Most bytes in live opened mappings (what the opener maps into its address space).
    pub max_mapped_bytes: u64,
    /// Most live events (created plus opened).
    pub max_events: u32,
}

impl Default for Limits {
    /// 4 GiB, 4094 buffers, 4094 mappings, 16 GiB mapped, 16384 events.
    fn default() -> Self {
        Self {
            max_bytes: 4 << 30,
            max_buffers: 4094,
            max_mappings: 4094,
            max_mapped_bytes: 16 << 30,
            max_events: 16384,
        }
    }
}

/// Counters for one kind of resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful acquisitions (alloc, open, create).
    pub acquired: u64,
    /// Releases (free, close, destroy).
    pub released: u64,
    /// Live now.
    pub live: u32,
    /// Highest `live` seen.
    pub peak: u32,
    /// Bytes live now (buffers and mappings; 0 for events and streams).
    pub live_bytes: u64,
    /// Highest `live_bytes` seen.
    pub peak_bytes: u64,
    /// Requests refused by a ceiling.
    pub ceiling_hits: u64,
    /// Releases that failed part-way (a VMM unmap that failed while the address range and the
    /// handle were still released): the resource is gone from the device's tables but stays
    /// live here, marked in the [`LeakReport`] with the failed call.
    pub failed_releases: u64,
}

impl Counters {
    fn charge(&mut self, bytes: u64) {
        self.live = self.live.saturating_add(1);
        self.peak = self.peak.max(self.live);
        self.live_bytes = self.live_bytes.saturating_add(bytes);
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
    }

    fn uncharge(&mut self, bytes: u64) {
        self.live = self.live.saturating_sub(1);
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
    }
}

/// Counters of one owner (or of the whole device), one [`Counters`] per [`ResourceKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerStats {
    /// Device buffers.
    pub buffers: Counters,
    /// Opened IPC/VMM mappings.
    pub mappings: Counters,
    /// Events.
    pub events: Counters,
    /// Streams.
    pub streams: Counters,
}

impl OwnerStats {
    fn get_mut(&mut self, kind: ResourceKind) -> &mut Counters {
        match kind {
            ResourceKind::Buffer => &mut self.buffers,
            ResourceKind::Mapping => &mut self.mappings,
            ResourceKind::Event => &mut self.events,
            ResourceKind::Stream => &mut self.streams,
        }
    }

    /// The counters of one kind.
    #[must_use]
    pub const fn get(&self, kind: ResourceKind) -> &Counters {
        match kind {
            ResourceKind::Buffer => &self.buffers,
            ResourceKind::Mapping => &self.mappings,
            ResourceKind::Event => &self.events,
            ResourceKind::Stream => &self.streams,
        }
    }

    /// Live resources of every kind.
    #[must_use]
    pub const fn live_total(&self) -> u64 {
        self.buffers.live as u64
            + self.mappings.live as u64
            + self.events.live as u64
            + self.streams.live as u64
    }
}

/// One resource still live: an entry of a [`LeakReport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leak {
    /// Kind of resource.
    pub kind: ResourceKind,
    /// The device's raw id for it.
    pub id: u64,
    /// Who it is charged to.
    pub owner: Owner,
    /// Its size in bytes (0 for events and streams).
    pub bytes: u64,
    /// How long it has been live.
    pub age: Duration,
    /// The driver call that failed while releasing it (see [`Counters::failed_releases`]);
    /// `None` for a resource nobody tried to release.
    pub release_failed: Option<&'static str>,
}

/// Every resource still live on a device, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeakReport {
    /// The live resources.
    pub leaks: Vec<Leak>,
}

impl LeakReport {
    /// Whether nothing is live.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.leaks.is_empty()
    }

    /// Total bytes of the live resources.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.leaks.iter().map(|l| l.bytes).sum()
    }
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} live device resources ({} bytes):",
            self.leaks.len(),
            self.bytes()
        )?;
        for l in &self.leaks {
            write!(
                f,
                "  {} id {} of {}: {} bytes, live for {:.3?}",
                l.kind, l.id, l.owner, l.bytes, l.age
            )?;
            match l.release_failed {
                Some(call) => writeln!(f, " (release failed in {call})")?,
                None => writeln!(f)?,
            }
        }
        Ok(())
    }
}

/// Called with the leak report of a device dropped with live resources.
pub type LeakHook = Box<dyn Fn(&LeakReport) + Send + Sync>;

struct LiveEntry {
    owner: Owner,
    bytes: u64,
    since: Instant,
    failed: Option<&'static str>,
}

struct Inner {
    limits: Limits,
    totals: OwnerStats,
    owners: BTreeMap<Owner, OwnerStats>,
    live: HashMap<(ResourceKind, u64), LiveEntry>,
}

impl Inner {
    /// Applies `update` to `kind`'s counters of the device and of `owner`: every count is kept
    /// twice, in total and per owner.
    fn count(&mut self, kind: ResourceKind, owner: Owner, update: impl Fn(&mut Counters)) {
        update(self.totals.get_mut(kind));
        update(self.owners.entry(owner).or_default().get_mut(kind));
    }
}

/// The accounting book of one device.
pub struct Ledger {
    inner: Mutex<Inner>,
    hook: Mutex<Option<LeakHook>>,
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("totals", &self.totals())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// A ledger enforcing `limits`.
    #[must_use]
    pub fn new(limits: Limits) -> Self {
        Self {
            inner: Mutex::new(Inner {
                limits,
                totals: OwnerStats::default(),
                owners: BTreeMap::new(),
                live: HashMap::new(),
            }),
            hook: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves counters that are still consistent (every
        // update is a few saturating additions), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ceilings in force.
    #[must_use]
    pub fn limits(&self) -> Limits {
        self.lock().limits
    }

    /// Replaces the ceilings (already-live resources are not affected).
    pub fn set_limits(&self, limits: Limits) {
        self.lock().limits = limits;
    }

    /// Replaces the hook called with the report of a device dropped with live resources
    /// (default: print it to stderr).
    pub fn set_leak_hook(&self, hook: LeakHook) {
        *self.hook.lock().unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    /// Checks the ceilings and charges one resource of `kind` and `bytes` to `owner`. Pair with
    /// [`Ledger::track`] once the driver has produced the resource, or [`Ledger::cancel`] if it
    /// failed.
    pub(crate) fn charge(&self, kind: ResourceKind, owner: Owner, bytes: u64) -> Result<()> {
        let mut g = self.lock();
        let limits = g.limits;
        let total = *g.totals.get(kind);
        let bytes_over = |limit: u64| {
            total
                .live_bytes
                .checked_add(bytes)
                .is_none_or(|b| b > limit)
                .then_some(Error::BytesCeiling {
                    kind,
                    requested: bytes,
                    live: total.live_bytes,
                    limit,
                })
        };
        let count_over = |limit: u32| {
            (total.live >= limit).then_some(Error::CountCeiling {
                kind,
                live: total.live,
                limit,
            })
        };
        let refuse = match kind {
            ResourceKind::Buffer => {
                count_over(limits.max_buffers).or_else(|| bytes_over(limits.max_bytes))
            }
            ResourceKind::Mapping => {
                count_over(limits.max_mappings).or_else(|| bytes_over(limits.max_mapped_bytes))
            }
            ResourceKind::Event => count_over(limits.max_events),
            ResourceKind::Stream => None,
        };
        if let Some(e) = refuse {
            g.count(kind, owner, |c| c.ceiling_hits += 1);
            return Err(e);
        }
        g.count(kind, owner, |c| c.charge(bytes));
        Ok(())
    }

    /// Undoes a [`Ledger::charge`] whose resource the driver failed to produce.
    pub(crate) fn cancel(&self, kind: ResourceKind, owner: Owner, bytes: u64) {
        self.lock().count(kind, owner, |c| c.uncharge(bytes));
    }

    /// Charges one resource of `kind`, runs `make`, and tracks the resource under the id it
    /// returns; if `make` fails the charge is cancelled. The one acquisition path of every
    /// device, so a ceiling and its rollback cannot drift apart between them.
    pub(crate) fn admit(
        &self,
        kind: ResourceKind,
        owner: Owner,
        bytes: u64,
        make: impl FnOnce() -> Result<u64>,
    ) -> Result<u64> {
        self.charge(kind, owner, bytes)?;
        match make() {
            Ok(id) => {
                self.track(kind, id, owner, bytes);
                Ok(id)
            }
            Err(e) => {
                self.cancel(kind, owner, bytes);
                Err(e)
            }
        }
    }

    /// Records the resource charged by the last [`Ledger::charge`] under its id.
    pub(crate) fn track(&self, kind: ResourceKind, id: u64, owner: Owner, bytes: u64) {
        let mut g = self.lock();
        g.count(kind, owner, |c| c.acquired += 1);
        g.live.insert(
            (kind, id),
            LiveEntry {
                owner,
                bytes,
                since: Instant::now(),
                failed: None,
            },
        );
    }

    /// Marks a tracked resource whose release failed part-way (see
    /// [`Counters::failed_releases`]): it stays live, and the leak report names `error`'s call.
    pub(crate) fn mark_failed(&self, kind: ResourceKind, id: u64, error: &Error) {
        let call = match error {
            Error::Driver { call, .. } => call,
            _ => "release",
        };
        let mut g = self.lock();
        let Some(e) = g.live.get_mut(&(kind, id)) else {
            return;
        };
        if e.failed.replace(call).is_some() {
            return;
        }
        let owner = e.owner;
        g.count(kind, owner, |c| c.failed_releases += 1);
    }

    /// Releases a tracked resource; `None` if the id is not live (double release).
    pub(crate) fn release(&self, kind: ResourceKind, id: u64) -> Option<(Owner, u64)> {
        let mut g = self.lock();
        let e = g.live.remove(&(kind, id))?;
        g.count(kind, e.owner, |c| {
            c.uncharge(e.bytes);
            c.released += 1;
        });
        Some((e.owner, e.bytes))
    }

    /// Counters summed over all owners.
    #[must_use]
    pub fn totals(&self) -> OwnerStats {
        self.lock().totals
    }

    /// Counters of one owner (all zero if it never held anything).
    #[must_use]
    pub fn owner(&self, owner: Owner) -> OwnerStats {
        self.lock().owners.get(&owner).copied().unwrap_or_default()
    }

    /// Counters of every owner seen.
    #[must_use]
    pub fn owners(&self) -> Vec<(Owner, OwnerStats)> {
        self.lock().owners.iter().map(|(o, s)| (*o, *s)).collect()
    }

    /// Everything live now, oldest first.
    #[must_use]
    pub fn leak_report(&self) -> LeakReport {
        let g = self.lock();
        let now = Instant::now();
        let mut leaks: Vec<(Instant, Leak)> = g
            .live
            .iter()
            .map(|(&(kind, id), e)| {
                let age = now.saturating_duration_since(e.since);
                (
                    e.since,
                    Leak {
                        kind,
                        id,
                        owner: e.owner,
                        bytes: e.bytes,
                        age,
                        release_failed: e.failed,
                    },
                )
            })
            .collect();
        leaks.sort_by_key(|(since, l)| (*since, l.id));
        LeakReport {
            leaks: leaks.into_iter().map(|(_, l)| l).collect(),
        }
    }

    /// Calls the leak hook (or prints to stderr) if anything is live; returns the report.
    pub(crate) fn report_leaks(&self) -> LeakReport {
        let report = self.leak_report();
        if !report.is_empty() {
            let hook = self.hook.lock().unwrap_or_else(PoisonError::into_inner);
            match hook.as_ref() {
                Some(h) => h(&report),
                None => eprintln!("ring-cuda: device dropped with leaks: {report}"),
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_refuse_and_count_hits() {
        let l = Ledger::new(Limits {
            max_bytes: 100,
            max_buffers: 2,
            ..Limits::default()
        });
        let o = Owner(7);
        l.charge(ResourceKind::Buffer, o, 60).unwrap();
        l.track(ResourceKind::Buffer, 1, o, 60);
        assert!(matches!(
            l.charge(ResourceKind::Buffer, o, 41),
            Err(Error::BytesCeiling {
                kind: ResourceKind::Buffer,
                requested: 41,
                live: 60,
                limit: 100
            })
        ));
        l.charge(ResourceKind::Buffer, o, 40).unwrap();
        l.track(ResourceKind::Buffer, 2, o, 40);
        assert!(matches!(
            l.charge(ResourceKind::Buffer, o, 0),
            Err(Error::CountCeiling {
                live: 2,
                limit: 2,
                ..
            })
        ));
        let s = l.owner(o).buffers;
        assert_eq!(
            (s.live, s.peak, s.live_bytes, s.ceiling_hits),
            (2, 2, 100, 2)
        );
        assert_eq!(l.release(ResourceKind::Buffer, 1), Some((o, 60)));
        assert_eq!(
            l.release(ResourceKind::Buffer, 1),
            None,
            "double release is refused"
        );
        let s = l.owner(o).buffers;
        assert_eq!(
            (s.live, s.peak, s.live_bytes, s.peak_bytes),
            (1, 2, 40, 100)
        );
        let report = l.leak_report();
        assert_eq!(report.leaks.len(), 1);
        assert_eq!((report.leaks[0].id, report.leaks[0].bytes), (2, 40));
        assert!(report.to_string().contains("owner#0x7"));
    }

    #[test]
    fn charges_are_padded_as_the_driver_pads() {
        let g = LARGE_PAGE;
        assert_eq!(padded_len(3_110_400, ExportKind::Ipc, g), Some(4 << 20));
        assert_eq!(padded_len(4096, ExportKind::Fd, g), Some(2 << 20));
        assert_eq!(padded_len(4096, ExportKind::Ipc, g), Some(4096));
        assert_eq!(padded_len(100, ExportKind::Ipc, g), Some(512));
        assert_eq!(padded_len(2 << 20, ExportKind::Ipc, g), Some(2 << 20));
        assert_eq!(padded_len(u64::MAX, ExportKind::Fd, g), None);
    }

    #[test]
    fn mapped_bytes_have_a_ceiling() {
        let l = Ledger::new(Limits {
            max_mapped_bytes: 8 << 20,
            ..Limits::default()
        });
        l.charge(ResourceKind::Mapping, Owner(1), 4 << 20).unwrap();
        l.track(ResourceKind::Mapping, 1, Owner(1), 4 << 20);
        let r = l.charge(ResourceKind::Mapping, Owner(1), 5 << 20);
        assert!(
            matches!(
                r,
                Err(Error::BytesCeiling {
                    kind: ResourceKind::Mapping,
                    limit: 0x80_0000,
                    ..
                })
            ),
            "{r:?}"
        );
        assert_eq!(l.totals().mappings.ceiling_hits, 1);
    }

    #[test]
    fn cancel_undoes_a_charge() {
        let l = Ledger::new(Limits::default());
        l.charge(ResourceKind::Mapping, Owner(1), 10).unwrap();
        l.cancel(ResourceKind::Mapping, Owner(1), 10);
        let t = l.totals().mappings;
        assert_eq!((t.live, t.live_bytes, t.acquired), (0, 0, 0));
    }
}
