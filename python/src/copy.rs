//! The queue's bulk copies (a `put` into the segment, a copying `get` out of it).
//!
//! A part of at least [`STREAM_AT`] bytes is copied with non-temporal stores on x86_64: the
//! destination lines are written straight to memory instead of being read into the cache first
//! and evicting what is there (the arena's blocks, a spill segment and a receive buffer are each
//! larger than a core's L2 and together larger than the L3, so a plain store finds them cold:
//! measured on this project's 2-vCPU EPYC, 10 MB into rotating `/dev/shm` blocks, 0.66-0.99 ms
//! streamed against 0.87-1.66 ms with `memcpy`, docs/benchmarks.md). Smaller parts, and every
//! part elsewhere, use `copy_nonoverlapping` (a receiver of a small part finds it in the shared
//! cache).

/// Parts at least this long are copied with non-temporal stores (x86_64).
#[cfg(target_arch = "x86_64")]
pub(crate) const STREAM_AT: usize = 4 << 20;

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
///
/// `src..src + len` must be readable and `dst..dst + len` writable for the whole call, the two
/// ranges must not overlap, and nothing else may write either range meanwhile.
pub(crate) unsafe fn bulk(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= STREAM_AT {
        // SAFETY: the caller's contract, passed on.
        unsafe { stream(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len) };
}

/// One copy for [`all`]: `len` bytes from `src` to `dst`. Raw pointers, not addresses, so the
/// copy reads and writes through pointers that keep their provenance; [`Send`] so a batch can be
/// copied with the GIL released.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Job {
    /// The first byte to read.
    pub(crate) src: *const u8,
    /// The first byte to write.
    pub(crate) dst: *mut u8,
    /// How many bytes.
    pub(crate) len: usize,
}

// SAFETY: a `Job` is two pointers and a length, dereferenced only by `all`, whose caller
// promises that both ranges stay valid for the copy on whichever thread runs it. The memory
// behind them (shared-memory slots, arena blocks and spill segments, Python buffers and
// receive buffers the caller keeps alive across the copy) is not tied to a thread.
unsafe impl Send for Job {}

/// Copies every job of `jobs` with [`bulk`].
///
/// # Safety
///
/// Each job must satisfy [`bulk`]'s contract, and no two jobs' destinations may overlap.
pub(crate) unsafe fn all(jobs: impl IntoIterator<Item = Job>) {
    for Job { src, dst, len } in jobs {
        // SAFETY: the caller's contract, per job.
        unsafe { bulk(src, dst, len) };
    }
}

/// [`bulk`] with SSE2 streaming stores (part of the x86_64 baseline): a plain copy up to the
/// destination's first 16-byte boundary, 64-byte blocks streamed, a plain copy of the tail,
/// then a store fence, so the bytes are visible in order with what the caller publishes next
/// (the ring's release store).
#[cfg(target_arch = "x86_64")]
unsafe fn stream(src: *const u8, dst: *mut u8, len: usize) {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = dst.align_offset(16).min(len);
    // SAFETY: `head <= len`: within both ranges (the caller's contract).
    unsafe { core::ptr::copy_nonoverlapping(src, dst, head) };
    let blocks = (len - head) / 64;
    for i in 0..blocks {
        let off = head + i * 64;
        // SAFETY: `off + 64 <= len`, so the four loads read inside `src..src + len` (unaligned
        // loads) and the four stores write inside `dst..dst + len`, at 16-byte aligned
        // addresses (`dst + head` is aligned and `off - head` is a multiple of 64), as
        // `_mm_stream_si128` requires.
        unsafe {
            let s = src.add(off).cast::<__m128i>();
            let d = dst.add(off).cast::<__m128i>();
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
    let done = head + blocks * 64;
    // SAFETY: `done <= len`: the tail lies within both ranges.
    unsafe { core::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) };
    // Non-temporal stores are weakly ordered: the fence orders them before every later store,
    // the release store that publishes the message included.
    // SAFETY: SSE is part of the x86_64 baseline; the fence touches no memory.
    unsafe { _mm_sfence() };
}
