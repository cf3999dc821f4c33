//! Groups: records, members, the exactly-once ledger, and the floor the producer keeps for
//! gating consumers and groups.

use super::{words_floor, EntryModel, Ledger, MemberModel, ReaderModel, RingModel, Taken};
use ring_core::layout::{CLASS_GROUP, GROUP_CLAIMS, OWNER_GROUP};
use ring_core::{group_key, DeliveryClass, Error, ReadError};

impl RingModel {
    /// The lowest sequence the producer must keep and whose entry keeps it (`u64::MAX` and 0
    /// when nothing gates): a lone gating consumer's cursor; a group's cursor or queued
    /// message; a message a member (alive or dead, until reclaimed) took and did not finish.
    /// Ties go to the first in table order, a record before any member.
    pub fn gating_floor(&self) -> (u64, usize) {
        let mut lowest = (u64::MAX, 0);
        for (i, e) in self.entries.iter().enumerate() {
            let v = if e.is_record() {
                e.cursor.min(words_floor(&e.claims))
            } else if e.active && e.class == DeliveryClass::Gating as u32 && e.group == 0 {
                e.cursor
            } else {
                continue;
            };
            if v < lowest.0 {
                lowest = (v, i);
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.is_member() && words_floor(&e.claims) < lowest.0 {
                lowest = (words_floor(&e.claims), i);
            }
        }
        lowest
    }

    /// The record of group `name`, if created.
    pub fn record_of(&self, name: &str) -> Option<usize> {
        let key = group_key(name);
        self.entries
            .iter()
            .position(|e| e.is_record() && e.group == key)
    }

    /// `Producer::create_group` (idempotent): a record starting at `head`.
    pub fn create_group(&mut self, name: &str) -> Result<usize, Error> {
        if let Some(i) = self.record_of(name) {
            return Ok(i);
        }
        let Some(i) = self.entries.iter().position(|e| !e.active) else {
            return Err(Error::ConsumerTableFull {
                capacity: self.entries.len() as u32,
            });
        };
        self.entries[i] = EntryModel {
            active: true,
            class: CLASS_GROUP,
            owner: OWNER_GROUP,
            cursor: self.head,
            received: 0,
            missed: 0,
            group: group_key(name),
            claims: [0; GROUP_CLAIMS],
        };
        self.ledgers.insert(i, Ledger::default());
        Ok(i)
    }

    /// `Consumer::join_group`: a gating entry whose key names the group.
    pub fn join(&mut self, name: &str, owner: u64) -> Result<ReaderModel, Error> {
        let Some(record) = self.record_of(name) else {
            return Err(Error::NoSuchGroup);
        };
        let mut r = self.register(DeliveryClass::Gating, owner)?;
        self.entries[r.index].group = group_key(name);
        r.member = Some(MemberModel {
            record,
            pending: None,
        });
        Ok(r)
    }

    /// Checks a member's read the real ring returned against its group's ledger: a message
    /// goes to one member only unless it is redelivered, and only a message owed a
    /// redelivery is redelivered.
    pub fn check_ledger(&self, r: &ReaderModel, seq: u64, redelivered: bool) -> Result<(), String> {
        let Some(l) = r.member.and_then(|m| self.ledgers.get(&m.record)) else {
            return Ok(());
        };
        if redelivered && !l.owed.contains(&seq) {
            return Err(format!(
                "message {seq} redelivered, but no reclaimed member or unfinished read gave it \
                 back (owed: {:?})",
                l.owed
            ));
        }
        if !redelivered && l.handed.contains(&seq) {
            return Err(format!(
                "message {seq} handed out a second time, not flagged as redelivered"
            ));
        }
        Ok(())
    }

    /// A member's read up to the hand-out: its pending message, else the first queued
    /// redelivery, else the group's next message; the claim is stored (the caller finishes
    /// it, keeps it as a hold, or marks it pending).
    pub fn member_take(&mut self, r: &mut ReaderModel) -> Result<Taken, ReadError> {
        let Some(mut m) = r.member else {
            return Err(ReadError::NotSupported("not a group member"));
        };
        let own = r.index;
        let (word, seq, redelivered) = if let Some(word) = m.pending.take() {
            r.member = Some(m);
            (word, self.entries[own].claims[word] - 1, true)
        } else {
            if !self.registered(r) {
                return Err(ReadError::Evicted);
            }
            let Some(word) = self.entries[own].claims.iter().position(|&v| v == 0) else {
                return Err(ReadError::TooManyHolds { max: GROUP_CLAIMS });
            };
            let queue = &mut self.entries[m.record].claims;
            let (seq, redelivered) = if let Some(q) = queue.iter().position(|&v| v != 0) {
                (core::mem::take(&mut queue[q]) - 1, true)
            } else {
                let seq = self.entries[m.record].cursor;
                let stamp = self.stamp_of(seq);
                if stamp < 2 * seq + 2 {
                    // The group's stream ends for this member only when no other member (alive,
                    // or dead and not yet reclaimed) holds an unfinished message.
                    let key = self.entries[m.record].group;
                    let others_hold = self.entries.iter().enumerate().any(|(j, e)| {
                        j != own
                            && e.is_member()
                            && e.group == key
                            && e.claims.iter().any(|&v| v != 0)
                    });
                    return Err(match self.empty_or_closed() {
                        ReadError::Closed | ReadError::Aborted { .. } if others_hold => {
                            ReadError::Empty
                        }
                        other => other,
                    });
                }
                if stamp > 2 * seq + 2 {
                    return Err(ReadError::Corrupt(
                        "the group's next message was overwritten while the group gated it",
                    ));
                }
                self.entries[m.record].cursor = seq + 1;
                (seq, false)
            };
            self.entries[own].claims[word] = seq + 1;
            r.received += 1;
            (word, seq, redelivered)
        };
        if let Some(l) = self.ledgers.get_mut(&m.record) {
            if redelivered {
                l.owed.remove(&seq);
            } else {
                l.handed.insert(seq);
            }
        }
        let slot = self.locate(seq).unwrap_or(self.slot_of(seq));
        let s = &self.slots[slot];
        Ok(Taken {
            seq,
            slot,
            len: s.len,
            meta: s.meta,
            redelivered,
            word,
        })
    }

    /// A member's read handed `t` out but did not finish it: the next read hands it out
    /// again.
    pub fn keep_pending(&mut self, r: &mut ReaderModel, t: &Taken) {
        if let Some(m) = r.member.as_mut() {
            m.pending = Some(t.word);
            if let Some(l) = self.ledgers.get_mut(&m.record) {
                l.owed.insert(t.seq);
            }
        }
    }

    /// A member finished the message in claim `word`.
    pub fn finish(&mut self, r: &mut ReaderModel, word: usize) {
        if let Some(m) = r.member.as_mut() {
            if m.pending == Some(word) {
                m.pending = None;
            }
        }
        if self.registered(r) {
            let e = &mut self.entries[r.index];
            e.claims[word] = 0;
            e.received = r.received;
        }
    }

    /// Moves dead member `index`'s claims to its group's queue (all or none).
    pub(super) fn hand_claims_to_group(&mut self, index: usize) -> Result<(), Error> {
        let key = self.entries[index].group;
        let Some(record) = (0..self.entries.len())
            .find(|&i| self.entries[i].is_record() && self.entries[i].group == key)
        else {
            self.entries[index].claims = [0; GROUP_CLAIMS];
            return Ok(());
        };
        let g = self.entries[record].clone();
        let moving: Vec<u64> = self.entries[index]
            .claims
            .iter()
            .copied()
            .filter(|&v| v != 0 && v - 1 < g.cursor && !g.claims.contains(&v))
            .collect();
        let free = g.claims.iter().filter(|&&v| v == 0).count();
        if free < moving.len() {
            return Err(Error::RedeliveryFull {
                needed: moving.len(),
                free,
            });
        }
        let mut next = moving.iter();
        for w in &mut self.entries[record].claims {
            if *w == 0 {
                match next.next() {
                    Some(&v) => *w = v,
                    None => break,
                }
            }
        }
        if let Some(l) = self.ledgers.get_mut(&record) {
            l.owed.extend(moving.iter().map(|v| v - 1));
        }
        self.entries[index].claims = [0; GROUP_CLAIMS];
        Ok(())
    }
}
