// shmring.hpp: a header-only C++17 RAII layer over the C ABI in shmring.h.
//
// - Move-only handles: shmring::Ring, Publisher, Subscriber, Pinned, Loan. Each frees its C
//   handle in its destructor; a moved-from object holds nothing.
// - Errors are exceptions: every failing call throws shmring::error, which carries the C
//   status code (code(), a SHMRING_E_* value) and the library's message (what()). Destructors
//   never throw. Calls that may legitimately find nothing (a timed-out or non-blocking
//   read, a full ring with timeout 0) return std::optional / bool instead of throwing for
//   SHMRING_E_EMPTY, SHMRING_E_TIMEOUT and SHMRING_E_FULL; the end of a stream
//   (SHMRING_E_DISCONNECTED, SHMRING_E_ABORTED) throws, so it is never mistaken for "no data".
//   An ABORTED error thrown by a Subscriber read carries the publisher's abort code
//   (error::abort_code(); Subscriber::abort_code() afterwards).
// - Byte views: C++17 has no std::span, so the layer uses two small views, shmring::bytes
//   (const, for what is read) and shmring::mutable_bytes (for a loan's writable slot): a
//   pointer and a size, with begin()/end()/operator[] and a std::string_view conversion.
// - Thread safety: as in shmring.h (a Ring may be shared between threads; a Publisher or
//   Subscriber, with its Loan or Pinned, is used by one thread at a time).
//
// A Pinned borrows its Subscriber and a Loan its Publisher: destroy (or release / send /
// abort) them first; the C library refuses other calls on the parent meanwhile
// (SHMRING_E_BUSY), and destroying the parent first releases them.
#ifndef SHMRING_HPP
#define SHMRING_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "shmring.h"

namespace shmring {

/// A failed call: the C status code and the library's message (and, for SHMRING_E_ABORTED
/// thrown by a Subscriber read, the publisher's abort code).
class error : public std::runtime_error {
 public:
  error(int code, const std::string &message, std::optional<uint16_t> abort_code = std::nullopt)
      : std::runtime_error(std::string(shmring_code_name(code)) + ": " + message),
        code_(code),
        abort_code_(abort_code) {}
  /// The SHMRING_E_* code.
  int code() const noexcept { return code_; }
  /// The publisher's abort code when a Subscriber read threw SHMRING_E_ABORTED; else nullopt.
  std::optional<uint16_t> abort_code() const noexcept { return abort_code_; }

 private:
  int code_;
  std::optional<uint16_t> abort_code_;
};

namespace detail {

/// One C handle, owned: freed with `Free` when the owner is destroyed or assigned to, moved
/// and never copied; a moved-from owner holds nothing. Each handle class keeps its C handle
/// in one, so none repeats the move-only boilerplate.
template <typename T, int (*Free)(T *)>
class owned {
 public:
  owned() = default;
  explicit owned(T *h) noexcept : h_(h) {}
  owned(owned &&o) noexcept : h_(o.take()) {}
  owned &operator=(owned &&o) noexcept {
    if (this != &o) {
      reset();
      h_ = o.take();
    }
    return *this;
  }
  owned(const owned &) = delete;
  owned &operator=(const owned &) = delete;
  ~owned() { reset(); }

  T *get() const noexcept { return h_; }
  /// Gives the handle up without freeing it.
  T *take() noexcept { return std::exchange(h_, nullptr); }
  /// Frees the handle now (nothing if there is none).
  void reset() noexcept {
    if (h_ != nullptr) (void)Free(take());
  }
  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  T *h_ = nullptr;
};
inline void check(int rc) {
  if (rc != SHMRING_OK) throw error(rc, shmring_last_error());
}
/// OK: true; one of the "nothing now" codes: false; anything else throws.
inline bool check_soft(int rc) {
  if (rc == SHMRING_OK) return true;
  if (rc == SHMRING_E_EMPTY || rc == SHMRING_E_TIMEOUT || rc == SHMRING_E_FULL) return false;
  throw error(rc, shmring_last_error());
}
/// A timeout for the C API: `forever` is SHMRING_FOREVER, negative is 0.
inline uint64_t millis(std::chrono::milliseconds d) {
  if (d == std::chrono::milliseconds::max()) return SHMRING_FOREVER;
  return d.count() <= 0 ? 0 : static_cast<uint64_t>(d.count());
}
}  // namespace detail

/// Wait as long as it takes.
inline constexpr std::chrono::milliseconds forever = std::chrono::milliseconds::max();

/// A read-only byte view (pointer + size; C++17 has no std::span).
struct bytes {
  const std::byte *data = nullptr;
  std::size_t size = 0;
  const std::byte *begin() const noexcept { return data; }
  const std::byte *end() const noexcept { return data + size; }
  std::byte operator[](std::size_t i) const noexcept { return data[i]; }
  bool empty() const noexcept { return size == 0; }
  std::string_view str() const noexcept {
    return {reinterpret_cast<const char *>(data), size};
  }
};

/// A writable byte view (a loan's slot in a pin-only ring).
struct mutable_bytes {
  std::byte *data = nullptr;
  std::size_t size = 0;
  std::byte *begin() const noexcept { return data; }
  std::byte *end() const noexcept { return data + size; }
  std::byte &operator[](std::size_t i) const noexcept { return data[i]; }
};

inline bytes as_bytes(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte *>(s.data()), s.size()};
}

/// What a read reports (the bytes are in the caller's buffer for a copy, in the ring for a pin).
struct message {
  bytes data;
  uint64_t seq = 0;
  uint64_t missed = 0;
  uint64_t meta[2] = {0, 0};
  bool redelivered = false;  // a group member's message a dead member held before
  static message from(const shmring_message &m) {
    message out;
    out.data = {reinterpret_cast<const std::byte *>(m.data), m.len};
    out.seq = m.seq;
    out.missed = m.missed;
    out.meta[0] = m.meta[0];
    out.meta[1] = m.meta[1];
    out.redelivered = m.redelivered != 0;
    return out;
  }
};

/// Subscriber classes.
enum class delivery : uint32_t {
  gating = SHMRING_GATING,
  latest_only = SHMRING_LATEST_ONLY,
  skip_on_lag = SHMRING_SKIP_ON_LAG,
};

/// A ring's geometry (zero fields: defaults for create, unchecked for open).
struct config {
  uint32_t slots = 0;
  uint32_t slot_size = 0;
  uint32_t consumers = 0;
  bool pin_only = false;
  std::chrono::milliseconds open_timeout{0};
  /// Never-stall with at most this many messages pinned at once (0: an ordinary ring); needs
  /// slots >= never_stall + 2 (see shmring_config.never_stall).
  uint32_t never_stall = 0;
  shmring_config c() const {
    shmring_config out{};
    out.slots = slots;
    out.slot_size = slot_size;
    out.consumers = consumers;
    out.pin_only = pin_only ? 1 : 0;
    out.open_timeout_ms = static_cast<uint32_t>(open_timeout.count());
    out.never_stall = never_stall;
    return out;
  }
};

/// A slot claimed for writing in place (Publisher::loan). Destroying it unsent aborts it.
class Loan {
 public:
  Loan() = default;
  explicit Loan(shmring_loan *h) noexcept : h_(h) {}

  /// The slot's writable bytes (pin-only rings; else throws SHMRING_E_NOT_PIN_ONLY).
  mutable_bytes data() {
    uint8_t *p = nullptr;
    std::size_t cap = 0;
    detail::check(shmring_loan_data(h_.get(), &p, &cap));
    return {reinterpret_cast<std::byte *>(p), cap};
  }
  /// Copies `b` in at `offset` (every ring).
  void write(std::size_t offset, bytes b) {
    detail::check(
        shmring_loan_write(h_.get(), offset, reinterpret_cast<const uint8_t *>(b.data), b.size));
  }
  void set_len(std::size_t len) { detail::check(shmring_loan_set_len(h_.get(), len)); }
  void set_meta(uint64_t m0, uint64_t m1) { detail::check(shmring_loan_set_meta(h_.get(), m0, m1)); }
  /// Publishes; returns the sequence number. The loan is spent whatever happens.
  uint64_t send() {
    uint64_t seq = 0;
    int rc = shmring_loan_send(h_.take(), &seq);
    detail::check(rc);
    return seq;
  }
  /// Gives the slot back unpublished.
  void abort() noexcept { h_.reset(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  detail::owned<shmring_loan, shmring_loan_abort> h_;
};

/// The ring's one publisher. Destroying it without close() aborts the stream (code 0).
class Publisher {
 public:
  Publisher() = default;
  explicit Publisher(shmring_publisher *h) noexcept : h_(h) {}

  /// Copies `b` into the next slot; waits at most `timeout` while the ring is full. Returns
  /// the sequence number, or nullopt when the ring stayed full.
  std::optional<uint64_t> send(bytes b, std::chrono::milliseconds timeout = forever, uint64_t m0 = 0, uint64_t m1 = 0) {
    uint64_t meta[2] = {m0, m1};
    uint64_t seq = 0;
    uint64_t ms = detail::millis(timeout);
    if (!detail::check_soft(shmring_publisher_send(
            h_.get(), reinterpret_cast<const uint8_t *>(b.data), b.size, meta, ms, &seq)))
      return std::nullopt;
    return seq;
  }
  /// Claims the next slot for writing in place, or nullopt when the ring stayed full.
  std::optional<Loan> loan(std::chrono::milliseconds timeout = forever) {
    shmring_loan *l = nullptr;
    uint64_t ms = detail::millis(timeout);
    if (!detail::check_soft(shmring_publisher_loan(h_.get(), ms, &l))) return std::nullopt;
    return Loan(l);
  }
  bool wait_for_subscribers(std::size_t n, std::chrono::milliseconds timeout) {
    return detail::check_soft(
        shmring_publisher_wait_for_subscribers(h_.get(), n, detail::millis(timeout)));
  }
  bool wait_drained(std::chrono::milliseconds timeout) {
    return detail::check_soft(shmring_publisher_wait_drained(h_.get(), detail::millis(timeout)));
  }
  uint64_t published() {
    uint64_t p = 0;
    detail::check(shmring_publisher_counters(h_.get(), &p, nullptr));
    return p;
  }
  // Subscribers reclaimed because their processes died without leaving (see
  // shmring_publisher_lost_subscribers).
  struct LostSubscribers {
    uint64_t total = 0;
    uint64_t gating = 0;
    uint64_t unread = 0;  // of the first gating one that died with messages unread
  };
  LostSubscribers lost_subscribers() {
    LostSubscribers l;
    detail::check(shmring_publisher_lost_subscribers(h_.get(), &l.total, &l.gating, &l.unread));
    return l;
  }
  /// Creates group `name` (competing consumers, joined with Ring::join_group), or finds it;
  /// returns its subscriber-table index. Messages sent from now on wait for the group.
  uint32_t create_group(const std::string &name) {
    uint32_t index = 0;
    detail::check(shmring_publisher_create_group(h_.get(), name.c_str(), &index));
    return index;
  }
  void close() { detail::check(shmring_publisher_close(h_.get())); }
  void abort(uint16_t code) { detail::check(shmring_publisher_abort(h_.get(), code)); }
  shmring_publisher *handle() const noexcept { return h_.get(); }

 private:
  detail::owned<shmring_publisher, shmring_publisher_free> h_;
};

/// A pinned message (Subscriber::pin): its bytes stay valid until it is destroyed or released.
class Pinned {
 public:
  Pinned() = default;
  Pinned(shmring_pinned *h, const shmring_message &m) noexcept
      : h_(h), msg_(message::from(m)) {}

  const message &msg() const noexcept { return msg_; }
  bytes data() const noexcept { return msg_.data; }
  uint64_t seq() const noexcept { return msg_.seq; }
  void release() noexcept { h_.reset(); }

 private:
  detail::owned<shmring_pinned, shmring_pinned_release> h_;
  message msg_;
};

/// A registered subscriber.
class Subscriber {
 public:
  Subscriber() = default;
  explicit Subscriber(shmring_subscriber *h) noexcept : h_(h) {}

  /// Pins the next message, or nullopt when none came within `timeout`. Throws at the end of
  /// the stream (SHMRING_E_DISCONNECTED; SHMRING_E_ABORTED, whose error carries the abort
  /// code).
  std::optional<Pinned> pin(std::chrono::milliseconds timeout = forever) {
    shmring_pinned *p = nullptr;
    shmring_message m{};
    uint64_t ms = detail::millis(timeout);
    if (!read_soft(shmring_subscriber_pin(h_.get(), ms, &p, &m))) return std::nullopt;
    return Pinned(p, m);
  }
  /// A message held by `hold`: its bytes stay valid until `release(id)`, while the subscriber
  /// goes on reading and holding (several at once, released in any order).
  struct Held {
    uint32_t id;
    message msg;
  };
  /// Holds the next message, or nullopt when none came within `timeout`. Throws as `pin`, and
  /// with SHMRING_E_BUSY when as many messages are held as `set_max_holds` allows (default 4).
  std::optional<Held> hold(std::chrono::milliseconds timeout = forever) {
    uint32_t id = 0;
    shmring_message m{};
    uint64_t ms = detail::millis(timeout);
    if (!read_soft(shmring_subscriber_hold(h_.get(), ms, &id, &m))) return std::nullopt;
    return Held{id, message::from(m)};
  }
  /// Releases a held message (its bytes are invalid afterwards).
  void release(uint32_t id) { detail::check(shmring_subscriber_release_hold(h_.get(), id)); }
  /// Starts a skip-on-lag subscriber up to `n` messages back (before its first read);
  /// returns how many back it starts.
  uint64_t rewind(uint64_t n) {
    uint64_t back = 0;
    detail::check(shmring_subscriber_rewind(h_.get(), n, &back));
    return back;
  }
  /// How many messages may be held at once (0 to 8).
  void set_max_holds(std::size_t max) {
    detail::check(shmring_subscriber_set_max_holds(h_.get(), max));
  }
  /// Copies the next message into `buf`, or nullopt when none came within `timeout`.
  std::optional<message> recv(mutable_bytes buf, std::chrono::milliseconds timeout = forever) {
    shmring_message m{};
    uint64_t ms = detail::millis(timeout);
    if (!read_soft(shmring_subscriber_recv(h_.get(), reinterpret_cast<uint8_t *>(buf.data), buf.size,
                                           ms, &m)))
      return std::nullopt;
    return message::from(m);
  }
  /// The publisher's abort code once a read threw SHMRING_E_ABORTED; nullopt before.
  std::optional<uint16_t> abort_code() const {
    uint16_t code = 0;
    int rc = shmring_subscriber_abort_code(h_.get(), &code);
    if (rc == SHMRING_E_EMPTY) return std::nullopt;
    detail::check(rc);
    return code;
  }
  uint64_t received() {
    uint64_t r = 0;
    detail::check(shmring_subscriber_counters(h_.get(), &r, nullptr));
    return r;
  }
  uint64_t missed() {
    uint64_t m = 0;
    detail::check(shmring_subscriber_counters(h_.get(), nullptr, &m));
    return m;
  }
  shmring_subscriber *handle() const noexcept { return h_.get(); }

 private:
  /// As detail::check_soft, but SHMRING_E_ABORTED throws with the abort code.
  bool read_soft(int rc) const {
    if (rc != SHMRING_E_ABORTED) return detail::check_soft(rc);
    std::string message = shmring_last_error();
    uint16_t code = 0;
    std::optional<uint16_t> abort;
    if (shmring_subscriber_abort_code(h_.get(), &code) == SHMRING_OK) abort = code;
    throw error(rc, message, abort);
  }
  detail::owned<shmring_subscriber, shmring_subscriber_free> h_;
};

/// A ring mapping (named or memfd). The creator's handle removes the name when destroyed.
class Ring {
 public:
  Ring() = default;
  explicit Ring(shmring_ring *h) noexcept : h_(h) {}

  static Ring create(const std::string &name, const config &cfg = {}) {
    shmring_config c = cfg.c();
    shmring_ring *h = nullptr;
    detail::check(shmring_ring_create(name.c_str(), &c, &h));
    return Ring(h);
  }
  static Ring open(const std::string &name, const config &cfg = {}) {
    shmring_config c = cfg.c();
    shmring_ring *h = nullptr;
    detail::check(shmring_ring_open(name.c_str(), &c, &h));
    return Ring(h);
  }
  static Ring open_or_create(const std::string &name, const config &cfg = {}) {
    shmring_config c = cfg.c();
    shmring_ring *h = nullptr;
    detail::check(shmring_ring_open_or_create(name.c_str(), &c, &h));
    return Ring(h);
  }
  static Ring memfd(const config &cfg = {}) {
    shmring_config c = cfg.c();
    shmring_ring *h = nullptr;
    detail::check(shmring_ring_create_memfd(&c, &h));
    return Ring(h);
  }
  /// Maps a memfd ring from `fd` (duplicated: the caller keeps `fd`).
  static Ring from_fd(int fd) {
    shmring_ring *h = nullptr;
    detail::check(shmring_ring_from_fd(fd, &h));
    return Ring(h);
  }
  /// Receives a memfd ring from its rendezvous server (`dir` empty: the abstract socket).
  static Ring connect(const std::string &name, std::chrono::milliseconds timeout, const std::string &dir = {}) {
    shmring_ring *h = nullptr;
    detail::check(shmring_ring_connect(name.c_str(), dir.empty() ? nullptr : dir.c_str(),
                                       detail::millis(timeout), &h));
    return Ring(h);
  }
  /// Serves this memfd ring's descriptor under `name` until destroyed.
  void serve(const std::string &name, const std::string &dir = {}) {
    detail::check(shmring_ring_serve(h_.get(), name.c_str(), dir.empty() ? nullptr : dir.c_str()));
  }
  Publisher publisher() const {
    shmring_publisher *p = nullptr;
    detail::check(shmring_ring_publisher(h_.get(), &p));
    return Publisher(p);
  }
  Subscriber subscriber(delivery d = delivery::gating) const {
    shmring_subscriber *s = nullptr;
    detail::check(shmring_ring_subscriber(h_.get(), static_cast<uint32_t>(d), &s));
    return Subscriber(s);
  }
  /// Joins group `name` as a new member: each message goes to exactly one member; a message a
  /// dead member held comes again with `redelivered` set. Throws (NOT_FOUND) before the
  /// publisher created the group.
  Subscriber join_group(const std::string &name) const {
    shmring_subscriber *s = nullptr;
    detail::check(shmring_ring_join_group(h_.get(), name.c_str(), &s));
    return Subscriber(s);
  }
  shmring_ring_info info() const {
    shmring_ring_info i{};
    detail::check(shmring_ring_get_info(h_.get(), &i));
    return i;
  }
  /// The ring's descriptor (owned by the ring: do not close it).
  int fd() const {
    int fd = -1;
    detail::check(shmring_ring_fd(h_.get(), &fd));
    return fd;
  }
  void keep_name() { detail::check(shmring_ring_keep_name(h_.get())); }
  shmring_ring *handle() const noexcept { return h_.get(); }

 private:
  detail::owned<shmring_ring, shmring_ring_free> h_;
};

}  // namespace shmring

#endif  // SHMRING_HPP
