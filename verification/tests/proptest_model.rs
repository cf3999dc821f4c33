//! The proptest state machine: random operation sequences on a real ring and on the reference
//! model, outcomes compared and every `docs/DESIGN.md` invariant checked after every step (see
//! `ring_verification::real::run_on`). Failing sequences shrink to a minimal one.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use proptest::prelude::*;
use ring_core::{HeapSegment, OwnedSegment, OwnerId};
use ring_verification::model::{Class, DisplacedCall, FreeMode, ModelConfig, Op, VictimCall};
use ring_verification::real::run_on;

fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        Just(Class::Gating),
        Just(Class::LatestOnly),
        Just(Class::SkipOnLag)
    ]
}

fn victim_call() -> impl Strategy<Value = VictimCall> {
    prop_oneof![
        Just(VictimCall::Pin),
        Just(VictimCall::Copy),
        Just(VictimCall::Drop)
    ]
}

fn displaced_call() -> impl Strategy<Value = DisplacedCall> {
    prop_oneof![
        Just(DisplacedCall::Claim),
        Just(DisplacedCall::Publish),
        Just(DisplacedCall::Close),
        Just(DisplacedCall::Drop)
    ]
}

fn op(cap: u16) -> impl Strategy<Value = Op> {
    let c = 0u8..4;
    prop_oneof![
        6 => Just(Op::Claim),
        6 => (0..cap + 4, 0..cap / 2 + 4, any::<u8>())
            .prop_map(move |(offset, len, seed)| Op::Write { offset: offset.min(cap), len, seed }),
        6 => Just(Op::Publish),
        1 => Just(Op::Abort),
        4 => c.clone().prop_map(|consumer| Op::Pin { consumer }),
        4 => c.clone().prop_map(|consumer| Op::Unpin { consumer }),
        // Several messages per consumer (holds), released in any order.
        3 => c.clone().prop_map(|consumer| Op::Hold { consumer }),
        3 => (c.clone(), any::<u8>()).prop_map(|(consumer, which)| Op::Release { consumer, which }),
        4 => (c.clone(), prop_oneof![Just(cap), 0..cap + 8])
            .prop_map(|(consumer, buf)| Op::CopyRead { consumer, buf }),
        3 => class().prop_map(|class| Op::Register { class }),
        1 => c.clone().prop_map(|consumer| Op::Deregister { consumer }),
        1 => c.clone().prop_map(|consumer| Op::Kill { consumer }),
        2 => c.clone().prop_map(|consumer| Op::Reclaim { consumer }),
        1 => Just(Op::TakeOver),
        // The adversarial liveness oracle and leaked pins.
        1 => c.clone().prop_map(|consumer| Op::ReclaimLive { consumer }),
        2 => (any::<u8>(), victim_call()).prop_map(|(which, call)| Op::Victim { which, call }),
        1 => (class(), any::<u8>()).prop_map(|(class, which)| Op::RegisterAs { class, which }),
        1 => any::<bool>().prop_map(|same_owner| Op::TakeOverLive { same_owner }),
        1 => (any::<u8>(), displaced_call())
            .prop_map(|(which, call)| Op::Displaced { which, call }),
        2 => c.clone().prop_map(|consumer| Op::ForgetPin { consumer }),
        3 => (0u16..400, any::<u8>()).prop_map(|(len, owner)| Op::Alloc { len, owner }),
        2 => (any::<u8>(), any::<u8>(), prop_oneof![Just(0u8), 1u8..9])
            .prop_map(|(which, seed, extra)| Op::AllocWrite { which, seed, extra }),
        2 => (any::<u8>(), prop_oneof![
                Just(FreeMode::Owner), Just(FreeMode::Foreign), Just(FreeMode::Stale)])
            .prop_map(|(which, mode)| Op::Free { which, mode }),
        1 => any::<u8>().prop_map(|owner| Op::FreeAllOf { owner }),
        // The batch calls: mixed lengths (inline and payload-area messages in one batch when
        // the slots are wider than the message line), some too large for the slot.
        4 => (0u8..7, batch_len(cap), any::<u8>())
            .prop_map(|(count, len, seed)| Op::PublishBatch { count, len, seed }),
        4 => (c.clone(), 0u8..6).prop_map(|(consumer, max)| Op::ReadBatch { consumer, max }),
    ]
}

/// Lengths of [`Op::PublishBatch`]'s even messages (the odd ones have half): up to the slot
/// and a little past it, and the message line's boundaries (`INLINE_CAPACITY` and one more,
/// for the even messages and, doubled, for the odd ones).
fn batch_len(cap: u16) -> impl Strategy<Value = u16> {
    let inline = ring_core::INLINE_CAPACITY as u16;
    prop_oneof![
        3 => 0..cap / 2 + 1,
        3 => 0..cap + 9,
        1 => prop_oneof![
            Just(inline),
            Just(inline + 1),
            Just(2 * inline),
            Just(2 * inline + 2)
        ],
    ]
}

/// Ops with a rare `Close` (it ends the producer's useful life until a takeover).
fn ops(cap: u16, max: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(prop_oneof![60 => op(cap), 1 => Just(Op::Close)], 1..max)
}

fn cases() -> u32 {
    if cfg!(miri) {
        3
    } else {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000)
    }
}

fn len() -> usize {
    if cfg!(miri) {
        30
    } else {
        200
    }
}

/// The ring shapes, with the operations for each: writes and batches as long as the slot
/// (at least 32 bytes), so the wide shapes see messages on both sides of
/// `ring_core::INLINE_CAPACITY`.
fn shaped_ops() -> impl Strategy<Value = (ModelConfig, Vec<Op>)> {
    shapes().prop_flat_map(|cfg| {
        let cap = cfg.capacity.max(32) as u16;
        (Just(cfg), ops(cap, len()))
    })
}

fn shapes() -> impl Strategy<Value = ModelConfig> {
    prop_oneof![
        1 => Just(ModelConfig::small()),
        // Slots wider than the message line: inline and payload-area messages.
        2 => Just(ModelConfig::wide()),
        1 => Just(ModelConfig {
            slots: 3,
            capacity: 256,
            consumers: 2,
            arena: 0,
            max_live: 0
        }),
        1 => Just(ModelConfig {
            slots: 1,
            capacity: 16,
            consumers: 2,
            arena: 512,
            max_live: 3
        }),
        1 => Just(ModelConfig {
            slots: 2,
            capacity: 24,
            consumers: 4,
            arena: 0,
            max_live: 0
        }),
        1 => Just(ModelConfig {
            slots: 8,
            capacity: 8,
            consumers: 3,
            arena: 2048,
            max_live: 40
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// The heap backend (the `RawMemory` path every OS mapping uses) matches the model.
    #[test]
    fn heap_ring_matches_the_model((cfg, ops) in shaped_ops()) {
        let seg = HeapSegment::new(&cfg.config(), OwnerId::new(1).unwrap()).unwrap();
        if let Err(f) = run_on(&seg, &cfg, &ops) {
            prop_assert!(false, "{}", f);
        }
    }

    /// The owned (typed, loom-shaped) backend matches the model too.
    #[test]
    fn owned_ring_matches_the_model((cfg, ops) in prop_oneof![
        Just(ModelConfig::small()),
        Just(ModelConfig::wide()),
    ].prop_flat_map(|cfg| (Just(cfg), ops(cfg.capacity as u16, len())))) {
        let seg = OwnedSegment::new(&cfg.config(), OwnerId::new(1).unwrap()).unwrap();
        if let Err(f) = run_on(&seg, &cfg, &ops) {
            prop_assert!(false, "{}", f);
        }
    }
}
