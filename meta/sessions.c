/* sessions: see sessions.h. */
#include "meta/sessions.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"

#define MAX_CLIENTS 4096
#define MAX_DROPPED 256 /* remembered to tell them when they come back */

struct client {
	uint8_t id[KVC_META_CLIENT_ID];
	uint64_t last_ms;
};

struct kvc_meta_sessions {
	pthread_mutex_t lock;
	uint32_t timeout_ms;
	struct client *clients;
	int count, capacity;
	uint8_t dropped[MAX_DROPPED][KVC_META_CLIENT_ID]; /* a ring: oldest overwritten */
	int dropped_next;
};

uint64_t kvc_meta_sessions_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int kvc_meta_sessions_create(uint32_t timeout_ms, struct kvc_meta_sessions **out)
{
	struct kvc_meta_sessions *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->timeout_ms = timeout_ms;
	*out = s;
	return 0;
}

void kvc_meta_sessions_destroy(struct kvc_meta_sessions *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s->clients);
	free(s);
}

static struct client *find(struct kvc_meta_sessions *s, const uint8_t *id)
{
	for (int i = 0; i < s->count; i++)
		if (memcmp(s->clients[i].id, id, KVC_META_CLIENT_ID) == 0)
			return &s->clients[i];
	return NULL;
}

/* Lock held. NULL when the table is full or out of memory. */
static struct client *add(struct kvc_meta_sessions *s, const uint8_t *id, uint64_t now_ms)
{
	if (s->count == s->capacity) {
		int capacity = s->capacity ? s->capacity * 2 : 16;
		struct client *grown = capacity <= MAX_CLIENTS
		                       ? realloc(s->clients, (size_t)capacity * sizeof(*grown)) : NULL;
		if (!grown)
			return NULL;
		s->clients = grown;
		s->capacity = capacity;
	}
	struct client *c = &s->clients[s->count++];
	memcpy(c->id, id, KVC_META_CLIENT_ID);
	c->last_ms = now_ms;
	return c;
}

void kvc_meta_sessions_touch(struct kvc_meta_sessions *s, const uint8_t id[KVC_META_CLIENT_ID],
                             uint64_t now_ms)
{
	pthread_mutex_lock(&s->lock);
	struct client *c = find(s, id);
	if (c)
		c->last_ms = now_ms;
	else
		add(s, id, now_ms); /* full: found again at the next sweep */
	pthread_mutex_unlock(&s->lock);
}

int kvc_meta_sessions_renew(struct kvc_meta_sessions *s, const uint8_t id[KVC_META_CLIENT_ID],
                            uint64_t now_ms)
{
	static const uint8_t none[KVC_META_CLIENT_ID];
	int rc = 0;
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < MAX_DROPPED; i++) {
		if (memcmp(s->dropped[i], id, KVC_META_CLIENT_ID) == 0 &&
		    memcmp(id, none, KVC_META_CLIENT_ID) != 0) {
			memset(s->dropped[i], 0, KVC_META_CLIENT_ID); /* told once */
			rc = -ESTALE;
		}
	}
	pthread_mutex_unlock(&s->lock);
	kvc_meta_sessions_touch(s, id, now_ms);
	return rc;
}

/* Whether a client holding sessions is silent past the timeout; a client
 * not in the table (first seen now, e.g. after a restart) starts its
 * timeout now. */
static bool gone(struct kvc_meta_sessions *s, const uint8_t *id, uint64_t now_ms)
{
	pthread_mutex_lock(&s->lock);
	struct client *c = find(s, id);
	if (!c)
		add(s, id, now_ms);
	bool silent = c && now_ms > c->last_ms && now_ms - c->last_ms > s->timeout_ms;
	if (silent) { /* forget it, and tell it if it ever comes back */
		memcpy(s->dropped[s->dropped_next], id, KVC_META_CLIENT_ID);
		s->dropped_next = (s->dropped_next + 1) % MAX_DROPPED;
		*c = s->clients[--s->count];
	}
	pthread_mutex_unlock(&s->lock);
	return silent;
}

int kvc_meta_sessions_sweep(struct kvc_meta_sessions *s, struct kvc_meta_store *store,
                            uint64_t now_ms)
{
	uint8_t (*ids)[KVC_META_CLIENT_ID] = malloc(MAX_CLIENTS * KVC_META_CLIENT_ID);
	if (!ids)
		return -ENOMEM;
	int count = kvc_meta_store_session_clients(store, ids, MAX_CLIENTS), dropped = 0;
	for (int i = 0; i < count; i++) {
		if (!gone(s, ids[i], now_ms))
			continue;
		int files = kvc_meta_store_drop_client(store, ids[i]);
		if (files < 0) {
			count = files;
			break;
		}
		kvc_log_warn("a client silent for over %u ms is gone: %d open file(s) released",
		             s->timeout_ms, files);
		dropped++;
	}
	free(ids);
	return count < 0 ? count : dropped;
}
