//! What the in-process criterion benches share with their baselines: `benches/ring.rs` (the
//! slot ring) and benches/compare's `baselines.rs` (rtrb, crossbeam-queue) measure the same
//! sizes and batches, so each ring figure has a baseline of the same shape. The `batch` group's
//! ring cases are here too, so that `baselines.rs` runs them beside its peers in one criterion
//! run (the ratio issue 32 asks for is between figures of one run).

use core::hint::black_box;
use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, Memory, OwnerId, Producer};
use ring_os::raw::LocalSegment;

/// Payload sizes of `claim_publish`, `publish_read` and `read`: 8 B .. 1 MiB.
pub const SIZES: [usize; 6] = [8, 64, 1024, 16 * 1024, 256 * 1024, 1024 * 1024];

/// Messages per `batch` sample.
pub const BATCH: usize = 32;

/// Message size of the `batch` group.
pub const BATCH_BYTES: usize = 64;

/// A heap segment of `slots` slots of `cap` bytes with room for `consumers` consumers, created
/// by owner 1.
///
/// # Panics
/// If the configuration is invalid (a bench setup error).
pub fn segment(slots: u32, cap: usize, consumers: u32) -> HeapSegment {
    let config = Config::new(slots, u32::try_from(cap).expect("small")).with_consumers(consumers);
    HeapSegment::new(&config, owner(1)).expect("valid config")
}

/// The producer (owner 1) and one gating consumer (owner 2) of `seg`.
///
/// # Panics
/// If either cannot join (a bench setup error).
pub fn pair(seg: &HeapSegment) -> (Producer<&HeapSegment>, Consumer<&HeapSegment>) {
    let tx = Producer::new(seg, owner(1)).expect("the producer");
    let rx = Consumer::new(seg, DeliveryClass::Gating, owner(2)).expect("a consumer");
    (tx, rx)
}

/// Owner id `n` (at least 1).
///
/// # Panics
/// Never: `n.max(1)` is not 0.
pub fn owner(n: u64) -> OwnerId {
    OwnerId::new(n.max(1)).expect("not 0")
}

/// Touches a message read in place (its first and last byte), so the read cannot be skipped.
pub fn touch(bytes: &[u8]) {
    black_box((bytes.first(), bytes.last()));
}

/// One of the ring's `batch` cases over memory `M`: publishes `msgs`, then reads them all.
pub type RingCase<M> = fn(&mut Producer<M>, &mut Consumer<M>, &[[u8; BATCH_BYTES]]);

/// The ring's `batch` cases by name, for `ring.rs` and `baselines.rs` alike, over memory `M`
/// (a heap segment: [`segment`] and [`pair`]).
pub fn ring_cases<M: Memory>() -> [(&'static str, RingCase<M>); 3] {
    [
        ("ring-batch", ring_batch::<M>),
        ("ring-single", ring_single::<M>),
        ("ring-copy", ring_copy::<M>),
    ]
}

/// The same cases on a [`LocalSegment`] ([`local_segment`], [`local_pair`]): a heap ring in
/// one process, as the heap cases, but each message's two fences are compiler fences where
/// `membarrier` runs (docs/PROTOCOL.md, "Asymmetric fences").
pub fn local_cases<'a>() -> [(&'static str, RingCase<&'a LocalSegment>); 3] {
    [
        ("ring-batch-local", ring_batch::<&LocalSegment>),
        ("ring-single-local", ring_single::<&LocalSegment>),
        ("ring-copy-local", ring_copy::<&LocalSegment>),
    ]
}

/// A [`LocalSegment`] of `slots` slots of `cap` bytes, created by owner 1.
///
/// # Panics
/// If the configuration is invalid (a bench setup error).
pub fn local_segment(slots: u32, cap: usize) -> LocalSegment {
    let config = Config::new(slots, u32::try_from(cap).expect("small"));
    LocalSegment::new(&config, owner(1)).expect("valid config")
}

/// The producer (owner 1) and one gating consumer (owner 2) of `seg`.
///
/// # Panics
/// If either cannot join (a bench setup error).
pub fn local_pair(seg: &LocalSegment) -> (Producer<&LocalSegment>, Consumer<&LocalSegment>) {
    let tx = Producer::new(seg, owner(1)).expect("the producer");
    let rx = Consumer::new(seg, DeliveryClass::Gating, owner(2)).expect("a consumer");
    (tx, rx)
}

/// `batch/ring-batch`: the messages published with one `try_publish_batch`, then read in place
/// with one `try_read_batch`.
///
/// # Panics
/// If the ring cannot take or give the whole batch (the segment must have room for it).
pub fn ring_batch<M: Memory>(
    tx: &mut Producer<M>,
    rx: &mut Consumer<M>,
    msgs: &[[u8; BATCH_BYTES]],
) {
    assert_eq!(tx.try_publish_batch(msgs).expect("room"), msgs.len());
    let read = rx
        .try_read_batch(msgs.len(), |m| touch(m.bytes()))
        .expect("the batch");
    assert_eq!(read, msgs.len());
}

/// `batch/ring-single`: each message published with `try_publish`, then each pinned with
/// `try_pin` (one call per message, as a queue's push and pop).
///
/// # Panics
/// If the ring cannot take or give a message (the segment must have room for the batch).
pub fn ring_single<M: Memory>(
    tx: &mut Producer<M>,
    rx: &mut Consumer<M>,
    msgs: &[[u8; BATCH_BYTES]],
) {
    for m in msgs {
        tx.try_publish(m).expect("room");
    }
    for _ in msgs {
        touch(rx.try_pin().expect("a message").bytes());
    }
}

/// `batch/ring-copy`: each message published with `try_publish`, then copied out with
/// `try_copy` (as `ArrayQueue`'s pop copies the value out).
///
/// # Panics
/// If the ring cannot take or give a message (the segment must have room for the batch).
pub fn ring_copy<M: Memory>(
    tx: &mut Producer<M>,
    rx: &mut Consumer<M>,
    msgs: &[[u8; BATCH_BYTES]],
) {
    let mut out = [0u8; BATCH_BYTES];
    for m in msgs {
        tx.try_publish(m).expect("room");
    }
    for _ in msgs {
        rx.try_copy(&mut out).expect("a message");
        touch(&out);
    }
}
