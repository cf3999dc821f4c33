//! Ring configuration and the overflow-checked computation of a segment's geometry.

use crate::error::LayoutError;
use crate::layout::{ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader, CACHE_LINE};
use core::mem::size_of;

/// Most slots a ring may have.
pub const MAX_SLOTS: u32 = 1 << 24;
/// Most consumers a ring may register: one reader bit each in the 32 low bits of a slot's state.
pub const MAX_CONSUMERS: u32 = 32;
/// Largest payload capacity of one slot (1 GiB).
pub const MAX_SLOT_CAPACITY: u32 = 1 << 30;
/// Largest allocator arena (1 TiB); larger values are treated as corrupt.
pub const MAX_ALLOC_ARENA: u64 = 1 << 40;

/// What a ring is made of: the caller's choice, validated by [`Geometry::new`].
///
/// # Examples
///
/// ```
/// use ring_core::{Config, Geometry};
/// let config = Config::new(8, 4096).with_consumers(4);
/// let geometry = Geometry::new(&config)?;
/// assert!(geometry.total_len() >= 8 * 4096);
/// # Ok::<(), ring_core::LayoutError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Number of slots, `1..=MAX_SLOTS`.
    ///
    /// Besides how far the producer may run ahead, the count decides how often a producer with
    /// gating consumers re-reads their cursors: when its cached bound is used up, once per
    /// `slots` messages while they keep up, and each re-read fetches a line a consumer writes on
    /// its own core. With 2 slots that is every other publish, a cache-line transfer each time:
    /// a 64-byte round trip between two processes took 1.17-1.35x as long with 2 slots as with
    /// 64 ("The round trip's ring depth" in docs/benchmarks.md). So request/response rings,
    /// which keep one message in flight, still gain from 8 slots or more.
    pub slots: u32,
    /// Payload bytes per slot, `8..=MAX_SLOT_CAPACITY`; rounded up to a multiple of 8.
    pub slot_capacity: u32,
    /// Consumer-table entries, `1..=MAX_CONSUMERS`.
    pub consumers: u32,
    /// Bytes of allocator arena for variable-size payloads; 0 for no allocator.
    pub alloc_arena: u64,
    /// Live-allocation ceiling of the allocator.
    pub alloc_max_live: u32,
    /// Consumers read only what they pin (copy reads pin, copy and unpin), so the producer may
    /// write a claimed slot in place through [`WriteSlot::loan`](crate::WriteSlot::loan).
    /// Copy readers then hold the producer back while they copy, as pinned readers do.
    pub pin_only: bool,
    /// History for late joiners, `0..=slots`: a gating or skip-on-lag consumer that registers
    /// starts up to this many messages back from the head, as far as the ring still holds
    /// them (see [`Consumer::rewind`](crate::Consumer::rewind)); a latest-only one starts at
    /// the newest message present whatever this says.
    pub history: u32,
    /// Slots decoupled from sequence numbers: pins of latest-only and skip-on-lag readers
    /// never make the producer wait while a slot is free (it writes elsewhere); gating
    /// consumers and groups still hold it back. The producer never waits for such pins while
    /// `slots >= pinned + 2` (one slot holds the newest message, one takes the next), so it
    /// needs at least 3 slots. See [`with_never_stall`](Self::with_never_stall).
    pub never_stall: bool,
    /// Asymmetric fences: the two fences every message costs (after a publish, after a read)
    /// may be compiler fences, and every park pays for them instead, with a process-wide
    /// barrier (`membarrier(2)` in ring-os, where the kernel has it). For rings whose readers
    /// and producer poll rather than sleep. Only a marker in the segment: what the fences are
    /// is the [`Memory`](crate::Memory)'s choice ([`Memory::light_fence`](crate::Memory::light_fence)),
    /// and memory without such a barrier keeps `SeqCst` fences. See
    /// [`with_asymmetric_fences`](Self::with_asymmetric_fences).
    pub asymmetric_fences: bool,
}

impl Config {
    /// `slots` slots of `slot_capacity` bytes, 8 consumers, no allocator.
    pub const fn new(slots: u32, slot_capacity: u32) -> Self {
        Self {
            slots,
            slot_capacity,
            consumers: 8,
            alloc_arena: 0,
            alloc_max_live: 0,
            pin_only: false,
            history: 0,
            never_stall: false,
            asymmetric_fences: false,
        }
    }

    /// Sets the history for late joiners (see [`history`](Self::history)).
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let seg = HeapSegment::new(&Config::new(8, 16).with_history(2), id(1)).unwrap();
    /// let mut producer = Producer::new(&seg, id(1)).unwrap();
    /// for i in 0..5u8 {
    ///     producer.try_publish(&[i]).unwrap();
    /// }
    /// // Joined after five messages: starts at the last two, gating from there on.
    /// let mut late = Consumer::new(&seg, DeliveryClass::Gating, id(2)).unwrap();
    /// let mut buf = [0u8; 16];
    /// assert_eq!(late.try_copy(&mut buf)?.seq, 3);
    /// # Ok::<(), ring_core::ReadError>(())
    /// ```
    #[must_use]
    pub const fn with_history(mut self, history: u32) -> Self {
        self.history = history;
        self
    }

    /// Makes the ring pin-only (see [`pin_only`](Self::pin_only)), for zero-copy writes.
    #[must_use]
    pub const fn with_pin_only(mut self, pin_only: bool) -> Self {
        self.pin_only = pin_only;
        self
    }

    /// Makes the ring never-stall (see [`never_stall`](Self::never_stall)): a frame grabber
    /// that keeps its pinned frames for a long time never slows the renderer.
    ///
    /// ```
    /// use ring_core::{ClaimError, Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let seg = HeapSegment::new(&Config::new(4, 16).with_never_stall(true), id(1)).unwrap();
    /// let mut producer = Producer::new(&seg, id(1)).unwrap();
    /// let mut grabber = Consumer::new(&seg, DeliveryClass::LatestOnly, id(2)).unwrap();
    /// producer.try_publish(b"frame 0")?;
    /// let held = grabber.try_hold().unwrap();
    /// // The grabber keeps frame 0; the producer goes round the ring many times regardless.
    /// for i in 1..100u64 {
    ///     assert_eq!(producer.try_publish(&i.to_le_bytes())?, i);
    /// }
    /// assert_eq!(grabber.held_bytes(&held), Some(&b"frame 0"[..]));
    /// grabber.release(held).unwrap();
    /// # Ok::<(), ClaimError>(())
    /// ```
    #[must_use]
    pub const fn with_never_stall(mut self, never_stall: bool) -> Self {
        self.never_stall = never_stall;
        self
    }

    /// Marks the ring for asymmetric fences (see
    /// [`asymmetric_fences`](Self::asymmetric_fences)): on ring-os mappings a poll-driven
    /// reader and producer then run no hardware fence per message (measured: a 64-byte round
    /// trip 15 % shorter), and each park costs a `membarrier(2)` system call (0.5-7 µs on the
    /// test machine, and an interrupt on the CPUs the ring's peers run on). On a
    /// [`HeapSegment`](crate::HeapSegment) it changes nothing.
    ///
    /// ```
    /// use ring_core::{Config, HeapSegment, Memory, OwnerId};
    /// let config = Config::new(8, 64).with_asymmetric_fences(true);
    /// let seg = HeapSegment::new(&config, OwnerId::new(1).unwrap()).unwrap();
    /// assert!(seg.geometry().config().asymmetric_fences);
    /// ```
    #[must_use]
    pub const fn with_asymmetric_fences(mut self, asymmetric: bool) -> Self {
        self.asymmetric_fences = asymmetric;
        self
    }

    /// Sets the number of consumer-table entries.
    #[must_use]
    pub const fn with_consumers(mut self, consumers: u32) -> Self {
        self.consumers = consumers;
        self
    }

    /// Adds an allocator region with an arena of `arena_bytes` and a live-allocation ceiling.
    #[must_use]
    pub const fn with_allocator(mut self, arena_bytes: u64, max_live: u32) -> Self {
        self.alloc_arena = arena_bytes;
        self.alloc_max_live = max_live;
        self
    }
}

/// A validated [`Config`] with every region's offset; the only geometry code trusts.
///
/// Built from a `Config` by the creator, or from header fields by an attacher (after which the
/// header is compared field by field against it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    pub(crate) config: Config,
    pub(crate) producer_off: usize,
    pub(crate) consumers_off: usize,
    pub(crate) slots_off: usize,
    pub(crate) payloads_off: usize,
    pub(crate) payload_stride: usize,
    pub(crate) alloc_off: usize,
    pub(crate) alloc_len: usize,
    pub(crate) total_len: usize,
    /// `slots - 1` when the slot count is a power of two, else [`NO_MASK`]: decided once, so
    /// `slot_of` is one load, one compare and an `and` on every read and claim.
    pub(crate) slot_mask: u64,
}

/// [`Geometry::slot_mask`] of a slot count that is not a power of two.
const NO_MASK: u64 = u64::MAX;

fn round_up(v: u64, to: u64) -> Option<u64> {
    v.checked_add(to - 1).map(|x| x / to * to)
}

impl Geometry {
    /// Validates `config` and lays the segment out, with overflow-checked arithmetic.
    ///
    /// # Errors
    /// [`LayoutError`] names the field that is out of range, or says the total overflows.
    pub fn new(config: &Config) -> Result<Self, LayoutError> {
        let mut config = *config;
        if config.slots == 0 || config.slots > MAX_SLOTS {
            return Err(LayoutError::Slots {
                value: config.slots,
                max: MAX_SLOTS,
            });
        }
        if config.consumers == 0 || config.consumers > MAX_CONSUMERS {
            return Err(LayoutError::Consumers {
                value: config.consumers,
                max: MAX_CONSUMERS,
            });
        }
        if config.slot_capacity < 8 || config.slot_capacity > MAX_SLOT_CAPACITY {
            return Err(LayoutError::SlotCapacity {
                value: config.slot_capacity,
                max: MAX_SLOT_CAPACITY,
            });
        }
        if config.history > config.slots {
            return Err(LayoutError::History {
                value: config.history,
                max: config.slots,
            });
        }
        if config.never_stall && config.slots < 3 {
            return Err(LayoutError::NeverStallSlots {
                value: config.slots,
            });
        }
        config.slot_capacity = config.slot_capacity.div_ceil(8) * 8;
        let alloc_len = if config.alloc_arena == 0 {
            if config.alloc_max_live != 0 {
                return Err(LayoutError::Allocator);
            }
            0
        } else {
            if config.alloc_arena > MAX_ALLOC_ARENA || config.alloc_max_live == 0 {
                return Err(LayoutError::Allocator);
            }
            crate::arena::region_len(config.alloc_arena, config.alloc_max_live)
                .ok_or(LayoutError::Allocator)?
        };
        let line = CACHE_LINE as u64;
        let of = |n: usize| n as u64;
        let producer_off = of(size_of::<SegmentHeader>());
        let consumers_off = producer_off + of(size_of::<ProducerLine>());
        let slots_off = of(size_of::<ConsumerEntry>())
            .checked_mul(u64::from(config.consumers))
            .and_then(|v| v.checked_add(consumers_off))
            .ok_or(LayoutError::Overflow)?;
        let payload_stride =
            round_up(u64::from(config.slot_capacity), line).ok_or(LayoutError::Overflow)?;
        let payloads_off = of(size_of::<SlotHeader>())
            .checked_mul(u64::from(config.slots))
            .and_then(|v| v.checked_add(slots_off))
            .ok_or(LayoutError::Overflow)?;
        let alloc_off = payload_stride
            .checked_mul(u64::from(config.slots))
            .and_then(|v| v.checked_add(payloads_off))
            .ok_or(LayoutError::Overflow)?;
        let total_len = alloc_off
            .checked_add(alloc_len)
            .and_then(|v| round_up(v, line))
            .ok_or(LayoutError::Overflow)?;
        let us = |v: u64| usize::try_from(v).map_err(|_| LayoutError::Overflow);
        Ok(Self {
            config,
            producer_off: us(producer_off)?,
            consumers_off: us(consumers_off)?,
            slots_off: us(slots_off)?,
            payloads_off: us(payloads_off)?,
            payload_stride: us(payload_stride)?,
            alloc_off: us(alloc_off)?,
            alloc_len: us(alloc_len)?,
            total_len: us(total_len)?,
            slot_mask: if config.slots.is_power_of_two() {
                config.slots as u64 - 1
            } else {
                NO_MASK
            },
        })
    }

    /// The segment's size in bytes.
    pub const fn total_len(&self) -> usize {
        self.total_len
    }

    /// The validated configuration (slot capacity rounded up to a multiple of 8).
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// Number of slots.
    pub const fn slots(&self) -> usize {
        self.config.slots as usize
    }

    /// The slot message `seq` goes to: `seq % slots`, with a mask instead of a division when
    /// the slot count is a power of two (a 64-bit division costs tens of cycles, and every read
    /// and claim needs this; the mask is computed once, in [`new`](Self::new)).
    #[inline]
    pub const fn slot_of(&self, seq: u64) -> usize {
        (if self.slot_mask != NO_MASK {
            seq & self.slot_mask
        } else {
            seq % self.config.slots as u64
        }) as usize
    }

    /// Payload capacity of one slot in bytes.
    pub const fn slot_capacity(&self) -> usize {
        self.config.slot_capacity as usize
    }

    /// Number of consumer-table entries.
    pub const fn consumers(&self) -> usize {
        self.config.consumers as usize
    }

    /// Words of payload per slot.
    pub const fn payload_words(&self) -> usize {
        self.config.slot_capacity as usize / 8
    }

    /// Byte offset and length of the allocator region (length 0 without an allocator).
    pub const fn alloc_region(&self) -> (usize, usize) {
        (self.alloc_off, self.alloc_len)
    }

    /// Byte offsets of the producer line, consumer table, slot headers and payloads, and the
    /// distance between two slots' payloads.
    pub const fn offsets(&self) -> [usize; 5] {
        [
            self.producer_off,
            self.consumers_off,
            self.slots_off,
            self.payloads_off,
            self.payload_stride,
        ]
    }
}
