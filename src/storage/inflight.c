/* inflight: see inflight.h. */
#include "storage/inflight.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "core/wire.h"

#define BUCKETS 4096

struct entry {
	struct entry *next;
	uint64_t inode;
	uint32_t target, chunk;
};

/* A target's applies, counted by the parity of the epoch they entered
 * in: a drain waits for the other parity's count to reach 0 (applies left
 * by a drain that timed out), moves the epoch on and waits for the old
 * parity's (drains of one target run one at a time). */
struct gate {
	unsigned epoch;
	uint32_t active[2];
	bool draining;
};

struct kvc_inflight {
	pthread_mutex_t lock; /* leaf: the buckets, every entry and the gates */
	pthread_cond_t freed; /* an entry was released, an apply left, a drain ended */
	struct entry *buckets[BUCKETS];
	struct gate gates[KVC_WIRE_MAX_TARGETS];
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

unsigned kvc_inflight_apply_enter(struct kvc_inflight *t, uint32_t target)
{
	unsigned ticket = 0;
	if (target >= KVC_WIRE_MAX_TARGETS)
		return 0; /* no such target here: nothing will change */
	pthread_mutex_lock(&t->lock);
	ticket = t->gates[target].epoch & 1u;
	t->gates[target].active[ticket]++;
	pthread_mutex_unlock(&t->lock);
	return ticket;
}

void kvc_inflight_apply_leave(struct kvc_inflight *t, uint32_t target, unsigned ticket)
{
	if (target >= KVC_WIRE_MAX_TARGETS)
		return;
	pthread_mutex_lock(&t->lock);
	if (--t->gates[target].active[ticket & 1u] == 0)
		pthread_cond_broadcast(&t->freed);
	pthread_mutex_unlock(&t->lock);
}

int kvc_inflight_apply_drain(struct kvc_inflight *t, uint32_t target, int timeout_ms)
{
	if (target >= KVC_WIRE_MAX_TARGETS)
		return 0;
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	struct gate *g = &t->gates[target];
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	while (g->draining && rc == 0)
		if (pthread_cond_timedwait(&t->freed, &t->lock, &deadline) == ETIMEDOUT)
			rc = -ETIMEDOUT;
	if (rc == 0) {
		g->draining = true;
		/* The other parity first: applies left over from a drain that
		 * timed out, older than this one too. Then move the epoch on. */
		for (int step = 0; step < 2 && rc == 0; step++) {
			unsigned wait_for = step == 0 ? (g->epoch + 1) & 1u : g->epoch++ & 1u;
			while (g->active[wait_for] && rc == 0)
				if (pthread_cond_timedwait(&t->freed, &t->lock, &deadline) == ETIMEDOUT &&
				    g->active[wait_for])
					rc = -ETIMEDOUT;
		}
		g->draining = false;
		pthread_cond_broadcast(&t->freed);
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}
