//! Writing and reading allocation bytes: the hard-bounded writer and the copy-out readers.
//!
//! Arena bytes are packed 8 to a word, little-endian, and only ever touched as whole atomic
//! words (`Relaxed`): a seqlock reader in another process may load them while the producer
//! stores, so no `&[u8]` is ever formed over them. The writer zero-pads the rest of the word
//! it ends in.

use super::layout::{GRANULE_BYTES, GRANULE_WORDS};
use super::ops::Snap;
use super::{AllocError, Allocation, Allocator};
use crate::sync::{fence, AtomicU64, Ordering};

/// A writer confined to one allocation's reservation: [`write`](Self::write) appends bytes and
/// refuses, writing nothing, any write that would go past the allocation's `len`.
#[derive(Debug)]
pub struct BoundedWriter<'w> {
    /// The allocation's granules (at least `reserved` bytes).
    words: &'w [AtomicU64],
    /// Bytes reserved (the allocation's requested length).
    reserved: u64,
    /// Bytes written so far.
    pos: u64,
}

impl BoundedWriter<'_> {
    /// Appends `data` at the current position.
    ///
    /// # Errors
    ///
    /// [`AllocError::Overflow`] when `data` does not fit in what is left of the reservation;
    /// nothing is written then and the position does not move.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ring_core::AtomicU64;
    /// use ring_core::arena::{DEFAULT_MAX_LIVE, region_len, AllocConfig, AllocError, Allocator};
    /// # let words: Vec<AtomicU64> =
    /// #     (0..region_len(1024, DEFAULT_MAX_LIVE).unwrap() / 8).map(|_| AtomicU64::new(0)).collect();
    /// let mut alloc = Allocator::init(&words, AllocConfig::new(1024))?;
    /// let a = alloc.alloc(5, 0, 0)?;
    /// let mut w = alloc.writer(&a)?;
    /// w.write(b"hel")?;
    /// assert_eq!(w.write(b"lo!"), Err(AllocError::Overflow { reserved: 5, attempted: 6 }));
    /// w.write(b"lo")?;
    /// let mut out = [0u8; 5];
    /// assert_eq!(alloc.read(&a, &mut out)?, 5);
    /// assert_eq!(&out, b"hello");
    /// # Ok::<(), AllocError>(())
    /// ```
    pub fn write(&mut self, data: &[u8]) -> Result<(), AllocError> {
        let attempted = u64::try_from(data.len())
            .ok()
            .and_then(|n| self.pos.checked_add(n));
        let overflow = AllocError::Overflow {
            reserved: self.reserved,
            attempted: attempted.unwrap_or(u64::MAX),
        };
        let end = attempted.filter(|&e| e <= self.reserved).ok_or(overflow)?;
        // Check the words exist before storing any, so a refusal writes nothing.
        let last_word = if end == 0 { 0 } else { (end - 1) / 8 };
        if usize::try_from(last_word)
            .ok()
            .and_then(|i| self.words.get(i))
            .is_none()
        {
            return Err(overflow);
        }
        let mut pos = self.pos;
        let mut rest = data;
        while !rest.is_empty() {
            let Some(word) = usize::try_from(pos / 8)
                .ok()
                .and_then(|i| self.words.get(i))
            else {
                return Err(overflow); // unreachable: checked above
            };
            let off = (pos % 8) as usize;
            let take = (8 - off).min(rest.len());
            let mut bytes = if off == 0 {
                [0; 8]
            } else {
                // Relaxed: the producer reads back its own earlier store.
                word.load(Ordering::Relaxed).to_le_bytes()
            };
            let (head, tail) = rest.split_at(take);
            for (dst, src) in bytes.iter_mut().skip(off).zip(head) {
                *dst = *src;
            }
            for b in bytes.iter_mut().skip(off + take) {
                *b = 0;
            }
            // Relaxed: the ring protocol publishes the payload (module doc).
            word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
            pos += take as u64;
            rest = tail;
        }
        self.pos = end;
        Ok(())
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Bytes the reservation still takes.
    pub fn remaining(&self) -> u64 {
        self.reserved - self.pos
    }

    /// The reservation's size in bytes.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }
}

impl<'a> Allocator<'a> {
    /// The arena words of `a` after checking it is the live allocation its handle names, with
    /// the snapshot's meta word for a later re-check.
    fn words_of(&self, a: &Allocation) -> Result<(&'a [AtomicU64], u32), AllocError> {
        let invalid = AllocError::InvalidHandle { handle: a.handle };
        let (idx, generation) = super::entry::split_handle(a.handle);
        if idx >= self.geometry.max_live {
            return Err(invalid);
        }
        match self.snapshot(idx)? {
            Snap::Live {
                meta,
                first,
                len,
                granules,
                ..
            } if meta.generation == generation
                && len == a.len
                && Some(a.offset) == first.checked_mul(GRANULE_BYTES) =>
            {
                // In bounds: snapshot checked first + granules <= geometry.granules, and the
                // arena holds 8 words per granule.
                let start = usize::try_from(first * GRANULE_WORDS).map_err(|_| invalid)?;
                let n = usize::try_from(granules * GRANULE_WORDS).map_err(|_| invalid)?;
                let words = start
                    .checked_add(n)
                    .and_then(|end| self.arena.get(start..end))
                    .ok_or(AllocError::Corrupt {
                        what: "entry range",
                        index: u64::from(idx),
                    })?;
                Ok((words, idx))
            }
            _ => Err(invalid),
        }
    }

    /// A writer for the live allocation `a`, positioned at its start. Borrowing the allocator
    /// mutably keeps the allocation from being freed while the writer exists.
    ///
    /// # Errors
    ///
    /// [`AllocError::InvalidHandle`] when `a` is not a live allocation of this allocator (or its
    /// offset/length do not match), [`AllocError::Corrupt`].
    pub fn writer(&mut self, a: &Allocation) -> Result<BoundedWriter<'_>, AllocError> {
        let (words, _) = self.words_of(a)?;
        Ok(BoundedWriter {
            words,
            reserved: a.len,
            pos: 0,
        })
    }

    /// Copies the first `out.len().min(a.len)` bytes of `a` into `out` and returns that count.
    /// Words are loaded `Relaxed`; afterwards the entry is re-checked, so an allocation freed
    /// (or freed and reused) during the copy is reported, not returned. Whether the producer
    /// was still writing `a` is the ring protocol's to tell.
    ///
    /// # Errors
    ///
    /// [`AllocError::InvalidHandle`] (not live, mismatched, or freed during the copy),
    /// [`AllocError::Corrupt`].
    pub fn read(&self, a: &Allocation, out: &mut [u8]) -> Result<usize, AllocError> {
        let (words, idx) = self.words_of(a)?;
        let n = usize::try_from(a.len).map_or(out.len(), |len| len.min(out.len()));
        for (chunk, word) in out[..n].chunks_mut(8).zip(words) {
            // Relaxed: validated by the re-check below.
            let bytes = word.load(Ordering::Relaxed).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        self.recheck(a, idx)?;
        Ok(n)
    }

    /// Copies the first `out.len().min(ceil(a.len / 8))` words of `a` (little-endian byte
    /// packing, the final partial word zero-padded by the writer) and returns that count.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn read_words(&self, a: &Allocation, out: &mut [u64]) -> Result<usize, AllocError> {
        let (words, idx) = self.words_of(a)?;
        let n = usize::try_from(a.len.div_ceil(8)).map_or(out.len(), |w| w.min(out.len()));
        for (dst, word) in out[..n].iter_mut().zip(words) {
            // Relaxed: validated by the re-check below.
            *dst = word.load(Ordering::Relaxed);
        }
        self.recheck(a, idx)?;
        Ok(n)
    }

    /// After a copy: fails if entry `idx` no longer holds `a`.
    fn recheck(&self, a: &Allocation, idx: u32) -> Result<(), AllocError> {
        // Acquire fence: pairs with the fence(Release) in `alloc` before a reused entry's
        // rewrite; if the copy saw bytes written for a later allocation, the snapshot below sees
        // that allocation's meta (or the free before it).
        fence(Ordering::Acquire);
        match self.snapshot(idx)? {
            Snap::Live { meta, .. }
                if super::entry::split_handle(a.handle).1 == meta.generation =>
            {
                Ok(())
            }
            _ => Err(AllocError::InvalidHandle { handle: a.handle }),
        }
    }
}
