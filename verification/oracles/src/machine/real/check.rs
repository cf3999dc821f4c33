//! [`Real::check`]: every invariant of `docs/DESIGN.md` on the real ring, against the model,
//! after every step.

#[allow(clippy::wildcard_imports, reason = "the real side's own parts")]
use super::*;

impl<'s, M: Memory> Real<'s, M> {
    /// Checks every invariant of `docs/DESIGN.md` on the real ring against `model`.
    ///
    /// # Errors
    /// The first [`Failure`] found.
    pub fn check(&self, model: &Model) -> Result<(), Failure> {
        let mem = self.mem;
        let n = mem.geometry().slots();
        let p = producer_info(mem);
        ensure!(
            p.head == model.head(),
            "head {} != model {}",
            p.head,
            model.head()
        );
        ensure!(
            p.closed == model.ring.closed,
            "closed flag {} != model",
            p.closed
        );
        ensure!(
            p.owner == model.producer_owner(),
            "producer owner {} != model {}",
            p.owner,
            model.producer_owner()
        );
        // `is_claimable` (what a polling producer spins on): true exactly when a claim would
        // not be refused for a gating consumer or a pin.
        if let Some(prod) = self.producer.as_ref().and_then(Held::peek) {
            let blocked = model.claim_blocked();
            ensure!(
                prod.is_claimable() == blocked.is_none(),
                "is_claimable() {} but the model's claim would be {blocked:?}",
                prod.is_claimable()
            );
        }
        // Invariant 1 (one writer): at most one slot is being written, the claimed one, and
        // never one a reader pins.
        ensure!(
            p.writing == u32::from(model.claim.is_some()),
            "{} slots marked WRITER, model claim {:?}",
            p.writing,
            model.claim
        );
        let order = core::sync::atomic::Ordering::Relaxed;
        for (i, ms) in model.ring.slots.iter().enumerate().take(n) {
            let h = mem.slot_header(i);
            let state = h.state.load(order);
            let writer = state & WRITER != 0;
            ensure!(
                writer == (model.claim.map(|c| c.slot) == Some(i)),
                "slot {i}: WRITER={writer}, model claim {:?}",
                model.claim
            );
            let readers = (state & READER_MASK) as u32;
            ensure!(
                !(writer && readers != 0),
                "slot {i}: written and pinned at once ({state:#x})"
            );
            ensure!(
                readers == model.readers(i),
                "slot {i}: reader bits {readers:#b} != model {:#b}",
                model.readers(i)
            );
            // A never-stall ring's route (and 0 on every other ring): where the newest message
            // whose home this slot is lives.
            let route = h.route.load(order);
            ensure!(
                route == model.ring.route_word(i),
                "slot {i}: route word {route:#x} != model {:#x} ({:?})",
                model.ring.route_word(i),
                model.ring.routes[i]
            );
            let stamp = h.stamp.load(order);
            ensure!(
                stamp == ms.stamp,
                "slot {i}: stamp {stamp} != model {}",
                ms.stamp
            );
            let mut bytes = vec![0u8; ms.bytes.len()];
            for (k, w) in mem.payload(i).iter().enumerate() {
                let b = w.load(order).to_ne_bytes();
                let end = (k * 8 + 8).min(bytes.len());
                bytes[k * 8..end].copy_from_slice(&b[..end - k * 8]);
            }
            ensure!(
                bytes == ms.bytes,
                "slot {i}: payload {bytes:?} != model {:?}",
                ms.bytes
            );
            // The message line's inline words, all of them: a small message travels there
            // (written straight in, or copied from the payload area at publish, its last word
            // padded), and nothing else writes them.
            let mut inline = vec![0u8; ms.inline.len()];
            for (k, w) in h.inline.iter().enumerate() {
                inline[k * 8..k * 8 + 8].copy_from_slice(&w.load(order).to_ne_bytes());
            }
            ensure!(
                inline == ms.inline,
                "slot {i}: inline words {inline:?} != model {:?}",
                ms.inline
            );
            if stamp % 2 == 0 && stamp > 0 {
                let len = h.len.load(order);
                ensure!(
                    len == ms.len as u64,
                    "slot {i}: len {len} != model {}",
                    ms.len
                );
            }
        }
        for (i, mc) in model.consumers.iter().enumerate() {
            self.check_consumer(i, mc.as_ref(), model)?;
        }
        // The adversarial oracle's victims know they lost their entry or the ring.
        for (k, v) in self.victims.iter().enumerate() {
            ensure!(
                v.peek().is_some_and(|c| !c.is_registered()),
                "victim {k} still counts itself registered"
            );
        }
        for (k, d) in self.displaced.iter().enumerate() {
            ensure!(
                d.peek().is_some_and(Producer::is_displaced),
                "displaced producer {k} does not know it"
            );
        }
        ensure!(
            self.victims.len() == model.victims.len() && self.displaced.len() == model.displaced,
            "{} victims, {} displaced != model {} {}",
            self.victims.len(),
            self.displaced.len(),
            model.victims.len(),
            model.displaced
        );
        self.check_alloc(model)
    }

    pub(super) fn check_consumer(
        &self,
        i: usize,
        mc: Option<&crate::machine::ModelConsumer>,
        model: &Model,
    ) -> Result<(), Failure> {
        let info =
            consumer_info(self.mem, i).ok_or_else(|| Failure(format!("no consumer entry {i}")))?;
        let cell = self.consumers[i].as_ref();
        let words = |i: usize| -> Vec<u64> {
            self.mem
                .consumer_entry(i)
                .claims
                .iter()
                .map(|w| w.load(core::sync::atomic::Ordering::Relaxed))
                .collect()
        };
        let g = &model.ring.entries[i];
        if g.is_record() {
            // A group's record: the ring's, at the group's cursor, with its redelivery queue.
            let key = g.group;
            ensure!(
                info.state == EntryState::Active
                    && info.owner == OWNER_GROUP
                    && info.is_group
                    && info.group == key
                    && info.cursor == g.cursor
                    && info.pins == 0,
                "entry {i} should be group {:#x}'s record at cursor {}: {info:?}",
                g.group,
                g.cursor
            );
            ensure!(
                words(i) == g.claims,
                "group {:#x} (entry {i}): redelivery queue {:?} != model {:?}",
                g.group,
                words(i),
                g.claims
            );
            ensure!(cell.is_none(), "entry {i}: a consumer handle on a record");
            return self.check_group_floor(i, model);
        }
        let member = mc.and_then(|c| c.reader.member.as_ref());
        let key = member.map_or(0, |m| model.ring.entries[m.record].group);
        ensure!(
            // A freed entry keeps its last holder's key (as its class): not compared.
            (mc.is_none() || info.group == key) && !info.is_group,
            "entry {i}: group key {:#x} (record: {}) != model {key:#x}",
            info.group,
            info.is_group
        );
        let claims = if member.is_some() {
            g.claims
        } else {
            [0; ring_core::layout::GROUP_CLAIMS]
        };
        ensure!(
            words(i) == claims && info.claims == claims.iter().filter(|&&v| v != 0).count() as u32,
            "entry {i}: claim words {:?} ({} counted) != model {claims:?}",
            words(i),
            info.claims
        );
        let Some(mc) = mc else {
            // Invariant 7: a reclaimed or departed entry holds nothing.
            ensure!(
                info.state == EntryState::Free && info.pins == 0 && info.owner == 0,
                "entry {i} should be free: {info:?}"
            );
            ensure!(cell.is_none(), "entry {i}: a handle outlived its entry");
            return Ok(());
        };
        ensure!(
            info.state == EntryState::Active && info.owner == mc.reader.owner,
            "entry {i}: {info:?} != model {mc:?}"
        );
        ensure!(
            info.class == Some(mc.reader.class),
            "entry {i}: class {:?} != model {:?}",
            info.class,
            mc.reader.class
        );
        ensure!(
            info.cursor == g.cursor,
            "entry {i}: shared cursor {} != model {}",
            info.cursor,
            g.cursor
        );
        ensure!(
            // A gating reader's pin (and hold) is its cursor: no reader bit.
            info.pins
                == if mc.gating() {
                    0
                } else {
                    u32::from(mc.pin.is_some()) + mc.held.len() as u32
                },
            "entry {i}: {} pins != model {:?} and {} holds",
            info.pins,
            mc.pin,
            mc.held.len()
        );
        // Every held message is still the one taken (the producer reused no held slot).
        for (seq, slot) in &mc.reader.holds {
            let stamp = self
                .mem
                .slot_header(*slot)
                .stamp
                .load(core::sync::atomic::Ordering::Relaxed);
            ensure!(
                stamp == 2 * seq + 2,
                "consumer {i} holds message {seq}, but slot {slot} has stamp {stamp}"
            );
        }
        // Invariant 4, gating: nothing this consumer has not consumed is overwritten (a
        // member's cursor gates nothing: its group's floor does, checked with the record).
        if mc.gating() && !mc.is_member() {
            self.intact_from(g.cursor, model)
                .map_err(|f| Failure(format!("gating consumer {i} (cursor {}) {f}", g.cursor)))?;
        }
        // Invariant 4, counting: everything between registration and the cursor was either
        // received or reported missed.
        // (A held pin at `seq` has skipped everything before `seq` but not consumed `seq` yet.)
        // (A member's cursor stays at its join: it counts the messages it took.)
        let r = &mc.reader;
        let upto = mc.pin.map_or(r.next, |(_, seq)| seq);
        ensure!(
            mc.is_member() || r.received + r.missed == upto - r.start,
            "model accounting broken for {i}: {mc:?}"
        );
        if !mc.alive {
            ensure!(
                cell.is_none(),
                "entry {i}: dead consumer still has a handle"
            );
            return Ok(());
        }
        let cell =
            cell.ok_or_else(|| Failure(format!("entry {i}: live consumer without a handle")))?;
        if let Some(pin) = cell.guard.as_ref() {
            // Invariant 2: a pinned read is the whole message it asked for, for as long as it
            // is held.
            let (slot, seq) = mc.pin.unwrap_or_default();
            let ms = &model.ring.slots[slot];
            ensure!(
                pin.seq() == seq && pin.slot() == slot,
                "consumer {i} pins seq {} slot {}, model {seq} {slot}",
                pin.seq(),
                pin.slot()
            );
            ensure!(
                ms.stamp == 2 * seq + 2 && pin.bytes() == ms.message(),
                "consumer {i}: pinned message {seq} changed under the pin: {:?} vs {:?}",
                pin.bytes(),
                ms.message()
            );
        } else if let Some(c) = cell.peek() {
            ensure!(
                c.cursor() == r.next && c.received() == r.received && c.missed() == r.missed,
                "consumer {i}: next/received/missed {}/{}/{} != model {}/{}/{}",
                c.cursor(),
                c.received(),
                c.missed(),
                r.next,
                r.received,
                r.missed
            );
        }
        Ok(())
    }

    /// Invariant 4 for the group whose record is entry `record`: nothing it has not finished
    /// is overwritten — every message from the lowest of its cursor, its queue and its
    /// members' claims up to `head` is still in its slot.
    pub(super) fn check_group_floor(&self, record: usize, model: &Model) -> Result<(), Failure> {
        let g = &model.ring.entries[record];
        if !g.is_record() {
            return Ok(());
        }
        let mut floor = g.cursor;
        let claimed = g.claims.iter().chain(
            model
                .consumers
                .iter()
                .flatten()
                .filter(|c| c.reader.member.is_some_and(|m| m.record == record))
                .flat_map(|c| model.ring.entries[c.reader.index].claims.iter()),
        );
        for &v in claimed {
            if v != 0 {
                floor = floor.min(v - 1);
            }
        }
        self.intact_from(floor, model)
            .map_err(|f| Failure(format!("group {:#x} (floor {floor}) {f}", g.group)))
    }

    /// Every message from `from` up to `head` is still in its slot (on a never-stall ring, the
    /// slot its route names).
    pub(super) fn intact_from(&self, from: u64, model: &Model) -> Result<(), Failure> {
        for seq in from..model.head() {
            let Some(slot) = model.locate(seq) else {
                return Err(Failure(format!(
                    "lost message {seq}: its route names a later one"
                )));
            };
            let stamp = self
                .mem
                .slot_header(slot)
                .stamp
                .load(core::sync::atomic::Ordering::Relaxed);
            ensure!(
                stamp == 2 * seq + 2,
                "lost message {seq}: slot {slot} stamp {stamp}"
            );
        }
        Ok(())
    }

    pub(super) fn check_alloc(&self, model: &Model) -> Result<(), Failure> {
        let (Some(a), Some(m)) = (self.alloc.as_ref(), model.alloc.as_ref()) else {
            ensure!(
                self.alloc.is_none() && model.alloc.is_none(),
                "an allocator on one side only"
            );
            return Ok(());
        };
        // Invariant 8: accounting is exact, globally and per owner, and so is the leak report;
        // every live allocation holds what was written, no freed one is found.
        m.check(a, model.head())?;
        Ok(m.check_contents(a)?)
    }
}
