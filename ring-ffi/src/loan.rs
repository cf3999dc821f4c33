//! A loan: a slot claimed for writing in place, then sent or aborted.

use core::ffi::c_int;

use crate::args::{arg_mut, bytes, non_null, put};
use crate::handles::shmring_loan;
use crate::status::{fail, guard, Res};
use crate::{SHMRING_E_NOT_PIN_ONLY, SHMRING_E_TOO_LARGE};

/// Stores the slot's writable bytes in `*data` and its capacity in `*capacity` (either may be
/// NULL). Only in a pin-only ring: no reader looks at the slot while it is loaned. The pointer
/// is valid until `shmring_loan_send` or `shmring_loan_abort`; the library owns the memory.
///
/// Errors: `SHMRING_E_NOT_PIN_ONLY` (use `shmring_loan_write`), `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_data(
    loan: *mut shmring_loan,
    data: *mut *mut u8,
    capacity: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: `loan` is null or a live loan used only by this thread (header contract).
        let loan = unsafe { arg_mut(loan, "loan") }?;
        if loan.data.is_null() {
            return Err(fail(
                SHMRING_E_NOT_PIN_ONLY,
                "a writable pointer into a slot needs a pin-only ring (copy readers of other \
                 rings read slots at any moment): use shmring_loan_write, or create the ring \
                 with pin_only",
            ));
        }
        // SAFETY: null or writable (header contract).
        unsafe {
            put(data, loan.data);
            put(capacity, loan.capacity);
        }
        Ok(())
    })
}

/// Copies `len` bytes at `data` into the slot at byte `offset`; the message grows to cover
/// them. Works in every ring (chunked writes without a staging buffer).
///
/// Errors: `SHMRING_E_TOO_LARGE` (past the slot's end; nothing written),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_write(
    loan: *mut shmring_loan,
    offset: usize,
    data: *const u8,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_loan_data`.
        let loan = unsafe { arg_mut(loan, "loan") }?;
        // SAFETY: null or readable for `len` bytes (header contract).
        let data = unsafe { bytes(data, len, "data") }?;
        loan.slot.write_at(offset, data).map_err(|_| {
            fail(
                SHMRING_E_TOO_LARGE,
                format!(
                    "writing {len} bytes at offset {offset} passes the end of a {}-byte slot",
                    loan.capacity
                ),
            )
        })
    })
}

/// Sets the message length (bytes not written read as whatever the slot held).
///
/// Errors: `SHMRING_E_TOO_LARGE`, `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_set_len(loan: *mut shmring_loan, len: usize) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_loan_data`.
        let loan = unsafe { arg_mut(loan, "loan") }?;
        let too_large = || {
            fail(
                SHMRING_E_TOO_LARGE,
                format!(
                    "a {len}-byte message does not fit in a {}-byte slot",
                    loan.capacity
                ),
            )
        };
        if len > loan.capacity {
            return Err(too_large());
        }
        if loan.data.is_null() {
            loan.slot.set_len(len).map_err(|_| too_large())
        } else {
            // In a pin-only ring a loan of `len` sets the length and zeroes the last word's
            // padding (so readers of whole words see zeros past the end).
            loan.slot.loan(len).map(|_| ()).map_err(|_| too_large())
        }
    })
}

/// Sets the message's two metadata words.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_set_meta(
    loan: *mut shmring_loan,
    meta0: u64,
    meta1: u64,
) -> c_int {
    guard(|| {
        // SAFETY: as in `shmring_loan_data`.
        let loan = unsafe { arg_mut(loan, "loan") }?;
        loan.slot.set_meta([meta0, meta1]);
        Ok(())
    })
}

/// Takes the loan out of its publisher and frees the handle.
///
/// # Safety
///
/// `loan` is null or a live loan handle, used only by this thread, freed by nobody else.
unsafe fn take_loan(loan: *mut shmring_loan) -> Res<Box<shmring_loan>> {
    let loan = non_null(loan, "loan")?;
    // SAFETY: live by the caller's contract; its owner outlives it (freeing the owner frees
    // the loan) and is used by this thread only.
    let owner = unsafe { &mut *(*loan).owner };
    owner.lender.take(loan, "loan")
}

/// Publishes the loaned slot and stores its sequence number in `*seq` (NULL: not wanted). The
/// loan is consumed whatever the outcome: `loan` is invalid afterwards.
///
/// Errors: `SHMRING_E_DISPLACED` (another publisher took over; nothing published),
/// `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_send(loan: *mut shmring_loan, seq: *mut u64) -> c_int {
    guard(|| {
        // SAFETY: the header contract for `loan`.
        let loan = unsafe { take_loan(loan) }?;
        let sent = loan.slot.publish()?;
        // SAFETY: null or writable (header contract).
        unsafe { put(seq, sent) };
        Ok(())
    })
}

/// Gives the slot back without publishing (the sequence number is reused). The loan is
/// consumed: `loan` is invalid afterwards.
///
/// Errors: `SHMRING_E_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn shmring_loan_abort(loan: *mut shmring_loan) -> c_int {
    guard(|| {
        // SAFETY: the header contract for `loan`.
        let loan = unsafe { take_loan(loan) }?;
        loan.slot.abort();
        Ok(())
    })
}
