//! The one place that names atomics, fences and spin hints (the loom façade).
//!
//! Everything in this crate imports its synchronisation primitives from here, never from `core`
//! or `portable-atomic` directly (clippy's `disallowed-types` in `clippy.toml` enforces it). Under
//! `--cfg ring_loom` the same names resolve to [loom]'s model types, so one body of code is both
//! the production protocol and the model that loom explores. The cfg is namespaced (`ring_loom`,
//! not `loom`) so that dependencies which also know a `loom` cfg do not switch with us.
//! Under `--cfg ring_shuttle` they resolve to [shuttle]'s instead (whole-ring randomised schedules
//! in the verification crate). The two cfgs are exclusive.
//!
//! Outside loom the atomics are `portable-atomic`'s: on targets with native atomics of the width
//! they are the `core` types; on targets without (thumbv6m has no compare-and-swap, 32-bit cores
//! have no 64-bit atomics) they are portable-atomic's fallbacks, which work between threads and
//! interrupt handlers of one address space but not across processes. [`CROSS_PROCESS_SAFE`]
//! says which case a target is in.
//!
//! [loom]: https://docs.rs/loom
//! [shuttle]: https://docs.rs/shuttle
//! [`CROSS_PROCESS_SAFE`]: crate::CROSS_PROCESS_SAFE

#![allow(
    clippy::disallowed_types,
    clippy::disallowed_methods,
    reason = "this is the façade: the one module allowed to name the primitives"
)]

#[cfg(all(ring_loom, ring_shuttle))]
compile_error!("`--cfg ring_loom` and `--cfg ring_shuttle` are exclusive: pick one model checker");

#[cfg(not(any(ring_loom, ring_shuttle)))]
mod imp {
    pub(crate) use core::hint::spin_loop as inner_spin;
    pub(crate) use portable_atomic::fence as inner_fence;
    pub(crate) use portable_atomic::{AtomicU32 as InnerU32, AtomicU64 as InnerU64};
}

#[cfg(ring_loom)]
mod imp {
    pub(crate) use loom::hint::spin_loop as inner_spin;
    pub(crate) use loom::sync::atomic::fence as inner_fence;
    pub(crate) use loom::sync::atomic::{AtomicU32 as InnerU32, AtomicU64 as InnerU64};
}

// Under `--cfg ring_shuttle` the primitives are shuttle's, whose every access is a scheduling
// point (shuttle treats every ordering as SeqCst: it finds logic bugs, loom finds ordering bugs).
#[cfg(ring_shuttle)]
mod imp {
    pub(crate) use shuttle::sync::atomic::fence as inner_fence;
    pub(crate) use shuttle::sync::atomic::{AtomicU32 as InnerU32, AtomicU64 as InnerU64};
    pub(crate) use shuttle::thread::yield_now as inner_spin;
}

pub use core::sync::atomic::Ordering;

/// An atomic fence (loom's under `--cfg ring_loom`).
#[inline(always)]
pub fn fence(order: Ordering) {
    imp::inner_fence(order);
}

/// A hint to bring the cache line holding `r` into this core's cache for reading. It changes
/// no value and orders nothing: the loads that follow still make every check they make. It
/// compiles to nothing under the model checkers and Miri, and on targets other than x86_64 and
/// aarch64.
///
/// A consumer that polls a slot's stamp issues it for the rest of the slot's message line, so
/// that the line's two halves (64-byte cache lines on x86_64) cross to it together instead of
/// one after the other (see "Empty polls" in docs/PROTOCOL.md).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    let p = core::ptr::from_ref(r).cast::<u8>();
    #[cfg(all(target_arch = "x86_64", not(any(ring_loom, ring_shuttle, miri))))]
    // SAFETY: a prefetch is a hint: it never faults (not even on an unmapped address, and `p`
    // comes from a live reference anyway), loads nothing into the program and stores nothing.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(all(target_arch = "aarch64", not(any(ring_loom, ring_shuttle, miri))))]
    // SAFETY: `prfm` is a hint that never faults and changes no register or memory the program
    // sees; the asm uses no stack and leaves the flags alone.
    unsafe {
        core::arch::asm!(
            "prfm pldl1keep, [{0}]",
            in(reg) p,
            options(nostack, readonly, preserves_flags)
        );
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        not(any(ring_loom, ring_shuttle, miri))
    )))]
    let _ = p;
}

/// A spin-loop hint (loom's yield under `--cfg ring_loom`).
#[inline(always)]
pub fn spin_loop() {
    imp::inner_spin();
}

macro_rules! atomic_newtype {
    ($(#[$m:meta])* $name:ident, $inner:ident, $int:ty) => {
        $(#[$m])*
        #[repr(transparent)]
        pub struct $name(imp::$inner);

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                // Relaxed: a debugging snapshot.
                core::fmt::Debug::fmt(&self.load(Ordering::Relaxed), f)
            }
        }

        #[allow(missing_docs, reason = "each method is the inner atomic's method of that name")]
        impl $name {
            #[cfg(not(any(ring_loom, ring_shuttle)))]
            #[inline(always)]
            pub const fn new(v: $int) -> Self {
                Self(imp::$inner::new(v))
            }
            #[cfg(any(ring_loom, ring_shuttle))]
            pub fn new(v: $int) -> Self {
                Self(imp::$inner::new(v))
            }
            #[inline(always)]
            pub fn load(&self, order: Ordering) -> $int {
                self.0.load(order)
            }
            #[inline(always)]
            pub fn store(&self, v: $int, order: Ordering) {
                self.0.store(v, order)
            }
            #[inline(always)]
            pub fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                self.0.compare_exchange(current, new, success, failure)
            }
            #[inline(always)]
            pub fn swap(&self, v: $int, order: Ordering) -> $int {
                self.0.swap(v, order)
            }
            #[inline(always)]
            pub fn fetch_add(&self, v: $int, order: Ordering) -> $int {
                self.0.fetch_add(v, order)
            }
            #[inline(always)]
            pub fn fetch_sub(&self, v: $int, order: Ordering) -> $int {
                self.0.fetch_sub(v, order)
            }
            #[inline(always)]
            pub fn fetch_and(&self, v: $int, order: Ordering) -> $int {
                self.0.fetch_and(v, order)
            }
            #[inline(always)]
            pub fn fetch_or(&self, v: $int, order: Ordering) -> $int {
                self.0.fetch_or(v, order)
            }
            /// A raw pointer to the value (for a futex on it). Not under loom.
            #[cfg(not(any(ring_loom, ring_shuttle)))]
            #[inline(always)]
            pub const fn as_ptr(&self) -> *mut $int {
                self.0.as_ptr()
            }
            /// Whether this type is lock-free on this target.
            #[cfg(not(any(ring_loom, ring_shuttle)))]
            pub const fn is_always_lock_free() -> bool {
                imp::$inner::is_always_lock_free()
            }
        }
    };
}

atomic_newtype!(
    /// A 64-bit atomic laid out exactly as `u64`: `portable-atomic`'s, or loom's under
    /// `--cfg ring_loom`. The only 64-bit atomic this crate uses.
    AtomicU64, InnerU64, u64
);
atomic_newtype!(
    /// A 32-bit atomic laid out exactly as `u32`: `portable-atomic`'s, or loom's under
    /// `--cfg ring_loom`. The only 32-bit atomic this crate uses.
    AtomicU32, InnerU32, u32
);

/// Builds an atomic (a `const fn` outside loom).
#[cfg(not(any(ring_loom, ring_shuttle)))]
#[cfg_attr(
    not(feature = "alloc"),
    allow(dead_code, reason = "used by the alloc-only OwnedSegment")
)]
pub(crate) const fn new_u64(v: u64) -> AtomicU64 {
    AtomicU64::new(v)
}
/// Builds an atomic (a `const fn` outside loom).
#[cfg(not(any(ring_loom, ring_shuttle)))]
#[cfg_attr(
    not(feature = "alloc"),
    allow(dead_code, reason = "used by the alloc-only OwnedSegment")
)]
pub(crate) const fn new_u32(v: u32) -> AtomicU32 {
    AtomicU32::new(v)
}
/// Builds a model (loom or shuttle) atomic.
#[cfg(any(ring_loom, ring_shuttle))]
pub(crate) fn new_u64(v: u64) -> AtomicU64 {
    AtomicU64::new(v)
}
/// Builds a model (loom or shuttle) atomic.
#[cfg(any(ring_loom, ring_shuttle))]
pub(crate) fn new_u32(v: u32) -> AtomicU32 {
    AtomicU32::new(v)
}

/// Gives up the processor for a moment inside a bounded wait: loom's yield under loom (so
/// spin loops terminate in the model), the thread scheduler's with `std`, a spin hint otherwise.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(ring_loom)]
    loom::thread::yield_now();
    #[cfg(ring_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(all(not(any(ring_loom, ring_shuttle)), feature = "std"))]
    std::thread::yield_now();
    #[cfg(all(not(any(ring_loom, ring_shuttle)), not(feature = "std")))]
    imp::inner_spin();
}
