/* collector: see collector.h. */
#include "meta/collector.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

#define BATCH 64
#define CUTTING 64 /* inodes being cut at once */
/* After a wake-up, wait this long before the pass, so the removals of a
 * burst (kvc-bench keys: thousands a second) share one checkpoint and one
 * pass instead of one each. */
#define COALESCE_US 50000

struct kvc_meta_collector {
	struct kvc_meta_store *store;
	struct kvc_pool_store *pools;
	struct kvc_meta_sessions *sessions;
	struct kvc_storage_client *storage;
	struct kvc_meta_watches *watches; /* told of punched files; may be NULL */
	int interval_ms;
	uint64_t gc_after; /* the next pass lists the queue from above this inode */
	pthread_mutex_t lock; /* protects woken and cutting */
	pthread_cond_t cond;  /* a pass is asked for */
	bool woken;
	int64_t settle_at_ns; /* the next orphans pass (collector thread only) */
	pthread_cond_t cut;   /* a cut ended */
	uint64_t cutting[CUTTING];
	int cutting_count;
};

/* Lock held. Whether ino is being cut. */
static bool is_cutting(struct kvc_meta_collector *c, uint64_t ino)
{
	for (int i = 0; i < c->cutting_count; i++)
		if (c->cutting[i] == ino)
			return true;
	return false;
}

int kvc_meta_collector_truncate(struct kvc_meta_collector *c, uint64_t ino)
{
	pthread_mutex_lock(&c->lock);
	while (is_cutting(c, ino) || c->cutting_count == CUTTING)
		pthread_cond_wait(&c->cut, &c->lock);
	c->cutting[c->cutting_count++] = ino;
	pthread_mutex_unlock(&c->lock);
	int rc = 0;
	for (int round = 0; round < 8; round++) { /* each round: a deeper cut came */
		uint64_t size;
		struct kvc_attr attr;
		int pending = kvc_meta_store_truncate_pending(c->store, ino, &size);
		if (pending <= 0) {
			rc = pending;
			break;
		}
		/* The smaller size durable first: a machine crash must not bring
		 * the old size back over chunks already cut. */
		rc = kvc_meta_store_sync(c->store);
		if (rc == 0)
			rc = kvc_meta_store_getattr(c->store, ino, &attr);
		if (rc == 0)
			rc = kvc_storage_client_truncate(c->storage, ino, &attr.layout, size);
		if (rc == 0)
			rc = kvc_meta_store_truncate_done(c->store, ino, size);
		if (rc < 0) /* -ENOENT: the file went, and its record with it */
			break;
		rc = -EAGAIN; /* unless the next round finds nothing left */
	}
	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < c->cutting_count; i++)
		if (c->cutting[i] == ino)
			c->cutting[i] = c->cutting[--c->cutting_count];
	pthread_cond_broadcast(&c->cut);
	pthread_mutex_unlock(&c->lock);
	return rc == -ENOENT ? 0 : rc;
}

/* Cuts that a crash or a storage server that was down left. */
static void finish_cuts(struct kvc_meta_collector *c)
{
	uint64_t inos[BATCH];
	int count = kvc_meta_store_truncates_list(c->store, inos, BATCH);
	for (int i = 0; i < count; i++) {
		int rc = kvc_meta_collector_truncate(c, inos[i]);
		if (rc < 0)
			kvc_log_warn("collector: cutting inode %" PRIu64 " to its size: %s; will retry",
			             inos[i], strerror(-rc));
	}
}

/* One pass over the queue. Returns how many files were reclaimed. */
static int collect(struct kvc_meta_collector *c)
{
	uint64_t inos[BATCH];
	struct kvc_layout layouts[BATCH];
	int reclaimed = 0;
	/* From where the last full batch ended: files that keep failing (a
	 * server down, a chain not known yet) do not hold up those after. */
	int count = kvc_meta_store_gc_list_after(c->store, c->gc_after, inos, layouts, BATCH);
	c->gc_after = count == BATCH ? inos[BATCH - 1] : 0;
	/* Only removals a machine crash cannot undo: a file back after one
	 * must not have lost its chunks. */
	int synced = count > 0 ? kvc_meta_store_sync(c->store) : 0;
	if (synced < 0)
		count = 0; /* logged by the checkpoint; next pass */
	for (int i = 0; i < count; i++) {
		int rc = kvc_storage_client_remove(c->storage, inos[i], &layouts[i]);
		if (rc < 0) {
			kvc_log_warn("collector: inode %" PRIu64 ": %s; will retry", inos[i],
			             strerror(-rc));
			continue;
		}
		if (kvc_meta_store_gc_done(c->store, inos[i]) == 0)
			reclaimed++;
	}
	/* A full batch that all went through: more may be waiting. */
	return count == BATCH && reclaimed == count ? -EAGAIN : reclaimed;
}

/* One pass over the pages to punch. Returns how many were punched,
 * -EAGAIN when a full batch went through (more may be waiting). */
static int punch(struct kvc_meta_collector *c)
{
	struct kvc_pool_punch pages[BATCH];
	bool punched[BATCH];
	int count = kvc_pool_punch_take(c->pools, pages, BATCH), done = 0;
	if (count < 0)
		kvc_log_warn("collector: pages to punch: %s", strerror(-count));
	/* Only pages whose freeing a machine crash cannot undo: a key back
	 * after one must not read zeros. Not punched now: given back below
	 * and listed again. */
	bool durable = count > 0 && kvc_pool_store_sync(c->pools) == 0;
	for (int i = 0; i < count && !durable; i++)
		punched[i] = false;
	for (int i = 0; i < count && durable; i++) {
		const struct kvc_pool_punch *p = &pages[i];
		struct kvc_attr attr;
		/* A punch changes the file's data: mtime first, so a client that
		 * opens it from now on drops its cached pages (file_ops.c), and an
		 * event after, for clients that have it open. */
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		struct kvc_msg_setattr touch = {.ino = p->inode, .mask = KVC_SETATTR_MTIME,
		                                .mtime_ns = (int64_t)now.tv_sec * 1000000000 +
		                                            now.tv_nsec};
		int rc = kvc_meta_store_setattr(c->store, &touch, &attr);
		if (rc == 0)
			rc = kvc_storage_client_punch(c->storage, p->inode, &attr.layout,
			                              p->page * p->page_size, p->page_size, attr.size);
		else if (rc == -ENOENT)
			rc = 0; /* the file is gone, and its chunks with it */
		if (rc < 0)
			kvc_log_warn("collector: punching page %" PRIu32 " of pool %s/%" PRIu32 ": %s; "
			             "will retry", p->page, p->ns, p->rank, strerror(-rc));
		punched[i] = rc == 0;
		done += punched[i];
		if (rc == 0 && c->watches)
			kvc_meta_watches_changed(c->watches, NULL, KVC_WATCH_INODE, p->inode, NULL, 0);
	}
	int rc = count > 0 ? kvc_pool_punch_done(c->pools, pages, count, punched) : 0;
	if (rc < 0)
		kvc_log_error("collector: giving punched pages back: %s", strerror(-rc));
	return count == BATCH && done == count && rc == 0 ? -EAGAIN : done;
}

static void *collector_main(void *arg)
{
	struct kvc_meta_collector *c = arg;
	for (;;) {
		/* Clients gone silent first: their removed-while-open files
		 * join the queue below. */
		int dropped = c->sessions ? kvc_meta_sessions_sweep(c->sessions, c->store,
		                                                    kvc_meta_sessions_now_ms()) : 0;
		if (dropped < 0)
			kvc_log_warn("collector: sessions: %s", strerror(-dropped));
		/* After the start's hold, then every minute: the orphans nobody
		 * has open go (those no client opened again after the start,
		 * and any whose last close or drop failed to settle them). */
		int64_t now_ns = kvc_clock_monotonic_ns();
		if (now_ns >= c->settle_at_ns && !kvc_meta_store_holding_opens(c->store)) {
			int settled = kvc_meta_store_settle_orphans(c->store);
			c->settle_at_ns = now_ns + (settled < 0 ? 1 : 60) * (int64_t)1000000000;
			if (settled > 0)
				kvc_log_info("collector: %d file(s) removed while open and open nowhere "
				             "now released", settled);
			else if (settled < 0)
				kvc_log_warn("collector: settling orphans: %s; will retry",
				             strerror(-settled));
		}
		while (collect(c) == -EAGAIN)
			;
		finish_cuts(c);
		while (c->pools && punch(c) == -EAGAIN)
			;
		struct timespec deadline;
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += c->interval_ms / 1000;
		deadline.tv_nsec += (long)(c->interval_ms % 1000) * 1000000;
		if (deadline.tv_nsec >= 1000000000) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&c->lock);
		while (!c->woken)
			if (pthread_cond_timedwait(&c->cond, &c->lock, &deadline) == ETIMEDOUT)
				break;
		bool woken = c->woken;
		c->woken = false;
		pthread_mutex_unlock(&c->lock);
		if (woken)
			usleep(COALESCE_US);
	}
	return NULL;
}

int kvc_meta_collector_start(struct kvc_meta_store *store, struct kvc_pool_store *pools,
                             struct kvc_meta_sessions *sessions,
                             struct kvc_storage_client *storage, int interval_ms,
                             struct kvc_meta_collector **out)
{
	struct kvc_meta_collector *c = calloc(1, sizeof(*c));
	pthread_t thread;
	if (!c)
		return -ENOMEM;
	*c = (struct kvc_meta_collector){.store = store, .pools = pools, .sessions = sessions,
	                                 .storage = storage,
	                                 .interval_ms = interval_ms};
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	pthread_cond_init(&c->cut, NULL);
	int rc = pthread_create(&thread, NULL, collector_main, c);
	if (rc) {
		free(c);
		return -rc;
	}
	pthread_detach(thread);
	*out = c;
	return 0;
}

void kvc_meta_collector_set_watches(struct kvc_meta_collector *c,
                                    struct kvc_meta_watches *watches)
{
	c->watches = watches;
}

void kvc_meta_collector_wake(struct kvc_meta_collector *c)
{
	pthread_mutex_lock(&c->lock);
	c->woken = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}
