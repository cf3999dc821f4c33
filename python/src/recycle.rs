//! Recycled receive buffers for the queue's copying `get`.
//!
//! A copying `get` of a large array copies it out of the ring into memory the returned object
//! owns. Fresh memory from the allocator is, above glibc's mmap threshold (at most 32 MiB), a
//! new mapping every time: the copy then pays a page fault and the kernel's zeroing for every
//! 4 KiB page, which costs several times the copy itself. So a consumer keeps a small
//! [`Recycler`]: a [`Buffer`] (the object the copy goes into) gives its memory back to the
//! recycler when Python frees it, and the next large part is copied into memory that is already
//! mapped. At most [`KEEP`] freed buffers are kept, each at most twice the size of the part
//! that reuses it; buffers are anonymous mappings, asked for transparent huge pages on Linux.

use core::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError};

use memmap2::{MmapMut, MmapOptions};
use pyo3::prelude::*;

use crate::errors::Fail;
use crate::export::{self, RawView};

/// Parts at least this long are copied into a recycled [`Buffer`]; smaller ones into a
/// `bytearray` (the allocator caches small blocks itself).
pub(crate) const RECYCLE_AT: usize = 1 << 20;

/// Freed buffers kept for reuse, per consumer.
pub(crate) const KEEP: usize = 2;

/// Buffers are whole multiples of this (the huge-page size on x86_64 and aarch64 Linux).
const GRAIN: usize = 2 << 20;

/// Freed buffer memory of one consumer, kept for its next large parts.
#[derive(Default)]
pub(crate) struct Recycler {
    free: Mutex<Vec<MmapMut>>,
}

impl Recycler {
    /// Memory for a part of `len` bytes: the smallest kept buffer that holds it and is at most
    /// twice its size, or a new mapping.
    fn take(&self, len: usize) -> std::io::Result<MmapMut> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, m)| m.len() >= len && m.len() / 2 <= len)
            .min_by_key(|(_, m)| m.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        let cap = len.max(1).div_ceil(GRAIN).saturating_mul(GRAIN);
        let map = MmapOptions::new().len(cap).map_anon()?;
        #[cfg(target_os = "linux")]
        {
            // Best effort: fewer faults and TLB misses where THP is in `madvise` mode.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Ok(map)
    }

    /// Keeps `map` for reuse, dropping the oldest kept buffer when [`KEEP`] are kept.
    fn give(&self, map: MmapMut) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() >= KEEP {
            free.remove(0);
        }
        free.push(map);
    }

    /// How many freed buffers are kept (for the tests).
    pub(crate) fn kept(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A writable buffer a copying `get` filled (the memory behind a received numpy array).
/// Exports its bytes through the buffer protocol; when Python frees it (no view can be alive
/// then: each view holds a reference), its memory goes back to the consumer's recycler.
#[pyclass(module = "shmring", name = "RecvBuffer", frozen)]
pub(crate) struct Buffer {
    /// Owns the memory; `None` only inside `drop`.
    map: Option<MmapMut>,
    /// Start of the memory (`map`'s pointer, taken while we held it mutably).
    addr: usize,
    len: usize,
    home: Arc<Recycler>,
}

impl Buffer {
    /// A buffer of `len` bytes from `home`, and the pointer to fill it through. The caller
    /// must fill all `len` bytes before any Python code can see the object (they may be a
    /// previous message's bytes).
    pub(crate) fn make<'py>(
        py: Python<'py>,
        home: &Arc<Recycler>,
        len: usize,
    ) -> PyResult<(Bound<'py, PyAny>, *mut u8)> {
        let mut map = home.take(len).map_err(|e| {
            Fail::new(
                "TooLarge",
                format!("cannot map {len} bytes for a received part: {e}"),
            )
        })?;
        let ptr = map.as_mut_ptr();
        let obj = Bound::new(
            py,
            Self {
                map: Some(map),
                addr: ptr as usize,
                len,
                home: Arc::clone(home),
            },
        )?;
        Ok((obj.into_any(), ptr))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            self.home.give(map);
        }
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Exports the bytes, writable unless asked otherwise.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `view` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: RawView, flags: c_int) -> PyResult<()> {
        let me = slf.get();
        // SAFETY: `view` is the interpreter's; `addr..addr + len` is memory `map` owns, mapped
        // until this object is freed, which cannot happen while the view holds its reference.
        // Python writes through the view; Rust never makes a reference into these bytes after
        // `make`'s caller filled them.
        unsafe { export::fill_view(slf.as_any(), view, (me.addr, me.len), false, flags) }
    }

    /// Nothing to do: the view's reference keeps this object, and so its memory, alive.
    ///
    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(_slf: Bound<'_, Self>, _view: RawView) {}

    fn __repr__(&self) -> String {
        format!("<shmring.RecvBuffer of {} bytes>", self.len)
    }
}
