//! The ring's in-segment allocator from Python: the owner's [`Allocator`] (`Producer.allocator`)
//! hands out hard-bounded writable [`Block`]s by handle; any process that opened the ring views
//! an allocation read-only and zero-copy by handle ([`Allocations`], `Ring.allocations`).
//!
//! # One mutator
//!
//! ring-core's allocator has exactly one mutator. Here it is the ring's producer: a
//! `Producer` lends its allocator once (`Producer.allocator`), and the queue (`put`) refuses to
//! run on a producer that did (each would otherwise keep its own rover and live count over one
//! region). The ring-os producer lock makes the role unique across processes; an allocator
//! refuses to mutate once its producer is closed (another process may own the role then).
//!
//! # Taking over
//!
//! A new allocator frees every allocation still live in the region: nothing can refer to them
//! any more but a previous owner that has gone (it died mid-call or closed its producer). The
//! count and bytes are reported as `reclaimed` by [`Allocator::inspect`].
//!
//! # Untrusted peer
//!
//! A handle that comes from another process is checked against the entry table
//! (`Allocator::lookup`: index, generation, range) and the resulting range against the arena in
//! this process's mapping ([`crate::queue::Arena::address`]) before a view is made; a view keeps
//! the mapping alive, so no Python object outlives the bytes it points at.
//!
//! # Knowing when a view is gone
//!
//! A view made with `notify=True` records its handle, when the Python object is deallocated
//! (its last reference, and so the last buffer exported from it, is gone), in a list that
//! `take_released()` of the object that made it empties. A reader learns this way, without a
//! finalizer per view and without running Python at that moment, which allocations it may tell
//! the owner it is done with (`shmring.vgi` does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use core::ffi::c_int;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use ring_core::arena::{AllocError, Allocator as Core, MAX_OWNERS};
use ring_os::raw::Mapping;

use crate::copy;
use crate::errors::Fail;
use crate::export::{self, RawView};
use crate::producer::{Producer, View};
use crate::queue::Arena;

/// Milliseconds since the Unix epoch (the allocator's clock for leak ages).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The `shmring` exception for an allocator error.
fn alloc_fail(e: AllocError) -> Fail {
    match e {
        AllocError::LiveCeiling { .. }
        | AllocError::ByteCeiling { .. }
        | AllocError::OutOfSpace { .. } => Fail::new("Full", format!("allocator: {e}")),
        AllocError::DoubleFree { .. }
        | AllocError::ForeignFree { .. }
        | AllocError::InvalidHandle { .. } => Fail::new("InvalidHandle", format!("{e}")),
        AllocError::ZeroSize | AllocError::BadOwner { .. } | AllocError::Overflow { .. } => {
            Fail::new("InvalidConfig", format!("{e}"))
        }
        other => Fail::new("Corrupt", format!("allocator region: {other}")),
    }
}

/// Handles of `notify` views that are gone, oldest first (see the module doc).
type Released = Arc<Mutex<Vec<u64>>>;

/// Takes what `released` holds.
fn take(released: &Released) -> Vec<u64> {
    core::mem::take(&mut *released.lock().unwrap_or_else(PoisonError::into_inner))
}

/// What a block and the allocator that made it share.
#[derive(Debug, Default)]
struct Shared {
    /// Live buffer exports of a writable block (see `export`).
    exports: AtomicUsize,
    /// Set once the allocation is freed: the block exports nothing any more. Relaxed: read and
    /// written with the GIL held (which orders them), as the export count is.
    freed: AtomicBool,
}

/// One allocation seen from Python: a writable block from `Allocator.allocate` (exactly
/// `nbytes`, exports counted: `free` raises `BufferError` while one is alive) or a read-only
/// view from `Allocations.view` (zero-copy; keeps the mapping, not the allocation, alive: the
/// owner frees it when you tell it you are done). Weak-referenceable, so a reader can learn
/// when the last object made from a view is gone (`shmring.vgi` tells the owner then).
#[pyclass(module = "shmring", frozen, weakref)]
pub(crate) struct Block {
    handle: u64,
    addr: usize,
    len: usize,
    readonly: bool,
    shared: Arc<Shared>,
    /// Where a `notify` view records its handle when it is gone.
    released: Option<Released>,
    /// Keeps the bytes mapped while the block (and so any view of it) lives.
    _mapping: Arc<Mapping>,
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Some(r) = &self.released {
            r.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.handle);
        }
    }
}

/// A read-only view of the live allocation `handle` of `arena` (its first `nbytes`, default
/// all of it), checked against the entry table and the mapping.
fn view_of(
    arena: &Arena,
    mapping: &Arc<Mapping>,
    handle: u64,
    nbytes: Option<u64>,
    released: Option<Released>,
) -> PyResult<Block> {
    let a = arena.alloc.lookup(handle).map_err(alloc_fail)?;
    let len = match nbytes {
        None => a.len,
        Some(n) if n <= a.len => n,
        Some(n) => {
            return Err(PyValueError::new_err(format!(
                "{n} bytes asked of a {}-byte allocation",
                a.len
            )))
        }
    };
    let addr = arena.address(&a)?;
    Ok(Block {
        handle,
        addr,
        len: usize::try_from(len).unwrap_or(0),
        readonly: true,
        shared: Arc::new(Shared::default()),
        released,
        _mapping: Arc::clone(mapping),
    })
}

#[pymethods]
impl Block {
    /// The allocation's handle (`generation << 32 | entry`): what the peer views it by.
    #[getter]
    fn handle(&self) -> u64 {
        self.handle
    }

    /// Its length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.len
    }

    /// Whether it is a read-only view.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Copies the bytes of `data` (any contiguous buffer-protocol object) into this writable
    /// block at `offset`; returns where they end. A write that would pass the block's end
    /// raises `ValueError` and writes nothing, as does one into a view or a freed block. Parts
    /// of 4 MiB and more are copied with non-temporal stores on x86_64 (the queue's copy):
    /// the block's lines are not read into the cache first.
    fn write(&self, offset: usize, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        if self.readonly {
            return Err(PyValueError::new_err("a view is read-only"));
        }
        // Relaxed: see `Shared::freed`.
        if self.shared.freed.load(Ordering::Relaxed) {
            return Err(PyBufferError::new_err(
                "this allocation was freed: it takes no writes any more",
            ));
        }
        let src = View::get(data)?;
        let (from, n) = src.raw();
        let end = offset
            .checked_add(n)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{n} bytes at {offset} pass the end of a {}-byte block",
                    self.len
                ))
            })?;
        if n > 0 {
            let dst = self.addr + offset;
            // SAFETY: `from..from + n` is the source view's memory, held until `src` drops
            // after the copy; `dst..dst + n` lies inside the block (checked above), this
            // process's own live allocation (not freed: checked above, and no `free` can run
            // meanwhile: this call holds the GIL throughout) in the mapping `_mapping` keeps
            // alive. Overlapping ranges (a source that is a view of this very block) are
            // copied with `copy`, which allows overlap; others with the bulk copy.
            unsafe {
                if from < dst + n && dst < from + n {
                    core::ptr::copy(from as *const u8, dst as *mut u8, n);
                } else {
                    copy::bulk(from as *const u8, dst as *mut u8, n);
                }
            }
        }
        Ok(end)
    }

    /// Exports exactly `nbytes` bytes (read-only for a view).
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `Py_buffer`.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: RawView, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        // Relaxed: see `Shared::freed`.
        if this.shared.freed.load(Ordering::Relaxed) {
            return Err(PyBufferError::new_err(
                "this allocation was freed: it exports nothing any more",
            ));
        }
        let bytes = (this.addr, this.len);
        if this.readonly {
            // SAFETY: `addr..addr+len` lies in the arena of `_mapping` (checked by
            // `Arena::address`), which the view keeps alive through its reference to `slf`.
            unsafe { export::fill_view(slf.as_any(), view, bytes, true, flags) }
        } else {
            // SAFETY: as above; the allocation is this process's own (its allocator is the one
            // mutator), and `free` refuses while the export count is non-zero, so the bytes
            // stay ours to write while the view lives.
            unsafe {
                export::fill(
                    slf.as_any(),
                    view,
                    bytes,
                    false,
                    flags,
                    &this.shared.exports,
                )
            }
        }
    }

    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: RawView) {
        let this = slf.get();
        if !this.readonly {
            export::release(&this.shared.exports);
        }
    }

    fn __repr__(&self) -> String {
        let kind = if self.readonly { "view" } else { "block" };
        format!(
            "<shmring {kind} handle={:#x} nbytes={}>",
            self.handle, self.len
        )
    }
}

/// The mutator's state.
struct Owned {
    arena: Arena,
    /// Blocks this allocator handed out, by handle: their owner tag and shared state.
    blocks: HashMap<u64, (u16, Arc<Shared>)>,
}

/// The ring's allocator as its one mutator (`Producer.allocator()`): `allocate(n)` gives a
/// writable block of exactly `n` bytes and its handle, `free(handle)` gives it back. Ceilings
/// (`max_live`, the arena's bytes) raise `shmring.Full`; a bad handle raises
/// `shmring.InvalidHandle`. Thread-safe; no call blocks.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Allocator {
    state: Mutex<Option<Owned>>,
    producer: Py<Producer>,
    mapping: Arc<Mapping>,
    /// What taking over freed: (count, bytes).
    reclaimed: (u64, u64),
    /// Own `notify` views that are gone.
    released: Released,
}

impl Allocator {
    /// The allocator of `producer`'s ring, freeing what a previous owner left live.
    pub(crate) fn new(producer: Py<Producer>, mapping: &Arc<Mapping>) -> Result<Self, Fail> {
        let mut arena = Arena::attach(mapping)?
            .ok_or_else(|| Fail::new("InvalidConfig", "this ring has no allocator (arena=0)"))?;
        let (mut count, mut bytes) = (0u64, 0u64);
        for owner in 0..MAX_OWNERS {
            let f = arena.alloc.free_all_of(owner).map_err(alloc_fail)?;
            count += f.count;
            bytes += f.bytes;
        }
        Ok(Self {
            state: Mutex::new(Some(Owned {
                arena,
                blocks: HashMap::new(),
            })),
            producer,
            mapping: Arc::clone(mapping),
            reclaimed: (count, bytes),
            released: Released::default(),
        })
    }

    /// Runs `f` on the mutator state; `Closed` once closed or once the producer is.
    fn with<T>(&self, f: impl FnOnce(&mut Owned) -> Result<T, Fail>) -> PyResult<T> {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let owned = g
            .as_mut()
            .ok_or_else(|| Fail::new("Closed", "this allocator is closed"))?;
        if self.producer.get().is_closed() {
            return Err(Fail::new(
                "Closed",
                "the producer that owns this allocator is closed (another process may own the ring now)",
            )
            .into());
        }
        Ok(f(owned)?)
    }
}

#[pymethods]
impl Allocator {
    /// A writable block of exactly `nbytes` bytes (writes past it raise), tagged with `owner`
    /// (0..64, for the per-owner counters). `shmring.Full` at a ceiling.
    #[pyo3(signature = (nbytes, owner = 0))]
    fn allocate(&self, nbytes: u64, owner: u16) -> PyResult<Block> {
        self.with(|o| {
            let a = o
                .arena
                .alloc
                .alloc(nbytes, owner, now_ms())
                .map_err(alloc_fail)?;
            let addr = match o.arena.address(&a) {
                Ok(addr) => addr,
                Err(e) => {
                    let _ = o.arena.alloc.free(a.handle, owner);
                    return Err(e);
                }
            };
            let shared = Arc::new(Shared::default());
            o.blocks.insert(a.handle, (owner, Arc::clone(&shared)));
            Ok(Block {
                handle: a.handle,
                addr,
                // `address` checked `offset + len` against the arena, so `len` fits a usize.
                len: usize::try_from(a.len).unwrap_or(0),
                readonly: false,
                shared,
                released: None,
                _mapping: Arc::clone(&self.mapping),
            })
        })
    }

    /// A read-only zero-copy view of this allocator's own live allocation `handle` (its first
    /// `nbytes`, default all of it): what a process reads of a block it wrote, as the peer
    /// does. The view does not keep the allocation alive: free it only once the view is gone
    /// (with `notify=True` its handle shows up in `take_released()` then).
    #[pyo3(signature = (handle, nbytes = None, notify = false))]
    fn view(&self, handle: u64, nbytes: Option<u64>, notify: bool) -> PyResult<Block> {
        let released = notify.then(|| Arc::clone(&self.released));
        self.with(|o| Ok(view_of(&o.arena, &self.mapping, handle, nbytes, released)))?
    }

    /// The handles of this allocator's `notify` views that are gone since the last call.
    fn take_released(&self) -> Vec<u64> {
        take(&self.released)
    }

    /// Frees `handle` (returns its length). `BufferError` while a view of its block is alive;
    /// `shmring.InvalidHandle` for a handle that is not live (double free, stale, forged).
    fn free(&self, handle: u64) -> PyResult<u64> {
        self.with(|o| {
            let owner = match o.blocks.get(&handle) {
                Some((owner, shared)) => {
                    if export::live(&shared.exports) {
                        return Err(Fail::new(
                            "BufferError",
                            "a view of this allocation is still alive: release it first",
                        ));
                    }
                    *owner
                }
                None => 0,
            };
            let len = o.arena.alloc.free(handle, owner).map_err(alloc_fail)?;
            if let Some((_, shared)) = o.blocks.remove(&handle) {
                // Relaxed: see `Shared::freed`.
                shared.freed.store(true, Ordering::Relaxed);
            }
            Ok(len)
        })
    }

    /// Frees every allocation whose block exports nothing; returns how many it freed.
    fn free_all(&self) -> PyResult<u64> {
        self.with(|o| {
            let idle: Vec<(u64, u16)> = o
                .blocks
                .iter()
                .filter(|(_, (_, s))| !export::live(&s.exports))
                .map(|(h, (owner, _))| (*h, *owner))
                .collect();
            let mut n = 0;
            for (h, owner) in idle {
                if o.arena.alloc.free(h, owner).is_ok() {
                    n += 1;
                }
                if let Some((_, shared)) = o.blocks.remove(&h) {
                    // Relaxed: see `Shared::freed`.
                    shared.freed.store(true, Ordering::Relaxed);
                }
            }
            Ok(n)
        })
    }

    /// Live allocations (the shared counter).
    #[getter]
    fn live(&self) -> PyResult<u64> {
        self.with(|o| Ok(o.arena.alloc.stats().live))
    }

    /// The live-allocation ceiling.
    #[getter]
    fn max_live(&self) -> PyResult<u32> {
        self.with(|o| Ok(o.arena.alloc.max_live()))
    }

    /// Stats, per-owner counters, the leak report and what taking over reclaimed.
    fn inspect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = {
            let g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let o = g
                .as_ref()
                .ok_or_else(|| Fail::new("Closed", "this allocator is closed"))?;
            report(py, &o.arena.alloc)?
        };
        let r = PyDict::new(py);
        r.set_item("count", self.reclaimed.0)?;
        r.set_item("bytes", self.reclaimed.1)?;
        d.set_item("reclaimed", r)?;
        Ok(d)
    }

    /// Gives up the mutator role (allocations stay live; a later allocator reclaims them).
    fn close(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }
}

/// The allocator report shared by both sides and `Ring.inspect`: stats, per-owner counters, the
/// leak report.
pub(crate) fn report<'py>(py: Python<'py>, a: &Core<'_>) -> PyResult<Bound<'py, PyDict>> {
    let stats_dict = |s: ring_core::arena::Stats| -> PyResult<Bound<'py, PyDict>> {
        let v = PyDict::new(py);
        v.set_item("live", s.live)?;
        v.set_item("live_bytes", s.live_bytes)?;
        v.set_item("peak_live", s.peak_live)?;
        v.set_item("allocs", s.allocs)?;
        v.set_item("frees", s.frees)?;
        v.set_item("ceiling_hits", s.ceiling_hits)?;
        v.set_item("out_of_space", s.out_of_space)?;
        v.set_item("bad_frees", s.bad_frees)?;
        Ok(v)
    };
    let d = stats_dict(a.stats())?;
    d.set_item("arena_bytes", a.arena_bytes())?;
    d.set_item("max_live", a.max_live())?;
    let owners = PyDict::new(py);
    for owner in 0..MAX_OWNERS {
        let s = a.owner_stats(owner).map_err(alloc_fail)?;
        if s.allocs > 0 || s.bad_frees > 0 || s.live > 0 {
            owners.set_item(owner, stats_dict(s)?)?;
        }
    }
    d.set_item("owners", owners)?;
    let leaks = PyList::empty(py);
    let mut err = None;
    let totals = a.leak_report(now_ms(), |l| {
        let e = PyDict::new(py);
        let r = (|| -> PyResult<()> {
            e.set_item("owner", l.owner)?;
            e.set_item("handle", l.handle)?;
            e.set_item("offset", l.offset)?;
            e.set_item("size", l.len)?;
            e.set_item("age_ms", l.age)?;
            leaks.append(e)
        })();
        if let Err(x) = r {
            err.get_or_insert(x);
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    d.set_item("leaks", leaks)?;
    d.set_item("leak_count", totals.count)?;
    d.set_item("leak_bytes", totals.bytes)?;
    d.set_item("corrupt_entries", totals.corrupt)?;
    Ok(d)
}

/// Read-only, zero-copy access to a ring's allocations by handle (`Ring.allocations()`), from
/// any process that opened the ring. Handles are checked against the allocator's entry table.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Allocations {
    arena: Arena,
    mapping: Arc<Mapping>,
    /// `notify` views that are gone.
    released: Released,
}

impl Allocations {
    /// The reader of `mapping`'s allocator.
    pub(crate) fn new(mapping: &Arc<Mapping>) -> Result<Self, Fail> {
        let arena = Arena::attach(mapping)?
            .ok_or_else(|| Fail::new("InvalidConfig", "this ring has no allocator (arena=0)"))?;
        Ok(Self {
            arena,
            mapping: Arc::clone(mapping),
            released: Released::default(),
        })
    }
}

#[pymethods]
impl Allocations {
    /// A read-only view of live allocation `handle` (its first `nbytes`, default all of it).
    /// `shmring.InvalidHandle` when the handle is not live, `ValueError` when `nbytes` exceeds
    /// the allocation. With `notify=True` its handle shows up in `take_released()` once the
    /// view (every buffer made from it) is gone.
    #[pyo3(signature = (handle, nbytes = None, notify = false))]
    fn view(&self, handle: u64, nbytes: Option<u64>, notify: bool) -> PyResult<Block> {
        let released = notify.then(|| Arc::clone(&self.released));
        view_of(&self.arena, &self.mapping, handle, nbytes, released)
    }

    /// The handles of `notify` views that are gone since the last call, oldest first.
    fn take_released(&self) -> Vec<u64> {
        take(&self.released)
    }

    /// Stats, per-owner counters and the leak report, as the owner sees them.
    fn inspect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        report(py, &self.arena.alloc)
    }
}
