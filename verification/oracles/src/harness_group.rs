//! The group operations of the shared [`Harness`]: creating and joining groups, and a
//! member's reads (copy, pin, hold, dying while it holds a pin), each checked against the
//! model and against its group's exactly-once ledger.

use super::harness::{owner, Harness, Reader};
use super::model::{group_name, MemberModel, ReaderModel, Taken};
use super::{displays, Outcome};
use ring_core::{Consumer, DeliveryClass, ReadError, MAX_HOLDS};

impl<'s> Harness<'s> {
    /// Whether the reader `who` picks is a group member.
    pub(super) fn is_member(&self, who: u8) -> bool {
        !self.readers.is_empty()
            && self.readers[usize::from(who) % self.readers.len()]
                .model
                .member
                .is_some()
    }

    /// [`Op::CreateGroup`](super::ops::Op::CreateGroup).
    pub(super) fn create_group(&mut self, group: u8) -> Outcome {
        let Some(p) = self.producer.as_mut() else {
            return Ok(());
        };
        let name = group_name(group);
        let got = p.create_group(name);
        if let Err(e) = &got {
            displays(e)?;
            ensure!(
                matches!(
                    e,
                    ring_core::Error::ConsumerTableFull { .. }
                        | ring_core::Error::ProducerExists { .. }
                ),
                "create_group: undocumented {e:?}"
            );
        }
        if let Some(m) = self.model.as_mut() {
            let want = m.create_group(name);
            ensure!(
                got == want,
                "create_group({name}): got {got:?}, model {want:?}"
            );
        }
        Ok(())
    }

    /// [`Op::Join`](super::ops::Op::Join).
    pub(super) fn join(&mut self, group: u8) -> Outcome {
        let id = self.fresh_owner();
        let name = group_name(group);
        let got = Consumer::join_group(self.seg, name, owner(id));
        let want = self.model.as_mut().map(|m| m.join(name, id));
        match got {
            Ok(mut c) => {
                ensure!(
                    c.set_max_holds(MAX_HOLDS).is_ok(),
                    "set_max_holds({MAX_HOLDS}) refused"
                );
                let model = match want {
                    Some(Ok(rm)) => {
                        ensure!(
                            c.index() == rm.index && c.group() == rm.member.map(|m| m.record),
                            "joined at {} (group {:?}), model {rm:?}",
                            c.index(),
                            c.group()
                        );
                        rm
                    }
                    Some(Err(e)) => {
                        return Err(format!("joined at {}, model says {e:?}", c.index()))
                    }
                    None => ReaderModel {
                        index: c.index(),
                        owner: id,
                        class: DeliveryClass::Gating,
                        next: c.cursor(),
                        start: c.cursor(),
                        received: 0,
                        missed: 0,
                        unpublished: 0,
                        holds: Vec::new(),
                        member: c.group().map(|record| MemberModel {
                            record,
                            pending: None,
                        }),
                    },
                };
                self.readers.push(Reader {
                    consumer: c,
                    model,
                    holds: Vec::new(),
                });
            }
            Err(e) => {
                displays(&e)?;
                ensure!(
                    matches!(
                        e,
                        ring_core::Error::NoSuchGroup | ring_core::Error::ConsumerTableFull { .. }
                    ),
                    "join_group: undocumented {e:?}"
                );
                ensure!(
                    want.as_ref().is_none_or(|w| *w == Err(e)),
                    "join_group: got {e:?}, model {want:?}"
                );
            }
        }
        Ok(())
    }

    /// A member's `try_copy`: the model's take, finished, or kept for the retry when the
    /// buffer is too small.
    pub(super) fn member_copy(&mut self, who: u8, buf_len: usize) -> Outcome {
        let i = usize::from(who) % self.readers.len();
        let Self { model, readers, .. } = self;
        let r = &mut readers[i];
        let mut buf = vec![0u8; buf_len];
        let got = r.consumer.try_copy(&mut buf);
        match &got {
            Ok(c) => ensure!(c.len <= buf_len, "copied {} bytes into {buf_len}", c.len),
            Err(e) => displays(e)?,
        }
        let Some(m) = model.as_mut() else {
            return Ok(());
        };
        if let Ok(c) = &got {
            m.check_ledger(&r.model, c.seq, c.redelivered)?;
        }
        let want = m.member_take(&mut r.model);
        match (got, want) {
            (Ok(c), Ok(t)) if t.len <= buf_len => {
                ensure!(
                    (c.seq, c.len, c.missed, c.meta, c.redelivered)
                        == (t.seq, t.len, 0, t.meta, t.redelivered),
                    "member try_copy: got {c:?}, model {t:?}"
                );
                ensure!(
                    buf[..t.len] == m.slots[t.slot].words()[..t.len],
                    "copied bytes differ from what was written"
                );
                m.finish(&mut r.model, t.word);
            }
            (Err(e), Ok(t)) if t.len > buf_len => {
                ensure!(
                    e == ReadError::BufferTooSmall { needed: t.len },
                    "member try_copy into {buf_len} bytes: got {e:?}, model {t:?}"
                );
                m.keep_pending(&mut r.model, &t);
            }
            (Err(e), Err(w)) => ensure!(e == w, "member try_copy: got {e:?}, model {w:?}"),
            (got, want) => return Err(format!("member try_copy: got {got:?}, model {want:?}")),
        }
        Ok(())
    }

    /// A member's `try_hold`: the hold is a claim.
    pub(super) fn member_hold(&mut self, who: u8) -> Outcome {
        let i = usize::from(who) % self.readers.len();
        let Self { model, readers, .. } = self;
        let r = &mut readers[i];
        let limit = r.consumer.max_holds();
        let full = r.model.holds.len() >= limit;
        let got = r.consumer.try_hold();
        if let Err(e) = &got {
            displays(e)?;
        }
        let Some(m) = model.as_mut() else {
            if let Ok(h) = got {
                r.model.holds.push((h.seq(), 0));
                r.holds.push(h);
            }
            return Ok(());
        };
        if let Ok(h) = &got {
            m.check_ledger(&r.model, h.seq(), h.redelivered())?;
        }
        let want = if full {
            Err(ReadError::TooManyHolds { max: limit })
        } else {
            m.member_take(&mut r.model)
        };
        match (got, want) {
            (Ok(h), Ok(t)) => {
                ensure!(
                    (h.seq(), h.len(), h.missed(), h.meta(), h.redelivered())
                        == (t.seq, t.len, 0, t.meta, t.redelivered),
                    "member try_hold: got {h:?}, model {t:?}"
                );
                ensure!(
                    r.consumer.held_bytes(&h) == Some(&m.slots[t.slot].words()[..t.len]),
                    "held bytes differ from what was written"
                );
                r.model.holds.push((t.seq, t.slot));
                r.holds.push(h);
            }
            (Err(e), Err(w)) => ensure!(e == w, "member try_hold: got {e:?}, model {w:?}"),
            (got, want) => return Err(format!("member try_hold: got {got:?}, model {want:?}")),
        }
        Ok(())
    }

    /// A member's `try_pin` (optionally publishing while it is held: its claim gates), then
    /// the drop that finishes it.
    pub(super) fn member_pin(&mut self, who: u8, claim_while_pinned: bool) -> Outcome {
        let i = usize::from(who) % self.readers.len();
        let cap = self.cap;
        let Self {
            model,
            readers,
            producer,
            ..
        } = self;
        let Reader {
            consumer,
            model: rm,
            ..
        } = &mut readers[i];
        let pinned = match consumer.try_pin() {
            Ok(p) => p,
            Err(e) => {
                displays(&e)?;
                if let Some(m) = model.as_mut() {
                    let want = m.member_take(rm);
                    ensure!(
                        want == Err(e),
                        "member try_pin: got Err({e:?}), model {want:?}"
                    );
                }
                return Ok(());
            }
        };
        let Some(m) = model.as_mut() else {
            return Ok(());
        };
        m.check_ledger(rm, pinned.seq(), pinned.redelivered())?;
        let t = match m.member_take(rm) {
            Ok(t) => t,
            Err(e) => {
                return Err(format!(
                    "member try_pin pinned {}, model {e:?}",
                    pinned.seq()
                ))
            }
        };
        ensure!(
            (
                pinned.seq(),
                pinned.slot(),
                pinned.len(),
                pinned.meta(),
                pinned.redelivered()
            ) == (t.seq, t.slot, t.len, t.meta, t.redelivered),
            "member try_pin: got seq {} len {} redelivered {}, model {t:?}",
            pinned.seq(),
            pinned.len(),
            pinned.redelivered()
        );
        ensure!(
            pinned.bytes() == &m.slots[t.slot].words()[..t.len],
            "pinned bytes differ from what was written"
        );
        if let (true, Some(p)) = (claim_while_pinned, producer.as_mut()) {
            let data = vec![0xee; (t.seq as usize % cap) + 1];
            let got = p.try_publish(&data);
            let want = m.try_publish(&data);
            ensure!(
                got == want,
                "try_publish while a member pins {}: got {got:?}, model {want:?}",
                t.seq
            );
            ensure!(
                m.slots[t.slot].stamp == 2 * t.seq + 2,
                "the producer overwrote a message a member pins"
            );
            ensure!(
                pinned.bytes() == &m.slots[t.slot].words()[..t.len],
                "a pinned message changed under a member's pin"
            );
        }
        drop(pinned);
        m.finish(rm, t.word);
        Ok(())
    }

    /// A member dies holding a pin: its claim stays for the reclaim to hand over.
    pub(super) fn member_die_holding_pin(&mut self, mut r: Reader<'s>) -> Outcome {
        let got = r.consumer.try_pin().map(|p| {
            let seen = (p.seq(), p.redelivered());
            core::mem::forget(p);
            seen
        });
        if let Some(m) = self.model.as_mut() {
            if let Ok((seq, redelivered)) = got {
                m.check_ledger(&r.model, seq, redelivered)?;
            }
            let want = m
                .member_take(&mut r.model)
                .map(|t: Taken| (t.seq, t.redelivered));
            ensure!(
                got == want,
                "member try_pin before dying: got {got:?}, model {want:?}"
            );
        }
        core::mem::forget(r.consumer);
        Ok(())
    }
}
