//! Arbitrary bytes as a segment: see `ring_oracles::attach`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = ring_oracles::attach::run(data) {
        panic!("attach oracle: {e}");
    }
});
