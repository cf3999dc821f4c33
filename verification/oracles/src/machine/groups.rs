//! Groups: creating them, joining, and a member's takes and releases, each checked against
//! the group's exactly-once ledger.

use super::{group_name, or_skip, Failure, Model, Outcome};
use ring_core::{ReadError, MAX_HOLDS};

impl Model {
    /// [`Op::CreateGroup`](super::Op::CreateGroup).
    pub(super) fn create_group(&mut self, group: u8) -> Outcome {
        if self.claim.is_some() {
            return Outcome::Skipped; // The claim borrows the producer.
        }
        Outcome::Group(self.ring.create_group(group_name(group)))
    }

    /// [`Op::Join`](super::Op::Join).
    pub(super) fn join(&mut self, group: u8) -> Outcome {
        match self
            .ring
            .join(group_name(group), self.next_consumer_owner())
        {
            Ok(reader) => self.adopt(reader),
            Err(e) => Outcome::RegisterFailed(e),
        }
    }

    /// A member's `try_copy` (`buf = Some(len)`) or `try_hold` (`None`): the pending message,
    /// else the first queued redelivery, else the group's next message. `observed` (the real
    /// ring's outcome) is checked against the group's ledger: a message goes to one member
    /// only, unless it is redelivered, and only a message owed a redelivery is redelivered.
    ///
    /// # Errors
    /// A [`Failure`] naming the broken rule.
    pub(super) fn member_take(
        &mut self,
        i: usize,
        buf: Option<usize>,
        observed: &Outcome,
    ) -> Result<Outcome, Failure> {
        let Some(c) = self.consumers[i].as_mut().filter(|c| c.alive) else {
            return Ok(Outcome::Skipped);
        };
        if c.reader.member.is_none() {
            return Ok(Outcome::Skipped);
        }
        if let Outcome::Taken {
            seq, redelivered, ..
        } = observed
        {
            self.ring.check_ledger(&c.reader, *seq, *redelivered)?;
        }
        if buf.is_none() && c.held.len() >= MAX_HOLDS {
            return Ok(Outcome::ReadFailed(ReadError::TooManyHolds {
                max: MAX_HOLDS,
            }));
        }
        let t = match self.ring.member_take(&mut c.reader) {
            Ok(t) => t,
            Err(e) => return Ok(Outcome::ReadFailed(e)),
        };
        let s = &self.ring.slots[t.slot];
        let taken = Outcome::Taken {
            seq: t.seq,
            bytes: s.message().to_vec(),
            meta: s.meta,
            redelivered: t.redelivered,
        };
        match buf {
            Some(b) if t.len > b => {
                // Kept: the retry (with a larger buffer, say) gets it again, flagged.
                self.ring.keep_pending(&mut c.reader, &t);
                Ok(Outcome::ReadFailed(ReadError::BufferTooSmall {
                    needed: t.len,
                }))
            }
            Some(_) => {
                self.ring.finish(&mut c.reader, t.word);
                Ok(taken)
            }
            None => {
                c.held.push(s.message().to_vec());
                c.reader.holds.push((t.seq, t.slot));
                Ok(taken)
            }
        }
    }

    /// A member's `release` of hold `which`: its claim ends.
    pub(super) fn member_release(&mut self, i: usize, which: u8) -> Outcome {
        let c = or_skip!(self.consumers[i].as_mut().filter(|c| c.alive));
        if c.held.is_empty() {
            return Outcome::Skipped;
        }
        let k = which as usize % c.held.len();
        let seq = c.reader.holds[k].0;
        let bytes = c.held.remove(k);
        self.ring.release(&mut c.reader, k);
        Outcome::Released { seq, bytes }
    }
}
