//! Spilled queue messages: a message whose out-of-slot parts do not fit the ring's arena (too
//! large, or the arena is full of unread messages) travels in a named segment of its own.
//!
//! # Lifetime
//!
//! The sender creates the segment (`<queue name>.s<seq>-<16 hex>`, every page reserved, so a
//! full `/dev/shm` is `NoSpace` at once and never a `SIGBUS`), writes the parts, unmaps it and
//! publishes a slot that names it (the record after the part table, see `queue`). The name is
//! then the only reference, so the memory is freed as soon as the name is removed and the
//! receiver's mapping (if any) goes:
//!
//! - the receiver removes the name once it has the message (after the copy, or as soon as the
//!   zero-copy parts map it), when it is the queue's only reader;
//! - the sender removes it when the slot comes round again (the claim proves the message
//!   consumed), which covers several readers and readers that never read it;
//! - [`crate::sweep`] removes spills whose queue is gone or stale and that no creator holds
//!   (processes killed by a signal).
//!
//! # Untrusted peer
//!
//! A receiver opens only a name of this very queue's spill pattern ([`is_spill_of`]), checks the
//! segment's size against the record, and the part table against that size.

use std::hash::{BuildHasher as _, Hasher as _};

use ring_os::raw::{CreateOptions, Segment, SegmentName, SizeCheck};

use crate::errors::Fail;

/// Bytes of the spill record before the name: the segment's length and the name's length.
pub(crate) const RECORD_HEAD: usize = 16;

/// A new spill name for message `seq` of the queue `queue`: `<queue>.s<seq>-<16 hex>`.
pub(crate) fn name(queue: &str, seq: u64) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(seq);
    h.write_u32(std::process::id());
    format!("{queue}.s{seq}-{:016x}", h.finish())
}

/// Whether `name` is a spill name of queue `queue` (see [`name`]; the rule is ring-os's, which
/// `ringctl list`/`clean` share).
pub(crate) fn is_spill_of(name: &str, queue: &str) -> bool {
    ring_os::raw::stale::is_spill_of(name, queue)
}

/// The queue a spill name belongs to (the part before `.s`), if it is one.
pub(crate) fn queue_of(name: &str) -> Option<&str> {
    ring_os::raw::stale::spill_queue(name)
}

/// The record's length for `name` (rounded to 8 bytes).
pub(crate) fn record_len(name: &str) -> usize {
    (RECORD_HEAD + name.len()).div_ceil(8) * 8
}

/// Writes the record (segment length, name) into `out` (`record_len(name)` bytes).
pub(crate) fn write_record(out: &mut [u8], len: u64, name: &str) {
    out[..8].copy_from_slice(&len.to_le_bytes());
    out[8..16].copy_from_slice(&(name.len() as u64).to_le_bytes());
    out[RECORD_HEAD..RECORD_HEAD + name.len()].copy_from_slice(name.as_bytes());
}

/// Reads the record at the start of `bytes`: `(segment length, name, record length)`.
pub(crate) fn read_record(bytes: &[u8]) -> Result<(u64, &str, usize), Fail> {
    let corrupt = |what: &str| Fail::new("Corrupt", format!("not a valid spill record: {what}"));
    if bytes.len() < RECORD_HEAD {
        return Err(corrupt("too short"));
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let len = word(0);
    let n = usize::try_from(word(8))
        .ok()
        .filter(|&n| n <= ring_os::raw::MAX_NAME_LEN && RECORD_HEAD + n <= bytes.len())
        .ok_or_else(|| corrupt("name length"))?;
    let name = core::str::from_utf8(&bytes[RECORD_HEAD..RECORD_HEAD + n])
        .map_err(|_| corrupt("name is not UTF-8"))?;
    Ok((len, name, (RECORD_HEAD + n).div_ceil(8) * 8))
}

/// Creates the spill segment `name` of `len` bytes (every page reserved).
pub(crate) fn create(name: &str, len: usize) -> Result<Segment, Fail> {
    let seg_name = SegmentName::new(name).map_err(crate::errors::os)?;
    // Populated: the pages are reserved anyway, and mapping them in one go is cheaper than a
    // fault per page during the copy.
    let opts = CreateOptions::new().populate(true);
    Segment::create_named(&seg_name, len.max(1) as u64, opts).map_err(|e| match e {
        ring_os::Error::NoSpace { .. } => Fail::new(
            "NoSpace",
            format!(
                "a message of {len} bytes needs a shared-memory segment of its own and \
                     there is no room for it: {e} (the queue stays usable)"
            ),
        ),
        other => crate::errors::os(other),
    })
}

/// Opens the spill segment `name`, which must be `len` bytes.
pub(crate) fn open(name: &str, len: u64) -> Result<Segment, Fail> {
    let seg_name = SegmentName::new(name).map_err(crate::errors::os)?;
    Segment::open_named(&seg_name, SizeCheck::Exactly(len.max(1))).map_err(|e| match e {
        ring_os::Error::NotFound { .. } => Fail::new(
            "Corrupt",
            format!("the message's spill segment {name:?} is gone (removed by a cleaner?)"),
        ),
        other => crate::errors::os(other),
    })
}

/// Removes the name `name` if it still exists (already removed: nothing to do).
pub(crate) fn remove(name: &str) {
    let Ok(seg_name) = SegmentName::new(name) else {
        return;
    };
    if let Ok(seg) = Segment::open_named(&seg_name, SizeCheck::AtLeast(1)) {
        // Removes the name only while it names the file just opened.
        let _ = seg.unlink();
    }
}
