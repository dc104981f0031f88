/* close_queue: see close_queue.h. */
#include "fuse/close_queue.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "fuse/operations.h"

#define QUEUE_MAX 8192
/* A batch gathers the closes queued this long after its first: a burst of
 * short-lived files (a read of a key each) leaves one CLOSE_MANY, not one
 * per couple of files, and one wake-up of this thread. A session ended a
 * few milliseconds late only keeps a file removed elsewhere that long. */
#define LINGER_MS 5
/* A batch kvc-meta did not take goes back to the front of the queue and
 * is tried again this much later (one warning each time): a file opened
 * again meanwhile takes its CLOSE out, as for any queued one. At stop, or
 * with no room left in the queue, it goes to the closes retried every
 * second instead (kvc_close_queue_retry_later). */
#define RETRY_MS 1000

struct kvc_close_queue {
	struct kvc_fuse *fs;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work; /* the first close queued, a full batch, or stop */
	pthread_cond_t sent; /* a batch went out */
	bool stopping;
	int64_t retry_at_ns; /* after a failed batch: not before this */
	uint32_t count;
	uint64_t queued[QUEUE_MAX];
	uint32_t flying;
	uint64_t in_flight[KVC_WIRE_MAX_CLOSES];
};

/* Whether ino is in list (n entries); its index in *at. */
static bool find(const uint64_t *list, uint32_t n, uint64_t ino, uint32_t *at)
{
	for (uint32_t i = n; i-- > 0;)
		if (list[i] == ino) {
			*at = i;
			return true;
		}
	return false;
}

void kvc_close_queue_retry_later(struct kvc_fuse *fs, const uint64_t *inos, uint32_t n, int rc)
{
	kvc_log_warn("closing %" PRIu32 " file(s): %s; will retry", n, strerror(-rc));
	pthread_mutex_lock(&fs->closes_lock);
	for (uint32_t i = 0; i < n; i++)
		if (fs->pending_close_count < (int)(sizeof(fs->pending_closes) / 8))
			fs->pending_closes[fs->pending_close_count++] = inos[i];
	pthread_mutex_unlock(&fs->closes_lock);
}

/* Send one batch taken from the queue (lock held; released meanwhile). */
static void send_batch(struct kvc_close_queue *q)
{
	uint32_t n = q->count < KVC_WIRE_MAX_CLOSES ? q->count : KVC_WIRE_MAX_CLOSES;
	memcpy(q->in_flight, q->queued, n * sizeof(uint64_t));
	memmove(q->queued, q->queued + n, (q->count - n) * sizeof(uint64_t));
	q->count -= n;
	q->flying = n;
	pthread_mutex_unlock(&q->lock);
	int rc = kvc_meta_client_close_many(&q->fs->meta, q->in_flight, n, q->fs->client_id);
	pthread_mutex_lock(&q->lock);
	/* No file of the batch was opened or closed again meanwhile (an open
	 * waits for the batch in flight), so none is in the queue. */
	bool again = rc < 0 && !q->stopping && q->count + n <= QUEUE_MAX;
	if (again) {
		memmove(q->queued + n, q->queued, q->count * sizeof(uint64_t));
		memcpy(q->queued, q->in_flight, n * sizeof(uint64_t));
		q->count += n;
		q->retry_at_ns = kvc_clock_monotonic_ns() + (int64_t)RETRY_MS * 1000000;
		kvc_log_warn("closing %" PRIu32 " file(s): %s; will retry in %d ms", n, strerror(-rc),
		             RETRY_MS);
	} else if (rc < 0) {
		pthread_mutex_unlock(&q->lock);
		kvc_close_queue_retry_later(q->fs, q->in_flight, n, rc);
		pthread_mutex_lock(&q->lock);
	}
	q->flying = 0;
	pthread_cond_broadcast(&q->sent);
}

static void *closer_main(void *arg)
{
	struct kvc_close_queue *q = arg;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->count == 0 && !q->stopping)
			pthread_cond_wait(&q->work, &q->lock);
		if (q->count == 0)
			break; /* stopping, and nothing left */
		int64_t wait_ms = (q->retry_at_ns - kvc_clock_monotonic_ns()) / 1000000;
		bool retrying = wait_ms > 0;
		struct timespec t = kvc_clock_deadline(retrying ? wait_ms : LINGER_MS);
		while (!q->stopping && q->count > 0 && (retrying || q->count < KVC_WIRE_MAX_CLOSES) &&
		       pthread_cond_timedwait(&q->work, &q->lock, &t) != ETIMEDOUT)
			;
		if (q->count > 0) /* all of them cancelled meanwhile: nothing */
			send_batch(q);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int kvc_close_queue_start(struct kvc_fuse *fs, struct kvc_close_queue **out)
{
	struct kvc_close_queue *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->fs = fs;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->work, &ca);
	pthread_cond_init(&q->sent, NULL);
	pthread_condattr_destroy(&ca);
	int rc = -pthread_create(&q->thread, NULL, closer_main, q);
	if (rc < 0) {
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

void kvc_close_queue_stop(struct kvc_close_queue *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	pthread_cond_signal(&q->work);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL); /* it sends what is left first */
}

int kvc_close_queue_add(struct kvc_close_queue *q, uint64_t ino)
{
	int rc = 0;
	uint32_t at;
	pthread_mutex_lock(&q->lock);
	if (q->stopping || q->count == QUEUE_MAX)
		rc = -ENOSPC;
	else if (!find(q->queued, q->count, ino, &at))
		q->queued[q->count++] = ino;
	if (rc == 0 && (q->count == 1 || q->count == KVC_WIRE_MAX_CLOSES))
		pthread_cond_signal(&q->work);
	pthread_mutex_unlock(&q->lock);
	return rc;
}

int kvc_close_queue_cancel(struct kvc_close_queue *q, uint64_t ino)
{
	int dropped = 0;
	uint32_t at;
	pthread_mutex_lock(&q->lock);
	/* A batch that failed comes back to the queue: look there again after
	 * waiting for it. */
	for (;;) {
		if (find(q->queued, q->count, ino, &at)) {
			q->queued[at] = q->queued[--q->count];
			dropped = 1;
		}
		if (!find(q->in_flight, q->flying, ino, &at))
			break;
		pthread_cond_wait(&q->sent, &q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return dropped;
}
