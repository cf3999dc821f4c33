//! Reclaims of dead consumers (a dead member's unfinished messages go to its group), and what
//! the pin words hold.

use super::RingModel;
use ring_core::{Error, Reclaimed};

impl RingModel {
    /// `Producer::reclaim`.
    pub fn reclaim(&mut self, index: usize, expected: u64) -> Result<Reclaimed, Error> {
        let Some(e) = self.entries.get(index) else {
            return Err(Error::NoSuchConsumer { index });
        };
        // Nothing to reclaim: a free entry, or a group's record (it belongs to the ring: no
        // verdict reclaims it).
        let untouched = Reclaimed {
            index,
            owner: e.owner,
            pins_cleared: 0,
            cursor: 0,
            was_registered: false,
        };
        if !e.active {
            return Ok(untouched);
        }
        if e.owner != expected {
            return Err(Error::OwnerMismatch { found: e.owner });
        }
        if e.is_record() {
            return Ok(untouched);
        }
        if e.is_member() {
            self.hand_claims_to_group(index)?;
        }
        let e = &self.entries[index];
        let (owner, cursor) = (e.owner, e.cursor);
        let bit = 1u32 << index;
        let mut pins_cleared = 0;
        for s in &mut self.slots {
            if s.readers & bit != 0 {
                s.readers &= !bit;
                pins_cleared += 1;
            }
        }
        let e = &mut self.entries[index];
        e.active = false;
        e.owner = 0;
        Ok(Reclaimed {
            owner,
            pins_cleared,
            cursor,
            was_registered: true,
            ..untouched
        })
    }

    /// Pins held in entry `index`'s name.
    pub fn pins_of(&self, index: usize) -> u32 {
        self.slots
            .iter()
            .filter(|s| s.readers & (1 << index) != 0)
            .count() as u32
    }

    /// Slots the producer holds.
    pub fn writing(&self) -> u32 {
        self.slots.iter().filter(|s| s.writer).count() as u32
    }
}
