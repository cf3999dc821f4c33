//! The bridge's wire header: what travels with every payload as the Zenoh sample's attachment.
//!
//! The payload itself is the ring message's bytes, unchanged (a plain Zenoh subscriber in any
//! language sees the frame as is). The attachment is this fixed 64-byte, little-endian header
//! (`docs/BRIDGE.md` has the table):
//!
//! | offset | size | field | valid values |
//! |---|---|---|---|
//! | 0 | 4 | magic | `b"SRZB"` |
//! | 4 | 1 | version | [`VERSION`] (1) |
//! | 5 | 1 | kind | 0 data, 1 close, 2 abort |
//! | 6 | 1 | class | 0 gating, 1 latest-only, 2 skip-on-lag |
//! | 7 | 1 | reserved | 0 |
//! | 8 | 8 | epoch | the sending bridge's instance id, non-zero |
//! | 16 | 8 | seq | the message's sequence number in the origin ring |
//! | 24 | 8 | missed | messages the sending bridge skipped just before this one |
//! | 32 | 16 | meta | the message's two metadata words |
//! | 48 | 8 | start | the origin sequence number the sending bridge started reading at (≤ seq) |
//! | 56 | 4 | len | payload length in bytes (must equal the sample's payload length) |
//! | 60 | 2 | code | abort code (kind 2), else 0 |
//! | 62 | 2 | reserved | 0 |
//!
//! The far side treats the attachment as untrusted input: [`Header::decode`] checks every field
//! and returns a [`WireError`], never panics, never allocates.

use core::fmt;

use ring_core::DeliveryClass;

/// The first four bytes of every header.
pub const MAGIC: [u8; 4] = *b"SRZB";
/// The header version this crate writes and accepts.
pub const VERSION: u8 = 1;
/// Bytes in a version-1 header.
pub const HEADER_LEN: usize = 64;

/// What a sample carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One ring message.
    Data,
    /// The origin ring's producer closed it: the stream is complete.
    Close,
    /// The origin ring's stream was aborted (its producer dropped without closing) with `code`.
    Abort,
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

fn u64_at(bytes: &[u8; HEADER_LEN], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        w.copy_from_slice(src);
    }
    u64::from_le_bytes(w)
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
        b[4] = VERSION;
        b[5] = match self.kind {
            Kind::Data => 0,
            Kind::Close => 1,
            Kind::Abort => 2,
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
        if b[4] != VERSION {
            return Err(WireError::Version(b[4]));
        }
        let kind = match b[5] {
            0 => Kind::Data,
            1 => Kind::Close,
            2 => Kind::Abort,
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
        if kind != Kind::Data && len != 0 {
            return Err(WireError::Field("len"));
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
            missed: u64_at(b, 24),
            meta: [u64_at(b, 32), u64_at(b, 40)],
            start,
            len,
            code,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let mut h = Header::data(DeliveryClass::SkipOnLag, 9, u64::MAX - 1, 3, [u64::MAX, 0]);
        h.len = 1234;
        h
    }

    #[test]
    fn round_trip_every_kind_and_class() {
        for class in [
            DeliveryClass::Gating,
            DeliveryClass::LatestOnly,
            DeliveryClass::SkipOnLag,
        ] {
            let mut h = sample();
            h.class = class;
            assert_eq!(Header::decode(&h.encode(), 1234), Ok(h));
            let close = Header {
                kind: Kind::Close,
                len: 0,
                ..h
            };
            assert_eq!(Header::decode(&close.encode(), 0), Ok(close));
            let abort = Header {
                kind: Kind::Abort,
                len: 0,
                code: 77,
                ..h
            };
            assert_eq!(Header::decode(&abort.encode(), 0), Ok(abort));
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let good = sample().encode();
        let bad = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            Header::decode(&b, 1234)
        };
        assert_eq!(bad(0, b'X'), Err(WireError::Magic));
        assert_eq!(bad(4, 2), Err(WireError::Version(2)));
        assert_eq!(bad(5, 3), Err(WireError::Field("kind")));
        assert_eq!(bad(6, 3), Err(WireError::Field("class")));
        assert_eq!(bad(7, 1), Err(WireError::Field("reserved")));
        assert_eq!(bad(63, 1), Err(WireError::Field("reserved")));
        assert_eq!(bad(60, 1), Err(WireError::Field("code")));
        assert_eq!(bad(48, 0xff), Err(WireError::Field("start")));
        let mut zero_epoch = good;
        zero_epoch[8..16].fill(0);
        assert_eq!(
            Header::decode(&zero_epoch, 1234),
            Err(WireError::Field("epoch"))
        );
        assert_eq!(
            Header::decode(&good[..63], 1234),
            Err(WireError::Length(63))
        );
        assert_eq!(
            Header::decode(&good, 1233),
            Err(WireError::PayloadLength {
                header: 1234,
                payload: 1233
            })
        );
        let close_with_len = Header {
            kind: Kind::Close,
            ..sample()
        };
        assert_eq!(
            Header::decode(&close_with_len.encode(), 1234),
            Err(WireError::Field("len"))
        );
    }

    #[test]
    fn garbage_never_panics() {
        // A small deterministic generator (xorshift): every length up to two headers, random
        // bytes, and random bytes behind a valid magic and version.
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut accepted = 0;
        for round in 0..20_000 {
            let len = (next() % (2 * HEADER_LEN as u64 + 1)) as usize;
            let mut buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 && len >= 8 {
                buf[..4].copy_from_slice(&MAGIC);
                buf[4] = VERSION;
                buf[5] = (next() % 3) as u8;
                buf[6] = (next() % 3) as u8;
            }
            let payload = (next() % 4096) as usize;
            if let Ok(h) = Header::decode(&buf, payload) {
                accepted += 1;
                assert_eq!(h.len as usize, payload);
                assert_eq!(Header::decode(&h.encode(), payload), Ok(h));
            }
        }
        // Random bytes essentially never form a valid header (the reserved bytes, the length).
        assert!(accepted < 10, "{accepted} random headers accepted");
    }
}
