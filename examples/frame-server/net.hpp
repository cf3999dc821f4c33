// The frame server's sockets, one interface over two platforms (the file is picked here, once):
// net_posix.hpp (Linux, macOS: TCP and a Unix socket for the line protocol) and net_win.hpp
// (Windows, Winsock 2: TCP only).
#pragma once

#ifdef _WIN32
#include "net_win.hpp"
#else
#include "net_posix.hpp"
#endif

#include <cstddef>
#include <cstdint>

namespace net {

/// Sends all `len` bytes (a blocking socket); false when the peer is gone or the send timed out.
inline bool send_all(Socket s, const void *data, size_t len) {
  auto *p = static_cast<const char *>(data);
  while (len > 0) {
    const int chunk = len > (1u << 30) ? (1 << 30) : static_cast<int>(len);
    const long n = send_some(s, p, chunk);
    if (n < 0 && interrupted()) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace net
