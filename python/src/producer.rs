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

use core::ptr::NonNull;
use core::time::Duration;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use ring_core::Memory as _;
use ring_os::{
    raw::{Mapping, ProducerExt as _},
    Loan, Publisher, SendTimeoutError,
};
use std::time::Instant;

use crate::errors::{self, Fail};
use crate::handoff::{Handoff, Lease};
use crate::queue::SendState;
use crate::wait::{deadline, sliced, sliced_copying};

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
    /// What publishing the open loan's queue message still has to do (`_claim_parts`).
    pending: Option<put::Pending>,
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
        if let Some(p) = self.pending.take() {
            p.abandon();
        }
        // SAFETY: from `Box::leak` in `Producer::new`, freed only here; the loan is gone.
        drop(unsafe { Box::from_raw(self.publisher.as_ptr()) });
    }
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

mod claim;
mod put;
mod view;

pub(crate) use claim::{Claim, QueueClaim};
use view::Bytes;
pub(crate) use view::View;

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
                    pending: None,
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
        let sent = sliced_copying(py, end, &mut lease, data.1, move |lease, slice| {
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

    /// The queue's put (see `shmring.queue` and [`put`]): writes the buffer-protocol objects
    /// `parts` (the pickle stream, then its out-of-band buffers) as one message. Waits up to
    /// `timeout` for a free slot; raises `Full` when none comes, `NoSpace` when shared memory
    /// has no room for it. Returns the sequence number.
    #[pyo3(signature = (parts, timeout = None))]
    fn _put_parts(
        &self,
        py: Python<'_>,
        parts: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        put::put_parts(self, py, &parts, timeout)
    }

    /// The queue's in-place put (see `shmring.queue` and [`put`]): reserves a message of two
    /// parts, the pickle stream `head` (written now) and `nbytes` for its one out-of-band
    /// buffer, which the returned `QueueClaim` exports writable until it is published.
    #[pyo3(signature = (head, nbytes, timeout = None))]
    fn _claim_parts(
        slf: &Bound<'_, Self>,
        head: &Bound<'_, PyAny>,
        nbytes: usize,
        timeout: Option<f64>,
    ) -> PyResult<QueueClaim> {
        put::claim_parts(slf, head, nbytes, timeout)
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
    #[pyo3(signature = (*args))]
    fn __exit__(&self, py: Python<'_>, args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        if crate::errors::raised(args) {
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
