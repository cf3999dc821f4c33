// net.hpp's Windows half: Winsock 2 (WSAPoll), TCP only (the line protocol's Unix socket is
// POSIX-only here: pass "-" as the socket path), Ctrl-C through the C runtime's SIGINT.
#pragma once

#include <winsock2.h>
#include <ws2tcpip.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>

namespace net {

using Socket = SOCKET;
constexpr Socket kInvalid = INVALID_SOCKET;
using PollFd = WSAPOLLFD;
constexpr bool kHasUnixSockets = false;

inline bool init(void (*on_stop)(int)) {
  WSADATA wsa;
  if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0) return false;
  std::signal(SIGINT, on_stop);
  return true;
}
inline bool interrupted() { return WSAGetLastError() == WSAEINTR; }
inline void close_socket(Socket s) { closesocket(s); }
inline long send_some(Socket s, const char *p, int len) { return ::send(s, p, len, 0); }
inline long recv_some(Socket s, char *p, int len) { return ::recv(s, p, len, 0); }
inline int poll_all(PollFd *fds, size_t n) {
  return WSAPoll(fds, static_cast<ULONG>(n), -1);
}

inline Socket accept_conn(Socket listener, bool tcp) {
  Socket s = ::accept(listener, nullptr, nullptr);
  if (s == kInvalid) return s;
  DWORD send_timeout_ms = 10000;
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, reinterpret_cast<const char *>(&send_timeout_ms),
             sizeof send_timeout_ms);
  if (tcp) {
    BOOL one = TRUE;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, reinterpret_cast<const char *>(&one), sizeof one);
  }
  return s;
}

inline Socket listen_tcp(uint16_t port, uint16_t &bound) {
  Socket fd = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int len = sizeof addr;
  if (fd == kInvalid || bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      listen(fd, 8) != 0 || getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    std::fprintf(stderr, "frame-server: tcp: WSA error %d\n", WSAGetLastError());
    return kInvalid;
  }
  bound = ntohs(addr.sin_port);
  return fd;
}

inline Socket listen_unix(const std::string &) {
  std::fprintf(stderr, "frame-server: the line protocol's Unix socket is POSIX-only: pass - as "
                       "the socket path on Windows\n");
  return kInvalid;
}

inline void remove_unix(const std::string &) {}

}  // namespace net
