// A simulator's capture endpoint in miniature: renders synthetic BGRA frames straight into
// loaned slots of a pin-only ring (no staging copy) and answers each request on a Unix socket
// with a JSON descriptor of the frame it just published.
//
//   frame-server <ring-name> <socket-path> [width height]
//
// Protocol (one line each way): "frame\n" renders and publishes the next frame, then answers
// {"ring":"<name>","width":W,"height":H,"seq":S,"format":"BGRA8"}; "quit\n" stops the server.
// A reader pins the message with sequence S (e.g. a latest-only subscriber registered before
// the request). Pixel (x, y) of frame n is B = (x + n) & 255, G = (y + n) & 255,
// R = n & 255, A = 255, except that the frame's first 8 bytes hold n (little-endian) and its
// metadata words are {n, width << 32 | height}, so a reader can check what it got.
#include <shmring.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace std::chrono_literals;

static void render(shmring::mutable_bytes out, uint32_t w, uint32_t h, uint64_t n) {
  auto *p = reinterpret_cast<uint8_t *>(out.data);
  for (uint32_t y = 0; y < h; y++) {
    uint8_t *row = p + static_cast<size_t>(y) * w * 4;
    for (uint32_t x = 0; x < w; x++) {
      row[4 * x + 0] = static_cast<uint8_t>(x + n);
      row[4 * x + 1] = static_cast<uint8_t>(y + n);
      row[4 * x + 2] = static_cast<uint8_t>(n);
      row[4 * x + 3] = 255;
    }
  }
  for (int i = 0; i < 8; i++) p[i] = static_cast<uint8_t>(n >> (8 * i));
}

static bool read_line(int fd, std::string &line) {
  line.clear();
  char c;
  while (read(fd, &c, 1) == 1) {
    if (c == '\n') return true;
    line.push_back(c);
  }
  return false;
}

int main(int argc, char **argv) try {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: frame-server <ring-name> <socket-path> [width height]\n");
    return 2;
  }
  std::string name = argv[1], path = argv[2];
  uint32_t w = argc == 5 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)) : 640;
  uint32_t h = argc == 5 ? static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10)) : 480;
  shmring::config cfg;
  cfg.slots = 4;
  cfg.slot_size = w * h * 4;
  cfg.pin_only = true;  // readers pin, so the server may write in place
  auto ring = shmring::Ring::create(name, cfg);
  auto pub = ring.publisher();

  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (lfd < 0 || path.size() >= sizeof addr.sun_path) {
    std::perror("socket");
    return 1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());
  if (bind(lfd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || listen(lfd, 4) != 0) {
    std::perror("bind");
    return 1;
  }
  std::printf("serving %s on %s (%ux%u BGRA8)\n", name.c_str(), path.c_str(), w, h);
  std::fflush(stdout);
  bool running = true;
  while (running) {
    int cfd = accept(lfd, nullptr, nullptr);
    if (cfd < 0) continue;
    std::string req;
    while (running && read_line(cfd, req)) {
      std::string reply;
      if (req == "frame") {
        uint64_t n = pub.published();  // the next sequence number (asked before the loan:
                                       // a publisher with a loan out takes no other call)
        auto loan = pub.loan(2s);
        if (!loan) {
          reply = "{\"error\":\"the ring stayed full\"}";
        } else {
          render(loan->data(), w, h, n);
          loan->set_len(static_cast<size_t>(w) * h * 4);
          loan->set_meta(n, static_cast<uint64_t>(w) << 32 | h);
          uint64_t seq = loan->send();
          reply = "{\"ring\":\"" + name + "\",\"width\":" + std::to_string(w) +
                  ",\"height\":" + std::to_string(h) + ",\"seq\":" + std::to_string(seq) +
                  ",\"format\":\"BGRA8\"}";
        }
      } else if (req == "quit") {
        running = false;
        reply = "{\"bye\":true}";
      } else {
        reply = "{\"error\":\"unknown request\"}";
      }
      reply.push_back('\n');
      if (write(cfd, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) break;
    }
    close(cfd);
  }
  close(lfd);
  unlink(path.c_str());
  pub.close();
  return 0;
} catch (const shmring::error &e) {
  std::fprintf(stderr, "frame-server: %s\n", e.what());
  return 1;
}
