//! The entry table: one 4-word entry per possible live allocation, and handles.
//!
//! | word | name    | encoding |
//! |------|---------|----------|
//! | 0    | `meta`  | bits 0..32 generation, 32..48 owner, 48..56 state (0 free, 1 live), 56..64 zero |
//! | 1    | `first` | first granule of the allocation |
//! | 2    | `len`   | requested length in bytes (≥ 1) |
//! | 3    | `stamp` | the `now` given to `alloc` |
//!
//! Writer: the mutator only. `first`, `len` and `stamp` are meaningful only while `meta` says
//! live. A handle is `generation << 32 | index`; the generation is bumped (skipping 0) each
//! time the entry is allocated, so a handle kept after its free is stale once the entry is
//! reused, and handle 0 never names anything.

use super::layout::MAX_OWNERS;

/// State value of a free entry.
const STATE_FREE: u64 = 0;
/// State value of a live entry.
const STATE_LIVE: u64 = 1;

/// The decoded `meta` word of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    /// Bumped on every allocation of the entry; 0 only before the first.
    pub generation: u32,
    /// The owner of the current (live) or last (free) allocation.
    pub owner: u16,
    /// Whether the entry holds a live allocation.
    pub live: bool,
}

impl Meta {
    /// Decodes a `meta` word, or `None` if it is not one the mutator could have written.
    pub(crate) fn decode(raw: u64) -> Option<Self> {
        let owner = ((raw >> 32) & 0xffff) as u16;
        let live = match raw >> 48 {
            STATE_FREE => false,
            STATE_LIVE => true,
            _ => return None,
        };
        if owner >= MAX_OWNERS {
            return None;
        }
        Some(Self {
            generation: raw as u32,
            owner,
            live,
        })
    }

    /// Encodes the `meta` word.
    pub(crate) fn encode(self) -> u64 {
        let state = if self.live { STATE_LIVE } else { STATE_FREE };
        u64::from(self.generation) | (u64::from(self.owner) << 32) | (state << 48)
    }

    /// The generation of this entry's next allocation (never 0).
    pub(crate) fn next_generation(self) -> u32 {
        match self.generation.wrapping_add(1) {
            0 => 1,
            g => g,
        }
    }
}

/// Builds a handle from an entry index and a generation.
pub(crate) fn handle(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

/// Splits a handle into `(index, generation)`.
pub(crate) fn split_handle(handle: u64) -> (u32, u32) {
    (handle as u32, (handle >> 32) as u32)
}

#[cfg(all(test, not(ring_loom)))]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_garbage() {
        let m = Meta {
            generation: 0xdead_beef,
            owner: 63,
            live: true,
        };
        assert_eq!(Meta::decode(m.encode()), Some(m));
        let f = Meta {
            generation: 7,
            owner: 0,
            live: false,
        };
        assert_eq!(Meta::decode(f.encode()), Some(f));
        assert_eq!(Meta::decode(2 << 48), None, "unknown state");
        assert_eq!(Meta::decode(1 << 60), None, "high bits set");
        assert_eq!(Meta::decode(64 << 32), None, "owner out of range");
        assert_eq!(
            Meta {
                generation: u32::MAX,
                owner: 0,
                live: false
            }
            .next_generation(),
            1
        );
        assert_eq!(split_handle(handle(5, 9)), (5, 9));
    }
}
