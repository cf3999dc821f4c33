//! The device ring over emulated devices, in one process: threads stand in for processes, and
//! each peer has its own device, so every handle is exported and opened as between processes.
//! The cross-process run is in `tests/pipeline.rs`.
//!
//! Mutation check: built with `--cfg ring_mutant="cuda_skip_read_waits"` (the producer stops
//! waiting for the consumers' read events) or `--cfg ring_mutant="cuda_skip_write_wait"` (a
//! consumer stops waiting for the write event), `slow_peers_never_tear` must fail.
#![allow(clippy::std_instead_of_core, reason = "std test")]

use std::time::Duration;

use ring_cuda::{conformance, EmulatedDevice, EmulatedOptions};

fn delayed(ms: u64) -> EmulatedDevice {
    EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_millis(ms),
        ..EmulatedOptions::default()
    })
}

#[test]
fn one_producer_three_gating_consumers() {
    conformance::device_ring(|_| EmulatedDevice::new(), 3, 300, 64 << 10, 4).unwrap();
}

#[test]
fn slow_peers_never_tear() {
    // Slow consumers, fast producer: without the producer's wait on the read events, it would
    // overwrite a slot while a consumer's copy of it is still queued.
    conformance::device_ring(
        |i| {
            if i == 0 {
                EmulatedDevice::new()
            } else {
                delayed(2)
            }
        },
        2,
        40,
        4096,
        2,
    )
    .unwrap();
    // Slow producer, fast consumers: without the consumers' wait on the write event, they would
    // copy a slot before the producer's writes to it ran.
    conformance::device_ring(
        |i| {
            if i == 0 {
                delayed(2)
            } else {
                EmulatedDevice::new()
            }
        },
        2,
        40,
        4096,
        2,
    )
    .unwrap();
}

#[test]
fn two_slots_many_frames() {
    conformance::device_ring(|_| EmulatedDevice::new(), 2, 1000, 1024, 2).unwrap();
}

/// The long run on the emulated device: 10,000 publish/consume cycles; afterwards every
/// device's live counts are back to zero, and each consumer opened each slot buffer once.
#[test]
fn ten_thousand_cycles_return_to_baseline() {
    conformance::device_ring(|_| EmulatedDevice::new(), 1, 10_000, 256, 4).unwrap();
}
