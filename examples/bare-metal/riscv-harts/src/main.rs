//! ring-core across two harts of QEMU's `virt` machine: hart 0 formats a ring in a static
//! buffer and produces [`MESSAGES`](traffic::MESSAGES) checksummed messages, hart 1 attaches,
//! registers a gating consumer and checks every message. The consumer prints the counts and
//! exits through semihosting: 0 when every message arrived once, in order, intact.
//!
//! Run with `cargo run --release` (`.cargo/config.toml` names the target and QEMU).
#![no_std]
#![no_main]

use bare_metal_traffic as traffic;
use riscv::register::{mie, mip};
use semihosting as _; // The panic handler: a panic exits non-zero.

/// The ring's bytes: formatted by hart 0, attached to by hart 1.
static SEGMENT: traffic::Segment = traffic::Segment::new();

/// The machine-mode software-interrupt (IPI) register of hart `n` is `CLINT_MSIP + 4 n`.
const CLINT_MSIP: usize = 0x0200_0000;

/// Called by riscv-rt on every hart before RAM is initialised: hart 0 goes on and initialises
/// RAM, the others wait here for the IPI hart 0 sends once the ring is formatted (and then skip
/// the RAM initialisation). Touches no static: `.bss` may not be zeroed yet.
#[export_name = "_mp_hook"]
pub extern "C" fn mp_hook(hartid: usize) -> bool {
    if hartid == 0 {
        return true;
    }
    // SAFETY: enabling the software interrupt in `mie` lets `wfi` wake on it; `mstatus.MIE` is
    // still clear (riscv-rt's start code), so no trap is taken.
    unsafe { mie::set_msoft() };
    while !mip::read().msoft() {
        riscv::asm::wfi();
    }
    // SAFETY: as above; the interrupt is disabled again before RAM and traps are set up.
    unsafe { mie::clear_msoft() };
    // SAFETY: this hart's MSIP register in the virt machine's CLINT; clearing it acknowledges
    // the IPI.
    unsafe { ((CLINT_MSIP + 4 * hartid) as *mut u32).write_volatile(0) };
    false
}

#[riscv_rt::entry]
fn main(hartid: usize) -> ! {
    if hartid == 0 {
        produce()
    } else {
        consume()
    }
}

fn produce() -> ! {
    // SAFETY: hart 1, the only other party, stays parked in `mp_hook` until `wake` sends it the
    // IPI, and nothing else on this hart touches the segment.
    unsafe { traffic::produce(&SEGMENT, wake_hart_1, core::hint::spin_loop) };
    // The consumer reports and exits the machine.
    loop {
        riscv::asm::wfi();
    }
}

fn wake_hart_1() {
    // SAFETY: hart 1's MSIP register in the virt machine's CLINT; setting it wakes hart 1.
    unsafe { ((CLINT_MSIP + 4) as *mut u32).write_volatile(1) };
}

fn consume() -> ! {
    let mut receiver = traffic::Receiver::new("riscv32imac, 2 harts");
    loop {
        receiver.poll(&SEGMENT);
        core::hint::spin_loop();
    }
}
