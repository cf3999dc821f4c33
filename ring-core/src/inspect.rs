//! Read-only views of a ring for tools (`ringctl inspect`) and tests.

use crate::class::DeliveryClass;
use crate::layout::{
    CONSUMER_ACTIVE, CONSUMER_FREE, CONSUMER_JOINING, CONSUMER_RECLAIMING, FLAG_CLOSED, WRITER,
};
use crate::memory::Memory;
use crate::sync::Ordering;

/// State of a consumer-table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Free.
    Free,
    /// Registering.
    Joining,
    /// Registered.
    Active,
    /// Being reclaimed.
    Reclaiming,
    /// A value no one writes: the entry is corrupt.
    Corrupt(u32),
}

/// A snapshot of one consumer-table entry (Relaxed loads: a consistent view is not promised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerInfo {
    /// Table index.
    pub index: usize,
    /// Entry state.
    pub state: EntryState,
    /// Delivery class, if the stored value is a valid one.
    pub class: Option<DeliveryClass>,
    /// Owner id (0 when free).
    pub owner: u64,
    /// Next sequence it will read, as the consumer last published it. A gating consumer
    /// publishes on every read; a latest-only or skip-on-lag one every
    /// [`PROGRESS_EVERY`](crate::PROGRESS_EVERY) reads and whenever a read finds nothing or it
    /// waits, so while it streams this may be up to `PROGRESS_EVERY - 1` reads behind.
    pub cursor: u64,
    /// Messages received (published like `cursor`).
    pub received: u64,
    /// Messages skipped (published like `cursor`).
    pub missed: u64,
    /// Slots it pins right now.
    pub pins: u32,
    /// The group key of a group's record or member (0 for a lone consumer).
    pub group: u64,
    /// True for a group's record (the group's shared cursor, not a reader); `class` is then
    /// `None`.
    pub is_group: bool,
    /// Messages a member holds, or messages waiting for redelivery in a record.
    pub claims: u32,
}

/// A snapshot of the producer line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerInfo {
    /// Messages published.
    pub head: u64,
    /// Producer owner id (0 when none).
    pub owner: u64,
    /// Closed flag.
    pub closed: bool,
    /// Closed as aborted (not finished).
    pub aborted: bool,
    /// Producer takeovers.
    pub epoch: u32,
    /// Slots the producer holds for writing right now.
    pub writing: u32,
}

/// Snapshot of consumer entry `index`; None beyond the table.
pub fn consumer_info<M: Memory + ?Sized>(mem: &M, index: usize) -> Option<ConsumerInfo> {
    if index >= mem.geometry().consumers() {
        return None;
    }
    let e = mem.consumer_entry(index);
    // Relaxed throughout: a best-effort snapshot for display; nothing is derived from it.
    let r = Ordering::Relaxed;
    let state = match e.state.load(r) {
        CONSUMER_FREE => EntryState::Free,
        CONSUMER_JOINING => EntryState::Joining,
        CONSUMER_ACTIVE => EntryState::Active,
        CONSUMER_RECLAIMING => EntryState::Reclaiming,
        other => EntryState::Corrupt(other),
    };
    let bit = 1u64 << index;
    let pins = (0..mem.geometry().slots())
        .filter(|&i| mem.slot_header(i).state.load(r) & bit != 0)
        .count() as u32;
    Some(ConsumerInfo {
        index,
        state,
        class: DeliveryClass::from_u32(e.class.load(r)),
        owner: e.owner.load(r),
        cursor: e.cursor.load(r),
        received: e.received.load(r),
        missed: e.missed.load(r),
        pins,
        group: e.group.load(r),
        is_group: e.class.load(r) == crate::layout::CLASS_GROUP,
        claims: e.claims.iter().filter(|w| w.load(r) != 0).count() as u32,
    })
}

/// Snapshot of the producer line.
pub fn producer_info<M: Memory + ?Sized>(mem: &M) -> ProducerInfo {
    let p = mem.producer_line();
    // Relaxed throughout: a best-effort snapshot for display.
    let r = Ordering::Relaxed;
    let writing = (0..mem.geometry().slots())
        .filter(|&i| mem.slot_header(i).state.load(r) & WRITER != 0)
        .count() as u32;
    ProducerInfo {
        head: p.head.load(r),
        owner: p.owner.load(r),
        closed: p.flags.load(r) & FLAG_CLOSED != 0,
        aborted: p.flags.load(r) & crate::layout::FLAG_ABORTED != 0,
        epoch: p.epoch.load(r),
        writing,
    }
}

/// Total pins held in all slots by all consumers.
pub fn total_pins<M: Memory + ?Sized>(mem: &M) -> u32 {
    (0..mem.geometry().slots())
        // Relaxed: a snapshot.
        .map(|i| {
            (mem.slot_header(i).state.load(Ordering::Relaxed) & crate::layout::READER_MASK)
                .count_ones()
        })
        .sum()
}
