/*
 * etcd: the handle (endpoints, timeout) and the one way a unary call
 * reaches etcd: a JSON POST to the gateway with a curl easy handle of
 * its own, tried on each endpoint in turn within the handle's timeout
 * (etcd.h has the rules). The errno of a curl failure and of a gRPC
 * status come from the two tables below.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "mgmt/etcd_internal.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

/* curl_global_init is not safe to race; done once, never undone (the
 * process may hold several handles over its life). */
static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* gRPC status codes (google.golang.org/grpc/codes) -> errno. */
static const int grpc_errnos[] = {
	[1] = ECANCELED,   /* CANCELED */
	[2] = EIO,         /* UNKNOWN */
	[3] = EINVAL,      /* INVALID_ARGUMENT */
	[4] = ETIMEDOUT,   /* DEADLINE_EXCEEDED */
	[5] = ENOENT,      /* NOT_FOUND: lease not found */
	[6] = EEXIST,      /* ALREADY_EXISTS */
	[7] = EACCES,      /* PERMISSION_DENIED */
	[8] = ENOSPC,      /* RESOURCE_EXHAUSTED: etcd's space quota */
	[9] = EINVAL,      /* FAILED_PRECONDITION */
	[10] = EAGAIN,     /* ABORTED */
	[11] = ERANGE,     /* OUT_OF_RANGE: revision compacted or in the future */
	[12] = ENOTSUP,    /* UNIMPLEMENTED */
	[13] = EIO,        /* INTERNAL */
	[14] = EAGAIN,     /* UNAVAILABLE: no leader, leader changed, stopping */
	[15] = EIO,        /* DATA_LOSS */
	[16] = EACCES,     /* UNAUTHENTICATED */
};

int kvc_etcd_grpc_errno(json_int_t code)
{
	if (code <= 0 || code >= (json_int_t)(sizeof(grpc_errnos) / sizeof(grpc_errnos[0])))
		return -EIO;
	return -grpc_errnos[code];
}

/* curl results -> errno; a result without a row is -EIO. */
static const struct {
	CURLcode code;
	int err;
} curl_errnos[] = {
	{ CURLE_COULDNT_CONNECT, ECONNREFUSED },
	{ CURLE_COULDNT_RESOLVE_HOST, ECONNREFUSED },
	{ CURLE_OPERATION_TIMEDOUT, ETIMEDOUT },
	{ CURLE_RECV_ERROR, ECONNRESET },
	{ CURLE_SEND_ERROR, ECONNRESET },
	{ CURLE_GOT_NOTHING, ECONNRESET },
	{ CURLE_PARTIAL_FILE, ECONNRESET },
	{ CURLE_WRITE_ERROR, EPROTO }, /* our writer refused: over KVC_ETCD_MAX_BODY */
	{ CURLE_OUT_OF_MEMORY, ENOMEM },
	{ CURLE_SSL_CONNECT_ERROR, ECONNREFUSED },
};

int kvc_etcd_curl_errno(int code)
{
	for (size_t i = 0; i < sizeof(curl_errnos) / sizeof(curl_errnos[0]); i++)
		if ((int)curl_errnos[i].code == code)
			return -curl_errnos[i].err;
	return -EIO;
}

/* Errors after which another endpoint may do better. */
static bool endpoint_failed(int err)
{
	return err == -ECONNREFUSED || err == -ETIMEDOUT || err == -ECONNRESET ||
	       err == -EAGAIN;
}

void kvc_etcd_close(struct kvc_etcd *e)
{
	if (!e)
		return;
	for (int i = 0; i < e->n_urls; i++)
		free(e->urls[i]);
	free(e);
}

int kvc_etcd_open(const char *endpoints, int timeout_ms, struct kvc_etcd **out)
{
	struct kvc_etcd *e = NULL;
	const char *p = endpoints;
	int ret = 0;

	if (!endpoints || !*endpoints || timeout_ms <= 0 || !out)
		return -EINVAL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return -ENOMEM;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->timeout_ms = timeout_ms;
	while (*p) {
		size_t len = strcspn(p, ",");

		while (len && p[len - 1] == '/')
			len--;
		if (e->n_urls == KVC_ETCD_MAX_ENDPOINTS || len > 1024 ||
		    (strncmp(p, "http://", 7) != 0 && strncmp(p, "https://", 8) != 0) ||
		    len <= (size_t)(p[4] == 's' ? 8 : 7)) {
			ret = -EINVAL;
			goto out;
		}
		e->urls[e->n_urls] = strndup(p, len);
		if (!e->urls[e->n_urls]) {
			ret = -ENOMEM;
			goto out;
		}
		e->n_urls++;
		p += strcspn(p, ",");
		if (*p == ',')
			p++;
	}
	if (e->n_urls == 0)
		ret = -EINVAL;
out:
	if (ret) {
		kvc_etcd_close(e);
		return ret;
	}
	*out = e;
	return 0;
}

long kvc_etcd_connect_ms(const struct kvc_etcd *e, int64_t remain_ms)
{
	int64_t ms = e->timeout_ms / e->n_urls;

	if (ms < 200)
		ms = 200;
	if (ms > remain_ms)
		ms = remain_ms;
	return ms < 1 ? 1 : (long)ms;
}

/* The response body, bounded. */
struct body {
	char *data;
	size_t len, cap;
};

static size_t body_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct body *b = arg;
	size_t n = size * nmemb;

	if (n > KVC_ETCD_MAX_BODY - b->len)
		return 0; /* CURLE_WRITE_ERROR */
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *data;

		while (cap < b->len + n)
			cap *= 2;
		data = realloc(b->data, cap);
		if (!data)
			return 0;
		b->data = data;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	return n;
}

CURL *kvc_etcd_easy(struct kvc_etcd *e, int idx, const char *path, const char *body,
	struct curl_slist *hdrs)
{
	char url[1100];
	CURL *c = curl_easy_init();

	if (!c)
		return NULL;
	snprintf(url, sizeof(url), "%s%s", e->urls[idx], path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never an environment proxy */
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	return c;
}

/* One POST to one endpoint; on 0, *resp is the answer object. */
static int call_one(struct kvc_etcd *e, int idx, const char *path, const char *req,
	int64_t remain_ms, json_t **resp)
{
	struct curl_slist *hdrs = NULL;
	struct body b = { 0 };
	CURL *c = NULL;
	CURLcode rc;
	long status = 0;
	json_t *root = NULL;
	int ret = 0;

	hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	c = hdrs ? kvc_etcd_easy(e, idx, path, req, hdrs) : NULL;
	if (!c) {
		ret = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)remain_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, kvc_etcd_connect_ms(e, remain_ms));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		ret = kvc_etcd_curl_errno(rc);
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	root = b.len ? json_loadb(b.data, b.len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (!json_is_object(root)) {
		/* Not the gateway's JSON: a 5xx of a proxy or a dying server
		 * is worth another endpoint, anything else is a protocol error. */
		ret = status >= 500 ? -EAGAIN : -EPROTO;
		goto out;
	}
	if (status != 200) {
		const json_t *code = json_object_get(root, "code");

		ret = json_is_integer(code) ? kvc_etcd_grpc_errno(json_integer_value(code)) : -EPROTO;
		goto out;
	}
	*resp = root;
	root = NULL;
out:
	json_decref(root);
	free(b.data);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	return ret;
}

int kvc_etcd_call(struct kvc_etcd *e, const char *path, json_t *body, json_t **resp)
{
	int64_t deadline = kvc_clock_monotonic_ns() + (int64_t)e->timeout_ms * 1000000;
	int start = atomic_load(&e->current);
	char *req = json_dumps(body, JSON_COMPACT);
	int ret = -ETIMEDOUT;

	if (!req)
		return -ENOMEM;
	for (;;) {
		bool unavailable = false;

		for (int k = 0; k < e->n_urls; k++) {
			int idx = (start + k) % e->n_urls;
			int64_t remain_ms = (deadline - kvc_clock_monotonic_ns()) / 1000000;

			if (remain_ms <= 0) {
				ret = -ETIMEDOUT;
				goto out;
			}
			/* A hung member gets its share of what is left, not all
			 * of it: the endpoints after it must get their turn. */
			ret = call_one(e, idx, path, req, remain_ms / (e->n_urls - k), resp);
			if (!endpoint_failed(ret)) {
				if (ret == 0)
					atomic_store(&e->current, idx);
				goto out;
			}
			if (ret == -EAGAIN)
				unavailable = true;
		}
		/* Every endpoint failed: go round again only while some member
		 * answered (an election ends within a few hundred ms). */
		if (!unavailable)
			goto out;
		int64_t remain_ms = (deadline - kvc_clock_monotonic_ns()) / 1000000;
		if (remain_ms <= 0)
			goto out;
		struct timespec ts = { 0, (remain_ms < 100 ? remain_ms : 100) * 1000000 };
		nanosleep(&ts, NULL);
	}
out:
	free(req);
	return ret;
}
