//! The [`Device`] implementation of [`CudaDevice`]: one driver call (or a short sequence) per
//! method, each charged to the ledger before it runs.

use core::ffi::{c_int, c_uint, c_void};
use core::time::Duration;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use cudarc::driver::sys;

use super::{check, not_ready, poll, round_up, CudaDevice, DevMem, Table};
use super::{BUFFERS, EVENTS, MAPPINGS, STREAMS};
use crate::accounting::{padded_len, Ledger};
use crate::device::{Admit, Device};
use crate::error::{Error, Result};
use crate::handle::{
    At, BufferId, EventId, ExportKind, IpcEventHandle, IpcMemHandle, MappingId, Mem, MemHandle,
    MemInfo, Owner, StreamId, IPC_HANDLE_SIZE,
};

fn to_raw(bytes: &[core::ffi::c_char; IPC_HANDLE_SIZE]) -> [u8; IPC_HANDLE_SIZE] {
    bytes.map(|b| b as u8)
}

fn from_raw(bytes: &[u8; IPC_HANDLE_SIZE]) -> [core::ffi::c_char; IPC_HANDLE_SIZE] {
    bytes.map(|b| b as core::ffi::c_char)
}

/// How a release failed: nothing was released (the resource is still whole and usable), or
/// part of it was (a VMM mapping whose unmap failed after the rest was released).
pub(super) enum Failed {
    /// Nothing released.
    Kept(Error),
    /// Partly released: the resource cannot be used or released again.
    Partly(Error),
}

/// A release call's result: on failure nothing was released.
fn kept(call: &'static str, r: sys::CUresult) -> core::result::Result<(), Failed> {
    check(call, r).map_err(Failed::Kept)
}

fn usize_len(len: u64) -> Result<usize> {
    usize::try_from(len).map_err(|_| Error::InvalidLength { len })
}

impl Admit for CudaDevice {
    type Tables = super::Tables;

    fn ready(&self) -> Result<()> {
        self.bind()
    }

    fn file<T>(&self, table: &Table<T>, v: T) -> Result<u64> {
        let id = self.id();
        (table.map)(&mut self.lock()).insert(id, v);
        Ok(id)
    }
}

impl CudaDevice {
    /// Releases resource `id` of `kind`: takes it out of its table (so no id names it during
    /// the call), runs the driver call, and only then drops the ledger entry. On failure the
    /// entry stays (the leak report shows it); if nothing was released (`Failed::Kept`), the
    /// resource also goes back into its table, so the caller may retry; if part of it was
    /// (`Failed::Partly`: a VMM release whose unmap failed still freed the range and released
    /// the handle), the entry is marked with the failed call.
    fn retire<T>(
        &self,
        table: Table<T>,
        id: u64,
        driver: impl FnOnce(&T) -> core::result::Result<(), Failed>,
    ) -> Result<()> {
        let Table { kind, map } = table;
        let v = map(&mut self.lock())
            .remove(&id)
            .ok_or(Error::UnknownId { kind, id })?;
        match self.bind().map_err(Failed::Kept).and_then(|()| driver(&v)) {
            Ok(()) => self
                .ledger
                .release(kind, id)
                .map(drop)
                .ok_or(Error::UnknownId { kind, id }),
            Err(Failed::Kept(e)) => {
                map(&mut self.lock()).insert(id, v);
                Err(e)
            }
            // The entry stays (what the failed step kept may still hold device memory), marked
            // with the failure so the leak report says why.
            Err(Failed::Partly(e)) => {
                self.ledger.mark_failed(kind, id, &e);
                Err(e)
            }
        }
    }

    /// Enqueues driver call `call` on `stream` (the context bound): `enqueue` makes it, given
    /// the stream's handle.
    fn enqueue(
        &self,
        stream: StreamId,
        call: &'static str,
        enqueue: impl FnOnce(sys::CUstream) -> sys::CUresult,
    ) -> Result<()> {
        let s = self.stream(stream)?;
        self.bind()?;
        check(call, enqueue(s))
    }

    /// Polls driver query `call` (`query` makes it, the context bound) until it reports the
    /// handle's work done, at most `timeout`; `what` names the wait in a timeout.
    fn poll_done(
        &self,
        what: &'static str,
        call: &'static str,
        timeout: Duration,
        query: impl Fn() -> sys::CUresult,
    ) -> Result<()> {
        self.bind()?;
        poll(what, timeout, || not_ready(call, query()))
    }

    fn alloc_vmm(&self, len: u64) -> Result<DevMem> {
        if !self.vmm {
            return Err(Error::Unsupported("VMM export to POSIX file descriptors"));
        }
        let padded = round_up(len, self.granularity)?;
        let prop = self.vmm_prop();
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: context bound; `prop` fully initialised; size granularity-aligned.
        let r = unsafe { sys::cuMemCreate(&mut handle, padded, &prop, 0) };
        if r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(Error::OutOfMemory { requested: len });
        }
        check("cuMemCreate", r)?;
        match self.map_vmm(handle, padded) {
            Ok(ptr) => Ok(DevMem {
                ptr,
                len,
                vmm: Some((handle, padded)),
                kind: ExportKind::Fd,
            }),
            Err(e) => {
                // SAFETY: the handle was created above and nothing maps it.
                unsafe { sys::cuMemRelease(handle) };
                Err(e)
            }
        }
    }
}

impl Device for CudaDevice {
    fn describe(&self) -> String {
        format!("CUDA device {} (VMM fd export: {})", self.ordinal, self.vmm)
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn alloc(&self, owner: Owner, len: u64, export: ExportKind) -> Result<BufferId> {
        if len == 0 {
            return Err(Error::InvalidLength { len });
        }
        let make = || match export {
            ExportKind::Ipc => {
                let mut ptr: sys::CUdeviceptr = 0;
                // SAFETY: context bound by `acquire`; out-pointer valid.
                let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, usize_len(len)?) };
                if r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                    return Err(Error::OutOfMemory { requested: len });
                }
                check("cuMemAlloc", r).map(|()| DevMem {
                    ptr,
                    len,
                    vmm: None,
                    kind: export,
                })
            }
            ExportKind::Fd => self.alloc_vmm(len),
        };
        let charged =
            padded_len(len, export, self.granularity as u64).ok_or(Error::InvalidLength { len })?;
        self.acquire(BUFFERS, owner, charged, make).map(BufferId)
    }

    fn free(&self, buf: BufferId) -> Result<()> {
        self.retire(BUFFERS, buf.0, |m| self.release_mem(m, false))
    }

    fn export(&self, buf: BufferId, kind: ExportKind) -> Result<MemHandle> {
        let m = self.mem(Mem::Buffer(buf))?;
        if m.kind != kind {
            return Err(Error::InvalidOperation(
                "export kind differs from the kind the buffer was allocated for",
            ));
        }
        self.bind()?;
        match m.vmm {
            None => {
                let mut h = sys::CUipcMemHandle {
                    reserved: [0; IPC_HANDLE_SIZE],
                };
                // SAFETY: `m.ptr` is the base of a live cuMemAlloc allocation; out-pointer valid.
                check("cuIpcGetMemHandle", unsafe {
                    sys::cuIpcGetMemHandle(&mut h, m.ptr)
                })?;
                Ok(MemHandle::Ipc(IpcMemHandle {
                    raw: to_raw(&h.reserved),
                    len: m.len,
                }))
            }
            Some((handle, _)) => {
                let mut fd: c_int = -1;
                // SAFETY: `handle` is live and was created with the POSIX fd handle type; the
                // out-pointer is an int, as that handle type requires.
                check("cuMemExportToShareableHandle", unsafe {
                    sys::cuMemExportToShareableHandle(
                        (&mut fd as *mut c_int).cast::<c_void>(),
                        handle,
                        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                        0,
                    )
                })?;
                if fd < 0 {
                    return Err(Error::Driver {
                        call: "cuMemExportToShareableHandle",
                        code: 999,
                    });
                }
                // SAFETY: the driver just created this descriptor for us; we own it.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                Ok(MemHandle::Fd { fd, len: m.len })
            }
        }
    }

    fn open(&self, owner: Owner, handle: &MemHandle) -> Result<MappingId> {
        let len = handle.len();
        if len == 0 {
            return Err(Error::InvalidHandle("zero length"));
        }
        let make = || match handle {
            MemHandle::Ipc(h) => {
                let mut ptr: sys::CUdeviceptr = 0;
                let raw = sys::CUipcMemHandle {
                    reserved: from_raw(&h.raw),
                };
                // SAFETY: context bound; the handle bytes are untrusted but the driver
                // validates them and fails cleanly; out-pointer valid.
                check("cuIpcOpenMemHandle", unsafe {
                    sys::cuIpcOpenMemHandle_v2(
                        &mut ptr,
                        raw,
                        sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint,
                    )
                })?;
                let (mut base, mut size) = (0, 0usize);
                // SAFETY: `ptr` was just mapped; out-pointers valid.
                let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
                if check("cuMemGetAddressRange", r).is_err() || (size as u64) < len {
                    // SAFETY: undoes the open above.
                    unsafe { sys::cuIpcCloseMemHandle(ptr) };
                    return Err(Error::InvalidHandle(
                        "mapped size is smaller than the handle's length",
                    ));
                }
                Ok(DevMem {
                    ptr,
                    len,
                    vmm: None,
                    kind: ExportKind::Ipc,
                })
            }
            MemHandle::Fd { fd, len } => {
                if !self.vmm {
                    return Err(Error::Unsupported("VMM import from POSIX file descriptors"));
                }
                let padded = round_up(*len, self.granularity)?;
                let mut h: sys::CUmemGenericAllocationHandle = 0;
                // SAFETY: for the POSIX fd handle type the driver takes the descriptor's value
                // cast to a pointer; it does not take ownership of the descriptor.
                check("cuMemImportFromShareableHandle", unsafe {
                    sys::cuMemImportFromShareableHandle(
                        &mut h,
                        fd.as_raw_fd() as isize as *mut c_void,
                        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    )
                })?;
                match self.map_vmm(h, padded) {
                    Ok(ptr) => Ok(DevMem {
                        ptr,
                        len: *len,
                        vmm: Some((h, padded)),
                        kind: ExportKind::Fd,
                    }),
                    Err(e) => {
                        // SAFETY: the imported handle is unmapped; release our reference.
                        unsafe { sys::cuMemRelease(h) };
                        Err(e)
                    }
                }
            }
        };
        let charged = padded_len(len, handle.kind(), self.granularity as u64)
            .ok_or(Error::InvalidHandle("length overflows"))?;
        self.acquire(MAPPINGS, owner, charged, make).map(MappingId)
    }

    fn close(&self, mapping: MappingId) -> Result<()> {
        self.retire(MAPPINGS, mapping.0, |m| self.release_mem(m, true))
    }

    fn size(&self, mem: Mem) -> Result<u64> {
        Ok(self.mem(mem)?.len)
    }

    fn create_stream(&self, owner: Owner) -> Result<StreamId> {
        let make = || {
            let mut s: sys::CUstream = core::ptr::null_mut();
            // SAFETY: context bound; out-pointer valid.
            check("cuStreamCreate", unsafe {
                sys::cuStreamCreate(
                    &mut s,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint,
                )
            })
            .map(|()| s as usize)
        };
        self.acquire(STREAMS, owner, 0, make).map(StreamId)
    }

    fn destroy_stream(&self, stream: StreamId, timeout: Duration) -> Result<()> {
        let synced = self.sync_stream(stream, timeout);
        self.retire(STREAMS, stream.0, |&s| {
            // SAFETY: removed from the table, so no id refers to it; queued work still
            // completes (cuStreamDestroy does not wait for it, nor cancel it).
            let r = unsafe { sys::cuStreamDestroy_v2(s as sys::CUstream) };
            kept("cuStreamDestroy", r)
        })?;
        synced
    }

    fn write(&self, stream: StreamId, dst: Mem, offset: u64, src: &[u8]) -> Result<()> {
        let d = self.at(dst, offset, src.len() as u64)?;
        self.enqueue(stream, "cuMemcpyHtoDAsync", |s| {
            // SAFETY: destination range bounds-checked; `src` is pageable host memory, which
            // the driver stages before returning, so it may be reused as soon as this returns.
            unsafe { sys::cuMemcpyHtoDAsync_v2(d, src.as_ptr().cast(), src.len(), s) }
        })
    }

    fn fill(&self, stream: StreamId, dst: Mem, offset: u64, len: u64, byte: u8) -> Result<()> {
        let (d, n) = (self.at(dst, offset, len)?, usize_len(len)?);
        self.enqueue(stream, "cuMemsetD8Async", |s| {
            // SAFETY: range bounds-checked.
            unsafe { sys::cuMemsetD8Async(d, byte, n, s) }
        })
    }

    fn copy(&self, stream: StreamId, dst: At, src: At, len: u64) -> Result<()> {
        let (d, sp) = (self.at(dst.0, dst.1, len)?, self.at(src.0, src.1, len)?);
        let n = usize_len(len)?;
        self.enqueue(stream, "cuMemcpyDtoDAsync", |s| {
            // SAFETY: both ranges bounds-checked.
            unsafe { sys::cuMemcpyDtoDAsync_v2(d, sp, n, s) }
        })
    }

    fn read(&self, stream: StreamId, src: At, dst: &mut [u8], timeout: Duration) -> Result<()> {
        let sp = self.at(src.0, src.1, dst.len() as u64)?;
        let s = self.stream(stream)?;
        self.sync_stream(stream, timeout)?;
        // SAFETY: range bounds-checked; `dst` is pageable, so the driver returns only once the
        // bytes have arrived; the stream was idle, so this does not block on unbounded work.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), sp, dst.len(), s)
        })?;
        self.sync_stream(stream, timeout)
    }

    fn create_event(&self, owner: Owner) -> Result<EventId> {
        let make = || {
            let mut e: sys::CUevent = core::ptr::null_mut();
            let flags = sys::CUevent_flags::CU_EVENT_INTERPROCESS as c_uint
                | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
            // SAFETY: context bound; out-pointer valid; INTERPROCESS requires DISABLE_TIMING,
            // which is set.
            check("cuEventCreate", unsafe {
                sys::cuEventCreate(&mut e, flags)
            })
            .map(|()| e as usize)
        };
        self.acquire(EVENTS, owner, 0, make).map(EventId)
    }

    fn export_event(&self, event: EventId) -> Result<IpcEventHandle> {
        let e = self.event(event)?;
        self.bind()?;
        let mut h = sys::CUipcEventHandle {
            reserved: [0; IPC_HANDLE_SIZE],
        };
        // SAFETY: `e` is a live interprocess event; out-pointer valid.
        check("cuIpcGetEventHandle", unsafe {
            sys::cuIpcGetEventHandle(&mut h, e)
        })?;
        Ok(IpcEventHandle {
            raw: to_raw(&h.reserved),
        })
    }

    fn open_event(&self, owner: Owner, handle: &IpcEventHandle) -> Result<EventId> {
        let make = || {
            let mut e: sys::CUevent = core::ptr::null_mut();
            let raw = sys::CUipcEventHandle {
                reserved: from_raw(&handle.raw),
            };
            // SAFETY: context bound; untrusted bytes are validated by the driver.
            check("cuIpcOpenEventHandle", unsafe {
                sys::cuIpcOpenEventHandle(&mut e, raw)
            })
            .map(|()| e as usize)
        };
        self.acquire(EVENTS, owner, 0, make).map(EventId)
    }

    fn destroy_event(&self, event: EventId) -> Result<()> {
        self.retire(EVENTS, event.0, |&e| {
            // SAFETY: removed from the table, so no id refers to it.
            let r = unsafe { sys::cuEventDestroy_v2(e as sys::CUevent) };
            kept("cuEventDestroy", r)
        })
    }

    fn record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let (e, s) = (self.event(event)?, self.stream(stream)?);
        self.bind()?;
        // SAFETY: both handles live.
        check("cuEventRecord", unsafe { sys::cuEventRecord(e, s) })
    }

    fn wait_event(&self, stream: StreamId, event: EventId) -> Result<()> {
        let (e, s) = (self.event(event)?, self.stream(stream)?);
        self.bind()?;
        // SAFETY: both handles live; flags 0 (CU_EVENT_WAIT_DEFAULT).
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(s, e, 0)
        })
    }

    fn query(&self, event: EventId) -> Result<bool> {
        let e = self.event(event)?;
        self.bind()?;
        // SAFETY: live handle.
        not_ready("cuEventQuery", unsafe { sys::cuEventQuery(e) })
    }

    fn synchronize(&self, event: EventId, timeout: Duration) -> Result<()> {
        let e = self.event(event)?;
        self.poll_done("an event", "cuEventQuery", timeout, || {
            // SAFETY: a live handle (destroying it from another thread meanwhile is a caller
            // bug that the driver reports as an error).
            unsafe { sys::cuEventQuery(e) }
        })
    }

    fn sync_stream(&self, stream: StreamId, timeout: Duration) -> Result<()> {
        let s = self.stream(stream)?;
        self.poll_done("stream work", "cuStreamQuery", timeout, || {
            // SAFETY: a live handle, as in `synchronize`.
            unsafe { sys::cuStreamQuery(s) }
        })
    }

    fn mem_info(&self) -> Result<MemInfo> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: context bound; out-pointers valid.
        check("cuMemGetInfo", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }
}
