//! Registration, leaving, holds and reads: where a consumer reads next, what it finds, what it
//! counts as missed.

use super::{EntryModel, ReadOk, ReaderModel, RingModel};
use ring_core::layout::GROUP_CLAIMS;
use ring_core::{DeliveryClass, Error, ReadError, PROGRESS_EVERY, READ_RETRIES};

impl RingModel {
    /// `Consumer::new`: the first free entry, starting at the current head.
    pub fn register(&mut self, class: DeliveryClass, owner: u64) -> Result<ReaderModel, Error> {
        // Latest-only readers start at the newest message present (one back from head).
        let head = match class {
            DeliveryClass::LatestOnly => self.head.saturating_sub(1),
            _ => self.head,
        };
        let Some(index) = self.entries.iter().position(|e| !e.active) else {
            return Err(Error::ConsumerTableFull {
                capacity: self.entries.len() as u32,
            });
        };
        self.entries[index] = EntryModel {
            active: true,
            class: class as u32,
            owner,
            cursor: head,
            received: 0,
            missed: 0,
            group: 0,
            claims: [0; GROUP_CLAIMS],
        };
        Ok(ReaderModel {
            index,
            owner,
            class,
            next: head,
            start: head,
            received: 0,
            missed: 0,
            unpublished: 0,
            holds: Vec::new(),
            member: None,
        })
    }

    /// Whether `r` still owns its entry (not reclaimed).
    pub fn registered(&self, r: &ReaderModel) -> bool {
        let e = &self.entries[r.index];
        e.active && e.owner == r.owner
    }

    /// Dropping a `Consumer`: takes its bit back from every slot (its holds, a leaked pin)
    /// and frees its entry, if it still owns it.
    pub fn leave(&mut self, r: &ReaderModel) {
        if self.registered(r) {
            for s in &mut self.slots {
                s.readers &= !(1 << r.index);
            }
            let e = &mut self.entries[r.index];
            e.active = false;
            e.owner = 0;
            // A member's unfinished claims end with it (a hold not released was delivered).
            e.claims = [0; GROUP_CLAIMS];
        }
    }

    /// A read of `seq` in `slot` by `r` became a hold: the reader moves on, the slot stays
    /// pinned (a reader bit, or the gating cursor at the oldest hold).
    pub fn hold(&mut self, r: &mut ReaderModel, seq: u64, slot: usize) {
        r.holds.push((seq, slot));
        if r.class != DeliveryClass::Gating {
            self.slots[slot].readers |= 1 << r.index;
        }
        // A hold publishes at once, whatever the class.
        r.next = seq + 1;
        r.received += 1;
        self.store_cursor(r);
    }

    /// Hold `k` of `r` released.
    pub fn release(&mut self, r: &mut ReaderModel, k: usize) {
        let (seq, slot) = r.holds.remove(k);
        if !self.registered(r) {
            return; // Reclaimed: the entry and its bits are not the reader's any more.
        }
        if r.member.is_some() {
            if let Some(word) = self.entries[r.index]
                .claims
                .iter()
                .position(|&v| v == seq + 1)
            {
                self.finish(r, word);
            }
            return;
        }
        if r.class != DeliveryClass::Gating {
            self.slots[slot].readers &= !(1 << r.index);
        }
        // The release publishes the reader's progress, deferred reads included.
        self.store_cursor(r);
    }

    pub(super) fn empty_or_closed(&self) -> ReadError {
        if self.closed && self.aborted {
            ReadError::Aborted { code: 0 }
        } else if self.closed {
            ReadError::Closed
        } else {
            ReadError::Empty
        }
    }

    /// Which sequence `r` reads next and how many it skips to get there.
    fn target(&self, r: &ReaderModel) -> Result<(u64, u64), ReadError> {
        let head = self.head;
        match r.class {
            DeliveryClass::LatestOnly => {
                if head == 0 || head - 1 < r.next {
                    return Err(self.empty_or_closed());
                }
                Ok((head - 1, head - 1 - r.next))
            }
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => {
                if r.next >= head {
                    return Err(self.empty_or_closed());
                }
                let oldest = head.saturating_sub(self.n);
                Ok(if r.next < oldest {
                    (oldest, oldest - r.next)
                } else {
                    (r.next, 0)
                })
            }
        }
    }

    /// `try_pin` (`buf = None`) or `try_copy` into `buf` bytes, up to the point where the read
    /// succeeds: the caller then pins (and later calls [`advance`](Self::advance)) or copies
    /// (and calls `advance` at once).
    ///
    /// Every sequence the reader moves past is counted as missed, whatever the call returns;
    /// a read that fails publishes the progress the reader deferred ([`Self::flush`]).
    pub fn read(&mut self, r: &mut ReaderModel, buf: Option<usize>) -> Result<ReadOk, ReadError> {
        if !self.registered(r) {
            return Err(ReadError::Evicted);
        }
        let got = self.read_registered(r, buf);
        if got.is_err() {
            self.flush(r);
        }
        got
    }

    /// [`read`](Self::read) of a registered reader, before a failure's flush.
    fn read_registered(
        &self,
        r: &mut ReaderModel,
        buf: Option<usize>,
    ) -> Result<ReadOk, ReadError> {
        let mut lost = 0;
        for _ in 0..READ_RETRIES {
            let (seq, skipped) = match self.target(r) {
                Ok(t) => t,
                Err(e) => {
                    r.missed += lost;
                    return Err(e);
                }
            };
            let located = self.locate(seq);
            let slot = located.unwrap_or(self.slot_of(seq));
            let s = &self.slots[slot];
            let want = 2 * seq + 2;
            if located.is_none() || s.writer || s.stamp > want {
                // Overwritten (or being overwritten): gone for good.
                lost += skipped + 1;
                r.next = seq + 1;
                continue;
            }
            if s.stamp < want {
                r.missed += lost;
                return Err(ReadError::Corrupt(
                    "slot stamp is behind the published head",
                ));
            }
            if let Some(b) = buf {
                if s.len > b {
                    r.missed += lost;
                    return Err(ReadError::BufferTooSmall { needed: s.len });
                }
            }
            r.missed += lost + skipped;
            return Ok(ReadOk {
                seq,
                slot,
                len: s.len,
                missed: lost + skipped,
                meta: s.meta,
            });
        }
        r.missed += lost;
        Err(ReadError::Lagging)
    }

    /// A one-message read of `seq` (a copy, a pin let go) completed: the cursor moves past it,
    /// and the shared entry says so at once for a gating reader, every
    /// [`PROGRESS_EVERY`] reads for one that does not gate.
    pub fn advance(&mut self, r: &mut ReaderModel, seq: u64) {
        r.next = seq + 1;
        r.received += 1;
        if r.class != DeliveryClass::Gating {
            r.unpublished += 1;
            if r.unpublished < PROGRESS_EVERY {
                return;
            }
        }
        self.store_cursor(r);
    }

    /// A read that found nothing, or a wait: the entry shows the progress the reader deferred,
    /// if any (and if the entry is still the reader's).
    pub fn flush(&mut self, r: &mut ReaderModel) {
        if r.unpublished != 0 && self.registered(r) {
            self.store_cursor(r);
        }
    }

    /// The reader's cursor store: the shared entry shows its cursor and counters.
    pub fn store_cursor(&mut self, r: &mut ReaderModel) {
        r.unpublished = 0;
        let e = &mut self.entries[r.index];
        e.cursor = r.shared_cursor();
        e.received = r.received;
        e.missed = r.missed;
    }

    /// Whether a read by `r` would find a message (or the ring closed).
    pub fn ready(&self, r: &ReaderModel) -> bool {
        if let Some(m) = r.member {
            // A pending or queued message, the group's next message published, or the end.
            let g = &self.entries[m.record];
            // The end counts only once no other member holds an unfinished message.
            let others_hold = self.entries.iter().enumerate().any(|(j, e)| {
                j != r.index
                    && e.is_member()
                    && e.group == g.group
                    && e.claims.iter().any(|&v| v != 0)
            });
            return m.pending.is_some()
                || g.claims.iter().any(|&v| v != 0)
                || (self.closed && !others_hold)
                || self.stamp_of(g.cursor) >= 2 * g.cursor + 2;
        }
        self.closed
            || match r.class {
                DeliveryClass::LatestOnly => self.head > r.next,
                _ => r.next < self.head,
            }
    }

    /// `wait_ready` with a bounded strategy that runs out (a reader about to wait publishes
    /// what it deferred first).
    pub fn wait_ready(&mut self, r: &mut ReaderModel) -> Result<(), ReadError> {
        if !self.registered(r) {
            Err(ReadError::Evicted)
        } else if self.ready(r) {
            Ok(())
        } else {
            self.flush(r);
            Err(ReadError::Timeout)
        }
    }

    /// `wait_drained` with a bounded strategy that runs out.
    pub fn drained(&self) -> bool {
        self.gating_floor().0 >= self.head
    }
}
