/*
 * pool_store_wait: waiting until keys are complete (part of pool_store,
 * see pool_store_internal.h). The decode side of a disaggregated
 * deployment (vLLM's NIXL push pattern) waits for the keys a prefill
 * server writes; kvc_pool_wait answers when every rank confirmed them,
 * at a timeout, or earlier when the namespace is cleared, the store
 * closes, or the caller's end fds fire (its peer went away).
 *
 * The waiters: a list of the waits in progress (struct waiter, on the
 * waiting thread's stack), each with an eventfd. A commit that makes a
 * key complete (kvc_pool_confirm) or clears a namespace writes to the
 * eventfd of every waiter of that namespace (kvc_pool_waits_notify); the
 * waiter then looks again at the keys it still misses, in a read
 * transaction of its own. Nothing polls on a timer: a waiter sleeps in
 * poll() on its eventfd (and its end fds) until the deadline.
 *
 * Invariants it keeps:
 * - no lost wake-up: a waiter joins the list before its first look at
 *   the keys, and notify runs after the commit, under the waiters' lock;
 *   an eventfd keeps a notification until the waiter reads it, and the
 *   waiter reads it before each look;
 * - bounded: at most KVC_POOL_MAX_WAITS waits at once (-EBUSY past it),
 *   KVC_POOL_MAX_WAIT_KEYS keys each, KVC_POOL_MAX_WAIT_MS each;
 * - the store is not freed under a waiter: closing wakes every waiter
 *   (-ESHUTDOWN) and waits until the list is empty.
 *
 * Locking: `lock` protects the list, the count, `closing` and each
 * waiter's `cleared`. It is a leaf: taken with no LMDB transaction open
 * (notify runs after the commit, waiters look at keys outside it) and
 * nothing is taken under it; writing an eventfd never blocks
 * (EFD_NONBLOCK: a full counter just stays readable).
 */
#include "meta/pool_store_internal.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "meta/sessions.h"

struct waiter {
	struct waiter *prev, *next;
	char ns[KVC_POOL_MAX_NAMESPACE + 1];
	int efd;      /* readable: ns changed, or the store closes */
	bool cleared; /* a clear of ns ran during the wait */
};

struct pool_waits {
	pthread_mutex_t lock;
	pthread_cond_t left; /* a waiter left: closing waits for the last */
	struct waiter *head;
	int count;
	bool closing;
};

int kvc_pool_waits_open(struct kvc_pool_store *s)
{
	s->waits = calloc(1, sizeof(*s->waits));
	if (!s->waits)
		return -ENOMEM;
	pthread_mutex_init(&s->waits->lock, NULL);
	pthread_cond_init(&s->waits->left, NULL);
	return 0;
}

void kvc_pool_waits_close(struct kvc_pool_store *s)
{
	struct pool_waits *w = s->waits;
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->closing = true;
	for (struct waiter *at = w->head; at; at = at->next)
		eventfd_write(at->efd, 1);
	while (w->head)
		pthread_cond_wait(&w->left, &w->lock);
	pthread_mutex_unlock(&w->lock);
	pthread_cond_destroy(&w->left);
	pthread_mutex_destroy(&w->lock);
	free(w);
	s->waits = NULL;
}

void kvc_pool_waits_notify(struct kvc_pool_store *s, const char *ns, bool cleared)
{
	struct pool_waits *w = s->waits;
	pthread_mutex_lock(&w->lock);
	for (struct waiter *at = w->head; at; at = at->next) {
		if (strcmp(at->ns, ns) != 0)
			continue;
		at->cleared |= cleared;
		eventfd_write(at->efd, 1);
	}
	pthread_mutex_unlock(&w->lock);
}

static int join(struct pool_waits *w, struct waiter *me, const char *ns)
{
	snprintf(me->ns, sizeof(me->ns), "%s", ns);
	me->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (me->efd < 0)
		return -errno;
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	if (w->closing)
		rc = -ESHUTDOWN;
	else if (w->count == KVC_POOL_MAX_WAITS)
		rc = -EBUSY;
	if (rc == 0) {
		me->next = w->head;
		if (w->head)
			w->head->prev = me;
		w->head = me;
		w->count++;
	}
	pthread_mutex_unlock(&w->lock);
	if (rc < 0)
		close(me->efd);
	return rc;
}

static void leave(struct pool_waits *w, struct waiter *me)
{
	pthread_mutex_lock(&w->lock);
	if (me->prev)
		me->prev->next = me->next;
	else
		w->head = me->next;
	if (me->next)
		me->next->prev = me->prev;
	w->count--;
	pthread_cond_broadcast(&w->left);
	pthread_mutex_unlock(&w->lock);
	close(me->efd);
}

/* Why the wait must end now (under the lock): 0 to go on. */
static int ended(struct pool_waits *w, struct waiter *me)
{
	pthread_mutex_lock(&w->lock);
	int rc = w->closing ? -ESHUTDOWN : me->cleared ? -ECANCELED : 0;
	pthread_mutex_unlock(&w->lock);
	return rc;
}

/* Look at the keys not seen complete yet (one read transaction); mark
 * the complete ones. Returns how many are still missing, or -errno. */
static int look(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *keys,
                uint32_t count, bool *seen, struct kvc_pool_key *missing, uint32_t *at,
                bool *found)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < count; i++)
		if (!seen[i]) {
			missing[n] = keys[i];
			at[n++] = i;
		}
	int rc = n ? kvc_pool_exists(s, ns, missing, n, found) : 0;
	uint32_t still = 0;
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		seen[at[i]] = found[i];
		still += !found[i];
	}
	return rc < 0 ? rc : (int)still;
}

/* Whether the namespace has a world (some pool was initialized). */
static int known(struct kvc_pool_store *s, const char *ns)
{
	MDB_txn *txn;
	struct pool_world w;
	int rc = kvc_pool_txn_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_pool_world_get(s, txn, ns, &w);
	mdb_txn_abort(txn);
	return rc;
}

/* Sleep until a notification, an end fd, or the deadline: 0 (look
 * again), -ETIMEDOUT, -ECONNABORTED (an end fd fired), -errno. */
static int sleep_until(const struct waiter *me, uint64_t deadline, const struct pollfd *ends,
                       int nends)
{
	struct pollfd fds[1 + KVC_POOL_WAIT_MAX_ENDS] = {{.fd = me->efd, .events = POLLIN}};
	for (int i = 0; i < nends; i++)
		fds[1 + i] = (struct pollfd){.fd = ends[i].fd, .events = ends[i].events};
	uint64_t now = kvc_meta_sessions_now_ms();
	if (now >= deadline)
		return -ETIMEDOUT;
	int got = poll(fds, (nfds_t)(1 + nends), (int)(deadline - now));
	if (got < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 1; got > 0 && i <= nends; i++)
		if (fds[i].revents)
			return -ECONNABORTED;
	return 0;
}

int kvc_pool_wait(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *keys,
                  uint32_t count, uint32_t timeout_ms, const struct pollfd *ends, int nends,
                  bool *complete)
{
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_WAIT_KEYS ||
	    timeout_ms > KVC_POOL_MAX_WAIT_MS || nends < 0 || nends > KVC_POOL_WAIT_MAX_ENDS)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (kvc_pool_check_key(&keys[i]) < 0)
			return -EINVAL;
	size_t n = count ? count : 1;
	bool *seen = calloc(n, sizeof(*seen)), *found = calloc(n, sizeof(*found));
	struct kvc_pool_key *missing = calloc(n, sizeof(*missing));
	uint32_t *at = calloc(n, sizeof(*at));
	struct waiter me = {.efd = -1};
	uint64_t deadline = kvc_meta_sessions_now_ms() + timeout_ms;
	int rc = seen && found && missing && at ? join(s->waits, &me, ns) : -ENOMEM;
	bool joined = rc == 0;
	if (rc == 0)
		rc = known(s, ns);
	while (rc == 0) {
		eventfd_t drained;
		eventfd_read(me.efd, &drained); /* before the look: later news stays */
		rc = look(s, ns, keys, count, seen, missing, at, found);
		if (rc <= 0)
			break; /* all complete (0), or an error */
		rc = ended(s->waits, &me);
		if (rc == 0)
			rc = sleep_until(&me, deadline, ends, nends);
	}
	if (joined)
		leave(s->waits, &me);
	if (rc == 0 || rc == -ETIMEDOUT || rc == -ECANCELED)
		memcpy(complete, seen, count * sizeof(*seen));
	free(seen);
	free(found);
	free(missing);
	free(at);
	return rc;
}
