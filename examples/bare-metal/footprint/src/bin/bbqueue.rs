//! bbqueue 0.7, framed (variable-length messages), inline storage of 8 × (96 + 2) bytes.
#![no_std]
#![no_main]

use bbqueue::nicknames::Churrasco;
use core::hint::black_box;
use ring_bare_metal_footprint::MSG;

static BB: Churrasco<784> = Churrasco::new();

#[cortex_m_rt::entry]
fn main() -> ! {
    let tx = BB.framed_producer();
    let rx = BB.framed_consumer();
    loop {
        let msg: &[u8] = black_box(&MSG);
        if let Ok(mut grant) = tx.grant(msg.len() as u16) {
            grant[..msg.len()].copy_from_slice(msg);
            grant.commit(msg.len() as u16);
        }
        if let Ok(grant) = rx.read() {
            black_box(&grant[..]);
            grant.release();
        }
    }
}
