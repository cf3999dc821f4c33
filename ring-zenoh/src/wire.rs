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

/// One message of a batch frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The header a single sample of this message would carry (kind [`Kind::Data`]).
    pub header: Header,
    /// The message's bytes.
    pub payload: &'a [u8],
}

/// A batch sample's frame, validated whole: reading its records cannot fail.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    header: Header,
    count: usize,
    records: &'a [u8],
}

impl<'a> Batch<'a> {
    /// Checks `frame`, the payload of a sample whose (decoded) header is `header`, from its
    /// prefix to its last byte before anything is handed out: every record inside the frame,
    /// sequence numbers increasing from the header's, reserved words zero, nothing after the
    /// last record. Nothing is allocated; the count and the lengths only bound loops over
    /// bytes that are there.
    ///
    /// # Errors
    ///
    /// [`WireError::Field`] when `header` is not a batch header, [`WireError::PayloadLength`]
    /// when `frame` is not as long as it says, [`WireError::Frame`] naming what is wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_zenoh::wire::{Batch, BatchWriter, WireError};
    /// use ring_os::prelude::DeliveryClass;
    ///
    /// let mut w = BatchWriter::new(Vec::new());
    /// w.push(7, 0, [1, 2], b"hello")?;
    /// w.push(9, 1, [3, 4], b"world")?;
    /// let (header, frame) = w.finish(DeliveryClass::Gating, 5, 0);
    /// let batch = Batch::parse(&header, &frame)?;
    /// let seqs: Vec<u64> = batch.records().map(|r| r.header.seq).collect();
    /// assert_eq!(seqs, [7, 9]);
    /// // A frame cut short is refused whole.
    /// let mut cut = header;
    /// cut.len -= 1;
    /// assert!(matches!(Batch::parse(&cut, &frame[..frame.len() - 1]), Err(WireError::Frame(_))));
    /// # Ok::<(), WireError>(())
    /// ```
    pub fn parse(header: &Header, frame: &'a [u8]) -> Result<Self, WireError> {
        if header.kind != Kind::Batch {
            return Err(WireError::Field("kind"));
        }
        if usize::try_from(header.len).ok() != Some(frame.len()) {
            return Err(WireError::PayloadLength {
                header: header.len,
                payload: frame.len(),
            });
        }
        if frame.len() > MAX_BATCH_BYTES {
            return Err(WireError::Field("len"));
        }
        let Some(records) = frame.get(BATCH_PREFIX_LEN..) else {
            return Err(WireError::Frame("shorter than its prefix"));
        };
        if u32_at(frame, 4) != 0 {
            return Err(WireError::Frame("reserved prefix word is not 0"));
        }
        let count = usize::try_from(u32_at(frame, 0)).unwrap_or(usize::MAX);
        if count == 0 {
            return Err(WireError::Frame("no records"));
        }
        if count > records.len() / RECORD_HEADER_LEN {
            return Err(WireError::Frame(
                "more records announced than the frame holds",
            ));
        }
        let batch = Self {
            header: *header,
            count,
            records,
        };
        let mut walk = batch.records();
        for _ in 0..count {
            walk.next_record()?;
        }
        if !walk.rest.is_empty() {
            return Err(WireError::Frame("bytes after the last record"));
        }
        Ok(batch)
    }

    /// The number of records (at least one).
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Never true for a parsed batch (kept for the `len` convention).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The records, in order.
    #[must_use]
    pub fn records(&self) -> Records<'a> {
        Records {
            header: self.header,
            rest: self.records,
            left: self.count,
            prev: None,
        }
    }
}

/// The records of a [`Batch`], in order.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    header: Header,
    rest: &'a [u8],
    left: usize,
    prev: Option<u64>,
}

impl<'a> Records<'a> {
    /// Reads the next record, checking it.
    fn next_record(&mut self) -> Result<Record<'a>, WireError> {
        let Some(head) = self.rest.get(..RECORD_HEADER_LEN) else {
            return Err(WireError::Frame("a record header is cut short"));
        };
        if u32_at(head, 4) != 0 {
            return Err(WireError::Frame("reserved record word is not 0"));
        }
        let seq = u64_at(head, 8);
        match self.prev {
            None if seq != self.header.seq => {
                return Err(WireError::Frame(
                    "the first record's seq is not the header's",
                ))
            }
            Some(prev) if seq <= prev => {
                return Err(WireError::Frame("record seqs do not increase"));
            }
            _ => {}
        }
        let len = u32_at(head, 0);
        let end = usize::try_from(len)
            .ok()
            .and_then(|n| n.checked_add(RECORD_HEADER_LEN));
        let (Some(payload), Some(rest)) = (
            end.and_then(|end| self.rest.get(RECORD_HEADER_LEN..end)),
            end.and_then(|end| self.rest.get(end..)),
        ) else {
            return Err(WireError::Frame("a record runs past the frame's end"));
        };
        self.rest = rest;
        self.prev = Some(seq);
        self.left = self.left.saturating_sub(1);
        Ok(Record {
            header: Header {
                kind: Kind::Data,
                class: self.header.class,
                epoch: self.header.epoch,
                seq,
                missed: u64_at(head, 16),
                meta: [u64_at(head, 24), u64_at(head, 32)],
                start: self.header.start,
                len,
                code: 0,
            },
            payload,
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.left == 0 {
            return None;
        }
        // A parsed batch was checked whole, so this does not fail; if it did, the iteration
        // would just end.
        self.next_record().ok()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// Builds a batch frame in a buffer the caller hands over (reserve it once: pushing copies
/// each message straight in, with no allocation per message).
#[derive(Debug)]
pub struct BatchWriter {
    frame: Vec<u8>,
    count: u32,
    first: u64,
    last: Option<u64>,
}

impl BatchWriter {
    /// A writer that empties `frame` and writes its prefix.
    #[must_use]
    pub fn new(mut frame: Vec<u8>) -> Self {
        frame.clear();
        frame.extend_from_slice(&[0; BATCH_PREFIX_LEN]);
        Self {
            frame,
            count: 0,
            first: 0,
            last: None,
        }
    }

    /// Records pushed so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True before the first push.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The frame's length so far, in bytes.
    #[must_use]
    pub fn frame_len(&self) -> usize {
        self.frame.len()
    }

    /// Appends a message: its origin sequence number (greater than the previous one's), what
    /// the sending bridge skipped just before it, its metadata and bytes.
    ///
    /// # Errors
    ///
    /// [`WireError::Frame`] (nothing appended) when `seq` does not increase or the frame would
    /// pass [`MAX_BATCH_BYTES`].
    pub fn push(
        &mut self,
        seq: u64,
        missed: u64,
        meta: [u64; 2],
        payload: &[u8],
    ) -> Result<(), WireError> {
        if self.last.is_some_and(|last| seq <= last) {
            return Err(WireError::Frame("record seqs do not increase"));
        }
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|_| self.frame.len() + RECORD_HEADER_LEN + payload.len() <= MAX_BATCH_BYTES);
        let Some(len) = len else {
            return Err(WireError::Frame("longer than MAX_BATCH_BYTES"));
        };
        self.frame.extend_from_slice(&len.to_le_bytes());
        self.frame.extend_from_slice(&[0; 4]);
        for word in [seq, missed, meta[0], meta[1]] {
            self.frame.extend_from_slice(&word.to_le_bytes());
        }
        self.frame.extend_from_slice(payload);
        if self.last.is_none() {
            self.first = seq;
        }
        self.last = Some(seq);
        self.count += 1;
        Ok(())
    }

    /// The buffer back (for a writer that pushed nothing, say).
    #[must_use]
    pub fn into_buffer(self) -> Vec<u8> {
        self.frame
    }

    /// The batch sample's header and payload (the frame, its count filled in).
    #[must_use]
    pub fn finish(mut self, class: DeliveryClass, epoch: u64, start: u64) -> (Header, Vec<u8>) {
        self.frame[..4].copy_from_slice(&self.count.to_le_bytes());
        let header = Header {
            kind: Kind::Batch,
            class,
            epoch,
            seq: self.first,
            missed: 0,
            meta: [0; 2],
            start,
            // At most MAX_BATCH_BYTES (`push` checks).
            len: u32::try_from(self.frame.len()).unwrap_or(u32::MAX),
            code: 0,
        };
        (header, self.frame)
    }

    /// With exactly one record, that message as a single (version-1) sample: its header and
    /// its bytes, moved to the front of the same buffer. Otherwise the writer back.
    ///
    /// # Errors
    ///
    /// `self` when the writer holds no record or more than one.
    pub fn into_single(
        mut self,
        class: DeliveryClass,
        epoch: u64,
        start: u64,
    ) -> Result<(Header, Vec<u8>), Self> {
        if self.count != 1 {
            return Err(self);
        }
        let head = &self.frame[BATCH_PREFIX_LEN..BATCH_PREFIX_LEN + RECORD_HEADER_LEN];
        let header = Header {
            kind: Kind::Data,
            class,
            epoch,
            seq: self.first,
            missed: u64_at(head, 16),
            meta: [u64_at(head, 24), u64_at(head, 32)],
            start,
            len: u32_at(head, 0),
            code: 0,
        };
        self.frame.drain(..BATCH_PREFIX_LEN + RECORD_HEADER_LEN);
        Ok((header, self.frame))
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
        assert_eq!(bad(4, 3), Err(WireError::Version(3)));
        assert_eq!(bad(4, 0), Err(WireError::Version(0)));
        // Kind 3 (batch) exists from version 2 on.
        assert_eq!(bad(5, 3), Err(WireError::Field("kind")));
        assert_eq!(bad(5, 4), Err(WireError::Field("kind")));
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
                buf[5] = (next() % 4) as u8;
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

    /// A deterministic generator (xorshift).
    fn rng(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// A valid batch of `n` records with lengths up to `max` and some gaps.
    fn batch(n: u64, max: u64, next: &mut impl FnMut() -> u64) -> (Header, Vec<u8>) {
        let mut w = BatchWriter::new(Vec::new());
        let mut seq = 100;
        for i in 0..n {
            let missed = if next() % 4 == 0 { next() % 3 } else { 0 };
            seq += missed;
            let len = (next() % (max + 1)) as usize;
            let payload: Vec<u8> = (0..len).map(|b| (b as u64 ^ i) as u8).collect();
            w.push(seq, missed, [i, !i], &payload).expect("push");
            seq += 1;
        }
        w.finish(DeliveryClass::SkipOnLag, 9, 50)
    }

    #[test]
    fn batch_round_trip() {
        let mut next = rng(0x1234_5678_9abc_def1);
        for n in [1, 2, 3, 17, 600] {
            let (header, frame) = batch(n, 130, &mut next);
            let decoded = Header::decode(&header.encode(), frame.len()).expect("header");
            assert_eq!(decoded, header);
            assert_eq!(header.encode()[4], VERSION, "a batch is a version-2 sample");
            let parsed = Batch::parse(&decoded, &frame).expect("frame");
            assert_eq!(parsed.len() as u64, n);
            let mut prev = None;
            let mut total = BATCH_PREFIX_LEN;
            for (i, r) in parsed.records().enumerate() {
                let i = i as u64;
                assert_eq!(r.header.kind, Kind::Data);
                assert_eq!(r.header.meta, [i, !i]);
                assert_eq!((r.header.epoch, r.header.start), (9, 50));
                assert_eq!(r.header.len as usize, r.payload.len());
                assert!(r
                    .payload
                    .iter()
                    .enumerate()
                    .all(|(b, &v)| v == (b as u64 ^ i) as u8));
                match prev {
                    None => assert_eq!(r.header.seq, header.seq),
                    Some(p) => assert_eq!(r.header.seq, p + 1 + r.header.missed),
                }
                prev = Some(r.header.seq);
                total += RECORD_HEADER_LEN + r.payload.len();
                // Each record is a valid single-message header of its own.
                assert_eq!(
                    Header::decode(&r.header.encode(), r.payload.len()),
                    Ok(r.header)
                );
            }
            assert_eq!(parsed.records().count() as u64, n);
            assert_eq!(total, frame.len());
        }
    }

    #[test]
    fn a_lone_record_goes_as_a_single_sample() {
        let mut w = BatchWriter::new(vec![0xEE; 3]);
        w.push(41, 2, [7, 8], b"only").expect("push");
        let (h, payload) = w
            .into_single(DeliveryClass::Gating, 3, 39)
            .expect("one record");
        assert_eq!(payload, b"only");
        assert_eq!(
            (h.kind, h.seq, h.missed, h.meta, h.len, h.start),
            (Kind::Data, 41, 2, [7, 8], 4, 39)
        );
        assert_eq!(
            h.encode()[4],
            VERSION_SINGLE,
            "what a version-1 bridge reads"
        );
        assert_eq!(Header::decode(&h.encode(), 4), Ok(h));
        let mut two = BatchWriter::new(Vec::new());
        two.push(1, 0, [0; 2], b"a").expect("push");
        two.push(2, 0, [0; 2], b"b").expect("push");
        assert!(two.into_single(DeliveryClass::Gating, 3, 0).is_err());
        let mut w = BatchWriter::new(Vec::new());
        w.push(5, 0, [0; 2], b"x").expect("push");
        assert_eq!(
            w.push(5, 0, [0; 2], b"y"),
            Err(WireError::Frame("record seqs do not increase"))
        );
        assert_eq!(w.len(), 1);
    }

    /// Overwrites the little-endian `u32` at `at`.
    fn put32(frame: &mut [u8], at: usize, v: u32) {
        frame[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// `Batch::parse` with the header's length set to the frame's.
    fn parse(mut header: Header, frame: &[u8]) -> Result<usize, WireError> {
        header.len = frame.len() as u32;
        Batch::parse(&header, frame).map(|b| b.records().count())
    }

    #[test]
    fn hostile_batch_frames_are_errors_not_panics_or_allocations() {
        let mut w = BatchWriter::new(Vec::new());
        w.push(10, 0, [1, 1], &[0xA1; 40]).expect("push");
        w.push(11, 0, [2, 2], &[]).expect("push");
        w.push(15, 3, [3, 3], &[0xA3; 40]).expect("push");
        let (header, frame) = w.finish(DeliveryClass::Gating, 4, 2);
        assert_eq!(parse(header, &frame), Ok(3));
        let rec0 = BATCH_PREFIX_LEN;
        let refused = |f: &[u8], what: &'static str| {
            assert_eq!(parse(header, f), Err(WireError::Frame(what)));
        };
        // A count no frame could hold: a naive reader reserves room for it or walks past the
        // end.
        let mut f = frame.clone();
        put32(&mut f, 0, u32::MAX);
        refused(&f, "more records announced than the frame holds");
        // More records announced than there are (but few enough to fit the frame's size).
        let mut f = frame.clone();
        put32(&mut f, 0, 4);
        refused(&f, "a record header is cut short");
        // Fewer announced than there are: the rest is trailing garbage.
        let mut f = frame.clone();
        put32(&mut f, 0, 2);
        refused(&f, "bytes after the last record");
        put32(&mut f, 0, 0);
        refused(&f, "no records");
        // A record longer than what is left: a naive slice panics.
        for len in [u32::MAX, u32::MAX - 39, 1 << 31, frame.len() as u32] {
            let mut f = frame.clone();
            put32(&mut f, rec0, len);
            assert_eq!(
                parse(header, &f),
                Err(WireError::Frame("a record runs past the frame's end")),
                "record length {len}"
            );
        }
        let mut f = frame.clone();
        put32(&mut f, 4, 1);
        refused(&f, "reserved prefix word is not 0");
        let mut f = frame.clone();
        put32(&mut f, rec0 + 4, 1);
        refused(&f, "reserved record word is not 0");
        // Sequence numbers: the first must be the header's, the others increase (a naive
        // reader computing gaps as differences underflows).
        let mut f = frame.clone();
        f[rec0 + 8] ^= 1;
        refused(&f, "the first record's seq is not the header's");
        let second = rec0 + RECORD_HEADER_LEN + u32_at(&frame, rec0) as usize;
        let mut f = frame.clone();
        f[second + 8..second + 16].copy_from_slice(&header.seq.to_le_bytes());
        refused(&f, "record seqs do not increase");
        // Every truncation of a valid frame is refused (the header's length matching it).
        for cut in 0..frame.len() {
            assert!(
                parse(header, &frame[..cut]).is_err(),
                "a frame cut at {cut} of {} accepted",
                frame.len()
            );
        }
        // The header's length must match, and a frame is bounded.
        assert!(matches!(
            Batch::parse(&header, &frame[..frame.len() - 1]),
            Err(WireError::PayloadLength { header: h, payload: p })
                if h == header.len && p == frame.len() - 1
        ));
        let big = vec![0u8; MAX_BATCH_BYTES + 1];
        assert_eq!(parse(header, &big), Err(WireError::Field("len")));
        let single = Header::data(DeliveryClass::Gating, 1, 0, 0, [0; 2]);
        assert_eq!(parse(single, &frame), Err(WireError::Field("kind")));
    }

    #[test]
    fn batch_header_fields_are_checked() {
        let mut next = rng(7);
        let (header, frame) = batch(2, 8, &mut next);
        let good = header.encode();
        let n = frame.len();
        assert_eq!(Header::decode(&good, n), Ok(header));
        let bad = |at: usize, v: u8| {
            let mut b = good;
            b[at] = v;
            Header::decode(&b, n)
        };
        assert_eq!(bad(4, VERSION_SINGLE), Err(WireError::Field("kind")));
        assert_eq!(bad(24, 1), Err(WireError::Field("missed")));
        assert_eq!(bad(40, 1), Err(WireError::Field("meta")));
        assert_eq!(bad(60, 1), Err(WireError::Field("code")));
        let with_len = |len: u32| {
            let mut b = good;
            b[56..60].copy_from_slice(&len.to_le_bytes());
            Header::decode(&b, len as usize)
        };
        let min = (BATCH_PREFIX_LEN + RECORD_HEADER_LEN) as u32;
        assert_eq!(with_len(min - 1), Err(WireError::Field("len")));
        assert_eq!(with_len(0), Err(WireError::Field("len")));
        assert_eq!(
            with_len(MAX_BATCH_BYTES as u32 + 1),
            Err(WireError::Field("len"))
        );
        assert!(with_len(min).is_ok());
    }

    #[test]
    fn mutated_batch_frames_never_panic() {
        // Random bytes flipped in valid frames: whatever parses lies inside the frame, whole.
        let mut next = rng(0x0123_4567_89ab_cdef);
        let mut accepted = 0;
        for round in 0..3_000 {
            let (header, mut frame) = batch(1 + next() % 6, 24, &mut next);
            for _ in 0..=(round % 4) {
                let at = (next() % frame.len() as u64) as usize;
                frame[at] = next() as u8;
            }
            if round % 5 == 0 {
                let cut = (next() % (frame.len() as u64 + 1)) as usize;
                frame.truncate(cut);
            }
            let mut h = header;
            h.len = frame.len() as u32;
            if let Ok(batch) = Batch::parse(&h, &frame).map(|b| b.records().collect::<Vec<_>>()) {
                accepted += 1;
                let bytes: usize = batch
                    .iter()
                    .map(|r| RECORD_HEADER_LEN + r.payload.len())
                    .sum();
                assert_eq!(BATCH_PREFIX_LEN + bytes, frame.len());
                assert!(batch.windows(2).all(|w| w[0].header.seq < w[1].header.seq));
            }
        }
        // Flips in payload bytes and metadata leave a valid frame; flips in lengths do not.
        assert!(accepted > 0, "no mutated frame parsed at all");
    }
}
