//! The proptest state machine: random operation sequences on a real ring and on the reference
//! model, outcomes compared and every `docs/DESIGN.md` invariant checked after every step (see
//! `ring_oracles::machine::real::run_on`). Failing sequences shrink to a minimal one.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use proptest::prelude::*;
use ring_core::{HeapSegment, OwnedSegment, OwnerId};
use ring_oracles::machine::real::run_on;
use ring_oracles::machine::{Class, DisplacedCall, FreeMode, ModelConfig, Op, VictimCall};

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
        // The one-pass publish with metadata (the claim path's `set_meta` in one call).
        3 => (batch_len(cap), any::<u8>()).prop_map(|(len, seed)| Op::PublishMeta { len, seed }),
        // Groups: members take with CopyRead and Hold, finish with Release, crash with Kill
        // and are reclaimed with Reclaim.
        1 => (0u8..2).prop_map(|group| Op::CreateGroup { group }),
        2 => (0u8..2).prop_map(|group| Op::Join { group }),
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

/// Sequences centred on groups: groups created and joined (and a lone consumer now and then),
/// batches published, members copying (buffers too small too), holding, releasing, dying and
/// being reclaimed, so that dead members' messages are redelivered, the queue fills and the
/// group gates the producer within a few dozen steps.
fn group_ops(cap: u16, max: usize) -> impl Strategy<Value = Vec<Op>> {
    let c = 0u8..4;
    let op = prop_oneof![
        1 => (0u8..2).prop_map(|group| Op::CreateGroup { group }),
        3 => (0u8..2).prop_map(|group| Op::Join { group }),
        1 => class().prop_map(|class| Op::Register { class }),
        6 => (1u8..9, 0..cap / 2 + 1, any::<u8>())
            .prop_map(|(count, len, seed)| Op::PublishBatch { count, len, seed }),
        2 => (0..cap / 2 + 1, any::<u8>()).prop_map(|(len, seed)| Op::PublishMeta { len, seed }),
        6 => (c.clone(), prop_oneof![Just(cap), 0..cap / 2 + 2])
            .prop_map(|(consumer, buf)| Op::CopyRead { consumer, buf }),
        6 => c.clone().prop_map(|consumer| Op::Hold { consumer }),
        4 => (c.clone(), any::<u8>()).prop_map(|(consumer, which)| Op::Release { consumer, which }),
        3 => c.clone().prop_map(|consumer| Op::Kill { consumer }),
        5 => c.clone().prop_map(|consumer| Op::Reclaim { consumer }),
        1 => c.clone().prop_map(|consumer| Op::Deregister { consumer }),
        1 => Just(Op::Close),
        1 => Just(Op::TakeOver),
    ];
    // Runs of holds by one member: two dead members holding many messages overflow the
    // redelivery queue (`RedeliveryFull`).
    let step = prop_oneof![
        8 => op.prop_map(|op| vec![op]),
        2 => (c, 3usize..9).prop_map(|(consumer, n)| vec![Op::Hold { consumer }; n]),
    ];
    // A group and two members first: the rest of the sequence works with them.
    let start = [
        Op::CreateGroup { group: 0 },
        Op::Join { group: 0 },
        Op::Join { group: 0 },
    ];
    prop::collection::vec(step, 1..max / 2 + 1)
        .prop_map(move |steps| start.iter().copied().chain(steps.concat()).collect())
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
        1 => Just(ModelConfig::ring(3, 256, 2)),
        1 => Just(ModelConfig::shape(1, 16, 2, 512, 3)),
        1 => Just(ModelConfig::ring(2, 24, 4)),
        1 => Just(ModelConfig::shape(8, 8, 3, 2048, 40)),
        // Groups: more slots than a member's 8 claim words, so two dead members can hold more
        // than the redelivery queue takes (`RedeliveryFull`).
        1 => Just(ModelConfig::ring(12, 16, 4)),
    ]
}

/// Never-stall rings (`Config::with_never_stall`): pins and holds move messages out of their
/// home slots and routes say where they went; 3 slots is the least (one pin already leaves the
/// producer only the slot it must not take and one more).
fn never_stall_shapes() -> impl Strategy<Value = ModelConfig> {
    prop_oneof![
        2 => Just(ModelConfig::small().with_never_stall(true)),
        2 => Just(ModelConfig::wide().with_never_stall(true)),
        1 => Just(ModelConfig::ring(3, 256, 3).with_never_stall(true)),
        1 => Just(ModelConfig::shape(8, 8, 4, 2048, 40).with_never_stall(true)),
    ]
}

/// [`shaped_ops`] over [`never_stall_shapes`].
fn never_stall_ops() -> impl Strategy<Value = (ModelConfig, Vec<Op>)> {
    never_stall_shapes().prop_flat_map(|cfg| {
        let cap = cfg.capacity.max(32) as u16;
        (Just(cfg), ops(cap, len()))
    })
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

    /// Never-stall rings: the producer's slot choice (home slot, else the oldest unpinned one,
    /// never the newest's), `Full` and `Pinned` exactly when the model says, the routes, and
    /// what every reader class reads and misses.
    #[test]
    fn never_stall_ring_matches_the_model((cfg, ops) in never_stall_ops()) {
        let seg = HeapSegment::new(&cfg.config(), OwnerId::new(1).unwrap()).unwrap();
        if let Err(f) = run_on(&seg, &cfg, &ops) {
            prop_assert!(false, "{}", f);
        }
    }

    /// Groups, in sequences centred on them, on ring shapes from one slot per member to more
    /// slots than a member's claim words.
    #[test]
    fn groups_match_the_model((cfg, ops) in prop_oneof![
        4 => Just(ModelConfig::ring(12, 16, 4)),
        1 => Just(ModelConfig::ring(3, 16, 4)),
        1 => Just(ModelConfig::small()),
        // Never-stall: the group still gates, lone readers' holds move messages elsewhere.
        2 => Just(ModelConfig::ring(12, 16, 4).with_never_stall(true)),
        1 => Just(ModelConfig::ring(3, 16, 4).with_never_stall(true)),
    ].prop_flat_map(|cfg| (Just(cfg), group_ops(cfg.capacity as u16, len())))) {
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
        Just(ModelConfig::small().with_never_stall(true)),
    ].prop_flat_map(|cfg| (Just(cfg), ops(cfg.capacity as u16, len())))) {
        let seg = OwnedSegment::new(&cfg.config(), OwnerId::new(1).unwrap()).unwrap();
        if let Err(f) = run_on(&seg, &cfg, &ops) {
            prop_assert!(false, "{}", f);
        }
    }
}

/// Groups, step by step on a real ring and the model (each step compared and checked as in
/// the state machine), through the cases random sequences reach rarely: a member holding all
/// its claim words, a read kept for a retry (buffer too small), two members dying with
/// unfinished messages, the group gating the producer through a dead member's claim, a
/// reclaim refused for lack of queue room (`RedeliveryFull`) and done once a member took
/// queued messages, and a reclaim asked for the group's record.
#[test]
fn groups_redeliver_exactly_the_unfinished_messages_of_dead_members() {
    use ring_core::{ClaimError, Error, ReadError};
    use ring_oracles::machine::real::Real;
    use ring_oracles::machine::{Model, Outcome};
    let cfg = ModelConfig::ring(12, 16, 4);
    let (a, b, big) = (1, 2, 16);
    let mut ops = vec![
        Op::CreateGroup { group: 0 },
        Op::CreateGroup { group: 0 },
        Op::Join { group: 1 },
        Op::Join { group: 0 },
        Op::Join { group: 0 },
        // Twelve messages of 8 and 4 bytes: the ring is full for the group.
        Op::PublishBatch {
            count: 6,
            len: 8,
            seed: 1,
        },
        Op::PublishBatch {
            count: 6,
            len: 8,
            seed: 2,
        },
        Op::Claim,
    ];
    // A holds 0..=7 (all its claim words); its next copy finds none free.
    ops.extend([Op::Hold { consumer: a }; 8]);
    ops.push(Op::CopyRead {
        consumer: a,
        buf: big,
    });
    ops.extend([
        // B: message 8 does not fit (kept, flagged on the retry, which holds it), then 9.
        Op::CopyRead {
            consumer: b,
            buf: 0,
        },
        Op::Hold { consumer: b },
        Op::Hold { consumer: b },
        Op::Release {
            consumer: a,
            which: 7,
        },
        Op::Kill { consumer: a },
        Op::Kill { consumer: b },
        // The dead members' claims gate the producer.
        Op::Claim,
        Op::Reclaim { consumer: a },
        Op::Reclaim { consumer: b },
        Op::Reclaim { consumer: 0 },
        Op::Join { group: 0 },
    ]);
    ops.extend(
        [Op::CopyRead {
            consumer: a,
            buf: big,
        }; 2],
    );
    ops.push(Op::Reclaim { consumer: b });
    ops.extend(
        [Op::CopyRead {
            consumer: a,
            buf: big,
        }; 12],
    );
    ops.extend([
        Op::Claim,
        Op::Publish,
        Op::CopyRead {
            consumer: a,
            buf: big,
        },
    ]);

    let seg = HeapSegment::new(&cfg.config(), OwnerId::new(1).unwrap()).unwrap();
    let mut model = Model::new(&cfg);
    let mut real = Real::new(&seg).unwrap();
    let mut seen = Vec::new();
    for (k, &op) in ops.iter().enumerate() {
        let got = real.apply(op, &model);
        let want = model
            .apply(op, &got)
            .unwrap_or_else(|f| panic!("step {k} {op:?}: {f}"));
        assert_eq!(got, want, "step {k} {op:?}");
        real.check(&model)
            .unwrap_or_else(|f| panic!("after step {k} {op:?}: {f}"));
        seen.push(got);
    }
    let taken = |redelivered: bool| -> Vec<u64> {
        seen.iter()
            .filter_map(|o| match o {
                Outcome::Taken {
                    seq,
                    redelivered: r,
                    ..
                } if *r == redelivered => Some(*seq),
                _ => None,
            })
            .collect()
    };
    assert_eq!(seen[1], Outcome::Group(Ok(0)), "create_group is idempotent");
    assert_eq!(seen[2], Outcome::RegisterFailed(Error::NoSuchGroup));
    let full = |consumer, cursor| Outcome::ClaimFailed(ClaimError::Full { consumer, cursor });
    assert_eq!(
        seen[7],
        full(0, 0),
        "the group's record gates before any take"
    );
    assert_eq!(
        seen[16],
        Outcome::ReadFailed(ReadError::TooManyHolds { max: 8 })
    );
    assert_eq!(seen[23], full(1, 0), "a dead member's claim gates");
    assert!(
        matches!(
            &seen[25],
            Outcome::Reclaim(Err(Error::RedeliveryFull { needed: 2, free: 1 }))
        ),
        "{:?}",
        seen[25]
    );
    assert!(
        matches!(&seen[26], Outcome::Reclaim(Ok(r)) if !r.was_registered),
        "{:?}",
        seen[26]
    );
    // Each message once unflagged (A 0..=7, B 9, C 10 and 11, then 12; B's first read of 8
    // did not fit its buffer), and exactly the unfinished ones again, flagged: B's retry of
    // 8, then A's 0..=6 (7 was released) and B's 8 and 9.
    assert_eq!(
        seen[17],
        Outcome::ReadFailed(ReadError::BufferTooSmall { needed: 8 })
    );
    assert_eq!(taken(false), [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12]);
    let mut again = taken(true);
    again.sort_unstable();
    assert_eq!(again, [0, 1, 2, 3, 4, 5, 6, 8, 8, 9]);
    assert_eq!(
        seen[seen.len() - 1],
        Outcome::Taken {
            seq: 12,
            bytes: Vec::new(),
            meta: [12, 0],
            redelivered: false
        }
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// The fuzz oracles' own model (`ring_oracles::ops`, a second, independently written one)
    /// on never-stall rings: `arbitrary` inputs whose shape byte asks for one (the `ops`
    /// target reaches them by coverage; here every case is one).
    #[test]
    fn never_stall_ring_matches_the_oracle_model(
        slots in 2u8..8,
        cap_words in any::<u8>(),
        consumers in 0xE0u8..=0xFF,
        bytes in prop::collection::vec(any::<u8>(), 64..2048),
    ) {
        use ring_oracles::arbitrary::Unstructured;
        use ring_oracles::ops::{run, Op, OpsInput, Shape};
        // One op after another until the bytes run out (a decoded `Vec` is mostly short).
        let mut u = Unstructured::new(&bytes);
        let mut ops = Vec::new();
        while let (false, Ok(op)) = (u.is_empty(), u.arbitrary::<Op>()) {
            ops.push(op);
        }
        let shape = Shape { slots, cap_words, consumers };
        prop_assert!(shape.never_stall());
        let input = OpsInput { shape, ops };
        if let Err(e) = run(&input) {
            prop_assert!(false, "{}", e);
        }
    }
}
