//! heapless 0.9's spsc queue of 8 fixed 96-byte messages.
#![no_std]
#![no_main]

use core::hint::black_box;
use heapless::spsc::Queue;
use ring_bare_metal_footprint::MSG;

#[cortex_m_rt::entry]
fn main() -> ! {
    let queue: &'static mut Queue<[u8; 96], 9> =
        cortex_m::singleton!(: Queue<[u8; 96], 9> = Queue::new()).unwrap();
    let (mut tx, mut rx) = queue.split();
    loop {
        let msg: &[u8] = black_box(&MSG);
        let mut item = [0u8; 96];
        item[..msg.len()].copy_from_slice(msg);
        let _ = black_box(tx.enqueue(item));
        black_box(rx.dequeue());
    }
}
