//! Subscribers: register or join a group, read by copy, pin or hold, and the pins they lend.

use core::ffi::{c_char, c_int};
use core::time::Duration;
use std::sync::Arc;

use ring_core::{Copied, DeliveryClass, Pinned};
use ring_os::prelude::*;
use ring_os::raw::Mapping;

use crate::args::{arg, arg_mut, free_handle, millis, non_null, out_handle, put, text};
use crate::handles::{shmring_pinned, shmring_ring, shmring_subscriber, Lender};
use crate::status::{fail, guard, null, read_code, read_fail, Res};
use crate::{
    SHMRING_E_BUSY, SHMRING_E_EMPTY, SHMRING_E_INVALID_ARGUMENT, SHMRING_FOREVER, SHMRING_GATING,
    SHMRING_LATEST_ONLY, SHMRING_SKIP_ON_LAG,
};

/// One message, as a pin or a copy-out read reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct shmring_message {
    /// The bytes: inside the ring for a pin (valid until the pin is released), the caller's
    /// buffer for a copy-out read.
    pub data: *const u8,
    /// The message length in bytes.
    pub len: usize,
    /// Its sequence number.
    pub seq: u64,
    /// Messages skipped just before it (latest-only and skip-on-lag subscribers).
    pub missed: u64,
    /// Its two metadata words.
    pub meta: [u64; 2],
    /// 1 for a group member's message that was handed out before (to a member that died):
    /// delivery in a group is at-least-once, and a repeat says so; 0 otherwise.
    pub redelivered: u32,
}

fn class(class: u32) -> Res<DeliveryClass> {
    match class {
        SHMRING_GATING => Ok(DeliveryClass::Gating),
        SHMRING_LATEST_ONLY => Ok(DeliveryClass::LatestOnly),
        SHMRING_SKIP_ON_LAG => Ok(DeliveryClass::SkipOnLag),
        other => Err(fail(
            SHMRING_E_INVALID_ARGUMENT,
            format!(
                "unknown subscriber class {other}: use SHMRING_GATING (1), SHMRING_LATEST_ONLY \
                 (2) or SHMRING_SKIP_ON_LAG (3)"
            ),
        )),
    }
}

/// Makes the handle of `subscriber` and stores it in the out-handle `out`.
///
/// # Safety
///
/// `out` is valid for a write (checked by `out_handle`).
unsafe fn new_subscriber(subscriber: Subscriber, out: *mut *mut shmring_subscriber) {
    let handle = Box::into_raw(Box::new(shmring_subscriber {
        lender: Lender::new(
            subscriber,
            "the subscriber holds a pin: release it first (shmring_pinned_release)",
        ),
        abort_code: None,
        holds: Vec::new(),
    }));
    // SAFETY: the caller's contract.
    unsafe { out.write(handle) };
}

/// Registers a subscriber of `class` (`SHMRING_GATING`, `SHMRING_LATEST_ONLY`,
/// `SHMRING_SKIP_ON_LAG`) and stores it in `*out`. It receives what is published from now on.
///
/// Errors: `SHMRING_E_FULL` (the subscriber table is full), `SHMRING_E_INVALID_ARGUMENT`
/// (unknown class), `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_subscriber(
    ring: *const shmring_ring,
    class: u32,
    out: *mut *mut shmring_subscriber,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        let subscriber = ring.ring.subscriber(self::class(class)?)?;
        // SAFETY: checked by `out_handle`.
        unsafe { new_subscriber(subscriber, out) };
        Ok(())
    })
}

/// Joins group `name` (created by the publisher with `shmring_publisher_create_group`) as a new
/// member and stores the subscriber in `*out`: members share one cursor, so each message goes
/// to exactly one of them; a member that dies holding messages gives them to another, with
/// `redelivered` set in their `shmring_message`. Read with the subscriber functions as usual.
///
/// Errors: `SHMRING_E_NOT_FOUND` (no such group yet), `SHMRING_E_FULL` (the subscriber table is
/// full), `SHMRING_E_INVALID_ARGUMENT` (NULL or non-UTF-8 name), `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_join_group(
    ring: *const shmring_ring,
    name: *const c_char,
    out: *mut *mut shmring_subscriber,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        // SAFETY: null or NUL-terminated (header contract).
        let name = unsafe { text(name, "name") }?;
        let subscriber = ring.ring.join_group(name)?;
        // SAFETY: checked by `out_handle`.
        unsafe { new_subscriber(subscriber, out) };
        Ok(())
    })
}

/// The subscriber behind `s`, unless a pin is out.
///
/// # Safety
///
/// `s` is null or a live subscriber handle used by nobody else now.
unsafe fn subscriber<'a>(s: *mut shmring_subscriber) -> Res<&'a mut Subscriber> {
    // SAFETY: the caller's contract.
    unsafe { arg_mut(s, "subscriber") }?.lender.get()
}

fn message(data: *const u8, c: Copied) -> shmring_message {
    shmring_message {
        data,
        len: c.len,
        seq: c.seq,
        missed: c.missed,
        meta: c.meta,
        redelivered: u32::from(c.redelivered),
    }
}

/// Copies the next message into the caller's `buf` (`cap` bytes), waiting at most
/// `timeout_ms` (0: do not wait; `SHMRING_FOREVER`), and describes it in `*msg` (`data` is
/// `buf`; NULL `msg`: not wanted). Works in every ring but pin-only ones (use
/// `shmring_subscriber_pin` there).
///
/// Errors: `SHMRING_E_EMPTY` (timeout 0), `SHMRING_E_TIMEOUT`, `SHMRING_E_DISCONNECTED`,
/// `SHMRING_E_ABORTED`, `SHMRING_E_BUFFER_TOO_SMALL` (nothing consumed), `SHMRING_E_EVICTED`,
/// `SHMRING_E_CORRUPT`, `SHMRING_E_TRUNCATED`, `SHMRING_E_BUSY` (a pin is out),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_recv(
    subscriber: *mut shmring_subscriber,
    buf: *mut u8,
    cap: usize,
    timeout_ms: u64,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        // SAFETY: `subscriber` is null or live and used only by this thread (header contract).
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let buf: &mut [u8] = if cap == 0 {
            &mut []
        } else if buf.is_null() {
            return Err(null("buf"));
        } else if cap > isize::MAX as usize {
            return Err(fail(SHMRING_E_INVALID_ARGUMENT, "cap is impossible"));
        } else {
            // SAFETY: non-null and writable for `cap` bytes (header contract).
            unsafe { core::slice::from_raw_parts_mut(buf, cap) }
        };
        let data = buf.as_ptr();
        let aborted = &mut handle.abort_code;
        let got = match timeout_ms {
            0 => s.try_recv(buf).map_err(|e| read_fail(aborted, e))?,
            SHMRING_FOREVER => s.recv(buf).map_err(|e| read_fail(aborted, e))?,
            t => s
                .recv_timeout(buf, millis(t))
                .map_err(|e| read_fail(aborted, e))?,
        };
        // SAFETY: null or writable (header contract).
        unsafe { put(msg, message(data, got)) };
        Ok(())
    })
}

/// Pins the next message, waiting at most `timeout_ms` (0: do not wait; `SHMRING_FOREVER`):
/// a zero-copy view the publisher cannot overwrite until `shmring_pinned_release`. Stores the
/// pin in `*out` and describes the message in `*msg` (NULL: not wanted; `data` points into
/// the ring, valid until the release). Until then the subscriber accepts no other call.
///
/// Errors: as `shmring_subscriber_recv` (no `BUFFER_TOO_SMALL`), and `SHMRING_E_LAGGING`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_pin(
    subscriber: *mut shmring_subscriber,
    timeout_ms: u64,
    out: *mut *mut shmring_pinned,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let aborted = &mut handle.abort_code;
        let pin = match timeout_ms {
            0 => s.try_recv_pinned().map_err(|e| read_fail(aborted, e))?,
            SHMRING_FOREVER => s.recv_pinned().map_err(|e| read_fail(aborted, e))?,
            t => s
                .recv_pinned_timeout(millis(t))
                .map_err(|e| read_fail(aborted, e))?,
        };
        // SAFETY: the pin borrows the `Subscriber` in `handle.lender`, a box at a stable address
        // that lives until `shmring_subscriber_free`, whose lender drops an outstanding pin
        // before the subscriber; every other subscriber call refuses to touch the subscriber
        // while the pin is out (`Lender::get`: `SHMRING_E_BUSY`). So the borrow stays unique
        // and is outlived by its referent, as `'static` claims for the pin's life.
        let pin: Pinned<'static, Arc<Mapping>> = unsafe { core::mem::transmute(pin) };
        let info = pinned_message(&pin);
        let pinned = handle.lender.lend(shmring_pinned {
            pin,
            owner: subscriber,
        });
        // SAFETY: checked by `out_handle`; `msg` null or writable (header contract).
        unsafe {
            out.write(pinned);
            put(msg, info);
        }
        Ok(())
    })
}

/// Holds the next message, waiting at most `timeout_ms` (0: do not wait; `SHMRING_FOREVER`):
/// like a pin, the publisher cannot overwrite it until `shmring_subscriber_release_hold`, but
/// the subscriber stays free for other reads and holds, so several messages can be kept at
/// once (up to `shmring_subscriber_set_max_holds`, 4 by default, at most 8) and released in
/// any order. Stores the hold's id (never 0) in `*hold` and describes the message in `*msg`
/// (NULL: not wanted; `data` points into the ring, valid until the release). Holds not
/// released end with `shmring_subscriber_free`.
///
/// Errors: as `shmring_subscriber_pin`, and `SHMRING_E_BUSY` when the subscriber already holds
/// as many messages as it may (nothing is read) or a pin is out.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_hold(
    subscriber: *mut shmring_subscriber,
    timeout_ms: u64,
    hold: *mut u32,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        let hold = non_null(hold, "hold")?;
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let wait = match timeout_ms {
            SHMRING_FOREVER => Duration::MAX,
            t => millis(t),
        };
        let got = match s.recv_held_timeout(wait) {
            Ok(h) => h,
            Err(RecvTimeoutError::Timeout) if timeout_ms == 0 => {
                return Err(fail(SHMRING_E_EMPTY, "no new message"));
            }
            Err(e) => return Err(read_fail(&mut handle.abort_code, e)),
        };
        let info = shmring_message {
            data: s.held_bytes(&got).unwrap_or_default().as_ptr(),
            len: got.len(),
            seq: got.seq(),
            missed: got.missed(),
            meta: got.meta(),
            redelivered: u32::from(got.redelivered()),
        };
        let free = handle.holds.iter().position(Option::is_none);
        let index = free.unwrap_or(handle.holds.len());
        let id = u32::try_from(index + 1).map_err(|_| fail(SHMRING_E_BUSY, "too many holds"))?;
        match free {
            Some(i) => handle.holds[i] = Some(got),
            None => handle.holds.push(Some(got)),
        }
        // SAFETY: `hold` is non-null (checked) and writable, `msg` null or writable (header
        // contract).
        unsafe {
            hold.write(id);
            put(msg, info);
        }
        Ok(())
    })
}

/// Releases the message held as `hold` (from `shmring_subscriber_hold`): the publisher may
/// reuse its slot; its `data` is invalid afterwards.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT` (NULL subscriber, or no such hold: released already),
/// `SHMRING_E_BUSY` (a pin is out).
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_release_hold(
    subscriber: *mut shmring_subscriber,
    hold: u32,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let s = handle.lender.get()?;
        let slot = (hold as usize)
            .checked_sub(1)
            .and_then(|i| handle.holds.get_mut(i))
            .and_then(Option::take)
            .ok_or_else(|| {
                fail(
                    SHMRING_E_INVALID_ARGUMENT,
                    "no such hold (released already?)",
                )
            })?;
        s.release(slot)
            .map_err(|e| fail(read_code(e), e.to_string()))
    })
}

/// Starts a gating or skip-on-lag subscriber up to `n` messages back, as far as the ring still
/// holds them (history for a late joiner), before its first read; stores in `*back` (NULL: not
/// wanted) how many back it now starts. A gating subscriber is lossless from where it joined;
/// history overwritten before it read it counts as missed.
///
/// Errors: `SHMRING_E_UNSUPPORTED` (a latest-only subscriber or a group member, or after a read),
/// `SHMRING_E_EVICTED`, `SHMRING_E_CORRUPT`, `SHMRING_E_BUSY` (a pin is out),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_rewind(
    subscriber: *mut shmring_subscriber,
    n: u64,
    back: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        let got = handle
            .lender
            .get()?
            .rewind(n)
            .map_err(|e| fail(read_code(e), e.to_string()))?;
        // SAFETY: null or writable (header contract).
        unsafe { put(back, got) };
        Ok(())
    })
}

/// Sets how many messages the subscriber may hold at once (0 to 8; 4 by default).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT` (above 8, below the number held now, NULL),
/// `SHMRING_E_BUSY` (a pin is out).
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_set_max_holds(
    subscriber: *mut shmring_subscriber,
    max: usize,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let handle = unsafe { arg_mut(subscriber, "subscriber") }?;
        handle
            .lender
            .get()?
            .set_max_holds(max)
            .map_err(|e| fail(SHMRING_E_INVALID_ARGUMENT, e.to_string()))
    })
}

fn pinned_message(pin: &Pinned<'_, Arc<Mapping>>) -> shmring_message {
    shmring_message {
        data: pin.bytes().as_ptr(),
        len: pin.len(),
        seq: pin.seq(),
        missed: pin.missed(),
        meta: pin.meta(),
        redelivered: u32::from(pin.redelivered()),
    }
}

/// Describes the pinned message in `*msg` again (as `shmring_subscriber_pin` did).
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_pinned_message(
    pinned: *const shmring_pinned,
    msg: *mut shmring_message,
) -> c_int {
    guard(|| {
        // SAFETY: `pinned` is null or a live pin (header contract).
        let pinned = unsafe { arg(pinned, "pinned") }?;
        let msg = non_null(msg, "msg")?;
        // SAFETY: non-null and writable (header contract).
        unsafe { put(msg, pinned_message(&pinned.pin)) };
        Ok(())
    })
}

/// Releases the pin (the publisher may then reuse the slot). `pinned` and the `data` pointer
/// it gave are invalid afterwards.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_pinned_release(pinned: *mut shmring_pinned) -> c_int {
    guard(|| {
        let pinned = non_null(pinned, "pinned")?;
        // SAFETY: a live pin (header contract); its owner outlives it (freeing the owner frees
        // the pin) and is used by this thread only.
        let owner = unsafe { &mut *(*pinned).owner };
        drop(owner.lender.take(pinned, "pin")?);
        Ok(())
    })
}

/// Reports the messages received so far in `*received` and those skipped (latest-only and
/// skip-on-lag subscribers) in `*missed` (either may be NULL).
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_counters(
    subscriber: *mut shmring_subscriber,
    received: *mut u64,
    missed: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_subscriber_recv`.
        let s = unsafe { self::subscriber(subscriber) }?;
        // SAFETY: null or writable (header contract).
        unsafe {
            put(received, s.received());
            put(missed, s.missed());
        }
        Ok(())
    })
}

/// Stores in `*code` the code the publisher aborted the stream with (its
/// `shmring_publisher_abort` code; 0 when it was freed without closing), once a read of this
/// subscriber (`shmring_subscriber_recv` or `shmring_subscriber_pin`) has returned
/// `SHMRING_E_ABORTED`. May be called while a pin is out.
///
/// Errors: `SHMRING_E_EMPTY` (no read of this subscriber has returned `SHMRING_E_ABORTED`: the
/// stream was not aborted, or is not drained yet; `*code` is not written),
/// `SHMRING_E_INVALID_ARGUMENT` (NULL `subscriber` or `code`).
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_abort_code(
    subscriber: *const shmring_subscriber,
    code: *mut u16,
) -> c_int {
    guard(|| {
        // SAFETY: `subscriber` is null or a live handle used only by this thread (header
        // contract); the pin it may have out borrows the boxed `Subscriber`, not this field.
        let handle = unsafe { arg(subscriber, "subscriber") }?;
        let code = non_null(code, "code")?;
        let Some(value) = handle.abort_code else {
            return Err(fail(
                SHMRING_E_EMPTY,
                "no read of this subscriber has returned SHMRING_E_ABORTED (the stream was not \
                 aborted, or is not drained yet)",
            ));
        };
        // SAFETY: non-null and writable (header contract).
        unsafe { put(code, value) };
        Ok(())
    })
}

/// Frees the subscriber (it leaves the ring), releasing a pin it still holds. NULL is allowed.
/// `subscriber` (and its pin) are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_subscriber_free(subscriber: *mut shmring_subscriber) -> c_int {
    // SAFETY: null or a handle made by `Box::into_raw` in `shmring_ring_subscriber`, freed once
    // (header contract); its lender releases an outstanding pin first.
    guard(|| unsafe { free_handle(subscriber) })
}
