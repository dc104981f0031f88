/*
 * http_wait: POST /pools/{ns}/wait (part of kvc-meta's HTTP front, see
 * http_internal.h): wait until keys are complete on every rank, for the
 * decode side of a prefill/decode handoff.
 *
 *   body  {"keys": [key, ...], "timeout_ms": N}   (N in [0, max_wait_ms])
 *   200   {"complete": [bool, ...], "timed_out": bool}
 *
 * sent when every key is complete or at the timeout (timed_out true, the
 * false flags name the missing keys); 409 when the namespace was cleared
 * during the wait, 404 for a namespace without pools, 503 when too many
 * waits are in progress or the server stops, 400 for bad input.
 *
 * A wait must not stall other clients, and libmicrohttpd serves many
 * connections on each of its few threads: the handler suspends the
 * connection (MHD_suspend_connection) and hands the wait to a thread of
 * its own (at most KVC_HTTP_MAX_WAITS at once), which blocks in
 * kvc_pool_wait (no lock held: it sleeps on its own eventfd), prepares
 * the answer, and resumes the connection; libmicrohttpd then calls the
 * handler again, which sends it. The client hanging up (POLLRDHUP on the
 * connection's socket) or kvc_http_stop (stop_fd) ends a wait early.
 * The connection's idle timeout is off while it is suspended and set
 * again (which restarts it) when the answer goes out.
 */
#include "meta/http_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct kvc_http_wait {
	char ns[KVC_POOL_MAX_NAMESPACE + 1];
	uint32_t count;
	uint32_t timeout_ms;
	struct kvc_pool_key *keys; /* bytes in names */
	char *names;
	uint64_t start_us;
};

static void wait_free(struct kvc_http_wait *w)
{
	if (w) {
		free(w->keys);
		free(w->names);
		free(w);
	}
}

int kvc_http_waits_init(struct kvc_http_server *s)
{
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0)
		return -errno;
	pthread_mutex_init(&s->wait_lock, NULL);
	pthread_cond_init(&s->wait_done, NULL);
	return 0;
}

void kvc_http_waits_stop(struct kvc_http_server *s)
{
	pthread_mutex_lock(&s->wait_lock);
	s->stopping = true;
	eventfd_write(s->stop_fd, 1);
	while (s->waiting)
		pthread_cond_wait(&s->wait_done, &s->wait_lock);
	pthread_mutex_unlock(&s->wait_lock);
}

void kvc_http_waits_destroy(struct kvc_http_server *s)
{
	close(s->stop_fd);
	pthread_cond_destroy(&s->wait_done);
	pthread_mutex_destroy(&s->wait_lock);
}

void kvc_http_wait_parse(struct kvc_http_server *s, const char *ns, json_t *body,
                         struct reply *r, uint64_t start_us)
{
	struct kvc_pool_key *keys = NULL;
	uint32_t n = 0;
	uint32_t cap = s->options.max_wait_ms && s->options.max_wait_ms < KVC_POOL_MAX_WAIT_MS
	                       ? s->options.max_wait_ms
	                       : KVC_POOL_MAX_WAIT_MS;
	json_t *timeout = json_object_get(body, "timeout_ms");
	if (kvc_http_parse_keys(json_object_get(body, "keys"), false, &keys, &n) < 0) {
		kvc_http_fail(r, 400, "need 'keys': a list of at most %d strings of 1 to %d bytes",
		              KVC_POOL_MAX_WAIT_KEYS, KVC_POOL_MAX_KEY);
		return;
	}
	if (!json_is_integer(timeout) || json_integer_value(timeout) < 0 ||
	    json_integer_value(timeout) > cap) {
		kvc_http_fail(r, 400, "need 'timeout_ms': an integer in [0, %u]", cap);
		free(keys);
		return;
	}
	size_t bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		bytes += keys[i].length;
	struct kvc_http_wait *w = calloc(1, sizeof(*w));
	char *names = w ? malloc(bytes ? bytes : 1) : NULL;
	if (!names) {
		kvc_http_fail(r, 500, "out of memory");
		free(w);
		free(keys);
		return;
	}
	/* The JSON document goes when the request's parsing ends: copy. */
	for (size_t i = 0, at = 0; i < n; at += keys[i].length, i++) {
		memcpy(names + at, keys[i].bytes, keys[i].length);
		keys[i].bytes = names + at;
	}
	*w = (struct kvc_http_wait){.count = n, .timeout_ms = (uint32_t)json_integer_value(timeout),
	                            .keys = keys, .names = names, .start_us = start_us};
	snprintf(w->ns, sizeof(w->ns), "%s", ns);
	r->wait = w;
}

void kvc_http_wait_run(struct kvc_http_server *s, struct kvc_http_wait *w,
                       const struct pollfd *ends, int nends, struct kvc_http_answer *out)
{
	struct reply r = {0};
	bool *complete = calloc(w->count ? w->count : 1, sizeof(*complete));
	int rc = complete ? kvc_pool_wait(s->pools, w->ns, w->keys, w->count, w->timeout_ms, ends,
	                                  nends, complete)
	                  : -ENOMEM;
	if (rc == 0 || rc == -ETIMEDOUT) {
		json_t *list = json_array();
		for (uint32_t i = 0; i < w->count; i++)
			json_array_append_new(list, json_boolean(complete[i]));
		r.status = 200;
		r.json = json_pack("{s:o,s:b}", "complete", list, "timed_out", rc == -ETIMEDOUT);
	} else if (rc == -ECANCELED) {
		kvc_http_fail(&r, 409, "namespace '%s' was cleared during the wait", w->ns);
	} else if (rc == -ENOENT) {
		kvc_http_fail(&r, 404, "no pool of namespace '%s' was initialized", w->ns);
	} else if (rc == -EBUSY) {
		kvc_http_fail(&r, 503, "too many waits in progress (%d)", KVC_POOL_MAX_WAITS);
	} else if (rc == -ECONNABORTED || rc == -ESHUTDOWN) {
		kvc_http_fail(&r, 503, "the wait ended early: the server is stopping");
	} else if (rc == -EINVAL) {
		kvc_http_fail(&r, 400, "invalid wait for namespace '%s'", w->ns);
	} else {
		kvc_http_fail(&r, 500, "pool store: %s", strerror(-rc));
	}
	free(complete);
	kvc_http_account(s, R_WAIT, r.status, w->start_us);
	wait_free(w);
	kvc_http_render(&r, out);
}

/* ---- libmicrohttpd: a thread per wait, its connection suspended ---- */

struct deferred {
	struct kvc_http_server *s;
	struct MHD_Connection *conn;
	struct upload *up;
	struct kvc_http_wait *wait;
	int conn_fd;
};

static void *wait_main(void *arg)
{
	struct deferred *d = arg;
	struct kvc_http_server *s = d->s;
	struct pollfd ends[2] = {{.fd = s->stop_fd, .events = POLLIN},
	                         {.fd = d->conn_fd, .events = POLLRDHUP}};
	kvc_http_wait_run(s, d->wait, ends, d->conn_fd >= 0 ? 2 : 1, &d->up->answer);
	d->up->answered = true; /* before the resume: the handler reads it then */
	MHD_resume_connection(d->conn);
	free(d);
	pthread_mutex_lock(&s->wait_lock);
	s->waiting--;
	pthread_cond_broadcast(&s->wait_done);
	pthread_mutex_unlock(&s->wait_lock); /* s may be freed from here on */
	return NULL;
}

/* Answer now (without a thread): the wait is refused. */
static void refuse(struct kvc_http_server *s, struct kvc_http_wait *w, unsigned status,
                   const char *why, struct kvc_http_answer *a)
{
	struct reply r = {0};
	kvc_http_fail(&r, status, "%s", why);
	kvc_http_account(s, R_WAIT, r.status, w->start_us);
	wait_free(w);
	kvc_http_render(&r, a);
}

bool kvc_http_wait_defer(struct kvc_http_server *s, struct MHD_Connection *conn,
                         struct upload *up, struct kvc_http_answer *a)
{
	struct deferred *d = calloc(1, sizeof(*d));
	const union MHD_ConnectionInfo *fd =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	pthread_mutex_lock(&s->wait_lock);
	bool room = d && !s->stopping && s->waiting < KVC_HTTP_MAX_WAITS;
	s->waiting += room;
	pthread_mutex_unlock(&s->wait_lock);
	if (!room) {
		struct kvc_http_wait *w = a->wait;
		free(d);
		refuse(s, w, 503, "too many waits in progress, or the server is stopping", a);
		return false;
	}
	*d = (struct deferred){s, conn, up, a->wait, fd ? fd->connect_fd : -1};
	a->wait = NULL;
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	MHD_suspend_connection(conn);
	pthread_attr_t attr;
	pthread_t thread;
	int rc = pthread_attr_init(&attr);
	if (rc == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 256 << 10);
		rc = pthread_create(&thread, &attr, wait_main, d);
		pthread_attr_destroy(&attr);
	}
	if (rc != 0) { /* no thread: answer at once */
		refuse(s, d->wait, 503, "cannot start a wait now", &up->answer);
		up->answered = true;
		free(d);
		MHD_resume_connection(conn);
		pthread_mutex_lock(&s->wait_lock);
		s->waiting--;
		pthread_cond_broadcast(&s->wait_done);
		pthread_mutex_unlock(&s->wait_lock);
	}
	return true;
}
