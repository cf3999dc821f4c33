// Image files made from a BGRA8 frame, per request, as UnrealCV encodes what it sends:
//   BMP  a 54-byte header (BITMAPINFOHEADER, 32 bits a pixel, top-down) + the pixels as they are
//        (one copy);
//   NPY  a NumPy 1.0 header (uint8, shape (h, w, 4)) + the pixels as they are (one copy);
//   PNG  8-bit RGBA, filter 0 on every row, the zlib stream made of *stored* deflate blocks (no
//        compression): one pass that swaps B and R into the output, then Adler-32 over the rows
//        and CRC-32 (slicing-by-8) over the IDAT chunk. A PNG is ~0.03% larger than the
//        pixels, and costs about three passes over them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace frames {

/// A growable byte buffer that, unlike std::vector, does not zero what it grows into (a reply
/// buffer reused for 133 MB frames would otherwise be cleared once per request).
class Buf {
 public:
  void clear() noexcept { len_ = 0; }
  size_t size() const noexcept { return len_; }
  uint8_t *data() noexcept { return p_.get(); }
  const uint8_t *data() const noexcept { return p_.get(); }
  /// Appends `n` uninitialised bytes and returns where they start.
  uint8_t *grow(size_t n) {
    if (len_ + n > cap_) {
      size_t cap = cap_ ? cap_ : 4096;
      while (cap < len_ + n) cap *= 2;
      std::unique_ptr<uint8_t[]> p(new uint8_t[cap]);
      if (len_) std::memcpy(p.get(), p_.get(), len_);
      p_ = std::move(p);
      cap_ = cap;
    }
    uint8_t *at = p_.get() + len_;
    len_ += n;
    return at;
  }
  void append(const void *src, size_t n) {
    if (n) std::memcpy(grow(n), src, n);
  }
  void append(const std::string &s) { append(s.data(), s.size()); }

 private:
  std::unique_ptr<uint8_t[]> p_;
  size_t len_ = 0, cap_ = 0;
};

inline void put16le(uint8_t *p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put32le(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put32be(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

/// The size of the BMP header bmp_header writes.
constexpr size_t kBmpHeader = 54;

/// A BMP file header + BITMAPINFOHEADER for a top-down 32-bit w x h frame.
inline void bmp_header(uint8_t *p, uint32_t w, uint32_t h) {
  const uint32_t pixels = w * h * 4;
  std::memset(p, 0, kBmpHeader);
  p[0] = 'B';
  p[1] = 'M';
  put32le(p + 2, static_cast<uint32_t>(kBmpHeader) + pixels);  // file size
  put32le(p + 10, static_cast<uint32_t>(kBmpHeader));          // pixel data offset
  put32le(p + 14, 40);                                         // BITMAPINFOHEADER
  put32le(p + 18, w);
  put32le(p + 22, static_cast<uint32_t>(-static_cast<int32_t>(h)));  // negative: top-down
  put16le(p + 26, 1);                                                // planes
  put16le(p + 28, 32);                                               // bits per pixel
  put32le(p + 30, 0);                                                // BI_RGB
  put32le(p + 34, pixels);
}

inline void encode_bmp(Buf &out, const uint8_t *px, uint32_t w, uint32_t h) {
  const size_t len = static_cast<size_t>(w) * h * 4;
  uint8_t *p = out.grow(kBmpHeader + len);
  bmp_header(p, w, h);
  std::memcpy(p + kBmpHeader, px, len);
}

inline void encode_npy(Buf &out, const uint8_t *px, uint32_t w, uint32_t h) {
  std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(h) +
                     ", " + std::to_string(w) + ", 4), }";
  // magic (6) + version (2) + header length (2) + dict, padded with spaces to a multiple of 64
  // and ended with a newline (the NPY format's rule, so the data is aligned).
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict.push_back('\n');
  uint8_t *p = out.grow(10);
  std::memcpy(p, "\x93NUMPY\x01\x00", 8);
  put16le(p + 8, static_cast<uint16_t>(dict.size()));
  out.append(dict);
  out.append(px, static_cast<size_t>(w) * h * 4);
}

/// CRC-32 (the PNG/zlib polynomial), slicing-by-8: about 1-2 GB/s instead of ~400 MB/s.
class Crc32 {
 public:
  Crc32() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t_[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
      for (size_t s = 1; s < 8; s++) t_[s][i] = (t_[s - 1][i] >> 8) ^ t_[0][t_[s - 1][i] & 255];
  }
  uint32_t operator()(const uint8_t *p, size_t len, uint32_t crc = 0) const {
    uint32_t c = ~crc;
    for (; len >= 8; p += 8, len -= 8) {
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);  // little-endian hosts (x86_64, aarch64)
      std::memcpy(&hi, p + 4, 4);
      lo ^= c;
      c = t_[7][lo & 255] ^ t_[6][(lo >> 8) & 255] ^ t_[5][(lo >> 16) & 255] ^ t_[4][lo >> 24] ^
          t_[3][hi & 255] ^ t_[2][(hi >> 8) & 255] ^ t_[1][(hi >> 16) & 255] ^ t_[0][hi >> 24];
    }
    for (; len > 0; p++, len--) c = t_[0][(c ^ *p) & 255] ^ (c >> 8);
    return ~c;
  }

 private:
  std::array<std::array<uint32_t, 256>, 8> t_{};
};

/// Adler-32 over `len` bytes, continuing from `adler` (1 for a fresh stream).
inline uint32_t adler32(const uint8_t *p, size_t len, uint32_t adler) {
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  while (len > 0) {
    size_t n = len < 5552 ? len : 5552;  // the most bytes before b can overflow 32 bits
    len -= n;
    for (; n > 0; n--) {
      a += *p++;
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return b << 16 | a;
}

inline void png_chunk_end(Buf &out, size_t chunk_start, const Crc32 &crc) {
  // chunk_start is where the 4-byte length is; the CRC covers the type and the data.
  const size_t data_len = out.size() - chunk_start - 8;
  put32be(out.data() + chunk_start, static_cast<uint32_t>(data_len));
  const uint32_t c = crc(out.data() + chunk_start + 4, data_len + 4);
  put32be(out.grow(4), c);
}

/// Where byte `pos` of an RGBA row comes from in the BGRA row: B and R swap places.
inline size_t rgba_from_bgra(size_t pos) {
  const size_t c = pos & 3;
  return (pos & ~size_t{3}) | (c == 0 ? 2 : c == 2 ? 0 : c);
}

/// An 8-bit RGBA PNG of the BGRA frame, uncompressed (stored deflate blocks).
inline void encode_png(Buf &out, const uint8_t *px, uint32_t w, uint32_t h, const Crc32 &crc) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  out.append(sig, 8);
  size_t at = out.size();
  uint8_t *ihdr = out.grow(8 + 13);
  std::memcpy(ihdr + 4, "IHDR", 4);
  put32be(ihdr + 8, w);
  put32be(ihdr + 12, h);
  ihdr[16] = 8;  // bit depth
  ihdr[17] = 6;  // colour type: RGBA
  ihdr[18] = ihdr[19] = ihdr[20] = 0;  // deflate, adaptive filtering, no interlace
  png_chunk_end(out, at, crc);

  const size_t row = 1 + static_cast<size_t>(w) * 4;  // filter byte + pixels
  const size_t raw = row * h;
  const size_t blocks = raw == 0 ? 1 : (raw + 65534) / 65535;
  at = out.size();
  uint8_t *idat = out.grow(8 + 2 + raw + 5 * blocks + 4);
  std::memcpy(idat + 4, "IDAT", 4);
  uint8_t *z = idat + 8;
  z[0] = 0x78;  // zlib: deflate, 32 KiB window
  z[1] = 0x01;  // no preset dictionary, fastest; (0x78 << 8 | 0x01) % 31 == 0
  z += 2;
  uint32_t adler = 1;
  size_t left_in_block = 0, left = raw;
  for (uint32_t y = 0; y < h; y++) {
    const uint8_t *src = px + static_cast<size_t>(y) * w * 4;
    size_t done = 0;  // bytes of this row (filter byte included) written
    while (done < row) {
      if (left_in_block == 0) {
        const size_t n = left < 65535 ? left : 65535;
        z[0] = n == left ? 1 : 0;  // BFINAL on the last block, BTYPE 00 (stored)
        put16le(z + 1, static_cast<uint16_t>(n));
        put16le(z + 3, static_cast<uint16_t>(~n));
        z += 5;
        left_in_block = n;
      }
      size_t n = row - done < left_in_block ? row - done : left_in_block;
      uint8_t *dst = z;
      size_t k = 0;
      if (done == 0) {
        dst[k++] = 0;  // filter type 0 (none)
      }
      // Pixels from byte offset (done - 1 + k) of the row's pixel data, B and R swapped. A
      // stored block may end mid-pixel, so this goes byte by byte at the edges.
      size_t pos = done == 0 ? 0 : done - 1;  // offset into the row's pixel bytes
      for (; k < n && (pos & 3) != 0; k++, pos++) dst[k] = src[rgba_from_bgra(pos)];
      for (; k + 4 <= n; k += 4, pos += 4) {
        dst[k] = src[pos + 2];
        dst[k + 1] = src[pos + 1];
        dst[k + 2] = src[pos];
        dst[k + 3] = src[pos + 3];
      }
      for (; k < n; k++, pos++) dst[k] = src[rgba_from_bgra(pos)];
      adler = adler32(z, n, adler);
      z += n;
      done += n;
      left -= n;
      left_in_block -= n;
    }
  }
  put32be(z, adler);
  png_chunk_end(out, at, crc);
  at = out.size();
  std::memcpy(out.grow(8) + 4, "IEND", 4);
  png_chunk_end(out, at, crc);
}

}  // namespace frames
