/* Unit tests of the access rules of kvc-meta's HTTP routes, through
 * kvc_http_serve (no socket, so "from the network" is just a flag): the
 * bearer token guards every route but /health, and the destructive routes
 * (clear, delete_keys) are taken from the peers http_destructive allows;
 * and the checks of POST /pools/{ns}/wait. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "meta/http.h"
#include "meta/pool_store.h"
#include "test_dir.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_pool_store *pools;

static void setup(void)
{
	kvc_test_dir_make(dir, "http");
	cr_assert_eq(kvc_pool_store_open(dir, &pools), 0);
}

static void teardown(void)
{
	kvc_pool_store_close(pools);
	kvc_test_dir_remove(dir);
}

TestSuite(http, .init = setup, .fini = teardown);

static struct kvc_http_server *server(const char *token, int destructive)
{
	struct kvc_http_options options = {.address = "127.0.0.1:0", .max_body = 1 << 16,
	                                   .world_size = 1, .vllm_namespace = "vllm",
	                                   .token = token,
	                                   .token_length = token ? (uint32_t)strlen(token) : 0,
	                                   .destructive = destructive};
	struct kvc_http_server *s;
	cr_assert_eq(kvc_http_create(&options, pools, &s), 0);
	return s;
}

/* The status of one request. */
static unsigned ask(struct kvc_http_server *s, const char *method, const char *url,
                    const char *body, bool loopback, const char *authorization)
{
	struct kvc_http_request q = {.method = method, .url = url, .data = body,
	                             .length = body ? strlen(body) : 0, .loopback = loopback,
	                             .authorization = authorization};
	struct kvc_http_answer a;
	kvc_http_serve(s, &q, &a);
	if (a.wait) /* POST /pools/{ns}/wait: run here (a test's waits are short) */
		kvc_http_wait_run(s, a.wait, NULL, 0, &a);
	free(a.text);
	return a.status;
}

/* The JSON answer of one request (the caller frees it). */
static char *answer_of(struct kvc_http_server *s, const char *url, const char *body)
{
	struct kvc_http_request q = {.method = "POST", .url = url, .data = body,
	                             .length = strlen(body), .loopback = true};
	struct kvc_http_answer a;
	kvc_http_serve(s, &q, &a);
	if (a.wait)
		kvc_http_wait_run(s, a.wait, NULL, 0, &a);
	return a.text;
}

Test(http, destructive_routes_come_from_loopback_by_default)
{
	struct kvc_http_server *s = server(NULL, KVC_HTTP_DESTRUCTIVE_LOOPBACK);
	cr_assert_eq(ask(s, "POST", "/0/initialize", "{\"num_pages\": 4}", false, NULL), 204);
	cr_assert_eq(ask(s, "POST", "/0/exists", "{\"keys\": [\"a\"]}", false, NULL), 200,
	             "the other routes stay open to the network, as the connectors expect");
	cr_assert_eq(ask(s, "POST", "/clear", NULL, false, NULL), 403);
	cr_assert_eq(ask(s, "POST", "/0/clear", NULL, false, NULL), 403);
	cr_assert_eq(ask(s, "POST", "/0/delete_keys", "{\"keys\": [\"a\"]}", false, NULL), 403);
	cr_assert_eq(ask(s, "POST", "/clear", NULL, true, NULL), 204);
	cr_assert_eq(ask(s, "POST", "/0/clear", NULL, true, NULL), 204);
	cr_assert_eq(ask(s, "POST", "/0/delete_keys", "{\"keys\": [\"a\"]}", true, NULL), 204);
	kvc_http_stop(s);
}

Test(http, destructive_routes_from_any_peer_or_none)
{
	struct kvc_http_server *any = server(NULL, KVC_HTTP_DESTRUCTIVE_ANY);
	cr_assert_eq(ask(any, "POST", "/clear", NULL, false, NULL), 204);
	kvc_http_stop(any);
	struct kvc_http_server *none = server(NULL, KVC_HTTP_DESTRUCTIVE_NONE);
	cr_assert_eq(ask(none, "POST", "/clear", NULL, true, NULL), 403);
	cr_assert_eq(ask(none, "POST", "/0/delete_keys", "{\"keys\": [\"a\"]}", true, NULL), 403);
	cr_assert_eq(ask(none, "POST", "/keys/batch_exists", "{\"keys\": []}", true, NULL), 200);
	kvc_http_stop(none);
}

Test(http, a_token_guards_every_route_but_health)
{
	struct kvc_http_server *s = server(TOKEN, KVC_HTTP_DESTRUCTIVE_LOOPBACK);
	cr_assert_eq(ask(s, "GET", "/health", NULL, false, NULL), 200);
	cr_assert_eq(ask(s, "GET", "/metrics", NULL, true, NULL), 401);
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", true, NULL), 401);
	cr_assert_eq(ask(s, "POST", "/no/such/route", NULL, true, NULL), 401,
	             "no route is told apart without the token");
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", true,
	                 "Bearer 0123456789abcdef0123456789abcdeX"), 401);
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", true,
	                 "Bearer 0123456789abcdef"), 401, "a prefix of the token");
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", true,
	                 "Basic " TOKEN), 401);
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", true, TOKEN), 401);
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", true,
	                 "Bearer " TOKEN), 200);
	cr_assert_eq(ask(s, "POST", "/keys/batch_exists", "{\"keys\": []}", false,
	                 "bearer  " TOKEN), 200, "the scheme in any case");
	cr_assert_eq(ask(s, "GET", "/metrics", NULL, false, "Bearer " TOKEN), 200);
	cr_assert_eq(ask(s, "POST", "/clear", NULL, false, "Bearer " TOKEN), 403,
	             "the token does not lift the destructive rule");
	cr_assert_eq(ask(s, "POST", "/clear", NULL, true, "Bearer " TOKEN), 204);
	kvc_http_stop(s);
}

Test(http, wait_checks_its_input_and_answers_flags)
{
	struct kvc_http_server *s = server(NULL, KVC_HTTP_DESTRUCTIVE_LOOPBACK);
	cr_assert_eq(ask(s, "POST", "/0/initialize", "{\"num_pages\": 4}", true, NULL), 204);
	const char *url = "/pools/kv/wait";
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [\"a\"], \"timeout_ms\": 1}", true, NULL),
	             200);
	char *text = answer_of(s, url, "{\"keys\": [\"a\", \"b\"], \"timeout_ms\": 0}");
	cr_assert_str_eq(text, "{\"complete\":[false,false],\"timed_out\":true}");
	free(text);
	text = answer_of(s, url, "{\"keys\": [], \"timeout_ms\": 0}");
	cr_assert_str_eq(text, "{\"complete\":[],\"timed_out\":false}");
	free(text);
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [\"a\"]}", true, NULL), 400, "no timeout");
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [\"a\"], \"timeout_ms\": -1}", true, NULL),
	             400);
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [\"a\"], \"timeout_ms\": 600001}", true,
	                 NULL), 400, "over the cap");
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [\"a\"], \"timeout_ms\": \"1\"}", true,
	                 NULL), 400);
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [1], \"timeout_ms\": 1}", true, NULL), 400);
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": [\"\"], \"timeout_ms\": 1}", true, NULL),
	             400);
	cr_assert_eq(ask(s, "POST", url, "{\"keys\": ", true, NULL), 400, "malformed JSON");
	cr_assert_eq(ask(s, "POST", "/pools/nobody/wait", "{\"keys\": [\"a\"], \"timeout_ms\": 1}",
	                 true, NULL), 404);
	cr_assert_eq(ask(s, "POST", "/pools//wait", "{\"keys\": [], \"timeout_ms\": 1}", true,
	                 NULL), 404, "no namespace: no such route");
	cr_assert_eq(ask(s, "GET", url, NULL, true, NULL), 404, "POST only");
	/* Too many keys (the batch limit). */
	size_t cap = 16 + (KVC_POOL_MAX_WAIT_KEYS + 1) * 6 + 32;
	char *many = malloc(cap);
	size_t n = (size_t)snprintf(many, cap, "{\"keys\": [");
	for (int i = 0; i <= KVC_POOL_MAX_WAIT_KEYS; i++)
		n += (size_t)snprintf(many + n, cap - n, "%s\"k\"", i ? "," : "");
	snprintf(many + n, cap - n, "], \"timeout_ms\": 1}");
	cr_assert_eq(ask(s, "POST", url, many, true, NULL), 400);
	free(many);
	kvc_http_stop(s);
}
