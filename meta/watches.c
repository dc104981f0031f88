/* watches: see watches.h. */
#include "meta/watches.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"

#define NO_ENTRY UINT32_MAX
#define RECENT_SLOTS 4096 /* power of two */
#define STREAM_TICK_MS 200
#define HEARTBEAT_NS 1000000000ll /* an empty frame after 1 s of quiet */

struct entry {
	uint64_t id;
	uint64_t hash; /* of (kind, id, name) */
	int64_t expiry_ns;
	uint32_t serial; /* the watcher's */
	uint32_t kind;
	uint32_t next;   /* in its bucket, or the free list */
};

/* The last change of the objects hashed to one slot (the count when it
 * was made and its origin's serial), and the last one before it by
 * another origin than that: what a note since a count has missed. */
struct recent {
	uint64_t seq, seq_other;
	uint32_t origin;
};

struct kvc_meta_watcher {
	uint8_t id[KVC_WIRE_CLIENT_ID];
	uint32_t serial; /* never reused: entries name their watcher by it */
	int64_t ttl_ns;  /* ttl plus the margin */
	int refs;        /* bound connections and the stream */
	int64_t idle_ns; /* when refs fell to 0 (kept a ttl: what the client
	                  * cached still hears of changes, and a stream that
	                  * comes back gets the events queued meanwhile) */
	uint64_t stream; /* the current stream's number, 0: none */
	pthread_cond_t wake;
	uint8_t *queue;  /* encoded records (wire.h: kvc_msg_watch_event, name) */
	uint32_t queued, queue_cap;
	bool lost;
	int64_t start_until_ns; /* its start window: told every change until then */
};

struct kvc_meta_watches {
	pthread_mutex_t lock;
	bool stopping;
	struct entry *entries;
	uint32_t *buckets;
	uint32_t bucket_mask, max_entries, used, free_head, sweep;
	uint32_t next_serial;
	uint64_t next_stream;
	int64_t flood_until_ns, max_ttl_ns;
	/* The start window (watches.h): changes made since the start, encoded
	 * as a queue is, while now < log_until_ns; log_lost: some were not
	 * kept (past KVC_META_WATCH_QUEUE bytes, or the log is gone). */
	int64_t started_ns, log_until_ns;
	uint8_t *log;
	uint32_t logged, log_cap;
	bool log_lost, start_window; /* start_window: created with a start_ttl */
	struct kvc_meta_watcher *watchers[KVC_META_WATCHERS_MAX];
	int watcher_count;
	struct kvc_meta_watch_stats stats;
	/* Counted by kvc_meta_watches_changed (under lock); read without it
	 * by kvc_meta_watches_begin, on every request's path. */
	_Atomic uint64_t changes;
	struct recent recent[RECENT_SLOTS];
};

int kvc_meta_watches_create(uint32_t max_entries, uint32_t start_ttl_ms,
                            struct kvc_meta_watches **out)
{
	struct kvc_meta_watches *w = calloc(1, sizeof(*w));
	uint32_t buckets = 1024;
	if (max_entries < 64)
		max_entries = 64;
	while (buckets < max_entries / 2 && buckets < (1u << 24))
		buckets <<= 1;
	if (w) {
		w->entries = malloc((size_t)max_entries * sizeof(*w->entries));
		w->buckets = malloc((size_t)buckets * sizeof(*w->buckets));
	}
	if (!w || !w->entries || !w->buckets) {
		if (w) {
			free(w->entries);
			free(w->buckets);
		}
		free(w);
		return -ENOMEM;
	}
	pthread_mutex_init(&w->lock, NULL);
	w->bucket_mask = buckets - 1;
	w->max_entries = max_entries;
	for (uint32_t i = 0; i < buckets; i++)
		w->buckets[i] = NO_ENTRY;
	for (uint32_t i = 0; i < max_entries; i++)
		w->entries[i].next = i + 1 < max_entries ? i + 1 : NO_ENTRY;
	w->free_head = 0;
	w->next_serial = 1;
	w->started_ns = kvc_clock_monotonic_ns();
	if (start_ttl_ms > KVC_META_WATCH_MAX_TTL_MS)
		start_ttl_ms = KVC_META_WATCH_MAX_TTL_MS;
	w->start_window = start_ttl_ms != 0;
	if (start_ttl_ms) {
		w->log_until_ns = w->started_ns +
		                  ((int64_t)start_ttl_ms + KVC_META_WATCH_MARGIN_MS) * 1000000;
	}
	*out = w;
	return 0;
}

void kvc_meta_watches_stop(struct kvc_meta_watches *w)
{
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	for (int i = 0; i < w->watcher_count; i++)
		pthread_cond_broadcast(&w->watchers[i]->wake);
	pthread_mutex_unlock(&w->lock);
}

static void watcher_free(struct kvc_meta_watcher *c)
{
	pthread_cond_destroy(&c->wake);
	free(c->queue);
	free(c);
}

/* Called with the lock held: free the watchers without references for
 * longer than their ttl (nothing the client cached needs them any more).
 * Their entries stay until they expire or are swept; they name a serial
 * no watcher has. */
static void watchers_sweep(struct kvc_meta_watches *w, int64_t now)
{
	for (int i = 0; i < w->watcher_count;) {
		struct kvc_meta_watcher *c = w->watchers[i];
		if (c->refs == 0 && now - c->idle_ns > c->ttl_ns) {
			w->watchers[i] = w->watchers[--w->watcher_count];
			watcher_free(c);
		} else {
			i++;
		}
	}
}

void kvc_meta_watches_destroy(struct kvc_meta_watches *w)
{
	if (!w)
		return;
	for (int i = 0; i < w->watcher_count; i++)
		watcher_free(w->watchers[i]);
	pthread_mutex_destroy(&w->lock);
	free(w->log);
	free(w->entries);
	free(w->buckets);
	free(w);
}

static void start_replay(struct kvc_meta_watches *w, struct kvc_meta_watcher *c, int64_t now);

int kvc_meta_watches_bind(struct kvc_meta_watches *w, const uint8_t id[KVC_WIRE_CLIENT_ID],
                          uint32_t ttl_ms, struct kvc_meta_watcher **out)
{
	struct kvc_meta_watcher *c = NULL;
	int rc = 0;
	if (ttl_ms == 0 || ttl_ms > KVC_META_WATCH_MAX_TTL_MS)
		return -EINVAL;
	int64_t ttl_ns = ((int64_t)ttl_ms + KVC_META_WATCH_MARGIN_MS) * 1000000;
	pthread_mutex_lock(&w->lock);
	watchers_sweep(w, kvc_clock_monotonic_ns());
	for (int i = 0; i < w->watcher_count && !c; i++)
		if (memcmp(w->watchers[i]->id, id, KVC_WIRE_CLIENT_ID) == 0)
			c = w->watchers[i];
	if (!c && w->watcher_count == KVC_META_WATCHERS_MAX)
		rc = -EUSERS;
	else if (!c && !(c = calloc(1, sizeof(*c))))
		rc = -ENOMEM;
	else if (c->refs == 0 && c->serial == 0) {
		memcpy(c->id, id, KVC_WIRE_CLIENT_ID);
		c->serial = w->next_serial++;
		pthread_cond_init(&c->wake, NULL);
		w->watchers[w->watcher_count++] = c;
	}
	if (rc == 0) {
		bool made = c->ttl_ns == 0;
		/* The longest ttl any connection of the client asked for. */
		if (ttl_ns > c->ttl_ns)
			c->ttl_ns = ttl_ns;
		if (ttl_ns > w->max_ttl_ns)
			w->max_ttl_ns = ttl_ns;
		if (made)
			start_replay(w, c, kvc_clock_monotonic_ns());
		c->refs++;
		c->idle_ns = 0;
		*out = c;
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

/* Called with the lock held: one reference of c went. */
static void watcher_put(struct kvc_meta_watcher *c)
{
	if (--c->refs == 0)
		c->idle_ns = kvc_clock_monotonic_ns();
}

void kvc_meta_watches_unbind(struct kvc_meta_watches *w, struct kvc_meta_watcher *c)
{
	pthread_mutex_lock(&w->lock);
	watcher_put(c);
	pthread_mutex_unlock(&w->lock);
}

static struct kvc_meta_watcher *by_serial(struct kvc_meta_watches *w, uint32_t serial)
{
	for (int i = 0; i < w->watcher_count; i++)
		if (w->watchers[i]->serial == serial)
			return w->watchers[i];
	return NULL;
}

/* Unlink and free the entry at *link (lock held). */
static void entry_remove(struct kvc_meta_watches *w, uint32_t *link)
{
	uint32_t i = *link;
	*link = w->entries[i].next;
	w->entries[i].next = w->free_head;
	w->free_head = i;
	w->used--;
}

/* Drop the expired entries of one bucket (lock held). */
static void bucket_prune(struct kvc_meta_watches *w, uint32_t bucket, int64_t now)
{
	uint32_t *link = &w->buckets[bucket];
	while (*link != NO_ENTRY) {
		if (w->entries[*link].expiry_ns <= now)
			entry_remove(w, link);
		else
			link = &w->entries[*link].next;
	}
}

static void enqueue(struct kvc_meta_watches *w, struct kvc_meta_watcher *c, uint32_t kind,
                    uint64_t id, const char *name, uint32_t name_len);

uint64_t kvc_meta_watches_begin(struct kvc_meta_watches *w)
{
	return atomic_load(&w->changes);
}

void kvc_meta_watches_note(struct kvc_meta_watches *w, struct kvc_meta_watcher *c,
                           uint32_t kind, uint64_t id, const char *name, uint32_t name_len)
{
	kvc_meta_watches_note_since(w, c, UINT64_MAX, kind, id, name, name_len);
}

void kvc_meta_watches_note_since(struct kvc_meta_watches *w, struct kvc_meta_watcher *c,
                                 uint64_t since, uint32_t kind, uint64_t id, const char *name,
                                 uint32_t name_len)
{
	if (!c)
		return;
	int64_t now = kvc_clock_monotonic_ns();
	uint64_t h = kvc_wire_watch_hash(kind, id, name, name_len);
	pthread_mutex_lock(&w->lock);
	/* Changed by another since the request began: its answer may be
	 * from before the change, told to nobody. Tell c now. */
	const struct recent *rs = &w->recent[h & (RECENT_SLOTS - 1)];
	uint64_t missed = rs->origin == c->serial ? rs->seq_other : rs->seq;
	if (since != UINT64_MAX && missed > since)
		enqueue(w, c, kind, id, name, name_len);
	uint32_t bucket = (uint32_t)h & w->bucket_mask, i;
	bucket_prune(w, bucket, now);
	/* Keep the table clean a bucket at a time, as notes come. */
	bucket_prune(w, w->sweep++ & w->bucket_mask, now);
	for (i = w->buckets[bucket]; i != NO_ENTRY; i = w->entries[i].next)
		if (w->entries[i].hash == h && w->entries[i].serial == c->serial &&
		    w->entries[i].id == id && w->entries[i].kind == kind)
			break;
	if (i == NO_ENTRY && w->free_head != NO_ENTRY) {
		i = w->free_head;
		w->free_head = w->entries[i].next;
		w->entries[i] = (struct entry){.id = id, .hash = h, .serial = c->serial,
		                               .kind = kind, .next = w->buckets[bucket]};
		w->buckets[bucket] = i;
		w->used++;
	}
	if (i != NO_ENTRY) {
		w->entries[i].expiry_ns = now + c->ttl_ns;
		w->stats.notes++;
	} else {
		if (w->flood_until_ns <= now)
			kvc_log_warn("watch table full (%u entries): every change goes to every "
			             "client for %lld ms", w->max_entries,
			             (long long)(w->max_ttl_ns / 1000000));
		w->flood_until_ns = now + w->max_ttl_ns;
		w->stats.floods++;
	}
	pthread_mutex_unlock(&w->lock);
}

/* Append one encoded event (wire.h: kvc_msg_watch_event, then the name
 * padded to 8) to the buffer *buf of *len bytes, capacity *cap, which
 * grows up to KVC_META_WATCH_QUEUE. Returns false when it would not fit. */
static bool encode_event(uint8_t **buf, uint32_t *len, uint32_t *cap, uint32_t kind,
                         uint64_t id, const char *name, uint32_t name_len)
{
	uint32_t nlen = kind == KVC_WATCH_NAME ? name_len : 0;
	uint32_t need = (uint32_t)sizeof(struct kvc_msg_watch_event) + ((nlen + 7) & ~7u);
	if (*len + need > *cap) {
		uint64_t grown_cap = *cap ? (uint64_t)*cap * 2 : 4096;
		while (grown_cap < *len + need)
			grown_cap *= 2;
		if (grown_cap > KVC_META_WATCH_QUEUE && *len + need <= KVC_META_WATCH_QUEUE)
			grown_cap = KVC_META_WATCH_QUEUE; /* a cap that is no power of two */
		uint8_t *grown = grown_cap <= KVC_META_WATCH_QUEUE ? realloc(*buf, grown_cap) : NULL;
		if (!grown)
			return false;
		*buf = grown;
		*cap = (uint32_t)grown_cap;
	}
	struct kvc_msg_watch_event ev = {.id = id, .kind = kind, .name_len = nlen};
	memcpy(*buf + *len, &ev, sizeof(ev));
	memset(*buf + *len + sizeof(ev), 0, need - sizeof(ev));
	if (nlen)
		memcpy(*buf + *len + sizeof(ev), name, nlen);
	*len += need;
	return true;
}

/* Queue one event for c (lock held). */
static void enqueue(struct kvc_meta_watches *w, struct kvc_meta_watcher *c, uint32_t kind,
                    uint64_t id, const char *name, uint32_t name_len)
{
	if (encode_event(&c->queue, &c->queued, &c->queue_cap, kind, id, name, name_len)) {
		w->stats.events++;
	} else {
		c->lost = true;
		w->stats.dropped++;
	}
	pthread_cond_signal(&c->wake);
}

/* The start window (lock held): log a change made in it; past it, let the
 * log go (a watcher made later, whose own window still runs, is told
 * that changes were lost: start_replay). */
static void start_log(struct kvc_meta_watches *w, int64_t now, uint32_t kind, uint64_t id,
                      const char *name, uint32_t name_len)
{
	if (now < w->log_until_ns) {
		if (!w->log_lost &&
		    !encode_event(&w->log, &w->logged, &w->log_cap, kind, id, name, name_len))
			w->log_lost = true;
	} else if (w->start_window && !w->log_lost) {
		free(w->log); /* a change it does not hold: whoever comes later lost it */
		w->log = NULL;
		w->logged = w->log_cap = 0;
		w->log_lost = true;
	}
}

/* A watcher new since the start (lock held): a client that cached from the
 * kvc-meta before this one may hold what changed since our start; within
 * its window (the start plus its ttl), everything changed goes to it,
 * first the log, then every change (the flood). */
static void start_replay(struct kvc_meta_watches *w, struct kvc_meta_watcher *c, int64_t now)
{
	int64_t until = w->started_ns + c->ttl_ns;
	if (!w->start_window || until <= now)
		return; /* what it cached before our start has expired */
	c->start_until_ns = until;
	if (w->log_lost || (w->logged && !(c->queue = malloc(w->log_cap)))) {
		c->lost = true;
	} else if (w->logged) {
		memcpy(c->queue, w->log, w->logged);
		c->queued = w->logged;
		c->queue_cap = w->log_cap;
	}
	if (until > w->log_until_ns && !w->log_lost)
		w->log_until_ns = until;
}

/* Record a change of the object hashed h by origin in the recent table
 * (lock held): what notes since an earlier count have missed. */
static void recent_mark(struct kvc_meta_watches *w, uint64_t h, uint32_t origin_serial)
{
	struct recent *rs = &w->recent[h & (RECENT_SLOTS - 1)];
	if (rs->origin != origin_serial)
		rs->seq_other = rs->seq;
	rs->seq = atomic_fetch_add(&w->changes, 1) + 1;
	rs->origin = origin_serial;
}

/* Tell the watchers of object (kind, id) hashed h, but origin, of the
 * event (ev_kind, id, name) (lock held). A NAME or INODE watch ends with
 * the event it causes; a DIR watch lives until it expires. */
static void tell_watchers(struct kvc_meta_watches *w, uint64_t h, uint32_t kind, uint64_t id,
                          uint32_t origin_serial, int64_t now, uint32_t ev_kind,
                          const char *name, uint32_t name_len)
{
	uint32_t *link = &w->buckets[(uint32_t)h & w->bucket_mask];
	while (*link != NO_ENTRY) {
		struct entry *e = &w->entries[*link];
		bool match = e->hash == h && e->id == id && e->kind == kind &&
		             e->serial != origin_serial;
		if (match && e->expiry_ns > now) {
			struct kvc_meta_watcher *c = by_serial(w, e->serial);
			if (c && now >= c->start_until_ns) /* else told already (changed) */
				enqueue(w, c, ev_kind, id, name, name_len);
		}
		if ((match && kind != KVC_WATCH_DIR) || e->expiry_ns <= now)
			entry_remove(w, link);
		else
			link = &e->next;
	}
}

void kvc_meta_watches_changed(struct kvc_meta_watches *w, const struct kvc_meta_watcher *origin,
                              uint32_t kind, uint64_t id, const char *name, uint32_t name_len)
{
	int64_t now = kvc_clock_monotonic_ns();
	uint64_t h = kvc_wire_watch_hash(kind, id, name, name_len);
	uint64_t h_dir = kvc_wire_watch_hash(KVC_WATCH_DIR, id, NULL, 0);
	uint32_t origin_serial = origin ? origin->serial : 0;
	pthread_mutex_lock(&w->lock);
	start_log(w, now, kind, id, name, name_len);
	recent_mark(w, h, origin_serial);
	if (kind == KVC_WATCH_NAME)
		recent_mark(w, h_dir, origin_serial); /* a name of directory id */
	/* Watchers in their start window hear of everything (and only once). */
	for (int i = 0; w->flood_until_ns <= now && i < w->watcher_count; i++)
		if (w->watchers[i]->serial != origin_serial && now < w->watchers[i]->start_until_ns)
			enqueue(w, w->watchers[i], kind, id, name, name_len);
	if (w->flood_until_ns > now) {
		for (int i = 0; i < w->watcher_count; i++)
			if (w->watchers[i]->serial != origin_serial)
				enqueue(w, w->watchers[i], kind, id, name, name_len);
	} else {
		tell_watchers(w, h, kind, id, origin_serial, now, kind, name, name_len);
		if (kind == KVC_WATCH_NAME)
			tell_watchers(w, h_dir, KVC_WATCH_DIR, id, origin_serial, now, KVC_WATCH_NAME,
			              name, name_len);
	}
	pthread_mutex_unlock(&w->lock);
}

/* Whether the peer of a stream hung up or sent something (it may not). */
static bool peer_gone(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	return poll(&p, 1, 0) != 0;
}

static int send_events(int fd, const uint8_t *buf, uint32_t len, bool lost)
{
	/* Frames of at most KVC_WIRE_MAX_BODY: cut at record boundaries. */
	uint32_t off = 0;
	int rc = 0;
	bool first = true; /* an empty frame is a heartbeat */
	while (rc == 0 && (off < len || lost || first)) {
		first = false;
		struct kvc_msg_watch_events head = {.flags = lost ? KVC_WATCH_LOST : 0};
		uint32_t end = off, n = 0;
		while (end < len) {
			const struct kvc_msg_watch_event *ev = (const void *)(buf + end);
			uint32_t size = (uint32_t)sizeof(*ev) + ((ev->name_len + 7) & ~7u);
			if (end - off + size + sizeof(head) > KVC_WIRE_MAX_BODY)
				break;
			end += size;
			n++;
		}
		head.count = n;
		uint8_t *body = malloc(sizeof(head) + (end - off));
		if (!body)
			return -ENOMEM;
		memcpy(body, &head, sizeof(head));
		if (end > off)
			memcpy(body + sizeof(head), buf + off, end - off);
		struct kvc_wire_header h;
		kvc_wire_header_init(&h, KVC_MSG_WATCH_EVENTS, 0, 0,
		                     (uint32_t)sizeof(head) + (end - off), 0);
		rc = kvc_wire_send(fd, &h, body, NULL, 0);
		free(body);
		off = end;
		lost = false;
	}
	return rc;
}

int kvc_meta_watches_stream(struct kvc_meta_watches *w, struct kvc_meta_watcher *c, int fd)
{
	uint8_t *batch = NULL;
	int rc = 0;
	int64_t sent_ns = kvc_clock_monotonic_ns();
	pthread_mutex_lock(&w->lock);
	uint64_t me = ++w->next_stream;
	c->stream = me; /* a newer stream replaces an older one */
	c->refs++;
	for (;;) {
		while (!w->stopping && c->stream == me && c->queued == 0 && !c->lost) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += STREAM_TICK_MS * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			if (pthread_cond_timedwait(&c->wake, &w->lock, &until) == ETIMEDOUT)
				break;
		}
		if (w->stopping || c->stream != me)
			break;
		uint32_t len = c->queued;
		bool lost = c->lost;
		/* Take the queue; sends happen with no lock held. */
		batch = c->queue;
		c->queue = NULL;
		c->queued = c->queue_cap = 0;
		c->lost = false;
		pthread_mutex_unlock(&w->lock);
		int64_t now = kvc_clock_monotonic_ns();
		if (peer_gone(fd))
			rc = -ECONNRESET;
		else if (len || lost || now - sent_ns >= HEARTBEAT_NS)
			rc = send_events(fd, batch, len, lost);
		if (len || lost || now - sent_ns >= HEARTBEAT_NS)
			sent_ns = now;
		free(batch);
		batch = NULL;
		pthread_mutex_lock(&w->lock);
		if (rc < 0)
			break;
	}
	if (c->stream == me)
		c->stream = 0;
	watcher_put(c);
	pthread_mutex_unlock(&w->lock);
	return rc;
}

void kvc_meta_watches_stats(struct kvc_meta_watches *w, struct kvc_meta_watch_stats *out)
{
	pthread_mutex_lock(&w->lock);
	*out = w->stats;
	out->entries = w->used;
	pthread_mutex_unlock(&w->lock);
}
