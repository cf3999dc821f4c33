//! A lock-free, `no_std` **single-producer / multi-consumer ring of slots** for memory shared
//! between processes, cores, or a CPU and a GPU.
//!
//! The crate is the protocol only: it never allocates (except the optional heap backends), never
//! calls the OS, and treats the shared bytes as untrusted input. Where the bytes live is the
//! [`Memory`] trait's business: [`HeapSegment`] and [`OwnedSegment`] here, OS mappings in
//! `ring-os`, device-backed payloads in `ring-cuda`.
//!
//! # The protocol in one paragraph
//! Each slot has one state word, `WRITER | reader bits`, and a seqlock stamp. The
//! [`Producer`] claims a slot with a compare-and-swap from "no readers" to `WRITER`, writes the
//! payload as Relaxed atomic words after a claim marker (on the slot's pin line), and publishes
//! with the final, even stamp. A [`Consumer`] either *pins* a slot (sets its own reader bit while
//! `WRITER` is clear, then checks the stamp and the marker name the message it wants) and reads
//! it in place, or *copies* it out optimistically and keeps the copy only if no later claim can
//! have touched it (its cursor held the producer off, or the marker still names the message). Consumers choose a [`DeliveryClass`]:
//! gating consumers hold the producer back by their cursor (lossless); latest-only and
//! skip-on-lag ones never do by their cursor — only a slot they hold *pinned* keeps the producer
//! off it, as every pin does (copy reads pin nothing, except in pin-only rings) — and are told
//! exactly how many messages they missed. Pins are owner-tagged (one bit per
//! consumer-table entry), so a dead consumer's pins are cleared exactly by
//! [`Producer::reclaim`]. `docs/PROTOCOL.md` has the state machine and every ordering.
//!
//! # Examples
//!
//! ```
//! use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
//!
//! let seg = HeapSegment::new(&Config::new(8, 256), OwnerId::new(1).unwrap()).unwrap();
//! let mut tx = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
//! let mut rx = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
//!
//! tx.try_publish(b"zero-copy").unwrap();
//! let msg = rx.try_pin().unwrap();
//! assert_eq!(msg.bytes(), b"zero-copy");
//! ```
//!
//! # Targets without native atomics
//! Atomics come from `portable-atomic`. On targets whose 64-bit atomics are not lock-free
//! (thumbv6m has no compare-and-swap at all; 32-bit cores have no 64-bit atomics) it supplies
//! fallbacks — a global lock table, or interrupt masking with the `critical-section` feature —
//! that are correct between the threads (cores) of **one** address space, and the ring works
//! there (core to core, task to task). Between thread mode and an interrupt handler on one
//! core, a spin lock deadlocks (the handler spins on a lock the code it interrupted holds):
//! there the lock must be interrupt masking, which the `critical-section` feature gives on
//! targets without compare-and-swap (thumbv6m) and portable-atomic's
//! `unsafe-assume-single-core` feature, enabled by the final binary, gives on single-core
//! targets that have compare-and-swap but no 64-bit atomics (thumbv7em, riscv32imac);
//! `examples/bare-metal` runs all three under QEMU. They cannot work across processes,
//! because the lock is not in the shared memory: [`CROSS_PROCESS_SAFE`] is `false` on such
//! targets, and `ring-os` refuses to compile for them.
//!
//! # References
//! - Seqlocks: Boehm, "Can seqlocks get along with programming language memory models?" (2012);
//!   portable-atomic's `seq_lock.rs`; crossbeam's `AtomicCell`.
//! - Storage vs coordination split: bbqueue (`traits/storage.rs`, `traits/coordination/`).
//! - Stamped slots: crossbeam's `ArrayQueue` (Vyukov's bounded MPMC queue).
//! - Owner-tagged pins and delivery classes: iceoryx2's publish-subscribe port design.
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

// The loom façade: crate-private. Its atomics are public (`AtomicU32`, `AtomicU64` below, the
// types of the shared words); `Ordering` is `core`'s, so nothing outside needs the module.
mod sync;

pub mod arena;
mod class;
mod consumer;
mod error;
mod geometry;
mod group;
#[cfg(feature = "alloc")]
mod heap;
mod init;
pub mod inspect;
pub mod layout;
mod memory;
#[cfg(feature = "alloc")]
mod owned;
mod owner;
mod producer;
mod raw;
mod wait;
mod words;

pub use consumer::{
    BatchItem, Consumer, Copied, Hold, Pinned, DEFAULT_MAX_HOLDS, MAX_HOLDS, PROGRESS_EVERY,
    READ_RETRIES,
};
pub use error::{abort_code, AttachError, ClaimError, Error, LayoutError, ReadError};
pub use geometry::{
    Config, Geometry, MAX_ALLOC_ARENA, MAX_CONSUMERS, MAX_SLOTS, MAX_SLOT_CAPACITY,
};
pub use group::group_key;
#[cfg(feature = "alloc")]
pub use heap::HeapSegment;
pub use inspect::ConsumerInfo;
pub use layout::{CACHE_LINE, INLINE_CAPACITY};
pub use memory::{Memory, OpenJoin};
#[cfg(feature = "alloc")]
pub use owned::OwnedSegment;
pub use producer::{LoanError, LostReader, LostReaders, Overflow, Producer, Reclaimed, WriteSlot};
pub use raw::RawMemory;
pub use wait::{Spin, SpinThenYield, WaitStrategy};

pub use class::DeliveryClass;
pub use owner::OwnerId;

/// True when this target's 64-bit and 32-bit atomics are lock-free, which cross-process use
/// requires (a fallback lock would live in one process, not in the shared memory).
#[cfg(not(any(ring_loom, ring_shuttle)))]
pub const CROSS_PROCESS_SAFE: bool =
    sync::AtomicU64::is_always_lock_free() && sync::AtomicU32::is_always_lock_free();

pub use sync::{AtomicU32, AtomicU64};
