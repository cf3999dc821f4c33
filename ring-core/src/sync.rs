//! The one place that names atomics, fences and spin hints.
//!
//! Everything in this crate imports its synchronisation primitives from here, never from `core`
//! or `portable-atomic` directly (clippy's `disallowed-types` in `clippy.toml` enforces it). Under
//! `--cfg ring_loom` the same names resolve to [loom]'s model types, so one body of code is both
//! the production protocol and the model that loom explores. The cfg is namespaced (`ring_loom`,
//! not `loom`) so that dependencies which also know a `loom` cfg do not switch with us.
//!
//! Outside loom the atomics are `portable-atomic`'s: on targets with native atomics of the width
//! they are the `core` types; on targets without (thumbv6m has no compare-and-swap, 32-bit cores
//! have no 64-bit atomics) they are portable-atomic's fallbacks, which work between threads and
//! interrupt handlers of one address space but not across processes. [`CROSS_PROCESS_SAFE`]
//! says which case a target is in.
//!
//! [loom]: https://docs.rs/loom
//! [`CROSS_PROCESS_SAFE`]: crate::CROSS_PROCESS_SAFE

#[cfg(not(ring_loom))]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "this is the façade")]
mod imp {
    pub(crate) use core::hint::spin_loop;
    pub(crate) use portable_atomic::{fence, AtomicU32, AtomicU64, Ordering};

    /// Builds an atomic in a `const` context (loom's constructors are not `const`).
    pub(crate) const fn new_u64(v: u64) -> AtomicU64 {
        AtomicU64::new(v)
    }

    /// Builds an atomic in a `const` context (loom's constructors are not `const`).
    pub(crate) const fn new_u32(v: u32) -> AtomicU32 {
        AtomicU32::new(v)
    }
}

#[cfg(ring_loom)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "this is the façade")]
mod imp {
    pub(crate) use loom::hint::spin_loop;
    pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

    /// Builds a loom atomic (registers it with the current model execution).
    pub(crate) fn new_u64(v: u64) -> AtomicU64 {
        AtomicU64::new(v)
    }

    /// Builds a loom atomic (registers it with the current model execution).
    pub(crate) fn new_u32(v: u32) -> AtomicU32 {
        AtomicU32::new(v)
    }
}

pub(crate) use imp::*;

/// Gives up the processor for a moment inside a bounded wait: loom's yield under loom (so
/// spin loops terminate in the model), the thread scheduler's with `std`, a spin hint otherwise.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(ring_loom)]
    loom::thread::yield_now();
    #[cfg(all(not(ring_loom), feature = "std"))]
    #[allow(clippy::disallowed_methods, reason = "this is the façade")]
    std::thread::yield_now();
    #[cfg(all(not(ring_loom), not(feature = "std")))]
    spin_loop();
}
