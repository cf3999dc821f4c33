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
///
/// On x86-64 CPUs from vendors that guarantee 16-byte atomic vector loads, long copies take
/// [`wide`]'s path; everywhere else (and under Miri, loom and shuttle) one Relaxed load per word.
///
/// # Panics
/// If `out` is longer than `words` (the callers check the length against the slot capacity).
#[inline]
pub(crate) fn read(words: &[AtomicU64], out: &mut [u8]) {
    if out.len() <= SHORT {
        read_short(words, out);
        return;
    }
    read_long(words, out);
}

/// Copies of at most this many bytes (a message line's worth on x86-64) take `read_short`.
const SHORT: usize = 96;

/// `read` of more than [`SHORT`] bytes.
#[inline(never)]
fn read_long(words: &[AtomicU64], out: &mut [u8]) {
    // One bound check up front.
    let words = &words[..out.len().div_ceil(8)];
    #[cfg(all(
        target_arch = "x86_64",
        feature = "std",
        not(miri),
        not(ring_loom),
        not(ring_shuttle)
    ))]
    if out.len() >= wide::MIN_LEN && wide::available() {
        wide::read(words, out);
        return;
    }
    read_words(words, out);
}

/// `read` for a short copy (a message line's words, say): whole words in straight-line blocks,
/// the last partial word byte by byte, no call.
///
/// # Panics
/// If `out` is longer than `words` (as `read`).
#[inline(always)]
fn read_short(words: &[AtomicU64], out: &mut [u8]) {
    let mut words = words;
    let mut out = out;
    // Whole words in straight-line blocks of 8, 4, 2 and 1 (a 64-byte message is one block:
    // 8 loads and 8 stores, no loop counter).
    while out.len() >= 64 {
        load_block::<8, 64>(&mut words, &mut out);
        // A multiple of 64 bytes (a 64-byte message) is done: one test instead of the four
        // below (6 instructions fewer for these, 2 more for 65 to 95 bytes, none below 64).
        if out.is_empty() {
            return;
        }
    }
    load_block::<4, 32>(&mut words, &mut out);
    load_block::<2, 16>(&mut words, &mut out);
    load_block::<1, 8>(&mut words, &mut out);
    let rest = out;
    if !rest.is_empty() {
        let w = &words[0];
        let bytes = w.load(Ordering::Relaxed).to_ne_bytes();
        for (to, from) in rest.iter_mut().zip(bytes) {
            *to = from;
        }
    }
}

/// One block of `read_short`: when `out` holds at least `B` bytes, copies the first `W` words
/// of `words` (`B == 8 * W`) into its first `B` bytes and steps both past them.
///
/// # Panics
/// If `words` holds fewer than `W` words then (`out` longer than `words`, as `read`).
#[inline(always)]
fn load_block<const W: usize, const B: usize>(words: &mut &[AtomicU64], out: &mut &mut [u8]) {
    const { assert!(B == 8 * W) };
    if out.len() < B {
        return;
    }
    let Some((from, words_rest)) = words.split_first_chunk::<W>() else {
        panic!("a read longer than its words");
    };
    let Some((to, out_rest)) = core::mem::take(out).split_first_chunk_mut::<B>() else {
        return; // Unreachable: the length was checked above.
    };
    // Relaxed: the caller validates the copy with the seqlock stamp (or holds a pin).
    for (chunk, w) in to.chunks_exact_mut(8).zip(from) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    *words = words_rest;
    *out = out_rest;
}

/// Stores the whole words of `data` (its first `data.len() / 8 * 8` bytes) into `words` from
/// word 0, in straight-line blocks of 8, 4, 2 and 1 words, and returns the words and the bytes
/// (fewer than 8) that are left; `None` (some words stored) when `words` is too short for them.
/// Relaxed stores: the writer's own words, inside its seqlock write window (or its allocation).
#[inline(always)]
pub(crate) fn store_whole<'w, 'd>(
    words: &'w [AtomicU64],
    data: &'d [u8],
) -> Option<(&'w [AtomicU64], &'d [u8])> {
    let mut words = words;
    let mut data = data;
    while data.len() >= 64 {
        store_block::<8, 64>(&mut words, &mut data)?;
        // A multiple of 64 bytes: done (as in `read_short`).
        if data.is_empty() {
            return Some((words, data));
        }
    }
    store_block::<4, 32>(&mut words, &mut data)?;
    store_block::<2, 16>(&mut words, &mut data)?;
    store_block::<1, 8>(&mut words, &mut data)?;
    Some((words, data))
}

/// One block of [`store_whole`]: when `data` holds at least `B` bytes, stores them into the
/// first `W` words (`B == 8 * W`) and steps both past them; `None` when `words` is shorter.
#[inline(always)]
fn store_block<const W: usize, const B: usize>(
    words: &mut &[AtomicU64],
    data: &mut &[u8],
) -> Option<()> {
    const { assert!(B == 8 * W) };
    let Some((bytes, data_rest)) = data.split_first_chunk::<B>() else {
        return Some(());
    };
    let (to, words_rest) = words.split_first_chunk::<W>()?;
    for (dst, chunk) in to.iter().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        dst.store(u64::from_ne_bytes(b), Ordering::Relaxed);
    }
    *data = data_rest;
    *words = words_rest;
    Some(())
}

/// `read` in portable Rust: copies `words` into `out` (at most `words.len() * 8` bytes) with one
/// Relaxed load per word.
fn read_words(words: &[AtomicU64], out: &mut [u8]) {
    // Relaxed: the caller validates the copy with the seqlock stamp (or holds a pin).
    let whole = out.len() / 8;
    let mut chunks = out.chunks_exact_mut(8);
    // Zipped iterators: no bounds checks and no per-word branches, so the loop unrolls. (The
    // loads stay 8-byte loads: the compiler may not merge atomic loads.)
    for (chunk, w) in (&mut chunks).zip(words) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    let rest = chunks.into_remainder();
    if let Some(w) = words.get(whole).filter(|_| !rest.is_empty()) {
        let b = w.load(Ordering::Relaxed).to_ne_bytes();
        rest.copy_from_slice(&b[..rest.len()]);
    }
}

/// The x86-64 wide path: 16-byte aligned `VMOVDQA` loads in inline assembly and 32-byte stores
/// (the word loop is bound by its 8-byte stores for payloads in cache).
#[cfg(all(
    target_arch = "x86_64",
    feature = "std",
    not(miri),
    not(ring_loom),
    not(ring_shuttle)
))]
mod wide {
    use super::{read_words, AtomicU64};
    use core::arch::asm;
    use std::sync::OnceLock;

    /// Shorter copies take the word loop (the alignment peel costs more than it saves).
    pub(super) const MIN_LEN: usize = 256;

    /// Whether `copy_blocks` may run here: the CPU is an Intel or AMD one (the vendors whose
    /// manuals make the atomicity guarantee `copy_blocks` relies on) that enumerates AVX
    /// (CPUID.01H:ECX.AVX[bit 28], the condition of that guarantee), and the OS saves the AVX
    /// state (`is_x86_feature_detected!` checks both bits and XCR0).
    pub(super) fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| std::is_x86_feature_detected!("avx") && vendor_guarantees())
    }

    /// Whether CPUID leaf 0 names GenuineIntel or AuthenticAMD.
    #[cold]
    #[allow(
        unused_unsafe,
        reason = "`__cpuid` is safe in recent Rust but an unsafe fn at the MSRV (1.85)"
    )]
    fn vendor_guarantees() -> bool {
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 is always valid and only reads.
        let id = unsafe { core::arch::x86_64::__cpuid(0) };
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&id.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&id.edx.to_le_bytes());
        vendor[8..].copy_from_slice(&id.ecx.to_le_bytes());
        &vendor == b"GenuineIntel" || &vendor == b"AuthenticAMD"
    }

    /// `super::read` with whole 64-byte blocks copied by `copy_blocks`; `available()` must
    /// have returned true. Inlined into `read_long` (its only caller): left to the
    /// compiler, whether it is depends on how the crate falls into codegen units (+25
    /// instructions per 1 KiB copy when it is not).
    #[inline]
    pub(super) fn read(words: &[AtomicU64], out: &mut [u8]) {
        // Peel a word when the source is 8 but not 16-byte aligned (the vector loads need 16),
        // then two more when that leaves the destination 16 but not 32-byte aligned (a 32-byte
        // store across a cache line costs two).
        let mut peel = (words.as_ptr() as usize / 8) % 2;
        if (out.as_ptr() as usize + peel * 8) % 32 == 16 {
            peel += 2;
        }
        if out.len() < peel * 8 + 64 {
            return read_words(words, out);
        }
        let (head, words) = words.split_at(peel);
        let (out_head, out) = out.split_at_mut(peel * 8);
        read_words(head, out_head);
        let blocks = out.len() / 64;
        let (body, tail) = words.split_at(blocks * 8);
        let (out_body, out_tail) = out.split_at_mut(blocks * 64);
        // SAFETY: `body` starts 16-byte aligned (the peel) and holds `blocks * 8` words,
        // `out_body` holds `blocks * 64` bytes and is borrowed exclusively (so it overlaps no
        // word), and `available()` returned true (our caller's contract).
        unsafe { copy_blocks(body.as_ptr(), out_body.as_mut_ptr(), blocks) };
        read_words(tail, out_tail);
    }

    /// Copies `blocks` (at least one) 64-byte blocks of words from `src` to `dst`: four 16-byte
    /// aligned `VMOVDQA` loads and two 32-byte stores a block.
    ///
    /// # Safety
    /// `src` must be 16-byte aligned and point to `blocks * 8` `AtomicU64`s; `dst` must be valid
    /// for writes of `blocks * 64` bytes that nothing else reads or writes meanwhile; and
    /// [`available`] must have returned true.
    #[target_feature(enable = "avx")]
    unsafe fn copy_blocks(src: *const AtomicU64, dst: *mut u8, blocks: usize) {
        // SAFETY: memory safety: the loads stay inside `src`'s `blocks * 8` words and the
        // stores inside `dst`'s `blocks * 64` bytes (the caller's contract; `blocks >= 1`, so
        // the `dec`/`jnz` loop runs exactly `blocks` times). The asm uses no stack, leaves every
        // register it names declared (`vzeroupper` clears the upper halves of all vector
        // registers, hence `clobber_abi("C")`: all of them are caller-saved) and needs AVX,
        // which `available()` checked (and `target_feature` lets us encode).
        //
        // No data race: the words may be written meanwhile by a producer (another thread or
        // process) with Relaxed 8-byte stores, and Rust's memory model allows only atomic
        // accesses to race. The asm block is opaque to the compiler, so what counts is that its
        // effect is one that Rust code could have: we claim it is that of a Relaxed
        // `AtomicU64::load` of each word, and of plain stores into `dst`.
        // - A `VMOVDQA` (VEX.128) load of a 16-byte aligned address is single-copy atomic on
        //   processors that enumerate AVX: Intel SDM Vol. 3A, "Guaranteed Atomic Operations"
        //   (8.1.1; 9.1.1 in recent editions): "Processors that enumerate support for Intel AVX
        //   (by setting the feature flag CPUID.01H:ECX.AVX[bit 28]) guarantee that the 16-byte
        //   memory operations performed by the following instructions will always be carried
        //   out atomically: ... VMOVAPD, VMOVAPS, and VMOVDQA when encoded with VEX.128."
        //   AMD's APM Vol. 2 ("Access Atomicity") has, since its 2022 revisions, extended the
        //   same guarantee to aligned 16-byte accesses of cacheable memory on processors with
        //   AVX (GCC bug 104688; portable-atomic's 128-bit loads rely on both). Shared-memory
        //   mappings are cacheable (write-back) memory.
        // - So each 8-byte half of a load returns the value of one 8-byte store to that word,
        //   never a mix of two: a value a Relaxed load of the word may return. (The 16-byte
        //   atomicity is more than we need. We claim nothing of the 32-byte stores: they go to
        //   `dst`, which nothing else accesses.)
        // - Ordering: a Relaxed load is a plain `MOV` on x86-64, and x86 (TSO) keeps loads in
        //   program order whatever their width, so these loads order with the caller's later
        //   stamp load as the word loop's do. The block has neither `nomem` nor `readonly`, so
        //   the compiler keeps the caller's Acquire fence and stamp re-load after it; the
        //   seqlock argument in `consumer.rs` is unchanged.
        // `available` restricts the path to the vendors whose manuals give the guarantee.
        unsafe {
            asm!(
                "2:",
                "vmovdqa xmm0, xmmword ptr [rsi]",
                "vmovdqa xmm1, xmmword ptr [rsi + 16]",
                "vmovdqa xmm2, xmmword ptr [rsi + 32]",
                "vmovdqa xmm3, xmmword ptr [rsi + 48]",
                "vinsertf128 ymm0, ymm0, xmm1, 1",
                "vinsertf128 ymm2, ymm2, xmm3, 1",
                "vmovdqu ymmword ptr [rdi], ymm0",
                "vmovdqu ymmword ptr [rdi + 32], ymm2",
                "add rsi, 64",
                "add rdi, 64",
                "dec rcx",
                "jnz 2b",
                "vzeroupper",
                inout("rsi") src => _,
                inout("rdi") dst => _,
                inout("rcx") blocks => _,
                out("ymm0") _,
                out("ymm1") _,
                out("ymm2") _,
                out("ymm3") _,
                clobber_abi("C"),
                options(nostack),
            );
        }
    }

    /// `read` at any length (`super::read` only calls it from `MIN_LEN` bytes), or `false`
    /// where the path is not available.
    #[cfg(test)]
    pub(super) fn read_if_available(words: &[AtomicU64], out: &mut [u8]) -> bool {
        if !available() {
            return false;
        }
        read(words, out);
        true
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

    /// `store_whole` at every length up to and past a 12-word area: the whole words are
    /// stored, the words after them keep their value, the partial last word's bytes and the
    /// words after the stored ones come back, and a length beyond the area gives `None`.
    #[test]
    fn store_whole_stores_every_whole_word() {
        const OLD: u64 = 0xeeee_eeee_eeee_eeee;
        for len in 0..=(13 * 8 + 7) {
            let words: [AtomicU64; 12] = core::array::from_fn(|_| AtomicU64::new(OLD));
            let data: std::vec::Vec<u8> = (0..len).map(|i| i as u8 ^ 0xa5).collect();
            let whole = len / 8;
            let got = store_whole(&words, &data);
            if whole > 12 {
                assert!(got.is_none(), "len {len}");
                continue;
            }
            let (rest_words, rest) = got.expect("fits");
            assert_eq!(rest, &data[whole * 8..], "len {len}");
            assert_eq!(rest_words.len(), 12 - whole, "len {len}");
            if let Some(first) = rest_words.first() {
                assert!(core::ptr::eq(first, &words[whole]), "len {len}");
            }
            for (i, w) in words.iter().enumerate() {
                let want = if i < whole {
                    u64::from_ne_bytes(data[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
                } else {
                    OLD
                };
                assert_eq!(w.load(Ordering::Relaxed), want, "len {len} word {i}");
            }
        }
    }

    /// The byte at `i` of `read_cases`' word area.
    fn byte(i: usize) -> u8 {
        (i as u8).wrapping_mul(7) ^ (i >> 8) as u8 ^ 0x3c
    }

    /// Runs `copy` for every length in 0..=300 (and a few longer ones), from a 16-byte aligned
    /// and an 8-but-not-16-byte aligned first word, into destinations at every offset from a
    /// 32-byte boundary; checks the copied bytes and that the bytes around them are unchanged.
    fn read_cases(copy: &mut dyn FnMut(&[AtomicU64], &mut [u8])) {
        // Under Miri (slow) fewer and shorter cases.
        let words_n: usize = if cfg!(miri) { 40 } else { 1100 };
        let area: std::vec::Vec<AtomicU64> = (0..words_n + 1)
            .map(|w| {
                AtomicU64::new(u64::from_ne_bytes(core::array::from_fn(|k| {
                    byte(w * 8 + k)
                })))
            })
            .collect();
        let offsets: std::vec::Vec<usize> = if cfg!(miri) {
            std::vec![0, 1, 7, 8, 16, 24]
        } else {
            (0..32).collect()
        };
        let long: &[usize] = if cfg!(miri) {
            &[]
        } else {
            &[511, 512, 513, 1000, 4096 + 13, 8 * 1100 - 8]
        };
        // Under Miri every 17th length (the whole range takes minutes there).
        let step = if cfg!(miri) { 17 } else { 1 };
        for len in (0..=300).step_by(step).chain(long.iter().copied()) {
            let mut buf = std::vec![0u8; len + 64];
            for src_align in [0, 8] {
                // Skip a word when needed so that the source starts `src_align` past 16.
                let skip = usize::from(area.as_ptr() as usize % 16 != src_align);
                let words = &area[skip..];
                assert_eq!(words.as_ptr() as usize % 16, src_align);
                let want: std::vec::Vec<u8> = (0..len).map(|i| byte(skip * 8 + i)).collect();
                for &off in &offsets {
                    buf.fill(0xee);
                    // `start` is `off` bytes past a 32-byte boundary.
                    let start = (off + 32 - buf.as_ptr() as usize % 32) % 32;
                    copy(words, &mut buf[start..start + len]);
                    let ctx = std::format!("len {len} src_align {src_align} dst offset {off}");
                    assert_eq!(&buf[start..start + len], &want[..], "{ctx}");
                    assert!(buf[..start].iter().all(|&b| b == 0xee), "{ctx}: before");
                    assert!(
                        buf[start + len..].iter().all(|&b| b == 0xee),
                        "{ctx}: after"
                    );
                }
            }
        }
    }

    /// `read` (whichever path it takes) at every length, source and destination alignment.
    #[test]
    fn read_copies_every_length_and_alignment() {
        read_cases(&mut |w, out| read(w, out));
    }

    /// The portable word loop alone (the path Miri, loom and other targets take).
    #[test]
    fn word_loop_copies_every_length_and_alignment() {
        read_cases(&mut |w, out| read_words(w, out));
    }

    /// The x86-64 vector path alone, also below the length `read` starts using it from.
    #[cfg(all(
        target_arch = "x86_64",
        feature = "std",
        not(miri),
        not(ring_loom),
        not(ring_shuttle)
    ))]
    #[test]
    fn wide_path_copies_every_length_and_alignment() {
        let mut ran = false;
        read_cases(&mut |w, out| ran = wide::read_if_available(w, out));
        if !ran {
            std::eprintln!("wide path unavailable on this CPU: not tested");
        }
    }
}
