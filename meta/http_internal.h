/*
 * http_internal: what the parts of kvc-meta's HTTP front share; for
 * meta/http*.c only (meta/http.h stays the interface). One concept per
 * part:
 *
 *   http.c        routing, the connectors' routes, access rules,
 *                 libmicrohttpd (requests, bodies, answers)
 *   http_metrics.c GET /metrics
 *   http_wait.c   POST /pools/{ns}/wait: a wait for complete keys, run on
 *                 a thread of its own while its connection is suspended
 *
 * The server's fields are set by kvc_http_create and then constant,
 * except the counters (atomics) and the waits' state, which wait_lock
 * protects (a leaf lock: nothing is taken under it, nothing blocks while
 * it is held but the wait for the last wait thread in kvc_http_stop).
 */
#ifndef KVC_META_HTTP_INTERNAL_H
#define KVC_META_HTTP_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/auth.h"
#include "meta/http.h"

#define KVC_HTTP_MAX_WAITS 64 /* waits in progress at once (a thread each) */
#define KVC_HTTP_CONNECTION_TIMEOUT_S 30u /* libmicrohttpd's idle timeout */

enum kvc_http_route {
	R_HEALTH, R_METRICS, R_V_INIT, R_V_ALLOC, R_V_CONFIRM, R_V_EXISTS, R_V_LOCATIONS,
	R_V_CLEAR, R_S_INIT, R_S_EXISTS, R_S_RESERVE, R_S_CONFIRM, R_S_DELETE, R_S_CLEAR,
	R_S_INDICES, R_WAIT, R_UNKNOWN, R_COUNT
};

extern const char *const kvc_http_route_names[R_COUNT];

struct kvc_http_server {
	struct MHD_Daemon *daemon;
	struct kvc_pool_store *pools;
	struct kvc_http_options options;
	char vllm_namespace[KVC_POOL_MAX_NAMESPACE + 1];
	char token[KVC_AUTH_MAX_KEY]; /* options.token's bytes; token_length of them */
	atomic_uint_fast64_t requests[R_COUNT];
	atomic_uint_fast64_t errors[R_COUNT];
	atomic_uint_fast64_t latency_us[R_COUNT];
	atomic_uint_fast64_t hits, misses;
	/* Waits (http_wait.c): stop_fd (an eventfd) is written once by
	 * kvc_http_stop and ends every wait; under wait_lock, the wait
	 * threads running and whether the server stops. */
	int stop_fd;
	pthread_mutex_t wait_lock;
	pthread_cond_t wait_done; /* a wait thread finished */
	int waiting;
	bool stopping;
};

/* One request's state across libmicrohttpd's calls: its body as it
 * arrives, then (a wait's) the answer its thread prepared. */
struct upload {
	char *data;
	size_t length;
	bool too_big;
	bool answered; /* answer is ready: the wait thread resumed us */
	struct kvc_http_answer answer;
};

struct reply {
	unsigned status;
	json_t *json;   /* owned; NULL: no body (204) */
	char *text;     /* owned; plain text instead of JSON */
	struct kvc_http_wait *wait; /* owned; a wait to run before answering */
};

__attribute__((format(printf, 3, 4)))
void kvc_http_fail(struct reply *r, unsigned status, const char *fmt, ...);
/* Keys of a JSON array: strings, or [key, prefix] pairs (pairs = true);
 * at most KVC_POOL_MAX_BATCH. The strings stay owned by the JSON
 * document. -EINVAL, -ENOMEM. */
int kvc_http_parse_keys(json_t *array, bool pairs, struct kvc_pool_key **out, uint32_t *count);
uint64_t kvc_http_now_us(void);
/* Count a request of route id that took since start_us and got status. */
void kvc_http_account(struct kvc_http_server *s, enum kvc_http_route id, unsigned status,
                      uint64_t start_us);
/* A reply as an answer (consumes r's JSON). */
void kvc_http_render(struct reply *r, struct kvc_http_answer *out);

/* ---- http_metrics.c ---- */

void kvc_http_metrics(struct kvc_http_server *s, struct reply *r);

/* ---- http_wait.c ---- */

int kvc_http_waits_init(struct kvc_http_server *s);
/* End every wait and wait for their threads (before MHD_stop_daemon). */
void kvc_http_waits_stop(struct kvc_http_server *s);
void kvc_http_waits_destroy(struct kvc_http_server *s);
/* POST /pools/{ns}/wait: check the body; r->wait gets the wait to run. */
void kvc_http_wait_parse(struct kvc_http_server *s, const char *ns, json_t *body,
                         struct reply *r, uint64_t start_us);
/* libmicrohttpd: suspend conn and run a->wait on a thread of its own,
 * which resumes conn with up->answer filled and up->answered set (true).
 * false: refused (too many waits, stopping); a is the answer to send now. */
bool kvc_http_wait_defer(struct kvc_http_server *s, struct MHD_Connection *conn,
                         struct upload *up, struct kvc_http_answer *a);

#endif
