//! The bridge's wire format: what travels with every payload as the Zenoh sample's
//! attachment, and the frame a batch sample's payload holds.
//!
//! A sample carrying one message has the ring message's bytes, unchanged, as its payload (a
//! plain Zenoh subscriber in any language sees the frame as is). The attachment is this fixed
//! 64-byte, little-endian header (`docs/BRIDGE.md` has the table):
//!
//! | offset | size | field | valid values |
//! |---|---|---|---|
//! | 0 | 4 | magic | `b"SRZB"` |
//! | 4 | 1 | version | 1, or 2 ([`VERSION`]; required for kind 3) |
//! | 5 | 1 | kind | 0 data, 1 close, 2 abort, 3 batch |
//! | 6 | 1 | class | 0 gating, 1 latest-only, 2 skip-on-lag |
//! | 7 | 1 | reserved | 0 |
//! | 8 | 8 | epoch | the sending bridge's instance id, non-zero |
//! | 16 | 8 | seq | the message's sequence number in the origin ring (batch: its first record's) |
//! | 24 | 8 | missed | messages the sending bridge skipped just before this one (batch: 0) |
//! | 32 | 16 | meta | the message's two metadata words (batch: 0) |
//! | 48 | 8 | start | the origin sequence number the sending bridge started reading at (≤ seq) |
//! | 56 | 4 | len | payload length in bytes (must equal the sample's payload length) |
//! | 60 | 2 | code | abort code (kind 2), else 0 |
//! | 62 | 2 | reserved | 0 |
//!
//! # Batch samples (version 2, kind 3)
//!
//! When several small messages are ready at once, the sending bridge packs them into one
//! sample (see [`BatchWriter`]): one Zenoh put, one hand-off and one header for the lot. Its
//! header has version 2 and kind 3 (a version-1 bridge refuses it with a message that says to
//! upgrade); its payload is a frame of records, little-endian:
//!
//! | offset | size | field | valid values |
//! |---|---|---|---|
//! | 0 | 4 | count | records that follow, ≥ 1 |
//! | 4 | 4 | reserved | 0 |
//! | 8 | … | `count` records, back to back: | |
//! | +0 | 4 | len | the message's length in bytes (no more than the frame has left) |
//! | +4 | 4 | reserved | 0 |
//! | +8 | 8 | seq | the message's sequence number in the origin ring: the header's `seq` for the first record, then strictly increasing |
//! | +16 | 8 | missed | messages the sending bridge skipped just before this one |
//! | +24 | 16 | meta | the message's two metadata words |
//! | +40 | len | payload | the message's bytes |
//!
//! The frame ends exactly after the last record, and is at most [`MAX_BATCH_BYTES`] long.
//! Single messages, close and abort keep the version-1 form, so a version-1 receiver reads
//! every sample but the batches, and a slow stream (one message ready at a time) looks as
//! before on the wire.
//!
//! The far side treats the attachment and the frame as untrusted input: [`Header::decode`]
//! and [`Batch::parse`] check every field and every length before anything is read, return a
//! [`WireError`], never panic, never allocate (a record's length or the count is never used
//! to size anything).

use core::fmt;

use ring_core::DeliveryClass;

/// The first four bytes of every header.
pub const MAGIC: [u8; 4] = *b"SRZB";
/// The newest header version this crate reads, and the one it writes for batch samples.
pub const VERSION: u8 = 2;
/// The header version this crate writes for everything but batches (what a version-1 bridge
/// reads).
pub const VERSION_SINGLE: u8 = 1;
/// Bytes in a header (versions 1 and 2).
pub const HEADER_LEN: usize = 64;
/// Bytes before a batch frame's first record (count, reserved).
pub const BATCH_PREFIX_LEN: usize = 8;
/// Bytes of a batch record before its payload (len, reserved, seq, missed, meta).
pub const RECORD_HEADER_LEN: usize = 40;
/// The longest batch frame a receiving bridge accepts (a sending bridge packs far less, see
/// [`BatchWriter`]).
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// What a sample carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One ring message.
    Data,
    /// The origin ring's producer closed it: the stream is complete.
    Close,
    /// The origin ring's stream was aborted (its producer dropped without closing) with `code`.
    Abort,
    /// Several ring messages: the payload is a batch frame (version 2; see [`Batch`]).
    Batch,
}

/// One sample's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the sample carries.
    pub kind: Kind,
    /// The delivery class the sending bridge reads the origin ring with.
    pub class: DeliveryClass,
    /// The sending bridge's instance id (a restarted bridge has a new one); never 0.
    pub epoch: u64,
    /// The message's sequence number in the origin ring (for close/abort: the next one).
    pub seq: u64,
    /// Messages the sending bridge's ring consumer skipped just before this one.
    pub missed: u64,
    /// The message's two metadata words.
    pub meta: [u64; 2],
    /// The origin sequence number the sending bridge started reading at: what lies between
    /// it and the first `seq` a receiver sees was not forwarded.
    pub start: u64,
    /// Payload length in bytes.
    pub len: u32,
    /// Abort code (kind [`Kind::Abort`]); 0 otherwise.
    pub code: u16,
}

/// Why an attachment is not a valid header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The sample has no attachment (not sent by a ring bridge).
    Missing,
    /// The attachment is not [`HEADER_LEN`] bytes long.
    Length(usize),
    /// The first four bytes are not [`MAGIC`].
    Magic,
    /// A version this build does not read.
    Version(u8),
    /// A field holds a value outside its range (named).
    Field(&'static str),
    /// A batch frame is malformed (what is wrong is named).
    Frame(&'static str),
    /// The header's `len` differs from the sample's payload length.
    PayloadLength {
        /// What the header says.
        header: u32,
        /// What arrived.
        payload: usize,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("the sample has no ring-bridge header (attachment)"),
            Self::Length(n) => write!(f, "a ring-bridge header is {HEADER_LEN} bytes, got {n}"),
            Self::Magic => f.write_str("the attachment is not a ring-bridge header (bad magic)"),
            Self::Version(v) => write!(
                f,
                "ring-bridge header version {v} (this build reads version {VERSION}): upgrade \
                 the receiving bridge"
            ),
            Self::Field(name) => write!(f, "ring-bridge header field {name} is out of range"),
            Self::Frame(what) => write!(f, "ring-bridge batch frame: {what}"),
            Self::PayloadLength { header, payload } => write!(
                f,
                "the header announces {header} payload bytes but {payload} arrived"
            ),
        }
    }
}

impl std::error::Error for WireError {}

fn class_code(class: DeliveryClass) -> u8 {
    match class {
        DeliveryClass::Gating => 0,
        DeliveryClass::LatestOnly => 1,
        DeliveryClass::SkipOnLag => 2,
    }
}

/// The little-endian word at `at` (0 past the end: callers check lengths first).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(src) = bytes.get(at..at.saturating_add(8)) {
        w.copy_from_slice(src);
    }
    u64::from_le_bytes(w)
}

/// As [`u64_at`], four bytes.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(src) = bytes.get(at..at.saturating_add(4)) {
        w.copy_from_slice(src);
    }
    u32::from_le_bytes(w)
}

impl Header {
    /// A data header for a message of the origin ring.
    #[must_use]
    pub fn data(class: DeliveryClass, epoch: u64, seq: u64, missed: u64, meta: [u64; 2]) -> Self {
        Self {
            kind: Kind::Data,
            class,
            epoch,
            seq,
            missed,
            meta,
            start: seq.saturating_sub(missed),
            len: 0,
            code: 0,
        }
    }

    /// The header's bytes.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        (b[4], b[5]) = match self.kind {
            Kind::Data => (VERSION_SINGLE, 0),
            Kind::Close => (VERSION_SINGLE, 1),
            Kind::Abort => (VERSION_SINGLE, 2),
            Kind::Batch => (VERSION, 3),
        };
        b[6] = class_code(self.class);
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.missed.to_le_bytes());
        b[32..40].copy_from_slice(&self.meta[0].to_le_bytes());
        b[40..48].copy_from_slice(&self.meta[1].to_le_bytes());
        b[48..56].copy_from_slice(&self.start.to_le_bytes());
        b[56..60].copy_from_slice(&self.len.to_le_bytes());
        b[60..62].copy_from_slice(&self.code.to_le_bytes());
        b
    }

    /// Parses and validates a header; `payload_len` is the length of the payload that came
    /// with it.
    ///
    /// # Errors
    ///
    /// A [`WireError`] naming the first thing that is wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_zenoh::wire::{Header, WireError, HEADER_LEN};
    /// use ring_os::prelude::DeliveryClass;
    ///
    /// let mut h = Header::data(DeliveryClass::Gating, 7, 42, 0, [1, 2]);
    /// h.len = 5;
    /// assert_eq!(Header::decode(&h.encode(), 5), Ok(h));
    /// assert_eq!(Header::decode(&h.encode(), 4), Err(WireError::PayloadLength { header: 5, payload: 4 }));
    /// assert_eq!(Header::decode(&[0u8; 3], 5), Err(WireError::Length(3)));
    /// ```
    pub fn decode(bytes: &[u8], payload_len: usize) -> Result<Self, WireError> {
        let b: &[u8; HEADER_LEN] = bytes
            .try_into()
            .map_err(|_| WireError::Length(bytes.len()))?;
        if b[0..4] != MAGIC {
            return Err(WireError::Magic);
        }
        if b[4] != VERSION_SINGLE && b[4] != VERSION {
            return Err(WireError::Version(b[4]));
        }
        let kind = match b[5] {
            0 => Kind::Data,
            1 => Kind::Close,
            2 => Kind::Abort,
            3 if b[4] >= VERSION => Kind::Batch,
            _ => return Err(WireError::Field("kind")),
        };
        let class = match b[6] {
            0 => DeliveryClass::Gating,
            1 => DeliveryClass::LatestOnly,
            2 => DeliveryClass::SkipOnLag,
            _ => return Err(WireError::Field("class")),
        };
        if b[7] != 0 || b[62] != 0 || b[63] != 0 {
            return Err(WireError::Field("reserved"));
        }
        let epoch = u64_at(b, 8);
        if epoch == 0 {
            return Err(WireError::Field("epoch"));
        }
        let seq = u64_at(b, 16);
        let start = u64_at(b, 48);
        if start > seq {
            return Err(WireError::Field("start"));
        }
        let len = u32::from_le_bytes([b[56], b[57], b[58], b[59]]);
        let code = u16::from_le_bytes([b[60], b[61]]);
        if kind != Kind::Abort && code != 0 {
            return Err(WireError::Field("code"));
        }
        let missed = u64_at(b, 24);
        let meta = [u64_at(b, 32), u64_at(b, 40)];
        match kind {
            Kind::Data => {}
            Kind::Close | Kind::Abort if len != 0 => return Err(WireError::Field("len")),
            Kind::Close | Kind::Abort => {}
            Kind::Batch => {
                if missed != 0 {
                    return Err(WireError::Field("missed"));
                }
                if meta != [0; 2] {
                    return Err(WireError::Field("meta"));
                }
                let min = BATCH_PREFIX_LEN + RECORD_HEADER_LEN;
                if !(min..=MAX_BATCH_BYTES).contains(&(len as usize)) {
                    return Err(WireError::Field("len"));
                }
            }
        }
        if usize::try_from(len).ok() != Some(payload_len) {
            return Err(WireError::PayloadLength {
                header: len,
                payload: payload_len,
            });
        }
        Ok(Self {
            kind,
            class,
            epoch,
            seq,
            missed,
            meta,
            start,
            len,
            code,
        })
    }
}

mod batch;
pub use batch::{Batch, BatchWriter, Record, Records};

#[cfg(test)]
mod tests;
