//! The producer's operations: claim, write, publish (one message or a batch).

use super::{batch_messages, pattern, Model, ModelClaim, Outcome};
use ring_core::ClaimError;

impl Model {
    /// [`Op::Claim`](super::Op::Claim).
    pub(super) fn claim(&mut self) -> Outcome {
        if self.claim.is_some() {
            return Outcome::Skipped;
        }
        match self.ring.claim() {
            Err(e) => Outcome::ClaimFailed(e),
            Ok(slot) => {
                let seq = self.ring.head;
                self.ring.begin(slot);
                self.claim = Some(ModelClaim { slot, seq, len: 0 });
                Outcome::Claimed(seq)
            }
        }
    }

    /// [`Op::Write`](super::Op::Write).
    pub(super) fn write(&mut self, offset: usize, len: usize, seed: u8) -> Outcome {
        let cap = self.capacity();
        let Some(c) = &mut self.claim else {
            return Outcome::Skipped;
        };
        let end = offset + len;
        if end > cap {
            return Outcome::Wrote(Err((cap, end)));
        }
        self.ring.write_at(c.slot, offset, &pattern(seed, len));
        c.len = c.len.max(end);
        Outcome::Wrote(Ok(()))
    }

    /// [`Op::Publish`](super::Op::Publish): metadata `[seq, len]`.
    pub(super) fn publish(&mut self) -> Outcome {
        match self.claim.take() {
            None => Outcome::Skipped,
            Some(c) => Outcome::Published(self.ring.publish(c.slot, c.len, [c.seq, c.len as u64])),
        }
    }

    /// [`Op::PublishMeta`](super::Op::PublishMeta).
    pub(super) fn publish_meta(&mut self, len: u16, seed: u8) -> Outcome {
        if self.claim.is_some() {
            // The claim borrows the producer.
            return Outcome::Skipped;
        }
        let cap = self.capacity();
        if usize::from(len) > cap {
            return Outcome::ClaimFailed(ClaimError::TooLarge {
                len: usize::from(len),
                capacity: cap,
            });
        }
        match self.ring.claim() {
            Ok(slot) => {
                let meta = [u64::from(seed), u64::from(len)];
                let msg = pattern(seed, usize::from(len));
                Outcome::Published(self.ring.fill_publish(slot, &msg, meta))
            }
            Err(e) => Outcome::ClaimFailed(e),
        }
    }

    /// [`Op::PublishBatch`](super::Op::PublishBatch).
    pub(super) fn publish_batch(&mut self, count: u8, len: u16, seed: u8) -> Outcome {
        if self.claim.is_some() {
            // The claim borrows the producer.
            return Outcome::Skipped;
        }
        let msgs = batch_messages(count, len, seed);
        let cap = self.capacity();
        if let Some(m) = msgs.iter().find(|m| m.len() > cap) {
            return Outcome::PublishedBatch(Err(ClaimError::TooLarge {
                len: m.len(),
                capacity: cap,
            }));
        }
        let mut published = 0;
        for m in &msgs {
            match self.ring.claim() {
                Ok(slot) => {
                    // As `try_publish`: a small message in the message line alone.
                    self.ring.fill_publish(slot, m, [0; 2]);
                    published += 1;
                }
                Err(e) if published == 0 => return Outcome::PublishedBatch(Err(e)),
                Err(_) => break,
            }
        }
        Outcome::PublishedBatch(Ok(published))
    }
}
