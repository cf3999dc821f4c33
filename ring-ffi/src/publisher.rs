//! The publisher: send by copy, loan a slot, wait for subscribers or a drain, end the stream.

use core::ffi::{c_char, c_int};
use core::ptr;
use core::time::Duration;
use std::sync::Arc;

use ring_core::{ClaimError, Memory as _, WriteSlot};
use ring_os::prelude::*;
use ring_os::raw::{Mapping, ProducerExt as _, TRUNCATED};

use crate::args::{arg, arg_mut, bytes, free_handle, millis, out_handle, put, text};
use crate::handles::{shmring_loan, shmring_publisher, shmring_ring, Lender};
use crate::status::{claim_timeout, fail, guard, Fail, Res};
use crate::{SHMRING_E_NOT_PIN_ONLY, SHMRING_E_TIMEOUT, SHMRING_E_TRUNCATED, SHMRING_FOREVER};

/// Becomes the ring's one publisher (taking over from a dead one) and stores it in `*out`.
///
/// Errors: `SHMRING_E_PRODUCER_ALIVE`, `SHMRING_E_INVALID_ARGUMENT`, `SHMRING_E_OS`.
#[no_mangle]
pub unsafe extern "C" fn shmring_ring_publisher(
    ring: *const shmring_ring,
    out: *mut *mut shmring_publisher,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_ring_fd`.
        let ring = unsafe { arg(ring, "ring") }?;
        let handle = Box::into_raw(Box::new(shmring_publisher {
            lender: Lender::new(
                ring.ring.publisher()?,
                "the publisher holds a loan: send or abort it first",
            ),
        }));
        // SAFETY: checked by `out_handle`.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// The publisher behind `p`, unless a loan is out.
///
/// # Safety
///
/// `p` is null or a live publisher handle used by nobody else now.
unsafe fn publisher<'a>(p: *mut shmring_publisher) -> Res<&'a mut Publisher> {
    // SAFETY: the caller's contract.
    unsafe { arg_mut(p, "publisher") }?.lender.get()
}

/// One wait of at most `timeout_ms`: a wait without end (`SHMRING_FOREVER`) is a series of
/// one-second waits.
fn slice(timeout_ms: u64) -> Duration {
    if timeout_ms == SHMRING_FOREVER {
        Duration::from_secs(1)
    } else {
        millis(timeout_ms)
    }
}

/// A call's wait on the publisher handle `publisher`: waits in slices (see [`slice`]) until
/// `done` says so, for at most `timeout_ms`; `ended` says why a slice that ended undone ends
/// the wait for good (`None`: wait on), and `timeout` gives the message past the deadline.
/// Each sees the publisher.
///
/// # Safety
///
/// As for [`publisher`].
unsafe fn wait_sliced(
    publisher: *mut shmring_publisher,
    timeout_ms: u64,
    mut done: impl FnMut(&mut Publisher, Duration) -> bool,
    mut ended: impl FnMut(&mut Publisher) -> Option<Fail>,
    timeout: impl FnOnce(&Publisher) -> String,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let p = unsafe { self::publisher(publisher) }?;
        loop {
            if done(p, slice(timeout_ms)) {
                return Ok(());
            }
            if let Some(e) = ended(p) {
                return Err(e);
            }
            if timeout_ms != SHMRING_FOREVER {
                return Err(fail(SHMRING_E_TIMEOUT, timeout(p)));
            }
        }
    })
}

/// Claims a slot (once `deadline` is reached, the ring's last refusal), waiting with reclaim.
fn claim_loop<R>(
    publisher: &mut Publisher,
    timeout_ms: u64,
    mut write: impl FnMut(WriteSlot<'_, Arc<Mapping>>) -> R,
) -> Res<R> {
    let inner = publisher.inner();
    if timeout_ms == 0 {
        return Ok(write(inner.try_claim()?));
    }
    // A wait without end is a series of long waits: the ring-os claim reclaims dead
    // subscribers at each slice end.
    let slice = slice(timeout_ms);
    loop {
        match inner.claim_with(slice, &mut write) {
            Ok(r) => return Ok(r),
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. })
                if timeout_ms == SHMRING_FOREVER => {}
            Err(e) => return Err(claim_timeout(e, timeout_ms)),
        }
    }
}

/// Copies `len` bytes at `data` into the next slot and publishes them with metadata `meta`
/// (NULL: zeros; else two words), waiting at most `timeout_ms` (0: do not wait;
/// `SHMRING_FOREVER`) while the ring is full, reclaiming subscribers whose process died. Stores
/// the sequence number in `*seq` (NULL: not wanted). Works in every ring.
///
/// Errors: `SHMRING_E_TOO_LARGE`, `SHMRING_E_FULL` (timeout 0), `SHMRING_E_TIMEOUT`,
/// `SHMRING_E_CLOSED`, `SHMRING_E_DISPLACED`, `SHMRING_E_TRUNCATED`, `SHMRING_E_BUSY` (a loan
/// is out), `SHMRING_E_INVALID_ARGUMENT` (NULL `publisher`, NULL `data` with `len` > 0).
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_send(
    publisher: *mut shmring_publisher,
    data: *const u8,
    len: usize,
    meta: *const u64,
    timeout_ms: u64,
    seq: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: `publisher` is null or a live handle used only by this thread (header).
        let p = unsafe { self::publisher(publisher) }?;
        // SAFETY: `data` is null or readable for `len` bytes (header contract).
        let data = unsafe { bytes(data, len, "data") }?;
        let meta = if meta.is_null() {
            [0; 2]
        } else {
            // SAFETY: non-null: two readable words (header contract).
            unsafe { [meta.read(), meta.add(1).read()] }
        };
        let capacity = p.inner().memory().geometry().slot_capacity();
        if len > capacity {
            return Err(ClaimError::TooLarge { len, capacity }.into());
        }
        // ring-core's one-pass publish first; held back, the claim loop.
        let fast = match p.inner().try_publish_checked_with_meta(data, meta) {
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => None,
            done => Some(done?),
        };
        let sent = match fast {
            Some(seq) => seq,
            None => claim_loop(p, timeout_ms, |mut slot| {
                // Cannot overflow: the length was checked against the capacity above.
                let _ = slot.write(data);
                slot.set_meta(meta);
                slot.publish()
            })??,
        };
        // SAFETY: null or writable (header contract).
        unsafe { put(seq, sent) };
        Ok(())
    })
}

/// Claims the next slot for writing in place, waiting at most `timeout_ms` as
/// `shmring_publisher_send` does, and stores the loan in `*out`. The message is empty until
/// written: in a pin-only ring, write through `shmring_loan_data` and set the length with
/// `shmring_loan_set_len`; in any ring, `shmring_loan_write` writes at an offset. Then
/// `shmring_loan_send` or `shmring_loan_abort`. Until then the publisher accepts no other call.
///
/// Errors: as `shmring_publisher_send`, and `SHMRING_E_BUSY` (a loan is out already).
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_loan(
    publisher: *mut shmring_publisher,
    timeout_ms: u64,
    out: *mut *mut shmring_loan,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_ring_create`.
        unsafe { out_handle(out) }?;
        // SAFETY: as in `shmring_publisher_send`.
        let handle = unsafe { arg_mut(publisher, "publisher") }?;
        let p = handle.lender.get()?;
        // Wait (reclaiming dead subscribers) until a slot can be claimed, give it back, and
        // claim it again outside the wait, as the front door's `Publisher::loan` does: one
        // producer, so the second claim succeeds.
        claim_loop(p, timeout_ms, |slot| slot.abort())?;
        let pin_only = p.inner().memory().geometry().config().pin_only;
        let slot = p.inner().try_claim()?;
        // SAFETY: the slot borrows the `Publisher` in `handle.lender`, a box at a stable address
        // that lives until `shmring_publisher_free`, whose lender drops an outstanding loan
        // before the publisher; every other publisher call refuses to touch the publisher while
        // the loan is out (`Lender::get`: `SHMRING_E_BUSY`). So the borrow stays unique and is
        // outlived by its referent, as `'static` claims for the loan's life.
        let mut slot: WriteSlot<'static, Arc<Mapping>> = unsafe { core::mem::transmute(slot) };
        let capacity = slot.capacity();
        let data = if pin_only {
            let whole = slot
                .loan(capacity)
                .map_err(|e| fail(SHMRING_E_NOT_PIN_ONLY, format!("loaning the slot: {e:?}")))?;
            let data = whole.as_mut_ptr();
            // An empty message until the caller sets a length.
            let _ = slot.loan(0);
            data
        } else {
            ptr::null_mut()
        };
        let loan = handle.lender.lend(shmring_loan {
            slot,
            owner: publisher,
            data,
            capacity,
        });
        // SAFETY: checked by `out_handle`.
        unsafe { out.write(loan) };
        Ok(())
    })
}

/// Waits at most `timeout_ms` until at least `n` subscribers are registered and their start
/// point is final: each then receives (by its class) everything published after this returns.
///
/// Errors: `SHMRING_E_TIMEOUT`, `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_wait_for_subscribers(
    publisher: *mut shmring_publisher,
    n: usize,
    timeout_ms: u64,
) -> c_int {
    // SAFETY: as in `shmring_publisher_send`.
    unsafe {
        wait_sliced(
            publisher,
            timeout_ms,
            |p, slice| p.wait_for_subscribers(n, slice),
            |_| None,
            |p| {
                let ready = p.subscribers();
                format!(
                    "fewer than {n} subscribers registered within {timeout_ms} ms ({ready} ready)"
                )
            },
        )
    }
}

/// Waits at most `timeout_ms` until every gating subscriber consumed everything published
/// (reclaiming dead ones).
///
/// Errors: `SHMRING_E_TIMEOUT`, `SHMRING_E_TRUNCATED`, `SHMRING_E_BUSY`,
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_wait_drained(
    publisher: *mut shmring_publisher,
    timeout_ms: u64,
) -> c_int {
    // SAFETY: as in `shmring_publisher_send`.
    unsafe {
        wait_sliced(
            publisher,
            timeout_ms,
            |p, slice| p.wait_drained(slice),
            |p| {
                let truncated = p.inner().memory().is_truncated();
                truncated.then(|| fail(SHMRING_E_TRUNCATED, TRUNCATED))
            },
            |_| format!("gating subscribers did not drain the ring within {timeout_ms} ms"),
        )
    }
}

/// Reports the messages published so far (the next sequence number) in `*published` and the
/// subscribers whose start point is final in `*subscribers` (either may be NULL).
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_counters(
    publisher: *mut shmring_publisher,
    published: *mut u64,
    subscribers: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        let p = unsafe { self::publisher(publisher) }?;
        // SAFETY: null or writable (header contract).
        unsafe {
            put(published, p.sent());
            put(subscribers, p.subscribers());
        }
        Ok(())
    })
}

/// Reports the subscribers this publisher reclaimed because their processes died without
/// leaving (a subscriber that was freed is not one of them): `*total` of them, `*gating` of
/// those gating, and in `*unread` how many messages the first gating subscriber that died with
/// messages unread had not read (0 when none did: then no gating subscriber lost data). Any
/// pointer may be NULL. A publisher that promised its gating subscribers every message checks
/// `*unread` before it reports success.
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_lost_subscribers(
    publisher: *mut shmring_publisher,
    total: *mut u64,
    gating: *mut u64,
    unread: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        let lost = unsafe { self::publisher(publisher) }?.lost_subscribers();
        // SAFETY: null or writable (header contract).
        unsafe {
            put(total, lost.total);
            put(gating, lost.gating);
            put(unread, lost.first_gating_unread.map_or(0, |l| l.unread()));
        }
        Ok(())
    })
}

/// Creates group `name` (competing consumers, joined with `shmring_ring_join_group`), or finds
/// it, and stores its subscriber-table index in `*index` (NULL: not wanted). Messages sent from
/// now on wait for the group: each goes to exactly one member, and the group holds the
/// publisher back as one gating subscriber would, even before its first member joins.
///
/// Errors: `SHMRING_E_FULL` (no free subscriber entry), `SHMRING_E_BUSY`,
/// `SHMRING_E_INVALID_ARGUMENT` (NULL or non-UTF-8 name).
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_create_group(
    publisher: *mut shmring_publisher,
    name: *const c_char,
    index: *mut u32,
) -> c_int {
    guard(|| {
        // SAFETY: null or NUL-terminated (header contract).
        let name = unsafe { text(name, "name") }?;
        // SAFETY: as in `shmring_publisher_send`.
        let at = unsafe { self::publisher(publisher) }?.create_group(name)?;
        // SAFETY: null or writable (header contract); an index is below the 32-entry table.
        unsafe { put(index, at as u32) };
        Ok(())
    })
}

/// Ends the stream as complete: subscribers drain what is there, then get
/// `SHMRING_E_DISCONNECTED`. Later sends fail with `SHMRING_E_CLOSED`.
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_close(publisher: *mut shmring_publisher) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        unsafe { self::publisher(publisher) }?.close();
        Ok(())
    })
}

/// Ends the stream as aborted with `code`: subscribers drain, then get `SHMRING_E_ABORTED`
/// (the message names `code`). Later sends fail with `SHMRING_E_CLOSED`.
///
/// Errors: `SHMRING_E_BUSY`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_abort(
    publisher: *mut shmring_publisher,
    code: u16,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_publisher_send`.
        unsafe { self::publisher(publisher) }?.abort(code);
        Ok(())
    })
}

/// Frees the publisher: aborts an outstanding loan, and ends the stream as aborted (code 0)
/// unless `shmring_publisher_close` or `shmring_publisher_abort` was called. NULL is allowed.
/// `publisher` (and its loan) are invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn shmring_publisher_free(publisher: *mut shmring_publisher) -> c_int {
    // SAFETY: null or a handle made by `Box::into_raw` in `shmring_ring_publisher`, freed once
    // (header contract); its lender aborts an outstanding loan first.
    guard(|| unsafe { free_handle(publisher) })
}
