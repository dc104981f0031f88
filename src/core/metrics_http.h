/*
 * metrics_http: a daemon's GET /metrics over HTTP (Prometheus scrapes),
 * for the daemons that have no HTTP front of their own (kvc-storage,
 * kvc-fuse; kvc-meta renders its registry on its pools HTTP front).
 *
 * libmicrohttpd on one internal thread of its own (epoll), so a scrape
 * never runs on, or waits for, a thread of the daemon's work: rendering
 * reads the registry's atomics, and its collectors take no lock that is
 * held across I/O. Bounded: at most KVC_METRICS_HTTP_CONNECTIONS
 * connections (more are refused at accept), each closed after
 * KVC_METRICS_HTTP_TIMEOUT_S idle seconds, and at most
 * KVC_METRICS_HTTP_MEMORY bytes of request (headers past it get 431 or a
 * closed connection). GET (or HEAD) /metrics is answered 200 with the text
 * format 0.0.4; any other path 404; another method on /metrics 405; a
 * request with a body 413. The daemon keeps serving whatever the peer sends.
 */
#ifndef KVC_METRICS_HTTP_H
#define KVC_METRICS_HTTP_H

#include "core/metrics.h"

#define KVC_METRICS_HTTP_CONNECTIONS 16
#define KVC_METRICS_HTTP_TIMEOUT_S 10
#define KVC_METRICS_HTTP_MEMORY (32u << 10)

struct kvc_metrics_http;

/* Serve registry on "host:port". Returns 0 and the server, -EINVAL (a bad
 * address), -EADDRINUSE, or -errno. */
int kvc_metrics_http_start(const char *address, struct kvc_metrics *registry,
                           struct kvc_metrics_http **out);

/* Stop serving and free; safe on NULL. */
void kvc_metrics_http_stop(struct kvc_metrics_http *server);

#endif
