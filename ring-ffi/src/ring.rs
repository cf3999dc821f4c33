//! Rings: create, open or receive a mapping, share it, describe it, free it.

use core::ffi::{c_char, c_int};

use ring_core::Memory as _;
use ring_os::prelude::*;
use ring_os::raw::SegmentName;

use crate::args::{arg, arg_mut, free_handle, millis, non_null, out_handle, put, text};
use crate::fds;
use crate::handles::{new_ring, shmring_ring};
use crate::status::guard;

/// A ring's geometry. For create: a zero field takes the default (8 slots of 65536 bytes, 8
/// subscribers). For open: a zero field is not checked; a non-zero one must match the ring
/// (else `SHMRING_E_MISMATCH`), and `pin_only` is not checked (read it with
/// `shmring_ring_get_info`). Fields are only ever added at the end: zero-initialise the whole
/// struct (`memset`, `= {0}`) so that fields a newer header adds read as "not set".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct shmring_config {
    /// Number of slots (messages in flight).
    pub slots: u32,
    /// Payload bytes per slot (rounded up to a multiple of 8).
    pub slot_size: u32,
    /// Subscriber-table entries (1..=32).
    pub consumers: u32,
    /// Non-zero: subscribers only read what they pin, so the publisher may write in place
    /// (`shmring_loan_data`).
    pub pin_only: u32,
    /// How long an open waits for the ring to appear and its creator to finish formatting,
    /// in milliseconds (0: 5000).
    pub open_timeout_ms: u32,
    /// History for late joiners (0..=slots; 0: none): a gating or skip-on-lag subscriber that
    /// joins starts up to this many messages back, as far as the ring still holds them.
    pub history: u32,
    /// Never-stall (0: an ordinary ring): the publisher writes each message into a slot no
    /// subscriber pins, so the pins of latest-only and skip-on-lag subscribers never make it
    /// wait; gating subscribers and groups still hold it back. The value is the most messages
    /// those subscribers pin at once, all together, and the ring needs `slots >= never_stall +
    /// 2` (else `SHMRING_E_INVALID_ARGUMENT`). For open: a non-zero value requires a
    /// never-stall ring (else `SHMRING_E_MISMATCH`) with that many slots.
    pub never_stall: u32,
}

/// What `shmring_ring_get_info` reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct shmring_ring_info {
    /// Number of slots.
    pub slots: u32,
    /// Payload bytes per slot.
    pub slot_size: u32,
    /// Subscriber-table entries.
    pub consumers: u32,
    /// 1 for a pin-only ring.
    pub pin_only: u32,
    /// 1 for a never-stall ring (`shmring_config.never_stall`).
    pub never_stall: u32,
}

fn builder(b: RingBuilder, cfg: Option<&shmring_config>) -> RingBuilder {
    let Some(cfg) = cfg else { return b };
    let mut b = b;
    if cfg.slots != 0 {
        b = b.slots(cfg.slots);
    }
    if cfg.slot_size != 0 {
        b = b.slot_size(cfg.slot_size);
    }
    if cfg.consumers != 0 {
        b = b.consumers(cfg.consumers);
    }
    if cfg.open_timeout_ms != 0 {
        b = b.open_timeout(millis(cfg.open_timeout_ms.into()));
    }
    if cfg.history != 0 {
        b = b.history(cfg.history);
    }
    if cfg.never_stall != 0 {
        b = b.never_stall(cfg.never_stall);
    }
    b
}

/// The calls on a named ring (`shmring_ring_create`, `shmring_ring_open`,
/// `shmring_ring_open_or_create`): `make` makes the ring from a builder with `config`'s geometry,
/// told whether `config` asks for a pin-only ring; its handle goes to `*out`.
///
/// # Safety
///
/// `name` is null or NUL-terminated, `config` null or a config, `out` null or writable (the
/// header contract of those calls).
unsafe fn named(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
    make: impl FnOnce(RingBuilder, bool) -> Result<Ring, Error>,
) -> c_int {
    guard(|| {
        // SAFETY: `out` is null or writable (header contract); checked inside.
        unsafe { out_handle(out) }?;
        // SAFETY: `name` is null or NUL-terminated (header contract).
        let name = unsafe { text(name, "name") }?;
        // SAFETY: `config` is null or points to a config (header contract).
        let cfg = unsafe { config.as_ref() };
        let pin_only = cfg.is_some_and(|c| c.pin_only != 0);
        new_ring(make(builder(Ring::builder(name), cfg), pin_only)?, out);
        Ok(())
    })
}

/// Creates the named ring `name` (`/dev/shm/shmring.<name>`) with geometry `config` (NULL:
/// defaults) and stores a new handle in `*out`. The creating handle removes the name when freed
/// unless `shmring_ring_keep_name` is called.
///
/// Errors: `SHMRING_E_EXISTS`, `SHMRING_E_INVALID_ARGUMENT` (name, geometry, NULL `name` or
/// `out`), `SHMRING_E_PERMISSION`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_create(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    // SAFETY: `out` is null or writable, `name` null or NUL-terminated, `config` null or a
    // config (header contract): `named`'s contract.
    unsafe {
        named(name, config, out, |b, pin_only| {
            b.pin_only(pin_only).create()
        })
    }
}

/// Opens the existing named ring `name`, waiting up to `config->open_timeout_ms` for it to
/// appear; non-zero geometry fields of `config` (NULL: none) must match. The handle does not
/// remove the name when freed.
///
/// Errors: `SHMRING_E_NOT_FOUND`, `SHMRING_E_MISMATCH`, `SHMRING_E_CORRUPT` (the file is not a
/// ring), `SHMRING_E_PERMISSION`, `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_open(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    // SAFETY: as in `shmring_ring_create`.
    unsafe { named(name, config, out, |b, _| b.open()) }
}

/// Creates the named ring, or opens it if it exists (then its geometry must match `config`'s
/// non-zero fields). Only a handle that created the ring removes the name when freed.
///
/// Errors: as `shmring_ring_create` and `shmring_ring_open`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_open_or_create(
    name: *const c_char,
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    // SAFETY: as in `shmring_ring_create`.
    unsafe {
        named(name, config, out, |b, pin_only| {
            b.pin_only(pin_only).open_or_create()
        })
    }
}

/// Creates a ring in a new sealed memfd (no name; share it with `shmring_ring_serve` or pass
/// `shmring_ring_fd` over a Unix socket yourself).
///
/// On Windows: an unnamed section, for a ring within this process only (nothing can share it).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_create_memfd(
    config: *const shmring_config,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_create`.
        let cfg = unsafe { config.as_ref() };
        let pin_only = cfg.is_some_and(|c| c.pin_only != 0);
        let ring = builder(Ring::memfd(), cfg).pin_only(pin_only).create()?;
        new_ring(ring, out);
        Ok(())
    })
}

/// Opens a memfd ring from descriptor `fd` (received from a peer). The library duplicates
/// `fd`: the caller still owns `fd` and closes it when it likes.
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (no descriptor passing there).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT` (negative `fd`), `SHMRING_E_CORRUPT` (missing seals,
/// wrong size, not a ring), `SHMRING_E_OS`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_from_fd(fd: c_int, out: *mut *mut shmring_ring) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: `out` was checked; `fd` is the caller's (header contract).
        unsafe { fds::from_fd(fd, out) }
    })
}

/// Stores the ring's descriptor (the memfd, or the `/dev/shm` file) in `*fd`. The descriptor
/// belongs to the ring handle: do not close it; duplicate it to keep it past the handle.
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (`*fd` is not written).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_fd(ring: *const shmring_ring, fd: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: `ring` is null or a live handle (header contract).
        let ring = unsafe { arg(ring, "ring") }?;
        let fd = non_null(fd, "fd")?;
        // SAFETY: non-null and writable (header contract).
        unsafe { fds::fd(ring, fd) }
    })
}

/// Serves this memfd ring's descriptor to subscribers that call `shmring_ring_connect` with
/// the same `name` and `dir`: `dir` NULL for the abstract socket `@shmring.<name>` (gone with
/// the process), or a directory for a socket file `<dir>/shmring.<name>.sock`. The server runs
/// on a background thread until the ring handle is freed. One server per handle.
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (share a named ring there instead).
///
/// Errors: `SHMRING_E_EXISTS` (someone serves the name, or this handle serves already),
/// `SHMRING_E_CORRUPT` (not a memfd ring: only a sealed memfd can be served),
/// `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_serve(
    ring: *const shmring_ring,
    name: *const c_char,
    dir: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        // SAFETY: as in `shmring_ring_create`.
        let name = SegmentName::new(unsafe { text(name, "name") }?)?;
        // SAFETY: `dir` is null or NUL-terminated (header contract).
        unsafe { fds::serve(ring, &name, dir) }
    })
}

/// Connects to the rendezvous server of ring `name` (`dir` as in `shmring_ring_serve`),
/// retrying for at most `timeout_ms` while nobody serves it yet, and maps the ring it hands
/// over (its seals and header checked).
///
/// Unix-only: `SHMRING_E_UNSUPPORTED` on Windows (open a named ring there instead).
///
/// Errors: `SHMRING_E_NOT_FOUND` (nobody served it in time), `SHMRING_E_PERMISSION` (the server
/// runs as another user), `SHMRING_E_CORRUPT`, `SHMRING_E_DISCONNECTED`, `SHMRING_E_TIMEOUT`,
/// `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`, `SHMRING_E_UNSUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_connect(
    name: *const c_char,
    dir: *const c_char,
    timeout_ms: u64,
    out: *mut *mut shmring_ring,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_create`.
        let name = SegmentName::new(unsafe { text(name, "name") }?)?;
        // SAFETY: `dir` is null or NUL-terminated, `out` was checked (header contract).
        unsafe { fds::connect(&name, dir, timeout_ms, out) }
    })
}

/// Reports the ring's geometry in `*info`.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_get_info(
    ring: *const shmring_ring,
    info: *mut shmring_ring_info,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        let info = non_null(info, "info")?;
        let geometry = ring.ring.mapping().geometry();
        let cfg = geometry.config();
        let value = shmring_ring_info {
            slots: cfg.slots,
            slot_size: u32::try_from(geometry.slot_capacity()).unwrap_or(u32::MAX),
            consumers: cfg.consumers,
            pin_only: u32::from(cfg.pin_only),
            never_stall: u32::from(cfg.never_stall),
        };
        // SAFETY: non-null and writable (header contract).
        unsafe { put(info, value) };
        Ok(())
    })
}

/// Keeps the name when this (creating) handle is freed, for rings meant to outlive their
/// creator.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_keep_name(ring: *mut shmring_ring) -> c_int {
    guard(|| {
        // SAFETY: `ring` is null or a live handle nobody else uses now (header contract).
        let ring = unsafe { arg_mut(ring, "ring") }?;
        ring.ring.keep_name();
        Ok(())
    })
}

/// Frees the ring handle: stops its rendezvous server, removes the name if this handle created
/// it (see `shmring_ring_keep_name`) and unmaps the ring once no publisher or subscriber made
/// from it is left. NULL is allowed (nothing happens). `ring` is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_free(ring: *mut shmring_ring) -> c_int {
    // SAFETY: null or a handle made by `Box::into_raw` in `new_ring`, freed once (header
    // contract: invalid afterwards).
    guard(|| unsafe { free_handle(ring) })
}
