//! Op sequences against the reference model: see `ring_oracles::ops`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ring_oracles::ops::{run, OpsInput};

fuzz_target!(|input: OpsInput| {
    if let Err(e) = run(&input) {
        panic!("ops oracle: {e}");
    }
});
