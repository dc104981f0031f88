/* http: see http.h and http_internal.h; routes and payloads:
 * docs/pools.md. */
#include "meta/http_internal.h"

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
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "core/net.h"

const char *const kvc_http_route_names[R_COUNT] = {
	"health", "metrics", "vllm_initialize", "vllm_batch_allocate", "vllm_confirm_write",
	"vllm_batch_exists", "vllm_get_locations", "vllm_clear", "sglang_initialize",
	"sglang_exists", "sglang_reserve_and_allocate", "sglang_confirm_write",
	"sglang_delete_keys", "sglang_clear", "sglang_get_page_indices", "pool_wait", "unknown"};

uint64_t kvc_http_now_us(void)
{
	return (uint64_t)kvc_clock_monotonic_ns() / 1000;
}

void kvc_http_fail(struct reply *r, unsigned status, const char *fmt, ...)
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
		kvc_http_fail(r, 404, "rank %u is not initialized in namespace '%s'", rank, ns);
	else if (rc == -EINVAL)
		kvc_http_fail(r, 400, "invalid request for namespace '%s'", ns);
	else
		kvc_http_fail(r, 500, "pool store: %s", strerror(-rc));
}

int kvc_http_parse_keys(json_t *array, bool pairs, struct kvc_pool_key **out, uint32_t *count)
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

/* (key, page) pairs and their pages (on failure both NULL). */
static int parse_confirmations(json_t *array, struct kvc_pool_key **keys, int64_t **pages,
                               uint32_t *count)
{
	int rc = kvc_http_parse_keys(array, true, keys, count);
	if (rc < 0)
		return rc;
	*pages = calloc(*count ? *count : 1, sizeof(**pages));
	for (uint32_t i = 0; *pages && i < *count; i++) {
		json_t *page = json_array_get(json_array_get(array, i), 1);
		if (!json_is_integer(page)) {
			free(*pages);
			free(*keys);
			*pages = NULL;
			*keys = NULL;
			return -EINVAL;
		}
		(*pages)[i] = json_integer_value(page);
	}
	if (!*pages) {
		free(*keys);
		*keys = NULL;
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
			*pages = NULL; /* the caller frees what it holds: nothing */
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
		kvc_http_fail(r, 400, "num_pages must be an integer in [1, %u]", KVC_POOL_MAX_PAGES);
		return;
	}
	int rc = kvc_pool_init(s->pools, ns, rank, (uint32_t)json_integer_value(pages),
	                       s->options.world_size);
	if (rc == -EINVAL) {
		kvc_http_fail(r, 400, "cannot initialize rank %u of '%s' with %lld pages (shrinking, or a "
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
	if (kvc_http_parse_keys(json_object_get(body, "keys"), true, &keys, &n) < 0) {
		kvc_http_fail(r, 400, "need 'keys': a list of [key, prefix_key] pairs");
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
		kvc_http_fail(r, 400, "need '%s': a list of [key, page] pairs, and 'pages_to_release': a "
		             "list of pages", field);
	} else {
		int rc = kvc_pool_confirm(s->pools, ns, rank, keys, pages, n, release, m, kvc_pool_now_ms(s->pools),
		                          NULL);
		if (rc < 0)
			fail_store(r, rc, ns, rank);
		else
			r->status = 204;
	}
	free(keys); /* NULL where parsing failed: each parser frees its own */
	free(pages);
	free(release);
	json_decref(confirmations);
}

static void do_exists(struct kvc_http_server *s, const char *ns, json_t *body, struct reply *r)
{
	struct kvc_pool_key *keys;
	uint32_t n;
	if (kvc_http_parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		kvc_http_fail(r, 400, "need 'keys': a list of strings");
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
	if (kvc_http_parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		kvc_http_fail(r, 400, "need 'keys': a list of strings");
		return;
	}
	int64_t *pages = calloc(n ? n : 1, sizeof(*pages));
	int rc = pages ? kvc_pool_locations(s->pools, ns, rank, keys, n, kvc_pool_now_ms(s->pools),
	                                    s->options.lease_ms, pages, NULL)
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
	if (kvc_http_parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		kvc_http_fail(r, 400, "need 'keys': a list of strings");
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
	kvc_http_fail(r, 404, "rank %u is not initialized in namespace '%s'", rank, ns);
	return false;
}

/* POST /pools/{ns}/wait: the namespace (1 to KVC_POOL_MAX_NAMESPACE
 * bytes, any but NUL) into ns; another length is no such route. */
static bool wait_route(const char *url, char ns[KVC_POOL_MAX_NAMESPACE + 1])
{
	static const char head[] = "/pools/", tail[] = "/wait";
	size_t n = strlen(url);
	if (n < sizeof(head) + sizeof(tail) - 1 || strncmp(url, head, sizeof(head) - 1) != 0 ||
	    strcmp(url + n - (sizeof(tail) - 1), tail) != 0)
		return false;
	size_t length = n - (sizeof(head) - 1) - (sizeof(tail) - 1);
	if (length > KVC_POOL_MAX_NAMESPACE)
		return false;
	memcpy(ns, url + sizeof(head) - 1, length);
	ns[length] = '\0';
	return true;
}

/* Which route a method and URL name; *rank gets the rank in the path, ns
 * the namespace in the path. */
static enum kvc_http_route route_of(const char *method, const char *url, uint32_t *rank,
                                    char ns[KVC_POOL_MAX_NAMESPACE + 1])
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
		enum kvc_http_route id;
	} fixed[] = {{"/keys/batch_allocate", R_V_ALLOC}, {"/keys/confirm_write", R_V_CONFIRM},
	             {"/keys/batch_exists", R_V_EXISTS}, {"/keys/get_locations", R_V_LOCATIONS},
	             {"/clear", R_V_CLEAR}};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (strcmp(url, fixed[i].url) == 0)
			return fixed[i].id;
	if (wait_route(url, ns))
		return R_WAIT;
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
		enum kvc_http_route id;
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
	uint64_t start_us;
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
static void r_wait(struct call *c) { kvc_http_wait_parse(c->s, c->ns, c->body, c->r, c->start_us); }

/* The pool routes: whose (SGLang's take their namespace from the body and
 * answer 404 for an unknown rank; path_ns: the namespace is in the path;
 * the others use vLLM's), where the rank comes from (the body's "rank"
 * for vLLM's key routes), whether it destroys keys (taken only from the
 * peers [meta] http_destructive allows), and the handler. Health, metrics
 * and unknown routes are answered before this table. */
static const struct {
	bool sglang;
	bool body_rank;
	bool destructive;
	void (*fn)(struct call *c);
	bool path_ns;
} routes[R_COUNT] = {
	[R_V_INIT] = {false, false, false, r_v_init, false},
	[R_V_ALLOC] = {false, true, false, r_v_alloc, false},
	[R_V_CONFIRM] = {false, true, false, r_v_confirm, false},
	[R_V_EXISTS] = {false, false, false, r_exists, false},
	[R_V_LOCATIONS] = {false, true, false, r_v_locations, false},
	[R_V_CLEAR] = {false, false, true, r_clear, false},
	[R_S_INIT] = {true, false, false, r_s_init, false},
	[R_S_EXISTS] = {true, false, false, r_exists, false},
	[R_S_RESERVE] = {true, false, false, r_s_reserve, false},
	[R_S_CONFIRM] = {true, false, false, r_s_confirm, false},
	[R_S_DELETE] = {true, false, true, r_s_delete, false},
	[R_S_CLEAR] = {true, false, true, r_clear, false},
	[R_S_INDICES] = {true, false, false, r_s_indices, false},
	[R_WAIT] = {false, false, false, r_wait, true},
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

static void dispatch(struct kvc_http_server *s, enum kvc_http_route id, uint32_t path_rank,
                     const char *path_ns, json_t *body, struct reply *r, uint64_t start_us)
{
	struct call c = {.s = s, .rank = path_rank, .body = body, .r = r, .start_us = start_us};
	if (!routes[id].fn) {
		kvc_http_fail(r, 404, "no such route");
		return;
	}
	c.ns = routes[id].path_ns ? path_ns
	     : routes[id].sglang  ? sglang_namespace(body)
	                          : s->vllm_namespace;

	if (routes[id].body_rank && !get_rank(body, &c.rank)) {
		kvc_http_fail(r, 400, "need 'rank': an integer in [0, %d)", KVC_POOL_MAX_WORLD);
		return;
	}
	if (routes[id].sglang && (strlen(c.ns) == 0 || strlen(c.ns) > KVC_POOL_MAX_NAMESPACE)) {
		kvc_http_fail(r, 400, "'namespace' must be 1 to %d bytes", KVC_POOL_MAX_NAMESPACE);
		return;
	}
	if (routes[id].sglang && id != R_S_INIT && !rank_known(s, c.ns, path_rank, r))
		return;
	routes[id].fn(&c);
}

void kvc_http_render(struct reply *r, struct kvc_http_answer *out)
{
	out->wait = r->wait;
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
	uint64_t start = kvc_http_now_us();
	uint32_t path_rank = 0;
	char path_ns[KVC_POOL_MAX_NAMESPACE + 1] = "";
	enum kvc_http_route id = route_of(q->method, q->url, &path_rank, path_ns);
	struct reply r = {0};
	json_error_t error;
	json_t *body = NULL;
	if (id != R_HEALTH && !authorized(s, q->authorization)) {
		kvc_http_fail(&r, 401, "this server needs \"Authorization: Bearer <token>\"");
	} else if (routes[id].destructive && !destructive_allowed(s, q->loopback)) {
		kvc_http_fail(&r, 403, "%s is refused from this peer ([meta] http_destructive)",
		     kvc_http_route_names[id]);
	} else if (q->too_big) {
		kvc_http_fail(&r, 413, "request body over %u bytes", s->options.max_body);
	} else if ((id == R_V_INIT || id == R_V_ALLOC || id == R_S_INIT || id == R_S_RESERVE) &&
	           s->options.space && kvc_reserve_admit(s->options.space, 0) < 0) {
		kvc_http_fail(&r, 507, "the metadata volume is at its reserve: delete keys or files first");
	} else if (id == R_HEALTH) {
		r.status = 200;
		r.json = json_pack("{s:s}", "status", "ok");
	} else if (id == R_METRICS) {
		kvc_http_metrics(s, &r);
	} else if (id == R_UNKNOWN) {
		kvc_http_fail(&r, 404, "no route %s %s", q->method, q->url);
	} else {
		body = q->length ? json_loadb(q->data, q->length, 0, &error) : json_object();
		if (!body)
			kvc_http_fail(&r, 400, "malformed JSON: %s", error.text);
		else if (!json_is_object(body))
			kvc_http_fail(&r, 400, "the body must be a JSON object");
		else
			dispatch(s, id, path_rank, path_ns, body, &r, start);
		json_decref(body);
	}
	if (!r.wait) /* a wait counts when it ends (kvc_http_wait_run) */
		kvc_http_account(s, id, r.status, start);
	kvc_http_render(&r, out);
}

void kvc_http_account(struct kvc_http_server *s, enum kvc_http_route id, unsigned status,
                      uint64_t start_us)
{
	atomic_fetch_add(&s->requests[id], 1);
	if (status >= 400)
		atomic_fetch_add(&s->errors[id], 1);
	atomic_fetch_add(&s->latency_us[id], kvc_http_now_us() - start_us);
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
	if (up->answered) { /* resumed: the wait's thread prepared the answer */
		up->answered = false;
		MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
		                          KVC_HTTP_CONNECTION_TIMEOUT_S);
		return send_answer(conn, &up->answer);
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
	if (answer.wait && kvc_http_wait_defer(s, conn, up, &answer))
		return MHD_YES; /* suspended: called again with the answer */
	return send_answer(conn, &answer);
}

static void request_done(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode code)
{
	struct upload *up = *state;
	(void)cls, (void)conn, (void)code;
	if (up) {
		if (up->answered) /* a wait's answer that never went out */
			free(up->answer.text);
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
	int rc = kvc_http_waits_init(s);
	if (rc < 0) {
		free(s);
		return rc;
	}
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
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_TURBO | MHD_USE_ERROR_LOG |
			MHD_ALLOW_SUSPEND_RESUME, 0,
		NULL, NULL,
		handle, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
		MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(options->threads > 0 ? options->threads : 4),
		MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
		MHD_OPTION_CONNECTION_TIMEOUT, KVC_HTTP_CONNECTION_TIMEOUT_S, MHD_OPTION_END);
	if (!s->daemon) {
		kvc_http_stop(s);
		return -EADDRINUSE;
	}
	*out = s;
	return 0;
}

void kvc_http_stop(struct kvc_http_server *s)
{
	if (!s)
		return;
	if (s->daemon) {
		kvc_http_waits_stop(s); /* no connection stays suspended */
		MHD_stop_daemon(s->daemon);
	}
	kvc_http_waits_destroy(s);
	free(s);
}
