//! `shmring.Consumer` and `shmring.Message`: zero-copy pinned reads.
//!
//! A ring-core pin (`Pinned`) borrows its consumer mutably, which a Python object cannot
//! express. So the consumer state ([`Held`]) owns the `Subscriber` on the heap and the current
//! pin next to it, the pin's borrow extended to `'static` by hand; [`Held`] upholds what the
//! borrow checker would have: the subscriber is not touched while the pin lives, and the pin is
//! dropped before the subscriber. A `Message` is a ticket (`pin_id`) for the current pin; the
//! buffer-export count lives in the consumer, so neither the message nor the consumer can give
//! the slot back while a `memoryview` or numpy array still views it.

use core::ffi::c_int;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ring_core::{DeliveryClass, Pinned, ReadError};
use ring_os::{Mapping, RecvTimeoutError, Subscriber};

use crate::errors::{self, exported, Fail};
use crate::export;
use crate::queue::{self as q, Arena, Part};
use crate::recycle::{Buffer, Recycler, RECYCLE_AT};
use crate::wait::{deadline, sliced};

/// A pin with its borrow of the subscriber extended to `'static` (see [`Held`]).
type Pin = Pinned<'static, Arc<Mapping>>;

/// The subscriber, its current pin and the buffer exports of that pin.
struct Held {
    /// From `Box::into_raw`; freed in `Drop`, after `pin`.
    sub: NonNull<Subscriber>,
    /// The current pin; it borrows `*sub` mutably.
    pin: Option<Pin>,
    /// Increments with every pin; a `Message` holds the id of its pin.
    pin_id: u64,
    /// Address and length of the pinned bytes.
    bytes: (usize, usize),
    /// Live buffer exports of the current pin (shared with its `Message`, so a view can be
    /// released without borrowing the consumer). A fresh counter for every pin.
    exports: Arc<AtomicUsize>,
}

// SAFETY: `Held` owns the `Subscriber` (as a `Box` would) and a pin that borrows only it;
// both are `Send` (a `Subscriber` is a plain owner of an `Arc<Mapping>` and role lock), and
// nothing in `Held` is shared with another owner, so moving it to another thread is sound.
unsafe impl Send for Held {}

// SAFETY: a shared `&Held` reaches no method that dereferences `sub` or uses the pin (all of
// them take `&mut self`, which PyO3 hands out to one borrower at a time).
unsafe impl Sync for Held {}

impl Held {
    fn new(sub: Subscriber) -> Self {
        Self {
            sub: NonNull::from(Box::leak(Box::new(sub))),
            pin: None,
            pin_id: 0,
            bytes: (0, 0),
            exports: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Releases the current pin; refuses while its bytes are exported.
    fn unpin(&mut self, what: &str) -> PyResult<()> {
        if self.pin.is_some() && export::live(&self.exports) {
            return Err(exported(what));
        }
        self.pin = None;
        Ok(())
    }

    /// The subscriber; only while no pin borrows it.
    fn sub(&mut self) -> &mut Subscriber {
        debug_assert!(self.pin.is_none());
        // SAFETY: `sub` is the live box we own (freed only in `Drop`), and no pin borrows it
        // (callers release the pin first), so this is the only reference.
        unsafe { self.sub.as_mut() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // The pin borrows the subscriber: it goes first.
        self.pin = None;
        // SAFETY: `sub` came from `Box::leak` in `new` and is freed only here, once; the pin
        // that borrowed it is gone.
        drop(unsafe { Box::from_raw(self.sub.as_ptr()) });
    }
}

/// A consumer of a ring (see `Ring.consumer`). Pins one message at a time.
#[pyclass(module = "shmring")]
pub(crate) struct Consumer {
    held: Option<Held>,
    class: DeliveryClass,
    received: u64,
    missed: u64,
    mapping: Arc<Mapping>,
    /// The ring's allocator, attached by the first `_get_parts` (inner `None`: the ring has
    /// none).
    arena: Option<Option<Arena>>,
    /// Memory of freed large received parts, for the next copying `_get_parts`.
    recycler: Arc<Recycler>,
}

impl Consumer {
    pub(crate) fn new(sub: Subscriber, class: DeliveryClass, mapping: &Arc<Mapping>) -> Self {
        Self {
            held: Some(Held::new(sub)),
            class,
            received: 0,
            missed: 0,
            mapping: Arc::clone(mapping),
            arena: None,
            recycler: Arc::default(),
        }
    }

    fn held(&mut self) -> PyResult<&mut Held> {
        self.held
            .as_mut()
            .ok_or_else(|| Fail::new("Closed", "this consumer is closed").into())
    }

    /// Pins the next message, waiting as `timeout` says; `None` when it ran out.
    fn pin_next(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<u64> {
        let end = deadline(timeout)?;
        let held = self.held()?;
        held.unpin("pin the next message")?;
        let sub = SubPtr(held.sub);
        let got = sliced(py, end, move |slice| {
            let sub = sub;
            // SAFETY: the box is alive (the consumer is mutably borrowed for this call and
            // `Held` frees it only in `Drop`) and no pin borrows it (released above); the
            // resulting pin is stored in `Held`, which drops it before the box.
            let s: &'static mut Subscriber = unsafe { &mut *sub.0.as_ptr() };
            match s.recv_pinned_timeout(slice) {
                Ok(p) => Ok(Some(SendPin(p))),
                Err(RecvTimeoutError::Timeout)
                | Err(RecvTimeoutError::Failed(ReadError::Lagging)) => Ok(None),
                Err(e) => Err(errors::recv(e)),
            }
        })?;
        let Some(SendPin(pin)) = got else {
            return Err(Fail::new("Timeout", "no message came within the timeout").into());
        };
        let bytes = pin.bytes();
        let held = self.held()?;
        held.bytes = (bytes.as_ptr() as usize, bytes.len());
        held.pin_id += 1;
        held.exports = Arc::new(AtomicUsize::new(0));
        let id = held.pin_id;
        self.received += 1;
        self.missed += pin.missed();
        self.held()?.pin = Some(pin);
        Ok(id)
    }
}

/// The subscriber's address, sent into the GIL-free closure.
#[derive(Clone, Copy)]
struct SubPtr(NonNull<Subscriber>);
// SAFETY: only dereferenced by the one call that holds the consumer mutably (see `pin_next`).
unsafe impl Send for SubPtr {}

/// A pin carried out of the GIL-free closure.
struct SendPin(Pin);
// SAFETY: as for `Held`: the pin borrows only the subscriber the caller owns.
unsafe impl Send for SendPin {}

#[pymethods]
impl Consumer {
    /// Pins the next message and returns it as a zero-copy `Message`. Waits up to `timeout`
    /// seconds (`None`: as long as it takes; raises `Timeout`). The previous message is
    /// released first; if its bytes are still exported, this raises `BufferError`.
    /// Raises `Disconnected` once the stream was closed and drained, `Aborted` if it was
    /// aborted.
    #[pyo3(signature = (timeout = None))]
    fn pin(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Message> {
        let py = slf.py();
        let mut me = slf.try_borrow_mut()?;
        let id = me.pin_next(py, timeout)?;
        let held = me.held()?;
        let pin = held
            .pin
            .as_ref()
            .ok_or_else(|| Fail::new("Error", "pin vanished"))?;
        Ok(Message {
            consumer: slf.clone().unbind(),
            exports: Arc::clone(&held.exports),
            pin_id: id,
            seq: pin.seq(),
            missed: pin.missed(),
            len: pin.len(),
            meta: pin.meta(),
        })
    }

    /// The queue's get (see `shmring.queue`): pins the next message, validates its part table
    /// and returns its parts: with `zero_copy`, read-only `Part` objects viewing the bytes in
    /// the ring (the message stays pinned until the next get or `close`, and while any view
    /// lives); otherwise copies — part 0 (the pickle stream) as `bytes`, the others as
    /// writable `bytearray`s (large ones copied with the GIL released) — and releases the pin.
    /// Waits as `pin` does. A message that is not a valid queue message is consumed and
    /// raises `Corrupt`.
    #[pyo3(signature = (timeout = None, zero_copy = false))]
    fn _get_parts<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
        zero_copy: bool,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let py = slf.py();
        let mut me = slf.try_borrow_mut()?;
        if me.arena.is_none() {
            let a = Arena::attach(&me.mapping).map_err(|f| f.into_py(py))?;
            me.arena = Some(a);
        }
        let id = me.pin_next(py, timeout)?;
        let me = &mut *me;
        let held = me
            .held
            .as_mut()
            .ok_or_else(|| Fail::new("Closed", "this consumer is closed"))?;
        let (ptr, len) = held.bytes;
        let meta = held.pin.as_ref().map_or([0, 0], |p| p.meta());
        // SAFETY: the pin just taken keeps these `len` bytes mapped and stable.
        let slot = unsafe { core::slice::from_raw_parts(ptr as *const u8, len) };
        let parsed = q::parse(slot, meta, me.arena.as_ref().and_then(Option::as_ref));
        let parts = match parsed {
            Ok(p) => p,
            Err(f) => {
                held.unpin("release the message")?;
                return Err(f.into_py(py));
            }
        };
        if zero_copy {
            let consumer = slf.clone().unbind();
            let siblings = Arc::new(AtomicUsize::new(parts.len()));
            return parts
                .iter()
                .map(|g| {
                    Ok(Bound::new(
                        py,
                        Part {
                            consumer: consumer.clone_ref(py),
                            exports: Arc::clone(&held.exports),
                            siblings: Arc::clone(&siblings),
                            pin_id: id,
                            addr: g.addr,
                            len: g.len,
                        },
                    )?
                    .into_any())
                })
                .collect();
        }
        let mut out = Vec::with_capacity(parts.len());
        let mut jobs = Vec::with_capacity(parts.len());
        let mut total = 0usize;
        // An empty pickle part marks a raw `bytes` payload (see `shmring.queue`).
        let raw_bytes = parts.len() == 2 && parts[0].len == 0;
        // A raw `bytes`/`bytearray` payload must come back as that type.
        let raw = parts.len() == 2 && parts[0].len <= 1;
        for (i, g) in parts.iter().enumerate() {
            if i == 0 {
                // SAFETY: validated by `parse` to lie in the pinned slot or its allocation.
                let b = unsafe { core::slice::from_raw_parts(g.addr as *const u8, g.len) };
                out.push(PyBytes::new(py, b).into_any());
            } else if !raw && g.len >= RECYCLE_AT {
                // A pickled array's buffer: into recycled memory (see `recycle`).
                let (obj, dst) = Buffer::make(py, &me.recycler, g.len)?;
                jobs.push((g.addr, dst, g.len));
                total += g.len;
                out.push(obj);
            } else {
                let (obj, dst) = q::new_buffer(py, g.len, raw_bytes)?;
                jobs.push((g.addr, dst, g.len));
                total += g.len;
                out.push(obj);
            }
        }
        let faults = ring_os::sigbus::repaired_faults();
        let copy = move || {
            for (src, dst, len) in jobs {
                // SAFETY: `src..src + len` lies in the pinned slot or its allocation (`parse`),
                // stable while pinned; `dst` is the memory of a new bytearray or `Buffer` of
                // `len` bytes (held in `out`) that no other code has seen yet.
                unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
            }
        };
        if total >= q::RELEASE_GIL_AT {
            py.allow_threads(copy);
        } else {
            copy();
        }
        held.unpin("release the message")?;
        truncated_since(faults)?;
        Ok(out)
    }

    /// Copies the next message out as `bytes` (waits as `pin` does).
    #[pyo3(signature = (timeout = None))]
    fn recv<'py>(slf: &Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        let py = slf.py();
        let mut me = slf.try_borrow_mut()?;
        me.pin_next(py, timeout)?;
        let held = me.held()?;
        let (ptr, len) = held.bytes;
        let faults = ring_os::sigbus::repaired_faults();
        // SAFETY: the pin just taken keeps these `len` bytes stable and mapped.
        let out = PyBytes::new(py, unsafe {
            core::slice::from_raw_parts(ptr as *const u8, len)
        });
        held.unpin("release the message")?;
        truncated_since(faults)?;
        Ok(out)
    }

    /// Copies the next message into `buffer` (any writable C-contiguous buffer: `bytearray`,
    /// numpy array, `memoryview`, `mmap`) and returns its length; waits as `pin` does. The
    /// reader of large messages reuses one buffer instead of a new `bytes` each time. A
    /// message longer than the buffer raises `TooLarge` and is consumed (a buffer of the
    /// ring's `slot_size` holds any message).
    #[pyo3(signature = (buffer, timeout = None))]
    fn recv_into(
        slf: &Bound<'_, Self>,
        buffer: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let py = slf.py();
        let view = crate::producer::View::writable(buffer)?;
        let (dst, room) = view.raw();
        let mut me = slf.try_borrow_mut()?;
        me.pin_next(py, timeout)?;
        let held = me.held()?;
        let (src, len) = held.bytes;
        if len > room {
            held.unpin("release the message")?;
            return Err(Fail::new(
                "TooLarge",
                format!(
                    "a message of {len} bytes does not fit a buffer of {room} (it was consumed)"
                ),
            )
            .into());
        }
        let faults = ring_os::sigbus::repaired_faults();
        let copy = move || {
            // SAFETY: `src..src + len` is the pinned message, mapped and stable while pinned;
            // `dst..dst + len` lies in the writable view `view`, held (so the object cannot be
            // resized or freed) until after the copy. Raw pointers only, and `copy` allows
            // overlap, so even a view into the segment itself cannot make this unsound.
            unsafe { core::ptr::copy(src as *const u8, dst as *mut u8, len) };
        };
        if len >= q::RELEASE_GIL_AT {
            py.allow_threads(copy);
        } else {
            copy();
        }
        drop(view);
        held.unpin("release the message")?;
        truncated_since(faults)?;
        Ok(len)
    }

    /// The delivery mode: `"gating"`, `"latest"` or `"skip"`.
    #[getter]
    fn mode(&self) -> &'static str {
        crate::ring::mode_of(self.class)
    }

    /// Freed received buffers this consumer keeps for reuse (at most two; see `get`).
    fn _recycled(&self) -> usize {
        self.recycler.kept()
    }

    /// Messages received so far.
    #[getter]
    fn received(&self) -> u64 {
        self.received
    }

    /// Messages skipped so far (latest and skip modes).
    #[getter]
    fn missed(&self) -> u64 {
        self.missed
    }

    /// Whether the consumer is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.held.is_none()
    }

    /// Leaves the ring (raises `BufferError` while the current message is exported).
    fn close(&mut self) -> PyResult<()> {
        if let Some(h) = self.held.as_mut() {
            h.unpin("close the consumer")?;
            // Touch the subscriber once, so a closed ring is left now, not at collection.
            let _ = h.sub();
        }
        self.held = None;
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Iterating pins message after message until the stream is disconnected.
    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Message>> {
        match Self::pin(slf, None) {
            Ok(m) => Ok(Some(m)),
            Err(e) if is_kind(slf.py(), &e, "Disconnected") => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// `Truncated` when a peer shrank the segment under a copy made since `faults` was read
/// (the SIGBUS guard replaced the missing pages, so the copy holds zeros, not the message).
fn truncated_since(faults: u64) -> PyResult<()> {
    if ring_os::sigbus::repaired_faults() != faults {
        return Err(Fail::new(
            "Truncated",
            "the segment was truncated while the message was copied",
        )
        .into());
    }
    Ok(())
}

/// Whether `e` is an instance of `shmring.errors.<kind>`.
fn is_kind(py: Python<'_>, e: &PyErr, kind: &str) -> bool {
    py.import("shmring.errors")
        .and_then(|m| m.getattr(kind))
        .is_ok_and(|cls| e.value(py).is_instance(&cls).unwrap_or(false))
}

/// A pinned message: exports the slot's bytes read-only through the buffer protocol
/// (`memoryview(msg)`, `np.frombuffer(msg, np.uint8)`, `pa.py_buffer(msg)`) without a copy.
/// The slot stays pinned until `close()` (or the end of a `with` block, or the next `pin`),
/// and never while a buffer export is alive: closing early raises `BufferError`.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Message {
    consumer: Py<Consumer>,
    /// The pin's export count (see [`Held::exports`]).
    exports: Arc<AtomicUsize>,
    pin_id: u64,
    seq: u64,
    missed: u64,
    len: usize,
    meta: [u64; 2],
}

impl Message {
    /// Runs `f` on the consumer state if this message's pin is still the current one.
    fn with_pin<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Held) -> PyResult<T>) -> PyResult<T> {
        let mut c = self.consumer.bind(py).try_borrow_mut()?;
        match c.held.as_mut() {
            Some(h) if h.pin.is_some() && h.pin_id == self.pin_id => f(h),
            _ => Err(Fail::new(
                "Closed",
                "this message was released (closed, or a later pin replaced it)",
            )
            .into()),
        }
    }
}

#[pymethods]
impl Message {
    /// Sequence number.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Messages skipped just before this one.
    #[getter]
    fn missed(&self) -> u64 {
        self.missed
    }

    /// The two metadata words.
    #[getter]
    fn meta(&self) -> (u64, u64) {
        (self.meta[0], self.meta[1])
    }

    /// Whether the pin is released.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.with_pin(py, |_| Ok(())).is_err()
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// A copy of the bytes.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.with_pin(py, |h| {
            let (ptr, len) = h.bytes;
            // SAFETY: the pin is current, so these bytes are mapped and stable.
            Ok(PyBytes::new(py, unsafe {
                core::slice::from_raw_parts(ptr as *const u8, len)
            }))
        })
    }

    /// Releases the pin (raises `BufferError` while an export is alive; idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        match self.with_pin(py, |h| h.unpin("close the message")) {
            Err(e) if e.is_instance_of::<PyBufferError>(py) => Err(e),
            _ => Ok(()),
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// The DLPack device: `(kDLCPU, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// A DLPack capsule viewing the bytes as a 1-D uint8 tensor (read-only: do not write
    /// through it). The pin counts it as an export until the capsule's consumer deletes it.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (stream, max_version, dl_device);
        if copy == Some(true) {
            return Err(PyValueError::new_err(
                "copy=True is not supported: the message is exported in place",
            ));
        }
        let py = slf.py();
        let me = slf.get();
        let (ptr, len) = me.with_pin(py, |h| Ok(h.bytes))?;
        // Relaxed: as in `export::fill`.
        me.exports.fetch_add(1, Ordering::Relaxed);
        crate::dlpack::capsule(
            py,
            slf.clone().into_any().unbind(),
            ptr,
            len,
            release_export,
        )
    }

    /// Exports the pinned bytes read-only.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let py = slf.py();
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "a pinned message is read-only (write in place with Producer.claim)",
            ));
        }
        let me = slf.get();
        let bytes = me.with_pin(py, |h| Ok(h.bytes))?;
        // SAFETY: `view` is the interpreter's; the pinned bytes stay mapped and stable while
        // the export count keeps the pin (`Held::unpin` refuses).
        unsafe { export::fill(slf.as_any(), view, bytes, true, flags, &me.exports) }
    }

    /// Drops one export.
    ///
    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: *mut ffi::Py_buffer) {
        release_export(slf.py(), slf.as_any());
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Message(seq={}, len={}, missed={}{})",
            self.seq,
            self.len,
            self.missed,
            if self.closed(py) { ", closed" } else { "" }
        )
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // A message that goes away releases its pin, unless a later pin replaced it (or a
        // view is alive, which cannot be: each export holds a reference to the message).
        // No Python call here (no error objects either): a destructor may run while an
        // exception is propagating, and calling into Python then would clobber it.
        Python::with_gil(|py| {
            let Ok(mut c) = self.consumer.bind(py).try_borrow_mut() else {
                return;
            };
            if let Some(h) = c.held.as_mut() {
                if h.pin_id == self.pin_id && !export::live(&h.exports) {
                    h.pin = None;
                }
            }
        });
    }
}

/// Drops one export of the message `obj` (a buffer view or a DLPack capsule went away).
fn release_export(_py: Python<'_>, obj: &Bound<'_, PyAny>) {
    if let Ok(msg) = obj.downcast::<Message>() {
        export::release(&msg.get().exports);
    }
}

/// Whether `consumer`'s current pin is the one numbered `pin_id` (for `queue::Part`).
pub(crate) fn pin_is(py: Python<'_>, consumer: &Py<Consumer>, pin_id: u64) -> bool {
    consumer.bind(py).try_borrow().is_ok_and(|c| {
        c.held
            .as_ref()
            .is_some_and(|h| h.pin.is_some() && h.pin_id == pin_id)
    })
}

/// Releases `consumer`'s pin if it is still the one numbered `pin_id` and nothing exports it
/// (the last `queue::Part` of a message went away). Quietly does nothing otherwise.
pub(crate) fn release_pin(py: Python<'_>, consumer: &Py<Consumer>, pin_id: u64) {
    let Ok(mut c) = consumer.bind(py).try_borrow_mut() else {
        return;
    };
    if let Some(h) = c.held.as_mut() {
        if h.pin_id == pin_id && !export::live(&h.exports) {
            h.pin = None;
        }
    }
}
