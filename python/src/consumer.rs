//! `shmring.Consumer` and `shmring.Message`: zero-copy pinned reads.
//!
//! A ring-core pin (`Pinned`) borrows its consumer mutably, which a Python object cannot
//! express. So the consumer state ([`Held`]) owns the `Subscriber` on the heap and the current
//! pin next to it, the pin's borrow extended to `'static` by hand; [`Held`] upholds what the
//! borrow checker would have: the subscriber is not touched while the pin lives, and the pin is
//! dropped before the subscriber. A `Message` is a ticket (`pin_id`) for the current pin; the
//! buffer-export count lives in the consumer, so neither the message nor the consumer can give
//! the slot back while a `memoryview` or numpy array still views it.
//!
//! The consumer is usable from any thread: [`Held`] lives in a [`Handoff`], lent to one
//! blocking call at a time (which waits without holding a lock), so `close()` from another
//! thread wakes a waiting call within one slice. A pin another thread can see (one in the
//! handoff) is released only with the GIL held, so a `Message` method that found its pin
//! current may use the bytes until it releases the GIL.

use core::ffi::c_int;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ring_core::inspect::{consumer_info, producer_info};
use ring_core::{DeliveryClass, Pinned, ReadError};
use ring_os::{Mapping, RecvTimeoutError, Subscriber};

use crate::errors::{self, exported_fail, Fail};
use crate::export;
use crate::handoff::{Handoff, Lease};
use crate::queue::{self as q, Arena, Part};
use crate::recycle::{Buffer, Recycler, RECYCLE_AT};
use crate::wait::{deadline, sliced, unlocked};

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
    /// The ring's allocator, attached by the first `_get_parts` (inner `None`: the ring has
    /// none).
    arena: Option<Option<Arena>>,
}

// SAFETY: `Held` owns the `Subscriber` (as a `Box` would) and a pin that borrows only it;
// both are `Send` (a `Subscriber` is a plain owner of an `Arc<Mapping>` and role lock), and
// nothing in `Held` is shared with another owner, so moving it to another thread is sound.
// (It is not `Sync`: the `Handoff` mutex gives one thread at a time access to it.)
unsafe impl Send for Held {}

impl Held {
    fn new(sub: Subscriber) -> Self {
        Self {
            sub: NonNull::from(Box::leak(Box::new(sub))),
            pin: None,
            pin_id: 0,
            bytes: (0, 0),
            exports: Arc::new(AtomicUsize::new(0)),
            arena: None,
        }
    }

    /// Whether `pin_id` names the current pin.
    fn pins(&self, pin_id: u64) -> bool {
        self.pin.is_some() && self.pin_id == pin_id
    }

    /// Releases the current pin; refuses while its bytes are exported. Calls no Python.
    fn unpin(&mut self, what: &str) -> Result<(), Fail> {
        if self.pin.is_some() && export::live(&self.exports) {
            return Err(exported_fail(what));
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

/// A consumer of a ring (see `Ring.consumer`). Pins one message at a time; usable from any
/// thread (see the module doc).
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Consumer {
    held: Handoff<Held>,
    class: DeliveryClass,
    /// Its consumer-table entry (for `pending`).
    index: usize,
    /// Relaxed: statistics, written only by the lease holder.
    received: AtomicU64,
    /// Relaxed: as `received`.
    missed: AtomicU64,
    mapping: Arc<Mapping>,
    /// Memory of freed large received parts, for the next copying `_get_parts`.
    recycler: Arc<Recycler>,
}

impl Consumer {
    pub(crate) fn new(mut sub: Subscriber, class: DeliveryClass, mapping: &Arc<Mapping>) -> Self {
        let index = sub.inner().index();
        Self {
            held: Handoff::new(Held::new(sub), "consumer"),
            class,
            index,
            received: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            mapping: Arc::clone(mapping),
            recycler: Arc::default(),
        }
    }

    /// Takes the consumer state for one call and pins the next message, waiting as `timeout`
    /// says (raises `Timeout` when it runs out). The pin is in the lease's `Held`.
    fn pin_next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Lease<'_, Held>> {
        let end = deadline(timeout)?;
        let no_message = || Fail::new("Timeout", "no message came within the timeout").into();
        let mut lease = self
            .held
            .lease(py, end, |h| h.unpin("pin the next message"))?
            .ok_or_else(no_message)?;
        let got = sliced(py, end, &mut lease, move |lease, slice| {
            lease.check_open()?;
            let sub = lease.get()?.sub;
            // SAFETY: the box is alive (the lease owns `Held`, which frees it only in `Drop`)
            // and no pin borrows it (released when the lease was taken, and a pin taken here
            // is returned at once); the resulting pin is stored in `Held`, which drops it
            // before the box.
            let s: &'static mut Subscriber = unsafe { &mut *sub.as_ptr() };
            match s.recv_pinned_timeout(slice) {
                Ok(p) => Ok(Some(SendPin(p))),
                Err(RecvTimeoutError::Timeout)
                | Err(RecvTimeoutError::Failed(ReadError::Lagging)) => Ok(None),
                Err(e) => Err(errors::recv(e)),
            }
        })?;
        let Some(SendPin(pin)) = got else {
            return Err(no_message());
        };
        let bytes = pin.bytes();
        self.received.fetch_add(1, Ordering::Relaxed);
        self.missed.fetch_add(pin.missed(), Ordering::Relaxed);
        let held = lease.get()?;
        held.bytes = (bytes.as_ptr() as usize, bytes.len());
        held.pin_id += 1;
        held.exports = Arc::new(AtomicUsize::new(0));
        held.pin = Some(pin);
        Ok(lease)
    }
}

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
    /// aborted, `Closed` when another thread closes the consumer meanwhile.
    #[pyo3(signature = (timeout = None))]
    fn pin(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Message> {
        let py = slf.py();
        let mut lease = slf.get().pin_next(py, timeout)?;
        let held = lease.get()?;
        let pin = held
            .pin
            .as_ref()
            .ok_or_else(|| Fail::new("Error", "pin vanished"))?;
        Ok(Message {
            consumer: slf.clone().unbind(),
            exports: Arc::clone(&held.exports),
            pin_id: held.pin_id,
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
        let me = slf.get();
        let mut lease = me.pin_next(py, timeout)?;
        let held = lease.get()?;
        if held.arena.is_none() {
            let a = Arena::attach(&me.mapping).map_err(|f| f.into_py(py))?;
            held.arena = Some(a);
        }
        let (ptr, len) = held.bytes;
        let meta = held.pin.as_ref().map_or([0, 0], |p| p.meta());
        // SAFETY: the pin just taken keeps these `len` bytes mapped and stable.
        let slot = unsafe { core::slice::from_raw_parts(ptr as *const u8, len) };
        let parsed = q::parse(slot, meta, held.arena.as_ref().and_then(Option::as_ref));
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
            let (exports, id) = (Arc::clone(&held.exports), held.pin_id);
            let made = parts
                .iter()
                .map(|g| {
                    Ok(Bound::new(
                        py,
                        Part {
                            consumer: consumer.clone_ref(py),
                            exports: Arc::clone(&exports),
                            siblings: Arc::clone(&siblings),
                            pin_id: id,
                            addr: g.addr,
                            len: g.len,
                        },
                    )?
                    .into_any())
                })
                .collect();
            // The pin goes back with the lease: the parts find it there.
            drop(lease);
            return made;
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
                // stable while pinned (the lease keeps the pin); `dst` is the memory of a new
                // bytearray or `Buffer` of `len` bytes (held in `out`) that no other code has
                // seen yet.
                unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
            }
        };
        if total >= q::RELEASE_GIL_AT {
            unlocked(py, &mut lease, |_| copy());
        } else {
            copy();
        }
        lease.get()?.unpin("release the message")?;
        truncated_since(faults)?;
        Ok(out)
    }

    /// Copies the next message out as `bytes` (waits as `pin` does).
    #[pyo3(signature = (timeout = None))]
    fn recv<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        let mut lease = self.pin_next(py, timeout)?;
        let held = lease.get()?;
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
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let view = crate::producer::View::writable(buffer)?;
        let (dst, room) = view.raw();
        let mut lease = self.pin_next(py, timeout)?;
        let (src, len) = lease.get()?.bytes;
        if len > room {
            lease.get()?.unpin("release the message")?;
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
            // SAFETY: `src..src + len` is the pinned message, mapped and stable while pinned
            // (the lease keeps the pin); `dst..dst + len` lies in the writable view `view`,
            // held (so the object cannot be resized or freed) until after the copy. Raw
            // pointers only, and `copy` allows overlap, so even a view into the segment itself
            // cannot make this unsound.
            unsafe { core::ptr::copy(src as *const u8, dst as *mut u8, len) };
        };
        if len >= q::RELEASE_GIL_AT {
            unlocked(py, &mut lease, |_| copy());
        } else {
            copy();
        }
        drop(view);
        lease.get()?.unpin("release the message")?;
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
        self.received.load(Ordering::Relaxed)
    }

    /// Messages skipped so far (latest and skip modes).
    #[getter]
    fn missed(&self) -> u64 {
        self.missed.load(Ordering::Relaxed)
    }

    /// Messages published that this consumer has not taken yet (0 once closed): what
    /// `close()` would discard. A snapshot; the producer may publish more meanwhile.
    #[getter]
    fn pending(&self) -> u64 {
        if self.held.is_closed() {
            return 0;
        }
        let head = producer_info(&*self.mapping).head;
        consumer_info(&*self.mapping, self.index).map_or(0, |c| head.saturating_sub(c.cursor))
    }

    /// Whether the consumer is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.held.is_closed()
    }

    /// Leaves the ring (raises `BufferError` while the current message is exported). From
    /// another thread, a call waiting in `pin`/`recv` raises `Closed` within one slice.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(mut h) = self.held.close(py, |h| h.unpin("close the consumer"))? {
            // Touch the subscriber once, so a closed ring is left now, not at collection.
            let _ = h.sub();
        }
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
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
    /// Runs `f` on the consumer state if this message's pin is still the current one. `f`
    /// runs under the consumer's lock: it must not call Python. The GIL (`_py`) is held, so
    /// the pin stays current until the caller releases the GIL (see the module doc).
    fn with_pin<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Held) -> Result<T, Fail>,
    ) -> PyResult<T> {
        let pin_id = self.pin_id;
        let done = self
            .consumer
            .get()
            .held
            .with(|h| h.pins(pin_id).then(|| f(h)))
            .flatten();
        done.unwrap_or_else(|| {
            Err(Fail::new(
                "Closed",
                "this message was released (closed, or a later pin replaced it)",
            ))
        })
        .map_err(|f| f.into_py(py))
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
        let (ptr, len) = self.with_pin(py, |h| Ok(h.bytes))?;
        // SAFETY: the pin is current and the GIL is held since `with_pin` checked it, so
        // these bytes are mapped and stable (pins are released only with the GIL).
        Ok(PyBytes::new(py, unsafe {
            core::slice::from_raw_parts(ptr as *const u8, len)
        }))
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
        Python::with_gil(|_py| release_pin(&self.consumer, self.pin_id));
    }
}

/// Drops one export of the message `obj` (a buffer view or a DLPack capsule went away).
fn release_export(_py: Python<'_>, obj: &Bound<'_, PyAny>) {
    if let Ok(msg) = obj.downcast::<Message>() {
        export::release(&msg.get().exports);
    }
}

/// Whether `consumer`'s current pin is the one numbered `pin_id` (for `queue::Part`); the
/// GIL (`_py`) keeps it current while it is held.
pub(crate) fn pin_is(_py: Python<'_>, consumer: &Py<Consumer>, pin_id: u64) -> bool {
    consumer.get().held.with(|h| h.pins(pin_id)) == Some(true)
}

/// Releases `consumer`'s pin if it is still the one numbered `pin_id` and nothing exports it
/// (a `Message` or the last `queue::Part` of a message went away). Quietly does nothing
/// otherwise. Called with the GIL held (from a destructor; see the module doc).
pub(crate) fn release_pin(consumer: &Py<Consumer>, pin_id: u64) {
    consumer.get().held.with(|h| {
        if h.pin_id == pin_id && !export::live(&h.exports) {
            h.pin = None;
        }
    });
}
