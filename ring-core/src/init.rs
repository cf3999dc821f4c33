//! Formatting a fresh segment (the creator's side of the init barrier).

use crate::layout::{ABI_VERSION, INIT_READY, LAYOUT_FINGERPRINT, MAGIC};
use crate::memory::Memory;
use crate::owner::OwnerId;
use crate::sync::Ordering;

/// Writes every shared word of a new segment, then opens the init barrier with a Release store
/// of `INIT_READY`; until then no attacher reads these words, so Relaxed stores suffice here.
/// The one copy of the creator's side of the barrier: `RawMemory::initialize` and
/// `OwnedSegment` (the loom backend) both call it, so the loom model of the barrier
/// (`verification/tests/loom_ownership.rs`) checks the production code.
pub(crate) fn format<M: Memory + ?Sized>(mem: &M, creator: OwnerId) {
    let g = *mem.geometry();
    let h = mem.header();
    let r = Ordering::Relaxed;
    h.init_state.store(crate::layout::INIT_BUSY, r);
    h.magic.store(MAGIC, r);
    h.abi_version.store(ABI_VERSION, r);
    h.fingerprint.store(LAYOUT_FINGERPRINT, r);
    h.slots.store(g.config.slots, r);
    h.slot_capacity.store(g.config.slot_capacity, r);
    h.consumers.store(g.config.consumers, r);
    h.alloc_max_live.store(g.config.alloc_max_live, r);
    h.alloc_arena.store(g.config.alloc_arena, r);
    h.producer_off.store(g.producer_off as u64, r);
    h.consumers_off.store(g.consumers_off as u64, r);
    h.slots_off.store(g.slots_off as u64, r);
    h.payloads_off.store(g.payloads_off as u64, r);
    h.alloc_off.store(g.alloc_off as u64, r);
    h.alloc_len.store(g.alloc_len as u64, r);
    h.total_len.store(g.total_len as u64, r);
    h.creator.store(creator.get(), r);
    let pin_only = if g.config.pin_only {
        crate::layout::RING_PIN_ONLY
    } else {
        0
    };
    let never_stall = if g.config.never_stall {
        crate::layout::RING_NEVER_STALL
    } else {
        0
    };
    let asymmetric = if g.config.asymmetric_fences {
        crate::layout::RING_ASYMMETRIC_FENCES
    } else {
        0
    };
    h.ring_flags.store(pin_only | never_stall | asymmetric, r);

    h.history.store(g.config.history, r);
    h.header_reserved.store(0, r);

    let p = mem.producer_line();
    p.head.store(0, r);
    p.owner.store(0, r);
    p.flags.store(0, r);
    p.epoch.store(0, r);
    p.publish_futex.store(0, r);
    p.consumer_waiters.store(0, r);
    p.drain_futex.store(0, r);
    p.producer_waiting.store(0, r);
    p.control_reserved.store(0, r);
    p.wake_reserved.store(0, r);

    for i in 0..g.consumers() {
        let c = mem.consumer_entry(i);
        c.state.store(crate::layout::CONSUMER_FREE, r);
        c.class.store(0, r);
        c.owner.store(0, r);
        c.cursor.store(0, r);
        c.missed.store(0, r);
        c.received.store(0, r);
        c.generation.store(0, r);
        c.parked.store(0, r);
        c.ready.store(0, r);
    }
    for i in 0..g.slots() {
        let s = mem.slot_header(i);
        s.state.store(0, r);
        s.route.store(0, r);
        s.claim.store(0, r);
        s.stamp.store(0, r);
        s.len.store(0, r);
        s.meta[0].store(0, r);
        s.meta[1].store(0, r);
        for w in &s.inline {
            w.store(0, r);
        }
        for w in mem.payload(i) {
            w.store(0, r);
        }
    }
    let words = mem.alloc_words();
    if !words.is_empty() {
        // The region's own formatting; it cannot fail for a geometry that `Geometry::new`
        // accepted (the region was sized by `arena::region_len` for the same arguments).
        let cfg = crate::arena::AllocConfig {
            arena_bytes: g.config.alloc_arena,
            max_live: g.config.alloc_max_live,
            byte_ceiling: g.config.alloc_arena,
        };
        let formatted = crate::arena::Allocator::init(words, cfg);
        debug_assert!(
            formatted.is_ok(),
            "allocator region sized by region_len must format"
        );
    }
    // Release: the init barrier. Synchronises with the Acquire load of `init_state` in
    // `raw::validate_header`, after which an attacher sees every word written above.
    h.init_state.store(INIT_READY, Ordering::Release);
}
