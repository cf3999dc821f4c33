//! The queue's message writing (the layout is `crate::queue`'s): a put copies its parts straight
//! from their objects into the segment; a claim writes the pickle stream and lends the place of
//! the out-of-band buffer, which the caller fills in place and publishes later
//! ([`super::QueueClaim`]).
//!
//! Both go through [`draft`]: plan the parts, wait for the slot, free what the slot's last
//! message held, find the out-of-slot parts' place (an allocation of the arena, else a spill
//! segment, see `spill`) and write the header. A new spill segment is made without the GIL, in
//! the copy. [`Pending`] is what publishing the message still has to do.

use std::sync::Arc;
use std::time::Instant;

use pyo3::prelude::*;
use ring_core::Memory as _;
use ring_os::raw::Segment;
use ring_os::SendTimeoutError;

use super::{Lent, Producer, QueueClaim, SendLoan, StaticLoan, View};
use crate::copy::Job;
use crate::errors::{self, Fail};
use crate::handoff::Lease;
use crate::queue::{self as q, Plan};
use crate::spill::Target;
use crate::wait::{deadline, sliced, unlocked};

/// A queue message being written: its slot's loan and where its parts go.
struct Draft {
    loan: StaticLoan,
    plan: Plan,
    /// The address of the allocation the out-of-slot parts go into (else a spill, or none).
    arena: Option<usize>,
    pending: Pending,
}

/// What publishing a written queue message still has to do.
pub(super) struct Pending {
    /// The slot the ring chose.
    index: usize,
    /// The allocation's handle (0: none) and length: the slot's metadata words.
    meta: [u64; 2],
    /// The spill segment the out-of-slot parts went to, and the new segment made for it.
    target: Option<Target>,
    created: Option<Arc<Segment>>,
}

impl Pending {
    /// A spill segment made for a message that is not published after all: removed (a pooled
    /// segment reused stays in the pool, idle).
    pub(super) fn abandon(self) {
        if let Some(seg) = self.created {
            let _ = seg.unlink();
        }
    }
}

/// A message too large for a slot's header.
fn too_many(n: usize) -> Fail {
    Fail::new(
        "TooLarge",
        format!("{n} parts do not fit in a slot's header"),
    )
}

/// Takes the producer and drafts a message of parts `lens` in it (see [`draft`]), waiting up
/// to `timeout` seconds in all. Refuses rings that are not pin-only.
fn begin<'a>(
    me: &'a Producer,
    py: Python<'_>,
    lens: &[usize],
    outside_from: usize,
    timeout: Option<f64>,
) -> PyResult<(Lease<'a, Lent>, Draft)> {
    if !me.pin_only {
        return Err(Fail::new("NotPinOnly", "a queue needs a pin-only ring").into());
    }
    let end = deadline(timeout)?;
    let mut lease = me.lease(py, end)?;
    let draft = draft(me, py, &mut lease, lens, outside_from, end)?;
    Ok((lease, draft))
}

/// Plans a message of parts `lens` (with `outside_from`: the parts from that index on go
/// outside the slot), waits up to `end` for its slot (and, before the receivers' group
/// exists, a receiver), frees what the slot's last message held, places the out-of-slot parts
/// and writes the header.
fn draft(
    me: &Producer,
    py: Python<'_>,
    lease: &mut Lease<'_, Lent>,
    lens: &[usize],
    outside_from: usize,
    end: Option<Instant>,
) -> PyResult<Draft> {
    let total: usize = lens.iter().sum();
    let plan = q::plan(lens, me.capacity, 0, outside_from).ok_or_else(|| too_many(lens.len()))?;
    let lent = lease.get()?;
    // Relaxed: see `arena_lent`.
    if me.arena_lent.load(core::sync::atomic::Ordering::Relaxed) {
        return Err(Fail::new("Busy", "this producer lent its allocator (allocator())").into());
    }
    if lent.queue.is_none() {
        lent.queue = Some(crate::queue::SendState::new(&me.mapping).map_err(|f| f.into_py(py))?);
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
            let extra = crate::spill::record_len(&probe);
            Some(
                q::plan(lens, me.capacity, extra, outside_from)
                    .ok_or_else(|| too_many(lens.len()))?,
            )
        }
        _ => None,
    };
    if plan.arena_len > 0 && spill_plan.is_none() && plan.arena_len > max_alloc {
        return Err(Fail::new(
            "TooLarge",
            format!(
                "a message of {total} bytes does not fit: this ring takes {} bytes inline and \
                 {max_alloc} in its arena, and only a named queue can spill",
                me.capacity
            ),
        )
        .into());
    }
    let slots = me.mapping.geometry().slots();
    // Relaxed: see `grouped`.
    let grouped = me.grouped.load(core::sync::atomic::Ordering::Relaxed);
    let slot_len = plan
        .slot_len
        .max(spill_plan.as_ref().map_or(0, |p| p.slot_len));
    let got = sliced(py, end, lease, move |lease, slice| {
        lease.check_open()?;
        // SAFETY: the lease was taken with `publisher()` as its check; the loan is kept in
        // `Lent` (or sent, or dropped) before the lease goes back.
        let publisher = unsafe { Lent::publisher_static(lease)? };
        // A group keeps the message for its members, present or to come.
        if !grouped && publisher.subscribers() == 0 && !publisher.wait_for_subscribers(1, slice) {
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
    let index = loan.slot().min(slots.saturating_sub(1));
    let state = lease
        .get()?
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
    let (plan, handle, arena, target) = match (allocated, spill_plan, &queue_name) {
        (Some((h, addr)), _, _) => (plan, h, Some(addr), None),
        (None, Some(sp), Some(qn)) if plan.arena_len > 0 => {
            let target = state
                .pool
                .target(qn, seq, sp.arena_len)
                .ok_or_else(|| Fail::new("TooLarge", "a message too large to spill"))?;
            (sp, 0, None, Some(target))
        }
        (None, _, _) if plan.arena_len == 0 => (plan, 0, None, None),
        _ => {
            let what = format!(
                "the queue's arena has no room for {} bytes now",
                plan.arena_len
            );
            return Err(Fail::new("Full", what).into());
        }
    };
    q::write_header(
        &plan,
        loan.bytes(),
        target.as_ref().map(|t| (t.name.as_str(), t.len as u64)),
    );
    let arena_len = if handle == 0 {
        0
    } else {
        plan.arena_len as u64
    };
    Ok(Draft {
        loan,
        plan,
        arena,
        pending: Pending {
            index,
            meta: [handle, arena_len],
            target,
            created: None,
        },
    })
}

/// The spill segment of `target`: a pooled one reused, or a new one made now (without the
/// GIL). Returns the new segment, if any, and the address of its data.
fn spill_data(target: &Target) -> Result<(Option<Segment>, usize), Fail> {
    match target.reused_data() {
        Some(base) => Ok((None, base)),
        None => target.create().map(|(seg, base)| (Some(seg), base)),
    }
}

/// Runs `work` with the GIL released, the loan riding in `Lent` meanwhile (so a thread parked
/// at exit gives it back with the lease); returns the loan with `work`'s result.
fn unlocked_with_loan<T: Send>(
    py: Python<'_>,
    lease: &mut Lease<'_, Lent>,
    loan: StaticLoan,
    work: impl FnOnce() -> T + Send,
) -> PyResult<(StaticLoan, T)> {
    let lent = lease.get()?;
    lent.loan = Some(loan);
    lent.loan_id += 1;
    let out = unlocked(py, lease, |_| work());
    let loan = lease
        .get()?
        .loan
        .take()
        .ok_or_else(|| Fail::new("Error", "the loan vanished"))?;
    Ok((loan, out))
}

/// Publishes a written queue message: its metadata words, the send, and the bookkeeping of
/// its spill segment (pooled, or the slot's to remove when it comes round again).
pub(super) fn publish(
    lent: &mut Lent,
    mut loan: StaticLoan,
    pending: Pending,
) -> Result<u64, Fail> {
    loan.set_meta(pending.meta);
    let seq = loan.send().map_err(errors::send)?;
    if let (Some(target), Some(state)) = (pending.target, lent.queue.as_mut()) {
        let outside = state.pool.sent(&target, pending.created, pending.index);
        if let Some(s) = state.slot_spills.get_mut(pending.index) {
            *s = outside;
        }
    }
    Ok(seq)
}

/// `Producer._put_parts`: the parts that fit in the slot inline, the rest into one allocation
/// of the ring's arena or a spill segment, each copied straight from its object (large ones
/// with the GIL released).
pub(super) fn put_parts(
    me: &Producer,
    py: Python<'_>,
    parts: &[Bound<'_, PyAny>],
    timeout: Option<f64>,
) -> PyResult<u64> {
    let views = parts.iter().map(View::get).collect::<PyResult<Vec<_>>>()?;
    let lens: Vec<usize> = views.iter().map(|v| v.bytes().len()).collect();
    let total: usize = lens.iter().sum();
    let (mut lease, draft) = begin(me, py, &lens, usize::MAX, timeout)?;
    let Draft {
        mut loan,
        plan,
        arena,
        mut pending,
    } = draft;
    let slot = loan.bytes().as_mut_ptr();
    // The copies into the slot and the arena now; for a spill, whose new segment is made in the
    // copy below, each copy (its destination still null) with its offset in the segment's data.
    let mut jobs: Vec<Job> = Vec::with_capacity(views.len());
    let mut spilled: Vec<(Job, usize)> = Vec::new();
    for (p, v) in plan.places.iter().zip(&views).filter(|(p, _)| p.len > 0) {
        let (src, len) = (v.bytes().as_ptr(), p.len);
        match (arena, p.arena) {
            (_, false) => jobs.push(Job {
                src,
                dst: slot.wrapping_add(p.offset),
                len,
            }),
            (Some(addr), true) => jobs.push(Job {
                src,
                dst: core::ptr::with_exposed_provenance_mut(addr + p.offset),
                len,
            }),
            (None, true) => spilled.push((
                Job {
                    src,
                    dst: core::ptr::null_mut(),
                    len,
                },
                p.offset,
            )),
        }
    }
    let target = pending.target.take();
    let spilling = target.is_some();
    let copy = move || -> Result<(Option<Target>, Option<Segment>), Fail> {
        // SAFETY: each `src` is `len` bytes of a buffer view held (in `views`) across this
        // call; each `dst` is `len` bytes inside the claimed slot or the fresh allocation
        // (`plan` placed the part inside the slot's capacity or the allocation's length;
        // `Arena::address` checked the allocation lies in the arena). Neither is read by
        // anyone else before the message is published: the slot is claimed in a pin-only ring
        // (no optimistic readers) and the allocation is referenced by no published slot.
        // Distinct parts never overlap.
        unsafe { crate::copy::all(jobs) };
        let Some(target) = target else {
            return Ok((None, None));
        };
        let (created, base) = spill_data(&target)?;
        // SAFETY: each `src` is `len` bytes of a held view (as above); `off + len` lies within
        // the plan's out-of-slot length, at most the segment's data length (`Pool::target`
        // chose or sized it for that many bytes). The segment is this sender's: either just
        // created and not published yet, or a pooled one whose last message was consumed
        // (acknowledged, or its slot claimed again), so no reader uses its data now (the
        // untrusted-peer caveat of `spill`).
        unsafe {
            crate::copy::all(spilled.into_iter().map(|(job, off)| Job {
                dst: core::ptr::with_exposed_provenance_mut(base + off),
                ..job
            }))
        };
        Ok((Some(target), created))
    };
    let copied = if total >= q::RELEASE_GIL_AT || spilling {
        let (back, copied) = unlocked_with_loan(py, &mut lease, loan, copy)?;
        loan = back;
        copied
    } else {
        copy()
    };
    // A failed spill (no room) drops the loan, which gives the slot back: the queue stays
    // usable.
    let (target, created) = copied.map_err(|f| f.into_py(py))?;
    pending.target = target;
    pending.created = created.map(Arc::new);
    let seq = publish(lease.get()?, loan, pending).map_err(|f| f.into_py(py))?;
    drop(lease);
    drop(views);
    Ok(me.published(seq))
}

/// `Producer._claim_parts`: the message `[head, nbytes]`, `head` written now, the second part
/// always outside the slot (an allocation or a spill segment: a view of it that outlives the
/// claim can never write into a slot the ring lends again), lent to the caller through the
/// returned claim.
pub(super) fn claim_parts(
    slf: &Bound<'_, Producer>,
    head: &Bound<'_, PyAny>,
    nbytes: usize,
    timeout: Option<f64>,
) -> PyResult<QueueClaim> {
    let py = slf.py();
    let me = slf.get();
    let view = View::get(head)?;
    let (mut lease, draft) = begin(me, py, &[view.bytes().len(), nbytes], 1, timeout)?;
    let (mut loan, mut pending) = (draft.loan, draft.pending);
    let (first, second) = (draft.plan.places[0], draft.plan.places[1]);
    let slot = loan.bytes();
    let slot_addr = slot.as_ptr() as usize;
    if first.len > 0 {
        let at = slot
            .get_mut(first.offset..first.offset + first.len)
            .ok_or_else(|| Fail::new("TooLarge", "the pickle stream does not fit in a slot"))?;
        at.copy_from_slice(view.bytes());
    }
    drop(view);
    let (data, spill) = match (draft.arena, pending.target.take()) {
        (Some(addr), _) => (addr + second.offset, None),
        (None, Some(target)) => {
            let (back, made) = if target.reused_data().is_some() {
                (
                    loan,
                    spill_data(&target).map(|(_, base)| (target, None, base)),
                )
            } else {
                unlocked_with_loan(py, &mut lease, loan, move || {
                    spill_data(&target).map(|(seg, base)| (target, seg, base))
                })?
            };
            loan = back;
            let (target, created, base) = made.map_err(|f| f.into_py(py))?;
            pending.created = created.map(Arc::new);
            let seg = pending.created.clone().or_else(|| target.reused().cloned());
            pending.target = Some(target);
            (base + second.offset, seg)
        }
        // A zero-length buffer: nothing to write.
        (None, None) => (slot_addr, None),
    };
    let lent = lease.get()?;
    lent.loan = Some(loan);
    lent.loan_id += 1;
    lent.bytes = (data, nbytes);
    lent.pending = Some(pending);
    Ok(QueueClaim::new(
        slf.clone().unbind(),
        lent.loan_id,
        (data, nbytes),
        spill,
    ))
}
