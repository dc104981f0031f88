/* inflight: see inflight.h. */
#include "storage/inflight.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"

#define BUCKETS 4096

struct entry {
	struct entry *next;
	uint64_t inode;
	uint32_t target, chunk;
};

struct kvc_inflight {
	pthread_mutex_t lock; /* leaf: the buckets and every entry */
	pthread_cond_t freed; /* an entry was released */
	struct entry *buckets[BUCKETS];
};

int kvc_inflight_create(struct kvc_inflight **out)
{
	struct kvc_inflight *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->freed, &attr);
	pthread_condattr_destroy(&attr);
	*out = t;
	return 0;
}

void kvc_inflight_destroy(struct kvc_inflight *t)
{
	if (!t)
		return;
	for (int b = 0; b < BUCKETS; b++)
		while (t->buckets[b]) {
			struct entry *e = t->buckets[b];
			t->buckets[b] = e->next;
			free(e);
		}
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->freed);
	free(t);
}

static struct entry **slot(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                           uint32_t chunk)
{
	uint64_t h = (inode * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)chunk << 20) ^ target;
	struct entry **p = &t->buckets[(h ^ (h >> 29)) % BUCKETS];
	while (*p && !((*p)->inode == inode && (*p)->target == target && (*p)->chunk == chunk))
		p = &(*p)->next;
	return p;
}

int kvc_inflight_begin(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                       uint32_t chunk, int timeout_ms)
{
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, target, inode, chunk);
	while (*p && rc == 0) {
		int w = pthread_cond_timedwait(&t->freed, &t->lock, &deadline);
		p = slot(t, target, inode, chunk); /* the entry may be gone */
		if (w == ETIMEDOUT && *p)
			rc = -ETIMEDOUT;
	}
	if (rc == 0) {
		struct entry *e = malloc(sizeof(*e));
		if (e) {
			*e = (struct entry){.inode = inode, .target = target, .chunk = chunk};
			*p = e;
		} else {
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void kvc_inflight_end(struct kvc_inflight *t, uint32_t target, uint64_t inode, uint32_t chunk)
{
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, target, inode, chunk);
	struct entry *e = *p;
	if (e) {
		*p = e->next;
		pthread_cond_broadcast(&t->freed);
		free(e);
	}
	pthread_mutex_unlock(&t->lock);
}

bool kvc_inflight_busy(struct kvc_inflight *t, uint32_t target, uint64_t inode, uint32_t chunk)
{
	pthread_mutex_lock(&t->lock);
	bool busy = *slot(t, target, inode, chunk) != NULL;
	pthread_mutex_unlock(&t->lock);
	return busy;
}
