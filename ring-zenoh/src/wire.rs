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
mod tests;
