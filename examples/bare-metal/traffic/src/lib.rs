//! The traffic every bare-metal example sends through a ring-core ring, and its check.
//!
//! Message `seq` is `len_of(seq)` bytes (8 to [`MAX_LEN`], about a third of them at most
//! [`INLINE_CAPACITY`], so both the inline and the payload-area path are taken): its sequence
//! number (`u32`, little-endian), bytes from a generator seeded by `seq`, and an FNV-1a checksum
//! of everything before it. The consumer checks that each message has the length, the sequence
//! number and the checksum it should, and that a gating consumer sees every message once, in
//! order. The examples share this crate: [`produce`] and [`Receiver::poll`] are the two sides,
//! and each example wires them to its own machine (two harts, or thread mode and an interrupt
//! handler).
#![no_std]

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use ring_core::{
    AttachError, ClaimError, Config, Consumer, DeliveryClass, Memory, OwnerId, Producer, RawMemory,
    ReadError, INLINE_CAPACITY,
};

/// Messages each example sends.
pub const MESSAGES: u64 = 100_000;
/// The longest message, and the slot capacity.
pub const MAX_LEN: usize = 96;
/// The ring: 8 slots of `MAX_LEN` bytes, one consumer entry, no allocator.
pub const CONFIG: Config = Config::new(8, MAX_LEN as u32).with_consumers(1);
/// Bytes reserved for the segment: the ring needs 2080 on targets with 32-byte lines (riscv32,
/// arm); `format` checks.
pub const SEGMENT_LEN: usize = 2560;
/// The owner id of the producer.
pub const PRODUCER: OwnerId = match OwnerId::new(1) {
    Some(id) => id,
    None => panic!("1 is a valid owner id"),
};
/// The owner id of the consumer.
pub const CONSUMER: OwnerId = match OwnerId::new(2) {
    Some(id) => id,
    None => panic!("2 is a valid owner id"),
};
/// The message the `break-checksum` feature corrupts.
#[cfg(feature = "break-checksum")]
pub const BROKEN_SEQ: u64 = MESSAGES / 2 + 1;

/// A ring's bytes in a `static`: formatted once by one side, attached to by the other.
#[repr(C, align(64))]
pub struct Segment {
    bytes: UnsafeCell<[u8; SEGMENT_LEN]>,
    /// Set (Release) once `format` is done; `attach` reads it (Acquire) before it touches the
    /// bytes, so an attach never overlaps the formatting.
    formatted: AtomicBool,
}

// SAFETY: the bytes are reached only through `RawMemory` (atomics) once `format` has run, and
// `attach` does not reach them before (the `formatted` flag); `format`'s caller keeps everyone
// else away while it runs.
unsafe impl Sync for Segment {}

impl Segment {
    /// An unformatted segment (zeroed, so it lands in `.bss`).
    #[allow(clippy::new_without_default, reason = "a const fn for a static")]
    pub const fn new() -> Self {
        Self {
            bytes: UnsafeCell::new([0; SEGMENT_LEN]),
            formatted: AtomicBool::new(false),
        }
    }

    fn base(&self) -> NonNull<u8> {
        NonNull::from(&self.bytes).cast()
    }

    /// Formats the ring ([`CONFIG`]) and returns the creator's view of it.
    ///
    /// # Safety
    /// Called once, and before anything else can reach this segment (the other hart still
    /// parked, the interrupt handler not yet enabled).
    pub unsafe fn format(&'static self, creator: OwnerId) -> RawMemory {
        // SAFETY: the bytes are static, so valid for the returned value's life; the caller keeps
        // everyone else away while this runs, and afterwards all access is through atomics.
        let mem = unsafe { RawMemory::initialize(self.base(), SEGMENT_LEN, &CONFIG, creator) };
        let mem = mem.unwrap_or_else(|e| panic!("cannot format the ring: {e}"));
        // Release: pairs with the Acquire load in `attach`.
        self.formatted.store(true, Ordering::Release);
        mem
    }

    /// Opens the ring `format` made; `NotInitialized` until it has run.
    ///
    /// # Errors
    /// [`AttachError::NotInitialized`] before `format`, or what `RawMemory::attach` found.
    pub fn attach(&'static self) -> Result<RawMemory, AttachError> {
        // Acquire: pairs with the Release store in `format`: its writes happen before ours.
        if !self.formatted.load(Ordering::Acquire) {
            return Err(AttachError::NotInitialized { state: 0 });
        }
        // SAFETY: the bytes are static (valid and mapped forever) and, now that `format` is
        // done, touched by everyone through atomics only.
        unsafe { RawMemory::attach(self.base(), SEGMENT_LEN) }
    }
}

/// A 64-bit mix (splitmix64's finaliser): the lengths and bytes of message `seq`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// FNV-1a, 32-bit.
fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The length of message `seq`: 8 to `MAX_LEN` bytes.
pub fn len_of(seq: u64) -> usize {
    8 + (mix(seq) % (MAX_LEN as u64 - 7)) as usize
}

/// Writes message `seq` into `buf` and returns its length.
pub fn fill(seq: u64, buf: &mut [u8; MAX_LEN]) -> usize {
    let len = len_of(seq);
    buf[..4].copy_from_slice(&(seq as u32).to_le_bytes());
    let mut state = seq;
    for chunk in buf[4..len - 4].chunks_mut(8) {
        state = mix(state);
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    let sum = checksum(&buf[..len - 4]);
    buf[len - 4..len].copy_from_slice(&sum.to_le_bytes());
    len
}

/// Whether `bytes` is message `seq`, whole: its length, sequence number and checksum.
pub fn is_intact(seq: u64, bytes: &[u8]) -> bool {
    let len = bytes.len();
    len == len_of(seq)
        && bytes[..4] == (seq as u32).to_le_bytes()
        && bytes[len - 4..] == checksum(&bytes[..len - 4]).to_le_bytes()
}

/// Publishes messages `0..MESSAGES`, then closes the ring. `on_full` runs each time the ring is
/// full (spin, or pend the consumer's interrupt).
///
/// # Panics
/// When a claim fails for any reason but a full ring (the ring closed, the producer displaced).
pub fn send_all<M: Memory>(tx: &mut Producer<M>, mut on_full: impl FnMut()) {
    let mut buf = [0u8; MAX_LEN];
    for seq in 0..MESSAGES {
        let len = fill(seq, &mut buf);
        loop {
            match tx.try_claim() {
                Ok(mut slot) => {
                    assert_eq!(slot.seq(), seq, "the ring numbers messages from 0");
                    slot.write(&buf[..len]).expect("a message fits its slot");
                    #[cfg(feature = "break-checksum")]
                    if seq == BROKEN_SEQ {
                        // The deliberate bug: one byte changed after the message was written.
                        slot.write_at(4, &[buf[4] ^ 0xff])
                            .expect("inside the message");
                    }
                    slot.publish()
                        .unwrap_or_else(|e| panic!("publish {seq}: {e}"));
                    break;
                }
                Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => on_full(),
                Err(e) => panic!("claim {seq}: {e}"),
            }
        }
    }
    tx.close();
}

/// The producer's side: formats `segment`, calls `wake` (the consumer's side may reach the
/// segment from then on), waits for the consumer to register, sends every message and closes
/// the ring. `on_full` runs while the producer waits (spin, or pend the consumer's interrupt).
///
/// # Safety
/// As [`Segment::format`]: nothing else reaches `segment` before `wake` runs.
///
/// # Panics
/// When the producer cannot start, or a claim fails for any reason but a full ring.
pub unsafe fn produce(segment: &'static Segment, wake: impl FnOnce(), mut on_full: impl FnMut()) {
    // SAFETY: the caller keeps everyone else away from the segment until `wake`.
    let mem = unsafe { segment.format(PRODUCER) };
    wake();
    // SAFETY: nothing on these machines judges ring participants dead: no reclaim or take_over
    // runs on this memory while the producer lives.
    let tx = unsafe { Producer::new_unchecked(mem, PRODUCER) };
    let mut tx = tx.unwrap_or_else(|e| panic!("cannot become the producer: {e}"));
    // Publish nothing before the gating consumer is in: it must see message 0.
    while tx.ready_consumers() == 0 {
        on_full();
    }
    send_all(&mut tx, on_full);
}

/// The Cortex-M examples' thread mode: starts the SysTick timer (every 2000 core cycles, often
/// enough to land anywhere in a claim, write or publish) and produces, pending SysTick when the
/// ring is full. The handler is the consumer: it calls [`Receiver::poll`].
#[cfg(feature = "cortex-m")]
pub fn cortex_m_thread(segment: &'static Segment) -> ! {
    use cortex_m::peripheral::{syst::SystClkSource, SCB};
    let mut syst = cortex_m::Peripherals::take().expect("taken once").SYST;
    let start_timer = || {
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(2_000);
        syst.clear_current();
        syst.enable_counter();
        syst.enable_interrupt();
    };
    // SAFETY: the SysTick handler, the only other party, cannot run before `start_timer`
    // enables its interrupt (nothing pends it before).
    unsafe { produce(segment, start_timer, SCB::set_pendst) };
    // The consumer reports and exits the machine.
    loop {
        cortex_m::asm::wfi();
    }
}

/// A Cortex-M example's program: the ring's static [`Segment`], thread mode producing
/// ([`cortex_m_thread`]) and the SysTick handler consuming ([`Receiver::poll`]); `$machine`
/// names the run in the report. The example depends on `cortex-m-rt`, whose `entry` and
/// `exception` attributes the expansion uses.
#[cfg(feature = "cortex-m")]
#[macro_export]
macro_rules! cortex_m_example {
    ($machine:expr) => {
        /// The ring's bytes: formatted in thread mode, attached to by the SysTick handler.
        static SEGMENT: $crate::Segment = $crate::Segment::new();

        #[cortex_m_rt::entry]
        fn main() -> ! {
            $crate::cortex_m_thread(&SEGMENT)
        }

        #[cortex_m_rt::exception]
        fn SysTick() {
            static mut RECEIVER: $crate::Receiver = $crate::Receiver::new($machine);
            RECEIVER.poll(&SEGMENT);
        }
    };
}

/// The consumer's side, polled by its hart's loop or its interrupt handler.
#[derive(Debug)]
pub struct Receiver {
    machine: &'static str,
    rx: Option<Consumer<RawMemory>>,
    tally: Tally,
}

impl Receiver {
    /// A consumer not yet registered; `machine` names the run in the report.
    pub const fn new(machine: &'static str) -> Self {
        Self {
            machine,
            rx: None,
            tally: Tally::new(),
        }
    }

    /// Registers a gating consumer once `segment` is formatted, then reads and checks every
    /// message published so far. Once the producer closed the ring and everything was read,
    /// prints the counts and exits through semihosting (0 when every message arrived once, in
    /// order and intact).
    ///
    /// # Panics
    /// When the consumer cannot register, or a read fails.
    pub fn poll(&mut self, segment: &'static Segment) {
        let rx = match &mut self.rx {
            Some(rx) => rx,
            None => {
                let Ok(mem) = segment.attach() else {
                    return; // Not formatted yet.
                };
                // SAFETY: nothing on these machines judges ring participants dead: no reclaim
                // or take_over runs on this memory while the consumer lives.
                let rx = unsafe { Consumer::new_unchecked(mem, DeliveryClass::Gating, CONSUMER) };
                let rx = rx.unwrap_or_else(|e| panic!("cannot register the consumer: {e}"));
                self.rx.insert(rx)
            }
        };
        if self.tally.drain(rx).unwrap_or_else(|e| panic!("read: {e}")) {
            semihosting::process::exit(self.tally.report(self.machine));
        }
    }
}

/// What a consumer received, and what was wrong with it.
#[derive(Debug)]
pub struct Tally {
    /// Messages read.
    pub received: u64,
    /// Of those, messages of at most `INLINE_CAPACITY` bytes (read from the message line).
    pub inline: u64,
    /// Messages read by a pin (the others by a seqlock copy).
    pub pinned: u64,
    /// Torn or corrupt messages: wrong length, sequence number or checksum.
    pub corrupt: u64,
    /// Messages out of sequence (a gap, a repeat, or one the ring reported missed).
    pub out_of_order: u64,
    next: u64,
}

impl Tally {
    /// Nothing received yet.
    #[allow(clippy::new_without_default, reason = "a const fn for a static")]
    pub const fn new() -> Self {
        Self {
            received: 0,
            inline: 0,
            pinned: 0,
            corrupt: 0,
            out_of_order: 0,
            next: 0,
        }
    }

    fn record(&mut self, seq: u64, missed: u64, len: usize, intact: bool) {
        self.received += 1;
        self.inline += u64::from(len <= INLINE_CAPACITY);
        self.corrupt += u64::from(!intact);
        self.out_of_order += u64::from(seq != self.next || missed != 0);
        self.next = seq + 1;
    }

    /// Reads and checks every message published so far, alternating pinned reads and copies.
    /// True once the producer closed the ring and everything was read.
    ///
    /// # Errors
    /// Any read error but an empty or closed ring.
    pub fn drain<M: Memory>(&mut self, rx: &mut Consumer<M>) -> Result<bool, ReadError> {
        loop {
            let read = if self.received % 2 == 0 {
                rx.try_pin().map(|msg| {
                    let intact = is_intact(msg.seq(), msg.bytes());
                    (msg.seq(), msg.missed(), msg.len(), intact, true)
                })
            } else {
                let mut buf = [0u8; MAX_LEN];
                rx.try_copy(&mut buf).map(|c| {
                    let intact = is_intact(c.seq, &buf[..c.len]);
                    (c.seq, c.missed, c.len, intact, false)
                })
            };
            match read {
                Ok((seq, missed, len, intact, pinned)) => {
                    self.pinned += u64::from(pinned);
                    self.record(seq, missed, len, intact);
                }
                Err(ReadError::Empty) => return Ok(false),
                Err(ReadError::Closed) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether every message arrived once, in order, intact.
    pub fn is_ok(&self) -> bool {
        self.received == MESSAGES && self.corrupt == 0 && self.out_of_order == 0
    }

    /// Prints the counts (semihosting) and returns the exit status: 0 when [`is_ok`](Self::is_ok).
    pub fn report(&self, machine: &str) -> i32 {
        semihosting::println!(
            "{machine}: sent {MESSAGES}, received {} ({} inline, {} pinned), corrupt {}, \
             out of order {}: {}",
            self.received,
            self.inline,
            self.pinned,
            self.corrupt,
            self.out_of_order,
            if self.is_ok() { "ok" } else { "FAILED" }
        );
        i32::from(!self.is_ok())
    }
}
