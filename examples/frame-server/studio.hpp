// The frame server's renderer side: renders each requested frame into a loaned slot of the
// pin-only ring (no staging copy), lets the caller encode it while the slot is still the
// server's, publishes it, and describes it as JSON. Keeps the cost of each step for
// `vget /unrealcv/status`.
#pragma once

#include <shmring.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "render.hpp"

namespace frames {

/// One frame the server published.
struct Frame {
  uint64_t seq = 0;   // the ring's sequence number (Loan::send)
  uint64_t stamp = 0; // the frame number in its first 8 bytes (== seq: one publisher, from 0)
  uint64_t sum = 0;   // word_sum of its bytes (render computes it as it writes)
  uint32_t w = 0, h = 0, cam = 0;
  View view = View::lit;
  size_t bytes() const { return static_cast<size_t>(w) * h * 4; }
};

/// Nanoseconds spent and how often, per step, with the last kSamples durations kept for a
/// median (a mean alone is moved by the times the server was descheduled on a busy machine).
struct Cost {
  static constexpr size_t kSamples = 4096;
  uint64_t ns = 0, count = 0;
  std::vector<uint32_t> samples;  // ns, capped at ~4.3 s; reserved once, never reallocated
  Cost() { samples.reserve(kSamples); }
  void add(std::chrono::steady_clock::duration d) {
    const auto n =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
    ns += n;
    const uint32_t kept = n > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(n);
    if (samples.size() < kSamples) {
      samples.push_back(kept);
    } else {
      samples[count % kSamples] = kept;
    }
    count++;
  }
  double mean_ms() const { return count ? static_cast<double>(ns) / count / 1e6 : 0.0; }
  /// The median of the kept samples (the upper one of an even count).
  double median_ms() const {
    if (samples.empty()) return 0.0;
    std::vector<uint32_t> v = samples;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2] / 1e6;
  }
};

class Studio {
 public:
  Studio(std::string name, shmring::Publisher pub, uint32_t slot_size)
      : name_(std::move(name)), pub_(std::move(pub)), slot_size_(slot_size) {}

  const std::string &name() const { return name_; }
  uint32_t slot_size() const { return slot_size_; }
  const Frame &last() const { return last_; }
  bool have_frame() const { return have_; }
  uint64_t published() { return pub_.published(); }
  Cost render_cost;   // the render, its checksum included
  Cost loan_cost;     // waiting for a free slot (a reader pinning every slot shows here)
  Cost publish_cost;  // length, metadata and the publish

  /// Renders the next frame of `cam` (w x h, `view`) into a loan, runs `encode(pixels, frame)`
  /// while the slot is still ours (an encoding copies from it), publishes it. Returns false
  /// with `err` set when it cannot.
  bool frame(View view, uint32_t cam, uint32_t w, uint32_t h,
             const std::function<void(const uint8_t *, const Frame &)> &encode,
             std::string &err) {
    using clock = std::chrono::steady_clock;
    if (w == 0 || h == 0 || static_cast<uint64_t>(w) * h * 4 > slot_size_) {
      err = "error frame " + std::to_string(w) + "x" + std::to_string(h) +
            " does not fit the ring's slots (" + std::to_string(slot_size_) +
            " bytes): start frame-server with a larger size or --slot-bytes";
      return false;
    }
    Frame f;
    f.view = view;
    f.cam = cam;
    f.w = w;
    f.h = h;
    f.stamp = pub_.published();  // the next sequence number (asked before the loan: a
                                 // publisher with a loan out takes no other call)
    const auto t_loan = clock::now();
    auto loan = pub_.loan(std::chrono::seconds(2));
    loan_cost.add(clock::now() - t_loan);
    if (!loan) {
      err = "error the ring stayed full for 2 s (a reader holds every slot pinned)";
      return false;
    }
    auto out = loan->data();
    auto *p = reinterpret_cast<uint8_t *>(out.data);
    const auto t0 = clock::now();
    f.sum = render(view, p, w, h, f.stamp, cam, cols_);
    render_cost.add(clock::now() - t0);
    if (encode) encode(p, f);
    const auto t1 = clock::now();
    loan->set_len(f.bytes());
    loan->set_meta(f.stamp, static_cast<uint64_t>(w) << 32 | h);
    f.seq = loan->send();
    publish_cost.add(clock::now() - t1);
    last_ = f;
    have_ = true;
    return true;
  }

  /// The frame's descriptor: the fields UnrealCV's client reads for a shared-memory frame
  /// (`name`, `num_bytes`, `shape`, `dtype`) and the ring's own (`ring`, `seq`, `stamp`, `sum`).
  /// Made in a buffer the Studio reuses (valid until the next call).
  const std::string &descriptor(const Frame &f) {
    std::string &s = desc_;
    s.clear();
    const auto num = [&s](const char *key, uint64_t v) {
      s += key;
      s += std::to_string(v);
    };
    s += "{\"name\":\"";
    s += name_;
    num("\",\"num_bytes\":", f.bytes());
    num(",\"shape\":[", f.h);
    num(",", f.w);
    s += ",4],\"dtype\":\"uint8\",\"ring\":\"";
    s += name_;
    num("\",\"seq\":", f.seq);
    num(",\"stamp\":", f.stamp);
    num(",\"sum\":", f.sum);
    num(",\"width\":", f.w);
    num(",\"height\":", f.h);
    num(",\"format\":\"BGRA8\",\"camera\":", f.cam);
    s += f.view == View::lit ? ",\"view\":\"lit\"}" : ",\"view\":\"panoramic\"}";
    return s;
  }

  void close() { pub_.close(); }

 private:
  std::string name_;
  shmring::Publisher pub_;
  uint32_t slot_size_;
  Frame last_;
  bool have_ = false;
  std::vector<uint32_t> cols_;  // render's per-frame column table
  std::string desc_;            // descriptor's buffer
};

}  // namespace frames
