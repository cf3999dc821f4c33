// net.hpp's POSIX half: BSD sockets, poll, SIGINT/SIGTERM without SA_RESTART (so a blocked
// poll returns and the server stops cleanly), SIGPIPE ignored.
#pragma once

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
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace net {

using Socket = int;
constexpr Socket kInvalid = -1;
using PollFd = pollfd;
constexpr bool kHasUnixSockets = true;

inline bool init(void (*on_stop)(int)) {
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_stop;  // no SA_RESTART: poll returns EINTR and the loop ends
  return sigaction(SIGINT, &sa, nullptr) == 0 && sigaction(SIGTERM, &sa, nullptr) == 0;
}
inline bool interrupted() { return errno == EINTR; }
inline void close_socket(Socket s) { ::close(s); }
inline long send_some(Socket s, const char *p, int len) {
  return static_cast<long>(::send(s, p, static_cast<size_t>(len), MSG_NOSIGNAL));
}
inline long recv_some(Socket s, char *p, int len) {
  return static_cast<long>(::recv(s, p, static_cast<size_t>(len), 0));
}
inline int poll_all(PollFd *fds, size_t n) { return ::poll(fds, n, -1); }

/// An accepted connection, with a 10 s send timeout (a client that stops reading is dropped
/// rather than stalling everyone) and, for TCP, no Nagle delay.
inline Socket accept_conn(Socket listener, bool tcp) {
  Socket s = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (s == kInvalid) return s;
  timeval send_timeout{10, 0};
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  if (tcp) {
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return s;
}

inline Socket listen_tcp(uint16_t port, uint16_t &bound) {
  Socket fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    return kInvalid;
  }
  bound = ntohs(addr.sin_port);
  return fd;
}

inline Socket listen_unix(const std::string &path) {
  Socket fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof addr.sun_path) {
    std::fprintf(stderr, "frame-server: bad socket path %s\n", path.c_str());
    return kInvalid;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || listen(fd, 8) != 0) {
    std::perror("frame-server: bind");
    return kInvalid;
  }
  return fd;
}

inline void remove_unix(const std::string &path) { unlink(path.c_str()); }

}  // namespace net
