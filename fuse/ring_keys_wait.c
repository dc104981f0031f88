/*
 * ring_keys_wait: parked key waits (see ring_keys.h). One waiter thread,
 * started with the first wait, asleep unless some wait is due. A wait is
 * due when kvc_ring_keys_notify names its key (kvc-meta's change events:
 * a KEYS_LOOKUP that finds nothing is noted, so another client's put of
 * the key is told to us), when its backoff passes (1 ms, doubling to 20 ms
 * while the event stream is down, to 1 s while it is up: the lookup also
 * renews kvc-meta's note) or at its deadline. An event that came while the
 * wait was being looked up makes it due at once (meta_events.h's marks). Due waits are taken out of the list, looked up in one
 * KEYS_LOOKUP per directory, then completed (found: the key's size; past
 * the deadline: -ETIMEDOUT; the directory gone: its error) or put back.
 * A removed key just goes on being waited for.
 *
 * Locking: `lock` guards the list and the per-uid counts; no system call
 * or RPC is made holding it. A wait holds a reference on its ring; a ring
 * that stopped (client gone, ring deregistered) drops its waits at their
 * next look.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "fuse/ring_keys.h"
#include "fuse/ring_service.h"

#define FIRST_BACKOFF_NS 1000000
#define LAST_BACKOFF_NS 20000000
#define LAST_BACKOFF_EVENTS_NS 1000000000
#define TAKE 256 /* waits looked at per round */

struct wait {
	struct kvc_ring_server_ring *ring;
	uid_t uid;
	uint32_t slot;
	uint64_t userdata;
	uint64_t parent;
	int64_t due_ns, deadline_ns, backoff_ns;
	uint16_t name_len;
	char name[KVC_RING_KEY_MAX_NAME + 1];
};

struct uid_count {
	uid_t uid;
	int count;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct kvc_fuse *fs; /* the one kvc-fuse of this process */
	bool started;
	struct wait **list;
	size_t count, capacity;
	struct uid_count uids[64]; /* uids with parked waits (more: -EDQUOT) */
} waits = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* The uid's count, made when `make`; NULL when full or absent. Locked. */
static struct uid_count *uid_slot(uid_t uid, bool make)
{
	struct uid_count *free_slot = NULL;
	for (size_t i = 0; i < sizeof(waits.uids) / sizeof(waits.uids[0]); i++) {
		if (waits.uids[i].count > 0 && waits.uids[i].uid == uid)
			return &waits.uids[i];
		if (waits.uids[i].count == 0 && !free_slot)
			free_slot = &waits.uids[i];
	}
	if (free_slot && make)
		free_slot->uid = uid;
	return make ? free_slot : NULL;
}

/* Let a wait go: its counts and its ring reference. */
static void release(struct wait *w)
{
	pthread_mutex_lock(&waits.lock);
	struct uid_count *u = uid_slot(w->uid, false);
	if (u)
		u->count--;
	pthread_mutex_unlock(&waits.lock);
	kvc_ring_service_park(w->ring, -1);
	kvc_ring_service_release(w->ring);
	free(w);
}

/* Complete a wait with result, or put it back (a full completion queue). */
static bool finish(struct wait *w, int64_t result)
{
	int rc = kvc_ring_service_complete(w->ring, w->slot, w->userdata, result);
	if (rc == -EAGAIN) {
		w->due_ns = kvc_clock_monotonic_ns() + FIRST_BACKOFF_NS;
		return false;
	}
	release(w);
	return true;
}

/* Look the taken waits up, one KEYS_LOOKUP per directory; complete the
 * found, timed-out and hopeless ones. Those still waiting stay in took
 * (compacted); returns their count. */
static int look(struct kvc_fuse *fs, struct wait **took, int n)
{
	static struct kvc_meta_keyname keys[TAKE];
	static struct kvc_msg_key_result res[TAKE];
	static struct wait *group[TAKE];
	int64_t now = kvc_clock_monotonic_ns();
	int kept = 0;
	bool *looked = calloc((size_t)n, sizeof(bool));
	for (int i = 0; i < n; i++) {
		if (looked && looked[i])
			continue;
		struct wait *w = took[i];
		int g = 0;
		for (int j = i; j < n; j++) {
			if (took[j]->parent != w->parent || (looked && looked[j]))
				continue;
			if (looked)
				looked[j] = true;
			group[g] = took[j];
			keys[g++] = (struct kvc_meta_keyname){.name = took[j]->name,
			                                  .name_len = took[j]->name_len};
			if (!looked)
				break;
		}
		struct kvc_msg_keys m = {.parent = w->parent, .count = (uint32_t)g};
		struct kvc_meta_events_mark mark = kvc_meta_events_mark(fs->events);
		int64_t last = kvc_meta_events_up(fs->events) ? LAST_BACKOFF_EVENTS_NS
		                                             : LAST_BACKOFF_NS;
		int rc = kvc_meta_client_keys(&fs->meta, KVC_MSG_KEYS_LOOKUP, &m, keys, res);
		for (int j = 0; j < g; j++) {
			struct wait *x = group[j];
			int one = rc < 0 ? rc : res[j].rc;
			bool done = false;
			if (kvc_ring_service_dead(x->ring)) {
				release(x);
				continue;
			}
			if (one == 0)
				done = finish(x, (int64_t)res[j].attr.size);
			else if (now >= x->deadline_ns)
				done = finish(x, -ETIMEDOUT);
			else if (one != -ENOENT && one != -EIO)
				done = finish(x, one); /* the directory went, or the name is no key */
			if (done)
				continue;
			if (kvc_meta_events_ttl(fs->events, mark, x->parent, x->name, 0) == 0) {
				x->due_ns = now; /* told of it while we looked: again now */
			} else if (x->due_ns <= now) {
				x->due_ns = now + x->backoff_ns;
				x->backoff_ns = x->backoff_ns * 2 < last ? x->backoff_ns * 2 : last;
			}
			if (x->due_ns > x->deadline_ns)
				x->due_ns = x->deadline_ns;
			took[kept++] = x;
		}
	}
	free(looked);
	return kept;
}

static void *waiter_main(void *arg)
{
	struct kvc_fuse *fs = arg;
	struct wait *took[TAKE];
	pthread_mutex_lock(&waits.lock);
	for (;;) {
		int64_t now = kvc_clock_monotonic_ns(), next = INT64_MAX;
		int n = 0;
		for (size_t i = 0; i < waits.count;) {
			struct wait *w = waits.list[i];
			if (n < TAKE && (w->due_ns <= now || w->deadline_ns <= now)) {
				took[n++] = w;
				waits.list[i] = waits.list[--waits.count];
				continue;
			}
			int64_t at = w->due_ns < w->deadline_ns ? w->due_ns : w->deadline_ns;
			next = at < next ? at : next;
			i++;
		}
		if (n == 0) {
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			int64_t sleep = next == INT64_MAX ? 1000000000 : next - now;
			until.tv_sec += sleep / 1000000000;
			until.tv_nsec += sleep % 1000000000;
			if (until.tv_nsec >= 1000000000)
				until.tv_sec++, until.tv_nsec -= 1000000000;
			pthread_cond_timedwait(&waits.wake, &waits.lock, &until);
			continue;
		}
		pthread_mutex_unlock(&waits.lock);
		int kept = look(fs, took, n);
		pthread_mutex_lock(&waits.lock);
		for (int i = 0; i < kept; i++) /* room: they were in the list */
			waits.list[waits.count++] = took[i];
	}
	return NULL;
}

static int start(struct kvc_fuse *fs)
{
	pthread_condattr_t attr;
	pthread_t thread;
	if (waits.started)
		return waits.fs == fs ? 0 : -EBUSY;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_destroy(&waits.wake);
	pthread_cond_init(&waits.wake, &attr);
	pthread_condattr_destroy(&attr);
	int rc = pthread_create(&thread, NULL, waiter_main, fs);
	if (rc)
		return -rc;
	pthread_detach(thread);
	waits.fs = fs;
	waits.started = true;
	return 0;
}

int kvc_ring_keys_park(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring, uid_t uid,
                       uint32_t slot, uint64_t userdata, uint64_t parent, const char *name,
                       size_t name_len, uint32_t timeout_ms)
{
	struct wait *w = calloc(1, sizeof(*w));
	if (!w || name_len > KVC_RING_KEY_MAX_NAME) {
		free(w);
		return -ENOMEM;
	}
	int64_t now = kvc_clock_monotonic_ns();
	uint32_t ms = timeout_ms ? timeout_ms : KVC_RING_KEY_MAX_WAIT_MS;
	*w = (struct wait){.ring = ring, .uid = uid, .slot = slot, .userdata = userdata,
	                   .parent = parent, .due_ns = now + FIRST_BACKOFF_NS,
	                   .deadline_ns = now + (int64_t)ms * 1000000,
	                   .backoff_ns = FIRST_BACKOFF_NS, .name_len = (uint16_t)name_len};
	memcpy(w->name, name, name_len);
	if (kvc_ring_service_park(ring, 1) < 0) {
		free(w);
		return -EDQUOT;
	}
	pthread_mutex_lock(&waits.lock);
	struct uid_count *u = uid_slot(uid, true);
	int rc = start(fs);
	if (rc == 0 && (!u || u->count >= KVC_RING_KEYS_UID_WAITS ||
	                waits.count >= KVC_RING_KEYS_ALL_WAITS))
		rc = -EDQUOT;
	if (rc == 0 && waits.count == waits.capacity) {
		size_t cap = waits.capacity ? waits.capacity * 2 : 64;
		struct wait **grown = realloc(waits.list, cap * sizeof(*grown));
		if (grown)
			waits.list = grown, waits.capacity = cap;
		else
			rc = -ENOMEM;
	}
	if (rc == 0) {
		u->count++;
		kvc_ring_service_hold(ring);
		waits.list[waits.count++] = w;
		pthread_cond_signal(&waits.wake);
	}
	pthread_mutex_unlock(&waits.lock);
	if (rc < 0) {
		kvc_ring_service_park(ring, -1);
		free(w);
	}
	return rc;
}

void kvc_ring_keys_notify(struct kvc_fuse *fs, uint64_t parent, const char *name,
                          size_t name_len)
{
	bool any = false;
	pthread_mutex_lock(&waits.lock);
	if (waits.fs == fs) {
		for (size_t i = 0; i < waits.count; i++) {
			struct wait *w = waits.list[i];
			if (w->parent == parent && w->name_len == name_len &&
			    memcmp(w->name, name, name_len) == 0) {
				w->due_ns = 0;
				w->backoff_ns = FIRST_BACKOFF_NS;
				any = true;
			}
		}
	}
	if (any)
		pthread_cond_signal(&waits.wake);
	pthread_mutex_unlock(&waits.lock);
}
