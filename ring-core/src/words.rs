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
    let mut pos = offset;
    let mut src = data;
    // Relaxed everywhere: the writer holds the slot (or the allocation) exclusively; readers
    // order these stores through the stamp's Release store or the producer's Release fence.
    while !src.is_empty() {
        let word = &words[pos / 8];
        let in_word = pos % 8;
        let n = (8 - in_word).min(src.len());
        let bytes = if n == 8 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&src[..8]);
            b
        } else {
            let mut b = word.load(Ordering::Relaxed).to_ne_bytes();
            b[in_word..in_word + n].copy_from_slice(&src[..n]);
            b
        };
        word.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
        pos += n;
        src = &src[n..];
    }
    true
}

/// Copies the first `out.len()` bytes of `words` into `out` (the caller checked the length).
pub(crate) fn read(words: &[AtomicU64], out: &mut [u8]) {
    // Relaxed: the caller validates the copy with the seqlock stamp (or holds a pin).
    let mut chunks = out.chunks_exact_mut(8);
    let mut i = 0;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&words[i].load(Ordering::Relaxed).to_ne_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let b = words[i].load(Ordering::Relaxed).to_ne_bytes();
        rest.copy_from_slice(&b[..rest.len()]);
    }
}
