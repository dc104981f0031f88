/*
 * http: kvc-meta's HTTP/JSON front of the page pools, speaking the vLLM
 * hf3fs metadata server's routes and SGLang's mini 3fs metadata server's
 * routes with their exact payloads, so their clients work unchanged; plus
 * GET /health and GET /metrics (Prometheus text). docs/pools.md lists
 * every route.
 *
 * libmicrohttpd serves it (a thread pool), jansson parses and builds the
 * JSON. Every request is bounded: a body over max_body bytes is refused
 * with 413, malformed JSON or a missing field with 400, an unknown rank
 * or namespace with 404; the server keeps serving everyone else.
 */
#ifndef KVC_META_HTTP_H
#define KVC_META_HTTP_H

#include <stdatomic.h>
#include <stdint.h>

#include "meta/pool_store.h"

struct kvc_http_options {
	const char *address;        /* "host:port" */
	uint32_t max_body;          /* bytes */
	uint32_t lease_ms;          /* read lease granted by location lookups */
	uint32_t world_size;        /* default world for namespaces (0: infer) */
	const char *vllm_namespace; /* the namespace vLLM's routes use */
	int threads;
};

struct kvc_http_server;

/* Start serving. Returns 0 and the server, -EINVAL (bad address),
 * -EADDRINUSE or -errno. */
int kvc_http_start(const struct kvc_http_options *options, struct kvc_pool_store *pools,
                   struct kvc_http_server **out);
void kvc_http_stop(struct kvc_http_server *server);

#endif
