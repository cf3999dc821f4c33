//! ring-core: 8 slots of 96 bytes, one gating consumer, a pinned read and a copy.
#![no_std]
#![no_main]

use core::cell::UnsafeCell;
use core::hint::black_box;
use core::ptr::NonNull;
use ring_bare_metal_footprint::MSG;
use ring_core::{Config, Consumer, DeliveryClass, OwnerId, Producer, RawMemory};

#[repr(C, align(64))]
struct Segment(UnsafeCell<[u8; 2080]>);
// SAFETY: reached only through `RawMemory` (atomics) once formatted, by this one thread.
unsafe impl Sync for Segment {}
static SEGMENT: Segment = Segment(UnsafeCell::new([0; 2080]));

#[cortex_m_rt::entry]
fn main() -> ! {
    let (Some(p), Some(c)) = (OwnerId::new(1), OwnerId::new(2)) else {
        loop {}
    };
    let base = NonNull::from(&SEGMENT.0).cast();
    // SAFETY: the static's bytes are valid forever and reached by nothing else.
    let mem =
        unsafe { RawMemory::initialize(base, 2080, &Config::new(8, 96).with_consumers(1), p) };
    let Ok(mem) = mem else { loop {} };
    // SAFETY: nothing here judges participants dead (no reclaim, no take_over).
    let Ok(mut tx) = (unsafe { Producer::new_unchecked(&mem, p) }) else {
        loop {}
    };
    // SAFETY: as for the producer.
    let Ok(mut rx) = (unsafe { Consumer::new_unchecked(&mem, DeliveryClass::Gating, c) }) else {
        loop {}
    };
    let mut out = [0u8; 96];
    loop {
        let _ = black_box(tx.try_publish(black_box(&MSG)));
        if let Ok(msg) = rx.try_pin() {
            black_box(msg.bytes());
        }
        let _ = black_box(tx.try_publish(black_box(&MSG)));
        let _ = black_box(rx.try_copy(&mut out));
    }
}
