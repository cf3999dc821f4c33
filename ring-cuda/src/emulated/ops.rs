//! The [`Device`] implementation of [`EmulatedDevice`]: bounds and ids checked here, the work
//! itself queued on the stream's worker thread.

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::sync::Arc;

use super::shm::{Region, EVENT_BYTES, EVENT_MAGIC, MEM_MAGIC};
use super::stream::{wait_counter, Op, Stream, COMPLETED, RECORDED};
use super::{range, EmulatedDevice, BUFFERS, EVENTS, MAPPINGS, STREAMS};
use crate::accounting::{padded_len, Ledger, LARGE_PAGE};
use crate::device::{Admit, Device};
use crate::error::{found, taken, Error, Result};
use crate::handle::{
    At, BufferId, EventId, ExportKind, IpcEventHandle, IpcMemHandle, MappingId, Mem, MemHandle,
    MemInfo, Owner, ResourceKind, StreamId,
};

impl Admit for EmulatedDevice {
    type Tables = super::Tables;

    fn before_charge(&self, kind: ResourceKind) {
        if kind != ResourceKind::Buffer {
            // Relaxed: a statistic (see `resident`).
            self.warm.call_once(|| {
                self.resident
                    .fetch_add(self.options.context_bytes, Ordering::Relaxed);
            });
        }
    }

    fn ready(&self) -> Result<()> {
        self.healthy()
    }

    fn file<T>(&self, table: &super::Table<T>, v: T) -> Result<u64> {
        let id = self.id();
        (table.map)(&mut *self.lock()?).insert(id, v);
        Ok(id)
    }
}

impl Device for EmulatedDevice {
    fn describe(&self) -> String {
        format!("emulated device ({} bytes)", self.options.total_bytes)
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn alloc(&self, owner: Owner, len: u64, export: ExportKind) -> Result<BufferId> {
        if len == 0 {
            return Err(Error::InvalidLength { len });
        }
        // Charged as the driver pads it (the memfd itself keeps the asked length: host memory
        // need not pay for the padding).
        let charged = padded_len(len, export, LARGE_PAGE).ok_or(Error::InvalidLength { len })?;
        let total = self.options.total_bytes;
        let make = || {
            // Relaxed: a statistic; a race between two allocations may let both in, as two
            // cuMemAlloc calls racing for the last bytes may.
            if self.resident.load(Ordering::Relaxed) + charged > total {
                return Err(Error::OutOfMemory { requested: len });
            }
            let r = Region::create("mem", len)?.count_in(&self.resident, charged);
            if export == ExportKind::Fd {
                self.reserve(charged);
            }
            Ok((Arc::new(r), export))
        };
        self.acquire(BUFFERS, owner, charged, make).map(BufferId)
    }

    fn free(&self, buf: BufferId) -> Result<()> {
        let (region, kind) = taken(&mut self.lock()?.buffers, ResourceKind::Buffer, buf.0)?;
        // Queued work holds its own references to the region. Like cuMemFree, wait for it to
        // finish (bounded: `host_wait`), so the memfd is closed — and the exported handle
        // stale — on return. Only then does the ledger entry go; on a timeout the buffer goes
        // back into the table, still live and charged, and may be freed again later.
        let start = std::time::Instant::now();
        let mut region = region;
        loop {
            match Arc::try_unwrap(region) {
                Ok(r) if kind == ExportKind::Fd => {
                    let padded = padded_len(r.len(), kind, LARGE_PAGE).unwrap_or(0);
                    return match self.release_vmm(Arc::new(r), padded) {
                        Ok(()) => self.release(ResourceKind::Buffer, buf.0),
                        // Part of it was released: the entry stays, marked (as on CUDA).
                        Err(e) => {
                            self.ledger.mark_failed(ResourceKind::Buffer, buf.0, &e);
                            Err(e)
                        }
                    };
                }
                Ok(r) => {
                    drop(r);
                    return self.release(ResourceKind::Buffer, buf.0);
                }
                Err(r) if start.elapsed() < self.options.host_wait => {
                    region = r;
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(r) => {
                    self.lock()?.buffers.insert(buf.0, (r, kind));
                    return Err(Error::Timeout {
                        what: "work queued on a buffer being freed",
                        after: self.options.host_wait,
                    });
                }
            }
        }
    }

    fn export(&self, buf: BufferId, kind: ExportKind) -> Result<MemHandle> {
        let (r, allocated_as) = found(&self.lock()?.buffers, ResourceKind::Buffer, buf.0)?;
        if allocated_as != kind {
            return Err(Error::InvalidOperation(
                "export kind differs from the kind the buffer was allocated for",
            ));
        }
        Ok(match kind {
            ExportKind::Ipc => MemHandle::Ipc(IpcMemHandle {
                raw: r.handle(MEM_MAGIC),
                len: r.len(),
            }),
            ExportKind::Fd => MemHandle::Fd {
                fd: r.export_fd()?,
                len: r.len(),
            },
        })
    }

    fn open(&self, owner: Owner, handle: &MemHandle) -> Result<MappingId> {
        let charged = padded_len(handle.len(), handle.kind(), LARGE_PAGE)
            .ok_or(Error::InvalidHandle("length overflows"))?;
        let make = || {
            let r = match handle {
                MemHandle::Ipc(h) => {
                    self.not_own("cuIpcOpenMemHandle", &h.raw)?;
                    Region::open_handle(&h.raw, MEM_MAGIC, "mem")?
                }
                MemHandle::Fd { fd, len } => Region::open_fd(fd, *len)?,
            };
            if r.len() != handle.len() {
                return Err(Error::InvalidHandle(
                    "length does not match the exported buffer",
                ));
            }
            if handle.kind() == ExportKind::Fd {
                self.reserve(charged);
            }
            Ok((Arc::new(r), handle.kind()))
        };
        self.acquire(MAPPINGS, owner, charged, make).map(MappingId)
    }

    fn close(&self, mapping: MappingId) -> Result<()> {
        let (r, kind) = taken(&mut self.lock()?.mappings, ResourceKind::Mapping, mapping.0)?;
        if kind == ExportKind::Fd {
            let padded = padded_len(r.len(), kind, LARGE_PAGE).unwrap_or(0);
            if let Err(e) = self.release_vmm(r, padded) {
                // Part of it was released: the entry stays, marked (as on CUDA).
                self.ledger
                    .mark_failed(ResourceKind::Mapping, mapping.0, &e);
                return Err(e);
            }
        }
        self.release(ResourceKind::Mapping, mapping.0)
    }

    fn size(&self, mem: Mem) -> Result<u64> {
        Ok(self.region(mem)?.len())
    }

    fn create_stream(&self, owner: Owner) -> Result<StreamId> {
        let (timing, poison) = (self.timing(), Arc::clone(&self.poison));
        let make = || Stream::spawn(timing, poison).map(Arc::new);
        self.acquire(STREAMS, owner, 0, make).map(StreamId)
    }

    fn destroy_stream(&self, stream: StreamId, timeout: Duration) -> Result<()> {
        let s = self.stream(stream)?;
        let synced = s.sync(timeout);
        self.lock()?.streams.remove(&stream.0);
        self.release(ResourceKind::Stream, stream.0)?;
        synced
    }

    fn write(&self, stream: StreamId, dst: Mem, offset: u64, src: &[u8]) -> Result<()> {
        let r = self.region(dst)?;
        let (offset, _) = range(offset, src.len() as u64, r.len())?;
        self.stream(stream)?.push(Op::Write {
            dst: r,
            offset,
            data: src.to_vec(),
        })
    }

    fn fill(&self, stream: StreamId, dst: Mem, offset: u64, len: u64, byte: u8) -> Result<()> {
        let r = self.region(dst)?;
        let (offset, len) = range(offset, len, r.len())?;
        self.stream(stream)?.push(Op::Fill {
            dst: r,
            offset,
            len,
            byte,
        })
    }

    fn copy(&self, stream: StreamId, dst: At, src: At, len: u64) -> Result<()> {
        let (d, s) = (self.region(dst.0)?, self.region(src.0)?);
        let (dst_offset, len) = range(dst.1, len, d.len())?;
        let (src_offset, _) = range(src.1, len as u64, s.len())?;
        self.stream(stream)?.push(Op::Copy {
            dst: d,
            dst_offset,
            src: s,
            src_offset,
            len,
        })
    }

    fn read(&self, stream: StreamId, src: At, dst: &mut [u8], timeout: Duration) -> Result<()> {
        let r = self.region(src.0)?;
        let (offset, len) = range(src.1, dst.len() as u64, r.len())?;
        let bytes = self.stream(stream)?.read(r, offset, len, timeout)?;
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    fn create_event(&self, owner: Owner) -> Result<EventId> {
        let make = || Region::create("evt", EVENT_BYTES).map(Arc::new);
        self.acquire(EVENTS, owner, 0, make).map(EventId)
    }

    fn export_event(&self, event: EventId) -> Result<IpcEventHandle> {
        Ok(IpcEventHandle {
            raw: self.event(event)?.handle(EVENT_MAGIC),
        })
    }

    fn open_event(&self, owner: Owner, handle: &IpcEventHandle) -> Result<EventId> {
        let make = || {
            self.not_own("cuIpcOpenEventHandle", &handle.raw)?;
            let r = Region::open_handle(&handle.raw, EVENT_MAGIC, "evt")?;
            if r.len() != EVENT_BYTES {
                return Err(Error::InvalidHandle("event region of the wrong size"));
            }
            Ok(Arc::new(r))
        };
        self.acquire(EVENTS, owner, 0, make).map(EventId)
    }

    fn destroy_event(&self, event: EventId) -> Result<()> {
        taken(&mut self.lock()?.events, ResourceKind::Event, event.0)?;
        self.release(ResourceKind::Event, event.0)
    }

    fn record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let (e, s) = (self.event(event)?, self.stream(stream)?);
        // AcqRel: Release publishes this record to a waiter that loads `recorded` with Acquire
        // (`wait_event`, `query`) — in practice the ring's publish already orders it; Acquire
        // keeps concurrent recorders' targets in one order.
        let target = e.counter(RECORDED).fetch_add(1, Ordering::AcqRel) + 1;
        s.push(Op::Record { event: e, target })
    }

    fn wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        let (e, s) = (self.event(event)?, self.stream(stream)?);
        // Acquire: pairs with the AcqRel increment in `record`, so the wait covers every
        // record that happened before this call.
        let target = e.counter(RECORDED).load(Ordering::Acquire);
        s.push(Op::Wait { event: e, target })
    }

    fn query(&self, event: EventId) -> Result<bool> {
        let e = self.event(event)?;
        // Acquire on both: pairs with `record` (recorded) and with the stream's Release
        // fetch_max (completed), so `true` makes the recorded work's writes visible.
        let target = e.counter(RECORDED).load(Ordering::Acquire);
        Ok(e.counter(COMPLETED).load(Ordering::Acquire) >= target)
    }

    fn synchronize(&self, event: EventId, timeout: Duration) -> Result<()> {
        let e = self.event(event)?;
        // Acquire: as in `wait_event`.
        let target = e.counter(RECORDED).load(Ordering::Acquire);
        if wait_counter(&e, target, Some(timeout), || self.poison.get().is_some()) {
            Ok(())
        } else {
            Err(Error::Timeout {
                what: "an event",
                after: timeout,
            })
        }
    }

    fn sync_stream(&self, stream: StreamId, timeout: Duration) -> Result<()> {
        self.stream(stream)?.sync(timeout)
    }

    fn mem_info(&self) -> Result<MemInfo> {
        self.healthy()?;
        // Relaxed: a snapshot, as cuMemGetInfo is.
        let used = self.resident.load(Ordering::Relaxed);
        Ok(MemInfo {
            free: self.options.total_bytes.saturating_sub(used),
            total: self.options.total_bytes,
        })
    }
}
