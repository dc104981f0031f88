/* inflight: see inflight.h. */
#include "storage/inflight.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "core/wire.h"

#define BUCKETS 4096
#define RANGE_BUCKETS 256
#define PROBE_MAX 1024 /* a range up to this many chunks probes each one's slot */

/* A chunk hold (first == last) in the chunk buckets, keyed by (target,
 * inode, chunk); a range hold in the range buckets, keyed by (target,
 * inode). */
struct entry {
	struct entry *next;
	uint64_t inode;
	uint32_t target, first, last; /* chunks first..last, inclusive */
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
	struct entry *buckets[BUCKETS];      /* chunk holds */
	struct entry *ranges[RANGE_BUCKETS]; /* range holds */
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
	for (int b = 0; b < BUCKETS + RANGE_BUCKETS; b++) {
		struct entry **head = b < BUCKETS ? &t->buckets[b] : &t->ranges[b - BUCKETS];
		while (*head) {
			struct entry *e = *head;
			*head = e->next;
			free(e);
		}
	}
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->freed);
	free(t);
}

static uint64_t mix(uint64_t h)
{
	return h ^ (h >> 29);
}

static struct entry **chunk_bucket(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                                   uint32_t chunk)
{
	uint64_t h = (inode * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)chunk << 20) ^ target;
	return &t->buckets[mix(h) % BUCKETS];
}

static struct entry **range_bucket(struct kvc_inflight *t, uint32_t target, uint64_t inode)
{
	return &t->ranges[mix((inode * 0x9e3779b97f4a7c15ull) ^ target) % RANGE_BUCKETS];
}

static bool overlaps(const struct entry *e, uint32_t target, uint64_t inode, uint32_t first,
                     uint32_t last)
{
	return e->inode == inode && e->target == target && e->first <= last && first <= e->last;
}

/* A range hold over any of first..last, or NULL. */
static struct entry *range_in_way(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                                  uint32_t first, uint32_t last)
{
	struct entry *e = *range_bucket(t, target, inode);
	while (e && !overlaps(e, target, inode, first, last))
		e = e->next;
	return e;
}

static struct entry *chunk_held(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                                uint32_t chunk)
{
	struct entry *e = *chunk_bucket(t, target, inode, chunk);
	while (e && !(e->inode == inode && e->target == target && e->first == chunk))
		e = e->next;
	return e;
}

/* Whether a chunk hold of the inode lies in first..last: each chunk's
 * slot for a short range, every bucket for a long one (truncates and
 * removes, rare). */
static bool chunk_in_range(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                           uint32_t first, uint32_t last)
{
	if (last - first < PROBE_MAX) {
		for (uint64_t c = first; c <= last; c++)
			if (chunk_held(t, target, inode, (uint32_t)c))
				return true;
		return false;
	}
	for (int b = 0; b < BUCKETS; b++)
		for (const struct entry *e = t->buckets[b]; e; e = e->next)
			if (overlaps(e, target, inode, first, last))
				return true;
	return false;
}

/* Unlink e from the list at head and free it, waking the waiters. */
static void drop(struct kvc_inflight *t, struct entry **head, struct entry *e)
{
	while (*head && *head != e)
		head = &(*head)->next;
	if (*head) {
		*head = e->next;
		free(e);
		pthread_cond_broadcast(&t->freed);
	}
}

static struct entry *push(struct entry **head, uint32_t target, uint64_t inode, uint32_t first,
                          uint32_t last)
{
	struct entry *e = malloc(sizeof(*e));
	if (e) {
		*e = (struct entry){.next = *head, .inode = inode, .target = target, .first = first,
		                    .last = last};
		*head = e;
	}
	return e;
}

/* Sleep until woken or deadline: false once the deadline passed. */
static bool wait_some(struct kvc_inflight *t, const struct timespec *deadline)
{
	return pthread_cond_timedwait(&t->freed, &t->lock, deadline) != ETIMEDOUT;
}

int kvc_inflight_begin(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                       uint32_t chunk, int timeout_ms)
{
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	while (rc == 0 && (chunk_held(t, target, inode, chunk) ||
	                   range_in_way(t, target, inode, chunk, chunk)))
		if (!wait_some(t, &deadline) && (chunk_held(t, target, inode, chunk) ||
		                                 range_in_way(t, target, inode, chunk, chunk)))
			rc = -ETIMEDOUT;
	if (rc == 0 && !push(chunk_bucket(t, target, inode, chunk), target, inode, chunk, chunk))
		rc = -ENOMEM;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void kvc_inflight_end(struct kvc_inflight *t, uint32_t target, uint64_t inode, uint32_t chunk)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = chunk_held(t, target, inode, chunk);
	if (e)
		drop(t, chunk_bucket(t, target, inode, chunk), e);
	pthread_mutex_unlock(&t->lock);
}

/* Another range hold over the range first (range operations of an inode's
 * chunks one at a time), then the entry goes in at once, so no chunk of
 * the range is taken meanwhile, and the chunks held before drain out. */
int kvc_inflight_begin_range(struct kvc_inflight *t, uint32_t target, uint64_t inode,
                             uint32_t first, uint32_t last, int timeout_ms,
                             struct kvc_inflight_hold **out)
{
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	struct entry *mine = NULL;
	int rc = first > last ? -EINVAL : 0;
	*out = NULL;
	pthread_mutex_lock(&t->lock);
	while (rc == 0 && range_in_way(t, target, inode, first, last))
		if (!wait_some(t, &deadline) && range_in_way(t, target, inode, first, last))
			rc = -ETIMEDOUT;
	if (rc == 0 && !(mine = push(range_bucket(t, target, inode), target, inode, first, last)))
		rc = -ENOMEM;
	while (rc == 0 && chunk_in_range(t, target, inode, first, last))
		if (!wait_some(t, &deadline) && chunk_in_range(t, target, inode, first, last))
			rc = -ETIMEDOUT;
	if (rc < 0 && mine)
		drop(t, range_bucket(t, target, inode), mine);
	else if (rc == 0)
		*out = (struct kvc_inflight_hold *)mine;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void kvc_inflight_end_range(struct kvc_inflight *t, struct kvc_inflight_hold *hold)
{
	struct entry *e = (struct entry *)hold;
	if (!e)
		return;
	pthread_mutex_lock(&t->lock);
	drop(t, range_bucket(t, e->target, e->inode), e);
	pthread_mutex_unlock(&t->lock);
}

bool kvc_inflight_busy(struct kvc_inflight *t, uint32_t target, uint64_t inode, uint32_t chunk)
{
	pthread_mutex_lock(&t->lock);
	bool busy = chunk_held(t, target, inode, chunk) ||
	            range_in_way(t, target, inode, chunk, chunk);
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
