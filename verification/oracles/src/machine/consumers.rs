//! Consumers that are not group members: registration, pins, copies, holds, batches, leaving,
//! and reclaims (of dead consumers, and of live ones for the adversarial liveness oracle).

use super::{or_skip, Class, Model, ModelConsumer, Outcome};
use crate::model::ReadOk;
use ring_core::layout::OWNER_GROUP;
use ring_core::{ReadError, Reclaimed};

impl Model {
    /// Sets (`pin`) or clears the reader bit of consumer `i` in `slot`; a gating consumer
    /// sets none (its pin is its cursor).
    fn reader_bit(&mut self, i: usize, slot: usize, pin: bool) {
        if self.consumers[i].as_ref().is_some_and(|c| !c.gating()) {
            let s = &mut self.ring.slots[slot];
            if pin {
                s.readers |= 1 << i;
            } else {
                s.readers &= !(1 << i);
            }
        }
    }

    /// A pin (`buf == None`: held, the consumer stays at the message) or a copy into `buf`
    /// bytes (consumed).
    pub(super) fn read(&mut self, i: usize, buf: Option<usize>) -> Outcome {
        match &self.consumers[i] {
            Some(c) if c.alive && c.pin.is_none() => {}
            Some(c) if c.alive && c.leaked => {
                // The read takes the leaked pin back first (the message is not consumed).
                let (slot, _) = c.pin.unwrap_or_default();
                self.reader_bit(i, slot, false);
                let c = or_skip!(self.consumers[i].as_mut());
                c.pin = None;
                c.leaked = false;
            }
            _ => return Outcome::Skipped,
        }
        let c = or_skip!(self.consumers[i].as_mut());
        let ReadOk {
            seq, slot, missed, ..
        } = match self.ring.read(&mut c.reader, buf) {
            Ok(r) => r,
            Err(e) => return Outcome::ReadFailed(e),
        };
        let s = &self.ring.slots[slot];
        let out = Outcome::Read {
            seq,
            missed,
            bytes: s.message().to_vec(),
            meta: s.meta,
        };
        if buf.is_some() {
            self.ring.advance(&mut c.reader, seq);
        } else {
            // The skipped messages are counted: a read after a leak starts at `seq`.
            c.reader.next = seq;
            c.pin = Some((slot, seq));
            self.reader_bit(i, slot, true);
        }
        out
    }

    /// [`Op::Unpin`](super::Op::Unpin): the pinned message is consumed.
    pub(super) fn unpin(&mut self, i: usize) -> Outcome {
        let (slot, seq) = match &self.consumers[i] {
            Some(c) if c.alive && !c.leaked => or_skip!(c.pin),
            _ => return Outcome::Skipped,
        };
        self.reader_bit(i, slot, false);
        let c = or_skip!(self.consumers[i].as_mut());
        c.pin = None;
        self.ring.advance(&mut c.reader, seq);
        Outcome::Unpinned
    }

    /// [`Op::Hold`](super::Op::Hold): a pin's read, kept as a hold (the consumer moves on).
    pub(super) fn hold(&mut self, i: usize) -> Outcome {
        match &self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) => {
                // The limit is checked before anything is read (a leaked pin stays leaked).
                if c.reader.holds.len() >= ring_core::DEFAULT_MAX_HOLDS {
                    return Outcome::ReadFailed(ReadError::TooManyHolds {
                        max: ring_core::DEFAULT_MAX_HOLDS,
                    });
                }
            }
            _ => return Outcome::Skipped,
        }
        let out = self.read(i, None);
        if let (Outcome::Read { seq, bytes, .. }, Some(c)) = (&out, &mut self.consumers[i]) {
            // The pin's bit (if any) stays: it is the hold's now.
            let (slot, _) = c.pin.take().unwrap_or_default();
            c.held.push(bytes.clone());
            self.ring.hold(&mut c.reader, *seq, slot);
        }
        out
    }

    /// [`Op::Release`](super::Op::Release) of a lone consumer's hold.
    pub(super) fn release(&mut self, i: usize, which: u8) -> Outcome {
        let c = match &mut self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) && !c.held.is_empty() => c,
            _ => return Outcome::Skipped,
        };
        let k = which as usize % c.held.len();
        let seq = c.reader.holds[k].0;
        let bytes = c.held.remove(k);
        self.ring.release(&mut c.reader, k);
        Outcome::Released { seq, bytes }
    }

    /// [`Op::ReadBatch`](super::Op::ReadBatch).
    pub(super) fn read_batch(&mut self, i: usize, max: u8) -> Outcome {
        match &self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) => {}
            _ => return Outcome::Skipped,
        }
        let mut items = Vec::new();
        while items.len() < usize::from(max) {
            let read = self.read(i, None);
            match read {
                Outcome::Read { seq, .. } => {
                    // Released right after the callback.
                    let (slot, _) = or_skip!(self.consumers[i].as_ref().and_then(|c| c.pin));
                    self.reader_bit(i, slot, false);
                    let c = or_skip!(self.consumers[i].as_mut());
                    c.pin = None;
                    c.reader.next = seq + 1;
                    c.reader.received += 1;
                    items.push(read);
                }
                Outcome::ReadFailed(e) if items.is_empty() => {
                    return Outcome::ReadBatch(Err(e));
                }
                _ => break,
            }
        }
        // One cursor store for the batch: the consumer's next sequence (past any message a
        // failed last read stepped over).
        let c = or_skip!(self.consumers[i].as_mut());
        self.ring.store_cursor(&mut c.reader);
        Outcome::ReadBatch(Ok(items))
    }

    /// [`Op::Register`](super::Op::Register) (and `RegisterAs`) with owner id `owner`.
    pub(super) fn register(&mut self, class: Class, owner: u64) -> Outcome {
        match self.ring.register(class.into(), owner) {
            Ok(reader) => self.adopt(reader),
            Err(e) => Outcome::RegisterFailed(e),
        }
    }

    /// Keeps the handle of a consumer that just registered.
    pub(super) fn adopt(&mut self, reader: crate::model::ReaderModel) -> Outcome {
        let i = reader.index;
        self.consumers[i] = Some(ModelConsumer {
            reader,
            alive: true,
            pin: None,
            leaked: false,
            held: Vec::new(),
        });
        self.registrations += 1;
        Outcome::Registered(i)
    }

    /// [`Op::Deregister`](super::Op::Deregister): drops its pin, then its handle.
    pub(super) fn deregister(&mut self, i: usize) -> Outcome {
        match self.consumers[i].take_if(|c| c.alive) {
            Some(c) => {
                self.ring.leave(&c.reader);
                Outcome::Gone
            }
            None => Outcome::Skipped,
        }
    }

    /// [`Op::Reclaim`](super::Op::Reclaim): a dead consumer's entry as its owner, a free one
    /// (a group's record as the ring's), a live one under a wrong owner (refused).
    pub(super) fn reclaim(&mut self, i: usize) -> Outcome {
        if self.claim.is_some() {
            // The claim borrows the producer, which owns `reclaim`.
            return Outcome::Skipped;
        }
        let expected = match &self.consumers[i] {
            Some(c) if c.alive => c.reader.owner + 1_000_000,
            Some(c) => c.reader.owner,
            None if self.ring.entries[i].is_record() => OWNER_GROUP,
            None => 0,
        };
        self.reclaim_as(i, expected)
    }

    /// `Producer::reclaim(i, expected)`; the handle goes once its entry is freed.
    fn reclaim_as(&mut self, i: usize, expected: u64) -> Outcome {
        let r = self.ring.reclaim(i, expected);
        if let Ok(Reclaimed {
            was_registered: true,
            ..
        }) = r
        {
            self.consumers[i] = None;
        }
        Outcome::Reclaim(r)
    }

    /// [`Op::ReclaimLive`](super::Op::ReclaimLive): a live consumer that holds no `Pinned` (a
    /// leaked pin is allowed), reclaimed as its right owner. The victim keeps its handle.
    pub(super) fn reclaim_live(&mut self, i: usize) -> Outcome {
        if self.claim.is_some() {
            return Outcome::Skipped;
        }
        let owner = match &self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) && c.held.is_empty() => {
                c.reader.owner
            }
            _ => return Outcome::Skipped,
        };
        self.victims.push(owner);
        self.reclaim_as(i, owner)
    }
}
