//! Copying reads: `recv` (a new `bytes`) and `recv_into` (a caller's buffer), each under
//! ring-core's single pin, taken and dropped within the call.

use core::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ring_core::ReadError;
use ring_os::RecvTimeoutError;

use super::{no_message, truncated_since, Consumer};
use crate::errors::{self, Fail};
use crate::wait::{deadline, sliced_copying};

impl Consumer {
    /// Copies the next message out as `bytes` (waits as `pin` does). A copying read pins
    /// its message for the copy only, with a pin of its own: it works with `max_pins`
    /// messages pinned.
    pub(super) fn recv_bytes<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let end = deadline(timeout)?;
        let mut turn = self.turn(py, end, |_| Ok(()))?;
        loop {
            self.wait_message(py, end, &mut turn)?;
            let faults = ring_os::raw::sigbus::repaired_faults();
            // The message is there: pin it without waiting, and copy it with the GIL held.
            let out = match turn.held()?.sub.recv_pinned_timeout(Duration::ZERO) {
                Ok(pin) => {
                    self.count(pin.missed());
                    PyBytes::new(py, pin.bytes())
                }
                // Overwritten since (latest, skip): wait for the next one.
                Err(RecvTimeoutError::Timeout)
                | Err(RecvTimeoutError::Failed(ReadError::Lagging)) => continue,
                Err(e) => return Err(errors::recv(e).into()),
            };
            truncated_since(faults)?;
            return Ok(out);
        }
    }

    /// Copies the next message into `buffer` (any writable C-contiguous buffer: `bytearray`,
    /// numpy array, `memoryview`, `mmap`) and returns its length; waits as `pin` does, and
    /// copies with the GIL released (a `timeout=0` read into at most 64 KiB keeps it). The reader of large messages reuses one buffer instead of
    /// a new `bytes` each time. A message longer than the buffer raises `TooLarge` and is
    /// consumed (a buffer of the ring's `slot_size` holds any message). As `recv`, it works
    /// with `max_pins` messages pinned.
    pub(super) fn recv_into_buffer(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let view = crate::producer::View::writable(buffer)?;
        let (dst, room) = view.raw();
        let end = deadline(timeout)?;
        let mut turn = self.turn(py, end, |_| Ok(()))?;
        let pins = &self.pins;
        let faults = ring_os::raw::sigbus::repaired_faults();
        // Waits, pins and copies in one go, the GIL released throughout (kept by a
        // non-blocking try into a small buffer: see `sliced_copying`).
        let got = sliced_copying(py, end, &mut turn.lease, room, |lease, slice| {
            lease.check_open()?;
            let h = lease.get()?;
            h.settle(pins);
            let pin = match h.sub.recv_pinned_timeout(slice) {
                Ok(pin) => pin,
                Err(RecvTimeoutError::Timeout)
                | Err(RecvTimeoutError::Failed(ReadError::Lagging)) => return Ok(None),
                Err(e) => return Err(errors::recv(e)),
            };
            let (src, len) = (pin.bytes().as_ptr(), pin.len());
            if len > room {
                return Ok(Some(Err((len, pin.missed()))));
            }
            // SAFETY: `src..src + len` is the pinned message, mapped and stable while `pin`
            // lives (it is dropped after the copy); `dst..dst + len` lies in the writable view
            // `view`, held (so the object cannot be resized or freed) until after the copy.
            // Raw pointers only, and `copy` allows overlap, so even a view into the segment
            // itself cannot make this unsound.
            unsafe { core::ptr::copy(src, dst as *mut u8, len) };
            Ok(Some(Ok((len, pin.missed()))))
        })?;
        drop(view);
        let got = got.ok_or_else(no_message)?;
        let (Ok((len, missed)) | Err((len, missed))) = got;
        self.count(missed);
        if got.is_err() {
            return Err(Fail::new(
                "TooLarge",
                format!(
                    "a message of {len} bytes does not fit a buffer of {room} (it was consumed)"
                ),
            )
            .into());
        }
        truncated_since(faults)?;
        Ok(len)
    }
}
