//! A segment in one heap buffer, through the same [`RawMemory`] path an OS mapping uses.

use crate::error::{AttachError, LayoutError};
use crate::geometry::{Config, Geometry};
use crate::memory::Memory;
use crate::owner::OwnerId;
use crate::raw::RawMemory;
use crate::sync::{AtomicU32, AtomicU64};
use alloc::vec::Vec;
use core::ptr::NonNull;

/// One cache line of storage; the buffer is a `Vec` of these so it is cache-line aligned.
#[repr(C, align(128))]
struct Line([u64; 16]);

/// A zeroed, 128-byte-aligned buffer of at least `len` bytes (at least one line).
fn lines(len: usize) -> Vec<Line> {
    let mut buf = Vec::new();
    buf.resize_with(len.div_ceil(128).max(1), || Line([0; 16]));
    buf
}

/// An owned, cache-line-aligned heap buffer holding one segment, opened through [`RawMemory`]
/// exactly as a shared mapping is. For tests and in-process rings.
///
/// # Examples
///
/// ```
/// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
/// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap())?;
/// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
/// let mut consumer = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
/// producer.try_publish(b"hello").unwrap();
/// let mut buf = [0u8; 64];
/// let got = consumer.try_copy(&mut buf).unwrap();
/// assert_eq!(&buf[..got.len], b"hello");
/// # Ok::<(), ring_core::LayoutError>(())
/// ```
pub struct HeapSegment {
    // Keeps the bytes alive; accessed only through `raw`.
    _buf: Vec<Line>,
    raw: RawMemory,
}

impl core::fmt::Debug for HeapSegment {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HeapSegment")
            .field("geometry", self.raw.geometry())
            .finish()
    }
}

impl HeapSegment {
    /// Allocates and formats a segment for `config`.
    ///
    /// # Errors
    /// [`LayoutError`] when the config is invalid.
    pub fn new(config: &Config, creator: OwnerId) -> Result<Self, LayoutError> {
        let len = Geometry::new(config)?.total_len();
        let mut buf = lines(len);
        let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).ok_or(LayoutError::Overflow)?;
        // SAFETY: `buf` is `len` or more bytes, 128-aligned, owned by the returned value and never
        // reallocated; from now on it is accessed only through `raw`.
        let raw = unsafe { RawMemory::initialize(base, buf.len() * 128, config, creator)? };
        Ok(Self { _buf: buf, raw })
    }

    /// Copies arbitrary bytes into an aligned buffer and attaches to them as untrusted input.
    ///
    /// # Errors
    /// [`AttachError`] when the bytes are not a valid segment.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, AttachError> {
        let mut buf = lines(bytes.len());
        let base = NonNull::new(buf.as_mut_ptr().cast::<u8>()).ok_or(AttachError::Misaligned)?;
        // SAFETY: `buf` has room for `bytes.len()` bytes and does not overlap `bytes`.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), base.as_ptr(), bytes.len()) };
        // SAFETY: `buf` is valid for `bytes.len()` bytes, aligned, owned by the returned value.
        let raw = unsafe { RawMemory::attach(base, bytes.len())? };
        Ok(Self { _buf: buf, raw })
    }

    /// A copy of the segment's bytes (for seed corpora and inspection).
    ///
    /// Reads through the atomics, so it is race-free even while peers run.
    pub fn to_bytes(&self) -> Vec<u8> {
        let len = self.raw.geometry().total_len();
        let base = self.raw.base();
        let mut out = Vec::with_capacity(len);
        for i in 0..len / 8 {
            // SAFETY: word `i` lies in the segment (i * 8 + 8 ≤ len), 8-aligned; read atomically.
            let w = unsafe { &*base.as_ptr().add(i * 8).cast::<AtomicU64>() };
            out.extend_from_slice(&w.load(crate::sync::Ordering::Relaxed).to_ne_bytes());
        }
        out
    }
}

// SAFETY: a heap segment lives in this process only, and nothing in the workspace judges the
// liveness of its participants: reclaims and take-overs on it are the `unsafe` calls alone.
// It hands out no other `Memory` over its bytes.
unsafe impl crate::memory::OpenJoin for HeapSegment {}

// SAFETY: forwards to the `RawMemory`, whose bytes `_buf` keeps alive.
unsafe impl Memory for HeapSegment {
    crate::forward_memory_accessors!(|s| &s.raw);
    fn notify(&self, word: &AtomicU32) {
        self.raw.notify(word);
    }
}
