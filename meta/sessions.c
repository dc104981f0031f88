/* sessions: see sessions.h. */
#include "meta/sessions.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"

#define MAX_CLIENTS 4096

struct client {
	uint8_t id[KVC_META_CLIENT_ID];
	uint64_t last_ms;
	uint32_t told; /* the drop (its record's count) it was told of; 0: none */
	bool asked;     /* told by this process to open its files again */
	bool announced; /* did so (a REJOIN after being asked) */
};

struct kvc_meta_sessions {
	/* Held by the sweep across deciding a client is gone and dropping it,
	 * shared by RENEW across its look at the store: a RENEW sees a client
	 * either alive or with its drop recorded, never in between (it would
	 * be told nothing, then lose its sessions). Taken before `lock`. */
	pthread_rwlock_t drop_lock;
	pthread_mutex_t lock;
	uint32_t timeout_ms;
	struct client *clients;
	int count, capacity;
};

uint64_t kvc_meta_sessions_now_ms(void)
{
	return (uint64_t)kvc_clock_monotonic_ns() / 1000000;
}

int kvc_meta_sessions_create(uint32_t timeout_ms, struct kvc_meta_sessions **out)
{
	struct kvc_meta_sessions *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_rwlock_init(&s->drop_lock, NULL);
	s->timeout_ms = timeout_ms;
	*out = s;
	return 0;
}

void kvc_meta_sessions_destroy(struct kvc_meta_sessions *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	pthread_rwlock_destroy(&s->drop_lock);
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
	c->told = 0;
	c->asked = c->announced = false;
	return c;
}

/* Touch, and note (told) or read back (!told) the drop the client was
 * told of. Returns what it was told (0: nothing, or not in the table). */
static uint32_t contact(struct kvc_meta_sessions *s, const uint8_t *id, uint64_t now_ms,
                        bool tell, uint32_t drops)
{
	pthread_mutex_lock(&s->lock);
	struct client *c = find(s, id);
	if (c)
		c->last_ms = now_ms;
	else
		c = add(s, id, now_ms); /* full: found again at the next sweep */
	if (c && tell)
		c->told = drops;
	uint32_t told = c ? c->told : 0;
	pthread_mutex_unlock(&s->lock);
	return told;
}

void kvc_meta_sessions_touch(struct kvc_meta_sessions *s, const uint8_t id[KVC_META_CLIENT_ID],
                             uint64_t now_ms)
{
	contact(s, id, now_ms, false, 0);
}

/* A client must have opened its files again since this process started:
 * 0 once it did, else -EREMCHG (and it is now asked to). A REJOIN counts
 * only after this process asked (told_here: or told it of its drop): one
 * an earlier process asked for says nothing of the sessions here. A
 * client the table has no room for is asked every time. */
static int announce(struct kvc_meta_sessions *s, const uint8_t *id, uint32_t flags,
                    bool told_here)
{
	pthread_mutex_lock(&s->lock);
	struct client *c = find(s, id);
	if (c && (flags & KVC_RENEW_REJOIN) && (c->asked || told_here))
		c->announced = true;
	int rc = c ? (c->announced ? 0 : -EREMCHG) : (flags & KVC_RENEW_REJOIN) ? 0 : -EREMCHG;
	if (c && rc < 0)
		c->asked = true;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* drop_lock shared: a drop is either all before this (its record is
 * there) or all after (the touch below keeps the client from it). */
static int renew_locked(struct kvc_meta_sessions *s, struct kvc_meta_store *store,
                        const uint8_t *id, uint32_t flags, uint64_t now_ms)
{
	struct kvc_meta_dropped d;
	int rc = kvc_meta_store_client_dropped(store, id, &d);
	uint32_t told = contact(s, id, now_ms, false, 0);
	if (rc < 0) /* the store failed: say so */
		return rc;
	/* Not dropped: a client that has not opened its files again since
	 * this process started is told to (open_table.h); REJOIN says it did. */
	if (rc == 0)
		return announce(s, id, flags, false);
	/* Rejoining after hearing of exactly this drop forgets it; any other
	 * RENEW tells (again) which drop it is. */
	if ((flags & KVC_RENEW_REJOIN) && told == d.drops) {
		rc = kvc_meta_store_client_rejoin(store, id, told);
		return rc < 0 ? rc : announce(s, id, flags, true);
	}
	contact(s, id, now_ms, true, d.drops);
	return -ESTALE;
}

int kvc_meta_sessions_renew(struct kvc_meta_sessions *s, struct kvc_meta_store *store,
                            const uint8_t id[KVC_META_CLIENT_ID], uint32_t flags,
                            uint64_t now_ms)
{
	if (flags & ~KVC_RENEW_REJOIN)
		return -EINVAL;
	pthread_rwlock_rdlock(&s->drop_lock);
	int rc = renew_locked(s, store, id, flags, now_ms);
	pthread_rwlock_unlock(&s->drop_lock);
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
	if (silent) /* forget it: the store records the drop (told when it returns) */
		*c = s->clients[--s->count];
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
		pthread_rwlock_wrlock(&s->drop_lock);
		uint64_t reclaimed = 0;
		int files = gone(s, ids[i], now_ms)
		                    ? kvc_meta_store_drop_client(store, ids[i], &reclaimed)
		                    : 0;
		pthread_rwlock_unlock(&s->drop_lock);
		if (files == 0)
			continue;
		if (files < 0) {
			count = files;
			break;
		}
		kvc_log_warn("a client silent for over %u ms is gone: %d open file(s) and grant(s) "
		             "released, %" PRIu64 " file(s) it made and never entered reclaimed",
		             s->timeout_ms, files, reclaimed);
		dropped++;
	}
	free(ids);
	return count < 0 ? count : dropped;
}
