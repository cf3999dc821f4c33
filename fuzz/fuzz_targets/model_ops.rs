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
    ModelConfig::shape(1, 16, 2, 512, 3),
    ModelConfig::ring(2, 24, 4),
    ModelConfig::shape(8, 8, 3, 2048, 40),
    ModelConfig::wide(),
    ModelConfig::ring(3, 256, 2),
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
