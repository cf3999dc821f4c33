// A simulator's capture endpoint in miniature, as an Unreal Engine plugin would be: renders
// synthetic BGRA frames straight into loaned slots of a pin-only ring (no staging copy) and
// answers
//   - on a loopback TCP port (--tcp), UnrealCV's protocol (unrealcv.hpp): the real `unrealcv`
//     Python client connects unchanged and gets frames as BMP/PNG/NPY files or, for the
//     `_shared` commands, a JSON descriptor of the frame in the ring;
//   - on a Unix socket, a line protocol (below), which `ringctl grab` speaks.
//
//   frame-server <ring-name> <socket-path> [width height] [--tcp PORT] [--slot-bytes N]
//                [--save-dir DIR]
//
// A socket path of "-" serves no line protocol (Windows has only this: net_win.hpp).
// PORT 0 picks a free port; the first line printed names it:
//   serving <ring> on <socket-path> (WxH BGRA8)[ tcp 127.0.0.1:<port>]
// The ring has 4 slots of max(W*H*4, N) bytes (N defaults to a 2048x1024 panorama's 8 MiB);
// DIR is where `vget /camera/N/lit [FILE]` saves (default $TMPDIR or /tmp).
//
// Line protocol: one request line, one answer, on any connection (several may be open at once):
//   "frame\n"  renders the next frame n into a loan, publishes it, and answers its descriptor
//              {"name":"<ring>","num_bytes":B,"shape":[H,W,4],"dtype":"uint8","ring":"<ring>",
//               "seq":n,"stamp":n,"sum":S,"width":W,"height":H,"format":"BGRA8",...}
//   "latest\n" answers the descriptor of the last frame "frame" rendered (nothing is rendered)
//   "bmp\n"    answers that frame as a BMP file: a 54-byte header (BITMAPINFOHEADER, 32 bits a
//              pixel, top-down: negative height) and the W*H*4 pixel bytes exactly as in the
//              ring; the file size in the header tells the reader how much to read
//   "quit\n"   answers {"bye":true} and stops the server
// Errors are answered as {"error":"..."} lines. "latest" and "bmp" serve the frame already
// rendered (its BMP is prepared when "frame" renders it), so a client timing them measures the
// transport; UnrealCV requests render and encode per request, as an engine does.
//
// Frames: see render.hpp (the first 8 bytes hold n; metadata words {n, width << 32 | height});
// S is word_sum, the sum mod 2^64 of the frame as little-endian 64-bit words, so a reader can
// check every byte. SIGINT/SIGTERM stop the server cleanly (the ring's name is removed).
#include <shmring.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "encode.hpp"
#include "net.hpp"
#include "studio.hpp"
#include "unrealcv.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Conn {
  net::Socket fd;
  bool ucv;  // UnrealCV's framed protocol (TCP), else the line protocol (Unix)
  std::string in;
};

/// The line protocol (the header comment), over the Studio.
struct LineProtocol {
  frames::Studio &studio;
  uint32_t w, h;
  frames::Buf bmp;  // the last "frame" as a BMP file
  frames::Frame frame;
  bool have_frame = false;

  /// Answers one request; false to stop the server. `close_conn` is set on a write failure.
  bool answer(net::Socket fd, const std::string &req, bool &close_conn) {
    std::string reply;
    bool running = true;
    std::string err;
    if (req == "frame") {
      const bool ok = studio.frame(frames::View::lit, 0, w, h,
                                   [&](const uint8_t *px, const frames::Frame &) {
                                     bmp.clear();
                                     frames::encode_bmp(bmp, px, w, h);
                                   },
                                   err);
      if (ok) {
        frame = studio.last();
        have_frame = true;
        reply = studio.descriptor(frame);
      } else {
        reply = "{\"error\":\"" + err + "\"}";
      }
    } else if (req == "latest" || req == "bmp") {
      if (!have_frame) {
        reply = "{\"error\":\"no frame rendered yet: send \\\"frame\\\" first\"}";
      } else if (req == "latest") {
        reply = studio.descriptor(frame);
      } else {
        if (!net::send_all(fd, bmp.data(), bmp.size())) close_conn = true;
        return true;
      }
    } else if (req == "quit") {
      running = false;
      reply = "{\"bye\":true}";
    } else {
      reply = "{\"error\":\"unknown request\"}";
    }
    reply.push_back('\n');
    if (!net::send_all(fd, reply.data(), reply.size())) close_conn = true;
    return running;
  }
};

/// Takes the complete UnrealCV messages out of `c.in` and answers each; false when the
/// connection must close (a bad magic number, an oversized request, a write failure).
bool serve_ucv(Conn &c, unrealcv::Handler &handler, frames::Buf &reply) {
  size_t at = 0;
  bool ok = true;
  while (ok && c.in.size() - at >= 8) {
    uint32_t magic, len;
    std::memcpy(&magic, c.in.data() + at, 4);  // little-endian hosts
    std::memcpy(&len, c.in.data() + at + 4, 4);
    if (magic != unrealcv::kMagic || len > unrealcv::kMaxRequest) {
      ok = false;
      break;
    }
    if (c.in.size() - at - 8 < len) break;
    handler.answer(std::string_view(c.in).substr(at + 8, len), reply);
    at += 8 + static_cast<size_t>(len);
    ok = net::send_all(c.fd, reply.data(), reply.size());
  }
  c.in.erase(0, at);
  return ok;
}

}  // namespace

int main(int argc, char **argv) try {
  std::vector<std::string> pos;
  long tcp_port = -1;
  unsigned long long slot_bytes = static_cast<unsigned long long>(unrealcv::kPanoW) *
                                  unrealcv::kPanoH * 4;
  const char *tmpdir = std::getenv("TMPDIR");
  std::string save_dir = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--tcp") == 0 && i + 1 < argc) {
      tcp_port = std::strtol(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--slot-bytes") == 0 && i + 1 < argc) {
      slot_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--save-dir") == 0 && i + 1 < argc) {
      save_dir = argv[++i];
    } else {
      pos.emplace_back(argv[i]);
    }
  }
  if ((pos.size() != 2 && pos.size() != 4) || tcp_port > 65535) {
    std::fprintf(stderr,
                 "usage: frame-server <ring-name> <socket-path> [width height] [--tcp PORT] "
                 "[--slot-bytes N] [--save-dir DIR]\n");
    return 2;
  }
  const std::string path = pos[1];
  const uint32_t w = pos.size() == 4 ? static_cast<uint32_t>(std::strtoul(pos[2].c_str(), nullptr, 10)) : 640;
  const uint32_t h = pos.size() == 4 ? static_cast<uint32_t>(std::strtoul(pos[3].c_str(), nullptr, 10)) : 480;
  const unsigned long long frame_bytes = static_cast<unsigned long long>(w) * h * 4;
  if (slot_bytes < frame_bytes) slot_bytes = frame_bytes;
  // The largest slot ring-os takes, less room for a BMP header in a 32-bit file size.
  if (w == 0 || h == 0 || slot_bytes > 0xFFFFFFF8ull - frames::kBmpHeader) {
    std::fprintf(stderr, "frame-server: bad size %ux%u (or --slot-bytes)\n", w, h);
    return 2;
  }
  shmring::config cfg;
  cfg.slots = 4;
  cfg.slot_size = static_cast<uint32_t>(slot_bytes);
  cfg.pin_only = true;  // readers pin, so the server may write in place
  auto ring = shmring::Ring::create(pos[0], cfg);
  frames::Studio studio(pos[0], ring.publisher(), cfg.slot_size);
  LineProtocol line{studio, w, h, {}, {}, false};
  unrealcv::Handler ucv(studio, w, h, save_dir);

  if (!net::init(on_signal)) {
    std::fprintf(stderr, "frame-server: could not set up sockets and signals\n");
    return 1;
  }
  // listeners[0] is the line protocol's Unix socket unless the path is "-"; then TCP.
  std::vector<net::PollFd> listeners;
  const bool line_socket = path != "-";
  if (line_socket) {
    net::Socket ufd = net::listen_unix(path);
    if (ufd == net::kInvalid) return 1;
    listeners.push_back({ufd, POLLIN, 0});
  }
  const size_t tcp_index = listeners.size();
  uint16_t bound = 0;
  if (tcp_port >= 0) {
    net::Socket tfd = net::listen_tcp(static_cast<uint16_t>(tcp_port), bound);
    if (tfd == net::kInvalid) return 1;
    listeners.push_back({tfd, POLLIN, 0});
    ucv.port = bound;
  }
  if (listeners.empty()) {
    std::fprintf(stderr, "frame-server: nothing to serve (socket path - and no --tcp)\n");
    return 2;
  }
  std::printf("serving %s on %s (%ux%u BGRA8)", pos[0].c_str(), path.c_str(), w, h);
  if (tcp_port >= 0) std::printf(" tcp 127.0.0.1:%u", unsigned{bound});
  std::printf("\n");
  std::fflush(stdout);

  frames::Buf reply;
  std::vector<Conn> conns;
  std::vector<net::PollFd> fds;  // reused: the loop allocates nothing once they have grown
  std::vector<bool> drop;
  bool running = true;
  while (running && g_stop == 0) {
    fds.assign(listeners.begin(), listeners.end());
    for (const Conn &c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (net::poll_all(fds.data(), fds.size()) < 0) {
      if (net::interrupted()) continue;
      std::perror("frame-server: poll");
      return 1;
    }
    // The connections polled are the first conns.size() (before this round's accepts) ones.
    const size_t polled = conns.size();
    for (size_t i = 0; i < listeners.size(); i++) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      // One request is served at a time: a client that stops reading for 10 s is dropped.
      const bool is_tcp = i == tcp_index;
      net::Socket cfd = net::accept_conn(listeners[i].fd, is_tcp);
      if (cfd == net::kInvalid) continue;
      if (is_tcp) {  // UnrealCV's server greets first
        ucv.greeting(reply);
        if (!net::send_all(cfd, reply.data(), reply.size())) {
          net::close_socket(cfd);
          continue;
        }
      }
      conns.push_back({cfd, is_tcp, {}});
    }
    drop.assign(conns.size(), false);
    for (size_t i = 0; i < polled && running; i++) {
      if (fds[listeners.size() + i].revents == 0) continue;
      Conn &c = conns[i];
      char buf[4096];
      const long n = net::recv_some(c.fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && net::interrupted()) continue;
        drop[i] = true;
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (c.ucv) {
        drop[i] = !serve_ucv(c, ucv, reply);
        continue;
      }
      size_t nl;
      bool close_conn = false;
      while (running && !close_conn && (nl = c.in.find('\n')) != std::string::npos) {
        std::string req = c.in.substr(0, nl);
        c.in.erase(0, nl + 1);
        running = line.answer(c.fd, req, close_conn);
      }
      if (close_conn || c.in.size() > 4096) drop[i] = true;
    }
    size_t kept = 0;
    for (size_t i = 0; i < conns.size(); i++) {
      if (drop[i]) {
        net::close_socket(conns[i].fd);
      } else {
        if (kept != i) conns[kept] = std::move(conns[i]);
        kept++;
      }
    }
    conns.resize(kept);
  }
  for (const Conn &c : conns) net::close_socket(c.fd);
  for (const net::PollFd &l : listeners) net::close_socket(l.fd);
  if (line_socket) net::remove_unix(path);
  studio.close();
  return 0;
} catch (const shmring::error &e) {
  std::fprintf(stderr, "frame-server: %s\n", e.what());
  return 1;
}
