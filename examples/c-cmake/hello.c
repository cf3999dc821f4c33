/* Publishes three messages into a memfd ring and reads them back: the smallest C program. */
#include <shmring.h>
#include <stdio.h>
#include <string.h>

#define TRY(call)                                                                       \
  do {                                                                                  \
    int rc_ = (call);                                                                   \
    if (rc_ != SHMRING_OK) {                                                            \
      fprintf(stderr, "%s: %s: %s\n", #call, shmring_code_name(rc_), shmring_last_error()); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int main(void) {
  shmring_config cfg = {.slots = 4, .slot_size = 256};
  shmring_ring *ring = NULL;
  shmring_publisher *pub = NULL;
  shmring_subscriber *sub = NULL;
  TRY(shmring_ring_create_memfd(&cfg, &ring));
  TRY(shmring_ring_subscriber(ring, SHMRING_GATING, &sub));
  TRY(shmring_ring_publisher(ring, &pub));
  const char *words[] = {"hello", "from", "C"};
  for (int i = 0; i < 3; i++)
    TRY(shmring_publisher_send(pub, (const uint8_t *)words[i], strlen(words[i]), NULL, 1000, NULL));
  TRY(shmring_publisher_close(pub));
  uint8_t buf[256];
  shmring_message msg;
  int rc;
  while ((rc = shmring_subscriber_recv(sub, buf, sizeof buf, 1000, &msg)) == SHMRING_OK)
    printf("seq %llu: %.*s\n", (unsigned long long)msg.seq, (int)msg.len, (const char *)msg.data);
  if (rc != SHMRING_E_DISCONNECTED) return 1;
  shmring_subscriber_free(sub);
  shmring_publisher_free(pub);
  shmring_ring_free(ring);
  printf("shmring %s: ok\n", shmring_version_string());
  return 0;
}
