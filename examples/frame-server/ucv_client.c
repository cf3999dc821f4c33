/* A C client of the frame server's UnrealCV port, for Linux and Windows (Winsock; the ring
 * through named sections there): checks one frame end to end, byte for byte.
 *
 *   ucv-client PORT [WIDTH HEIGHT]      (the server's frame size, default 640 480)
 *
 * 1. connects to 127.0.0.1:PORT and reads the greeting ("connected ...");
 * 2. "0:vget /unrealcv/status"            -> must start "Is Listening";
 * 3. "1:vget /camera/0/lit_shared"        -> the JSON descriptor; opens ring `name`, pins the
 *    newest frame (latest-only subscriber), checks its sequence number, length, checksum
 *    (`sum`) and every byte against the pattern (render.hpp);
 * 4. "2:vget /camera/0/lit bmp"           -> a BMP of the next frame; pins that frame in the
 *    ring and checks the BMP's pixels equal it byte for byte, and the pattern.
 * Prints one line per step; exit 0 when all hold, 1 when a check fails, 2 on an error.
 * The protocol (framing: magic 0x9E2B83C1, length, "<id>:<payload>") is in unrealcv.hpp. */
#include <shmring.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
typedef SOCKET sock_t;
#define BAD_SOCK INVALID_SOCKET
#define close_sock closesocket
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
typedef int sock_t;
#define BAD_SOCK (-1)
#define close_sock close
#endif

#define MAGIC 0x9E2B83C1u
#define BMP_HEADER 54

static int fail(const char *what) {
  fprintf(stderr, "ucv-client: %s\n", what);
  return 1;
}

static int io_all(sock_t s, void *buf, size_t len, int sending) {
  char *p = (char *)buf;
  while (len > 0) {
    int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
    int n = sending ? send(s, p, chunk, 0) : recv(s, p, chunk, 0);
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Receives one framed message into a malloc'd buffer (NUL-terminated); NULL on error. */
static unsigned char *receive(sock_t s, size_t *len) {
  unsigned char head[8];
  if (io_all(s, head, 8, 0) != 0 || get32(head) != MAGIC) return NULL;
  *len = get32(head + 4);
  unsigned char *buf = malloc(*len + 1);
  if (buf == NULL || io_all(s, buf, *len, 0) != 0) {
    free(buf);
    return NULL;
  }
  buf[*len] = 0;
  return buf;
}

/* Sends "<id>:<cmd>" and returns the answer's body (after "<id>:"), in *owner's buffer. */
static const unsigned char *ask(sock_t s, int id, const char *cmd, unsigned char **owner,
                                size_t *body_len) {
  char payload[256];
  int n = snprintf(payload, sizeof payload, "%d:%s", id, cmd);
  unsigned char head[8];
  put32(head, MAGIC);
  put32(head + 4, (uint32_t)n);
  size_t len = 0;
  if (io_all(s, head, 8, 1) != 0 || io_all(s, payload, (size_t)n, 1) != 0 ||
      (*owner = receive(s, &len)) == NULL)
    return NULL;
  char prefix[16];
  int pn = snprintf(prefix, sizeof prefix, "%d:", id);
  if (len < (size_t)pn || memcmp(*owner, prefix, (size_t)pn) != 0) return NULL;
  *body_len = len - (size_t)pn;
  return *owner + pn;
}

/* The unsigned number after "key": in a flat JSON object (0 when absent). */
static uint64_t json_u64(const char *json, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(json, pat);
  return p == NULL ? 0 : strtoull(p + strlen(pat), NULL, 10);
}
/* The string after "key": into out (empty when absent). */
static void json_str(const char *json, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char *p = strstr(json, pat);
  out[0] = 0;
  if (p == NULL) return;
  p += strlen(pat);
  size_t n = 0;
  while (p[n] != '"' && p[n] != 0 && n + 1 < cap) n++;
  memcpy(out, p, n);
  out[n] = 0;
}

static uint64_t word_sum(const unsigned char *p, size_t len) {
  uint64_t sum = 0, last = 0;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    sum += v;
  }
  for (size_t k = 0; i + k < len; k++) last |= (uint64_t)p[i + k] << (8 * k);
  return sum + last;
}

/* Byte i of lit frame n of camera 0 (render.hpp), or -1 where it differs. */
static long pattern_mismatch(const unsigned char *p, uint32_t w, uint32_t h, uint64_t n) {
  for (uint32_t y = 0; y < h; y++) {
    for (uint32_t x = 0; x < w; x++) {
      size_t i = ((size_t)y * w + x) * 4;
      unsigned char want[4] = {(unsigned char)(x + n), (unsigned char)(y + n),
                               (unsigned char)n, 255};
      for (int c = 0; c < 4; c++) {
        unsigned char expect = i + c < 8 ? (unsigned char)(n >> (8 * (i + c))) : want[c];
        if (p[i + c] != expect) return (long)(i + c);
      }
    }
  }
  return -1;
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 4) {
    fprintf(stderr, "usage: ucv-client PORT [WIDTH HEIGHT]\n");
    return 2;
  }
  const uint32_t w = argc == 4 ? (uint32_t)strtoul(argv[2], NULL, 10) : 640;
  const uint32_t h = argc == 4 ? (uint32_t)strtoul(argv[3], NULL, 10) : 480;
  const size_t frame_len = (size_t)w * h * 4;
#ifdef _WIN32
  WSADATA wsa;
  if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0) return 2;
#endif
  sock_t s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(argv[1]));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s == BAD_SOCK || connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
    fprintf(stderr, "ucv-client: cannot connect to 127.0.0.1:%s\n", argv[1]);
    return 2;
  }
  size_t len = 0, body_len = 0;
  unsigned char *greeting = receive(s, &len);
  if (greeting == NULL || strncmp((char *)greeting, "connected", 9) != 0)
    return fail("no greeting");
  printf("greeting: %s\n", (char *)greeting);
  free(greeting);

  unsigned char *owner = NULL;
  const unsigned char *body = ask(s, 0, "vget /unrealcv/status", &owner, &body_len);
  if (body == NULL || strncmp((const char *)body, "Is Listening", 12) != 0)
    return fail("status does not start \"Is Listening\"");
  printf("status: ok (%zu bytes)\n", body_len);
  free(owner);

  body = ask(s, 1, "vget /camera/0/lit_shared", &owner, &body_len);
  if (body == NULL || body[0] != '{') return fail("no descriptor");
  char name[128];
  json_str((const char *)body, "name", name, sizeof name);
  const uint64_t seq = json_u64((const char *)body, "seq");
  const uint64_t sum = json_u64((const char *)body, "sum");
  const uint64_t num_bytes = json_u64((const char *)body, "num_bytes");
  printf("descriptor: %s\n", (const char *)body);
  free(owner);
  if (num_bytes != frame_len) return fail("num_bytes is not WIDTH * HEIGHT * 4");

  shmring_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.open_timeout_ms = 10000;
  shmring_ring *ring = NULL;
  shmring_subscriber *sub = NULL;
  if (shmring_ring_open(name, &cfg, &ring) != SHMRING_OK ||
      shmring_ring_subscriber(ring, SHMRING_LATEST_ONLY, &sub) != SHMRING_OK) {
    fprintf(stderr, "ucv-client: ring %s: %s\n", name, shmring_last_error());
    return 2;
  }
  shmring_pinned *pin = NULL;
  shmring_message msg;
  if (shmring_subscriber_pin(sub, 10000, &pin, &msg) != SHMRING_OK) {
    fprintf(stderr, "ucv-client: pin: %s\n", shmring_last_error());
    return 2;
  }
  if (msg.seq != seq || msg.len != frame_len) return fail("the pinned frame is not the descriptor's");
  if (word_sum(msg.data, msg.len) != sum) return fail("the frame does not match the server's sum");
  long bad = pattern_mismatch(msg.data, w, h, seq);
  if (bad >= 0) return fail("the shared frame differs from the pattern");
  printf("shared frame %llu (ring %s): sum ok, every byte ok\n", (unsigned long long)seq, name);
  shmring_pinned_release(pin);

  body = ask(s, 2, "vget /camera/0/lit bmp", &owner, &body_len);
  if (body == NULL || body_len != BMP_HEADER + frame_len || body[0] != 'B' || body[1] != 'M')
    return fail("not the BMP expected");
  if (shmring_subscriber_pin(sub, 10000, &pin, &msg) != SHMRING_OK) {
    fprintf(stderr, "ucv-client: pin: %s\n", shmring_last_error());
    return 2;
  }
  if (msg.len != frame_len || memcmp(body + BMP_HEADER, msg.data, frame_len) != 0)
    return fail("the BMP's pixels differ from the frame in the ring");
  if (pattern_mismatch(msg.data, w, h, msg.seq) >= 0) return fail("the BMP frame differs from the pattern");
  printf("BMP frame %llu: %zu bytes equal to the frame in the ring, every byte ok\n",
         (unsigned long long)msg.seq, frame_len);
  shmring_pinned_release(pin);
  free(owner);
  shmring_subscriber_free(sub);
  shmring_ring_free(ring);
  close_sock(s);
  printf("ucv-client: ok\n");
  return 0;
}
