//! ring-core on a Cortex-M0 (QEMU `microbit`), which has no compare-and-swap: every atomic of
//! the ring is a critical section (ring-core's `critical-section` feature, cortex-m's single-core
//! implementation). As in the Cortex-M4 example, the producer runs in thread mode and the
//! gating consumer in the SysTick handler, which the timer fires at arbitrary points of the
//! producer's work and the producer pends when the ring is full. The consumer prints the counts and exits through semihosting: 0 when every message
//! arrived once, in order, intact.
//!
//! Run with `cargo run --release` (`.cargo/config.toml` names the target and QEMU).
#![no_std]
#![no_main]

use semihosting as _; // The panic handler: a panic exits non-zero.

// The ring's segment, `main` (thread mode: the producer) and the SysTick handler (the
// consumer), shared with the other Cortex-M example.
bare_metal_traffic::cortex_m_example!("thumbv6m (Cortex-M0), critical sections, SysTick");
