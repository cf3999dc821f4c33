//! What the footprint binaries share: a panic handler that formats nothing, and the message.
//! Each binary in `src/bin` sends [`MSG`] from a producer and receives it in a consumer, with
//! `black_box` around both so neither side is optimised away; its `.text` minus the
//! `baseline` binary's is the queue's code for one producer and one consumer.
#![no_std]

/// The message each binary sends: 32 bytes.
pub static MSG: [u8; 32] = [0x5a; 32];

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {
        cortex_m::asm::nop();
    }
}
