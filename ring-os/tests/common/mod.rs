//! Helpers shared by ring-os's single-process integration tests (`front.rs`, `never_stall.rs`).

use ring_os::prelude::*;

/// `builder` set up for the small rings these tests make: `slots` slots of 64 bytes.
pub fn small(builder: RingBuilder, slots: u32) -> RingBuilder {
    builder.slots(slots).slot_size(64)
}
