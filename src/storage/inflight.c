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
	bool whole; /* every chunk of the inode (chunk unused) */
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

/* The bucket of (target, inode): every entry of an inode on a target is
 * in one list, so a whole-inode hold sees its chunks' entries. */
static struct entry **bucket(struct kvc_inflight *t, uint32_t target, uint64_t inode)
{
	uint64_t h = (inode * 0x9e3779b97f4a7c15ull) ^ target;
	return &t->buckets[(h ^ (h >> 29)) % BUCKETS];
}

/* The entry that stands in the way of holding (target, inode, chunk),
 * or of the whole inode (whole; mine is the caller's own entry, skipped),
 * or NULL. A chunk meets its own entry and the inode's whole entry; a
 * whole hold meets every entry of the inode. */
static struct entry *conflict(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                              uint32_t chunk, bool whole, const struct entry *mine)
{
	struct entry *e = *bucket(t, target, inode);
	while (e && !(e != mine && e->inode == inode && e->target == target &&
	              (whole || e->whole || e->chunk == chunk)))
		e = e->next;
	return e;
}

/* Wait, at most until deadline, while conflict() finds an entry. */
static int wait_clear(struct kvc_inflight *t, const struct timespec *deadline, uint32_t target,
                      uint64_t inode, uint32_t chunk, bool whole, const struct entry *mine)
{
	while (conflict(t, target, inode, chunk, whole, mine))
		if (pthread_cond_timedwait(&t->freed, &t->lock, deadline) == ETIMEDOUT &&
		    conflict(t, target, inode, chunk, whole, mine))
			return -ETIMEDOUT;
	return 0;
}

static struct entry *add(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                         uint32_t chunk, bool whole)
{
	struct entry *e = malloc(sizeof(*e));
	if (e) {
		struct entry **head = bucket(t, target, inode);
		*e = (struct entry){.next = *head, .inode = inode, .target = target,
		                    .chunk = whole ? 0 : chunk, .whole = whole};
		*head = e;
	}
	return e;
}

/* Unlink and free the entry e (in its bucket), waking the waiters. */
static void drop(struct kvc_inflight *t, struct entry *e)
{
	struct entry **p = bucket(t, e->target, e->inode);
	while (*p && *p != e)
		p = &(*p)->next;
	if (*p) {
		*p = e->next;
		free(e);
		pthread_cond_broadcast(&t->freed);
	}
}

/* The entry held for (target, inode, chunk) or the inode's whole entry. */
static struct entry *held(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                          uint32_t chunk, bool whole)
{
	struct entry *e = *bucket(t, target, inode);
	while (e && !(e->inode == inode && e->target == target && e->whole == whole &&
	              (whole || e->chunk == chunk)))
		e = e->next;
	return e;
}

int kvc_inflight_begin(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                       uint32_t chunk, int timeout_ms)
{
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	pthread_mutex_lock(&t->lock);
	int rc = wait_clear(t, &deadline, target, inode, chunk, false, NULL);
	if (rc == 0 && !add(t, target, inode, chunk, false))
		rc = -ENOMEM;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void kvc_inflight_end(struct kvc_inflight *t, uint32_t target, uint64_t inode, uint32_t chunk)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = held(t, target, inode, chunk, false);
	if (e)
		drop(t, e);
	pthread_mutex_unlock(&t->lock);
}

/* Another whole hold first (range operations of an inode one at a time),
 * then the entry goes in at once, so no chunk of the inode is taken
 * meanwhile, and the chunks held before drain out. */
int kvc_inflight_begin_inode(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                             int timeout_ms)
{
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	pthread_mutex_lock(&t->lock);
	struct entry *mine = NULL;
	int rc = 0;
	while (rc == 0 && held(t, target, inode, 0, true))
		if (pthread_cond_timedwait(&t->freed, &t->lock, &deadline) == ETIMEDOUT &&
		    held(t, target, inode, 0, true))
			rc = -ETIMEDOUT;
	if (rc == 0 && !(mine = add(t, target, inode, 0, true)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = wait_clear(t, &deadline, target, inode, 0, true, mine);
	if (rc < 0 && mine)
		drop(t, mine);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void kvc_inflight_end_inode(struct kvc_inflight *t, uint32_t target, uint64_t inode)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = held(t, target, inode, 0, true);
	if (e)
		drop(t, e);
	pthread_mutex_unlock(&t->lock);
}

bool kvc_inflight_busy(struct kvc_inflight *t, uint32_t target, uint64_t inode, uint32_t chunk)
{
	pthread_mutex_lock(&t->lock);
	bool busy = conflict(t, target, inode, chunk, false, NULL) != NULL;
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
