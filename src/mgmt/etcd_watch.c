/*
 * etcd_watch: kvc_etcd_watch (etcd.h), a watch over the gateway's
 * streaming POST /v3/watch.
 *
 * The request is one WatchCreateRequest (progress_notify on; the header
 * Grpc-Metadata-Hasleader asks the member to end the stream when it loses
 * its leader); the answer is a stream of JSON objects that goes through the
 * splitter and decoder of etcd_json.c. A full-duplex stream (progress
 * requests sent on the request body) does not work over the gateway of
 * etcd 3.4: it answers nothing before the request body ends. So a stream
 * silent for the handle's timeout is checked by a probe on the side: a
 * POST /v3/maintenance/status to the same member within the timeout. A
 * member that does not answer it (dead host, stopped process) is given
 * up, and the watch resumes at next_revision on the next endpoint;
 * events delivered before are not delivered again (the decoder skips
 * revisions below next_revision). A killed member resets the connection
 * at once.
 *
 * One thread runs the whole watch: a curl multi handle (the stream and
 * the probe) polled together with the caller's stop fd, so a stop is seen
 * within one poll and no other thread touches the curl handles.
 */
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "mgmt/etcd_internal.h"

#define STOPPED 1 /* attempt result: fn or the stop fd ended the watch */

struct attempt {
	struct kvc_etcd_watch_state st;
	struct kvc_etcd_stream parser;
	int result; /* 0 while running, STOPPED, or -errno */
	int fn_rc; /* with STOPPED: what kvc_etcd_watch returns */
	int64_t alive_ns; /* when the member last showed it is alive */
	size_t probe_bytes; /* the probe's answer, counted and dropped */
};

static int on_object(void *arg, const char *obj, size_t len)
{
	struct attempt *a = arg;

	return kvc_etcd_watch_response(&a->st, obj, len, &a->fn_rc);
}

static size_t down_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct attempt *a = arg;
	size_t n = size * nmemb;
	int rc;

	a->alive_ns = kvc_clock_monotonic_ns();
	rc = kvc_etcd_stream_feed(&a->parser, ptr, n, on_object, a);
	if (rc) {
		a->result = rc > 0 ? STOPPED : rc;
		return 0; /* ends the transfer */
	}
	return n;
}

static size_t probe_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct attempt *a = arg;

	(void)ptr;
	a->probe_bytes += size * nmemb;
	return a->probe_bytes > 65536 ? 0 : size * nmemb;
}

/* The request: {"create_request":{...}}; NULL on ENOMEM. */
static char *create_request(const struct kvc_etcd_watch *w)
{
	json_t *cr = kvc_etcd_key_range(w->key, w->prefix), *req;
	char *text;

	if (!cr || json_object_set_new(cr, "progress_notify", json_true()) ||
	    (w->next_revision > 0 &&
		    json_object_set_new(cr, "start_revision", json_integer(w->next_revision)))) {
		json_decref(cr);
		return NULL;
	}
	req = json_pack("{s:o}", "create_request", cr);
	text = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	return text;
}

static bool stop_requested(int stop_fd, int wait_ms)
{
	struct pollfd p = { .fd = stop_fd, .events = POLLIN };

	return stop_fd >= 0 && poll(&p, 1, wait_ms) > 0 && (p.revents & (POLLIN | POLLHUP));
}

/* A probe finished: the member is alive if it answered 200. */
static void probe_done(struct attempt *a, CURL *probe, CURLcode rc)
{
	long status = 0;

	curl_easy_getinfo(probe, CURLINFO_RESPONSE_CODE, &status);
	if (rc == CURLE_OK && status == 200)
		a->alive_ns = kvc_clock_monotonic_ns();
	else
		a->result = rc == CURLE_OK ? -EAGAIN : kvc_etcd_curl_errno(rc);
}

/* Run the multi loop of one stream until it ends; sets a->result. */
static void pump(struct kvc_etcd *e, int idx, CURLM *m, CURL *c, struct attempt *a, int stop_fd,
	struct curl_slist *hdrs)
{
	int64_t timeout_ns = (int64_t)e->timeout_ms * 1000000;
	int64_t start = kvc_clock_monotonic_ns();
	int wait_ms = e->timeout_ms / 4 < 1 ? 1 : (e->timeout_ms / 4 > 1000 ? 1000 : e->timeout_ms / 4);
	CURL *probe = NULL;
	int running = 1;

	a->alive_ns = start;
	while (!a->result) {
		struct curl_waitfd wfd = { .fd = stop_fd, .events = CURL_WAIT_POLLIN };
		CURLMsg *msg;
		int left;
		int64_t now;

		if (curl_multi_perform(m, &running) != CURLM_OK) {
			a->result = -ENOMEM;
			break;
		}
		while ((msg = curl_multi_info_read(m, &left))) {
			if (msg->msg != CURLMSG_DONE || a->result)
				continue;
			/* A stream that ends is a stream that broke. */
			if (msg->easy_handle == c)
				a->result = msg->data.result == CURLE_OK
						    ? -ECONNRESET
						    : kvc_etcd_curl_errno(msg->data.result);
			else if (msg->easy_handle == probe)
				probe_done(a, probe, msg->data.result);
		}
		if (probe && (a->result || a->alive_ns > start)) {
			/* Finished (or no longer needed): gone before the next. */
			curl_multi_remove_handle(m, probe);
			curl_easy_cleanup(probe);
			probe = NULL;
		}
		if (a->result)
			break;
		now = kvc_clock_monotonic_ns();
		if (!a->st.created) {
			if (now - start > timeout_ns)
				a->result = -ETIMEDOUT;
		} else if (!probe && now - a->alive_ns > timeout_ns) {
			probe = kvc_etcd_easy(e, idx, "/v3/maintenance/status", "{}", hdrs);
			if (!probe) {
				a->result = -ENOMEM;
				break;
			}
			start = now; /* a probe is current while alive_ns <= start */
			curl_easy_setopt(probe, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
			curl_easy_setopt(probe, CURLOPT_WRITEFUNCTION, probe_write);
			curl_easy_setopt(probe, CURLOPT_WRITEDATA, a);
			if (curl_multi_add_handle(m, probe) != CURLM_OK) {
				curl_easy_cleanup(probe);
				probe = NULL;
				a->result = -ENOMEM;
				break;
			}
		}
		wfd.revents = 0;
		if (curl_multi_poll(m, stop_fd >= 0 ? &wfd : NULL, stop_fd >= 0 ? 1 : 0, wait_ms,
			    NULL) != CURLM_OK) {
			a->result = -ENOMEM;
			break;
		}
		if (stop_fd >= 0 && (wfd.revents & CURL_WAIT_POLLIN)) {
			a->fn_rc = 0;
			a->result = STOPPED;
		}
	}
	if (probe) {
		curl_multi_remove_handle(m, probe);
		curl_easy_cleanup(probe);
	}
}

/* One stream on endpoint idx. Returns STOPPED or -errno; *created: the
 * watch was set up on it. */
static int watch_once(struct kvc_etcd *e, int idx, struct kvc_etcd_watch *w, int stop_fd,
	int *fn_rc, bool *created)
{
	struct attempt a = { .st = { .w = w } };
	struct curl_slist *hdrs = NULL;
	CURLM *m = curl_multi_init();
	CURL *c = NULL;
	char *req = create_request(w);
	int ret = -ENOMEM;

	kvc_etcd_stream_init(&a.parser, KVC_ETCD_MAX_BODY);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (hdrs) /* etcd's rpctypes.MetadataRequireLeaderKey, as gRPC metadata */
		hdrs = curl_slist_append(hdrs, "Grpc-Metadata-Hasleader: true");
	if (!m || !hdrs || !req)
		goto out;
	c = kvc_etcd_easy(e, idx, "/v3/watch", req, hdrs);
	if (!c)
		goto out;
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, down_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, kvc_etcd_connect_ms(e, e->timeout_ms));
	if (curl_multi_add_handle(m, c) != CURLM_OK)
		goto out;
	pump(e, idx, m, c, &a, stop_fd, hdrs);
	curl_multi_remove_handle(m, c);
	ret = a.result;
	if (ret == STOPPED)
		*fn_rc = a.fn_rc;
out:
	*created = a.st.created;
	curl_easy_cleanup(c);
	curl_multi_cleanup(m);
	curl_slist_free_all(hdrs);
	kvc_etcd_stream_free(&a.parser);
	free(req);
	return ret;
}

int kvc_etcd_watch(struct kvc_etcd *e, struct kvc_etcd_watch *w)
{
	int idx = atomic_load(&e->current), failures = 0, fn_rc = 0, ret;

	if (!w || !w->key || !w->fn || w->start_revision < 0)
		return -EINVAL;
	w->next_revision = w->start_revision;
	w->compact_revision = 0;
	for (;;) {
		bool created = false;

		if (stop_requested(w->stop_fd, 0)) {
			ret = 0;
			break;
		}
		ret = watch_once(e, idx, w, w->stop_fd, &fn_rc, &created);
		if (ret == STOPPED) {
			ret = fn_rc;
			break;
		}
		if (ret != -ECONNREFUSED && ret != -ETIMEDOUT && ret != -ECONNRESET && ret != -EAGAIN)
			break; /* compaction, a bad stream, a refused watch */
		if (created) {
			atomic_store(&e->current, idx);
			failures = 0;
		}
		if (++failures >= e->n_urls && !created)
			break;
		idx = (idx + 1) % e->n_urls;
		/* A short pause before resuming, which a stop cuts short. */
		if (stop_requested(w->stop_fd, 50)) {
			ret = 0;
			break;
		}
	}
	return ret;
}
