//! [`RawMemory`]: a segment laid over a caller-provided byte range (a heap buffer, an OS
//! mapping), at offsets validated from an untrusted header: formatting a new one
//! ([`RawMemory::initialize`], through `init.rs`) and opening an existing one
//! ([`RawMemory::attach`], through [`validate_header`]).

use crate::error::{AttachError, LayoutError};
use crate::geometry::{Config, Geometry};
use crate::layout::{
    ConsumerEntry, ProducerLine, SegmentHeader, SlotHeader, ABI_VERSION, CACHE_LINE, INIT_READY,
    LAYOUT_FINGERPRINT, MAGIC,
};
use crate::memory::Memory;
use crate::owner::OwnerId;
use crate::sync::{AtomicU64, Ordering};
use core::ptr::NonNull;

/// A segment laid over a caller-provided byte range, at validated offsets.
///
/// `RawMemory` does not own the bytes: the caller (a heap buffer, an OS mapping) keeps them
/// alive and mapped for as long as the `RawMemory` exists, which is why its constructors are
/// `unsafe`.
#[derive(Debug)]
pub struct RawMemory {
    base: NonNull<u8>,
    geometry: Geometry,
}

// SAFETY: all access through `RawMemory` is through atomics (or, for a pinned slot, reads that
// the pin protocol keeps race-free), so sharing it between threads is as safe as sharing the
// atomics themselves.
unsafe impl Send for RawMemory {}
// SAFETY: as for `Send`.
unsafe impl Sync for RawMemory {}

impl RawMemory {
    /// Formats a new segment in `len` bytes at `base`, then opens the init barrier.
    ///
    /// Every shared word is written (the bytes need not be zeroed); the header's `init_state`
    /// goes `INIT_BUSY` first and `INIT_READY` last (Release), so attachers never see a
    /// half-written segment.
    ///
    /// # Safety
    /// - `base..base + len` is valid for reads and writes and stays so for the returned value's
    ///   whole life;
    /// - no one else accesses those bytes while this call runs, and afterwards everyone accesses
    ///   them only through this crate's types (atomics).
    ///
    /// # Errors
    /// [`LayoutError`] when the config is invalid, `len` is too short or `base` misaligned.
    pub unsafe fn initialize(
        base: NonNull<u8>,
        len: usize,
        config: &Config,
        creator: OwnerId,
    ) -> Result<Self, LayoutError> {
        let geometry = Geometry::new(config)?;
        if (base.as_ptr() as usize) % CACHE_LINE != 0 {
            return Err(LayoutError::Misaligned);
        }
        if len < geometry.total_len() {
            return Err(LayoutError::TooShort {
                needed: geometry.total_len(),
                len,
            });
        }
        let this = Self { base, geometry };
        // Formats, then opens the init barrier (the Release store `attach` pairs with).
        crate::init::format(&this, creator);
        Ok(this)
    }

    /// Opens an existing segment of `len` bytes at `base`, treating every byte as untrusted.
    ///
    /// Reads the header once, validates it (magic, ABI, fingerprint, init barrier, geometry,
    /// every offset, the length) and from then on uses only the local, validated geometry.
    ///
    /// # Safety
    /// `base..base + len` is valid for reads and writes (other processes may write it
    /// concurrently, through atomics) and stays mapped for the returned value's whole life.
    ///
    /// # Errors
    /// [`AttachError`] names the first thing found wrong.
    pub unsafe fn attach(base: NonNull<u8>, len: usize) -> Result<Self, AttachError> {
        if (base.as_ptr() as usize) % CACHE_LINE != 0 {
            return Err(AttachError::Misaligned);
        }
        if len < core::mem::size_of::<SegmentHeader>() {
            return Err(AttachError::Truncated {
                needed: core::mem::size_of::<SegmentHeader>() as u64,
                len: len as u64,
            });
        }
        // SAFETY: `base` is aligned and at least a header long (checked above) and valid for
        // reads (the caller's promise); every header field is an atomic.
        let header = unsafe { base.cast::<SegmentHeader>().as_ref() };
        let geometry = validate_header(header, len)?;
        Ok(Self { base, geometry })
    }

    /// The first byte of the segment.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// # Safety
    /// `offset + size_of::<T>() <= geometry.total_len`, `offset` is aligned for `T`.
    unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + core::mem::size_of::<T>() <= self.geometry.total_len);
        // SAFETY: the caller keeps `offset` inside the validated segment, aligned for `T`; the
        // bytes stay mapped for `&self` (constructor contract); `T` is made only of atomics.
        unsafe {
            self.base
                .as_ptr()
                .add(offset)
                .cast::<T>()
                .as_ref()
                .unwrap_unchecked()
        }
    }

    /// # Safety
    /// `offset + words * 8 <= geometry.total_len`, `offset` is 8-aligned.
    unsafe fn words(&self, offset: usize, words: usize) -> &[AtomicU64] {
        // SAFETY: as `at`: the range lies in the validated segment and is 8-aligned, and
        // `AtomicU64` has the size and alignment of `u64`.
        unsafe { core::slice::from_raw_parts(self.base.as_ptr().add(offset).cast(), words) }
    }
}

// SAFETY: every accessor indexes with the validated geometry (indices are checked against it
// with a real `assert!`, since an out-of-range index here would be out-of-bounds memory), and the
// constructors' contracts keep the bytes valid for `&self`.
unsafe impl Memory for RawMemory {
    #[inline]
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    #[inline]
    fn header(&self) -> &SegmentHeader {
        // SAFETY: offset 0 holds the header (total_len ≥ header size by construction).
        unsafe { self.at(0) }
    }
    #[inline]
    fn producer_line(&self) -> &ProducerLine {
        // SAFETY: `producer_off` is inside the segment and cache-line aligned (Geometry::new).
        unsafe { self.at(self.geometry.producer_off) }
    }
    #[inline]
    fn consumer_entry(&self, index: usize) -> &ConsumerEntry {
        assert!(
            index < self.geometry.consumers(),
            "consumer index out of range"
        );
        let off = self.geometry.consumers_off + index * core::mem::size_of::<ConsumerEntry>();
        // SAFETY: `index` is in range (asserted), so the entry lies in the consumer table.
        unsafe { self.at(off) }
    }
    #[inline]
    fn slot_header(&self, index: usize) -> &SlotHeader {
        assert!(index < self.geometry.slots(), "slot index out of range");
        let off = self.geometry.slots_off + index * core::mem::size_of::<SlotHeader>();
        // SAFETY: `index` is in range (asserted), so the header lies in the slot-header table.
        unsafe { self.at(off) }
    }
    #[inline]
    fn payload(&self, index: usize) -> &[AtomicU64] {
        assert!(index < self.geometry.slots(), "slot index out of range");
        let off = self.geometry.payloads_off + index * self.geometry.payload_stride;
        // SAFETY: `index` is in range (asserted); the payload area of a slot is `payload_stride`
        // ≥ `slot_capacity` bytes, cache-line aligned, inside the segment.
        unsafe { self.words(off, self.geometry.payload_words()) }
    }
    fn alloc_words(&self) -> &[AtomicU64] {
        let (off, len) = self.geometry.alloc_region();
        // SAFETY: the allocator region lies inside the segment, cache-line aligned.
        unsafe { self.words(off, len / 8) }
    }
}

/// Validates untrusted header fields against `len` available bytes and returns the geometry.
pub(crate) fn validate_header(h: &SegmentHeader, len: usize) -> Result<Geometry, AttachError> {
    // Acquire: the init barrier; synchronises with the creator's Release store at the end of
    // `init::format`, so every field read below is the creator's. Loaded before every other
    // field (though checked after the magic): a field loaded first could be a half-formatted
    // segment's, e.g. ABI version 0 while the creator is still writing the header, a hard
    // error where "not initialised yet" (retry) is the truth.
    let state = h.init_state.load(Ordering::Acquire);
    // Relaxed: ordered by the barrier load above when it read READY; otherwise only compared.
    let magic = h.magic.load(Ordering::Relaxed);
    if magic != MAGIC {
        return Err(AttachError::BadMagic { found: magic });
    }
    if state != INIT_READY {
        return Err(AttachError::NotInitialized { state });
    }
    // Relaxed (this and every load below): ordered by the init barrier above.
    let abi = h.abi_version.load(Ordering::Relaxed);
    if abi != ABI_VERSION {
        return Err(AttachError::AbiMismatch {
            found: abi,
            expected: ABI_VERSION,
        });
    }
    let fingerprint = h.fingerprint.load(Ordering::Relaxed);
    if fingerprint != LAYOUT_FINGERPRINT {
        return Err(AttachError::LayoutMismatch {
            found: fingerprint,
            expected: LAYOUT_FINGERPRINT,
        });
    }
    // Relaxed: ordered by the init barrier above; the values are validated, not trusted.
    let config = Config {
        slots: h.slots.load(Ordering::Relaxed),
        slot_capacity: h.slot_capacity.load(Ordering::Relaxed),
        consumers: h.consumers.load(Ordering::Relaxed),
        alloc_arena: h.alloc_arena.load(Ordering::Relaxed),
        alloc_max_live: h.alloc_max_live.load(Ordering::Relaxed),
        pin_only: false,
        history: h.history.load(Ordering::Relaxed),
        never_stall: false,
        asymmetric_fences: false,
    };
    let ring_flags = h.ring_flags.load(Ordering::Relaxed);
    if ring_flags & !crate::layout::RING_KNOWN_FLAGS != 0 {
        return Err(AttachError::FieldMismatch {
            field: "ring_flags",
            found: ring_flags,
            expected: ring_flags & crate::layout::RING_KNOWN_FLAGS,
        });
    }
    let config = Config {
        pin_only: ring_flags & crate::layout::RING_PIN_ONLY != 0,
        never_stall: ring_flags & crate::layout::RING_NEVER_STALL != 0,
        asymmetric_fences: ring_flags & crate::layout::RING_ASYMMETRIC_FENCES != 0,
        ..config
    };
    let geometry = Geometry::new(&config).map_err(AttachError::BadGeometry)?;
    if geometry.config.slot_capacity != config.slot_capacity {
        return Err(AttachError::FieldMismatch {
            field: "slot_capacity",
            found: config.slot_capacity.into(),
            expected: geometry.config.slot_capacity.into(),
        });
    }
    let fields: [(&'static str, &AtomicU64, usize); 7] = [
        ("producer_off", &h.producer_off, geometry.producer_off),
        ("consumers_off", &h.consumers_off, geometry.consumers_off),
        ("slots_off", &h.slots_off, geometry.slots_off),
        ("payloads_off", &h.payloads_off, geometry.payloads_off),
        ("alloc_off", &h.alloc_off, geometry.alloc_off),
        ("alloc_len", &h.alloc_len, geometry.alloc_len),
        ("total_len", &h.total_len, geometry.total_len),
    ];
    for (field, word, expected) in fields {
        let found = word.load(Ordering::Relaxed);
        if found != expected as u64 {
            return Err(AttachError::FieldMismatch {
                field,
                found,
                expected: expected as u64,
            });
        }
    }
    if geometry.total_len > len {
        return Err(AttachError::Truncated {
            needed: geometry.total_len as u64,
            len: len as u64,
        });
    }
    Ok(geometry)
}
