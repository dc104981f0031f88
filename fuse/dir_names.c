/* dir_names: see dir_names.h. */
#include "fuse/dir_names.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/wire.h"
#include "fuse/meta_events.h"
#include "fuse/operations.h"

#define DIRS 16
#define FILL_AFTER 4
#define MAX_NAMES (1u << 18)
#define TOO_BIG_RETRY_S 600
#define FAILED_RETRY_MS 1000
#define PAGE 1024

/* A name (its hash) and the inode it names as this client last heard
 * (0: not known: made or changed by another client, removed, or being
 * made here). */
struct slot {
	uint64_t h, ino;
};

enum state {
	FREE,     /* nothing known; misses counted */
	WANTED,   /* to be filled by the thread */
	FILLING,  /* watched, being listed */
	COMPLETE, /* every name is in the set */
	TOO_BIG,  /* over MAX_NAMES: not before retry_ns */
};

struct dir {
	uint64_t ino;
	enum state state;
	uint32_t misses;
	uint64_t epoch;     /* moves whenever what is known is dropped */
	uint64_t gen;       /* the event stream's generation of the watch */
	int64_t watched_ns; /* send time of the last watch kvc-meta took */
	int64_t used_ns, retry_ns;
	bool renewing;
	struct slot *slots; /* open addressing by hash; hash 0: empty */
	uint32_t cap, count;
};

struct kvc_dir_names {
	struct kvc_fuse *fs;
	pthread_mutex_t lock;
	pthread_cond_t work;
	bool stopping;
	pthread_t thread;
	int64_t ttl_ns;
	/* Name-making requests in flight, by the parity of the epoch they
	 * began in; a listing moves the epoch and waits for the other. */
	uint64_t op_epoch;
	uint32_t ops[2];
	pthread_cond_t ops_done;
	struct dir dirs[DIRS];
	struct kvc_dir_names_stats stats;
};

static uint64_t name_hash(uint64_t parent, const char *name, size_t len)
{
	uint64_t h = kvc_wire_watch_hash(KVC_WATCH_NAME, parent, name, (uint32_t)len);
	return h ? h : 1;
}

static uint64_t events_gen(struct kvc_dir_names *d)
{
	return kvc_meta_events_mark(d->fs->events).gen;
}

/* ---- the set (lock held) ---- */

static void set_clear(struct dir *dir)
{
	free(dir->slots);
	dir->slots = NULL;
	dir->cap = dir->count = 0;
}

static struct slot *set_find(const struct dir *dir, uint64_t h)
{
	if (!dir->cap)
		return NULL;
	for (uint32_t i = (uint32_t)h & (dir->cap - 1);; i = (i + 1) & (dir->cap - 1)) {
		if (dir->slots[i].h == h)
			return &dir->slots[i];
		if (dir->slots[i].h == 0)
			return NULL;
	}
}

static bool set_has(const struct dir *dir, uint64_t h)
{
	return set_find(dir, h) != NULL;
}

static struct slot *set_put(struct slot *slots, uint32_t cap, uint64_t h)
{
	uint32_t i = (uint32_t)h & (cap - 1);
	while (slots[i].h != 0 && slots[i].h != h)
		i = (i + 1) & (cap - 1);
	slots[i].h = h;
	return &slots[i];
}

/* Drop what is known of dir (its slot stays with its ino). */
static void dir_drop(struct dir *dir, enum state state)
{
	set_clear(dir);
	dir->epoch++;
	dir->state = state;
	dir->misses = 0;
	dir->renewing = false;
}

/* Add h naming ino (0: not known); a directory over MAX_NAMES is given
 * up, one out of memory too. */
static void set_add(struct dir *dir, uint64_t h, uint64_t ino)
{
	struct slot *known = set_find(dir, h);
	if (known) {
		known->ino = ino;
		return;
	}
	if ((dir->count + 1) * 2 > dir->cap) {
		uint32_t cap = dir->cap ? dir->cap * 2 : 1024;
		struct slot *slots = dir->count + 1 <= MAX_NAMES ? calloc(cap, sizeof(*slots)) : NULL;
		if (!slots) {
			dir_drop(dir, TOO_BIG);
			dir->retry_ns = kvc_clock_monotonic_ns() + (int64_t)TOO_BIG_RETRY_S * 1000000000;
			return;
		}
		for (uint32_t i = 0; i < dir->cap; i++)
			if (dir->slots[i].h)
				*set_put(slots, cap, dir->slots[i].h) = dir->slots[i];
		free(dir->slots);
		dir->slots = slots;
		dir->cap = cap;
	}
	set_put(dir->slots, dir->cap, h)->ino = ino;
	dir->count++;
}

/* A name a listing read: its inode only if nothing was heard of it since
 * (a page read before a change of the name must not undo what the change
 * told: a name heard of meanwhile keeps 0, as does one it disagrees with). */
static void listed_add(struct dir *dir, const struct slot *listed)
{
	struct slot *known = set_find(dir, listed->h);
	if (known && known->ino != listed->ino)
		known->ino = 0;
	else if (!known)
		set_add(dir, listed->h, listed->ino);
}

static struct dir *find(struct kvc_dir_names *d, uint64_t ino)
{
	for (int i = 0; i < DIRS; i++)
		if (d->dirs[i].ino == ino && ino != 0)
			return &d->dirs[i];
	return NULL;
}

/* A slot for ino: its own, else the least recently used one not being
 * filled (what it knew is dropped). NULL when every slot is filling. */
static struct dir *find_or_take(struct kvc_dir_names *d, uint64_t ino, int64_t now)
{
	struct dir *dir = find(d, ino), *lru = NULL;
	for (int i = 0; i < DIRS && !dir; i++)
		if (d->dirs[i].state != FILLING && (!lru || d->dirs[i].used_ns < lru->used_ns))
			lru = &d->dirs[i];
	if (!dir && lru) {
		dir_drop(lru, FREE);
		lru->ino = ino;
		lru->retry_ns = 0;
		dir = lru;
	}
	if (dir)
		dir->used_ns = now;
	return dir;
}

/* ---- the calls of FUSE workers and the event stream ---- */

/* parent's names while they count (complete, its watch fresh, the same
 * event stream), renewed at half their time; else NULL (lock held). */
static struct dir *fresh(struct kvc_dir_names *d, uint64_t parent, int64_t now, uint64_t gen)
{
	struct dir *dir = find(d, parent);
	if (!dir || dir->state != COMPLETE)
		return NULL;
	if (gen != dir->gen || now >= dir->watched_ns + d->ttl_ns) {
		dir_drop(dir, WANTED); /* the watch may be gone: list again */
		pthread_cond_signal(&d->work);
		return NULL;
	}
	dir->used_ns = now;
	if (now >= dir->watched_ns + d->ttl_ns / 2 && !dir->renewing) {
		dir->renewing = true;
		pthread_cond_signal(&d->work);
	}
	return dir;
}

double kvc_dir_names_absent(struct kvc_dir_names *d, uint64_t parent, const char *name)
{
	double left = 0;
	size_t len = strlen(name);
	/* A name no directory can hold is kvc-meta's to refuse (-ENAMETOOLONG). */
	if (!d || len > KVC_WIRE_MAX_NAME)
		return 0;
	uint64_t h = name_hash(parent, name, len);
	int64_t now = kvc_clock_monotonic_ns();
	uint64_t gen = events_gen(d);
	pthread_mutex_lock(&d->lock);
	struct dir *dir = fresh(d, parent, now, gen);
	if (dir && !set_has(dir, h)) {
		left = (double)(dir->watched_ns + d->ttl_ns - now) / 1e9;
		d->stats.answered++;
	}
	pthread_mutex_unlock(&d->lock);
	return left;
}

uint64_t kvc_dir_names_ino(struct kvc_dir_names *d, uint64_t parent, const char *name,
                           size_t len)
{
	uint64_t ino = 0;
	if (!d)
		return 0;
	uint64_t h = name_hash(parent, name, len);
	int64_t now = kvc_clock_monotonic_ns();
	uint64_t gen = events_gen(d);
	pthread_mutex_lock(&d->lock);
	struct dir *dir = fresh(d, parent, now, gen);
	const struct slot *slot = dir ? set_find(dir, h) : NULL;
	if (slot)
		ino = slot->ino;
	pthread_mutex_unlock(&d->lock);
	return ino;
}

void kvc_dir_names_named(struct kvc_dir_names *d, uint64_t parent, const char *name, size_t len,
                         uint64_t ino)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	struct dir *dir = find(d, parent);
	uint64_t h = name_hash(parent, name, len);
	struct slot *slot = dir ? set_find(dir, h) : NULL;
	if (slot)
		slot->ino = ino;
	else if (dir && ino && (dir->state == FILLING || dir->state == COMPLETE))
		set_add(dir, h, ino);
	pthread_mutex_unlock(&d->lock);
}

void kvc_dir_names_missed(struct kvc_dir_names *d, uint64_t parent)
{
	if (!d)
		return;
	int64_t now = kvc_clock_monotonic_ns();
	pthread_mutex_lock(&d->lock);
	struct dir *dir = find_or_take(d, parent, now);
	if (dir && dir->state == TOO_BIG && now >= dir->retry_ns)
		dir->state = FREE;
	if (dir && dir->state == FREE && ++dir->misses >= FILL_AFTER && now >= dir->retry_ns) {
		dir->state = WANTED;
		pthread_cond_signal(&d->work);
	}
	pthread_mutex_unlock(&d->lock);
}

/* Add (parent, name) where it is being listed or complete (lock held). */
static void heard(struct kvc_dir_names *d, uint64_t parent, const char *name, size_t len)
{
	struct dir *dir = find(d, parent);
	if (dir && (dir->state == FILLING || dir->state == COMPLETE))
		set_add(dir, name_hash(parent, name, len), 0);
}

void kvc_dir_names_heard(struct kvc_dir_names *d, uint64_t parent, const char *name,
                         size_t len)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	heard(d, parent, name, len);
	pthread_mutex_unlock(&d->lock);
}

uint32_t kvc_dir_names_begin(struct kvc_dir_names *d, uint64_t parent, const char *name,
                             size_t len)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	uint32_t ticket = (uint32_t)(d->op_epoch & 1);
	d->ops[ticket]++;
	heard(d, parent, name, len);
	pthread_mutex_unlock(&d->lock);
	return ticket;
}

void kvc_dir_names_end(struct kvc_dir_names *d, uint32_t ticket)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	if (--d->ops[ticket & 1] == 0)
		pthread_cond_broadcast(&d->ops_done);
	pthread_mutex_unlock(&d->lock);
}

void kvc_dir_names_forget(struct kvc_dir_names *d, uint64_t parent)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	struct dir *dir = find(d, parent);
	if (dir && dir->state != TOO_BIG)
		dir_drop(dir, FREE);
	pthread_mutex_unlock(&d->lock);
}

void kvc_dir_names_stats(struct kvc_dir_names *d, struct kvc_dir_names_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	*out = d->stats;
	for (int i = 0; i < DIRS; i++)
		out->dirs_complete += d->dirs[i].state == COMPLETE;
	pthread_mutex_unlock(&d->lock);
}

/* ---- the fill thread ---- */

/* Whether dir is still the one a call began on (lock held). */
static bool same(const struct dir *dir, uint64_t ino, uint64_t epoch)
{
	return dir->ino == ino && dir->epoch == epoch;
}

/* List dir's names into its set (lock held; released meanwhile). */
static void fill(struct kvc_dir_names *d, struct dir *dir, struct kvc_meta_dirents *page,
                 struct slot *listed)
{
	uint64_t ino = dir->ino, gen = events_gen(d);
	set_clear(dir);
	dir->epoch++;
	uint64_t epoch = dir->epoch;
	dir->state = FILLING;
	d->stats.fills++;
	/* Requests of this client that began before now may have gone
	 * unheard: list only once they are answered (later ones are heard:
	 * the directory is FILLING). One fill at a time, so the other
	 * parity has drained before the epoch moves to it. */
	uint32_t older = (uint32_t)(d->op_epoch++ & 1);
	while (d->ops[older] > 0 && !d->stopping)
		pthread_cond_wait(&d->ops_done, &d->lock);
	if (!same(dir, ino, epoch) || dir->state != FILLING || d->stopping)
		return; /* dropped meanwhile */
	pthread_mutex_unlock(&d->lock);
	int64_t watched = kvc_clock_monotonic_ns();
	/* No stream, no events: nothing could be kept up to date. */
	int rc = gen & 1 ? kvc_meta_client_watch_dir(&d->fs->meta, ino) : -ENOTCONN;
	char after[KVC_WIRE_MAX_NAME + 1] = "";
	bool more = rc == 0;
	while (more) {
		rc = kvc_meta_client_readdir(&d->fs->meta, ino, after, PAGE, page);
		more = rc == 0 && page->more;
		const char *name;
		uint32_t len, n = 0;
		struct kvc_attr attr;
		int got;
		while (rc == 0 && (got = kvc_meta_client_dirent_next(page, &name, &len, &attr)) > 0) {
			listed[n++] = (struct slot){name_hash(ino, name, len), attr.ino};
			memcpy(after, name, len);
			after[len] = '\0';
			if (n == PAGE)
				break;
		}
		if (rc == 0 && got < 0)
			rc = got;
		more = more && n > 0;
		pthread_mutex_lock(&d->lock);
		bool ours = same(dir, ino, epoch) && dir->state == FILLING;
		for (uint32_t i = 0; ours && rc == 0 && i < n && dir->state == FILLING; i++)
			listed_add(dir, &listed[i]);
		more = more && same(dir, ino, epoch) && dir->state == FILLING && !d->stopping;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	if (same(dir, ino, epoch) && dir->state == FILLING) {
		if (rc == 0 && gen == events_gen(d)) {
			dir->state = COMPLETE;
			dir->gen = gen;
			dir->watched_ns = watched;
		} else {
			if (rc < 0 && rc != -ENOTCONN)
				kvc_log_debug("directory %" PRIu64 " not taken in: %s", ino, strerror(-rc));
			dir_drop(dir, FREE);
			dir->retry_ns = kvc_clock_monotonic_ns() + (int64_t)FAILED_RETRY_MS * 1000000;
		}
	}
}

/* Renew dir's watch (lock held; released meanwhile). */
static void renew(struct kvc_dir_names *d, struct dir *dir)
{
	uint64_t ino = dir->ino, epoch = dir->epoch;
	pthread_mutex_unlock(&d->lock);
	int64_t sent = kvc_clock_monotonic_ns();
	int rc = kvc_meta_client_watch_dir(&d->fs->meta, ino);
	pthread_mutex_lock(&d->lock);
	if (same(dir, ino, epoch) && dir->state == COMPLETE) {
		dir->renewing = false;
		if (rc == 0)
			dir->watched_ns = sent;
		else
			dir_drop(dir, FREE);
	}
}

static void *fill_main(void *arg)
{
	struct kvc_dir_names *d = arg;
	struct kvc_meta_dirents *page = malloc(sizeof(*page));
	struct slot *listed = malloc(PAGE * sizeof(*listed));
	pthread_mutex_lock(&d->lock);
	while (!d->stopping) {
		struct dir *wanted = NULL, *due = NULL;
		for (int i = 0; i < DIRS; i++) {
			if (d->dirs[i].state == WANTED && !wanted)
				wanted = &d->dirs[i];
			if (d->dirs[i].state == COMPLETE && d->dirs[i].renewing && !due)
				due = &d->dirs[i];
		}
		if (due)
			renew(d, due);
		else if (wanted && page && listed)
			fill(d, wanted, page, listed);
		else
			pthread_cond_wait(&d->work, &d->lock);
	}
	pthread_mutex_unlock(&d->lock);
	free(page);
	free(listed);
	return NULL;
}

int kvc_dir_names_start(struct kvc_fuse *fs, struct kvc_dir_names **out)
{
	struct kvc_dir_names *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fs = fs;
	d->ttl_ns = (int64_t)fs->config.cache_ttl_ms * 1000000;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->ops_done, NULL);
	int rc = -pthread_create(&d->thread, NULL, fill_main, d);
	if (rc < 0) {
		pthread_cond_destroy(&d->work);
		pthread_mutex_destroy(&d->lock);
		free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void kvc_dir_names_stop(struct kvc_dir_names *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stopping = true;
	pthread_cond_signal(&d->work);
	pthread_cond_broadcast(&d->ops_done);
	pthread_mutex_unlock(&d->lock);
	pthread_join(d->thread, NULL);
	pthread_mutex_lock(&d->lock);
	for (int i = 0; i < DIRS; i++)
		dir_drop(&d->dirs[i], FREE);
	pthread_mutex_unlock(&d->lock);
	/* d itself lives until exit: workers may still call in. */
}
