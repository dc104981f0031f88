/* http: see http.h; routes and payloads: docs/pools.md. */
#include "meta/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "core/net.h"

enum route_id {
	R_HEALTH, R_METRICS, R_V_INIT, R_V_ALLOC, R_V_CONFIRM, R_V_EXISTS, R_V_LOCATIONS,
	R_V_CLEAR, R_S_INIT, R_S_EXISTS, R_S_RESERVE, R_S_CONFIRM, R_S_DELETE, R_S_CLEAR,
	R_S_INDICES, R_UNKNOWN, R_COUNT
};

static const char *route_names[R_COUNT] = {
	"health", "metrics", "vllm_initialize", "vllm_batch_allocate", "vllm_confirm_write",
	"vllm_batch_exists", "vllm_get_locations", "vllm_clear", "sglang_initialize",
	"sglang_exists", "sglang_reserve_and_allocate", "sglang_confirm_write",
	"sglang_delete_keys", "sglang_clear", "sglang_get_page_indices", "unknown"};

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
};

/* One request's body as it arrives. */
struct upload {
	char *data;
	size_t length;
	bool too_big;
};

struct reply {
	unsigned status;
	json_t *json;   /* owned; NULL: no body (204) */
	char *text;     /* owned; plain text instead of JSON */
};

static uint64_t monotonic_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

__attribute__((format(printf, 3, 4)))
static void fail(struct reply *r, unsigned status, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->status = status;
	r->json = json_pack("{s:s}", "detail", msg);
}

/* Map a pool store error to HTTP. */
static void fail_store(struct reply *r, int rc, const char *ns, uint32_t rank)
{
	if (rc == -ENOENT)
		fail(r, 404, "rank %u is not initialized in namespace '%s'", rank, ns);
	else if (rc == -EINVAL)
		fail(r, 400, "invalid request for namespace '%s'", ns);
	else
		fail(r, 500, "pool store: %s", strerror(-rc));
}

/* Keys of a JSON array: strings, or [key, prefix] pairs (pairs = true).
 * The strings stay owned by the JSON document. */
static int parse_keys(json_t *array, bool pairs, struct kvc_pool_key **out, uint32_t *count)
{
	if (!json_is_array(array) || json_array_size(array) > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	size_t n = json_array_size(array);
	struct kvc_pool_key *keys = calloc(n ? n : 1, sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		json_t *item = json_array_get(array, i);
		json_t *k = pairs && json_is_array(item) ? json_array_get(item, 0) : item;
		if (!json_is_string(k) || json_string_length(k) == 0 ||
		    json_string_length(k) > KVC_POOL_MAX_KEY) {
			free(keys);
			return -EINVAL;
		}
		keys[i] = (struct kvc_pool_key){json_string_value(k), (uint32_t)json_string_length(k)};
	}
	*out = keys;
	*count = (uint32_t)n;
	return 0;
}

/* (key, page) pairs and their pages. */
static int parse_confirmations(json_t *array, struct kvc_pool_key **keys, int64_t **pages,
                               uint32_t *count)
{
	int rc = parse_keys(array, true, keys, count);
	if (rc < 0)
		return rc;
	*pages = calloc(*count ? *count : 1, sizeof(**pages));
	for (uint32_t i = 0; *pages && i < *count; i++) {
		json_t *page = json_array_get(json_array_get(array, i), 1);
		if (!json_is_integer(page)) {
			free(*pages);
			free(*keys);
			return -EINVAL;
		}
		(*pages)[i] = json_integer_value(page);
	}
	if (!*pages) {
		free(*keys);
		return -ENOMEM;
	}
	return 0;
}

static int parse_pages(json_t *array, int64_t **pages, uint32_t *count)
{
	if (!array) {
		*pages = NULL;
		*count = 0;
		return 0;
	}
	if (!json_is_array(array) || json_array_size(array) > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	*count = (uint32_t)json_array_size(array);
	*pages = calloc(*count ? *count : 1, sizeof(**pages));
	if (!*pages)
		return -ENOMEM;
	for (uint32_t i = 0; i < *count; i++) {
		json_t *p = json_array_get(array, i);
		if (!json_is_integer(p)) {
			free(*pages);
			return -EINVAL;
		}
		(*pages)[i] = json_integer_value(p);
	}
	return 0;
}

static bool get_rank(json_t *body, uint32_t *rank)
{
	json_t *r = json_object_get(body, "rank");
	if (!json_is_integer(r) || json_integer_value(r) < 0 ||
	    json_integer_value(r) >= KVC_POOL_MAX_WORLD)
		return false;
	*rank = (uint32_t)json_integer_value(r);
	return true;
}

/* SGLang's namespace: the body's "namespace", default "kv". */
static const char *sglang_namespace(json_t *body)
{
	json_t *ns = json_object_get(body, "namespace");
	return json_is_string(ns) ? json_string_value(ns) : "kv";
}

static void do_init(struct kvc_http_server *s, const char *ns, uint32_t rank, json_t *body,
                    bool vllm, struct reply *r)
{
	json_t *role = json_object_get(body, "role");
	if (vllm && json_is_string(role) && strcmp(json_string_value(role), "scheduler") == 0) {
		r->status = 200;
		r->json = json_pack("{s:s}", "message", "Scheduler role does not require initialization");
		return;
	}
	json_t *pages = json_object_get(body, "num_pages");
	if (!json_is_integer(pages) || json_integer_value(pages) <= 0 ||
	    json_integer_value(pages) > KVC_POOL_MAX_PAGES) {
		fail(r, 400, "num_pages must be an integer in [1, %u]", KVC_POOL_MAX_PAGES);
		return;
	}
	int rc = kvc_pool_init(s->pools, ns, rank, (uint32_t)json_integer_value(pages),
	                       s->options.world_size);
	if (rc == -EINVAL) {
		fail(r, 400, "cannot initialize rank %u of '%s' with %lld pages (shrinking, or a "
		             "rank outside world size %u)", rank, ns,
		     (long long)json_integer_value(pages), s->options.world_size);
		return;
	}
	if (rc < 0) {
		fail_store(r, rc, ns, rank);
		return;
	}
	if (!s->options.world_size)
		kvc_log_warn("http: namespace '%s' has no configured world size: a key is complete "
		             "once every rank initialized so far confirmed it (set [meta] world_size)",
		             ns);
	r->status = vllm ? 200 : 204;
	if (vllm)
		r->json = json_pack("{s:s}", "message", "Rank initialized");
}

static void do_allocate(struct kvc_http_server *s, const char *ns, uint32_t rank, json_t *body,
                        bool vllm, struct reply *r)
{
	struct kvc_pool_key *keys;
	uint32_t n;
	if (parse_keys(json_object_get(body, "keys"), true, &keys, &n) < 0) {
		fail(r, 400, "need 'keys': a list of [key, prefix_key] pairs");
		return;
	}
	struct kvc_pool_allocation *out = calloc(n ? n : 1, sizeof(*out));
	int rc = out ? kvc_pool_allocate(s->pools, ns, rank, keys, n, kvc_pool_now_ms(s->pools), out) : -ENOMEM;
	if (rc < 0) {
		fail_store(r, rc, ns, rank);
	} else {
		json_t *list = json_array();
		for (uint32_t i = 0; i < n; i++) {
			json_t *item = vllm ? json_pack("[s#I]", keys[i].bytes, (int)keys[i].length,
			                                (json_int_t)out[i].page)
			                    : json_pack("[bI]", out[i].already, (json_int_t)out[i].page);
			json_array_append_new(list, item);
		}
		r->status = 200;
		r->json = vllm ? json_pack("{s:I,s:o}", "rank", (json_int_t)rank, "results", list)
		               : json_pack("{s:o}", "indices", list);
	}
	free(out);
	free(keys);
}

static void do_confirm(struct kvc_http_server *s, const char *ns, uint32_t rank, json_t *body,
                       const char *field, struct reply *r)
{
	struct kvc_pool_key *keys = NULL;
	int64_t *pages = NULL, *release = NULL;
	uint32_t n = 0, m = 0;
	json_t *confirmations = json_object_get(body, field);
	if (!confirmations)
		confirmations = json_array(); /* releases only */
	else
		json_incref(confirmations);
	if (parse_confirmations(confirmations, &keys, &pages, &n) < 0 ||
	    parse_pages(json_object_get(body, "pages_to_release"), &release, &m) < 0) {
		fail(r, 400, "need '%s': a list of [key, page] pairs, and 'pages_to_release': a "
		             "list of pages", field);
	} else {
		int rc = kvc_pool_confirm(s->pools, ns, rank, keys, pages, n, release, m, kvc_pool_now_ms(s->pools),
		                          NULL);
		if (rc < 0)
			fail_store(r, rc, ns, rank);
		else
			r->status = 204;
		free(keys);
		free(pages);
	}
	free(release);
	json_decref(confirmations);
}

static void do_exists(struct kvc_http_server *s, const char *ns, json_t *body, struct reply *r)
{
	struct kvc_pool_key *keys;
	uint32_t n;
	if (parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		fail(r, 400, "need 'keys': a list of strings");
		return;
	}
	bool *out = calloc(n ? n : 1, sizeof(*out));
	int rc = out ? kvc_pool_exists(s->pools, ns, keys, n, out) : -ENOMEM;
	if (rc < 0) {
		fail_store(r, rc, ns, 0);
	} else {
		json_t *list = json_array();
		for (uint32_t i = 0; i < n; i++) {
			json_array_append_new(list, json_boolean(out[i]));
			atomic_fetch_add(out[i] ? &s->hits : &s->misses, 1);
		}
		r->status = 200;
		r->json = json_pack("{s:o}", "exists", list);
	}
	free(out);
	free(keys);
}

static void do_locations(struct kvc_http_server *s, const char *ns, uint32_t rank, json_t *body,
                         const char *field, struct reply *r)
{
	struct kvc_pool_key *keys;
	uint32_t n;
	if (parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		fail(r, 400, "need 'keys': a list of strings");
		return;
	}
	int64_t *pages = calloc(n ? n : 1, sizeof(*pages));
	int rc = pages ? kvc_pool_locations(s->pools, ns, rank, keys, n, kvc_pool_now_ms(s->pools),
	                                    s->options.lease_ms, pages)
	               : -ENOMEM;
	if (rc < 0) {
		fail_store(r, rc, ns, rank);
	} else {
		json_t *list = json_array();
		for (uint32_t i = 0; i < n; i++)
			json_array_append_new(list, pages[i] >= 0 ? json_integer(pages[i]) : json_null());
		r->status = 200;
		r->json = json_pack("{s:o}", field, list);
	}
	free(pages);
	free(keys);
}

static void do_delete(struct kvc_http_server *s, const char *ns, json_t *body, struct reply *r)
{
	struct kvc_pool_key *keys;
	uint32_t n;
	if (parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		fail(r, 400, "need 'keys': a list of strings");
		return;
	}
	int rc = kvc_pool_delete(s->pools, ns, keys, n, kvc_pool_now_ms(s->pools));
	if (rc < 0)
		fail_store(r, rc, ns, 0);
	else
		r->status = 204;
	free(keys);
}

static void do_clear(struct kvc_http_server *s, const char *ns, struct reply *r)
{
	int rc = kvc_pool_clear(s->pools, ns, kvc_pool_now_ms(s->pools));
	if (rc < 0)
		fail_store(r, rc, ns, 0);
	else
		r->status = 204;
}

/* SGLang answers 404 for a rank (or namespace) nobody initialized. */
static bool rank_known(struct kvc_http_server *s, const char *ns, uint32_t rank,
                       struct reply *r)
{
	uint32_t pages, free_pages;
	if (kvc_pool_info(s->pools, ns, rank, &pages, &free_pages) == 0)
		return true;
	fail(r, 404, "rank %u is not initialized in namespace '%s'", rank, ns);
	return false;
}

struct metrics_out {
	FILE *out;
	struct kvc_pool_store *pools;
};

/* A namespace as a Prometheus label value: backslash, double quote and
 * newline escaped, other control bytes dropped (namespaces are bytes a
 * client chose). */
static void label_value(const char *ns, char *out, size_t cap)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)ns; *p && n + 3 < cap; p++) {
		if (*p == '\\' || *p == '"') {
			out[n++] = '\\';
			out[n++] = (char)*p;
		} else if (*p == '\n') {
			out[n++] = '\\';
			out[n++] = 'n';
		} else if (*p >= 0x20 && *p != 0x7f) {
			out[n++] = (char)*p;
		}
	}
	out[n] = '\0';
}

static int metrics_pool(void *arg, const char *raw_ns, uint32_t rank, uint32_t num_pages,
                        uint32_t free_pages)
{
	struct metrics_out *m = arg;
	char ns[2 * KVC_POOL_MAX_NAMESPACE + 1];
	label_value(raw_ns, ns, sizeof(ns));
	fprintf(m->out, "kvc_pool_pages{namespace=\"%s\",rank=\"%u\"} %u\n", ns, rank, num_pages);
	fprintf(m->out, "kvc_pool_pages_free{namespace=\"%s\",rank=\"%u\"} %u\n", ns, rank,
	        free_pages);
	fprintf(m->out, "kvc_pool_pages_used{namespace=\"%s\",rank=\"%u\"} %u\n", ns, rank,
	        num_pages - free_pages);
	struct kvc_pool_stats st;
	if (rank == 0 && kvc_pool_stats(m->pools, raw_ns, 0, kvc_pool_now_ms(m->pools), &st) == 0) {
		fprintf(m->out, "kvc_pool_keys{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.keys);
		fprintf(m->out, "kvc_pool_keys_complete{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.complete_keys);
		fprintf(m->out, "kvc_pool_keys_leased{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.leased_keys);
		fprintf(m->out, "kvc_pool_evictions_total{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.evictions);
		fprintf(m->out, "kvc_pool_world_size{namespace=\"%s\"} %u\n", ns, st.world_size);
	}
	return 0;
}

static void do_metrics(struct kvc_http_server *s, struct reply *r)
{
	char *text = NULL;
	size_t size = 0;
	FILE *out = open_memstream(&text, &size);
	if (!out) {
		fail(r, 500, "out of memory");
		return;
	}
	struct metrics_out m = {out, s->pools};
	fprintf(out, "# TYPE kvc_pool_pages gauge\n");
	kvc_pool_list(s->pools, metrics_pool, &m);
	fprintf(out, "# TYPE kvc_http_requests_total counter\n");
	for (int i = 0; i < R_COUNT; i++) {
		uint64_t n = atomic_load(&s->requests[i]);
		if (!n)
			continue;
		fprintf(out, "kvc_http_requests_total{route=\"%s\"} %llu\n", route_names[i],
		        (unsigned long long)n);
		fprintf(out, "kvc_http_errors_total{route=\"%s\"} %llu\n", route_names[i],
		        (unsigned long long)atomic_load(&s->errors[i]));
		fprintf(out, "kvc_http_request_seconds_sum{route=\"%s\"} %.6f\n", route_names[i],
		        (double)atomic_load(&s->latency_us[i]) / 1e6);
		fprintf(out, "kvc_http_request_seconds_count{route=\"%s\"} %llu\n", route_names[i],
		        (unsigned long long)n);
	}
	fprintf(out, "kvc_pool_exists_hits_total %llu\nkvc_pool_exists_misses_total %llu\n",
	        (unsigned long long)atomic_load(&s->hits),
	        (unsigned long long)atomic_load(&s->misses));
	fclose(out);
	r->status = 200;
	r->text = text;
}

/* Which route a method and URL name; *rank gets the rank in the path. */
static enum route_id route_of(const char *method, const char *url, uint32_t *rank)
{
	char tail[64];
	unsigned r = 0;
	int used = 0;
	bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
	if (get && strcmp(url, "/health") == 0)
		return R_HEALTH;
	if (get && strcmp(url, "/metrics") == 0)
		return R_METRICS;
	if (!post)
		return R_UNKNOWN;
	static const struct {
		const char *url;
		enum route_id id;
	} fixed[] = {{"/keys/batch_allocate", R_V_ALLOC}, {"/keys/confirm_write", R_V_CONFIRM},
	             {"/keys/batch_exists", R_V_EXISTS}, {"/keys/get_locations", R_V_LOCATIONS},
	             {"/clear", R_V_CLEAR}};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (strcmp(url, fixed[i].url) == 0)
			return fixed[i].id;
	if (sscanf(url, "/rank/%u/initialize%n", &r, &used) == 1 && url[used] == '\0') {
		*rank = r;
		return r < KVC_POOL_MAX_WORLD ? R_V_INIT : R_UNKNOWN;
	}
	if (sscanf(url, "/%u/%63[a-z_]%n", &r, tail, &used) != 2 || url[used] != '\0' ||
	    r >= KVC_POOL_MAX_WORLD)
		return R_UNKNOWN;
	*rank = r;
	static const struct {
		const char *name;
		enum route_id id;
	} sglang[] = {{"initialize", R_S_INIT}, {"exists", R_S_EXISTS},
	              {"reserve_and_allocate_page_indices", R_S_RESERVE},
	              {"confirm_write", R_S_CONFIRM}, {"delete_keys", R_S_DELETE},
	              {"clear", R_S_CLEAR}, {"get_page_indices", R_S_INDICES}};
	for (size_t i = 0; i < sizeof(sglang) / sizeof(sglang[0]); i++)
		if (strcmp(tail, sglang[i].name) == 0)
			return sglang[i].id;
	return R_UNKNOWN;
}

/* One routed request: what its handler needs. */
struct call {
	struct kvc_http_server *s;
	const char *ns;     /* vLLM's configured namespace or SGLang's from the body */
	uint32_t rank;      /* from the path, or the body's for vLLM's key routes */
	json_t *body;
	struct reply *r;
};

static void r_v_init(struct call *c) { do_init(c->s, c->ns, c->rank, c->body, true, c->r); }
static void r_v_alloc(struct call *c) { do_allocate(c->s, c->ns, c->rank, c->body, true, c->r); }
static void r_v_confirm(struct call *c)
{
	do_confirm(c->s, c->ns, c->rank, c->body, "confirmations", c->r);
}
static void r_exists(struct call *c) { do_exists(c->s, c->ns, c->body, c->r); }
static void r_v_locations(struct call *c)
{
	do_locations(c->s, c->ns, c->rank, c->body, "locations", c->r);
}
static void r_clear(struct call *c) { do_clear(c->s, c->ns, c->r); }
static void r_s_init(struct call *c) { do_init(c->s, c->ns, c->rank, c->body, false, c->r); }
static void r_s_reserve(struct call *c)
{
	do_allocate(c->s, c->ns, c->rank, c->body, false, c->r);
}
static void r_s_confirm(struct call *c)
{
	do_confirm(c->s, c->ns, c->rank, c->body, "written_keys_to_confirm", c->r);
}
static void r_s_delete(struct call *c) { do_delete(c->s, c->ns, c->body, c->r); }
static void r_s_indices(struct call *c)
{
	do_locations(c->s, c->ns, c->rank, c->body, "indices", c->r);
}

/* The pool routes: whose (SGLang's take their namespace from the body and
 * answer 404 for an unknown rank), where the rank comes from (the body's
 * "rank" for vLLM's key routes), whether it destroys keys (taken only from
 * the peers [meta] http_destructive allows), and the handler. Health,
 * metrics and unknown routes are answered before this table. */
static const struct {
	bool sglang;
	bool body_rank;
	bool destructive;
	void (*fn)(struct call *c);
} routes[R_COUNT] = {
	[R_V_INIT] = {false, false, false, r_v_init},
	[R_V_ALLOC] = {false, true, false, r_v_alloc},
	[R_V_CONFIRM] = {false, true, false, r_v_confirm},
	[R_V_EXISTS] = {false, false, false, r_exists},
	[R_V_LOCATIONS] = {false, true, false, r_v_locations},
	[R_V_CLEAR] = {false, false, true, r_clear},
	[R_S_INIT] = {true, false, false, r_s_init},
	[R_S_EXISTS] = {true, false, false, r_exists},
	[R_S_RESERVE] = {true, false, false, r_s_reserve},
	[R_S_CONFIRM] = {true, false, false, r_s_confirm},
	[R_S_DELETE] = {true, false, true, r_s_delete},
	[R_S_CLEAR] = {true, false, true, r_clear},
	[R_S_INDICES] = {true, false, false, r_s_indices},
};

/* With a token, "Bearer <token>" (the scheme in any case). */
static bool authorized(const struct kvc_http_server *s, const char *header)
{
	if (!s->options.token_length)
		return true;
	if (!header || strncasecmp(header, "Bearer ", 7) != 0)
		return false;
	const char *token = header + 7;
	while (*token == ' ')
		token++;
	return kvc_auth_equal(token, strlen(token), s->token, s->options.token_length);
}

static bool destructive_allowed(const struct kvc_http_server *s, bool loopback)
{
	return s->options.destructive == KVC_HTTP_DESTRUCTIVE_ANY ||
	       (s->options.destructive == KVC_HTTP_DESTRUCTIVE_LOOPBACK && loopback);
}

static void dispatch(struct kvc_http_server *s, enum route_id id, uint32_t path_rank,
                     json_t *body, struct reply *r)
{
	struct call c = {.s = s, .rank = path_rank, .body = body, .r = r};
	if (!routes[id].fn) {
		fail(r, 404, "no such route");
		return;
	}
	c.ns = routes[id].sglang ? sglang_namespace(body) : s->vllm_namespace;
	if (routes[id].body_rank && !get_rank(body, &c.rank)) {
		fail(r, 400, "need 'rank': an integer in [0, %d)", KVC_POOL_MAX_WORLD);
		return;
	}
	if (routes[id].sglang && (strlen(c.ns) == 0 || strlen(c.ns) > KVC_POOL_MAX_NAMESPACE)) {
		fail(r, 400, "'namespace' must be 1 to %d bytes", KVC_POOL_MAX_NAMESPACE);
		return;
	}
	if (routes[id].sglang && id != R_S_INIT && !rank_known(s, c.ns, path_rank, r))
		return;
	routes[id].fn(&c);
}

/* A reply as text: JSON or Prometheus text, owned by the caller. */
static void render(struct reply *r, struct kvc_http_answer *out)
{
	out->status = r->status;
	out->text = r->text;
	out->content_type = "text/plain; version=0.0.4";
	if (r->json) {
		out->text = json_dumps(r->json, JSON_COMPACT);
		out->content_type = "application/json";
		json_decref(r->json);
	}
	if (!out->text)
		out->content_type = NULL;
}

void kvc_http_serve(struct kvc_http_server *s, const struct kvc_http_request *q,
                    struct kvc_http_answer *out)
{
	uint64_t start = monotonic_us();
	uint32_t path_rank = 0;
	enum route_id id = route_of(q->method, q->url, &path_rank);
	struct reply r = {0};
	json_error_t error;
	json_t *body = NULL;
	if (id != R_HEALTH && !authorized(s, q->authorization)) {
		fail(&r, 401, "this server needs \"Authorization: Bearer <token>\"");
	} else if (routes[id].destructive && !destructive_allowed(s, q->loopback)) {
		fail(&r, 403, "%s is refused from this peer ([meta] http_destructive)",
		     route_names[id]);
	} else if (q->too_big) {
		fail(&r, 413, "request body over %u bytes", s->options.max_body);
	} else if ((id == R_V_INIT || id == R_V_ALLOC || id == R_S_INIT || id == R_S_RESERVE) &&
	           s->options.space && kvc_reserve_admit(s->options.space, 0) < 0) {
		fail(&r, 507, "the metadata volume is at its reserve: delete keys or files first");
	} else if (id == R_HEALTH) {
		r.status = 200;
		r.json = json_pack("{s:s}", "status", "ok");
	} else if (id == R_METRICS) {
		do_metrics(s, &r);
	} else if (id == R_UNKNOWN) {
		fail(&r, 404, "no route %s %s", q->method, q->url);
	} else {
		body = q->length ? json_loadb(q->data, q->length, 0, &error) : json_object();
		if (!body)
			fail(&r, 400, "malformed JSON: %s", error.text);
		else if (!json_is_object(body))
			fail(&r, 400, "the body must be a JSON object");
		else
			dispatch(s, id, path_rank, body, &r);
		json_decref(body);
	}
	atomic_fetch_add(&s->requests[id], 1);
	if (r.status >= 400)
		atomic_fetch_add(&s->errors[id], 1);
	atomic_fetch_add(&s->latency_us[id], monotonic_us() - start);
	render(&r, out);
}

static enum MHD_Result send_answer(struct MHD_Connection *conn, struct kvc_http_answer *a)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		a->text ? strlen(a->text) : 0, a->text ? a->text : (void *)"",
		a->text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		free(a->text);
		return MHD_NO;
	}
	if (a->content_type)
		MHD_add_response_header(resp, "Content-Type", a->content_type);
	if (a->status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"kvcfs\"");
	enum MHD_Result ok = MHD_queue_response(conn, a->status, resp);
	MHD_destroy_response(resp);
	return ok;
}

/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
static bool is_loopback(const struct sockaddr *sa)
{
	if (sa && sa->sa_family == AF_INET)
		return ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24 == 127;
	if (sa && sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **state)
{
	struct kvc_http_server *s = cls;
	struct upload *up = *state;
	(void)version;
	if (!up) { /* first call: headers only */
		up = calloc(1, sizeof(*up));
		*state = up;
		return up ? MHD_YES : MHD_NO;
	}
	if (*data_size) { /* a piece of the body */
		if (!up->too_big && up->length + *data_size <= s->options.max_body) {
			char *grown = realloc(up->data, up->length + *data_size + 1);
			if (!grown)
				return MHD_NO;
			up->data = grown;
			memcpy(up->data + up->length, data, *data_size);
			up->length += *data_size;
		} else {
			up->too_big = true; /* keep reading, answer 413 at the end */
		}
		*data_size = 0;
		return MHD_YES;
	}
	const union MHD_ConnectionInfo *peer =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct kvc_http_request request = {
		.method = method, .url = url, .data = up->data, .length = up->length,
		.too_big = up->too_big, .loopback = peer && is_loopback(peer->client_addr),
		.authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_AUTHORIZATION)};
	struct kvc_http_answer answer;
	kvc_http_serve(s, &request, &answer);
	return send_answer(conn, &answer);
}

static void request_done(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode code)
{
	struct upload *up = *state;
	(void)cls, (void)conn, (void)code;
	if (up) {
		free(up->data);
		free(up);
		*state = NULL;
	}
}

int kvc_http_create(const struct kvc_http_options *options, struct kvc_pool_store *pools,
                    struct kvc_http_server **out)
{
	if (options->token_length > KVC_AUTH_MAX_KEY)
		return -EINVAL;
	struct kvc_http_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->pools = pools;
	s->options = *options;
	snprintf(s->vllm_namespace, sizeof(s->vllm_namespace), "%s", options->vllm_namespace);
	s->options.vllm_namespace = s->vllm_namespace;
	if (options->token_length)
		memcpy(s->token, options->token, options->token_length);
	s->options.token = s->token;
	*out = s;
	return 0;
}

int kvc_http_start(const struct kvc_http_options *options, struct kvc_pool_store *pools,
                   struct kvc_http_server **out)
{
	char host[KVC_NET_ADDRESS_MAX];
	struct kvc_http_server *s;
	const char *colon = strrchr(options->address, ':');
	if (!colon || (size_t)(colon - options->address) >= sizeof(host))
		return -EINVAL;
	memcpy(host, options->address, (size_t)(colon - options->address));
	host[colon - options->address] = '\0';
	struct sockaddr_in addr = {.sin_family = AF_INET};
	long port = strtol(colon + 1, NULL, 10);
	if (inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host,
	              &addr.sin_addr) != 1 || port <= 0 || port > 65535)
		return -EINVAL;
	addr.sin_port = htons((uint16_t)port);
	int rc = kvc_http_create(options, pools, &s);
	if (rc < 0)
		return rc;
	s->daemon = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_TURBO | MHD_USE_ERROR_LOG, 0,
		NULL, NULL,
		handle, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
		MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(options->threads > 0 ? options->threads : 4),
		MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
	if (!s->daemon) {
		free(s);
		return -EADDRINUSE;
	}
	*out = s;
	return 0;
}

void kvc_http_stop(struct kvc_http_server *s)
{
	if (!s)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	free(s);
}
