/*
 * etcd_watch: kvc_etcd_watch (etcd.h), a watch over the gateway's
 * streaming POST /v3/watch.
 *
 * The request body is itself a stream (chunked): first the
 * WatchCreateRequest, then, whenever the answer stream has been silent
 * for the handle's timeout, a WatchProgressRequest, which a live etcd
 * answers with a progress report (etcd 3.4 answers it once its watchers
 * are in sync). curl's read callback pauses the upload while there is
 * nothing to send. The answer stream goes through the splitter and the
 * decoder of etcd_json.c. One thread runs the whole watch: a curl multi
 * handle polled together with the caller's stop fd, so a stop is seen
 * within one poll and no other thread touches the curl handles.
 *
 * A stream that breaks or stays silent three timeouts long is given up
 * and the watch resumes at next_revision on the next endpoint; events
 * delivered before are not delivered again (the decoder skips revisions
 * below next_revision).
 */
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "mgmt/etcd_internal.h"

#define PROGRESS_REQUEST "{\"progress_request\":{}}\n"
#define STOPPED 1 /* attempt result: fn or the stop fd ended the watch */

struct attempt {
	struct kvc_etcd_watch_state st;
	struct kvc_etcd_stream parser;
	int result; /* 0 while running, STOPPED, or -errno */
	int fn_rc; /* with STOPPED: what kvc_etcd_watch returns */
	int64_t last_rx_ns; /* when the last byte arrived */
	char *up; /* request bytes not yet sent: up[up_off..up_len) */
	size_t up_len, up_off, up_cap;
};

static int up_append(struct attempt *a, const char *data, size_t n)
{
	if (a->up_len + n > a->up_cap) {
		size_t cap = a->up_len + n + 256;
		char *up = realloc(a->up, cap);

		if (!up)
			return -ENOMEM;
		a->up = up;
		a->up_cap = cap;
	}
	memcpy(a->up + a->up_len, data, n);
	a->up_len += n;
	return 0;
}

static size_t up_read(char *buf, size_t size, size_t nitems, void *arg)
{
	struct attempt *a = arg;
	size_t n = size * nitems, avail = a->up_len - a->up_off;

	if (avail == 0)
		return CURL_READFUNC_PAUSE;
	if (n > avail)
		n = avail;
	memcpy(buf, a->up + a->up_off, n);
	a->up_off += n;
	if (a->up_off == a->up_len)
		a->up_off = a->up_len = 0;
	return n;
}

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

	a->last_rx_ns = kvc_clock_monotonic_ns();
	rc = kvc_etcd_stream_feed(&a->parser, ptr, n, on_object, a);
	if (rc) {
		a->result = rc > 0 ? STOPPED : rc;
		return 0; /* ends the transfer */
	}
	return n;
}

/* The first request of the stream: {"create_request":{...}}\n */
static int create_request(struct attempt *a, const struct kvc_etcd_watch *w)
{
	json_t *cr = kvc_etcd_key_range(w->key, w->prefix), *req = NULL;
	char *text = NULL;
	int ret = -ENOMEM;

	if (!cr)
		return -ENOMEM;
	if (w->next_revision > 0 &&
	    json_object_set_new(cr, "start_revision", json_integer(w->next_revision)))
		goto out;
	req = json_pack("{s:o}", "create_request", cr);
	cr = NULL;
	text = req ? json_dumps(req, JSON_COMPACT) : NULL;
	if (!text)
		goto out;
	ret = up_append(a, text, strlen(text));
	if (!ret)
		ret = up_append(a, "\n", 1);
out:
	free(text);
	json_decref(cr);
	json_decref(req);
	return ret;
}

static bool stop_requested(int stop_fd, int wait_ms)
{
	struct pollfd p = { .fd = stop_fd, .events = POLLIN };

	return stop_fd >= 0 && poll(&p, 1, wait_ms) > 0 && (p.revents & (POLLIN | POLLHUP));
}

/* Run the multi loop of one stream until it ends; sets a->result. */
static void pump(struct kvc_etcd *e, CURLM *m, CURL *c, struct attempt *a, int stop_fd)
{
	int64_t timeout_ns = (int64_t)e->timeout_ms * 1000000;
	int64_t start = kvc_clock_monotonic_ns(), progress_at = 0;
	int wait_ms = e->timeout_ms / 4 < 1 ? 1 : (e->timeout_ms / 4 > 1000 ? 1000 : e->timeout_ms / 4);
	int running = 1;

	a->last_rx_ns = start;
	while (!a->result) {
		struct curl_waitfd wfd = { .fd = stop_fd, .events = CURL_WAIT_POLLIN };
		CURLMsg *msg;
		int left;
		int64_t now;

		if (curl_multi_perform(m, &running) != CURLM_OK) {
			a->result = -ENOMEM;
			break;
		}
		if (a->result)
			break;
		while ((msg = curl_multi_info_read(m, &left))) {
			/* A stream that ends is a stream that broke. */
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == c && !a->result)
				a->result = msg->data.result == CURLE_OK
						    ? -ECONNRESET
						    : kvc_etcd_curl_errno(msg->data.result);
		}
		if (a->result)
			break;
		now = kvc_clock_monotonic_ns();
		if (!a->st.created) {
			if (now - start > timeout_ns)
				a->result = -ETIMEDOUT;
		} else if (now - a->last_rx_ns > 3 * timeout_ns) {
			a->result = -ETIMEDOUT; /* the member is dead or stalled */
		} else if (now - a->last_rx_ns > timeout_ns && now - progress_at > timeout_ns) {
			progress_at = now;
			if (up_append(a, PROGRESS_REQUEST, strlen(PROGRESS_REQUEST)))
				a->result = -ENOMEM;
			else
				curl_easy_pause(c, CURLPAUSE_CONT);
		}
		if (a->result)
			break;
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
}

/* One stream on endpoint idx. Returns STOPPED or -errno; *created: the
 * watch was set up on it. */
static int watch_once(struct kvc_etcd *e, int idx, struct kvc_etcd_watch *w, int stop_fd,
	int *fn_rc, bool *created)
{
	struct attempt a = { .st = { .w = w } };
	struct curl_slist *hdrs = NULL;
	char url[1100];
	CURLM *m = curl_multi_init();
	CURL *c = curl_easy_init();
	int ret = -ENOMEM;

	kvc_etcd_stream_init(&a.parser, KVC_ETCD_MAX_BODY);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (hdrs)
		hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
	if (hdrs)
		hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue wait */
	if (!m || !c || !hdrs)
		goto out;
	ret = create_request(&a, w);
	if (ret)
		goto out;
	snprintf(url, sizeof(url), "%s/v3/watch", e->urls[idx]);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, up_read);
	curl_easy_setopt(c, CURLOPT_READDATA, &a);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, down_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, kvc_etcd_connect_ms(e, e->timeout_ms));
	if (curl_multi_add_handle(m, c) != CURLM_OK)
		goto out;
	pump(e, m, c, &a, stop_fd);
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
	free(a.up);
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
