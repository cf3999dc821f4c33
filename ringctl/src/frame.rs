//! Demo frames: sizes, contents and the checksum consumers verify.
//!
//! A frame is `len` bytes (a multiple of 8) seen as 64-bit words in native byte order:
//!
//! | word | content |
//! |---|---|
//! | 0 | the message's sequence number |
//! | 1 | the allocator handle of the frame's descriptor (0: none) |
//! | 2 | the frame length in bytes |
//! | 3 | the pattern seed, `mix(seq)` |
//! | 4.. | `seed + i * GOLDEN`: every word differs from the same word of any other frame |
//!
//! The checksum covers the 4 header words and, for frames up to [`FULL_CHECK_BYTES`], every
//! other word. Larger frames (a 1080p BGRA frame is 8 MB) are checked on a sample of
//! [`SAMPLE_WORDS`] words spaced evenly, starting at an offset that rotates with the sequence
//! number, plus the last word: over consecutive frames every word is covered, while each frame
//! costs a fixed ~0.5 MB of reads. The producer stores the checksum in the slot's meta word 1.

/// Words at the start of every frame.
pub const HEADER_WORDS: usize = 4;
/// Frames up to this size are checksummed whole.
pub const FULL_CHECK_BYTES: usize = 1 << 20;
/// Words sampled from larger frames.
pub const SAMPLE_WORDS: usize = 1 << 16;
/// Smallest demo frame: the header words.
pub const MIN_FRAME: usize = HEADER_WORDS * 8;
/// Bytes of a frame descriptor in the allocator arena.
pub const DESCRIPTOR_BYTES: usize = 32;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A frame size given on the command line: `WxH` (BGRA, 4 bytes a pixel) or a byte count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSize {
    /// Bytes per frame.
    pub bytes: usize,
    /// Width and height, when given as `WxH`.
    pub dims: Option<(u32, u32)>,
}

impl FrameSize {
    /// Parses `1920x1080` (BGRA) or `8294400` (bytes).
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("frame size {s:?}: give WxH (BGRA, e.g. 1920x1080) or a byte count");
        if let Some((w, h)) = s.split_once(['x', 'X']) {
            let w: u32 = w.trim().parse().map_err(|_| bad())?;
            let h: u32 = h.trim().parse().map_err(|_| bad())?;
            let bytes = usize::try_from(u64::from(w) * u64::from(h) * 4).map_err(|_| bad())?;
            return Ok(Self {
                bytes,
                dims: Some((w, h)),
            });
        }
        let bytes = s.trim().parse().map_err(|_| bad())?;
        Ok(Self { bytes, dims: None })
    }

    /// `1920x1080 BGRA (8294400 B)` or `4096 B`.
    pub fn describe(&self) -> String {
        match self.dims {
            Some((w, h)) => format!("{w}x{h} BGRA ({} B)", self.bytes),
            None => format!("{} B", self.bytes),
        }
    }
}

/// The splitmix64 finaliser: a well-mixed seed per sequence number.
pub fn mix(seq: u64) -> u64 {
    let mut z = seq.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` (a multiple of 8 bytes, at least [`MIN_FRAME`]) with frame `seq` and returns its
/// checksum.
pub fn fill(buf: &mut [u8], seq: u64, descriptor: u64) -> u64 {
    let seed = mix(seq);
    let header = [seq, descriptor, buf.len() as u64, seed];
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        let w = match header.get(i) {
            Some(&h) => h,
            None => seed.wrapping_add((i as u64).wrapping_mul(GOLDEN)),
        };
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    checksum(buf.len() / 8, seq, |i| word_at(buf, i))
}

/// Word `i` of a byte buffer (native order); 0 past the end.
pub fn word_at(buf: &[u8], i: usize) -> u64 {
    buf.get(i * 8..i * 8 + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_ne_bytes)
}

/// The checksum of an `n`-word frame of sequence `seq`, reading words with `word`.
pub fn checksum(n: usize, seq: u64, word: impl Fn(usize) -> u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    let mut eat = |i: usize| {
        h = (h ^ word(i) ^ (i as u64).rotate_left(32)).wrapping_mul(0x0000_0100_0000_01B3);
        h = h.rotate_left(29);
    };
    if n * 8 <= FULL_CHECK_BYTES {
        (0..n).for_each(&mut eat);
    } else {
        (0..HEADER_WORDS).for_each(&mut eat);
        let stride = (n - HEADER_WORDS) / SAMPLE_WORDS;
        let start = HEADER_WORDS + (seq % stride.max(1) as u64) as usize;
        (start..n).step_by(stride.max(1)).for_each(&mut eat);
        eat(n - 1);
    }
    h
}

/// What the header words of a received frame say, checked against the slot.
pub fn header_ok(len: usize, seq: u64, word: impl Fn(usize) -> u64) -> bool {
    len % 8 == 0
        && len >= MIN_FRAME
        && word(0) == seq
        && word(2) == len as u64
        && word(3) == mix(seq)
}

/// The descriptor the producer stores in the allocator for frame `seq`.
pub fn descriptor(seq: u64, len: usize, dims: Option<(u32, u32)>, sum: u64) -> [u8; 32] {
    let (w, h) = dims.unwrap_or((0, 0));
    let mut d = [0u8; DESCRIPTOR_BYTES];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    d[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    d[16..20].copy_from_slice(&w.to_le_bytes());
    d[20..24].copy_from_slice(&h.to_le_bytes());
    d[24..].copy_from_slice(&sum.to_le_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        let hd = FrameSize::parse("1920x1080").unwrap();
        assert_eq!(hd.bytes, 8_294_400);
        assert_eq!(hd.dims, Some((1920, 1080)));
        assert_eq!(FrameSize::parse("4096").unwrap().bytes, 4096);
        assert!(FrameSize::parse("12xq").is_err());
        assert!(FrameSize::parse("").is_err());
    }

    #[test]
    fn checksum_catches_a_changed_word_small_and_sampled() {
        for len in [64usize, 4096, 8_294_400] {
            let mut buf = vec![0u8; len];
            let sum = fill(&mut buf, 7, 0);
            assert_eq!(checksum(len / 8, 7, |i| word_at(&buf, i)), sum);
            assert!(header_ok(len, 7, |i| word_at(&buf, i)));
            // Word 0 (the header) is always covered; so is the last word.
            let last = len / 8 - 1;
            for victim in [0, last] {
                let mut torn = buf.clone();
                torn[victim * 8] ^= 1;
                assert_ne!(
                    checksum(len / 8, 7, |i| word_at(&torn, i)),
                    sum,
                    "{len} {victim}"
                );
            }
            // A frame of another sequence fails the header check.
            assert!(!header_ok(len, 8, |i| word_at(&buf, i)));
        }
    }
}
