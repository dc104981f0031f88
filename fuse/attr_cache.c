/* attr_cache: see attr_cache.h. */
#include "fuse/attr_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/clock.h"

#define SLOTS 16384 /* power of two */

struct slot {
	struct kvc_attr attr; /* the newest answer seen for attr.ino */
	bool valid;           /* false: a later answer was older (not served) */
	struct kvc_meta_events_mark mark;
	uint64_t current_at; /* the events' seq this answer is known current at */
	int64_t at_ns;
	uint64_t forgets; /* the table's count when put */
};

struct kvc_attr_cache {
	pthread_mutex_t lock;
	uint64_t forgets;
	uint64_t forgot_seq; /* the events' seq at the last forget */
	struct slot slots[SLOTS];
};

int kvc_attr_cache_create(struct kvc_attr_cache **out)
{
	struct kvc_attr_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;
}

void kvc_attr_cache_destroy(struct kvc_attr_cache *cache)
{
	if (!cache)
		return;
	pthread_mutex_destroy(&cache->lock);
	free(cache);
}

static struct slot *slot_of(struct kvc_attr_cache *c, uint64_t ino)
{
	return &c->slots[ino & (SLOTS - 1)];
}

static void put(struct kvc_attr_cache *cache, const struct kvc_attr *attr,
                struct kvc_meta_events_mark mark, uint64_t current_at)
{
	int64_t now = kvc_clock_monotonic_ns();
	pthread_mutex_lock(&cache->lock);
	struct slot *s = slot_of(cache, attr->ino);
	/* An answer older than the newest seen (a request that passed a
	 * change of ours, whose answer came first) is not kept, nor is the
	 * one held served any more; the newest ctime stays to judge later
	 * answers by. */
	if (s->attr.ino == attr->ino && attr->ctime_ns < s->attr.ctime_ns)
		s->valid = false;
	else
		*s = (struct slot){*attr, true, mark, current_at > mark.seq ? current_at : mark.seq,
		                   now, cache->forgets};
	pthread_mutex_unlock(&cache->lock);
}

void kvc_attr_cache_put(struct kvc_attr_cache *cache, const struct kvc_attr *attr,
                        struct kvc_meta_events_mark mark)
{
	put(cache, attr, mark, 0);
}

void kvc_attr_cache_put_own(struct kvc_attr_cache *cache, const struct kvc_attr *attr,
                            struct kvc_meta_events_mark mark, uint64_t forgot)
{
	put(cache, attr, mark, forgot);
}

bool kvc_attr_cache_same(struct kvc_attr_cache *cache, const struct kvc_attr *attr)
{
	pthread_mutex_lock(&cache->lock);
	const struct slot *s = slot_of(cache, attr->ino);
	bool same = s->attr.ino == attr->ino && s->attr.mtime_ns == attr->mtime_ns &&
	            s->attr.size == attr->size;
	pthread_mutex_unlock(&cache->lock);
	return same;
}

double kvc_attr_cache_get(struct kvc_attr_cache *cache, struct kvc_meta_events *events,
                          uint64_t ino, struct kvc_attr *out)
{
	pthread_mutex_lock(&cache->lock);
	struct slot s = *slot_of(cache, ino);
	/* Put after the last forget, and asked for after it too (an answer
	 * in flight across a change of ours may tell the old nlink). */
	bool held = s.attr.ino == ino && ino != 0 && s.valid && s.forgets == cache->forgets &&
	            s.current_at >= cache->forgot_seq;
	pthread_mutex_unlock(&cache->lock);
	if (!held)
		return 0;
	/* Fresh for the events' ttl from when it was put, unless an event
	 * for the inode came after the request (then the ttl is 0). */
	double ttl = kvc_meta_events_ttl(events, s.mark, 0, NULL, ino);
	double left = ttl - (double)(kvc_clock_monotonic_ns() - s.at_ns) / 1e9;
	if (left <= 0)
		return 0;
	*out = s.attr;
	return left;
}

uint64_t kvc_attr_cache_forget(struct kvc_attr_cache *cache, struct kvc_meta_events *events)
{
	uint64_t seq = kvc_meta_events_tick(events);
	pthread_mutex_lock(&cache->lock);
	cache->forgets++;
	if (seq > cache->forgot_seq)
		cache->forgot_seq = seq;
	pthread_mutex_unlock(&cache->lock);
	return seq;
}
