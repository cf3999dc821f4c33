//! The consumer-side operations of the shared [`Harness`]: register, pin (optionally
//! publishing while pinned), copy, bounded waits and dying while holding a pin.

use super::attach::{claim_error_documented, pinned_fits, read_error_documented};
use super::harness::{owner, Harness, Reader};
use super::model::ReaderModel;
use super::{displays, Outcome};
use ring_core::inspect::total_pins;
use ring_core::{Consumer, DeliveryClass, ReadError, Spin};

impl<'s> Harness<'s> {
    pub(super) fn register(&mut self, class: DeliveryClass) -> Outcome {
        let id = self.fresh_owner();
        let got = Consumer::new(self.seg, class, owner(id));
        let want = self.model.as_mut().map(|m| m.register(class, id));
        match (got, want) {
            (Ok(c), Some(Ok(rm))) => {
                ensure!(
                    c.index() == rm.index,
                    "registered at {}, model {}",
                    c.index(),
                    rm.index
                );
                self.readers.push(Reader {
                    consumer: c,
                    model: rm,
                    holds: Vec::new(),
                });
            }
            (Ok(c), None) => {
                let model = ReaderModel {
                    index: c.index(),
                    owner: id,
                    class,
                    next: c.cursor(),
                    start: c.cursor(),
                    received: 0,
                    missed: 0,
                    unpublished: 0,
                    holds: Vec::new(),
                    member: None,
                };
                self.readers.push(Reader {
                    consumer: c,
                    model,
                    holds: Vec::new(),
                });
            }
            (Err(e), want) => {
                displays(&e)?;
                ensure!(
                    matches!(e, ring_core::Error::ConsumerTableFull { .. }),
                    "Consumer::new: undocumented {e:?}"
                );
                ensure!(
                    want.as_ref().is_none_or(|w| *w == Err(e)),
                    "Consumer::new: got {e:?}, model {want:?}"
                );
            }
            (Ok(c), Some(Err(e))) => {
                return Err(format!("registered at {}, model says {e:?}", c.index()))
            }
        }
        Ok(())
    }

    pub(super) fn pin(&mut self, who: u8, claim_while_pinned: bool) -> Outcome {
        let Some(i) = self.reader_index(who) else {
            return Ok(());
        };
        let (cap, slots) = (self.cap, self.slots);
        let Self {
            model,
            readers,
            producer,
            seg,
            ..
        } = self;
        let r = &mut readers[i];
        // A gating reader's pin is its cursor: it sets no reader bit.
        let bit = if r.model.class == DeliveryClass::Gating {
            0
        } else {
            1u32 << r.model.index
        };
        let want = model.as_mut().map(|m| m.read(&mut r.model, None));
        let pinned = match r.consumer.try_pin() {
            Ok(p) => p,
            Err(e) => {
                read_error_documented(&e, false)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_pin: got Err({e:?}), model {want:?}"
                );
                return Ok(());
            }
        };
        pinned_fits(&pinned, cap, slots)?;
        let (seq, slot) = (pinned.seq(), pinned.slot());
        if let Some(m) = model.as_mut() {
            let w = match want {
                Some(Ok(w)) => w,
                other => return Err(format!("try_pin pinned seq {seq}, model {other:?}")),
            };
            ensure!(
                (seq, slot, pinned.len(), pinned.missed(), pinned.meta())
                    == (w.seq, w.slot, w.len, w.missed, w.meta),
                "try_pin: got seq {seq} slot {slot} len {} missed {} meta {:?}, model {w:?}",
                pinned.len(),
                pinned.missed(),
                pinned.meta()
            );
            ensure!(
                pinned.bytes() == &m.slots[slot].words()[..w.len],
                "pinned bytes differ from what was written"
            );
            let padded = w.len.div_ceil(8) * 8;
            let words: Vec<u8> = pinned
                .words()
                .iter()
                .flat_map(|x| x.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
                .collect();
            ensure!(
                words == m.slots[slot].words()[..padded],
                "words() differ from the message (or are not zero-padded past len {}): {words:?}",
                w.len
            );
            let mut out = vec![0u8; w.len];
            ensure!(pinned.copy_to(&mut out) == w.len, "copy_to length");
            ensure!(
                out == m.slots[slot].words()[..w.len],
                "copy_to bytes differ"
            );
            m.slots[slot].readers |= bit;
            ensure!(
                total_pins(*seg) == m.slots.iter().map(|s| s.readers.count_ones()).sum::<u32>(),
                "total_pins while pinned disagrees with the model"
            );
        }
        if claim_while_pinned {
            if let Some(p) = producer.as_mut() {
                let data = vec![0xee; (seq as usize % cap) + 1];
                let got = p.try_publish(&data);
                if let Err(e) = &got {
                    claim_error_documented(e, slots, cap)?;
                }
                if let Some(m) = model.as_mut() {
                    let want = m.try_publish(&data);
                    ensure!(
                        got == want,
                        "try_publish while pinned: got {got:?}, model {want:?}"
                    );
                    if got.is_ok() {
                        // The pinned message must not have changed under the pin.
                        ensure!(
                            m.slots[slot].stamp == 2 * seq + 2,
                            "the producer overwrote a pinned slot"
                        );
                    }
                }
            }
        }
        drop(pinned);
        if let Some(m) = model.as_mut() {
            m.slots[slot].readers &= !bit;
            m.advance(&mut r.model, seq);
        }
        Ok(())
    }

    /// `try_hold`: as a pin's read, but the reader moves on and the message stays pinned.
    pub(super) fn hold(&mut self, who: u8) -> Outcome {
        let Some(i) = self.reader_index(who) else {
            return Ok(());
        };
        let Self {
            model,
            readers,
            seg,
            ..
        } = self;
        let r = &mut readers[i];
        let limit = r.consumer.max_holds();
        let want = model.as_mut().map(|m| {
            if r.model.holds.len() >= limit {
                Err(ring_core::ReadError::TooManyHolds { max: limit })
            } else {
                m.read(&mut r.model, None)
            }
        });
        let h = match r.consumer.try_hold() {
            Ok(h) => h,
            Err(e) => {
                displays(&e)?;
                ensure!(
                    matches!(e, ring_core::ReadError::TooManyHolds { .. })
                        || read_error_documented(&e, false).is_ok(),
                    "try_hold: undocumented {e:?}"
                );
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_hold: got Err({e:?}), model {want:?}"
                );
                return Ok(());
            }
        };
        let bytes = r.consumer.held_bytes(&h).map(<[u8]>::to_vec);
        ensure!(
            bytes.as_ref().is_some_and(|b| b.len() == h.len()),
            "held_bytes of a fresh hold: {bytes:?}"
        );
        if let Some(m) = model.as_mut() {
            let w = match want {
                Some(Ok(w)) => w,
                other => return Err(format!("try_hold held seq {}, model {other:?}", h.seq())),
            };
            ensure!(
                (h.seq(), h.len(), h.missed(), h.meta()) == (w.seq, w.len, w.missed, w.meta),
                "try_hold: got seq {} len {} missed {} meta {:?}, model {w:?}",
                h.seq(),
                h.len(),
                h.missed(),
                h.meta()
            );
            ensure!(
                bytes.as_deref() == Some(&m.slots[w.slot].words()[..w.len]),
                "held bytes differ from what was written"
            );
            m.hold(&mut r.model, w.seq, w.slot);
            ensure!(
                total_pins(*seg) == m.slots.iter().map(|s| s.readers.count_ones()).sum::<u32>(),
                "total_pins with holds disagrees with the model"
            );
        } else {
            r.model.holds.push((h.seq(), 0));
        }
        r.holds.push(h);
        Ok(())
    }

    /// `release` of hold `which % holds`: its bytes are still the message's until then.
    pub(super) fn release(&mut self, who: u8, which: u8) -> Outcome {
        let Some((model, r)) = self.model_and_reader(who) else {
            return Ok(());
        };
        if r.holds.is_empty() {
            return Ok(());
        }
        let k = usize::from(which) % r.holds.len();
        let h = r.holds.remove(k);
        let bytes = r.consumer.held_bytes(&h).map(<[u8]>::to_vec);
        // Without a model (a scribbled segment), whatever the entry says decides.
        let mut registered = r.consumer.is_registered();
        if let Some(m) = model.as_mut() {
            let (seq, slot) = r.model.holds[k];
            ensure!(seq == h.seq(), "hold {k} is seq {}, model {seq}", h.seq());
            // Reclaimed (a right-owner reclaim of a live reader): the hold is gone with the
            // entry and lends no bytes; otherwise the bytes are still the message's.
            registered = m.registered(&r.model);
            if registered {
                ensure!(
                    m.slots[slot].stamp == 2 * seq + 2
                        && bytes.as_deref() == Some(&m.slots[slot].words()[..h.len()]),
                    "held message {seq} changed before its release"
                );
            } else {
                ensure!(bytes.is_none(), "a reclaimed reader's hold lent bytes");
            }
            m.release(&mut r.model, k);
        } else {
            r.model.holds.remove(k);
        }
        let got = r.consumer.release(h);
        if registered {
            ensure!(got.is_ok(), "release of a hold it has: {got:?}");
        } else {
            ensure!(
                got == Err(ReadError::Evicted),
                "release by a reclaimed reader: {got:?}"
            );
        }
        Ok(())
    }

    pub(super) fn copy(&mut self, who: u8, buf_len: usize) -> Outcome {
        let Some((model, r)) = self.model_and_reader(who) else {
            return Ok(());
        };
        let mut buf = vec![0u8; buf_len];
        let want = model.as_mut().map(|m| m.read(&mut r.model, Some(buf_len)));
        match r.consumer.try_copy(&mut buf) {
            Ok(got) => {
                ensure!(
                    got.len <= buf_len,
                    "copied {} bytes into {buf_len}",
                    got.len
                );
                if let Some(m) = model.as_mut() {
                    let w = match want {
                        Some(Ok(w)) => w,
                        other => return Err(format!("try_copy got {got:?}, model {other:?}")),
                    };
                    ensure!(
                        (got.seq, got.len, got.missed, got.meta)
                            == (w.seq, w.len, w.missed, w.meta),
                        "try_copy: got {got:?}, model {w:?}"
                    );
                    ensure!(
                        buf[..w.len] == m.slots[w.slot].words()[..w.len],
                        "copied bytes differ from what was written"
                    );
                    m.advance(&mut r.model, w.seq);
                }
            }
            Err(e) => {
                read_error_documented(&e, true)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_copy: got Err({e:?}), model {want:?}"
                );
            }
        }
        Ok(())
    }

    pub(super) fn wait_ready(&mut self, who: u8) -> Outcome {
        let Some(i) = self.reader_index(who) else {
            return Ok(());
        };
        let r = &mut self.readers[i];
        let got = r.consumer.wait_ready(&mut Spin::new(8));
        if let Err(e) = &got {
            displays(e)?;
            ensure!(
                // `Corrupt`: the slot's stamp is behind the published `head` (a peer rolled
                // it back), reported before parking since ABI 3.
                matches!(
                    e,
                    ring_core::ReadError::Timeout
                        | ring_core::ReadError::Evicted
                        | ring_core::ReadError::Corrupt(_)
                ),
                "wait_ready: undocumented {e:?}"
            );
        }
        if let Some(m) = self.model.as_mut() {
            let want = m.wait_ready(&mut r.model);
            ensure!(got == want, "wait_ready: got {got:?}, model {want:?}");
        }
        Ok(())
    }

    pub(super) fn die_holding_pin(&mut self, who: u8) -> Outcome {
        let Some(mut r) = self.take_reader(who) else {
            return Ok(());
        };
        let want = self.model.as_mut().map(|m| m.read(&mut r.model, None));
        match r.consumer.try_pin() {
            Ok(pinned) => {
                let slot = pinned.slot();
                if let Some(m) = self.model.as_mut() {
                    ensure!(
                        matches!(want, Some(Ok(w)) if w.seq == pinned.seq() && w.slot == slot),
                        "try_pin pinned seq {}, model {want:?}",
                        pinned.seq()
                    );
                    if r.model.class != DeliveryClass::Gating {
                        // A gating reader's pin is its cursor: no reader bit to leave behind.
                        m.slots[slot].readers |= 1 << r.model.index;
                    }
                }
                core::mem::forget(pinned);
            }
            Err(e) => {
                read_error_documented(&e, false)?;
                ensure!(
                    want.is_none_or(|w| w == Err(e)),
                    "try_pin: got Err({e:?}), model {want:?}"
                );
            }
        }
        core::mem::forget(r.consumer);
        Ok(())
    }
}
