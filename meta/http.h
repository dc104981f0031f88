/*
 * http: kvc-meta's HTTP/JSON front of the page pools, speaking the vLLM
 * hf3fs metadata server's routes and SGLang's mini 3fs metadata server's
 * routes with their exact payloads, so their clients work unchanged; plus
 * GET /health and GET /metrics (Prometheus text), and POST
 * /pools/{ns}/wait (wait until keys are complete; meta/http_wait.c).
 * docs/pools.md lists every route.
 *
 * libmicrohttpd serves it (a thread pool; a wait runs on a thread of its
 * own with its connection suspended, so it stalls nobody), jansson parses
 * and builds the JSON. Every request is bounded: a body over max_body bytes is refused
 * with 413, malformed JSON or a missing field with 400, an unknown rank
 * or namespace with 404; the server keeps serving everyone else.
 *
 * Access (docs/operations.md "Security model"): with a token, every route
 * but GET /health needs "Authorization: Bearer <token>" (else 401); the
 * destructive routes (vLLM's /clear, SGLang's clear and delete_keys) are
 * taken from loopback peers only, from any peer, or from none, as
 * `destructive` says (else 403).
 *
 * Full disks: while the volume of kvc-meta's data is below its reserve
 * (`space`), the routes that grow the pool store (initialize, allocate)
 * answer 507; delete, clear and everything else are served.
 */
#ifndef KVC_META_HTTP_H
#define KVC_META_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/metrics.h"
#include "core/reserve.h"
#include "meta/pool_store.h"

struct kvc_http_options {
	const char *address;        /* "host:port" */
	uint32_t max_body;          /* bytes */
	uint32_t lease_ms;          /* read lease granted by location lookups */
	uint32_t world_size;        /* default world for namespaces (0: infer) */
	const char *vllm_namespace; /* the namespace vLLM's routes use */
	int threads;
	const char *token;          /* bearer token (token_length bytes); NULL: none */
	uint32_t token_length;
	int destructive;            /* enum kvc_config_http_destructive */
	struct kvc_reserve *space;  /* the data's volume; NULL: no reserve */
	uint32_t max_wait_ms;       /* cap on a wait's timeout_ms (0 or over
	                               KVC_POOL_MAX_WAIT_MS: that) */
	struct kvc_metrics *metrics; /* GET /metrics renders it too; NULL: none */
};

struct kvc_http_server;

/* Start serving. Returns 0 and the server, -EINVAL (bad address),
 * -EADDRINUSE or -errno. */
int kvc_http_start(const struct kvc_http_options *options, struct kvc_pool_store *pools,
                   struct kvc_http_server **out);
/* Stop serving and free (either kind of server); safe on NULL. */
void kvc_http_stop(struct kvc_http_server *server);

/* A server that answers kvc_http_serve only (no socket): for tests and
 * fuzzing. Returns 0, -ENOMEM or -EINVAL (a token over 256 bytes). */
int kvc_http_create(const struct kvc_http_options *options, struct kvc_pool_store *pools,
                    struct kvc_http_server **out);

/* One request, transport aside: method, URL and body (length bytes;
 * too_big: the body was over max_body and is not given), whether the
 * peer is on this host, and its Authorization header. */
struct kvc_http_request {
	const char *method;
	const char *url;
	const char *data;
	size_t length;
	bool too_big;
	bool loopback;             /* the peer's address is 127.0.0.0/8 or ::1 */
	const char *authorization; /* the header's value; NULL when absent */
};
/* The answer's text (JSON or Prometheus text, NULL for none) is the
 * caller's to free. With `wait` set (POST /pools/{ns}/wait) there is no
 * answer yet: the caller runs the wait (kvc_http_wait_run), on a thread
 * that may block, and that fills the answer. */
struct kvc_http_wait;
struct kvc_http_answer {
	unsigned status;
	char *text;
	const char *content_type; /* NULL when there is no text */
	struct kvc_http_wait *wait;
};
void kvc_http_serve(struct kvc_http_server *server, const struct kvc_http_request *request,
                    struct kvc_http_answer *out);

/* Run a wait that kvc_http_serve handed out: blocks until its keys are
 * complete, its timeout, or an event on ends (at most 2, may be NULL:
 * fds whose events end the wait early, as kvc_pool_wait's), then fills
 * out and frees wait. */
struct pollfd;
void kvc_http_wait_run(struct kvc_http_server *server, struct kvc_http_wait *wait,
                       const struct pollfd *ends, int nends, struct kvc_http_answer *out);

#endif
