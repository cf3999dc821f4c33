// Holds render.hpp's frames to their per-pixel definition (its header comment): every byte of
// frames of odd and even sizes, both views, several cameras and frame numbers, written at
// destinations of every alignment (the 16-byte stores of a row's middle, streamed and not, and
// its plain head and tail), with one column table reused across sizes as the server does; and
// each returned checksum against word_sum over the bytes written. Prints the first difference
// and exits 1.
//   render-check            (built by CMakeLists.txt; run by ci/ffi.sh and wine.sh)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "render.hpp"

namespace {

/// Byte i of frame n (w x h, `view`, camera `cam`), straight from the definition.
uint8_t expected(frames::View view, uint32_t w, uint32_t h, uint64_t n, uint32_t cam, size_t i) {
  if (i < 8) return static_cast<uint8_t>(n >> (8 * i));
  const size_t px = i / 4;
  const uint64_t x = px % w, y = px / w;
  const bool lit = view == frames::View::lit;
  switch (i % 4) {
    case 0:
      return static_cast<uint8_t>(lit ? x + n : 256 * x / w + n);
    case 1:
      return static_cast<uint8_t>(lit ? y + n : 256 * y / h);
    case 2:
      return static_cast<uint8_t>(n + 32 * cam);
    default:
      return lit ? 255 : 128;
  }
}

}  // namespace

int main() {
  const uint32_t sizes[][2] = {{1, 1}, {1, 7}, {2, 1}, {3, 5}, {7, 3}, {17, 9},
                               {320, 240}, {641, 3}, {1023, 2}, {5, 64}};
  const uint64_t numbers[] = {0, 1, 254, 255, 256, (1ull << 40) + 77};
  std::vector<uint32_t> cols;  // shared by every frame, as a Studio's
  std::vector<uint8_t> buf;
  long frames_checked = 0;
  for (const auto &sz : sizes) {
    const uint32_t w = sz[0], h = sz[1];
    const size_t len = static_cast<size_t>(w) * h * 4;
    buf.assign(len + 64, 0);
    for (size_t offset : {size_t{0}, size_t{4}, size_t{8}, size_t{12}, size_t{1}}) {
      for (frames::View view : {frames::View::lit, frames::View::panoramic}) {
        for (uint32_t cam : {0u, 3u, 7u}) {
          for (uint64_t n : numbers) {
            // Streamed (non-temporal stores) on even frame numbers, plain on odd ones.
            const size_t stream_from = n % 2 == 0 ? 0 : SIZE_MAX;
            // Align the frame to 16 bytes plus `offset` (the vector's own alignment is 8 or 16).
            uint8_t *base = buf.data() + ((16 - reinterpret_cast<uintptr_t>(buf.data()) % 16) % 16);
            uint8_t *p = base + offset;
            const uint64_t sum = frames::render(view, p, w, h, n, cam, cols, stream_from);
            for (size_t i = 0; i < len; i++) {
              const uint8_t want = expected(view, w, h, n, cam, i);
              if (p[i] != want) {
                std::printf("render-check: %ux%u %s cam %u frame %llu (offset %zu): byte %zu "
                            "is %u, not %u\n",
                            w, h, view == frames::View::lit ? "lit" : "panoramic", cam,
                            static_cast<unsigned long long>(n), offset, i, unsigned{p[i]},
                            unsigned{want});
                return 1;
              }
            }
            if (sum != frames::word_sum(p, len)) {
              std::printf("render-check: %ux%u frame %llu: render's sum %llu, the bytes' %llu\n",
                          w, h, static_cast<unsigned long long>(n),
                          static_cast<unsigned long long>(sum),
                          static_cast<unsigned long long>(frames::word_sum(p, len)));
              return 1;
            }
            frames_checked++;
          }
        }
      }
    }
  }
  std::printf("render-check: %ld frames equal to their definition and checksum\n",
              frames_checked);
  return 0;
}
