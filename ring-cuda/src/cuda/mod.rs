//! [`CudaDevice`]: the [`Device`](crate::Device) trait over the CUDA driver API (`cudarc`, loaded at run time).
//!
//! [`probe`] runs first, always: it checks that `libcuda` can be loaded *before* any driver
//! call (cudarc panics when a call is made without the library), then initialises the driver
//! and counts devices, mapping the outcomes to [`Error::NoDriver`] / [`Error::NoDevice`].
//!
//! - Legacy IPC: `cuMemAlloc` + `cuIpcGetMemHandle` / `cuIpcOpenMemHandle` (lazy peer access).
//! - VMM: `cuMemCreate` (POSIX fd handle type) + `cuMemAddressReserve` + `cuMemMap` +
//!   `cuMemSetAccess`; exported with `cuMemExportToShareableHandle`, imported with
//!   `cuMemImportFromShareableHandle` and mapped the same way.
//! - Events: `cuEventCreate(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING)`,
//!   `cuIpcGetEventHandle` / `cuIpcOpenEventHandle`, `cuStreamWaitEvent`.
//! - Streams are `CU_STREAM_NON_BLOCKING`; host waits poll `cuStreamQuery`/`cuEventQuery` under
//!   a deadline instead of blocking in the driver without a bound.

use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use cudarc::driver::sys;

use crate::accounting::{Ledger, Limits};
use crate::error::{found, Error, Result};
use crate::handle::{EventId, ExportKind, Mem, ResourceKind, StreamId};

fn check(call: &'static str, r: sys::CUresult) -> Result<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(Error::NoDevice),
        other => Err(Error::Driver {
            call,
            code: other as u32,
        }),
    }
}

/// Probes the driver once per process: `Ok(device count)`, or [`Error::NoDriver`] (no
/// `libcuda`), [`Error::NoDevice`] (no visible device) or [`Error::Driver`] (`cuInit` failed).
///
/// Safe to call on any machine: no driver call is made unless the library loads.
pub fn probe() -> Result<u32> {
    static PROBE: OnceLock<core::result::Result<u32, (u8, &'static str, u32)>> = OnceLock::new();
    let r = PROBE.get_or_init(|| {
        // SAFETY: loads libcuda with dlopen (running its initialisers) and unloads it; the
        // system's driver library is trusted like any shared library this process links.
        if !unsafe { sys::is_culib_present() } {
            return Err((0, "", 0));
        }
        // SAFETY: the library is present (checked above), so the call does not panic; cuInit
        // takes flags 0 and has no other precondition.
        match check("cuInit", unsafe { sys::cuInit(0) }) {
            Ok(()) => {}
            Err(Error::NoDevice) => return Err((1, "", 0)),
            Err(Error::Driver { call, code }) => return Err((2, call, code)),
            Err(_) => return Err((2, "cuInit", 999)),
        }
        let mut n: c_int = 0;
        // SAFETY: the driver is initialised; `n` is a valid out-pointer.
        match check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) }) {
            Ok(()) if n > 0 => Ok(n.unsigned_abs()),
            Ok(()) | Err(Error::NoDevice) => Err((1, "", 0)),
            Err(Error::Driver { call, code }) => Err((2, call, code)),
            Err(_) => Err((2, "cuDeviceGetCount", 999)),
        }
    });
    match *r {
        Ok(n) => Ok(n),
        Err((0, _, _)) => Err(Error::NoDriver),
        Err((1, _, _)) => Err(Error::NoDevice),
        Err((_, call, code)) => Err(Error::Driver { call, code }),
    }
}

/// A device pointer with the size the driver mapped (VMM sizes are rounded to granularity).
#[derive(Clone, Copy, Debug)]
struct DevMem {
    ptr: sys::CUdeviceptr,
    len: u64,
    /// VMM: the allocation handle and the padded mapped size; `None` for legacy memory.
    vmm: Option<(sys::CUmemGenericAllocationHandle, usize)>,
    kind: ExportKind,
}

#[derive(Default)]
pub(crate) struct Tables {
    buffers: HashMap<u64, DevMem>,
    mappings: HashMap<u64, DevMem>,
    events: HashMap<u64, usize>,
    streams: HashMap<u64, usize>,
}

/// One of [`Tables`]' maps with its resource kind.
type Table<T> = crate::device::Table<Tables, T>;
const BUFFERS: Table<DevMem> = Table::new(ResourceKind::Buffer, |t| &mut t.buffers);
const MAPPINGS: Table<DevMem> = Table::new(ResourceKind::Mapping, |t| &mut t.mappings);
const EVENTS: Table<usize> = Table::new(ResourceKind::Event, |t| &mut t.events);
const STREAMS: Table<usize> = Table::new(ResourceKind::Stream, |t| &mut t.streams);

/// A CUDA GPU behind the [`Device`](crate::Device) trait.
pub struct CudaDevice {
    ordinal: u32,
    dev: sys::CUdevice,
    /// The retained primary context, as an address (driver handles are thread-safe).
    ctx: usize,
    granularity: usize,
    vmm: bool,
    ledger: Ledger,
    next_id: AtomicU64,
    tables: Mutex<Tables>,
}

impl core::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}

fn round_up(len: u64, to: usize) -> Result<usize> {
    let len = usize::try_from(len).map_err(|_| Error::InvalidLength { len })?;
    let to = to.max(1);
    len.div_ceil(to)
        .checked_mul(to)
        .ok_or(Error::InvalidLength { len: len as u64 })
}

fn poll(
    what: &'static str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if ready()? {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(Error::Timeout {
                what,
                after: timeout,
            });
        }
        spins += 1;
        if spins < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

fn not_ready(call: &'static str, r: sys::CUresult) -> Result<bool> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => check(call, other).map(|()| false),
    }
}

impl CudaDevice {
    /// Opens device `ordinal` (retaining its primary context) with `limits`.
    ///
    /// # Errors
    /// [`Error::NoDriver`], [`Error::NoDevice`], [`Error::BadOrdinal`] or a driver error.
    pub fn new(ordinal: u32, limits: Limits) -> Result<Self> {
        let count = probe()?;
        if ordinal >= count {
            return Err(Error::BadOrdinal { ordinal, count });
        }
        let mut dev: sys::CUdevice = 0;
        let ord = c_int::try_from(ordinal).map_err(|_| Error::BadOrdinal { ordinal, count })?;
        // SAFETY: probe() succeeded, so the driver is loaded and initialised; out-pointer valid.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ord) })?;
        let mut ctx: sys::CUcontext = core::ptr::null_mut();
        // SAFETY: `dev` is a valid device; out-pointer valid. Released in Drop.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let mut this = Self {
            ordinal,
            dev,
            ctx: ctx as usize,
            granularity: 2 << 20,
            vmm: false,
            ledger: Ledger::new(limits),
            next_id: AtomicU64::new(1),
            tables: Mutex::new(Tables::default()),
        };
        this.bind()?;
        let attr = |a| {
            let mut v: c_int = 0;
            // SAFETY: valid device and out-pointer; the attribute enum comes from the bindings.
            let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
            check("cuDeviceGetAttribute", r).map(|()| v)
        };
        use sys::CUdevice_attribute as A;
        this.vmm = attr(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)? != 0
            && attr(A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)? != 0;
        if this.vmm {
            let prop = this.vmm_prop();
            let mut g = 0usize;
            // SAFETY: `prop` is a fully initialised allocation property; out-pointer valid.
            check("cuMemGetAllocationGranularity", unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut g,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            })?;
            this.granularity = g.max(1);
        }
        Ok(this)
    }

    /// Whether this device supports VMM export to POSIX file descriptors.
    #[must_use]
    pub const fn supports_fd_export(&self) -> bool {
        self.vmm
    }

    fn vmm_prop(&self) -> sys::CUmemAllocationProp {
        sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes:
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.dev,
            },
            win32HandleMetaData: core::ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        }
    }

    /// Makes the primary context current on the calling thread.
    fn bind(&self) -> Result<()> {
        // SAFETY: `ctx` is the primary context retained in `new` and released only in Drop.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.ctx as sys::CUcontext)
        })
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn id(&self) -> u64 {
        // Relaxed: ids only need to be unique.
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn mem(&self, mem: Mem) -> Result<DevMem> {
        let t = self.lock();
        match mem {
            Mem::Buffer(b) => found(&t.buffers, ResourceKind::Buffer, b.0),
            Mem::Mapping(m) => found(&t.mappings, ResourceKind::Mapping, m.0),
        }
    }

    fn at(&self, mem: Mem, offset: u64, len: u64) -> Result<sys::CUdeviceptr> {
        let m = self.mem(mem)?;
        match offset.checked_add(len) {
            Some(end) if end <= m.len => Ok(m.ptr + offset),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                size: m.len,
            }),
        }
    }

    fn stream(&self, s: StreamId) -> Result<sys::CUstream> {
        Ok(found(&self.lock().streams, ResourceKind::Stream, s.0)? as sys::CUstream)
    }

    fn event(&self, e: EventId) -> Result<sys::CUevent> {
        Ok(found(&self.lock().events, ResourceKind::Event, e.0)? as sys::CUevent)
    }

    /// Reserves an address range for a VMM handle, maps it and grants this device read-write
    /// access; undoes what it did on failure.
    fn map_vmm(
        &self,
        handle: sys::CUmemGenericAllocationHandle,
        padded: usize,
    ) -> Result<sys::CUdeviceptr> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: context bound by the caller; out-pointer valid; size is granularity-aligned.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut ptr, padded, 0, 0, 0)
        })?;
        // SAFETY: `ptr..ptr+padded` was just reserved and `handle` is a live allocation of at
        // least `padded` bytes.
        if let Err(e) = check("cuMemMap", unsafe {
            sys::cuMemMap(ptr, padded, 0, handle, 0)
        }) {
            // SAFETY: releases the reservation made above, which nothing maps.
            unsafe { sys::cuMemAddressFree(ptr, padded) };
            return Err(e);
        }
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.dev,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range is mapped; `desc` is one valid descriptor.
        if let Err(e) = check("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(ptr, padded, &desc, 1)
        }) {
            // SAFETY: undoes the map and reservation above; nothing else uses the range yet.
            unsafe {
                sys::cuMemUnmap(ptr, padded);
                sys::cuMemAddressFree(ptr, padded);
            }
            return Err(e);
        }
        Ok(ptr)
    }

    /// Releases device memory (buffer or mapping) described by `m`. For VMM memory every
    /// step runs even if an earlier one failed (a failed `cuMemUnmap` must not also leak the
    /// address range and the allocation handle); the first failure is reported.
    fn release_mem(&self, m: &DevMem, mapping: bool) -> core::result::Result<(), ops::Failed> {
        match m.vmm {
            // SAFETY (all three): `m` was removed from the tables, so no id refers to it any
            // more; the range was reserved and mapped by `map_vmm` with this size, and the
            // handle came from cuMemCreate/Import. Each call is valid whatever the previous
            // one returned: freeing a reservation whose unmap failed and releasing the handle
            // are both allowed (the driver frees the memory when its last mapping goes).
            Some((handle, padded)) => crate::device::release_vmm(
                || {
                    // SAFETY: see above.
                    let r = unsafe { sys::cuMemUnmap(m.ptr, padded) };
                    check("cuMemUnmap", r)
                },
                || {
                    // SAFETY: see above.
                    let r = unsafe { sys::cuMemAddressFree(m.ptr, padded) };
                    check("cuMemAddressFree", r)
                },
                || {
                    // SAFETY: see above.
                    let r = unsafe { sys::cuMemRelease(handle) };
                    check("cuMemRelease", r)
                },
            )
            .map_err(ops::Failed::Partly),
            None if mapping => {
                // SAFETY: as above; legacy mapping pointers came from cuIpcOpenMemHandle.
                let r = unsafe { sys::cuIpcCloseMemHandle(m.ptr) };
                check("cuIpcCloseMemHandle", r).map_err(ops::Failed::Kept)
            }
            None => {
                // SAFETY: as above; the pointer came from cuMemAlloc.
                let r = unsafe { sys::cuMemFree_v2(m.ptr) };
                check("cuMemFree", r).map_err(ops::Failed::Kept)
            }
        }
    }
}

// SAFETY: the context, stream and event handles stored as addresses are driver objects that
// the CUDA driver API allows any thread to use once the context is current (`bind`).
unsafe impl Send for CudaDevice {}
// SAFETY: as for Send; the tables are behind a Mutex and the ledger is Sync.
unsafe impl Sync for CudaDevice {}

mod ops;

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let _ = self.ledger.report_leaks();
        if self.bind().is_err() {
            return;
        }
        let t = core::mem::take(&mut *self.lock());
        for (_, e) in t.events {
            // SAFETY: the event came from cuEventCreate/cuIpcOpenEventHandle; no id refers to it.
            unsafe { sys::cuEventDestroy_v2(e as sys::CUevent) };
        }
        for (_, s) in t.streams {
            // SAFETY: as for events; cuStreamDestroy lets queued work finish.
            unsafe { sys::cuStreamDestroy_v2(s as sys::CUstream) };
        }
        for (_, m) in t.mappings {
            let _ = self.release_mem(&m, true);
        }
        for (_, b) in t.buffers {
            let _ = self.release_mem(&b, false);
        }
        // SAFETY: balances the retain in `new`.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
    }
}
