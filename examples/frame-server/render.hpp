// The frame server's synthetic renderer and its checksum: every frame differs from the last in
// every pixel, carries its frame number in its first 8 bytes, and can be checked byte for byte
// by a reader that only knows the sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

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

/// Renders frame `n` of camera `cam` as BGRA8 into `p` (w * h * 4 bytes, rows top-down) and
/// returns its word_sum, computed as it writes (so a descriptor's checksum costs no second pass
/// over the frame).
///
/// lit:        pixel (x, y) is B = (x + n) & 255, G = (y + n) & 255, R = (n + 32 cam) & 255,
///             A = 255 (camera 0 is the pattern the line protocol has always served);
/// panoramic:  B = (256 x / w + n) & 255, G = (256 y / h) & 255, R = (n + 32 cam) & 255, A = 128.
///
/// Then the first 8 bytes are overwritten with n (little-endian): the stamp.
inline uint64_t render(View view, uint8_t *p, uint32_t w, uint32_t h, uint64_t n, uint32_t cam) {
  const uint32_t alpha = view == View::lit ? 0xFF000000u : 0x80000000u;
  const uint32_t r_a = (static_cast<uint32_t>((n + 32u * cam) & 255) << 16) | alpha;
  // Pixel i (counted over the whole frame) is the low half of word i / 2 when i is even, the
  // high half when it is odd: the sums of each half, combined at the end.
  uint64_t lo = 0, hi = 0;
  for (uint32_t y = 0; y < h; y++) {
    uint8_t *row = p + static_cast<size_t>(y) * w * 4;
    const uint32_t odd = static_cast<uint32_t>((static_cast<uint64_t>(y) * w) & 1);
    uint64_t even_sum = 0, odd_sum = 0;  // pixels at even / odd x
    if (view == View::lit) {
      const uint32_t g = static_cast<uint32_t>((y + n) & 255) << 8;
      for (uint32_t x = 0; x < w; x++) {
        const uint32_t px = static_cast<uint32_t>((x + n) & 255) | g | r_a;
        std::memcpy(row + 4 * static_cast<size_t>(x), &px, 4);  // little-endian: B, G, R, A
        (x & 1 ? odd_sum : even_sum) += px;
      }
    } else {
      const uint32_t g = static_cast<uint32_t>((256ull * y / h) & 255) << 8;
      for (uint32_t x = 0; x < w; x++) {
        const uint32_t b = static_cast<uint32_t>((256ull * x / w + n) & 255);
        const uint32_t px = b | g | r_a;
        std::memcpy(row + 4 * static_cast<size_t>(x), &px, 4);
        (x & 1 ? odd_sum : even_sum) += px;
      }
    }
    // This row's x = 0 is frame pixel y * w: even or odd.
    (odd ? hi : lo) += even_sum;
    (odd ? lo : hi) += odd_sum;
  }
  const size_t len = static_cast<size_t>(w) * h * 4;
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
