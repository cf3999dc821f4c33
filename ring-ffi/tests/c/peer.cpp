// The C++ peer of ring-ffi's tests: the same modes as peer.c, through shmring.hpp.
#include "shmring.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace std::chrono_literals;

static int failures = 0;

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                                  \
    }                                                                              \
  } while (0)

// `expr` throws shmring::error with `code` and a message containing `needle`.
#define EXPECT_THROW(expr, want, needle)                                                 \
  do {                                                                                   \
    try {                                                                                \
      (void)(expr);                                                                      \
      std::fprintf(stderr, "%s:%d: %s did not throw\n", __FILE__, __LINE__, #expr);      \
      failures++;                                                                        \
    } catch (const shmring::error &e) {                                                  \
      if (e.code() != (want) || std::strstr(e.what(), (needle)) == nullptr) {            \
        std::fprintf(stderr, "%s:%d: %s threw %s, wanted %s with \"%s\"\n", __FILE__,    \
                     __LINE__, #expr, e.what(), #want, needle);                          \
        failures++;                                                                      \
      }                                                                                  \
    }                                                                                    \
  } while (0)

static shmring::config cfg(uint32_t slots, uint32_t slot_size, bool pin_only) {
  shmring::config c;
  c.slots = slots;
  c.slot_size = slot_size;
  c.pin_only = pin_only;
  c.open_timeout = 2000ms;
  return c;
}

static std::string text(long i) { return "msg " + std::to_string(i); }

static bool check_msg(const shmring::message &m, long i) {
  return m.data.str() == text(i) && m.seq == static_cast<uint64_t>(i) &&
         m.meta[0] == static_cast<uint64_t>(i) && m.meta[1] == 7;
}

static int errors(const std::string &base) {
  std::string name = base + "-err";
  EXPECT_THROW(shmring::Ring::create("../etc", cfg(4, 64, false)), SHMRING_E_INVALID_ARGUMENT,
               "invalid segment name");
  auto quick = cfg(0, 0, false);
  quick.open_timeout = 10ms;
  EXPECT_THROW(shmring::Ring::open(base + "-absent", quick), SHMRING_E_NOT_FOUND, "");
  {
    auto ring = shmring::Ring::create(name, cfg(4, 64, false));
    EXPECT_THROW(shmring::Ring::create(name, cfg(4, 64, false)), SHMRING_E_EXISTS, "exists");
    EXPECT_THROW(shmring::Ring::open(name, cfg(8, 64, false)), SHMRING_E_MISMATCH, "slots");
    auto pub = ring.publisher();
    EXPECT_THROW(ring.publisher(), SHMRING_E_PRODUCER_ALIVE, "");
    auto sub = ring.subscriber();
    std::vector<std::byte> big(65);
    EXPECT_THROW(pub.send({big.data(), big.size()}, 0ms), SHMRING_E_TOO_LARGE, "64-byte slot");
    {
      auto loan = pub.loan(0ms);
      CHECK(loan.has_value());
      EXPECT_THROW(loan->data(), SHMRING_E_NOT_PIN_ONLY, "pin-only");
      EXPECT_THROW(pub.send(shmring::as_bytes("x"), 0ms), SHMRING_E_BUSY, "loan");
      loan->write(0, shmring::as_bytes("chunked"));
      loan->set_meta(1, 2);
      CHECK(loan->send() == 0);
      CHECK(!*loan);
    }
    std::vector<std::byte> buf(256);
    EXPECT_THROW(sub.recv({buf.data(), 3}, 0ms), SHMRING_E_BUFFER_TOO_SMALL, "7 bytes");
    auto m = sub.recv({buf.data(), buf.size()}, 0ms);
    CHECK(m && m->data.str() == "chunked" && m->meta[0] == 1 && m->meta[1] == 2);
    CHECK(!sub.recv({buf.data(), buf.size()}, 0ms));   // EMPTY
    CHECK(!sub.recv({buf.data(), buf.size()}, 20ms));  // TIMEOUT
    {
      // An aborted loan publishes nothing.
      auto loan = pub.loan();
      loan->write(0, shmring::as_bytes("dropped"));
    }
    CHECK(pub.send(shmring::as_bytes("pinned"), 0ms) == 1u);
    {
      auto pin = sub.pin(1000ms);
      CHECK(pin && pin->data().str() == "pinned" && pin->seq() == 1);
      EXPECT_THROW(sub.recv({buf.data(), buf.size()}, 0ms), SHMRING_E_BUSY, "pin");
    }
    for (int i = 0; i < 4; i++) CHECK(pub.send(shmring::as_bytes("fill"), 0ms));
    CHECK(!pub.send(shmring::as_bytes("full"), 0ms));   // FULL
    CHECK(!pub.send(shmring::as_bytes("full"), 30ms));  // TIMEOUT
    CHECK(!pub.wait_drained(20ms));
    CHECK(pub.published() == 6);
    pub.close();
    EXPECT_THROW(pub.send(shmring::as_bytes("late"), 0ms), SHMRING_E_CLOSED, "closed");
    for (int i = 0; i < 4; i++) CHECK(sub.recv({buf.data(), buf.size()}, 0ms));
    EXPECT_THROW(sub.recv({buf.data(), buf.size()}, 0ms), SHMRING_E_DISCONNECTED,
                 "disconnected");
    CHECK(sub.received() == 6 && sub.missed() == 0);
    // Moves leave nothing behind to free twice.
    shmring::Subscriber moved = std::move(sub);
    CHECK(sub.handle() == nullptr && moved.handle() != nullptr);
  }
  {
    auto ring = shmring::Ring::memfd(cfg(4, 64, true));
    CHECK(ring.info().pin_only == 1);
    auto pub = ring.publisher();
    auto sub = ring.subscriber(shmring::delivery::latest_only);
    CHECK(pub.send(shmring::as_bytes("a"), 0ms));
    pub.abort(42);
    CHECK(sub.pin(0ms));
    CHECK(!sub.abort_code());  // not drained yet: no abort reported
    EXPECT_THROW(sub.pin(0ms), SHMRING_E_ABORTED, "code 42");
    // The abort code, from the thrown error and from the subscriber afterwards.
    try {
      (void)sub.pin(0ms);
      CHECK(false);
    } catch (const shmring::error &e) {
      CHECK(e.code() == SHMRING_E_ABORTED && e.abort_code() == uint16_t{42});
    }
    CHECK(sub.abort_code() == uint16_t{42});
    // A pin held when its subscriber dies goes with it (ASan checks nothing leaks).
    auto other = ring.subscriber();
    auto copy = shmring::Ring::from_fd(ring.fd());
    CHECK(copy.info().slots == 4);
  }
  // A corrupt segment: a garbage file in /dev/shm named like a ring.
  std::string garbage = base + "-garbage";
  std::string path = "/dev/shm/shmring." + garbage;
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  CHECK(fd >= 0);
  std::vector<unsigned char> junk(16384, 0xAB);
  CHECK(::write(fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
  ::close(fd);
  EXPECT_THROW(shmring::Ring::open(garbage, quick), SHMRING_E_CORRUPT, "");
  ::unlink(path.c_str());
  if (std::getenv("PEER_LEAK") != nullptr) {
    // Proves the leak check can fail: a handle released from its RAII owner and never freed.
    shmring_ring *leaked = nullptr;
    auto c = cfg(4, 64, false).c();
    (void)shmring_ring_create_memfd(&c, &leaked);
  }
  if (failures == 0) std::printf("errors: ok\n");
  return failures == 0 ? 0 : 1;
}

static int publish(const std::string &name, long n, bool in_place) {
  auto ring = shmring::Ring::open(name, cfg(0, 0, false));
  auto pub = ring.publisher();
  CHECK(pub.wait_for_subscribers(1, 5000ms));
  for (long i = 0; i < n; i++) {
    std::string t = text(i);
    uint64_t seq;
    if (in_place) {
      auto loan = pub.loan(5000ms);
      auto out = loan->data();
      std::memcpy(out.data, t.data(), t.size());
      loan->set_len(t.size());
      loan->set_meta(static_cast<uint64_t>(i), 7);
      seq = loan->send();
    } else {
      seq = pub.send(shmring::as_bytes(t), 5000ms, static_cast<uint64_t>(i), 7).value();
    }
    CHECK(seq == static_cast<uint64_t>(i));
  }
  pub.close();
  CHECK(pub.wait_drained(10000ms));
  return failures == 0 ? 0 : 1;
}

// Tells the Rust side this peer is set up (one line it waits for).
static void say_ready() {
  std::printf("ready\n");
  std::fflush(stdout);
}

static int subscribe(const shmring::Ring &ring, long n, bool pin) {
  auto sub = ring.subscriber();
  say_ready();
  std::vector<std::byte> buf(4096);
  long got = 0;
  try {
    for (;; got++) {
      if (pin) {
        auto p = sub.pin(10000ms);
        if (!p) return 1;
        CHECK(check_msg(p->msg(), got));
      } else {
        auto m = sub.recv({buf.data(), buf.size()}, 10000ms);
        if (!m) return 1;
        CHECK(check_msg(*m, got));
      }
    }
  } catch (const shmring::error &e) {
    if (e.code() == SHMRING_E_ABORTED && e.abort_code()) {
      // An aborted stream: report the publisher's abort code (from the error and from the
      // subscriber) instead of "ok".
      CHECK(got == n && sub.abort_code() == e.abort_code());
      if (failures == 0) std::printf("sub: %ld aborted %u\n", got, unsigned{*e.abort_code()});
      return failures == 0 ? 0 : 1;
    }
    if (e.code() != SHMRING_E_DISCONNECTED) {
      std::fprintf(stderr, "read failed: %s\n", e.what());
      return 1;
    }
  }
  CHECK(got == n);
  if (failures == 0) std::printf("sub: %ld ok\n", got);
  return failures == 0 ? 0 : 1;
}

// A member of group "workers" through the C++ wrapper: copies until the stream ends,
// printing "seq N" for each message and "member: C ok" at the end.
static int group_member(const std::string &name) {
  auto ring = shmring::Ring::open(name, cfg(0, 0, false));
  EXPECT_THROW(ring.join_group("nobody"), SHMRING_E_NOT_FOUND, "no group");
  auto sub = ring.join_group("workers");
  say_ready();
  std::vector<std::byte> buf(64);
  long got = 0;
  try {
    for (;; got++) {
      auto m = sub.recv({buf.data(), buf.size()}, 10000ms);
      if (!m) return 1;
      CHECK(check_msg(*m, static_cast<long>(m->seq)) && !m->redelivered);
      std::printf("seq %llu\n", static_cast<unsigned long long>(m->seq));
    }
  } catch (const shmring::error &e) {
    if (e.code() != SHMRING_E_DISCONNECTED) {
      std::fprintf(stderr, "member read failed: %s\n", e.what());
      return 1;
    }
  }
  if (failures == 0) std::printf("member: %ld ok\n", got);
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

// A never-stall ring through the C++ layer: a latest-only pin of message 0 while the publisher
// goes `laps` times round 3 slots, never waiting; the pinned bytes stay message 0.
static int never_stall(long laps) {
  auto c = cfg(3, 64, false);
  c.never_stall = 1;
  auto ring = shmring::Ring::memfd(c);
  CHECK(ring.info().never_stall == 1);
  auto pub = ring.publisher();
  auto grabber = ring.subscriber(shmring::delivery::latest_only);
  CHECK(pub.send(shmring::as_bytes(text(0)), 0ms));
  auto held = grabber.pin(1000ms);
  CHECK(held && held->seq() == 0);
  for (long i = 1; i <= 3 * laps; i++) {
    auto seq = pub.send(shmring::as_bytes(text(i)), 0ms);
    CHECK(seq && *seq == static_cast<uint64_t>(i));
  }
  CHECK(held && held->data().str() == text(0));
  auto too_small = cfg(3, 64, false);
  too_small.never_stall = 2;
  EXPECT_THROW(shmring::Ring::memfd(too_small), SHMRING_E_INVALID_ARGUMENT, "never-stall");
  if (failures == 0) std::printf("never-stall: ok\n");
  return failures == 0 ? 0 : 1;
}

static int run(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: peer-cpp errors|pub|loan-pub|sub|pin-sub|pin-hold|memfd|never-stall <name> [n]\n");
    return 2;
  }
  std::string mode = argv[1], name = argv[2];
  long n = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 0;
  if (mode == "errors") return errors(name);
  if (mode == "never-stall") return never_stall(n > 0 ? n : 20);
  if (mode == "group-member") return group_member(name);
  if (mode == "pub") return publish(name, n, false);
  if (mode == "loan-pub") return publish(name, n, true);
  if (mode == "sub" || mode == "pin-sub") {
    return subscribe(shmring::Ring::open(name, cfg(0, 0, false)), n, mode == "pin-sub");
  }
  if (mode == "pin-hold") {
    auto ring = shmring::Ring::open(name, cfg(0, 0, false));
    auto sub = ring.subscriber();
    say_ready();
    auto pin = sub.pin(10000ms);
    std::printf("pinned %llu\n", static_cast<unsigned long long>(pin->seq()));
    std::fflush(stdout);
    for (;;) pause();
  }
  if (mode == "memfd") {
    auto ring = shmring::Ring::memfd(cfg(4, 64, true));
    ring.serve(name);
    std::printf("serving\n");
    std::fflush(stdout);
    auto pub = ring.publisher();
    CHECK(pub.wait_for_subscribers(1, 10000ms));
    for (long i = 0; i < n; i++) {
      auto loan = pub.loan();
      std::string t = text(i);
      loan->write(0, shmring::as_bytes(t));
      loan->set_meta(static_cast<uint64_t>(i), 7);
      loan->send();
    }
    pub.close();
    CHECK(pub.wait_drained(10000ms));
    return failures == 0 ? 0 : 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "peer-cpp: %s\n", e.what());
    return 1;
  }
}
