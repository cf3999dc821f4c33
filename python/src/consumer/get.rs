//! The queue's get (see `shmring.queue`; the message layout is `crate::queue`'s): pins the
//! next message, validates it, maps its spill segment if it has one, and either copies its
//! parts out or hands out zero-copy [`Part`]s; a spill is acknowledged once the message is
//! given back (see `spill`).

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{lock, truncated_since, Consumer, Part};
use crate::copy::Job;
use crate::errors::Fail;
use crate::queue::{self as q, Arena};
use crate::recycle::{Buffer, RECYCLE_AT};
use crate::wait::unlocked;

impl Consumer {
    /// Maps the spill segment of the message in `slot`, if it is a spilled one. Only a spill
    /// name of this very queue is opened (see `spill`).
    fn open_spill(&self, slot: &[u8]) -> Result<Option<crate::spill::Received>, Fail> {
        let Some((len, name)) = q::spill_of(slot)? else {
            return Ok(None);
        };
        let ours = match self.mapping.segment().kind() {
            ring_os::raw::SegmentKind::Named(q) => crate::spill::is_spill_of(name, q.as_str()),
            _ => false,
        };
        if !ours {
            return Err(Fail::new(
                "Corrupt",
                format!("the message names a spill segment {name:?} of another queue"),
            ));
        }
        Ok(Some(self.spills.open(name, len)?))
    }

    /// Whether a spilled message this consumer reads is its alone, so that it acknowledges it
    /// when done (see `spill`): a group member's is (each message goes to one member), and the
    /// only reader's; with several broadcast readers the sender's next claim of the slot frees
    /// the segment.
    fn acks_spills(&self) -> bool {
        self.group.is_some()
            || self
                .mapping
                .participants()
                .iter()
                .filter(|p| matches!(p.role, ring_os::raw::lock::Role::Consumer(_)))
                .count()
                <= 1
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
    pub(super) fn get_parts<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
        zero_copy: bool,
    ) -> PyResult<(Vec<Bound<'py, PyAny>>, bool)> {
        let py = slf.py();
        let me = slf.get();
        let pins = &me.pins;
        let (mut turn, taken) = me.take_next(py, timeout, |h| {
            let mut p = lock(pins);
            if let Some(prev) = p.queue {
                p.let_go(prev, "get the next message")?;
            }
            drop(p);
            h.settle(pins);
            Ok(())
        })?;
        let redelivered = taken.hold.redelivered();
        let held = turn.held()?;
        if held.arena.is_none() {
            let a = Arena::attach(&me.mapping).map_err(|f| f.into_py(py))?;
            held.arena = Some(a);
        }
        let (ptr, len) = taken.bytes;
        // SAFETY: the hold just taken keeps these `len` bytes mapped and stable (the producer
        // cannot claim a held slot) until it is given back below or let go.
        let slot = unsafe { core::slice::from_raw_parts(ptr as *const u8, len) };
        let arena = held.arena.as_ref().and_then(Option::as_ref);
        let spill = match me.open_spill(slot) {
            Ok(s) => s,
            Err(f) => {
                held.give(taken.hold)?;
                return Err(f.into_py(py));
            }
        };
        let mapped = spill.as_ref().map(crate::spill::Received::data);
        let parts = match q::parse(slot, taken.hold.meta(), arena, mapped) {
            Ok(p) => p,
            Err(f) => {
                held.give(taken.hold)?;
                return Err(f.into_py(py));
            }
        };
        // A reader whose message it is alone acknowledges a spill once it gave the message
        // back (after the copy, or when the last zero-copy part goes): the sender may then
        // reuse the segment (see `spill`). Should it die first, the message is redelivered
        // with its spill still there.
        let spill = spill.map(Arc::new);
        let acked = spill.as_ref().filter(|_| me.acks_spills()).cloned();
        if zero_copy {
            let (id, exports) = me.keep(&mut turn, taken, acked)?;
            lock(pins).queue = Some(id);
            drop(turn);
            let consumer = slf.clone().unbind();
            let siblings = Arc::new(AtomicUsize::new(parts.len()));
            let views = parts
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
                            _spill: spill.as_ref().map(|s| Arc::clone(&s.seg)),
                        },
                    )?
                    .into_any())
                })
                .collect::<PyResult<Vec<_>>>()?;
            return Ok((views, redelivered));
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
                // SAFETY: validated by `parse` to lie in the held slot or its allocation.
                let b = unsafe { core::slice::from_raw_parts(g.addr as *const u8, g.len) };
                out.push(PyBytes::new(py, b).into_any());
            } else if !raw && g.len >= RECYCLE_AT {
                // A pickled array's buffer: into recycled memory (see `recycle`).
                let (obj, dst) = Buffer::make(py, &me.recycler, g.len)?;
                jobs.push(Job {
                    src: core::ptr::with_exposed_provenance(g.addr),
                    dst,
                    len: g.len,
                });
                total += g.len;
                out.push(obj);
            } else {
                let (obj, dst) = q::new_buffer(py, g.len, raw_bytes)?;
                jobs.push(Job {
                    src: core::ptr::with_exposed_provenance(g.addr),
                    dst,
                    len: g.len,
                });
                total += g.len;
                out.push(obj);
            }
        }
        let faults = ring_os::raw::sigbus::repaired_faults();
        let copy = move || {
            // SAFETY: each `src..src + len` lies in the held slot or its allocation (`parse`),
            // stable while held (this call gives the hold back only after the copy); each
            // `dst` is the memory of a new bytearray or `Buffer` of `len` bytes (held in `out`)
            // that no other code has seen yet.
            unsafe { crate::copy::all(jobs) };
        };
        if total >= q::RELEASE_GIL_AT {
            unlocked(py, &mut turn.lease, |_| copy());
        } else {
            copy();
        }
        drop(spill);
        // The hold goes back first: a member that died before this point gets its message
        // redelivered with the spill still there.
        turn.held()?.give(taken.hold)?;
        if let Some(spill) = acked {
            spill.done();
        }
        truncated_since(faults)?;
        Ok((out, redelivered))
    }
}
