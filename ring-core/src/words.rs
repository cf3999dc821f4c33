//! Copying bytes into and out of payload words with same-size Relaxed atomic accesses.
//!
//! A seqlock reader copies a slot while the producer may be rewriting it. Plain (non-atomic)
//! reads of memory another thread writes are a data race, which is undefined behaviour in Rust's
//! memory model even when the result is discarded; so every payload access is a Relaxed
//! `AtomicU64` load or store of a whole word. The seqlock's stamp and fences (in `consumer.rs`
//! and `producer.rs`) decide afterwards whether the copy may be used.
//!
//! # References
//! - Hans Boehm, "Can seqlocks get along with programming language memory models?" (MSPC 2012).
//! - portable-atomic `src/imp/fallback/seq_lock.rs` and crossbeam's `AtomicCell`, which read
//!   seqlock-protected data the same way.

use crate::sync::{AtomicU64, Ordering};

/// Writes `data` at byte offset `offset` of `words`. Returns `false` (and writes nothing) when
/// `offset + data.len()` exceeds the words' capacity: the bound is hard.
pub(crate) fn write(words: &[AtomicU64], offset: usize, data: &[u8]) -> bool {
    let cap = words.len() * 8;
    match offset.checked_add(data.len()) {
        Some(end) if end <= cap => {}
        _ => return false,
    }
    // Relaxed everywhere: the writer holds the slot (or the allocation) exclusively; readers
    // order these stores through the stamp's Release store or the producer's Release fence.
    let mut pos = offset;
    let mut src = data;
    // A partial first word (an unaligned offset): merge into what the word holds.
    if pos % 8 != 0 && !src.is_empty() {
        let n = (8 - pos % 8).min(src.len());
        merge(&words[pos / 8], pos % 8, &src[..n]);
        pos += n;
        src = &src[n..];
    }
    // Whole words: one store each, no per-word branches, so the loop unrolls.
    let body = src.len() / 8 * 8;
    for (w, chunk) in words[pos / 8..].iter().zip(src[..body].chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
    }
    pos += body;
    // A partial last word.
    if body < src.len() {
        merge(&words[pos / 8], 0, &src[body..]);
    }
    true
}

/// Stores `bytes` at byte `at` of `word`, keeping its other bytes (single writer).
fn merge(word: &AtomicU64, at: usize, bytes: &[u8]) {
    // Relaxed: as in `write`.
    let mut b = word.load(Ordering::Relaxed).to_ne_bytes();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    word.store(u64::from_ne_bytes(b), Ordering::Relaxed);
}

/// Copies the first `out.len()` bytes of `words` into `out` (the caller checked the length).
pub(crate) fn read(words: &[AtomicU64], out: &mut [u8]) {
    // Relaxed: the caller validates the copy with the seqlock stamp (or holds a pin).
    let body = out.len() / 8 * 8;
    let (whole, rest) = out.split_at_mut(body);
    // Zipped iterators: no bounds checks and no per-word branches, so the loop unrolls.
    for (chunk, w) in whole.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    if !rest.is_empty() {
        let b = words[body / 8].load(Ordering::Relaxed).to_ne_bytes();
        rest.copy_from_slice(&b[..rest.len()]);
    }
}

#[cfg(all(test, not(any(ring_loom, ring_shuttle))))]
mod tests {
    use super::*;

    /// Every offset and length in a 4-word area: exactly the written bytes change, the rest keep
    /// their value, out-of-range writes change nothing, and `read` returns what `write` wrote.
    #[test]
    fn write_and_read_agree_with_a_byte_model() {
        for offset in 0..=32 {
            for len in 0..=(34 - offset) {
                let words: [AtomicU64; 4] = core::array::from_fn(|i| {
                    AtomicU64::new(0x0101_0101_0101_0101 * (i as u64 + 0xa0))
                });
                let mut model = [0u8; 32];
                read(&words, &mut model);
                let data: std::vec::Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5c).collect();
                let ok = write(&words, offset, &data);
                assert_eq!(ok, offset + len <= 32, "offset {offset} len {len}");
                if ok {
                    model[offset..offset + len].copy_from_slice(&data);
                }
                let mut got = [0u8; 32];
                read(&words, &mut got);
                assert_eq!(got, model, "offset {offset} len {len}");
                let mut part = [0u8; 13];
                read(&words, &mut part);
                assert_eq!(part, model[..13]);
            }
        }
    }
}
