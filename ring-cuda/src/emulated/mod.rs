//! [`EmulatedDevice`]: host memory behind the [`Device`] trait, with the same accounting and
//! error cases as the real device, so every protocol and accounting test runs without a GPU.
//!
//! - Buffers are sealed memfds; an exported handle can be opened by another `EmulatedDevice` in
//!   this process or in another process of the same user (see [`shm`]).
//! - Streams are worker threads, so queued work really runs later than it is enqueued; with
//!   [`EmulatedOptions::op_delay`] a missing event wait becomes visible as stale data.
//! - Events are two counters in a shared memfd: `recorded` (bumped when a record is enqueued)
//!   and `completed` (raised when the stream reaches the record). A stream wait captures
//!   `recorded` when it is enqueued and blocks the stream — not the host — until `completed`
//!   reaches it, which is what `cuStreamWaitEvent` does.

mod ops;
mod shm;
mod stream;

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use self::shm::Region;
use self::stream::{Stream, Timing};
use crate::accounting::{Ledger, Limits};
use crate::error::{found, Error, Result};
use crate::handle::{EventId, ExportKind, Mem, ResourceKind, StreamId};

/// Options of an [`EmulatedDevice`].
#[derive(Clone, Copy, Debug)]
pub struct EmulatedOptions {
    /// Ceilings.
    pub limits: Limits,
    /// Emulated device capacity: allocations past it fail with [`Error::OutOfMemory`].
    pub total_bytes: u64,
    /// Delay before each queued write, fill or copy executes (emulates a slow device).
    pub op_delay: Duration,
    /// A watchdog on device-side event waits. `None` (the default) is what CUDA does: a stream
    /// waits for an event for ever. With `Some(bound)`, a wait past the bound is a sticky
    /// fault that poisons the whole device (a test aid, like a GPU watchdog timeout).
    pub watchdog: Option<Duration>,
    /// Bound on the host waits the driver makes without one (`free` waiting for work queued
    /// on the buffer); past it the call fails with [`Error::Timeout`] and releases nothing.
    pub host_wait: Duration,
    /// Device memory the driver takes once, on a context's first stream, event or open, and
    /// keeps until the device is dropped (CUDA's context and pool allocations): why a memory
    /// baseline must be taken after a warm-up cycle. Counted in [`Device::mem_info`](crate::Device::mem_info) only.
    pub context_bytes: u64,
}

impl Default for EmulatedOptions {
    /// Default limits, 8 GiB of capacity, no delay, no watchdog, 10 s host waits, 2 MiB of
    /// one-time context memory.
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            total_bytes: 8 << 30,
            op_delay: Duration::ZERO,
            watchdog: None,
            host_wait: Duration::from_secs(10),
            context_bytes: 2 << 20,
        }
    }
}

#[derive(Default)]
pub(crate) struct Tables {
    buffers: HashMap<u64, Entry>,
    mappings: HashMap<u64, Entry>,
    events: HashMap<u64, Arc<Region>>,
    streams: HashMap<u64, Arc<Stream>>,
}

/// One of [`Tables`]' maps with its resource kind.
type Table<T> = crate::device::Table<Tables, T>;
/// A buffer's or mapping's memory and the kind it was allocated or exported as.
type Entry = (Arc<Region>, ExportKind);
const BUFFERS: Table<Entry> = Table::new(ResourceKind::Buffer, |t| &mut t.buffers);
const MAPPINGS: Table<Entry> = Table::new(ResourceKind::Mapping, |t| &mut t.mappings);
const EVENTS: Table<Arc<Region>> = Table::new(ResourceKind::Event, |t| &mut t.events);
const STREAMS: Table<Arc<Stream>> = Table::new(ResourceKind::Stream, |t| &mut t.streams);

/// A host-memory device with the [`Device`](crate::Device) semantics of a CUDA GPU.
pub struct EmulatedDevice {
    options: EmulatedOptions,
    /// Set once by the first sticky fault (a watchdog expiry, [`EmulatedDevice::inject_fault`]);
    /// from then on every call fails, as every driver call does after a sticky CUDA error.
    poison: Arc<OnceLock<&'static str>>,
    /// Device memory in use: live buffers (padded, until their last reference goes, however
    /// the ledger counts them) plus the context's one-time memory. `mem_info` reports this.
    resident: Arc<AtomicU64>,
    /// Whether the context's one-time memory was taken.
    warm: std::sync::Once,
    ledger: Ledger,
    next_id: AtomicU64,
    tables: Mutex<Tables>,
    /// Emulated address reservations of VMM memory (`cuMemAddressReserve`): ranges, bytes.
    reserved: (AtomicU64, AtomicU64),
    /// The VMM release step the next VMM release fails at ([`Self::fail_release_step`]).
    fail_step: Mutex<Option<&'static str>>,
    /// Allocation handles whose release failed: kept (as the driver would keep them) until the
    /// device is dropped.
    stranded: Mutex<Vec<Arc<Region>>>,
}

impl core::fmt::Debug for EmulatedDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EmulatedDevice")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn range(offset: u64, len: u64, size: u64) -> Result<(usize, usize)> {
    match offset.checked_add(len) {
        Some(end) if end <= size => {
            // Both fit in usize: they are at most a mapped length.
            Ok((offset as usize, len as usize))
        }
        _ => Err(Error::OutOfBounds { offset, len, size }),
    }
}

impl EmulatedDevice {
    /// A device with default options.
    #[must_use]
    pub fn new() -> Self {
        Self::with_options(EmulatedOptions::default())
    }

    /// A device with `options`.
    #[must_use]
    pub fn with_options(options: EmulatedOptions) -> Self {
        Self {
            options,
            poison: Arc::new(OnceLock::new()),
            resident: Arc::new(AtomicU64::new(0)),
            warm: std::sync::Once::new(),
            ledger: Ledger::new(options.limits),
            next_id: AtomicU64::new(1),
            tables: Mutex::new(Tables::default()),
            reserved: (AtomicU64::new(0), AtomicU64::new(0)),
            fail_step: Mutex::new(None),
            stranded: Mutex::new(Vec::new()),
        }
    }

    /// Makes the next VMM release — freeing an [`ExportKind::Fd`] buffer or closing a mapping
    /// of one — fail at `call` (`"cuMemUnmap"`, `"cuMemAddressFree"` or `"cuMemRelease"`) with
    /// a driver error, as a driver failing that step would. The release runs the CUDA device's
    /// sequence (every step, even after a failure): a test aid for the partial-release path.
    pub fn fail_release_step(&self, call: &'static str) {
        *self
            .fail_step
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(call);
    }

    /// Emulated address reservations of VMM memory live now: `(ranges, bytes)` (each VMM
    /// buffer and each mapping of one reserves its padded size until its release frees it).
    #[must_use]
    pub fn reserved_address_space(&self) -> (u64, u64) {
        // Relaxed: a statistic.
        (
            self.reserved.0.load(Ordering::Relaxed),
            self.reserved.1.load(Ordering::Relaxed),
        )
    }

    /// Reserves an address range of `bytes` for VMM memory.
    pub(crate) fn reserve(&self, bytes: u64) {
        // Relaxed: a statistic.
        self.reserved.0.fetch_add(1, Ordering::Relaxed);
        self.reserved.1.fetch_add(bytes, Ordering::Relaxed);
    }

    /// One step of a VMM release: fails if it is the injected one.
    fn step(&self, call: &'static str) -> Result<()> {
        let mut f = self
            .fail_step
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *f == Some(call) {
            *f = None;
            // CUDA_ERROR_INVALID_VALUE, what the driver returns for a range it cannot unmap.
            return Err(Error::Driver { call, code: 1 });
        }
        Ok(())
    }

    /// Releases VMM memory `r` (padded to `bytes`) with the CUDA device's sequence
    /// ([`release_vmm`](crate::device::release_vmm)): unmap, free the reservation, release the
    /// handle (the region: the memory goes when its last reference does).
    pub(crate) fn release_vmm(&self, r: Arc<Region>, bytes: u64) -> Result<()> {
        crate::device::release_vmm(
            || self.step("cuMemUnmap"),
            || {
                self.step("cuMemAddressFree")?;
                // Relaxed: a statistic.
                self.reserved.0.fetch_sub(1, Ordering::Relaxed);
                self.reserved.1.fetch_sub(bytes, Ordering::Relaxed);
                Ok(())
            },
            || match self.step("cuMemRelease") {
                Ok(()) => {
                    drop(r);
                    Ok(())
                }
                Err(e) => {
                    self.stranded
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(r);
                    Err(e)
                }
            },
        )
    }

    /// The tables, or the sticky fault if the device is poisoned (every call goes through
    /// here, so every call fails after a fault).
    fn lock(&self) -> Result<MutexGuard<'_, Tables>> {
        self.healthy()?;
        // Table updates are single inserts/removes: a panic cannot leave them half done.
        Ok(self.tables.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn healthy(&self) -> Result<()> {
        self.poison
            .get()
            .map_or(Ok(()), |f| Err(Error::StreamFault(f)))
    }

    /// Enqueues a sticky fault on `stream` (what a kernel touching an illegal address does):
    /// when the stream reaches it, the whole device is poisoned and every later call fails
    /// with [`Error::StreamFault`]. A test aid.
    ///
    /// # Errors
    /// [`Error::UnknownId`], or the fault if the device is already poisoned.
    pub fn inject_fault(&self, stream: StreamId) -> Result<()> {
        self.stream(stream)?.push(stream::Op::Fault)
    }

    fn id(&self) -> u64 {
        // Relaxed: ids only need to be unique.
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn timing(&self) -> Timing {
        Timing {
            op_delay: self.options.op_delay,
            watchdog: self.options.watchdog,
        }
    }

    fn region(&self, mem: Mem) -> Result<Arc<Region>> {
        let t = self.lock()?;
        let (region, _) = match mem {
            Mem::Buffer(b) => found(&t.buffers, ResourceKind::Buffer, b.0),
            Mem::Mapping(m) => found(&t.mappings, ResourceKind::Mapping, m.0),
        }?;
        Ok(region)
    }

    fn event(&self, e: EventId) -> Result<Arc<Region>> {
        found(&self.lock()?.events, ResourceKind::Event, e.0)
    }

    fn stream(&self, s: StreamId) -> Result<Arc<Stream>> {
        found(&self.lock()?.streams, ResourceKind::Stream, s.0)
    }

    /// Refuses a handle that this process exported, as the CUDA driver does
    /// (`CUDA_ERROR_INVALID_CONTEXT`): IPC peers are processes.
    fn not_own(
        &self,
        call: &'static str,
        raw: &[u8; crate::handle::IPC_HANDLE_SIZE],
    ) -> Result<()> {
        if shm::exporter_pid(raw) == shm::own_pid() {
            return Err(Error::Driver { call, code: 201 });
        }
        Ok(())
    }

    fn release(&self, kind: ResourceKind, id: u64) -> Result<()> {
        self.ledger
            .release(kind, id)
            .map(drop)
            .ok_or(Error::UnknownId { kind, id })
    }
}

impl Default for EmulatedDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for EmulatedDevice {
    fn drop(&mut self) {
        let _ = self.ledger.report_leaks();
        // Tables drop after this: streams join their workers (bounded waits), regions unmap.
    }
}
