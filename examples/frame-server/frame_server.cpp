// A simulator's capture endpoint in miniature: renders synthetic BGRA frames straight into
// loaned slots of a pin-only ring (no staging copy) and answers requests on a Unix socket (and,
// with --tcp, on a loopback TCP port) with a JSON descriptor of the frame, or with the frame
// itself as a BMP file (the path simulators use today).
//
//   frame-server <ring-name> <socket-path> [width height] [--tcp PORT]
//
// PORT 0 picks a free port; the first line printed names it:
//   serving <ring> on <socket-path> (WxH BGRA8)[ tcp 127.0.0.1:<port>]
//
// Protocol: one request line, one answer, on any connection (several may be open at once):
//   "frame\n"  renders the next frame n into a loan, publishes it, and answers its descriptor
//              {"ring":"<name>","width":W,"height":H,"seq":n,"format":"BGRA8","sum":S}
//   "latest\n" answers the descriptor of the last frame rendered (nothing is rendered)
//   "bmp\n"    answers the last frame rendered as a BMP file: a 54-byte header (BITMAPINFOHEADER,
//              32 bits a pixel, top-down: negative height) and the W*H*4 pixel bytes exactly as
//              in the ring; the file size in the header tells the reader how much to read
//   "quit\n"   answers {"bye":true} and stops the server
// Errors are answered as {"error":"..."} lines.
//
// Pixel (x, y) of frame n is B = (x + n) & 255, G = (y + n) & 255, R = n & 255, A = 255, except
// that the frame's first 8 bytes hold n (little-endian). Its metadata words are
// {n, width << 32 | height}. S is the sum, modulo 2^64, of the frame's bytes read as
// little-endian 64-bit words (the last word zero-padded), so a reader can check every byte.
//
// Rendering happens only on "frame"; "latest" and "bmp" serve the frame already rendered (its
// BMP encoding is prepared at render time), so a client timing "latest" + read, or "bmp",
// measures the transport and not the renderer.
#include <shmring.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

void render(uint8_t *p, uint32_t w, uint32_t h, uint64_t n) {
  const uint32_t r_a = (static_cast<uint32_t>(n & 255) << 16) | 0xFF000000u;
  for (uint32_t y = 0; y < h; y++) {
    uint8_t *row = p + static_cast<size_t>(y) * w * 4;
    const uint32_t g = static_cast<uint32_t>((y + n) & 255) << 8;
    for (uint32_t x = 0; x < w; x++) {
      const uint32_t px = static_cast<uint32_t>((x + n) & 255) | g | r_a;
      std::memcpy(row + 4 * static_cast<size_t>(x), &px, 4);  // little-endian: B, G, R, A
    }
  }
  for (int i = 0; i < 8; i++) p[i] = static_cast<uint8_t>(n >> (8 * i));
}

/// The sum of `len` bytes as little-endian 64-bit words, the last one zero-padded.
uint64_t word_sum(const uint8_t *p, size_t len) {
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

void put16(uint8_t *p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

/// A BMP file header + BITMAPINFOHEADER for a top-down 32-bit frame.
constexpr size_t kBmpHeader = 54;
void bmp_header(uint8_t *p, uint32_t w, uint32_t h) {
  const uint32_t pixels = w * h * 4;
  std::memset(p, 0, kBmpHeader);
  p[0] = 'B';
  p[1] = 'M';
  put32(p + 2, static_cast<uint32_t>(kBmpHeader) + pixels);  // file size
  put32(p + 10, static_cast<uint32_t>(kBmpHeader));          // pixel data offset
  put32(p + 14, 40);                                         // BITMAPINFOHEADER
  put32(p + 18, w);
  put32(p + 22, static_cast<uint32_t>(-static_cast<int32_t>(h)));  // negative: top-down
  put16(p + 26, 1);                                                // planes
  put16(p + 28, 32);                                               // bits per pixel
  put32(p + 30, 0);                                                // BI_RGB
  put32(p + 34, pixels);
}

bool write_all(int fd, const void *data, size_t len) {
  auto *p = static_cast<const uint8_t *>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

struct Conn {
  int fd;
  std::string in;
};

struct Server {
  std::string name;
  uint32_t w, h;
  shmring::Publisher pub;
  std::vector<uint8_t> bmp;  // header + the last frame's pixels
  bool have_frame = false;
  uint64_t seq = 0, sum = 0;

  std::string descriptor() const {
    return "{\"ring\":\"" + name + "\",\"width\":" + std::to_string(w) +
           ",\"height\":" + std::to_string(h) + ",\"seq\":" + std::to_string(seq) +
           ",\"format\":\"BGRA8\",\"sum\":" + std::to_string(sum) + "}";
  }

  std::string frame() {
    uint64_t n = pub.published();  // the next sequence number (asked before the loan: a
                                   // publisher with a loan out takes no other call)
    auto loan = pub.loan(2s);
    if (!loan) return "{\"error\":\"the ring stayed full\"}";
    const size_t len = static_cast<size_t>(w) * h * 4;
    auto out = loan->data();
    auto *p = reinterpret_cast<uint8_t *>(out.data);
    render(p, w, h, n);
    // The loan is ours until sent: read it back for the checksum and the BMP copy.
    sum = word_sum(p, len);
    std::memcpy(bmp.data() + kBmpHeader, p, len);
    loan->set_len(len);
    loan->set_meta(n, static_cast<uint64_t>(w) << 32 | h);
    seq = loan->send();
    have_frame = true;
    return descriptor();
  }

  /// Answers one request; false to stop the server. `close_conn` is set on a write failure.
  bool answer(int fd, const std::string &req, bool &close_conn) {
    std::string reply;
    bool running = true;
    if (req == "frame") {
      reply = frame();
    } else if (req == "latest" || req == "bmp") {
      if (!have_frame) {
        reply = "{\"error\":\"no frame rendered yet: send \\\"frame\\\" first\"}";
      } else if (req == "latest") {
        reply = descriptor();
      } else {
        if (!write_all(fd, bmp.data(), bmp.size())) close_conn = true;
        return true;
      }
    } else if (req == "quit") {
      running = false;
      reply = "{\"bye\":true}";
    } else {
      reply = "{\"error\":\"unknown request\"}";
    }
    reply.push_back('\n');
    if (!write_all(fd, reply.data(), reply.size())) close_conn = true;
    return running;
  }
};

int listen_unix(const std::string &path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof addr.sun_path) {
    std::fprintf(stderr, "frame-server: bad socket path %s\n", path.c_str());
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || listen(fd, 8) != 0) {
    std::perror("frame-server: bind");
    return -1;
  }
  return fd;
}

int listen_tcp(uint16_t port, uint16_t &bound) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    std::perror("frame-server: tcp");
    return -1;
  }
  bound = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

int main(int argc, char **argv) try {
  std::vector<std::string> pos;
  long tcp_port = -1;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--tcp") == 0 && i + 1 < argc) {
      tcp_port = std::strtol(argv[++i], nullptr, 10);
    } else {
      pos.emplace_back(argv[i]);
    }
  }
  if ((pos.size() != 2 && pos.size() != 4) || tcp_port > 65535) {
    std::fprintf(stderr,
                 "usage: frame-server <ring-name> <socket-path> [width height] [--tcp PORT]\n");
    return 2;
  }
  const std::string path = pos[1];
  const uint32_t w = pos.size() == 4 ? static_cast<uint32_t>(std::strtoul(pos[2].c_str(), nullptr, 10)) : 640;
  const uint32_t h = pos.size() == 4 ? static_cast<uint32_t>(std::strtoul(pos[3].c_str(), nullptr, 10)) : 480;
  if (w == 0 || h == 0 || static_cast<uint64_t>(w) * h * 4 > 0xFFFFFFF8ull - kBmpHeader) {
    std::fprintf(stderr, "frame-server: bad size %ux%u\n", w, h);
    return 2;
  }
  shmring::config cfg;
  cfg.slots = 4;
  cfg.slot_size = w * h * 4;
  cfg.pin_only = true;  // readers pin, so the server may write in place
  auto ring = shmring::Ring::create(pos[0], cfg);
  Server server{pos[0], w, h, ring.publisher(), {}};
  server.bmp.resize(kBmpHeader + static_cast<size_t>(w) * h * 4);
  bmp_header(server.bmp.data(), w, h);

  signal(SIGPIPE, SIG_IGN);
  std::vector<pollfd> listeners;
  int ufd = listen_unix(path);
  if (ufd < 0) return 1;
  listeners.push_back({ufd, POLLIN, 0});
  uint16_t bound = 0;
  if (tcp_port >= 0) {
    int tfd = listen_tcp(static_cast<uint16_t>(tcp_port), bound);
    if (tfd < 0) return 1;
    listeners.push_back({tfd, POLLIN, 0});
  }
  std::printf("serving %s on %s (%ux%u BGRA8)", pos[0].c_str(), path.c_str(), w, h);
  if (tcp_port >= 0) std::printf(" tcp 127.0.0.1:%u", unsigned{bound});
  std::printf("\n");
  std::fflush(stdout);

  std::vector<Conn> conns;
  bool running = true;
  while (running) {
    std::vector<pollfd> fds = listeners;
    for (const Conn &c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::perror("frame-server: poll");
      return 1;
    }
    for (size_t i = 0; i < listeners.size(); i++) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      int cfd = accept4(listeners[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (cfd < 0) continue;
      // One request is served at a time: a client that stops reading its BMP for 10 s is
      // dropped rather than stalling everyone.
      timeval send_timeout{10, 0};
      setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
      if (i == 1) {  // TCP: small replies go out at once
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      }
      conns.push_back({cfd, {}});
    }
    // The connections polled are the first conns.size() - (accepted now) ones.
    std::vector<bool> drop(conns.size(), false);
    for (size_t i = listeners.size(); i < fds.size() && running; i++) {
      if (fds[i].revents == 0) continue;
      Conn &c = conns[i - listeners.size()];
      char buf[4096];
      ssize_t n = read(c.fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        drop[i - listeners.size()] = true;
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      size_t nl;
      bool close_conn = false;
      while (running && !close_conn && (nl = c.in.find('\n')) != std::string::npos) {
        std::string req = c.in.substr(0, nl);
        c.in.erase(0, nl + 1);
        running = server.answer(c.fd, req, close_conn);
      }
      if (close_conn || c.in.size() > 4096) drop[i - listeners.size()] = true;
    }
    std::vector<Conn> kept;
    for (size_t i = 0; i < conns.size(); i++) {
      if (i < drop.size() && drop[i]) {
        close(conns[i].fd);
      } else {
        kept.push_back(std::move(conns[i]));
      }
    }
    conns = std::move(kept);
  }
  for (const Conn &c : conns) close(c.fd);
  for (const pollfd &l : listeners) close(l.fd);
  unlink(path.c_str());
  server.pub.close();
  return 0;
} catch (const shmring::error &e) {
  std::fprintf(stderr, "frame-server: %s\n", e.what());
  return 1;
}
