/* usrbio_limits: see usrbio_limits.h. */
#include "fuse/usrbio_limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct kvc_usrbio_uid_usage {
	uid_t uid;
	struct kvc_usrbio_usage used;
};

int kvc_usrbio_limits_init(struct kvc_usrbio_limits *limits, const struct kvc_usrbio_usage *max)
{
	memset(limits, 0, sizeof(*limits));
	limits->max = *max;
	return -pthread_mutex_init(&limits->lock, NULL);
}

void kvc_usrbio_limits_destroy(struct kvc_usrbio_limits *limits)
{
	free(limits->uids);
	limits->uids = NULL;
	limits->count = limits->capacity = 0;
	pthread_mutex_destroy(&limits->lock);
}

/* The entry of uid, or NULL. Lock held. */
static struct kvc_usrbio_uid_usage *find(struct kvc_usrbio_limits *limits, uid_t uid)
{
	for (size_t i = 0; i < limits->count; i++)
		if (limits->uids[i].uid == uid)
			return &limits->uids[i];
	return NULL;
}

/* Whether used + add stays within max, for one resource (no overflow). */
static int fits(uint64_t used, uint64_t add, uint64_t max)
{
	return used <= max && add <= max - used;
}

int kvc_usrbio_limits_charge(struct kvc_usrbio_limits *limits, uid_t uid,
                             const struct kvc_usrbio_usage *add)
{
	const struct kvc_usrbio_usage *max = &limits->max;
	int rc = 0;
	pthread_mutex_lock(&limits->lock);
	struct kvc_usrbio_uid_usage *u = find(limits, uid);
	struct kvc_usrbio_usage used = u ? u->used : (struct kvc_usrbio_usage){0};
	if (!fits(used.iov_bytes, add->iov_bytes, max->iov_bytes) ||
	    !fits(used.rings, add->rings, max->rings) ||
	    !fits(used.registrations, add->registrations, max->registrations) ||
	    !fits(used.connections, add->connections, max->connections))
		rc = -EDQUOT;
	if (rc == 0 && !u && limits->count == limits->capacity) {
		size_t cap = limits->capacity ? limits->capacity * 2 : 8;
		struct kvc_usrbio_uid_usage *grown = realloc(limits->uids, cap * sizeof(*grown));
		if (grown) {
			limits->uids = grown;
			limits->capacity = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc == 0 && !u) {
		u = &limits->uids[limits->count++];
		*u = (struct kvc_usrbio_uid_usage){.uid = uid};
	}
	if (rc == 0) {
		u->used.iov_bytes += add->iov_bytes;
		u->used.rings += add->rings;
		u->used.registrations += add->registrations;
		u->used.connections += add->connections;
	}
	pthread_mutex_unlock(&limits->lock);
	return rc;
}

static uint64_t minus(uint64_t used, uint64_t sub)
{
	return sub < used ? used - sub : 0;
}

void kvc_usrbio_limits_release(struct kvc_usrbio_limits *limits, uid_t uid,
                               const struct kvc_usrbio_usage *sub)
{
	pthread_mutex_lock(&limits->lock);
	struct kvc_usrbio_uid_usage *u = find(limits, uid);
	if (u) {
		u->used.iov_bytes = minus(u->used.iov_bytes, sub->iov_bytes);
		u->used.rings = minus(u->used.rings, sub->rings);
		u->used.registrations = minus(u->used.registrations, sub->registrations);
		u->used.connections = minus(u->used.connections, sub->connections);
		if (!u->used.iov_bytes && !u->used.rings && !u->used.registrations &&
		    !u->used.connections)
			*u = limits->uids[--limits->count];
	}
	pthread_mutex_unlock(&limits->lock);
}

void kvc_usrbio_limits_usage(struct kvc_usrbio_limits *limits, uid_t uid,
                             struct kvc_usrbio_usage *out)
{
	pthread_mutex_lock(&limits->lock);
	struct kvc_usrbio_uid_usage *u = find(limits, uid);
	*out = u ? u->used : (struct kvc_usrbio_usage){0};
	pthread_mutex_unlock(&limits->lock);
}
