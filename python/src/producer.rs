//! `shmring.Producer` and `shmring.Claim`: copying publishes and in-place writes.
//!
//! In-place writes follow ring-core's rule for `WriteSlot::loan`: a writable view of a claimed
//! slot is sound only in a pin-only ring, where no consumer reads a slot optimistically while it
//! is written. `claim` refuses other rings with `NotPinOnly` (use `publish`, which copies).
//! As with pins, the loan borrows the publisher: [`Lent`] owns the publisher on the heap and
//! the loan next to it, and the export count of the loan's buffer keeps the slot claimed while
//! any view of it lives, so a stale view can never write into a later message.
//!
//! The producer is usable from any thread: [`Lent`] lives in a [`Handoff`], lent to one
//! blocking call at a time, so `close()` from another thread wakes a waiting `publish`/`put`
//! within one slice (see `handoff`).

use core::ffi::c_int;
use core::ptr::NonNull;
use core::time::Duration;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use ring_core::Memory as _;
use ring_os::{
    raw::{Mapping, ProducerExt as _},
    Loan, Publisher, SendTimeoutError,
};
use std::time::Instant;

use crate::errors::{self, exported_fail, Fail};
use crate::export;
use crate::handoff::{Handoff, Lease};
use crate::queue::{self as q, SendState};
use crate::wait::{deadline, sliced, unlocked};

/// A loan with its borrow of the publisher extended to `'static` (see [`Lent`]).
type StaticLoan = Loan<'static>;

/// The publisher, the current loan and the buffer exports of that loan.
struct Lent {
    /// From `Box::leak`; freed in `Drop`, after `loan`.
    publisher: NonNull<Publisher>,
    loan: Option<StaticLoan>,
    loan_id: u64,
    bytes: (usize, usize),
    /// Live buffer exports of the current loan (shared with its `Claim`); fresh per loan.
    exports: Arc<AtomicUsize>,
    /// The queue's allocator state, attached by the first `_put_parts`.
    queue: Option<SendState>,
}

// SAFETY: `Lent` owns the publisher (as a `Box` would) and a loan that borrows only it; both
// are `Send`, and nothing in `Lent` is shared with another owner. (It is not `Sync`: the
// `Handoff` mutex gives one thread at a time access to it.)
unsafe impl Send for Lent {}

impl Lent {
    /// The publisher; refuses (`Busy`) while a claimed slot is open. Calls no Python.
    fn publisher(&mut self) -> Result<&mut Publisher, Fail> {
        if self.loan.is_some() {
            return Err(Fail::new(
                "Busy",
                "a claimed slot is still open: publish or abort it first",
            ));
        }
        // SAFETY: the box is alive until `Drop`, and no loan borrows it (checked above).
        Ok(unsafe { self.publisher.as_mut() })
    }

    /// The publisher behind the lease `l`, with its borrow extended to `'static` for a loan
    /// that `Lent` keeps (or drops) before the box.
    ///
    /// # Safety
    ///
    /// No loan is open (the lease was taken with `Lent::publisher` as its check and nothing
    /// opened one since), and the returned reference is not used after the lease goes back.
    unsafe fn publisher_static(l: &mut Lease<'_, Self>) -> Result<&'static mut Publisher, Fail> {
        let p = l.get()?.publisher;
        // SAFETY: the caller's obligations: the lease owns the box exclusively and no loan
        // borrows it.
        Ok(unsafe { &mut *p.as_ptr() })
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // The loan borrows the publisher: it goes first (a dropped loan gives its slot back).
        self.loan = None;
        // SAFETY: from `Box::leak` in `Producer::new`, freed only here; the loan is gone.
        drop(unsafe { Box::from_raw(self.publisher.as_ptr()) });
    }
}

/// Where a message's out-of-slot parts go.
enum Out {
    /// An allocation of the arena at this address.
    Arena(usize),
    /// A spill segment: a pooled one reused or a new one (see `spill`).
    Spill(crate::spill::Target),
}

/// A loan carried out of the GIL-free closure.
struct SendLoan(StaticLoan);
// SAFETY: as for `Lent`.
unsafe impl Send for SendLoan {}

/// The ring's one producer (see `Ring.producer`). `close()` ends the stream as finished;
/// dropping it (or `abort()`) ends it as aborted: consumers drain, then get `Aborted`. Usable
/// from any thread (see the module doc).
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Producer {
    lent: Handoff<Lent>,
    capacity: usize,
    pin_only: bool,
    mapping: Arc<Mapping>,
    /// Messages published (the next sequence number). Relaxed: a statistic, raised with
    /// `fetch_max` after each send.
    sent: AtomicU64,
    /// Set once `allocator()` lent the ring's allocator out (then the queue refuses to run).
    /// Relaxed: set and read with the GIL held.
    arena_lent: AtomicBool,
    /// Set once this producer created a group (`create_group`): the group then keeps what is
    /// published for its members, so the queue does not wait for a reader to be registered,
    /// and `close` first hands dead members' messages to the group. Relaxed: set and read
    /// with the GIL held.
    grouped: AtomicBool,
}

/// A contiguous buffer-protocol view of a Python object, released on drop.
pub(crate) struct View(ffi::Py_buffer);

impl View {
    /// A read-only view.
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::with_flags(obj, ffi::PyBUF_SIMPLE, "")
    }

    /// A writable view.
    pub(crate) fn writable(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::with_flags(obj, ffi::PyBUF_WRITABLE, "writable ")
    }

    /// The writable view's memory: its address and length.
    pub(crate) fn raw(&self) -> (usize, usize) {
        (
            self.0.buf as usize,
            usize::try_from(self.0.len).unwrap_or(0),
        )
    }

    fn with_flags(obj: &Bound<'_, PyAny>, flags: core::ffi::c_int, what: &str) -> PyResult<Self> {
        let mut v = core::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: `v` is writable storage for one `Py_buffer`; on success the interpreter
        // filled it and we release it exactly once in `Drop`.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), v.as_mut_ptr(), flags) };
        if rc != 0 {
            let e = PyErr::fetch(obj.py());
            return Err(PyTypeError::new_err(format!(
                "expected a C-contiguous {what}object supporting the buffer protocol (bytes, \
                 bytearray, memoryview, numpy array), got {}: {e}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            )));
        }
        // SAFETY: filled by `PyObject_GetBuffer` above.
        Ok(Self(unsafe { v.assume_init() }))
    }

    fn bytes(&self) -> &[u8] {
        let len = usize::try_from(self.0.len).unwrap_or(0);
        if len == 0 {
            return &[];
        }
        // SAFETY: a PyBUF_SIMPLE view is `len` contiguous bytes at `buf`, alive until released.
        unsafe { core::slice::from_raw_parts(self.0.buf.cast::<u8>(), len) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the view was filled by `PyObject_GetBuffer` and is released once; every
        // `View` is dropped with the GIL held (it never leaves a GIL-holding scope).
        unsafe { ffi::PyBuffer_Release(&mut self.0) };
    }
}

/// The view's bytes, sent into the GIL-free closure (the view outlives the call).
#[derive(Clone, Copy)]
struct Bytes(*const u8, usize);
// SAFETY: the bytes stay valid for the call (the `View` is held across it).
unsafe impl Send for Bytes {}

impl Producer {
    pub(crate) fn new(publisher: Publisher, mapping: &Arc<Mapping>) -> Self {
        let g = mapping.geometry();
        let sent = publisher.sent();
        Self {
            lent: Handoff::new(
                Lent {
                    publisher: NonNull::from(Box::leak(Box::new(publisher))),
                    loan: None,
                    loan_id: 0,
                    bytes: (0, 0),
                    exports: Arc::new(AtomicUsize::new(0)),
                    queue: None,
                },
                "producer",
            ),
            capacity: g.slot_capacity(),
            pin_only: g.config().pin_only,
            mapping: Arc::clone(mapping),
            sent: AtomicU64::new(sent),
            arena_lent: AtomicBool::new(false),
            grouped: AtomicBool::new(false),
        }
    }

    /// Whether the producer is closed (for the allocator it lent).
    pub(crate) fn is_closed(&self) -> bool {
        self.lent.is_closed()
    }

    /// Takes the producer state for one call (waiting up to `end` for another thread's call;
    /// `Full` when that does not end in time); refuses while a claimed slot is open.
    fn lease(&self, py: Python<'_>, end: Option<Instant>) -> PyResult<Lease<'_, Lent>> {
        self.lent
            .lease(py, end, |l| l.publisher().map(drop))?
            .ok_or_else(|| Fail::new("Full", "another thread's call held the producer").into())
    }

    /// Records that message `seq` went out.
    fn published(&self, seq: u64) -> u64 {
        self.sent.fetch_max(seq + 1, Ordering::Relaxed);
        seq
    }

    fn too_large(&self, len: usize) -> PyErr {
        Fail::new(
            "TooLarge",
            format!(
                "a {len}-byte message does not fit in a {}-byte slot",
                self.capacity
            ),
        )
        .into()
    }

    /// Sends the bytes, waiting as `timeout` says.
    fn send(&self, py: Python<'_>, data: Bytes, timeout: Option<f64>) -> PyResult<u64> {
        if data.1 > self.capacity {
            return Err(self.too_large(data.1));
        }
        let end = deadline(timeout)?;
        let mut lease = self.lease(py, end)?;
        let sent = sliced(py, end, &mut lease, move |lease, slice| {
            let data = data;
            lease.check_open()?;
            // SAFETY: the lease was taken with `publisher()` as its check (no loan open) and
            // the reference is used only within this slice; the view behind `data` is held by
            // our caller across this call.
            let (publisher, bytes) = unsafe {
                (
                    Lent::publisher_static(lease)?,
                    core::slice::from_raw_parts(data.0, data.1),
                )
            };
            match publisher.send_timeout(bytes, slice) {
                Ok(seq) => Ok(Some(seq)),
                Err(SendTimeoutError::Timeout) => Ok(None),
                Err(e) => Err(errors::send(e)),
            }
        })?;
        let seq =
            sent.ok_or_else(|| Fail::new("Full", "the ring stayed full for the whole timeout"))?;
        Ok(self.published(seq))
    }

    /// Waits (GIL released, in slices) until `done(publisher, slice)` says so; False on
    /// timeout.
    fn wait_until(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        done: impl Fn(&mut Publisher, Duration) -> bool + Send + Sync,
    ) -> PyResult<bool> {
        let end = deadline(timeout)?;
        let Some(mut lease) = self.lent.lease(py, end, |l| l.publisher().map(drop))? else {
            return Ok(false);
        };
        let got = sliced(py, end, &mut lease, |lease, slice| {
            lease.check_open()?;
            Ok(done(lease.get()?.publisher()?, slice).then_some(()))
        })?;
        Ok(got.is_some())
    }
}

#[pymethods]
impl Producer {
    /// Copies any C-contiguous buffer-protocol object into the next slot and publishes it;
    /// returns its sequence number. Waits while gating consumers (or pins) hold the ring full:
    /// up to `timeout` seconds (`None`: as long as it takes), then raises `Full`.
    #[pyo3(signature = (data, timeout = None))]
    fn publish(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let view = View::get(data)?;
        let b = view.bytes();
        let r = self.send(py, Bytes(b.as_ptr(), b.len()), timeout);
        drop(view);
        r
    }

    /// Publishes only if a slot is free now; raises `Full` otherwise.
    fn try_publish(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.publish(py, data, Some(0.0))
    }

    /// Claims the next slot for writing `nbytes` in place (pin-only rings only). Use as
    /// `with producer.claim(n) as buf:` — `buf` is a writable memoryview of exactly `n` bytes
    /// of the slot; leaving the block publishes, an exception aborts. Waits up to `timeout`.
    #[pyo3(signature = (nbytes, timeout = None))]
    fn claim(slf: &Bound<'_, Self>, nbytes: usize, timeout: Option<f64>) -> PyResult<Claim> {
        let py = slf.py();
        let me = slf.get();
        if !me.pin_only {
            return Err(Fail::new(
                "NotPinOnly",
                "in-place writes need a pin-only ring (Ring.create(..., pin_only=True)): in \
                 other rings a consumer may read a slot while it is written; use publish(), \
                 which copies",
            )
            .into());
        }
        if nbytes > me.capacity {
            return Err(me.too_large(nbytes));
        }
        let end = deadline(timeout)?;
        let mut lease = me.lease(py, end)?;
        let got = sliced(py, end, &mut lease, move |lease, slice| {
            lease.check_open()?;
            // SAFETY: as in `send`; the loan is stored in `Lent`, which drops it before the
            // box, or dropped before the lease goes back.
            let publisher = unsafe { Lent::publisher_static(lease)? };
            match publisher.loan(nbytes, slice) {
                Ok(loan) => Ok(Some(SendLoan(loan))),
                Err(SendTimeoutError::Timeout) => Ok(None),
                Err(e) => Err(errors::send(e)),
            }
        })?;
        let Some(SendLoan(mut loan)) = got else {
            return Err(Fail::new("Full", "the ring stayed full for the whole timeout").into());
        };
        let bytes = loan.bytes();
        let lent = lease.get()?;
        lent.bytes = (bytes.as_mut_ptr() as usize, bytes.len());
        lent.loan = Some(loan);
        lent.loan_id += 1;
        lent.exports = Arc::new(AtomicUsize::new(0));
        Ok(Claim {
            producer: slf.clone().unbind(),
            exports: Arc::clone(&lent.exports),
            loan_id: lent.loan_id,
            nbytes,
            view: Mutex::new(None),
        })
    }

    /// The queue's put (see `shmring.queue`): writes the buffer-protocol objects `parts` (the
    /// pickle stream, then its out-of-band buffers) as one message — the parts that fit in the
    /// slot inline, the rest into one allocation of the ring's allocator — copying each straight
    /// from its object into the segment (large ones with the GIL released). Waits up to
    /// `timeout` for a consumer to be registered and for a free slot; raises `Full` when
    /// either does not come, `TooLarge` when the message exceeds the ring's share of its arena.
    /// Returns the sequence number.
    #[pyo3(signature = (parts, timeout = None))]
    fn _put_parts(
        &self,
        py: Python<'_>,
        parts: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        if !self.pin_only {
            return Err(Fail::new("NotPinOnly", "a queue needs a pin-only ring").into());
        }
        let views = parts.iter().map(View::get).collect::<PyResult<Vec<_>>>()?;
        let lens: Vec<usize> = views.iter().map(|v| v.bytes().len()).collect();
        let total: usize = lens.iter().sum();
        let too_many = || {
            Fail::new(
                "TooLarge",
                format!("{} parts do not fit in a slot's header", lens.len()),
            )
        };
        let plan = q::plan(&lens, self.capacity, 0).ok_or_else(too_many)?;
        let end = deadline(timeout)?;
        let mut lease = self.lease(py, end)?;
        let lent = lease.get()?;
        // Relaxed: see `arena_lent`.
        if self.arena_lent.load(Ordering::Relaxed) {
            return Err(Fail::new("Busy", "this producer lent its allocator (allocator())").into());
        }
        if lent.queue.is_none() {
            lent.queue = Some(SendState::new(&self.mapping).map_err(|f| f.into_py(py))?);
        }
        let (max_alloc, queue_name) = lent
            .queue
            .as_ref()
            .map_or((0, None), |s| (s.max_alloc, s.name.clone()));
        // The layout should the message spill (see `spill`): planned now, so the loan is long
        // enough for either; the spill's name is made once the sequence number is known.
        let spill_plan = match &queue_name {
            Some(qn) if plan.arena_len > 0 => {
                let probe = crate::spill::name(qn, u64::MAX);
                Some(
                    q::plan(&lens, self.capacity, crate::spill::record_len(&probe))
                        .ok_or_else(too_many)?,
                )
            }
            _ => None,
        };
        if plan.arena_len > 0 && spill_plan.is_none() && plan.arena_len > max_alloc {
            return Err(Fail::new(
                "TooLarge",
                format!(
                    "a message of {total} bytes does not fit: this ring takes {} bytes inline \
                     and {max_alloc} in its arena, and only a named queue can spill",
                    self.capacity
                ),
            )
            .into());
        }
        let slots = self.mapping.geometry().slots() as u64;
        // Relaxed: see `grouped`.
        let grouped = self.grouped.load(Ordering::Relaxed);
        let slot_len = plan
            .slot_len
            .max(spill_plan.as_ref().map_or(0, |p| p.slot_len));
        let got = sliced(py, end, &mut lease, move |lease, slice| {
            lease.check_open()?;
            // SAFETY: as in `claim`: the loan is kept in `Lent` (or sent, or dropped) before
            // the lease goes back.
            let publisher = unsafe { Lent::publisher_static(lease)? };
            // A group keeps the message for its members, present or to come.
            if !grouped && publisher.subscribers() == 0 && !publisher.wait_for_subscribers(1, slice)
            {
                return Ok(None);
            }
            // One producer: the loan's sequence number is the next one.
            let seq = publisher.sent();
            match publisher.loan(slot_len, slice) {
                Ok(loan) => Ok(Some((seq, SendLoan(loan)))),
                Err(SendTimeoutError::Timeout) => Ok(None),
                Err(e) => Err(errors::send(e)),
            }
        })?;
        let Some((seq, SendLoan(mut loan))) = got else {
            return Err(Fail::new(
                "Full",
                "the queue stayed full (or had no receiver) for the whole timeout",
            )
            .into());
        };
        // The slot the ring chose (a never-stall ring's is not `seq % slots`).
        let index = loan.slot().min(
            usize::try_from(slots)
                .unwrap_or(usize::MAX)
                .saturating_sub(1),
        );
        let lent = lease.get()?;
        let state = lent
            .queue
            .as_mut()
            .ok_or_else(|| Fail::new("Error", "queue state vanished"))?;
        // The claim proves the slot's previous message consumed and unpinned.
        state.reclaim(index);
        // Dropping the loan on failure gives the slot back.
        let allocated = if plan.arena_len > 0 && plan.arena_len <= max_alloc {
            state
                .allocate(index, plan.arena_len)
                .map_err(|f| f.into_py(py))?
        } else {
            None
        };
        let (plan, handle, spill) = match (allocated, spill_plan, &queue_name) {
            (Some((h, addr)), _, _) => (plan, h, Some(Out::Arena(addr))),
            (None, Some(sp), Some(qn)) if plan.arena_len > 0 => {
                let target = state
                    .pool
                    .target(qn, seq, sp.arena_len)
                    .ok_or_else(|| Fail::new("TooLarge", "a message too large to spill"))?;
                (sp, 0, Some(Out::Spill(target)))
            }
            (None, _, _) if plan.arena_len == 0 => (plan, 0, None),
            _ => {
                return Err(Fail::new(
                    "Full",
                    format!(
                        "the queue's arena has no room for {} bytes now",
                        plan.arena_len
                    ),
                )
                .into())
            }
        };
        let slot = loan.bytes();
        let (target, arena_addr) = match spill {
            Some(Out::Spill(t)) => (Some(t), None),
            Some(Out::Arena(addr)) => (None, Some(addr)),
            None => (None, None),
        };
        q::write_header(
            &plan,
            slot,
            target.as_ref().map(|t| (t.name.as_str(), t.len as u64)),
        );
        let slot_addr = slot.as_mut_ptr() as usize;
        // (source, destination, length) for the slot and the arena now; (source, offset in
        // the spill segment's data, length) for a spill, whose new segment is made in the copy
        // below.
        let mut jobs: Vec<(usize, usize, usize)> = Vec::with_capacity(views.len());
        let mut spilled: Vec<(usize, usize, usize)> = Vec::new();
        for (p, v) in plan.places.iter().zip(&views).filter(|(p, _)| p.len > 0) {
            let src = v.bytes().as_ptr() as usize;
            match (arena_addr, p.arena) {
                (_, false) => jobs.push((src, slot_addr + p.offset, p.len)),
                (Some(addr), true) => jobs.push((src, addr + p.offset, p.len)),
                (None, true) => spilled.push((src, p.offset, p.len)),
            }
        }
        let spilling = target.is_some();
        let copy = move || -> Result<(Option<crate::spill::Target>, Option<ring_os::raw::Segment>), Fail> {
            for (src, dst, len) in jobs {
                // SAFETY: `src` is `len` bytes of a buffer view held (in `views`) across this
                // call; `dst` is `len` bytes inside the claimed slot or the fresh allocation
                // (`plan` placed the part inside the slot's capacity or the allocation's
                // length; `Arena::address` checked the allocation lies in the arena). Neither
                // is read by anyone else before the message is published: the slot is claimed
                // in a pin-only ring (no optimistic readers) and the allocation is referenced
                // by no published slot. Distinct parts never overlap.
                unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
            }
            let Some(target) = target else {
                return Ok((None, None));
            };
            let (created, base) = match target.reused_data() {
                Some(base) => (None, base),
                None => {
                    let (seg, base) = target.create()?;
                    (Some(seg), base)
                }
            };
            for (src, off, len) in spilled {
                // SAFETY: `src` is `len` bytes of a held view (as above); `off + len` lies
                // within the plan's out-of-slot length, at most the segment's data length
                // (`Pool::target` chose or sized it for that many bytes). The segment is this
                // sender's: either just created and not published yet, or a pooled one whose
                // last message was consumed (acknowledged, or its slot claimed again), so no
                // reader uses its data now (the untrusted-peer caveat of `spill`).
                unsafe {
                    core::ptr::copy_nonoverlapping(src as *const u8, (base + off) as *mut u8, len);
                };
            }
            Ok((Some(target), created))
        };
        let copied = if total >= q::RELEASE_GIL_AT || spilling {
            // The loan rides in `Lent` meanwhile, so a thread parked at exit gives it back
            // with the lease (no `Claim` has its id).
            let lent = lease.get()?;
            lent.loan = Some(loan);
            lent.loan_id += 1;
            let copied = unlocked(py, &mut lease, |_| copy());
            loan = lease
                .get()?
                .loan
                .take()
                .ok_or_else(|| Fail::new("Error", "the loan vanished"))?;
            copied
        } else {
            copy()
        };
        // A failed spill (no room) drops the loan, which gives the slot back: the queue
        // stays usable.
        let (target, created) = copied.map_err(|f| f.into_py(py))?;
        if let (Some(target), Some(state)) = (target, lease.get()?.queue.as_mut()) {
            let outside = state.pool.sent(&target, created, index);
            if let Some(s) = state.slot_spills.get_mut(index) {
                *s = outside;
            }
        }
        loan.set_meta([
            handle,
            if handle == 0 {
                0
            } else {
                plan.arena_len as u64
            },
        ]);
        let seq = loan.send().map_err(|e| errors::send(e).into_py(py))?;
        drop(lease);
        drop(views);
        Ok(self.published(seq))
    }

    /// Waits up to `timeout` seconds until `n` consumers are registered and will receive
    /// everything published after this returns; False on timeout.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn wait_for_consumers(&self, py: Python<'_>, n: usize, timeout: Option<f64>) -> PyResult<bool> {
        self.wait_until(py, timeout, move |p, slice| {
            p.wait_for_subscribers(n, slice)
        })
    }

    /// Waits up to `timeout` seconds until every gating consumer consumed everything
    /// published (reclaiming dead ones); False on timeout.
    #[pyo3(signature = (timeout = None))]
    fn wait_drained(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.wait_until(py, timeout, |p, slice| {
            p.wait_drained(slice.max(Duration::from_millis(1)))
        })
    }

    /// Messages published so far (the next sequence number).
    #[getter]
    fn sent(&self) -> PyResult<u64> {
        if self.lent.is_closed() {
            return Err(self.lent.closed_error().into());
        }
        Ok(self.sent.load(Ordering::Relaxed))
    }

    /// The ring's in-segment allocator, with this producer as its one mutator (see
    /// `shmring.Allocator`). Once per producer; a producer that lent it cannot `put`, and one
    /// that has `put` cannot lend it (`Busy`). Frees what a previous owner left live.
    fn allocator(slf: &Bound<'_, Self>) -> PyResult<crate::arena::Allocator> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut lease = this.lease(py, None)?;
            if lease.get()?.queue.is_some() {
                return Err(Fail::new("Busy", "this producer's queue uses the allocator").into());
            }
        }
        // Relaxed: see `arena_lent`.
        if this.arena_lent.swap(true, Ordering::Relaxed) {
            return Err(Fail::new("Busy", "this producer already lent its allocator").into());
        }
        let made = crate::arena::Allocator::new(slf.clone().unbind(), &this.mapping);
        if made.is_err() {
            this.arena_lent.store(false, Ordering::Relaxed);
        }
        made.map_err(|f| f.into_py(py))
    }

    /// Payload bytes per slot.
    #[getter]
    fn slot_size(&self) -> usize {
        self.capacity
    }

    /// Whether the producer is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.lent.is_closed()
    }

    /// Creates the group `name` (competing consumers), or finds it; returns its consumer-table
    /// index. Consumers that join it (`Ring.consumer(group=name)`, in any process) share one
    /// cursor: each message published from now on goes to exactly one of them, and the group
    /// holds the producer back as one gating consumer would, even before its first member
    /// joins (late members get what no member has taken). Raises `Busy` when the consumer
    /// table is full.
    fn create_group(&self, py: Python<'_>, name: &str) -> PyResult<usize> {
        let mut lease = self.lease(py, None)?;
        let index = lease
            .get()?
            .publisher()?
            .create_group(name)
            .map_err(|e| crate::ring::group_err(e, name))?;
        // Relaxed: see `grouped`.
        self.grouped.store(true, Ordering::Relaxed);
        Ok(index)
    }

    /// Ends the stream as finished: consumers drain, then get `Disconnected`. From another
    /// thread, a call waiting in `publish`/`claim`/`wait_*` raises `Closed` within one slice.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, None)
    }

    /// Ends the stream as aborted with `code`: consumers drain, then get `Aborted`.
    #[pyo3(signature = (code = 0))]
    fn abort(&self, py: Python<'_>, code: u16) -> PyResult<()> {
        self.end(py, Some(code))
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// A clean exit closes (finished); an exception aborts.
    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.abort(py, 0)?;
        } else {
            self.close(py)?;
        }
        Ok(false)
    }
}

impl Producer {
    /// Ends the stream: finished (`None`) or aborted with the code.
    fn end(&self, py: Python<'_>, abort: Option<u16>) -> PyResult<()> {
        if let Some(mut l) = self.lent.close(py, |l| l.publisher().map(drop))? {
            let p = l.publisher()?;
            // Relaxed: see `grouped`.
            if self.grouped.load(Ordering::Relaxed) {
                // A member that died holding messages gives them to the group now, while the
                // survivors can still take them (nobody reclaims once the producer is gone).
                let _ = p.inner().reclaim_dead();
            }
            match abort {
                None => p.close(),
                Some(code) => p.abort(code),
            }
        }
        Ok(())
    }
}

/// A slot claimed for writing in place (`Producer.claim`). Exports exactly `nbytes` writable
/// bytes of the slot through the buffer protocol; `publish()` or `abort()` ends it (the `with`
/// block does one of them). Neither runs while a view of the buffer is alive (`BufferError`):
/// the slot stays claimed until the views are released; a claim that is garbage-collected
/// unpublished gives its slot back.
#[pyclass(module = "shmring", frozen)]
pub(crate) struct Claim {
    producer: Py<Producer>,
    /// The loan's export count (see [`Lent::exports`]).
    exports: Arc<AtomicUsize>,
    loan_id: u64,
    nbytes: usize,
    /// The memoryview `__enter__` handed out, released at `__exit__`.
    view: Mutex<Option<Py<PyAny>>>,
}

impl Claim {
    /// Runs `f` on the producer state if this claim's loan is still open. `f` runs under the
    /// producer's lock: it must not call Python.
    fn with_loan<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Lent) -> Result<T, Fail>,
    ) -> PyResult<T> {
        let id = self.loan_id;
        let done = self
            .producer
            .get()
            .lent
            .with(|l| (l.loan.is_some() && l.loan_id == id).then(|| f(l)))
            .flatten();
        done.unwrap_or_else(|| {
            Err(Fail::new(
                "Closed",
                "this claim was already published or aborted",
            ))
        })
        .map_err(|f| f.into_py(py))
    }

    /// Releases the memoryview handed out by `__enter__` (raises if views of it are alive).
    fn release_view(&self, py: Python<'_>) -> PyResult<()> {
        // Taken even when the release fails: a reference kept here would form a cycle with the
        // view (which references this claim) and keep the slot claimed forever.
        let taken = self.view.lock().map_or(None, |mut v| v.take());
        match taken {
            Some(v) => v.bind(py).call_method0("release").map(|_| ()),
            None => Ok(()),
        }
    }

    /// Ends the loan: publishes it (`publish`) or gives the slot back.
    fn finish(&self, py: Python<'_>, publish: bool) -> PyResult<Option<u64>> {
        let what = if publish {
            "publish the claim"
        } else {
            "abort the claim"
        };
        self.release_view(py)
            .map_err(|_| exported_fail(what).into_py(py))?;
        // Sent (or dropped) under the producer's lock: the loan borrows the publisher.
        let seq = self.with_loan(py, |l| {
            if export::live(&l.exports) {
                return Err(exported_fail(what));
            }
            match l.loan.take() {
                Some(loan) if publish => loan.send().map(Some).map_err(errors::send),
                _ => Ok(None),
            }
        })?;
        Ok(seq.map(|s| self.producer.get().published(s)))
    }
}

#[pymethods]
impl Claim {
    /// The reserved length.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    fn __len__(&self) -> usize {
        self.nbytes
    }

    /// Publishes the written bytes; returns the sequence number.
    fn publish(&self, py: Python<'_>) -> PyResult<u64> {
        self.finish(py, true)?.ok_or_else(|| {
            Fail::new("Closed", "this claim was already published or aborted").into()
        })
    }

    /// Gives the slot back unpublished.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false).map(|_| ())
    }

    /// A writable memoryview of exactly `nbytes` bytes of the slot.
    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let mv = py
            .import("builtins")?
            .getattr("memoryview")?
            .call1((slf,))?;
        if let Ok(mut v) = slf.get().view.lock() {
            *v = Some(mv.clone().unbind());
        }
        Ok(mv.unbind())
    }

    /// Publishes on a clean exit, aborts on an exception.
    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let failed = exc_type.is_some_and(|t| !t.is_none());
        match self.finish(py, !failed) {
            Err(e) if !failed => Err(e),
            // An exception is already propagating: do not replace it.
            _ => Ok(false),
        }
    }

    /// Exports the claimed bytes, writable.
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
        let me = slf.get();
        let bytes = me.with_loan(py, |l| Ok(l.bytes))?;
        // SAFETY: `view` is the interpreter's; the loan's bytes (exactly `nbytes`: a view cannot
        // reach past the reservation) stay ours to write while the export count keeps the loan
        // open (`finish` refuses).
        unsafe { export::fill(slf.as_any(), view, bytes, false, flags, &me.exports) }
    }

    /// Drops one export.
    ///
    /// # Safety
    ///
    /// Called by the interpreter for a view this object filled.
    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: *mut ffi::Py_buffer) {
        export::release(&slf.get().exports);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // A claim that goes away unpublished gives its slot back (no view can be alive: each
        // holds a reference to the claim).
        // No Python call here (no error objects either): a destructor may run while an
        // exception is propagating, and calling into Python then would clobber it.
        let id = self.loan_id;
        self.producer.get().lent.with(|l| {
            if l.loan_id == id && !export::live(&l.exports) {
                l.loan = None;
            }
        });
    }
}
