//! No queue: the message goes from `black_box` to `black_box`.
#![no_std]
#![no_main]

use core::hint::black_box;
use ring_bare_metal_footprint::MSG;

#[cortex_m_rt::entry]
fn main() -> ! {
    let mut out = [0u8; 96];
    loop {
        let msg: &[u8] = black_box(&MSG);
        out[..msg.len()].copy_from_slice(msg);
        black_box(&out);
    }
}
