//! `shmring.Consumer`: pinned zero-copy reads, several alive at once, and copying reads.
//!
//! Every read holds its message with a ring-core hold (`Subscriber::recv_held_timeout`): a
//! token that borrows nothing, so the consumer state needs no self-referential borrow and a
//! consumer can keep up to `max_pins` messages (at most `ring_core::MAX_HOLDS`) pinned while it
//! reads the next. `recv` and `recv_into` copy under ring-core's single pin (`Pinned`, taken
//! and dropped within the call, no lifetime extended), which is not a hold, so they work with
//! `max_pins` messages pinned; the queue's copying get holds its message for the copy only.
//!
//! The state is split in two:
//! - [`Held`] (the subscriber and the ring-core holds, by message id) lives in a [`Handoff`],
//!   lent to one blocking call at a time, so `close()` from another thread wakes a waiting
//!   call within one slice;
//! - [`Pins`] (what Python sees of each pinned message: its bytes and its buffer-export count)
//!   lives under its own mutex, so a `Message` is read, exported and released even while
//!   another thread's `pin` has the subscriber.
//!
//! A message is *let go* (its record leaves [`Pins`]) only with the GIL held and no export
//! alive; its hold is given back to the ring afterwards, by whoever has [`Held`] next (see
//! [`Consumer::settle`]). So a `Message` method that found its record with the GIL held may
//! use the bytes until it releases the GIL, and an export keeps them for as long as it lives.

use core::time::Duration;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ring_core::inspect::{consumer_info, producer_info};
use ring_core::{DeliveryClass, Hold, ReadError};
use ring_os::asyncio::ReadyWait;
use ring_os::{
    raw::{ConsumerExt as _, Mapping, ShmReadError},
    RecvError, RecvTimeoutError, Subscriber,
};

use crate::aio::{Notifier, Waiters, BUSY, PENDING, READY};

use crate::errors::{self, exported_fail, Fail};
use crate::export;
use crate::handoff::{Handoff, Lease};
use crate::recycle::Recycler;
use crate::wait::{deadline, sliced, GiveBack};

mod get;
mod message;
mod part;
mod pins;
mod recv;

pub(crate) use message::Message;
pub(crate) use part::Part;
use pins::{lock, Held, PinRecord, Pins};

/// A consumer of a ring (see `Ring.consumer`). Pins up to `max_pins` messages at once; usable
/// from any thread (see the module doc).
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Consumer {
    held: Handoff<Held>,
    pins: Mutex<Pins>,
    class: DeliveryClass,
    max_pins: usize,
    /// Its consumer-table entry (for `pending`).
    index: usize,
    /// The asyncio coroutines waiting on this consumer: the waker of `Held::ready`.
    aio: Arc<Waiters>,
    /// Relaxed: statistics, written only by the lease holder.
    received: AtomicU64,
    /// Relaxed: as `received`.
    missed: AtomicU64,
    mapping: Arc<Mapping>,
    /// Memory of freed large received parts, for the next copying `_get_parts`.
    recycler: Arc<Recycler>,
    /// The spill segments this consumer mapped, kept for the next messages in them.
    spills: crate::spill::Mapped,
    /// The group this consumer is a member of (`Ring.consumer(group=)`).
    group: Option<String>,
}

/// A call's turn with the consumer state: the lease, which goes back when the turn ends, and
/// then the holds let go meanwhile are settled (a message another thread let go while the
/// state was lent is given back to the ring now, not at the next call).
struct Turn<'a> {
    lease: Lease<'a, Held>,
    me: &'a Consumer,
}

impl Turn<'_> {
    fn held(&mut self) -> Result<&mut Held, Fail> {
        self.lease.get()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.lease.give_back();
        self.me.settle();
    }
}

/// A message one call holds: its hold and where its bytes are.
struct Taken {
    hold: Hold,
    bytes: (usize, usize),
}

impl Consumer {
    pub(crate) fn new(
        mut sub: Subscriber,
        class: DeliveryClass,
        mapping: &Arc<Mapping>,
        max_pins: usize,
        group: Option<String>,
    ) -> PyResult<Self> {
        sub.set_max_holds(max_pins)
            .map_err(|e| PyErr::from(errors::read(e)))?;
        let index = sub.inner().index();
        let held = Held {
            ready: ReadyWait::new(),
            sub,
            holds: Vec::new(),
            last_id: 0,
            arena: None,
        };
        Ok(Self {
            held: Handoff::new(held, "consumer"),
            pins: Mutex::default(),
            class,
            max_pins,
            index,
            aio: Arc::default(),
            received: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            mapping: Arc::clone(mapping),
            recycler: Arc::default(),
            spills: crate::spill::Mapped::default(),
            group,
        })
    }

    /// Gives back the holds of messages let go, if the state is idle (otherwise its lease
    /// holder does, between slices or when its turn ends). Calls no Python.
    fn settle(&self) {
        self.held.with(|h| h.settle(&self.pins));
    }

    /// Lets message `id` go and gives its hold back when the state is idle. With the GIL held
    /// (records leave only with it).
    fn let_go(&self, _py: Python<'_>, id: u64, what: &str) -> Result<(), Fail> {
        if lock(&self.pins).let_go(id, what)? {
            self.settle();
        }
        Ok(())
    }

    /// Takes the consumer state for one call, waiting up to `end` while another call has it;
    /// `prepare` runs on it first (see `Handoff::lease`), after the holds let go are settled.
    fn turn(
        &self,
        py: Python<'_>,
        end: Option<Instant>,
        mut prepare: impl FnMut(&mut Held) -> Result<(), Fail>,
    ) -> PyResult<Turn<'_>> {
        let lease = self
            .held
            .lease(py, end, |h| {
                h.settle(&self.pins);
                prepare(h)
            })?
            .ok_or_else(no_message)?;
        Ok(Turn { lease, me: self })
    }

    /// Counts one message received, `missed` skipped before it.
    fn count(&self, missed: u64) {
        self.received.fetch_add(1, Ordering::Relaxed);
        self.missed.fetch_add(missed, Ordering::Relaxed);
    }

    /// Waits (GIL released, in slices) until a message is there to read; raises `Timeout`
    /// when `end` passes first, and what the stream says (`Disconnected`, `Aborted`...).
    fn wait_message(
        &self,
        py: Python<'_>,
        end: Option<Instant>,
        turn: &mut Turn<'_>,
    ) -> PyResult<()> {
        let pins = &self.pins;
        let ready = sliced(py, end, &mut turn.lease, |lease, slice| {
            lease.check_open()?;
            let h = lease.get()?;
            h.settle(pins);
            match h.sub.inner().wait_message(slice) {
                Ok(()) => Ok(Some(())),
                Err(ShmReadError::Read(ReadError::Timeout)) => Ok(None),
                Err(ShmReadError::Read(e)) => Err(errors::read(e)),
                Err(ShmReadError::ProducerGone) => Err(Fail::new(
                    "Disconnected",
                    format!("{}", ShmReadError::ProducerGone),
                )),
            }
        })?;
        ready.ok_or_else(no_message)
    }

    /// Takes the consumer state for one call (after `prepare`) and holds the next message,
    /// waiting as `timeout` says (raises `Timeout` when it runs out, and `TooManyPins` at once
    /// when `max_pins` messages are pinned).
    fn take_next(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        prepare: impl FnMut(&mut Held) -> Result<(), Fail>,
    ) -> PyResult<(Turn<'_>, Taken)> {
        let end = deadline(timeout)?;
        let mut turn = self.turn(py, end, prepare)?;
        let pins = &self.pins;
        let got = sliced(py, end, &mut turn.lease, |lease, slice| {
            lease.check_open()?;
            let h = lease.get()?;
            // Messages let go while this call waits free their slots now (a gating producer
            // may be waiting for the oldest), and no longer count against `max_pins`.
            h.settle(pins);
            take(&mut h.sub, slice)
        })?;
        let taken = got.ok_or_else(no_message)?;
        self.count(taken.hold.missed());
        Ok((turn, taken))
    }

    /// Makes the message `taken` a pinned one (a record Python sees); returns its id and its
    /// export count.
    fn keep(
        &self,
        turn: &mut Turn<'_>,
        taken: Taken,
        spill: Option<Arc<crate::spill::Received>>,
    ) -> Result<(u64, Arc<AtomicUsize>), Fail> {
        let h = turn.held()?;
        h.last_id += 1;
        let id = h.last_id;
        h.holds.push((id, taken.hold));
        let exports = Arc::new(AtomicUsize::new(0));
        lock(&self.pins).live.push(PinRecord {
            id,
            exports: Arc::clone(&exports),
            spill,
        });
        Ok((id, exports))
    }
}

/// The `Timeout` of a read that found no message in time.
fn no_message() -> PyErr {
    Fail::new("Timeout", "no message came within the timeout").into()
}

/// One try of a blocking read: holds the next message if one comes within `slice`.
fn take(sub: &mut Subscriber, slice: Duration) -> Result<Option<Taken>, Fail> {
    match sub.recv_held_timeout(slice) {
        Ok(hold) => {
            let Some(b) = sub.held_bytes(&hold) else {
                let _ = sub.release(hold);
                return Err(Fail::new("Error", "a hold just taken has no bytes"));
            };
            let bytes = (b.as_ptr() as usize, b.len());
            Ok(Some(Taken { hold, bytes }))
        }
        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Failed(ReadError::Lagging)) => {
            Ok(None)
        }
        Err(e) => Err(errors::recv(e)),
    }
}

#[pymethods]
impl Consumer {
    /// Pins the next message and returns it as a zero-copy `Message`. Waits up to `timeout`
    /// seconds (`None`: as long as it takes; raises `Timeout`). Earlier messages stay pinned
    /// until each is released (`release()`, its `with` block, its collection); with `max_pins`
    /// of them alive this raises `TooManyPins` at once. Raises `Disconnected` once the stream
    /// was closed and drained, `Aborted` if it was aborted, `Closed` when another thread closes
    /// the consumer meanwhile.
    #[pyo3(signature = (timeout = None))]
    fn pin(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<Message> {
        let py = slf.py();
        let me = slf.get();
        let (mut turn, taken) = me.take_next(py, timeout, |_| Ok(()))?;
        let (seq, missed, len, meta, redelivered) = (
            taken.hold.seq(),
            taken.hold.missed(),
            taken.hold.len(),
            taken.hold.meta(),
            taken.hold.redelivered(),
        );
        let bytes = taken.bytes;
        let (id, exports) = me.keep(&mut turn, taken, None)?;
        drop(turn);
        Ok(Message {
            consumer: slf.clone().unbind(),
            exports,
            id,
            bytes,
            seq,
            missed,
            len,
            meta,
            redelivered,
        })
    }

    /// The queue's get (see `shmring.queue`): lets the previous zero-copy message go (raises
    /// `BufferError` while a view of it lives), pins the next message, validates its part table
    /// and returns its parts: with `zero_copy`, read-only `Part` objects viewing the bytes in
    /// the ring (the message stays pinned until the last part goes, the next get, or `close`);
    /// otherwise copies — part 0 (the pickle stream) as `bytes`, the others as writable
    /// `bytearray`s (large ones copied with the GIL released) — and releases the message.
    /// Waits as `pin` does. A message that is not a valid queue message is consumed and
    /// raises `Corrupt`. Returns the parts and whether the message is a redelivered one (see
    /// `Message.redelivered`).
    #[pyo3(signature = (timeout = None, zero_copy = false))]
    fn _get_parts<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
        zero_copy: bool,
    ) -> PyResult<(Vec<Bound<'py, PyAny>>, bool)> {
        Self::get_parts(slf, timeout, zero_copy)
    }

    /// Copies the next message out as `bytes` (waits as `pin` does). A copying read pins
    /// its message for the copy only, with a pin of its own: it works with `max_pins`
    /// messages pinned.
    #[pyo3(signature = (timeout = None))]
    fn recv<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        self.recv_bytes(py, timeout)
    }

    /// Copies the next message into `buffer` (any writable C-contiguous buffer: `bytearray`,
    /// numpy array, `memoryview`, `mmap`) and returns its length; waits as `pin` does, and
    /// copies with the GIL released. The reader of large messages reuses one buffer instead of
    /// a new `bytes` each time. A message longer than the buffer raises `TooLarge` and is
    /// consumed (a buffer of the ring's `slot_size` holds any message). As `recv`, it works
    /// with `max_pins` messages pinned.
    #[pyo3(signature = (buffer, timeout = None))]
    fn recv_into(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        self.recv_into_buffer(py, buffer, timeout)
    }

    /// `await consumer.recv_async()`: `recv` for asyncio (see `shmring._aio`): waits without a
    /// thread and without blocking the event loop, woken through the loop's readiness fd.
    /// Cancel-safe: a cancelled await reads nothing. Raises as `recv`.
    fn recv_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("shmring._aio")?.getattr("recv")?.call1((slf,))
    }

    /// `await consumer.pin_async()`: `pin` for asyncio (as `recv_async`).
    fn pin_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("shmring._aio")?.getattr("pin")?.call1((slf,))
    }

    /// One poll of an asyncio wait (see `aio`): adds the coroutine `token` of `notifier`'s
    /// loop to the waiters, then `READY` when a non-blocking read would find a message or the
    /// stream's end, `PENDING` after registering with the reactor, `BUSY` while a blocking
    /// call of another thread has the consumer. Raises `Disconnected` (the publisher's process
    /// died), `Closed`, `Evicted`, `Corrupt`/`Truncated` as the blocking calls do.
    fn _poll_ready(&self, py: Python<'_>, notifier: &Notifier, token: u64) -> PyResult<u8> {
        self.aio.add(&notifier.signal, token);
        let now = Some(Instant::now());
        let pins = &self.pins;
        let Some(lease) = self.held.lease(py, now, |h| {
            h.settle(pins);
            Ok(())
        })?
        else {
            return Ok(BUSY);
        };
        let mut turn = Turn { lease, me: self };
        let h = turn.held()?;
        let waker = core::task::Waker::from(Arc::clone(&self.aio));
        let mut cx = core::task::Context::from_waker(&waker);
        match h.sub.poll_ready(&mut h.ready, &mut cx) {
            core::task::Poll::Ready(Ok(())) => Ok(READY),
            core::task::Poll::Pending => Ok(PENDING),
            core::task::Poll::Ready(Err(e)) => Err(errors::recv(match e {
                RecvError::Disconnected => RecvTimeoutError::Disconnected,
                RecvError::Failed(e) => RecvTimeoutError::Failed(e),
            })
            .into_py(py)),
        }
    }

    /// The coroutine `token` of `notifier`'s loop stops waiting (it read, failed or was
    /// cancelled): when it was the last, the wait's registration and waiter count go back now
    /// (if a blocking call has the consumer, at the next poll or when the consumer goes).
    fn _cancel_ready(&self, notifier: &Notifier, token: u64) {
        if self.aio.remove(&notifier.signal, token) {
            self.held.with(|h| h.sub.cancel_ready(&mut h.ready));
        }
    }

    /// This ring's `consumer_waiters` (consumers counted as parked now; tests).
    fn _waiters(&self) -> u32 {
        use ring_core::Memory as _;
        // Relaxed: a snapshot for tests.
        self.mapping
            .producer_line()
            .consumer_waiters
            .load(Ordering::Relaxed)
    }

    /// The delivery mode: `"gating"`, `"latest"` or `"skip"`.
    #[getter]
    fn mode(&self) -> &'static str {
        crate::ring::mode_of(self.class)
    }

    /// The group this consumer is a member of (`Ring.consumer(group=)`), or None.
    #[getter]
    fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// How many messages this consumer may keep pinned at once (`Ring.consumer(max_pins=)`).
    #[getter]
    fn max_pins(&self) -> usize {
        self.max_pins
    }

    /// How many messages are pinned now (alive and not released).
    #[getter]
    fn pins(&self) -> usize {
        lock(&self.pins).live.len()
    }

    /// Freed received buffers this consumer keeps for reuse (at most two; see `get`).
    fn _recycled(&self) -> usize {
        self.recycler.kept()
    }

    /// Spill segments this consumer keeps mapped for the next messages in them (at most four;
    /// see `get`).
    fn _spills_mapped(&self) -> usize {
        self.spills.kept()
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
    /// `close()` would discard. For a group member: what no member has taken yet (the
    /// group's; they stay for the other members). A snapshot; the producer may publish more
    /// meanwhile.
    #[getter]
    fn pending(&self) -> u64 {
        if self.held.is_closed() {
            return 0;
        }
        if let Some(name) = &self.group {
            return crate::ring::group_state(&self.mapping, name).map_or(0, |(unread, _)| unread);
        }
        let head = producer_info(&*self.mapping).head;
        consumer_info(&*self.mapping, self.index).map_or(0, |c| head.saturating_sub(c.cursor))
    }

    /// Whether the consumer is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.held.is_closed()
    }

    /// Leaves the ring, releasing every pinned message (raises `BufferError`, and leaves
    /// everything as it was, while any of them is exported). From another thread, a call
    /// waiting in `pin`/`recv` raises `Closed` within one slice.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let pins = &self.pins;
        let spills = core::cell::RefCell::new(Vec::new());
        let closed = self.held.close(py, |_| {
            let mut p = lock(pins);
            if p.live.iter().any(|r| export::live(&r.exports)) {
                return Err(exported_fail("close the consumer"));
            }
            // Every message is let go; the subscriber's drop below gives their holds back.
            let p = core::mem::take(&mut *p);
            let kept = p.live.into_iter().filter_map(|r| r.spill);
            spills
                .borrow_mut()
                .extend(kept.chain(p.let_go.into_iter().filter_map(|(_, s)| s)));
            Ok(())
        })?;
        // Dropping the subscriber now leaves the ring now, not at collection.
        drop(closed);
        // Coroutines awaiting this consumer try again and raise `Closed`.
        self.aio.wake_all();
        for spill in spills.into_inner() {
            spill.done();
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
    if ring_os::raw::sigbus::repaired_faults() != faults {
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

/// Whether `consumer`'s message `id` is still pinned (for `queue::Part`); the GIL (`_py`)
/// keeps it pinned while it is held (see the module doc).
pub(crate) fn pin_is(_py: Python<'_>, consumer: &Py<Consumer>, id: u64) -> bool {
    lock(&consumer.get().pins).find(id).is_some()
}

/// Lets `consumer`'s message `id` go if it is still pinned and nothing exports it (a
/// `Message` or the last `queue::Part` of a message went away); quietly does nothing
/// otherwise. Called with the GIL held (from a destructor; see the module doc). Calls no
/// Python and makes no error object.
pub(crate) fn release_pin(consumer: &Py<Consumer>, id: u64) {
    let me = consumer.get();
    if lock(&me.pins).let_go(id, "").unwrap_or(false) {
        me.settle();
    }
}
