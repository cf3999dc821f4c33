// The frame server's synthetic renderer and its checksum: every frame differs from the last in
// every pixel, carries its frame number in its first 8 bytes, and can be checked byte for byte
// by a reader that only knows the sum.
//
// It writes every byte of every frame, as a capture path does (an engine's read-back of the
// rendered image lands the whole frame in memory), and nothing more: a pixel is the row's part
// (the same for every pixel of a row) OR the column's part (the same for every row of a frame),
// so a row is made from one per-frame table of the column parts with wide stores, and the
// checksum is known from the table's sums and the row's part without a second pass. render-check
// (render_check.cpp, run by ci/ffi.sh and wine.sh) holds it to the per-pixel definition below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__) || defined(_M_X64) || defined(_M_AMD64)
#include <emmintrin.h>
#define FRAMES_SSE2 1
#endif

namespace frames {

/// What a camera renders: the perspective view ("lit") or an equirectangular panorama.
enum class View { lit, panoramic };

/// The sum, modulo 2^64, of `len` bytes as little-endian 64-bit words, the last one
/// zero-padded: the checksum every descriptor carries (`sum`), which reads every byte.
inline uint64_t word_sum(const uint8_t *p, size_t len) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    sum += v;
  }
  uint64_t last = 0;
  for (size_t k = 0; i + k < len; k++) last |= static_cast<uint64_t>(p[i + k]) << (8 * k);
  return sum + last;
}

/// Frames of at least this many bytes are written with non-temporal stores (on x86-64): half
/// a large last-level cache (32 MiB here), so a frame that could stay cached for its reader
/// (the BMP copy, a copying client) does; a larger one goes straight to memory, without the
/// cache first reading every line it is about to overwrite (a plain store's read for
/// ownership), as a device's DMA of a captured frame does. Measured on this project's VM:
/// streaming takes ~40% off the render at 4K and 8K, and slows render + BMP copy up to 1440p
/// (docs/benchmarks.md, "UnrealCV's client").
constexpr size_t kStreamFrom = size_t{16} << 20;

/// Writes the w pixels of `row` as `cols[x] | c`, the aligned middle in 16-byte stores (SSE2,
/// which every x86-64 has; elsewhere the compiler's), non-temporal when `stream` (render()
/// fences them before it returns).
inline void fill_row(uint8_t *row, const uint32_t *cols, uint32_t w, uint32_t c, bool stream) {
  uint32_t x = 0;
#ifdef FRAMES_SSE2
  for (; x < w && (reinterpret_cast<uintptr_t>(row + 4 * static_cast<size_t>(x)) & 15) != 0;
       x++) {
    const uint32_t px = cols[x] | c;
    std::memcpy(row + 4 * static_cast<size_t>(x), &px, 4);
  }
  const __m128i cv = _mm_set1_epi32(static_cast<int>(c));
  if (stream) {
    for (; x + 4 <= w; x += 4) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(cols + x));
      _mm_stream_si128(reinterpret_cast<__m128i *>(row + 4 * static_cast<size_t>(x)),
                       _mm_or_si128(v, cv));
    }
  } else {
    for (; x + 4 <= w; x += 4) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(cols + x));
      _mm_store_si128(reinterpret_cast<__m128i *>(row + 4 * static_cast<size_t>(x)),
                      _mm_or_si128(v, cv));
    }
  }
#else
  (void)stream;
#endif
  for (; x < w; x++) {
    const uint32_t px = cols[x] | c;
    std::memcpy(row + 4 * static_cast<size_t>(x), &px, 4);  // little-endian: B, G, R, A
  }
}

/// Renders frame `n` of camera `cam` as BGRA8 into `p` (w * h * 4 bytes, rows top-down) and
/// returns its word_sum. `cols` is scratch the caller keeps between frames (w entries: it
/// grows once, then no frame allocates); frames of `stream_from` bytes or more are streamed
/// (kStreamFrom; render_check passes 0 and SIZE_MAX to test both ways).
///
/// lit:        pixel (x, y) is B = (x + n) & 255, G = (y + n) & 255, R = (n + 32 cam) & 255,
///             A = 255 (camera 0 is the pattern the line protocol has always served);
/// panoramic:  B = (256 x / w + n) & 255, G = (256 y / h) & 255, R = (n + 32 cam) & 255, A = 128.
///
/// Then the first 8 bytes are overwritten with n (little-endian): the stamp. When it returns,
/// every byte is written and ordered before the caller's later stores (the ring's publish).
inline uint64_t render(View view, uint8_t *p, uint32_t w, uint32_t h, uint64_t n, uint32_t cam,
                       std::vector<uint32_t> &cols, size_t stream_from = kStreamFrom) {
  const size_t len = static_cast<size_t>(w) * h * 4;
  if (len == 0) return 0;
  const bool stream = len >= stream_from;
  const uint32_t alpha = view == View::lit ? 0xFF000000u : 0x80000000u;
  const uint32_t r_a = (static_cast<uint32_t>((n + 32u * cam) & 255) << 16) | alpha;
  if (cols.size() < w) cols.resize(w);
  // The column parts (B, the low byte) and their sums over even and odd x.
  uint64_t even_b = 0, odd_b = 0;
  for (uint32_t x = 0; x < w; x++) {
    const uint32_t b = view == View::lit
                           ? static_cast<uint32_t>((x + n) & 255)
                           : static_cast<uint32_t>((256ull * x / w + n) & 255);
    cols[x] = b;
    (x & 1 ? odd_b : even_b) += b;
  }
  const uint64_t evens = (w + 1) / 2, odds = w / 2;
  // Pixel i (counted over the whole frame) is the low half of word i / 2 when i is even, the
  // high half when it is odd: the sums of each half, combined at the end. A row's part has a
  // zero low byte, so cols[x] | c == cols[x] + c and a row's sums are the table's plus c each.
  uint64_t lo = 0, hi = 0;
  for (uint32_t y = 0; y < h; y++) {
    const uint32_t g = view == View::lit ? static_cast<uint32_t>((y + n) & 255)
                                         : static_cast<uint32_t>((256ull * y / h) & 255);
    const uint32_t c = g << 8 | r_a;
    fill_row(p + static_cast<size_t>(y) * w * 4, cols.data(), w, c, stream);
    const uint64_t even_sum = even_b + evens * c, odd_sum = odd_b + odds * c;
    // This row's x = 0 is frame pixel y * w: even or odd.
    const bool odd = ((static_cast<uint64_t>(y) * w) & 1) != 0;
    (odd ? hi : lo) += even_sum;
    (odd ? lo : hi) += odd_sum;
  }
#ifdef FRAMES_SSE2
  if (stream) _mm_sfence();  // the streamed rows before the stamp and the caller's publish
#endif
  uint64_t sum = lo + (hi << 32);
  if (len >= 8) {
    uint64_t first;
    std::memcpy(&first, p, 8);
    sum -= first;  // the stamp replaces the first word
    sum += n;
  }
  for (size_t i = 0; i < 8 && i < len; i++) p[i] = static_cast<uint8_t>(n >> (8 * i));
  return len >= 8 ? sum : word_sum(p, len);
}

}  // namespace frames
