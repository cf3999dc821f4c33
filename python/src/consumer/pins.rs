//! A consumer's pinned messages: what the lease holder owns ([`Held`]: the subscriber and the
//! ring-core holds) and what Python sees of them ([`Pins`]; see the parent module's doc).

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ring_core::Hold;
use ring_os::asyncio::ReadyWait;
use ring_os::Subscriber;

use crate::errors::{self, exported_fail, Fail};
use crate::export;
use crate::queue::Arena;

/// What the lease holder owns: the subscriber and the holds of the pinned messages.
pub(super) struct Held {
    /// The asyncio coroutines' wait (see `aio`). Declared before `sub`, so it is dropped
    /// first: it gives its waiter count back while the subscriber still holds its entry.
    pub(super) ready: ReadyWait,
    pub(super) sub: Subscriber,
    /// The holds of pinned messages, by message id (at most `MAX_HOLDS`).
    pub(super) holds: Vec<(u64, Hold)>,
    /// The id of the last pinned message (ids start at 1).
    pub(super) last_id: u64,
    /// The ring's allocator, attached by the first `_get_parts` (inner `None`: the ring has
    /// none).
    pub(super) arena: Option<Option<Arena>>,
}

impl Held {
    /// Gives back to the ring the holds of the messages Python let go (see [`Pins::let_go`]).
    /// Calls no Python.
    pub(super) fn settle(&mut self, pins: &Mutex<Pins>) {
        let ids = core::mem::take(&mut lock(pins).let_go);
        for (id, spill) in ids {
            if let Some(i) = self.holds.iter().position(|(h, _)| *h == id) {
                let (_, hold) = self.holds.swap_remove(i);
                // `NotHeld` cannot happen (the hold came from this subscriber and is released
                // once); a reclaimed consumer's release writes nothing.
                let _ = self.sub.release(hold);
            }
            // After the release: had this member died holding the message, the message would
            // have been redelivered with its spill still there.
            if let Some(spill) = spill {
                spill.done();
            }
        }
    }

    /// Gives a hold taken for one call back at once (a copying read).
    pub(super) fn give(&mut self, hold: Hold) -> Result<(), Fail> {
        self.sub.release(hold).map_err(errors::read)
    }
}

/// One pinned message as Python sees it.
pub(super) struct PinRecord {
    pub(super) id: u64,
    /// Live buffer exports of this message (shared with its `Message` or queue `Part`s, so a
    /// view can be released without the consumer).
    pub(super) exports: Arc<AtomicUsize>,
    /// A zero-copy spilled queue message that is this reader's alone: its spill segment,
    /// acknowledged once the message is given back (see `spill`).
    pub(super) spill: Option<Arc<crate::spill::Received>>,
}

/// The pinned messages of a consumer, as Python sees them. Records leave only with the GIL
/// held (see the module doc).
#[derive(Default)]
pub(super) struct Pins {
    pub(super) live: Vec<PinRecord>,
    /// Ids of messages let go whose holds [`Held::settle`] has not given back yet, with the
    /// spill segment to acknowledge after that.
    pub(super) let_go: Vec<(u64, Option<Arc<crate::spill::Received>>)>,
    /// The zero-copy queue message, let go by the next `_get_parts` (the queue's rule).
    pub(super) queue: Option<u64>,
}

impl Pins {
    /// Lets message `id` go: its record leaves, its hold is queued for [`Held::settle`].
    /// Refuses while its bytes are exported; `Ok(false)` when it was let go already.
    pub(super) fn let_go(&mut self, id: u64, what: &str) -> Result<bool, Fail> {
        let Some(i) = self.live.iter().position(|r| r.id == id) else {
            return Ok(false);
        };
        if export::live(&self.live[i].exports) {
            return Err(exported_fail(what));
        }
        let record = self.live.swap_remove(i);
        self.let_go.push((id, record.spill));
        if self.queue == Some(id) {
            self.queue = None;
        }
        Ok(true)
    }

    pub(super) fn find(&self, id: u64) -> Option<&PinRecord> {
        self.live.iter().find(|r| r.id == id)
    }
}

/// Locks `m`; no panic happens under these locks, so a poisoned one is still consistent.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
