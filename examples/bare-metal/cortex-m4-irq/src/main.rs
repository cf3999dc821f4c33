//! ring-core between thread mode and an interrupt handler of one Cortex-M4 (QEMU `mps2-an386`):
//! the producer runs in thread mode, the gating consumer in the SysTick handler, which the timer
//! fires at arbitrary points of the producer's work and the producer pends when the ring is
//! full. The consumer prints the counts and exits through semihosting: 0 when every message
//! arrived once, in order, intact.
//!
//! Run with `cargo run --release` (`.cargo/config.toml` names the target and QEMU).
#![no_std]
#![no_main]

use bare_metal_traffic as traffic;
use cortex_m_rt::{entry, exception};
use semihosting as _; // The panic handler: a panic exits non-zero.

/// The ring's bytes: formatted in thread mode, attached to by the SysTick handler.
static SEGMENT: traffic::Segment = traffic::Segment::new();

#[entry]
fn main() -> ! {
    traffic::cortex_m_thread(&SEGMENT)
}

#[exception]
fn SysTick() {
    static mut RECEIVER: traffic::Receiver =
        traffic::Receiver::new("thumbv7em (Cortex-M4), SysTick");
    RECEIVER.poll(&SEGMENT);
}
