/*
 * The C peer of ring-ffi's tests (tests/ffi.rs compiles it with the system cc, plain and with
 * -fsanitize=address,undefined, and runs it against a Rust peer).
 *
 *   peer errors <name>        every error path below gives its documented code and message
 *   peer pub <name> <n>       opens ring <name>, publishes n messages (copy-in), closes
 *   peer create-pub <name> <n> the same, but creates ring <name> (4 slots of 64 bytes) and
 *                             prints "created" first (on Windows a named ring lives only as
 *                             long as a handle to it, so its creator is the publisher)
 *   peer loan-pub <name> <n>  the same through loans written in place (a pin-only ring)
 *   peer sub <name> <n>       creates nothing: opens <name>, subscribes (gating), prints
 *                             "ready", reads until DISCONNECTED and checks n messages
 *   peer pin-hold <name>      subscribes, prints "ready", pins one message, prints "pinned",
 *                             then sleeps until killed
 *   peer memfd <name> <n>     serves a memfd ring on the abstract socket, publishes n messages
 *                             once a subscriber is there, closes and waits for it to drain
 *   peer never-stall <name>   creates never-stall rings: a latest-only subscriber pins a
 *                             message while the publisher goes round the ring n laps without
 *                             waiting; a gating one still holds it back; the geometry rule
 *                             (slots >= never_stall + 2) and the open checks
 *
 * Messages are "msg <i>" with metadata {i, 7}.
 *
 * It also builds with mingw-w64 for Windows (ci/windows.sh runs it under Wine): there the
 * descriptor-based calls are SHMRING_E_UNSUPPORTED (checked by `errors`), the /dev/shm garbage
 * file check is left out, and `memfd`/`connect-sub` fail (no descriptor passing).
 */
#include "shmring.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _WIN32
#include <windows.h>
#endif

static int failures = 0;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
              #cond, shmring_last_error());                                           \
      failures++;                                                                     \
    }                                                                                 \
  } while (0)

/* `call` returns `code` and the thread's message contains `needle`. */
#define EXPECT(call, code, needle)                                                      \
  do {                                                                                  \
    int rc_ = (call);                                                                   \
    if (rc_ != (code) || strstr(shmring_last_error(), (needle)) == NULL) {              \
      fprintf(stderr, "%s:%d: %s returned %s (%d), wanted %s; message: %s (wanted %s)\n", \
              __FILE__, __LINE__, #call, shmring_code_name(rc_), rc_, #code,            \
              shmring_last_error(), needle);                                            \
      failures++;                                                                       \
    }                                                                                   \
  } while (0)

#define OK(call)                                                                        \
  do {                                                                                  \
    int rc_ = (call);                                                                   \
    if (rc_ != SHMRING_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,          \
              shmring_code_name(rc_), shmring_last_error());                            \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

/* Tells the Rust side this peer is set up (one line it waits for). */
static void say_ready(void) {
  printf("ready\n");
  fflush(stdout);
}

static shmring_config config(uint32_t slots, uint32_t slot_size, uint32_t pin_only) {
  shmring_config c;
  memset(&c, 0, sizeof c);
  c.slots = slots;
  c.slot_size = slot_size;
  c.pin_only = pin_only;
  c.open_timeout_ms = 2000;
  return c;
}

static int errors(const char *base) {
  char name[200], other[200], path[300];
  snprintf(name, sizeof name, "%s-err", base);
  shmring_ring *ring = (shmring_ring *)1;
  shmring_publisher *pub = NULL;
  shmring_subscriber *sub = NULL;
  shmring_config cfg = config(4, 64, 0);
  uint8_t buf[256];
  shmring_message msg;

  CHECK(shmring_version() == (SHMRING_VERSION_MAJOR << 16 | SHMRING_VERSION_MINOR << 8 |
                              SHMRING_VERSION_PATCH));
  CHECK(strlen(shmring_version_string()) > 0);

  /* Null handles and pointers. */
  EXPECT(shmring_ring_create(NULL, &cfg, &ring), SHMRING_E_INVALID_ARGUMENT, "name is NULL");
  CHECK(ring == NULL); /* an out-handle is NULL after a failure */
  EXPECT(shmring_ring_create(name, &cfg, NULL), SHMRING_E_INVALID_ARGUMENT, "out-handle");
  EXPECT(shmring_ring_publisher(NULL, &pub), SHMRING_E_INVALID_ARGUMENT, "ring is NULL");
  EXPECT(shmring_ring_subscriber(NULL, SHMRING_GATING, &sub), SHMRING_E_INVALID_ARGUMENT,
         "ring is NULL");
  EXPECT(shmring_publisher_send(NULL, buf, 1, NULL, 0, NULL), SHMRING_E_INVALID_ARGUMENT,
         "publisher is NULL");
  EXPECT(shmring_publisher_loan(NULL, 0, NULL), SHMRING_E_INVALID_ARGUMENT, "out-handle");
  EXPECT(shmring_publisher_close(NULL), SHMRING_E_INVALID_ARGUMENT, "publisher is NULL");
  EXPECT(shmring_subscriber_recv(NULL, buf, sizeof buf, 0, &msg), SHMRING_E_INVALID_ARGUMENT,
         "subscriber is NULL");
  EXPECT(shmring_subscriber_counters(NULL, NULL, NULL), SHMRING_E_INVALID_ARGUMENT,
         "subscriber is NULL");
  EXPECT(shmring_pinned_release(NULL), SHMRING_E_INVALID_ARGUMENT, "pinned is NULL");
  EXPECT(shmring_loan_send(NULL, NULL), SHMRING_E_INVALID_ARGUMENT, "loan is NULL");
  EXPECT(shmring_loan_abort(NULL), SHMRING_E_INVALID_ARGUMENT, "loan is NULL");
  EXPECT(shmring_ring_get_info(NULL, NULL), SHMRING_E_INVALID_ARGUMENT, "ring is NULL");
#ifdef _WIN32
  /* Descriptor passing is Unix-only: a clear code, the out-handle cleared, *fd untouched. */
  EXPECT(shmring_ring_from_fd(3, &ring), SHMRING_E_UNSUPPORTED, "Unix-only");
  CHECK(ring == NULL);
  EXPECT(shmring_ring_connect("x", NULL, 0, &ring), SHMRING_E_UNSUPPORTED, "Unix-only");
  CHECK(ring == NULL);
  CHECK(strcmp(shmring_code_name(SHMRING_E_UNSUPPORTED), "SHMRING_E_UNSUPPORTED") == 0);
#else
  EXPECT(shmring_ring_from_fd(-1, &ring), SHMRING_E_INVALID_ARGUMENT, "not a descriptor");
#endif
  CHECK(shmring_ring_free(NULL) == SHMRING_OK);
  CHECK(shmring_publisher_free(NULL) == SHMRING_OK);
  CHECK(shmring_subscriber_free(NULL) == SHMRING_OK);

  /* Bad names and geometry. */
  EXPECT(shmring_ring_create("../etc", &cfg, &ring), SHMRING_E_INVALID_ARGUMENT,
         "invalid segment name");
  shmring_config too_many = config(4, 64, 0);
  too_many.consumers = 33;
  EXPECT(shmring_ring_create(name, &too_many, &ring), SHMRING_E_INVALID_ARGUMENT, "");

  /* Not found, exists, mismatch. */
  snprintf(other, sizeof other, "%s-absent", base);
  shmring_config quick = config(0, 0, 0);
  quick.open_timeout_ms = 10;
  EXPECT(shmring_ring_open(other, &quick, &ring), SHMRING_E_NOT_FOUND, "");
  OK(shmring_ring_create(name, &cfg, &ring));
  shmring_ring *again = NULL;
  EXPECT(shmring_ring_create(name, &cfg, &again), SHMRING_E_EXISTS, "already exists");
  shmring_config wrong = config(8, 64, 0);
  EXPECT(shmring_ring_open(name, &wrong, &again), SHMRING_E_MISMATCH, "slots");
  OK(shmring_ring_open_or_create(name, &cfg, &again));
  OK(shmring_ring_free(again));

  shmring_ring_info info;
  OK(shmring_ring_get_info(ring, &info));
  CHECK(info.slots == 4 && info.slot_size == 64 && info.pin_only == 0);
  EXPECT(shmring_ring_subscriber(ring, 9, &sub), SHMRING_E_INVALID_ARGUMENT,
         "unknown subscriber class 9");

  /* Lengths above the slot; a loan's pointer in a ring that is not pin-only. */
  OK(shmring_ring_publisher(ring, &pub));
  shmring_publisher *second = NULL;
  EXPECT(shmring_ring_publisher(ring, &second), SHMRING_E_PRODUCER_ALIVE, "");
  OK(shmring_ring_subscriber(ring, SHMRING_GATING, &sub));
  EXPECT(shmring_publisher_send(pub, buf, 65, NULL, 0, NULL), SHMRING_E_TOO_LARGE,
         "65 bytes does not fit in a 64-byte slot");
  EXPECT(shmring_publisher_send(pub, NULL, 3, NULL, 0, NULL), SHMRING_E_INVALID_ARGUMENT,
         "data is NULL");
  shmring_loan *loan = NULL;
  OK(shmring_publisher_loan(pub, 0, &loan));
  uint8_t *data = NULL;
  size_t cap = 0;
  EXPECT(shmring_loan_data(loan, &data, &cap), SHMRING_E_NOT_PIN_ONLY, "pin-only");
  EXPECT(shmring_loan_write(loan, 60, buf, 5), SHMRING_E_TOO_LARGE, "passes the end");
  EXPECT(shmring_loan_set_len(loan, 65), SHMRING_E_TOO_LARGE, "does not fit");
  EXPECT(shmring_publisher_send(pub, buf, 1, NULL, 0, NULL), SHMRING_E_BUSY, "holds a loan");
  OK(shmring_loan_write(loan, 0, (const uint8_t *)"chunk", 5));
  OK(shmring_loan_write(loan, 5, (const uint8_t *)"ed", 2));
  OK(shmring_loan_set_meta(loan, 1, 2));
  uint64_t seq = 99;
  OK(shmring_loan_send(loan, &seq));
  CHECK(seq == 0);

  /* A buffer that is too small consumes nothing; then the message reads. */
  EXPECT(shmring_subscriber_recv(sub, buf, 3, 0, &msg), SHMRING_E_BUFFER_TOO_SMALL, "7 bytes");
  OK(shmring_subscriber_recv(sub, buf, sizeof buf, 0, &msg));
  CHECK(msg.len == 7 && memcmp(msg.data, "chunked", 7) == 0 && msg.seq == 0);
  CHECK(msg.meta[0] == 1 && msg.meta[1] == 2 && msg.data == buf);
  EXPECT(shmring_subscriber_recv(sub, buf, sizeof buf, 0, &msg), SHMRING_E_EMPTY, "no message");
  EXPECT(shmring_subscriber_recv(sub, buf, sizeof buf, 20, &msg), SHMRING_E_TIMEOUT,
         "within the timeout");

  /* A pin makes the subscriber busy until released. */
  OK(shmring_publisher_send(pub, (const uint8_t *)"pinned", 6, NULL, 0, NULL));
  shmring_pinned *pin = NULL;
  OK(shmring_subscriber_pin(sub, 1000, &pin, &msg));
  CHECK(msg.len == 6 && memcmp(msg.data, "pinned", 6) == 0 && msg.seq == 1);
  EXPECT(shmring_subscriber_recv(sub, buf, sizeof buf, 0, NULL), SHMRING_E_BUSY, "holds a pin");
  OK(shmring_pinned_release(pin));

  /* A full ring (gating subscriber not reading): FULL without a wait, TIMEOUT with one. */
  for (int i = 0; i < 4; i++) OK(shmring_publisher_send(pub, buf, 8, NULL, 0, NULL));
  EXPECT(shmring_publisher_send(pub, buf, 8, NULL, 0, NULL), SHMRING_E_FULL, "full");
  EXPECT(shmring_publisher_send(pub, buf, 8, NULL, 30, NULL), SHMRING_E_TIMEOUT, "timeout");
  EXPECT(shmring_publisher_wait_drained(pub, 20), SHMRING_E_TIMEOUT, "drain");
  uint64_t published = 0, received = 0, missed = 0;
  size_t subscribers = 0;
  OK(shmring_publisher_counters(pub, &published, &subscribers));
  CHECK(published == 6 && subscribers == 1);

  /* A late skip-on-lag subscriber with history: three back are still in the 4-slot ring. */
  shmring_subscriber *late = NULL;
  uint64_t back = 0;
  OK(shmring_ring_subscriber(ring, SHMRING_SKIP_ON_LAG, &late));
  OK(shmring_subscriber_rewind(late, 3, &back));
  CHECK(back == 3);
  OK(shmring_subscriber_recv(late, buf, sizeof buf, 0, &msg));
  CHECK(msg.seq == 3);
  EXPECT(shmring_subscriber_rewind(late, 1, NULL), SHMRING_E_UNSUPPORTED, "not read yet");
  OK(shmring_subscriber_free(late));

  /* A closed ring: sends fail, subscribers drain then are disconnected. */
  OK(shmring_publisher_close(pub));
  EXPECT(shmring_publisher_send(pub, buf, 1, NULL, 0, NULL), SHMRING_E_CLOSED, "closed");
  for (int i = 0; i < 4; i++) OK(shmring_subscriber_recv(sub, buf, sizeof buf, 0, NULL));
  EXPECT(shmring_subscriber_recv(sub, buf, sizeof buf, 0, NULL), SHMRING_E_DISCONNECTED,
         "disconnected");
  EXPECT(shmring_subscriber_recv(sub, buf, sizeof buf, 100, NULL), SHMRING_E_DISCONNECTED,
         "disconnected");
  OK(shmring_subscriber_counters(sub, &received, &missed));
  CHECK(received == 6 && missed == 0);
  OK(shmring_subscriber_free(sub));
  OK(shmring_publisher_free(pub));
  OK(shmring_ring_free(ring));

  /* An aborted stream: ABORTED with its code, after draining. */
  OK(shmring_ring_create_memfd(&cfg, &ring));
  OK(shmring_ring_publisher(ring, &pub));
  OK(shmring_ring_subscriber(ring, SHMRING_GATING, &sub));
  OK(shmring_publisher_send(pub, buf, 1, NULL, 0, NULL));
  uint16_t abort_code = 7;
  EXPECT(shmring_subscriber_abort_code(sub, &abort_code), SHMRING_E_EMPTY, "not aborted");
  OK(shmring_publisher_abort(pub, 42));
  OK(shmring_subscriber_recv(sub, buf, sizeof buf, 0, NULL));
  /* Aborted, but not drained: no read has reported it yet, and *code is left alone. */
  EXPECT(shmring_subscriber_abort_code(sub, &abort_code), SHMRING_E_EMPTY, "not drained");
  CHECK(abort_code == 7);
  EXPECT(shmring_subscriber_recv(sub, buf, sizeof buf, 0, NULL), SHMRING_E_ABORTED, "code 42");
  OK(shmring_subscriber_abort_code(sub, &abort_code));
  CHECK(abort_code == 42);
  EXPECT(shmring_subscriber_abort_code(NULL, &abort_code), SHMRING_E_INVALID_ARGUMENT,
         "subscriber is NULL");
  EXPECT(shmring_subscriber_abort_code(sub, NULL), SHMRING_E_INVALID_ARGUMENT, "code is NULL");
  OK(shmring_publisher_free(pub));
  EXPECT(shmring_ring_serve(ring, "../x", NULL), SHMRING_E_INVALID_ARGUMENT, "invalid");
#ifdef _WIN32
  EXPECT(shmring_ring_serve(ring, "x", NULL), SHMRING_E_UNSUPPORTED, "Unix-only");
  int fd_out = -5;
  EXPECT(shmring_ring_fd(ring, &fd_out), SHMRING_E_UNSUPPORTED, "Unix-only");
  CHECK(fd_out == -5);
#endif
  /* A subscriber freed while it holds a pin releases it; so does a publisher with a loan. */
  OK(shmring_subscriber_free(sub));
  OK(shmring_ring_free(ring));

#ifndef _WIN32
  /* A corrupt segment: a garbage file in /dev/shm named like a ring. */
  snprintf(other, sizeof other, "%s-garbage", base);
  snprintf(path, sizeof path, "/dev/shm/shmring.%s", other);
  int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
  CHECK(fd >= 0);
  memset(buf, 0xAB, sizeof buf);
  for (int i = 0; i < 64; i++) CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
  close(fd);
  EXPECT(shmring_ring_open(other, &quick, &ring), SHMRING_E_CORRUPT, "");
  CHECK(ring == NULL);
  unlink(path);
#else
  (void)path;
#endif

  if (getenv("PEER_LEAK") != NULL) {
    /* Proves the leak check can fail: a ring handle never freed. */
    OK(shmring_ring_create_memfd(&cfg, &ring));
  }
  if (failures == 0) printf("errors: ok\n");
  return failures == 0 ? 0 : 1;
}

static int publish(const char *name, long n, int in_place, int create) {
  shmring_ring *ring = NULL;
  shmring_publisher *pub = NULL;
  shmring_config cfg = config(0, 0, 0);
  if (create) {
    shmring_config geometry = config(4, 64, 0);
    OK(shmring_ring_create(name, &geometry, &ring));
    printf("created\n");
    fflush(stdout);
  } else {
    OK(shmring_ring_open(name, &cfg, &ring));
  }
  OK(shmring_ring_publisher(ring, &pub));
  OK(shmring_publisher_wait_for_subscribers(pub, 1, create ? 30000 : 5000));
  char text[64];
  for (long i = 0; i < n; i++) {
    int len = snprintf(text, sizeof text, "msg %ld", i);
    uint64_t seq = 0;
    if (in_place) {
      shmring_loan *loan = NULL;
      uint8_t *data = NULL;
      size_t cap = 0;
      OK(shmring_publisher_loan(pub, 5000, &loan));
      OK(shmring_loan_data(loan, &data, &cap));
      CHECK(cap >= (size_t)len);
      memcpy(data, text, (size_t)len);
      OK(shmring_loan_set_len(loan, (size_t)len));
      OK(shmring_loan_set_meta(loan, (uint64_t)i, 7));
      OK(shmring_loan_send(loan, &seq));
    } else {
      uint64_t meta[2] = {(uint64_t)i, 7};
      OK(shmring_publisher_send(pub, (const uint8_t *)text, (size_t)len, meta, 5000, &seq));
    }
    CHECK(seq == (uint64_t)i);
  }
  OK(shmring_publisher_close(pub));
  OK(shmring_publisher_wait_drained(pub, 10000));
  OK(shmring_publisher_free(pub));
  OK(shmring_ring_free(ring));
  return failures == 0 ? 0 : 1;
}

static int check_msg(const shmring_message *msg, long i) {
  char text[64];
  int len = snprintf(text, sizeof text, "msg %ld", i);
  return msg->len == (size_t)len && memcmp(msg->data, text, (size_t)len) == 0 &&
         msg->seq == (uint64_t)i && msg->meta[0] == (uint64_t)i && msg->meta[1] == 7;
}

static int subscribe(shmring_ring *ring, long n, int pin) {
  shmring_subscriber *sub = NULL;
  OK(shmring_ring_subscriber(ring, SHMRING_GATING, &sub));
  say_ready();
  uint8_t buf[4096];
  long got = 0;
  for (;;) {
    shmring_message msg;
    int rc;
    if (pin) {
      shmring_pinned *p = NULL;
      rc = shmring_subscriber_pin(sub, 10000, &p, &msg);
      if (rc == SHMRING_OK) {
        CHECK(check_msg(&msg, got));
        OK(shmring_pinned_release(p));
      }
    } else {
      rc = shmring_subscriber_recv(sub, buf, sizeof buf, 10000, &msg);
      if (rc == SHMRING_OK) CHECK(check_msg(&msg, got));
    }
    if (rc == SHMRING_E_DISCONNECTED) break;
    if (rc == SHMRING_E_ABORTED) {
      /* An aborted stream: report the publisher's abort code instead of "ok". */
      uint16_t code = 0;
      OK(shmring_subscriber_abort_code(sub, &code));
      CHECK(got == n);
      OK(shmring_subscriber_free(sub));
      if (failures == 0) printf("sub: %ld aborted %u\n", got, (unsigned)code);
      return failures == 0 ? 0 : 1;
    }
    if (rc != SHMRING_OK) {
      fprintf(stderr, "read failed: %s: %s\n", shmring_code_name(rc), shmring_last_error());
      return 1;
    }
    got++;
  }
  CHECK(got == n);
  OK(shmring_subscriber_free(sub));
  if (failures == 0) printf("sub: %ld ok\n", got);
  return failures == 0 ? 0 : 1;
}

static int pin_hold(const char *name) {
  shmring_ring *ring = NULL;
  shmring_subscriber *sub = NULL;
  shmring_pinned *pin = NULL;
  shmring_message msg;
  shmring_config cfg = config(0, 0, 0);
  OK(shmring_ring_open(name, &cfg, &ring));
  OK(shmring_ring_subscriber(ring, SHMRING_GATING, &sub));
  say_ready();
  OK(shmring_subscriber_pin(sub, 10000, &pin, &msg));
  printf("pinned %llu\n", (unsigned long long)msg.seq);
  fflush(stdout);
#ifdef _WIN32
  for (;;) Sleep(INFINITE);
#else
  for (;;) pause();
#endif
}

/* A publisher on NAME whose only gating subscriber (a pin-hold peer) the test SIGKILLs after
 * the first message: the sends after it wait until the publisher reclaims the dead
 * subscriber, then the publisher reports what it lost. */
static int lost_pub(const char *name) {
  shmring_ring *ring = NULL;
  shmring_publisher *pub = NULL;
  shmring_config cfg = config(0, 0, 0);
  uint64_t total = 0, gating = 0, unread = 0;
  OK(shmring_ring_open(name, &cfg, &ring));
  OK(shmring_ring_publisher(ring, &pub));
  OK(shmring_publisher_wait_for_subscribers(pub, 1, 10000));
  OK(shmring_publisher_lost_subscribers(pub, &total, &gating, &unread));
  CHECK(total == 0);
  for (uint32_t i = 0; i < 12; i++) {
    OK(shmring_publisher_send(pub, (const uint8_t *)&i, sizeof i, NULL, 20000, NULL));
    if (i == 0) {
      printf("sent 0\n");
      fflush(stdout);
    }
  }
  OK(shmring_publisher_lost_subscribers(pub, &total, &gating, &unread));
  printf("lost %llu gating %llu unread %llu\n", (unsigned long long)total,
         (unsigned long long)gating, (unsigned long long)unread);
  fflush(stdout);
  OK(shmring_publisher_close(pub));
  OK(shmring_publisher_free(pub));
  OK(shmring_ring_free(ring));
  return failures ? 1 : 0;
}

static int memfd_pub(const char *name, long n) {
  shmring_ring *ring = NULL;
  shmring_publisher *pub = NULL;
  shmring_config cfg = config(4, 64, 1);
  OK(shmring_ring_create_memfd(&cfg, &ring));
  OK(shmring_ring_serve(ring, name, NULL));
  EXPECT(shmring_ring_serve(ring, name, NULL), SHMRING_E_EXISTS, "serves");
  printf("serving\n");
  fflush(stdout);
  OK(shmring_ring_publisher(ring, &pub));
  OK(shmring_publisher_wait_for_subscribers(pub, 1, 10000));
  for (long i = 0; i < n; i++) {
    char text[64];
    int len = snprintf(text, sizeof text, "msg %ld", i);
    uint64_t meta[2] = {(uint64_t)i, 7};
    OK(shmring_publisher_send(pub, (const uint8_t *)text, (size_t)len, meta, SHMRING_FOREVER,
                              NULL));
  }
  OK(shmring_publisher_close(pub));
  OK(shmring_publisher_wait_drained(pub, 10000));
  OK(shmring_publisher_free(pub));
  OK(shmring_ring_free(ring));
  return failures == 0 ? 0 : 1;
}

/* Reads N messages holding up to 3 at once (shmring_subscriber_hold): each held message is
 * checked when it comes and again before its release; the three are released out of order
 * (the middle one, the first, the last); a fourth hold while three are held is refused. */
static int hold_subscribe(shmring_ring *ring, long n) {
  shmring_subscriber *sub = NULL;
  OK(shmring_ring_subscriber(ring, SHMRING_GATING, &sub));
  uint64_t back = 99;
  OK(shmring_subscriber_rewind(sub, 2, &back)); /* a gating reader may start back too */
  CHECK(back == 0);                             /* nothing was published yet */
  OK(shmring_subscriber_set_max_holds(sub, 3));
  EXPECT(shmring_subscriber_set_max_holds(sub, 9), SHMRING_E_INVALID_ARGUMENT, "8");
  say_ready();
  uint32_t ids[3];
  shmring_message msgs[3];
  long got = 0, held = 0;
  for (;;) {
    int rc = shmring_subscriber_hold(sub, 10000, &ids[held], &msgs[held]);
    if (rc == SHMRING_E_DISCONNECTED) break;
    if (rc != SHMRING_OK) {
      fprintf(stderr, "hold failed: %s: %s\n", shmring_code_name(rc), shmring_last_error());
      return 1;
    }
    CHECK(ids[held] != 0);
    CHECK(check_msg(&msgs[held], got));
    got++;
    held++;
    if (held == 3) {
      uint32_t extra = 0;
      EXPECT(shmring_subscriber_hold(sub, 0, &extra, NULL), SHMRING_E_BUSY, "holds 3");
      for (int k = 0; k < 3; k++) CHECK(check_msg(&msgs[k], got - 3 + k));
      OK(shmring_subscriber_release_hold(sub, ids[1]));
      EXPECT(shmring_subscriber_release_hold(sub, ids[1]), SHMRING_E_INVALID_ARGUMENT,
             "no such hold");
      OK(shmring_subscriber_release_hold(sub, ids[0]));
      OK(shmring_subscriber_release_hold(sub, ids[2]));
      held = 0;
    }
  }
  for (long k = 0; k < held; k++) {
    CHECK(check_msg(&msgs[k], got - held + k));
    OK(shmring_subscriber_release_hold(sub, ids[k]));
  }
  CHECK(got == n);
  OK(shmring_subscriber_free(sub));
  if (failures == 0) printf("sub: %ld ok\n", got);
  return failures == 0 ? 0 : 1;
}

/* A member of group "workers": names a missing group first (NOT_FOUND), then joins and copies
 * messages until the stream ends, printing "seq N" for each and "member: C ok" at the end. */
static int group_member(shmring_ring *ring) {
  shmring_subscriber *sub = NULL;
  EXPECT(shmring_ring_join_group(ring, "nobody", &sub), SHMRING_E_NOT_FOUND, "no group");
  OK(shmring_ring_join_group(ring, "workers", &sub));
  say_ready();
  uint8_t buf[64];
  long got = 0;
  for (;;) {
    shmring_message msg;
    int rc = shmring_subscriber_recv(sub, buf, sizeof buf, 10000, &msg);
    if (rc == SHMRING_E_DISCONNECTED) break;
    if (rc != SHMRING_OK) {
      fprintf(stderr, "member recv failed: %s: %s\n", shmring_code_name(rc), shmring_last_error());
      return 1;
    }
    CHECK(check_msg(&msg, (long)msg.seq));
    CHECK(msg.redelivered == 0);
    printf("seq %llu\n", (unsigned long long)msg.seq);
    got++;
  }
  OK(shmring_subscriber_free(sub));
  if (failures == 0) printf("member: %ld ok\n", got);
  fflush(stdout);
  return failures == 0 ? 0 : 1;
}

/* A never-stall ring (3 slots, one pin): a latest-only subscriber pins message 0 while the
 * publisher goes `laps` times round the ring, every send without waiting (timeout 0: a wait
 * would be SHMRING_E_FULL); the pinned bytes stay message 0 and the newest is always there. */
static int never_stall(const char *base, long laps) {
  char name[200], text[64];
  uint8_t buf[64];
  shmring_ring *ring = NULL, *again = NULL;
  shmring_publisher *pub = NULL;
  shmring_subscriber *grabber = NULL, *gating = NULL;
  shmring_pinned *pin = NULL, *newest = NULL;
  shmring_message held, msg;
  shmring_ring_info info;
  memset(buf, 0, sizeof buf);
  snprintf(name, sizeof name, "%s-ns", base);

  /* The rule: slots >= never_stall + 2. */
  shmring_config small = config(3, 64, 0);
  small.never_stall = 2;
  EXPECT(shmring_ring_create_memfd(&small, &ring), SHMRING_E_INVALID_ARGUMENT,
         "slots >= max_pins + 2");
  small.slots = 2;
  small.never_stall = 1;
  EXPECT(shmring_ring_create_memfd(&small, &ring), SHMRING_E_INVALID_ARGUMENT, "never-stall");

  shmring_config cfg = config(3, 64, 0);
  cfg.never_stall = 1;
  OK(shmring_ring_create(name, &cfg, &ring));
  OK(shmring_ring_get_info(ring, &info));
  CHECK(info.slots == 3 && info.never_stall == 1);
  /* Open: a never-stall ring too small for two pins; an ordinary ring asked to be one. */
  shmring_config two = config(0, 0, 0);
  two.never_stall = 2;
  EXPECT(shmring_ring_open(name, &two, &again), SHMRING_E_INVALID_ARGUMENT, "never-stall");
  shmring_config one = config(0, 0, 0);
  one.never_stall = 1;
  OK(shmring_ring_open(name, &one, &again));
  OK(shmring_ring_free(again));

  OK(shmring_ring_publisher(ring, &pub));
  OK(shmring_ring_subscriber(ring, SHMRING_LATEST_ONLY, &grabber));
  OK(shmring_publisher_send(pub, (const uint8_t *)"msg 0", 5, NULL, 0, NULL));
  OK(shmring_subscriber_pin(grabber, 1000, &pin, &held));
  CHECK(held.seq == 0 && held.len == 5 && memcmp(held.data, "msg 0", 5) == 0);
  long n = 3 * laps;
  for (long i = 1; i <= n; i++) {
    int len = snprintf(text, sizeof text, "msg %ld", i);
    uint64_t seq = 0;
    int rc = shmring_publisher_send(pub, (const uint8_t *)text, (size_t)len, NULL, 0, &seq);
    if (rc != SHMRING_OK) {
      fprintf(stderr, "message %ld waited for the pin: %s: %s\n", i, shmring_code_name(rc),
              shmring_last_error());
      failures++;
      break;
    }
    CHECK(seq == (uint64_t)i);
  }
  CHECK(held.len == 5 && memcmp(held.data, "msg 0", 5) == 0);
  OK(shmring_pinned_release(pin));
  /* The newest is there for the grabber. */
  OK(shmring_subscriber_pin(grabber, 1000, &newest, &msg));
  int len = snprintf(text, sizeof text, "msg %ld", n);
  CHECK(msg.seq == (uint64_t)n && msg.len == (size_t)len && memcmp(msg.data, text, msg.len) == 0);
  OK(shmring_pinned_release(newest));

  /* A gating subscriber still holds the publisher back: at most 3 unread. */
  OK(shmring_ring_subscriber(ring, SHMRING_GATING, &gating));
  int sent = 0;
  while (sent < 10 && shmring_publisher_send(pub, buf, 8, NULL, 0, NULL) == SHMRING_OK) sent++;
  CHECK(sent <= 3);
  EXPECT(shmring_publisher_send(pub, buf, 8, NULL, 0, NULL), SHMRING_E_FULL, "full");
  OK(shmring_subscriber_free(gating));
  OK(shmring_subscriber_free(grabber));
  OK(shmring_publisher_free(pub));
  OK(shmring_ring_free(ring));

  /* An ordinary ring is not a never-stall one. */
  snprintf(name, sizeof name, "%s-plain", base);
  shmring_config plain = config(3, 64, 0);
  OK(shmring_ring_create(name, &plain, &ring));
  OK(shmring_ring_get_info(ring, &info));
  CHECK(info.never_stall == 0);
  EXPECT(shmring_ring_open(name, &one, &again), SHMRING_E_MISMATCH, "never_stall");
  OK(shmring_ring_free(ring));
  if (failures == 0) printf("never-stall: ok\n");
  return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: peer errors|pub|create-pub|loan-pub|sub|pin-hold|memfd|never-stall <name> [n]\n");
    return 2;
  }
  const char *mode = argv[1], *name = argv[2];
  long n = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
  if (strcmp(mode, "errors") == 0) return errors(name);
  if (strcmp(mode, "pub") == 0) return publish(name, n, 0, 0);
  if (strcmp(mode, "create-pub") == 0) return publish(name, n, 0, 1);
  if (strcmp(mode, "loan-pub") == 0) return publish(name, n, 1, 0);
  if (strcmp(mode, "sub") == 0 || strcmp(mode, "pin-sub") == 0) {
    shmring_ring *ring = NULL;
    shmring_config cfg = config(0, 0, 0);
    OK(shmring_ring_open(name, &cfg, &ring));
    int rc = subscribe(ring, n, strcmp(mode, "pin-sub") == 0);
    OK(shmring_ring_free(ring));
    return rc;
  }
  if (strcmp(mode, "connect-sub") == 0) {
    shmring_ring *ring = NULL;
    OK(shmring_ring_connect(name, NULL, 10000, &ring));
    int rc = subscribe(ring, n, 1);
    OK(shmring_ring_free(ring));
    return rc;
  }
  if (strcmp(mode, "pin-hold") == 0) return pin_hold(name);
  if (strcmp(mode, "hold-sub") == 0) {
    shmring_ring *ring = NULL;
    shmring_config cfg = config(0, 0, 0);
    OK(shmring_ring_open(name, &cfg, &ring));
    int rc = hold_subscribe(ring, n);
    OK(shmring_ring_free(ring));
    return rc;
  }
  if (strcmp(mode, "group-member") == 0) {
    shmring_ring *ring = NULL;
    shmring_config cfg = config(0, 0, 0);
    OK(shmring_ring_open(name, &cfg, &ring));
    int rc = group_member(ring);
    OK(shmring_ring_free(ring));
    return rc;
  }
  if (strcmp(mode, "memfd") == 0) return memfd_pub(name, n);
  if (strcmp(mode, "lost-pub") == 0) return lost_pub(name);
  if (strcmp(mode, "never-stall") == 0) return never_stall(name, n > 0 ? n : 20);
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
