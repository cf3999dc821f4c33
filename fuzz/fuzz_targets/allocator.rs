//! Allocator sequences against a model: see `ring_oracles::allocator`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ring_oracles::allocator::{run, AllocInput};

fuzz_target!(|input: AllocInput| {
    if let Err(e) = run(&input) {
        panic!("allocator oracle: {e}");
    }
});
