//! ring-core between thread mode and an interrupt handler of one Cortex-M4 (QEMU `mps2-an386`):
//! the producer runs in thread mode, the gating consumer in the SysTick handler, which the timer
//! fires at arbitrary points of the producer's work and the producer pends when the ring is
//! full. The consumer prints the counts and exits through semihosting: 0 when every message
//! arrived once, in order, intact.
//!
//! Run with `cargo run --release` (`.cargo/config.toml` names the target and QEMU).
#![no_std]
#![no_main]

use semihosting as _; // The panic handler: a panic exits non-zero.

// The ring's segment, `main` (thread mode: the producer) and the SysTick handler (the
// consumer), shared with the other Cortex-M example.
bare_metal_traffic::cortex_m_example!("thumbv7em (Cortex-M4), SysTick");
