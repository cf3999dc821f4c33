//! The verification crate's shared reference model (`ring_oracles::machine`) and its
//! real-ring driver (`ring_oracles::machine::real::run`), under coverage guidance: a second,
//! independently written model next to the `ops` target's own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ring_oracles::machine::{ModelConfig, Op};

/// The shapes `verification/tests/proptest_model.rs` runs, plus `ModelConfig::small()` and
/// `ModelConfig::wide()` (slots wider than the message line: inline and payload-area messages).
const CONFIGS: [ModelConfig; 6] = [
    ModelConfig::small(),
    ModelConfig {
        slots: 1,
        capacity: 16,
        consumers: 2,
        arena: 512,
        max_live: 3,
        never_stall: false,
    },
    ModelConfig {
        slots: 2,
        capacity: 24,
        consumers: 4,
        arena: 0,
        max_live: 0,
        never_stall: false,
    },
    ModelConfig {
        slots: 8,
        capacity: 8,
        consumers: 3,
        arena: 2048,
        max_live: 40,
        never_stall: false,
    },
    ModelConfig::wide(),
    ModelConfig {
        slots: 3,
        capacity: 256,
        consumers: 2,
        arena: 0,
        max_live: 0,
        never_stall: false,
    },
];

/// Most operations one input runs.
const MAX_OPS: usize = 256;

#[derive(arbitrary::Arbitrary, Debug)]
struct Input {
    /// `CONFIGS[config % 6]`; the top quarter (`0xC0..`) makes it a never-stall ring when it
    /// has at least 3 slots (so saved inputs there now run on a never-stall ring: still valid
    /// inputs, another ring).
    config: u8,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let cfg = CONFIGS[usize::from(input.config) % CONFIGS.len()];
    let cfg = cfg.with_never_stall(input.config >= 0xC0 && cfg.slots >= 3);
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    if let Err(f) = ring_oracles::machine::real::run(&cfg, ops) {
        panic!("model_ops ({cfg:?}): {f}");
    }
});
