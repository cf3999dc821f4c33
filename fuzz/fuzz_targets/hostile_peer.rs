//! Op sequences with a peer overwriting shared words: see `ring_oracles::hostile`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ring_oracles::hostile::{run, HostileInput};

fuzz_target!(|input: HostileInput| {
    if let Err(e) = run(&input) {
        panic!("hostile_peer oracle: {e}");
    }
});
