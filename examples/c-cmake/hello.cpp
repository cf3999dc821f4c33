// The same through the C++17 layer: frames written in place into a pin-only ring, read pinned.
#include <shmring.hpp>

#include <chrono>
#include <cstring>
#include <iostream>

using namespace std::chrono_literals;

int main() try {
  shmring::config cfg;
  cfg.slots = 4;
  cfg.slot_size = 4096;
  cfg.pin_only = true;
  auto ring = shmring::Ring::memfd(cfg);
  auto sub = ring.subscriber(shmring::delivery::gating);
  auto pub = ring.publisher();
  for (int i = 0; i < 3; i++) {
    auto loan = pub.loan(1s);
    shmring::mutable_bytes out = loan->data();
    std::memset(out.data, 'a' + i, 16);  // "render" straight into shared memory
    loan->set_len(16);
    loan->set_meta(static_cast<uint64_t>(i), 0);
    loan->send();
  }
  pub.close();
  for (;;) {
    auto pin = sub.pin(1s);  // throws SHMRING_E_DISCONNECTED at the end of the stream
    std::cout << "seq " << pin->seq() << ": " << pin->data().str() << "\n";
  }
} catch (const shmring::error &e) {
  if (e.code() != SHMRING_E_DISCONNECTED) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cout << "shmring " << shmring_version_string() << ": ok\n";
  return 0;
}
