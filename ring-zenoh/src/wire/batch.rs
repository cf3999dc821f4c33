//! Batch samples: the frame of records a version-2, kind-3 sample carries (see the module
//! above for the format), its checked parser and the sending bridge's writer.

use super::*;

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
