//! The [`Device`] trait: what the device ring needs from a GPU (or its emulation).

use core::time::Duration;
use std::collections::HashMap;

use crate::accounting::Ledger;
use crate::error::Result;
use crate::handle::{
    At, BufferId, EventId, ExportKind, IpcEventHandle, MappingId, Mem, MemHandle, MemInfo, Owner,
    ResourceKind, StreamId,
};

/// A device that holds ring payloads: allocation, copies, IPC export/import and interprocess
/// events.
///
/// Resources are named by ids that the device issues and never reuses; the device keeps the
/// table, so releasing an id twice is a clear [`Error::UnknownId`](crate::Error::UnknownId), and
/// dropping the device releases (and reports, see [`Ledger`]) whatever is left.
///
/// Work on a stream runs in order and asynchronously to the host: `write`, `fill`, `copy`,
/// `record` and `wait_event` only enqueue. Host waits ([`Device::read`], [`Device::synchronize`],
/// [`Device::sync_stream`]) are bounded by a timeout.
pub trait Device: Send + Sync {
    /// A short description (backend, ordinal, name).
    fn describe(&self) -> String;

    /// The accounting book of this device.
    fn ledger(&self) -> &Ledger;

    /// Allocates `len` bytes of device memory, exportable as `export` (legacy IPC memory from
    /// `cuMemAlloc`, or VMM memory from `cuMemCreate`), charged to `owner`.
    fn alloc(&self, owner: Owner, len: u64, export: ExportKind) -> Result<BufferId>;

    /// Frees a buffer. Work still queued on it is waited for first (as `cuMemFree` does).
    fn free(&self, buf: BufferId) -> Result<()>;

    /// Exports a buffer so that another process (or device instance) can open it.
    fn export(&self, buf: BufferId, kind: ExportKind) -> Result<MemHandle>;

    /// Opens another exporter's buffer, charged to `owner`. Costly (milliseconds on a GPU):
    /// open each handle once, see [`MappingCache`](crate::MappingCache).
    fn open(&self, owner: Owner, handle: &MemHandle) -> Result<MappingId>;

    /// Closes an opened mapping.
    fn close(&self, mapping: MappingId) -> Result<()>;

    /// Size in bytes of a buffer or mapping.
    fn size(&self, mem: Mem) -> Result<u64>;

    /// Creates a stream, charged to `owner`.
    fn create_stream(&self, owner: Owner) -> Result<StreamId>;

    /// Destroys a stream after its queued work completes (bounded by `timeout`).
    fn destroy_stream(&self, stream: StreamId, timeout: Duration) -> Result<()>;

    /// Enqueues a host-to-device copy of `src` to `dst` at `offset`. `src` may be reused as soon
    /// as this returns (the bytes are staged, as CUDA does for pageable memory).
    fn write(&self, stream: StreamId, dst: Mem, offset: u64, src: &[u8]) -> Result<()>;

    /// Enqueues a fill of `len` bytes at `offset` with `byte`.
    fn fill(&self, stream: StreamId, dst: Mem, offset: u64, len: u64, byte: u8) -> Result<()>;

    /// Enqueues a device-to-device copy of `len` bytes from `src` to `dst`.
    fn copy(&self, stream: StreamId, dst: At, src: At, len: u64) -> Result<()>;

    /// Copies the device bytes at `src` to `dst` after the work queued on `stream` before it,
    /// and returns when they have arrived (a host sync, bounded by `timeout`).
    fn read(&self, stream: StreamId, src: At, dst: &mut [u8], timeout: Duration) -> Result<()>;

    /// Creates an interprocess event (`CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`),
    /// charged to `owner`.
    fn create_event(&self, owner: Owner) -> Result<EventId>;

    /// Exports an event for another process.
    fn export_event(&self, event: EventId) -> Result<IpcEventHandle>;

    /// Opens another process's event, charged to `owner`.
    fn open_event(&self, owner: Owner, handle: &IpcEventHandle) -> Result<EventId>;

    /// Destroys (or closes) an event.
    fn destroy_event(&self, event: EventId) -> Result<()>;

    /// Enqueues a record of `event`: it completes when the work queued before it on `stream`
    /// has completed.
    fn record(&self, event: EventId, stream: StreamId) -> Result<()>;

    /// Makes `stream` wait, on the device, for the most recent record of `event` (no host sync).
    fn wait_event(&self, stream: StreamId, event: EventId) -> Result<()>;

    /// Whether the most recent record of `event` has completed (true if never recorded).
    fn query(&self, event: EventId) -> Result<bool>;

    /// Waits on the host for the most recent record of `event`, at most `timeout`.
    fn synchronize(&self, event: EventId, timeout: Duration) -> Result<()>;

    /// Waits on the host for all work queued on `stream`, at most `timeout`.
    fn sync_stream(&self, stream: StreamId, timeout: Duration) -> Result<()>;

    /// Free and total device memory.
    fn mem_info(&self) -> Result<MemInfo>;
}

/// Releases VMM memory (a buffer from `cuMemCreate`, or a mapping of an imported one) in the
/// driver's order — unmap the range, free the address reservation, release the allocation
/// handle — running every step even when an earlier one failed: a failed `cuMemUnmap` must not
/// also leak the address range and the handle. Returns the first failure. Both devices release
/// VMM memory through this function, so the emulated device's fault injection
/// ([`EmulatedDevice::fail_release_step`](crate::EmulatedDevice::fail_release_step)) tests the
/// same sequence the CUDA device runs.
pub(crate) fn release_vmm(
    unmap: impl FnOnce() -> Result<()>,
    address_free: impl FnOnce() -> Result<()>,
    release: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let steps = [unmap(), address_free(), release()];
    steps.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

/// One table of a device implementation's resources: their kind (named in errors and in the
/// ledger) and where its map from id to resource lies in the implementation's tables `S`.
pub(crate) struct Table<S, T> {
    /// The kind of resource the table holds.
    pub(crate) kind: ResourceKind,
    /// The map, in `S`.
    pub(crate) map: fn(&mut S) -> &mut HashMap<u64, T>,
}

/// The steps of making a resource that differ between the CUDA and the emulated device; the
/// rest, [`Admit::acquire`], is the same for both.
pub(crate) trait Admit: Device {
    /// The device's resource tables.
    type Tables;

    /// Runs before the charge (the emulated device counts its context's memory then).
    fn before_charge(&self, _kind: ResourceKind) {}

    /// Whether a resource can be made now (CUDA: the context bound; emulated: not faulted).
    fn ready(&self) -> Result<()>;

    /// Files `v` in `table` under a fresh id (ids are never reused); the id.
    fn file<T>(&self, table: &Table<Self::Tables, T>, v: T) -> Result<u64>;

    /// Charges `bytes` of `table`'s kind to `owner`, makes the resource with `make` and files
    /// it; the charge is cancelled if making or filing it fails.
    fn acquire<T>(
        &self,
        table: Table<Self::Tables, T>,
        owner: Owner,
        bytes: u64,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<u64> {
        self.before_charge(table.kind);
        self.ledger().admit(table.kind, owner, bytes, || {
            self.ready()?;
            let v = make()?;
            self.file(&table, v)
        })
    }
}

impl<S, T> Table<S, T> {
    /// The table of `kind` at `map`.
    pub(crate) const fn new(kind: ResourceKind, map: fn(&mut S) -> &mut HashMap<u64, T>) -> Self {
        Self { kind, map }
    }
}
