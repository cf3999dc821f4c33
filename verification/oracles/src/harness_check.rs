//! The harness's whole-state comparison with the model after every operation, its end-of-run
//! teardown, and the check of a bounded write's result.

use super::harness::Harness;
use super::{displays, Outcome};
use ring_core::inspect::{consumer_info, producer_info, total_pins, ConsumerInfo, EntryState};
use ring_core::layout::route_word;
use ring_core::{DeliveryClass, Memory, Overflow};

impl Harness<'_> {
    /// Compares every shared word the inspection API shows, and each consumer's own view, with
    /// the model; checks the accounting rules. Without a model, checks the views are sane.
    pub fn check_state(&self) -> Outcome {
        super::attach::inspect(self.seg)?;
        let Some(m) = &self.model else {
            return Ok(());
        };
        for (i, e) in m.entries.iter().enumerate() {
            let Some(info) = consumer_info(self.seg, i) else {
                return Err(format!("consumer_info({i}) is None"));
            };
            let want = ConsumerInfo {
                index: i,
                state: if e.active {
                    EntryState::Active
                } else {
                    EntryState::Free
                },
                class: DeliveryClass::from_u32(e.class),
                owner: e.owner,
                cursor: e.cursor,
                received: e.received,
                missed: e.missed,
                pins: m.pins_of(i),
                group: e.group,
                is_group: e.class == ring_core::layout::CLASS_GROUP,
                claims: e.claims.iter().filter(|&&v| v != 0).count() as u32,
            };
            ensure!(info == want, "entry {i}: got {info:?}, model {want:?}");
            // A member's claim words (what it took and did not finish, in the word it stored
            // each in) and a record's redelivery queue, word for word.
            let words: Vec<u64> = self
                .seg
                .consumer_entry(i)
                .claims
                .iter()
                .map(|w| w.load(core::sync::atomic::Ordering::Relaxed))
                .collect();
            ensure!(
                words == e.claims,
                "entry {i}: claim words {words:?}, model {:?}",
                e.claims
            );
        }
        let p = producer_info(self.seg);
        let want = (m.head, m.owner_word, m.closed, m.epoch, m.writing());
        ensure!(
            p.aborted == (m.closed && m.aborted),
            "producer line: aborted {} but the model says {}",
            p.aborted,
            m.closed && m.aborted
        );
        ensure!(
            (p.head, p.owner, p.closed, p.epoch, p.writing) == want,
            "producer line: got {p:?}, model (head, owner, closed, epoch, writing) = {want:?}"
        );
        // Each slot's stamp (which message the producer put where: a never-stall ring's choice
        // of slot) and route word (where each home slot says its newest message went; 0 on a
        // plain ring).
        for (i, ms) in m.slots.iter().enumerate() {
            let h = self.seg.slot_header(i);
            let stamp = h.stamp.load(core::sync::atomic::Ordering::Relaxed);
            let claim = h.claim.load(core::sync::atomic::Ordering::Relaxed);
            let route = h.route.load(core::sync::atomic::Ordering::Relaxed);
            let want_route = m.routes[i].map_or(0, |(seq, slot)| route_word(seq, slot));
            ensure!(
                stamp == ms.stamp && claim == ms.claim && route == want_route,
                "slot {i}: stamp {stamp}, claim {claim}, route {route:#x}; model {}, {} and \
                 {want_route:#x} ({:?})",
                ms.stamp,
                ms.claim,
                m.routes[i]
            );
        }
        let pins: u32 = m.slots.iter().map(|s| s.readers.count_ones()).sum();
        ensure!(
            total_pins(self.seg) == pins,
            "{} pins in the segment, model {pins} (only dead consumers hold pins between ops)",
            total_pins(self.seg)
        );
        for r in &self.readers {
            let (c, rm) = (&r.consumer, &r.model);
            ensure!(
                (c.index(), c.class(), c.cursor(), c.received(), c.missed())
                    == (rm.index, rm.class, rm.next, rm.received, rm.missed),
                "consumer {}: got (cursor {}, received {}, missed {}), model {rm:?}",
                c.index(),
                c.cursor(),
                c.received(),
                c.missed()
            );
            ensure!(
                // A member's cursor stays where it joined: it counts what it took.
                rm.member.is_some() || c.cursor() - rm.start == c.received() + c.missed(),
                "consumer {} moved from {} to {} but received {} + missed {}",
                c.index(),
                rm.start,
                c.cursor(),
                c.received(),
                c.missed()
            );
            if c.class() == DeliveryClass::Gating && m.registered(rm) {
                ensure!(
                    c.missed() == 0,
                    "gating consumer {} missed {}",
                    c.index(),
                    c.missed()
                );
            }
        }
        Ok(())
    }

    /// Drops every handle (consumers first) and checks the table empties.
    pub fn finish(mut self) -> Outcome {
        for r in core::mem::take(&mut self.readers) {
            if let Some(m) = self.model.as_mut() {
                m.leave(&r.model);
            }
            drop(r.consumer);
        }
        if let Some(p) = self.producer.take() {
            let id = p.owner().get();
            drop(p);
            if let Some(m) = self.model.as_mut() {
                m.producer_drop(id);
            }
        }
        self.check_state()
    }
}

/// Checks a `WriteSlot` write/set_len result: Ok when it fits, else `Overflow` naming the end.
pub(super) fn check_write(
    got: Result<(), Overflow>,
    fits: bool,
    cap: usize,
    end: usize,
) -> Outcome {
    match got {
        Ok(()) => ensure!(
            fits,
            "a write to byte {end} of a {cap}-byte slot was accepted"
        ),
        Err(o) => {
            displays(&o)?;
            ensure!(
                !fits,
                "a write to byte {end} of a {cap}-byte slot was refused: {o}"
            );
            ensure!(
                o == Overflow {
                    reserved: cap,
                    attempted: end
                },
                "Overflow {o:?} should name reserved {cap}, attempted {end}"
            );
        }
    }
    Ok(())
}
