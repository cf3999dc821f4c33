//! A ring in a named ring-os segment: create or open it, wait on its futexes, find and reclaim
//! dead consumers.
//!
//! This is the thin glue between ring-os's segment primitives (`Segment`, `futex`, `owner`) and
//! ring-core's protocol (`RawMemory` over the mapping, with futex wakes as [`Memory::notify`]).

use core::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ring_core::inspect::{consumer_info, EntryState};
use ring_core::layout::{ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader};
use ring_core::{
    AtomicU32, AtomicU64, AttachError, Config, Geometry, Memory, OwnerId, Producer, RawMemory,
    WaitStrategy,
};
use ring_os::owner::{liveness, Liveness};
use ring_os::{CreateOptions, Segment, SegmentName, SizeCheck};

use crate::error::{CliError, Result};

/// A ring laid over a mapped named segment.
#[derive(Debug)]
pub struct Ring {
    /// The protocol's view of the mapping (validated offsets into `seg`).
    raw: RawMemory,
    /// The mapping; it outlives `raw` because both live and die with `self`.
    seg: Segment,
    /// The segment's name.
    name: SegmentName,
}

/// Validates a user-given segment name.
pub fn segment_name(name: &str) -> Result<SegmentName> {
    Ok(SegmentName::new(name)?)
}

/// This process's owner id, as stored in segments.
pub fn owner() -> Result<OwnerId> {
    Ok(ring_os::owner::current()?)
}

/// Whether the process behind a raw owner id (0 = none) still runs.
pub fn alive(id: u64) -> Option<bool> {
    OwnerId::new(id).map(|id| liveness(id) == Liveness::Alive)
}

impl Ring {
    /// Creates the named segment for `config` and formats it as a ring.
    pub fn create(name: &SegmentName, config: &Config) -> Result<Self> {
        let geometry = Geometry::new(config)?;
        let creator = owner()?;
        let seg = Segment::create_named(name, geometry.total_len() as u64, CreateOptions::new())?;
        // SAFETY: the mapping covers `seg.len()` bytes, is page-aligned (so cache-line aligned),
        // readable and writable, and stays mapped while `seg` lives, which is as long as the
        // returned `Ring` (both are its fields). We created the file with O_EXCL a moment ago, so
        // no one else touches it until `initialize` opens the init barrier.
        let raw = unsafe { RawMemory::initialize(seg.as_ptr(), seg.len(), config, creator) };
        match raw {
            Ok(raw) => Ok(Self {
                raw,
                seg,
                name: name.clone(),
            }),
            Err(e) => {
                let _ = seg.unlink();
                Err(e.into())
            }
        }
    }

    /// Opens an existing named ring, validating its header as untrusted input.
    pub fn open(name: &SegmentName) -> Result<Self> {
        let seg = Segment::open_named(name, SizeCheck::AtLeast(header_len()))?;
        // SAFETY: the mapping covers `seg.len()` bytes (checked against the file size when it was
        // opened), is readable and writable, and stays mapped as long as the returned `Ring`.
        // Other processes write it only through atomics; `attach` validates every header field.
        let raw = unsafe { RawMemory::attach(seg.as_ptr(), seg.len()) }.map_err(|source| {
            CliError::Attach {
                name: name.as_str().to_owned(),
                source,
            }
        })?;
        Ok(Self {
            raw,
            seg,
            name: name.clone(),
        })
    }

    /// Opens a ring, retrying while it does not exist yet or is still being formatted, for at
    /// most `timeout`.
    pub fn open_wait(name: &SegmentName, timeout: Duration) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        loop {
            let err = match Self::open(name) {
                Ok(ring) => return Ok(ring),
                Err(e @ CliError::Os(ring_os::Error::NotFound { .. })) => e,
                Err(
                    e @ CliError::Attach {
                        source: AttachError::NotInitialized { .. },
                        ..
                    },
                ) => e,
                Err(e) => return Err(e),
            };
            if Instant::now() >= deadline {
                return Err(CliError::Timeout(format!(
                    "no usable ring {:?} after {:.1} s: {err}",
                    name.as_str(),
                    timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The segment's name.
    pub fn name(&self) -> &SegmentName {
        &self.name
    }

    /// The mapped length in bytes.
    pub fn mapped_len(&self) -> usize {
        self.seg.len()
    }

    /// Removes the segment's name (the memory stays until every mapping is gone).
    pub fn unlink(&self) -> Result<()> {
        Ok(self.seg.unlink()?)
    }
}

/// Bytes of a segment header: the least a file must have to be looked at.
fn header_len() -> u64 {
    core::mem::size_of::<SegmentHeader>() as u64
}

// SAFETY: every method forwards to `RawMemory`, whose promises hold because the mapping it was
// built over (`seg`) stays mapped for as long as `self` (they are fields of one struct, and the
// mapping is only unmapped when `Ring` is dropped). `notify` only wakes futex waiters.
unsafe impl Memory for Ring {
    fn geometry(&self) -> &Geometry {
        self.raw.geometry()
    }
    fn header(&self) -> &SegmentHeader {
        self.raw.header()
    }
    fn producer_line(&self) -> &ProducerLine {
        self.raw.producer_line()
    }
    fn consumer_entry(&self, index: usize) -> &ConsumerEntry {
        self.raw.consumer_entry(index)
    }
    fn slot_header(&self, index: usize) -> &SlotHeader {
        self.raw.slot_header(index)
    }
    fn payload(&self, index: usize) -> &[AtomicU64] {
        self.raw.payload(index)
    }
    fn alloc_words(&self) -> &[AtomicU64] {
        self.raw.alloc_words()
    }
    fn notify(&self, word: &AtomicU32) {
        // Shared futex: wakes waiters in every process that maps this segment.
        let _ = ring_os::futex::wake_all(as_core(word));
    }
}

/// A bounded wait: a few spins, then futex sleeps of at most `slice`, until `deadline`.
///
/// Each call to [`WaitStrategy::wait`] sleeps at most one slice and returns `true` (the caller
/// re-checks its condition) until the deadline has passed; then it returns `false`.
#[derive(Clone, Copy, Debug)]
pub struct FutexWait {
    /// When the whole wait gives up.
    deadline: Instant,
    /// Longest single futex sleep.
    slice: Duration,
}

impl FutexWait {
    /// A wait that gives up after `total`, sleeping at most `slice` at a time.
    pub fn new(total: Duration, slice: Duration) -> Self {
        Self {
            deadline: Instant::now() + total,
            slice,
        }
    }
}

impl WaitStrategy for FutexWait {
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
        for _ in 0..64 {
            // Acquire: pairs with the waker's Release store or bump of the word.
            if word.load(Ordering::Acquire) != expected {
                return true;
            }
            core::hint::spin_loop();
        }
        let now = Instant::now();
        if now >= self.deadline {
            return false;
        }
        let _ = ring_os::futex::wait(as_core(word), expected, self.slice.min(self.deadline - now));
        true
    }
}

/// Views ring-core's 32-bit atomic (portable-atomic's, laid out as `u32`) as `core`'s, which is
/// what ring-os's futex calls take.
fn as_core(word: &AtomicU32) -> &core::sync::atomic::AtomicU32 {
    // SAFETY: `as_ptr` points at a live, 4-aligned `u32` (ring-core's atomic is
    // `repr(transparent)` over an atomic with the layout of `u32`) for the borrow's life, and
    // every access to it, by us and by peers, is atomic, as `AtomicU32::from_ptr` requires.
    unsafe { core::sync::atomic::AtomicU32::from_ptr(word.as_ptr()) }
}

/// What [`reclaim_dead`] cleared.
#[derive(Clone, Copy, Debug, Default)]
pub struct Swept {
    /// Consumer entries reclaimed.
    pub entries: u64,
    /// Pins cleared in those entries.
    pub pins: u64,
}

/// Reclaims every consumer entry whose owner process is dead: its pins and its gating cursor.
pub fn reclaim_dead<M: Memory>(producer: &mut Producer<M>) -> Swept {
    let mut swept = Swept::default();
    let entries = producer.memory().geometry().consumers();
    for index in 0..entries {
        let Some(info) = consumer_info(producer.memory(), index) else {
            continue;
        };
        if info.state == EntryState::Free || alive(info.owner) != Some(false) {
            continue;
        }
        let Some(dead) = OwnerId::new(info.owner) else {
            continue;
        };
        if let Ok(r) = producer.reclaim(index, dead) {
            if r.was_registered {
                swept.entries += 1;
                swept.pins += u64::from(r.pins_cleared);
            }
        }
    }
    swept
}

/// Monotonic clock (`CLOCK_MONOTONIC`, system-wide, so comparable between processes) in ns.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}
