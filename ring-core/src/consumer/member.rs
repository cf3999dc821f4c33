//! Group members: consumers that share one cursor, so that each message goes to exactly one
//! of them (competing consumers, a work queue).
//!
//! A member takes a message in two steps: it stores the message as a *claim* in its own entry,
//! then takes it from the group with a CAS (of the group's cursor, or of a word of the
//! redelivery queue). The claim is what keeps the producer off the message's slot until the
//! member finishes it; storing it first means there is no instant at which the message is in
//! neither place, and the producer scans the group's record before its members
//! (`Producer::lowest_gating_cursor`). A member that dies leaves its claims behind; the
//! producer's reclaim moves them to the group's queue, and the next member to read takes them
//! first, flagged as redelivered (docs/PROTOCOL.md, "Groups").

use super::{BatchItem, Consumer, Copied, Miss, PinParts, ReadError};
use crate::error::Error;
use crate::group::{drained_for, find_group, group_key, is_record_of, wake_readers};
use crate::layout::{ConsumerEntry, GROUP_CLAIMS, SEQ_LIMIT};
use crate::memory::{Memory, OpenJoin};
use crate::owner::OwnerId;
use crate::sync::Ordering;
use crate::DeliveryClass;

/// What a member knows of its group and of its own claims.
#[derive(Clone, Copy, Debug)]
pub(super) struct Member {
    /// The consumer-table index of the group's record.
    record: usize,
    key: u64,
    /// A copy of our entry's claim words (0, or `seq + 1`): only we write them.
    claimed: [u64; GROUP_CLAIMS],
    /// A claim whose read did not finish (a leaked `Pinned`, a batch callback that unwound, a
    /// buffer too small): the next read hands it out again, flagged as redelivered.
    pending: Option<usize>,
}

/// One message a member took.
pub(super) struct Claim {
    pub(super) seq: u64,
    /// The claim word it is stored in.
    pub(super) word: usize,
    pub(super) slot: usize,
    pub(super) len: usize,
    pub(super) redelivered: bool,
}

impl<M: OpenJoin> Consumer<M> {
    /// Joins group `name` (created by the producer with
    /// [`Producer::create_group`](crate::Producer::create_group)) as a new member: reads take
    /// messages from the group, each message going to exactly one member, in the order they
    /// take them. A member gates the producer only through the messages it holds; the group
    /// gates for the rest. See `create_group` for an example.
    ///
    /// # Errors
    /// [`Error::NoSuchGroup`], [`Error::ConsumerTableFull`].
    pub fn join_group(mem: M, name: &str, owner: OwnerId) -> Result<Self, Error> {
        // SAFETY: `OpenJoin` memory is in-process: nothing judges its participants dead, so no
        // reclaim can run on a verdict about this member.
        unsafe { Self::join_group_unchecked(mem, name, owner) }
    }
}

impl<M: Memory> Consumer<M> {
    /// [`join_group`](Self::join_group) on any memory.
    ///
    /// # Safety
    /// As [`new_unchecked`](Self::new_unchecked).
    ///
    /// # Errors
    /// As `join_group`.
    pub unsafe fn join_group_unchecked(mem: M, name: &str, owner: OwnerId) -> Result<Self, Error> {
        // SAFETY: the caller's promise covers whichever entry we register in.
        Self::in_any_entry(mem, |m, index| unsafe {
            Self::join_group_at_unchecked(m, index, name, owner)
        })
    }

    /// [`join_group`](Self::join_group) into entry `index` (ring-os takes the entry's liveness
    /// lock first).
    ///
    /// # Safety
    /// As [`new_unchecked`](Self::new_unchecked), for entry `index`.
    ///
    /// # Errors
    /// As `join_group`, and [`Error::NoSuchConsumer`], [`Error::EntryBusy`].
    #[allow(
        clippy::result_large_err,
        reason = "the memory handle is given back to the caller"
    )]
    pub unsafe fn join_group_at_unchecked(
        mem: M,
        index: usize,
        name: &str,
        owner: OwnerId,
    ) -> Result<Self, (M, Error)> {
        let key = group_key(name);
        let Some(record) = find_group(&mem, key) else {
            return Err((mem, Error::NoSuchGroup));
        };
        if index >= mem.geometry().consumers() {
            return Err((mem, Error::NoSuchConsumer { index }));
        }
        match Self::register(&mem, index, DeliveryClass::Gating, owner, key, || {}) {
            Some((generation, head)) => {
                let mut c = Self::registered(mem, index, DeliveryClass::Gating, owner, generation);
                c.next = head;
                // A member reads through its group: never the one-pass reads.
                c.fast = 0;
                c.member = Some(Member {
                    record,
                    key,
                    claimed: [0; GROUP_CLAIMS],
                    pending: None,
                });
                Ok(c)
            }
            None => Err((mem, Error::EntryBusy { index })),
        }
    }

    /// The consumer-table index of this consumer's group record, if it is a group member.
    pub fn group(&self) -> Option<usize> {
        self.member.map(|m| m.record)
    }

    /// The group's record, checked to still be the group's (a peer may scribble the table).
    fn record(&self, m: &Member) -> Result<&ConsumerEntry, ReadError> {
        let g = self.mem.consumer_entry(m.record);
        if is_record_of(g, m.key) {
            Ok(g)
        } else {
            Err(ReadError::Corrupt(
                "the group's record was overwritten in the consumer table",
            ))
        }
    }

    /// Takes the next message from the group (a queued redelivery first) and checks that its
    /// slot holds it. The message stays claimed until [`finish`](Self::finish).
    pub(super) fn claim_from_group(&mut self) -> Result<Claim, ReadError> {
        let Some(mut m) = self.member else {
            return Err(ReadError::NotSupported("not a group member"));
        };
        if let Some(word) = m.pending.take() {
            self.member = Some(m);
            let seq = m.claimed[word] - 1;
            return self.check_claim(seq, word, true);
        }
        let Some(word) = m.claimed.iter().position(|&v| v == 0) else {
            return Err(ReadError::TooManyHolds { max: GROUP_CLAIMS });
        };
        let (seq, redelivered) = self.take(&m, word)?;
        m.claimed[word] = seq + 1;
        self.member = Some(m);
        self.received += 1;
        self.check_claim(seq, word, redelivered)
    }

    /// The claim protocol: store the claim in `word` of our entry, then take the message from
    /// the group's queue or cursor. Returns the sequence and whether it is a redelivery.
    fn take(&self, m: &Member, word: usize) -> Result<(u64, bool), ReadError> {
        let e = self.own_entry()?;
        let g = self.record(m)?;
        let mine = &e.claims[word];
        for queued in &g.claims {
            // Acquire: pairs with the producer's Release CAS that queued it.
            let v = queued.load(Ordering::Acquire);
            if v == 0 || v > SEQ_LIMIT {
                continue;
            }
            // Relaxed: published by the Release half of the CAS below, before which no one
            // can see the message gone from the queue.
            mine.store(v, Ordering::Relaxed);
            // AcqRel: Release publishes our claim to the producer's Acquire load of the queue
            // word (it scans members after the record); Acquire orders us after the queueing.
            if queued
                .compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok((v - 1, true));
            }
            // Another member took it. Relaxed: our claim protected nothing we read.
            mine.store(0, Ordering::Relaxed);
        }
        for _ in 0..crate::READ_RETRIES {
            // Acquire: pairs with the AcqRel CAS of the member that moved the cursor here.
            let seq = g.cursor.load(Ordering::Acquire);
            if seq >= SEQ_LIMIT {
                return Err(ReadError::Corrupt(
                    "the group's cursor is beyond the sequence range",
                ));
            }
            let want = 2 * seq + 2;
            let stamp = self.stamp_of(seq);
            if stamp < want {
                return Err(self.empty_or_closed(|c| {
                    // Acquire: as above.
                    g.cursor.load(Ordering::Acquire) == seq
                        && c.stamp_of(seq) < want
                        && drained_for(&c.mem, g, m.key, c.index)
                }));
            }
            if stamp > want {
                // Rewritten (a later publication, or an aborted claim's odd stamp): only possible
                // if another member took it meanwhile, since the group gates the producer while
                // its cursor is at `seq`. A plain load could return a stale `seq` here (an
                // abort's odd stamp is a Relaxed store: nothing orders it after the cursor
                // move); a read-modify-write reads the newest value. Acquire: as the load.
                if g.cursor.fetch_or(0, Ordering::Acquire) == seq {
                    return Err(ReadError::Corrupt(
                        "the group's next message was overwritten while the group gated it",
                    ));
                }
                continue;
            }
            // Relaxed: published by the Release half of the cursor CAS below.
            mine.store(seq + 1, Ordering::Relaxed);
            // AcqRel: Release publishes our claim to the producer, whose Acquire cursor load
            // (a release sequence of every member's CAS) precedes its scan of the members.
            if g.cursor
                .compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok((seq, false));
            }
            // Relaxed: our claim protected nothing we read.
            mine.store(0, Ordering::Relaxed);
        }
        // Other members took every message we tried: there may be more, and the caller's
        // next try (or its wait, which finds the group ready) gets one.
        Err(ReadError::Empty)
    }

    /// Checks that claimed message `seq` is in its slot; on failure gives the claim back.
    fn check_claim(
        &mut self,
        seq: u64,
        word: usize,
        redelivered: bool,
    ) -> Result<Claim, ReadError> {
        // The claim gates the producer, exactly as a gating consumer's cursor does.
        let held = self
            .slot_for(seq)
            .and_then(|slot| self.hold_by_cursor(self.mem.slot_header(slot), slot, seq));
        match held {
            Ok((slot, len)) => Ok(Claim {
                seq,
                word,
                slot,
                len,
                redelivered,
            }),
            Err(miss) => {
                self.finish(word);
                Err(match miss {
                    Miss::Fatal(e) => e,
                    Miss::Overrun => {
                        ReadError::Corrupt("a claimed message was overwritten: a claim was lost")
                    }
                })
            }
        }
    }

    /// Finishes the claim in `word`: the producer may reuse the message's slot.
    pub(super) fn finish(&mut self, word: usize) {
        let Some(mut m) = self.member else { return };
        m.claimed[word] = 0;
        if m.pending == Some(word) {
            m.pending = None;
        }
        self.member = Some(m);
        let Ok(e) = self.own_entry() else {
            return; // Reclaimed: the claims are not ours any more.
        };
        // Release: pairs with the producer's Acquire load of the claims in its gating scan, so
        // our reads of the message happen before its next writes to the slot.
        e.claims[word].store(0, Ordering::Release);
        // Relaxed: a statistic for inspection.
        e.received.store(self.received, Ordering::Relaxed);
        self.wake_producer();
        // Relaxed: only the end matters here, and `drained_for`'s Acquire loads order the rest.
        if self.mem.producer_line().flags.load(Ordering::Relaxed) & crate::layout::FLAG_CLOSED != 0
        {
            // Another member may be parked at the group's end waiting for this finish.
            wake_readers(&self.mem);
        }
    }

    /// Marks the claim in `word` as handed out but not finished: the next read hands it out
    /// again (a leaked `Pinned`, an unwinding batch callback, a buffer too small).
    pub(super) fn set_pending(&mut self, word: Option<usize>) {
        if let Some(m) = self.member.as_mut() {
            m.pending = word;
        }
    }

    /// The claim word holding `seq`, if this member holds it.
    pub(super) fn claim_word(&self, seq: u64) -> Option<usize> {
        self.member?.claimed.iter().position(|&v| v == seq + 1)
    }

    /// Whether a member's read would find something: a pending or queued message, the group's
    /// next message published, or the ring's end.
    #[cold]
    #[inline(never)]
    pub(super) fn member_ready(&self, m: &Member) -> bool {
        if m.pending.is_some() {
            return true;
        }
        let Ok(g) = self.record(m) else {
            return true; // The read reports the corruption.
        };
        // Relaxed: a hint; the read's own loads decide.
        if g.claims.iter().any(|w| w.load(Ordering::Relaxed) != 0) {
            return true;
        }
        // Acquire: as in `take`.
        let seq = g.cursor.load(Ordering::Acquire);
        seq >= SEQ_LIMIT
            || self.stamp_of(seq) >= 2 * seq + 2
            || !matches!(
                self.empty_or_closed(|c| {
                    c.stamp_of(seq) < 2 * seq + 2 && drained_for(&c.mem, g, m.key, c.index)
                }),
                ReadError::Empty
            )
    }

    /// Pins the next message of the group (see [`Consumer::try_pin`]).
    #[cold]
    #[inline(never)]
    pub(super) fn member_pin(&mut self) -> Result<PinParts, ReadError> {
        let c = self.claim_from_group()?;
        self.set_pending(Some(c.word));
        Ok(PinParts {
            slot: c.slot,
            seq: c.seq,
            len: c.len,
            missed: 0,
            // A claim word index is below GROUP_CLAIMS (8).
            claim: c.word as u8,
            again: c.redelivered,
        })
    }

    /// Copies the next message of the group (see [`Consumer::try_copy`]).
    #[cold]
    #[inline(never)]
    pub(super) fn member_copy(&mut self, buf: &mut [u8]) -> Result<Copied, ReadError> {
        let c = self.claim_from_group()?;
        if c.len > buf.len() {
            // Keep it: the retry with a larger buffer gets this message.
            self.set_pending(Some(c.word));
            return Err(ReadError::BufferTooSmall { needed: c.len });
        }
        let hdr = self.mem.slot_header(c.slot);
        // Relaxed: stable while claimed; ordered by the stamp's Acquire in `check_claim`.
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        crate::words::read(self.message_words(c.slot, c.len), &mut buf[..c.len]);
        self.finish(c.word);
        Ok(Copied {
            seq: c.seq,
            len: c.len,
            missed: 0,
            meta,
            redelivered: c.redelivered,
        })
    }

    /// Reads up to `max` messages of the group, one claim at a time (see
    /// [`Consumer::try_read_batch`]).
    #[cold]
    #[inline(never)]
    pub(super) fn member_batch(
        &mut self,
        max: usize,
        mut f: impl FnMut(BatchItem<'_>),
    ) -> Result<usize, ReadError> {
        let mut count = 0;
        while count < max {
            let c = match self.claim_from_group() {
                Ok(c) => c,
                Err(e) if count == 0 => return Err(e),
                Err(_) => break,
            };
            // Should `f` unwind, the next read hands this message out again.
            self.set_pending(Some(c.word));
            let hdr = self.mem.slot_header(c.slot);
            // Relaxed: stable while claimed; ordered by the stamp's Acquire in `check_claim`.
            let meta = [
                hdr.meta[0].load(Ordering::Relaxed),
                hdr.meta[1].load(Ordering::Relaxed),
            ];
            f(BatchItem {
                words: &self.message_words(c.slot, c.len)[..c.len.div_ceil(8)],
                seq: c.seq,
                len: c.len,
                missed: 0,
                meta,
            });
            self.finish(c.word);
            count += 1;
        }
        Ok(count)
    }
}
