/* libmicrohttpd 0.9.75 probe for docs/serving.md: POST/GET anything -> 200 "len=<body bytes>".
 * Build: cc -O2 mhd_probe.c -lmicrohttpd -o mhd_probe ; run: ./mhd_probe PORT */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **state) {
  (void)cls; (void)url; (void)method; (void)version; (void)data;
  size_t *len = *state;
  if (!len) {
    *state = calloc(1, sizeof(size_t));
    return MHD_YES;
  }
  if (*size) {
    *len += *size;
    *size = 0;
    return MHD_YES;
  }
  char buf[64];
  int n = snprintf(buf, sizeof buf, "len=%zu", *len);
  struct MHD_Response *r = MHD_create_response_from_buffer((size_t)n, buf, MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return ret;
}

static void done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode t) {
  (void)cls; (void)c; (void)t;
  free(*state);
  *state = NULL;
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 8080;
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (unsigned short)port, NULL, NULL,
      on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_STRICT_FOR_CLIENT, 1,
      MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_LIMIT, 1024u,
      MHD_OPTION_THREAD_POOL_SIZE, 2u, MHD_OPTION_END);
  if (!d) return 1;
  printf("ready\n");
  fflush(stdout);
  pause();
  return 0;
}
