// UnrealCV's wire protocol, server side, for the commands a frame grabber uses.
//
// Framing (both ways): magic 0x9E2B83C1 (uint32 LE), payload length (uint32 LE), payload.
// On connect the server sends one framed "connected to ..." message. A request's payload is
// "<id>:<command>" (the client counts ids from 0); the answer's is "<id>:<body>", where the body
// is text or, for an image, the file's bytes.
//
// Commands:
//   vget /unrealcv/status                  text, as UnrealCV's (listening, port, size), plus the
//                                          ring and the mean cost of rendering and encoding
//   vget /unrealcv/commands                the command templates below, one a line (the client
//                                          reads them on connect to know what is supported)
//   vget /unrealcv/version                 "1.1.0 (shmring frame-server)"
//   vget /camera/N/lit bmp|png|npy         the next frame, encoded per request
//   vget /camera/N/lit FILE.bmp|.png|.npy  the next frame saved to FILE; answers its path
//   vget /camera/N/lit                     saved to SAVE_DIR/lit_N_SEQ.png; answers its path
//   vget /camera/N/lit_shared              the next frame in the ring; answers its descriptor
//   vget /camera/N/panoramic bmp|png|npy W H   a W x H panorama (equirectangular), encoded
//   vget /camera/N/panoramic_shared [W H]  the same in the ring (default 2048 x 1024)
// Every frame is rendered when it is asked for, into a loaned slot of the ring, so every
// answer is a new frame, published in the ring whichever way it is sent. Errors are bodies
// starting with "error ".
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "encode.hpp"
#include "studio.hpp"

namespace unrealcv {

constexpr uint32_t kMagic = 0x9E2B83C1u;
/// The largest request payload accepted (a command line): a bigger one closes the connection.
constexpr uint32_t kMaxRequest = 64 * 1024;
constexpr uint32_t kPanoW = 2048, kPanoH = 1024;

const char *const kCommands[] = {
    "vget /unrealcv/status",
    "vget /unrealcv/commands",
    "vget /unrealcv/version",
    "vget /camera/[uint]/lit",
    "vget /camera/[uint]/lit [str]",
    "vget /camera/[uint]/lit_shared",
    "vget /camera/[uint]/panoramic [str] [uint] [uint]",
    "vget /camera/[uint]/panoramic_shared",
    "vget /camera/[uint]/panoramic_shared [uint] [uint]",
};

/// Starts a framed message in `out` (cleared): the 8-byte header, patched by `finish`.
inline void begin(frames::Buf &out) {
  out.clear();
  out.grow(8);
}
inline void finish(frames::Buf &out) {
  frames::put32le(out.data(), kMagic);
  frames::put32le(out.data() + 4, static_cast<uint32_t>(out.size() - 8));
}

/// The server's side of the protocol: answers one request payload into a framed reply.
class Handler {
 public:
  Handler(frames::Studio &studio, uint32_t w, uint32_t h, std::string save_dir)
      : studio_(studio), w_(w), h_(h), save_dir_(std::move(save_dir)) {}

  uint16_t port = 0;
  frames::Cost bmp_cost, png_cost, npy_cost;
  /// The server's time for a request, from its parse to its answer framed (the send not
  /// included: on loopback it runs the receiver's wake-up, and a busy machine may run the
  /// woken client before the send returns): a `_shared` one, and one answered with an image.
  frames::Cost shared_request_cost, image_request_cost;

  /// The greeting sent on connect.
  void greeting(frames::Buf &out) const {
    begin(out);
    out.append("connected to frame-server (shmring ring " + studio_.name() + ")");
    finish(out);
  }

  /// Answers `payload` ("<id>:<command>") into `out`, framed. Nothing here allocates once the
  /// buffers have grown (the words and the reply are reused).
  void answer(std::string_view payload, frames::Buf &out) {
    const auto t0 = std::chrono::steady_clock::now();
    begin(out);
    kind_ = Kind::other;
    const size_t colon = payload.find(':');
    const bool has_id = colon != std::string_view::npos && colon > 0 &&
                        payload.find_first_not_of("0123456789") == colon;
    // A request without an id is answered without one (the client would reject it anyway).
    const std::string_view cmd = has_id ? payload.substr(colon + 1) : payload;
    if (has_id) out.append(payload.data(), colon + 1);
    words_n_ = 0;
    for (size_t at = 0; at < cmd.size();) {
      const size_t start = cmd.find_first_not_of(" \t\r\n", at);
      if (start == std::string_view::npos) break;
      size_t end = cmd.find_first_of(" \t\r\n", start);
      if (end == std::string_view::npos) end = cmd.size();
      if (words_n_ == words_.size()) words_.emplace_back();
      words_[words_n_++].assign(cmd.data() + start, end - start);
      at = end;
    }
    std::string err;
    if (!command(out, err)) {
      out.clear();
      out.grow(8);
      if (has_id) out.append(payload.data(), colon + 1);
      out.append(err);
    }
    finish(out);
    const auto d = std::chrono::steady_clock::now() - t0;
    if (kind_ == Kind::shared) shared_request_cost.add(d);
    if (kind_ == Kind::image) image_request_cost.add(d);
  }

 private:
  frames::Studio &studio_;
  uint32_t w_, h_;
  std::string save_dir_;
  frames::Crc32 crc_;
  frames::Buf file_;  // a saved file's bytes
  std::vector<std::string> words_;  // the request's words: the first words_n_ of them
  size_t words_n_ = 0;
  enum class Kind { other, shared, image } kind_ = Kind::other;

  static bool parse_u32(std::string_view s, uint32_t &v) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    v = 0;
    for (char ch : s) v = v * 10 + static_cast<uint32_t>(ch - '0');
    return true;
  }

  static bool ends_with(const std::string &s, const std::string &tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  }

  /// Encodes `px` as `fmt` (bmp, png, npy) into `out`.
  void encode(const std::string &fmt, frames::Buf &out, const uint8_t *px, uint32_t w,
              uint32_t h) {
    const auto t0 = std::chrono::steady_clock::now();
    if (fmt == "bmp") {
      frames::encode_bmp(out, px, w, h);
      bmp_cost.add(std::chrono::steady_clock::now() - t0);
    } else if (fmt == "png") {
      frames::encode_png(out, px, w, h, crc_);
      png_cost.add(std::chrono::steady_clock::now() - t0);
    } else {
      frames::encode_npy(out, px, w, h);
      npy_cost.add(std::chrono::steady_clock::now() - t0);
    }
  }

  /// A frame encoded as `fmt` into the reply, or saved to `path` (non-empty) and named.
  bool image(frames::View view, uint32_t cam, uint32_t w, uint32_t h, const std::string &fmt,
             std::string path, frames::Buf &out, std::string &err) {
    kind_ = Kind::image;
    const bool to_file = !path.empty();
    frames::Buf &dst = to_file ? file_ : out;
    file_.clear();
    const bool auto_name = path == "*";
    const bool ok = studio_.frame(
        view, cam, w, h,
        [&](const uint8_t *px, const frames::Frame &f) {
          if (auto_name)
            path = save_dir_ + "/" + (view == frames::View::lit ? "lit_" : "panoramic_") +
                   std::to_string(cam) + "_" + std::to_string(f.stamp) + "." + fmt;
          encode(fmt, dst, px, w, h);
        },
        err);
    if (!ok || !to_file) return ok;
    FILE *fp = std::fopen(path.c_str(), "wb");
    bool wrote = fp != nullptr && std::fwrite(file_.data(), 1, file_.size(), fp) == file_.size();
    if (fp != nullptr) wrote = std::fclose(fp) == 0 && wrote;
    if (!wrote) {
      err = "error could not write " + path;
      return false;
    }
    out.append(path);
    return true;
  }

  bool shared(frames::View view, uint32_t cam, uint32_t w, uint32_t h, frames::Buf &out,
              std::string &err) {
    kind_ = Kind::shared;
    if (!studio_.frame(view, cam, w, h, nullptr, err)) return false;
    out.append(studio_.descriptor(studio_.last()));
    return true;
  }

  std::string status() {
    char buf[160];
    std::string s = "Is Listening\nClient Connected\n" + std::to_string(port) +
                    "\nConfiguration\nConfig file: (none: shmring frame-server)\nPort: " +
                    std::to_string(port) + "\nWidth: " + std::to_string(w_) +
                    "\nHeight: " + std::to_string(h_) +
                    "\nFOV: 90.000000\nEnableInput: false\nEnableRightEye: false\n";
    s += "Ring: " + studio_.name() + " (pin-only, slot size " +
         std::to_string(studio_.slot_size()) + ")\nFrames: " +
         std::to_string(studio_.published()) + "\n";
    const std::pair<const char *, const frames::Cost *> costs[] = {
        {"Render", &studio_.render_cost},
        {"Loan", &studio_.loan_cost},
        {"Publish", &studio_.publish_cost},
        {"EncodeBmp", &bmp_cost},
        {"EncodePng", &png_cost},
        {"EncodeNpy", &npy_cost},
        {"SharedRequest", &shared_request_cost},
        {"ImageRequest", &image_request_cost}};
    for (const auto &[what, c] : costs) {
      std::snprintf(buf, sizeof buf, "%sMs: %.3f mean of %llu, median %.3f\n", what,
                    c->mean_ms(), static_cast<unsigned long long>(c->count), c->median_ms());
      s += buf;
    }
    return s;
  }

  /// Runs one command; false with `err` set (an "error ..." body) when it fails.
  bool command(frames::Buf &out, std::string &err) {
    const std::vector<std::string> &words = words_;
    const size_t nwords = words_n_;
    if (nwords < 2 || words[0] != "vget") {
      err = "error Can not find a handler for this request (this frame server answers vget "
            "only: vget /unrealcv/commands lists them)";
      return false;
    }
    const std::string &path = words[1];
    if (path == "/unrealcv/status" && nwords == 2) {
      out.append(status());
      return true;
    }
    if (path == "/unrealcv/commands" && nwords == 2) {
      for (const char *c : kCommands) out.append(std::string(c) + "\n");
      return true;
    }
    if (path == "/unrealcv/version" && nwords == 2) {
      out.append(std::string("1.1.0 (shmring frame-server)"));
      return true;
    }
    // /camera/N/<what>
    constexpr std::string_view prefix = "/camera/";
    const size_t slash = path.find('/', prefix.size());
    uint32_t cam = 0;
    const std::string_view path_v = path;
    if (path_v.substr(0, prefix.size()) != prefix || slash == std::string::npos ||
        !parse_u32(path_v.substr(prefix.size(), slash - prefix.size()), cam) || cam > 7) {
      err = "error Can not find a handler for this request: " + path;
      return false;
    }
    const std::string_view what = path_v.substr(slash + 1);
    const auto is_fmt = [](const std::string &f) { return f == "bmp" || f == "png" || f == "npy"; };
    if (what == "lit" && nwords <= 3) {
      if (nwords == 2) return image(frames::View::lit, cam, w_, h_, "png", "*", out, err);
      const std::string &arg = words[2];
      if (is_fmt(arg)) return image(frames::View::lit, cam, w_, h_, arg, "", out, err);
      for (const char *ext : {".bmp", ".png", ".npy"}) {
        if (ends_with(arg, ext))
          return image(frames::View::lit, cam, w_, h_, ext + 1, arg, out, err);
      }
      err = "error lit takes bmp, png, npy or a file name ending in one of them: " + arg;
      return false;
    }
    if (what == "lit_shared" && nwords == 2)
      return shared(frames::View::lit, cam, w_, h_, out, err);
    uint32_t pw = kPanoW, ph = kPanoH;
    if (what == "panoramic" && nwords == 5 && is_fmt(words[2]) &&
        parse_u32(words[3], pw) && parse_u32(words[4], ph))
      return image(frames::View::panoramic, cam, pw, ph, words[2], "", out, err);
    if (what == "panoramic_shared" &&
        (nwords == 2 ||
         (nwords == 4 && parse_u32(words[2], pw) && parse_u32(words[3], ph))))
      return shared(frames::View::panoramic, cam, pw, ph, out, err);
    err = "error Can not find a handler for this request (vget /unrealcv/commands lists the "
          "commands this frame server answers)";
    return false;
  }
};

}  // namespace unrealcv
