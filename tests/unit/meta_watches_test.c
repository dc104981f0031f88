/* Unit tests of kvc-meta's watches (meta/watches.h): who is told of a
 * change, once; the origin never; a full table floods instead of missing
 * an event; the stream sends events and heartbeats and ends on stop; after
 * a start, a client that cached from the kvc-meta before hears of every
 * change, made before or after it came back. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "meta/watches.h"

static const uint8_t id_a[16] = {1}, id_b[16] = {2}, id_c[16] = {3};

struct streamer {
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *c;
	int fd;
	int rc;
	pthread_t thread;
};

static void *stream_main(void *arg)
{
	struct streamer *s = arg;
	s->rc = kvc_meta_watches_stream(s->w, s->c, s->fd);
	return NULL;
}

/* Stop the watches (every stream returns), join s and close both ends. */
static void stop_stream(struct streamer *s, struct kvc_meta_watches *w, int peer)
{
	kvc_meta_watches_stop(w);
	pthread_join(s->thread, NULL);
	close(peer);
	close(s->fd);
}

/* The next non-empty frame's events: count returned, names appended to
 * out (NUL-separated), kinds and ids to kinds/ids. */
static int next_events(int fd, uint32_t *flags, uint32_t *kinds, uint64_t *ids, char *names)
{
	static uint8_t body[1 << 16];
	for (;;) {
		struct kvc_wire_header h;
		cr_assert_eq(kvc_wire_recv(fd, &h, body, sizeof(body)), 0);
		cr_assert_eq(h.type, KVC_MSG_WATCH_EVENTS);
		const struct kvc_msg_watch_events *head = (const void *)body;
		if (head->count == 0 && !(head->flags & KVC_WATCH_LOST))
			continue; /* heartbeat */
		*flags = head->flags;
		uint32_t off = sizeof(*head);
		for (uint32_t i = 0; i < head->count; i++) {
			const struct kvc_msg_watch_event *e = (const void *)(body + off);
			kinds[i] = e->kind;
			ids[i] = e->id;
			off += sizeof(*e);
			memcpy(names, body + off, e->name_len);
			names[e->name_len] = '\0';
			names += e->name_len + 1;
			off += (e->name_len + 7) & ~7u;
		}
		cr_assert_eq(off, h.body_len);
		return (int)head->count;
	}
}

static void start_stream(struct streamer *s, struct kvc_meta_watches *w,
                         struct kvc_meta_watcher *c, int *peer)
{
	int fds[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	*s = (struct streamer){.w = w, .c = c, .fd = fds[0]};
	*peer = fds[1];
	cr_assert_eq(pthread_create(&s->thread, NULL, stream_main, s), 0);
}

Test(meta_watches, others_are_told_once_and_the_origin_never)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b;
	struct streamer s;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(1024, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	start_stream(&s, w, a, &peer);
	kvc_meta_watches_note(w, a, KVC_WATCH_NAME, 7, "key", 3);   /* a cached "absent" */
	kvc_meta_watches_note(w, b, KVC_WATCH_NAME, 7, "key", 3);
	kvc_meta_watches_note(w, a, KVC_WATCH_INODE, 42, NULL, 0);
	kvc_meta_watches_changed(w, a, KVC_WATCH_NAME, 7, "other", 5); /* nobody watches */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "key", 3);   /* b makes it */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "key", 3);   /* a was told already */
	kvc_meta_watches_changed(w, b, KVC_WATCH_INODE, 42, NULL, 0);
	uint32_t flags, kinds[8];
	uint64_t ids[8];
	char names[256];
	int n = next_events(peer, &flags, kinds, ids, names);
	if (n == 1) { /* the inode event may come in a second frame */
		uint32_t k2[8];
		uint64_t i2[8];
		cr_assert_eq(next_events(peer, &flags, k2, i2, names + 4), 1);
		kinds[1] = k2[0];
		ids[1] = i2[0];
		n = 2;
	}
	cr_assert_eq(n, 2);
	cr_assert_eq(kinds[0], KVC_WATCH_NAME);
	cr_assert_eq(ids[0], 7);
	cr_assert_str_eq(names, "key");
	cr_assert_eq(kinds[1], KVC_WATCH_INODE);
	cr_assert_eq(ids[1], 42);
	struct kvc_meta_watch_stats st;
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 2, "b is the origin of every change: b hears nothing");
	stop_stream(&s, w, peer);
	cr_assert_eq(s.rc, 0);
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_full_table_floods_rather_than_misses)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b;
	cr_assert_eq(kvc_meta_watches_create(64, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	char name[16];
	for (int i = 0; i < 200; i++) {
		int len = snprintf(name, sizeof(name), "k%d", i);
		kvc_meta_watches_note(w, a, KVC_WATCH_NAME, 1, name, (uint32_t)len);
	}
	struct kvc_meta_watch_stats st;
	kvc_meta_watches_stats(w, &st);
	cr_assert_leq(st.entries, 64);
	cr_assert_gt(st.floods, 0);
	/* k199 could not be noted: its change still reaches a. */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 1, "k199", 4);
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 1);
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, bad_binds_are_refused)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a;
	cr_assert_eq(kvc_meta_watches_create(64, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 0, &a), -EINVAL);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, KVC_META_WATCH_MAX_TTL_MS + 1, &a), -EINVAL);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_stream_ends_when_its_peer_goes)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a;
	struct streamer s;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(64, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 1000, &a), 0);
	start_stream(&s, w, a, &peer);
	close(peer);
	pthread_join(s.thread, NULL);
	cr_assert_lt(s.rc, 0);
	close(s.fd);
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_destroy(w);
}

/* a reads the store (begin), b changes the object and is told to nobody
 * (a has no watch yet), then a notes what it read: a must hear of b's
 * change, else a caches what it read, stale, for the ttl. Its own changes
 * in the window tell it nothing; another's before its own still do. */
Test(meta_watches, a_change_between_a_read_and_its_note_is_told)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b;
	struct kvc_meta_watch_stats st;
	cr_assert_eq(kvc_meta_watches_create(1024, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	uint64_t since = kvc_meta_watches_begin(w);            /* a's LOOKUP reads: absent */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "key", 3); /* b creates it */
	kvc_meta_watches_note_since(w, a, since, KVC_WATCH_NAME, 7, "key", 3);
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 1, "a's answer may predate b's create");
	since = kvc_meta_watches_begin(w);                     /* a's own SETATTR */
	kvc_meta_watches_changed(w, a, KVC_WATCH_INODE, 42, NULL, 0);
	kvc_meta_watches_note_since(w, a, since, KVC_WATCH_INODE, 42, NULL, 0);
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 1, "its own change is no news to a");
	since = kvc_meta_watches_begin(w);
	kvc_meta_watches_changed(w, b, KVC_WATCH_INODE, 43, NULL, 0); /* b, then a itself */
	kvc_meta_watches_changed(w, a, KVC_WATCH_INODE, 43, NULL, 0);
	kvc_meta_watches_note_since(w, a, since, KVC_WATCH_INODE, 43, NULL, 0);
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 2, "b's change in the window is still told");
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_client_back_within_its_ttl_gets_what_changed_meanwhile)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b;
	struct streamer s;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(1024, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	kvc_meta_watches_note(w, a, KVC_WATCH_NAME, 9, "later", 5);
	kvc_meta_watches_unbind(w, a); /* every connection of a closed */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 9, "later", 5);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0); /* a is back */
	start_stream(&s, w, a, &peer);
	uint32_t flags, kinds[8];
	uint64_t ids[8];
	char names[256];
	cr_assert_eq(next_events(peer, &flags, kinds, ids, names), 1);
	cr_assert_eq(ids[0], 9);
	cr_assert_str_eq(names, "later");
	stop_stream(&s, w, peer);
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_directory_watch_hears_every_name_and_lives_on)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b;
	struct streamer s;
	struct kvc_meta_watch_stats st;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(1024, 0, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	start_stream(&s, w, a, &peer);
	kvc_meta_watches_note(w, a, KVC_WATCH_DIR, 7, NULL, 0);      /* a keeps dir 7's names */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "k1", 2);  /* each one is told */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "k2", 2);  /* the watch lives on */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 8, "k3", 2);  /* another directory */
	kvc_meta_watches_changed(w, a, KVC_WATCH_NAME, 7, "k4", 2);  /* a's own */
	kvc_meta_watches_changed(w, b, KVC_WATCH_INODE, 7, NULL, 0); /* not a name */
	uint32_t flags, kinds[8];
	uint64_t ids[8];
	char names[256];
	int n = 0;
	while (n < 2) {
		int got = next_events(peer, &flags, kinds + n, ids + n, names + 3 * n);
		cr_assert_gt(got, 0);
		n += got;
	}
	cr_assert_eq(n, 2);
	cr_assert(kinds[0] == KVC_WATCH_NAME && ids[0] == 7 && strcmp(names, "k1") == 0);
	cr_assert(kinds[1] == KVC_WATCH_NAME && ids[1] == 7 && strcmp(names + 3, "k2") == 0);
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 2);
	/* A note that may have missed a change tells a to forget the names. */
	uint64_t since = kvc_meta_watches_begin(w);
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 9, "k5", 2);
	kvc_meta_watches_note_since(w, a, since, KVC_WATCH_DIR, 9, NULL, 0);
	n = next_events(peer, &flags, kinds, ids, names);
	cr_assert_eq(n, 1);
	cr_assert(kinds[0] == KVC_WATCH_DIR && ids[0] == 9);
	stop_stream(&s, w, peer);
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, after_a_start_every_change_reaches_every_client_even_one_that_comes_later)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b, *c;
	struct streamer s;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(1024, 10000, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 10000, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	/* Nobody noted anything (the notes were the old server's): a still
	 * hears of b's change, and c, back only after it, hears of it too. */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "key", 3);
	struct kvc_meta_watch_stats st;
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 1, "a is told, b (the origin) is not");
	cr_assert_eq(kvc_meta_watches_bind(w, id_c, 10000, &c), 0);
	start_stream(&s, w, c, &peer);
	uint32_t flags, kinds[8];
	uint64_t ids[8];
	char names[256];
	cr_assert_eq(next_events(peer, &flags, kinds, ids, names), 1);
	cr_assert_eq(flags & KVC_WATCH_LOST, 0);
	cr_assert_eq(kinds[0], KVC_WATCH_NAME);
	cr_assert_eq(ids[0], 7);
	cr_assert_str_eq(names, "key");
	/* A change after c came: c hears of it as well, unnoted. */
	kvc_meta_watches_changed(w, a, KVC_WATCH_INODE, 42, NULL, 0);
	cr_assert_eq(next_events(peer, &flags, kinds, ids, names), 1);
	cr_assert_eq(kinds[0], KVC_WATCH_INODE);
	cr_assert_eq(ids[0], 42);
	stop_stream(&s, w, peer);
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_unbind(w, c);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_start_log_that_overflowed_tells_a_late_client_events_were_lost)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *b, *c;
	struct streamer s;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(1024, 10000, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	char name[256];
	memset(name, 'n', sizeof(name));
	/* Each record is 24 bytes and 256 of name: past the 1 MiB bound. */
	for (int i = 0; i < 4000; i++) {
		int len = snprintf(name, sizeof(name), "%d", i);
		name[len] = 'n';
		kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, name, 255);
	}
	cr_assert_eq(kvc_meta_watches_bind(w, id_c, 10000, &c), 0);
	start_stream(&s, w, c, &peer);
	uint32_t flags, kinds[8];
	uint64_t ids[8];
	static char names[1 << 16];
	next_events(peer, &flags, kinds, ids, names);
	cr_assert(flags & KVC_WATCH_LOST, "a client that missed changes is told so");
	stop_stream(&s, w, peer);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_unbind(w, c);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_long_ttl_client_keeps_its_own_start_window_not_everyone_s)
{
	static const uint8_t id_long[16] = {9};
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *a, *b, *l;
	cr_assert_eq(kvc_meta_watches_create(1024, 1, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_a, 1, &a), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 1, &b), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_long, KVC_META_WATCH_MAX_TTL_MS, &l), 0);
	usleep((KVC_META_WATCH_MARGIN_MS + 100) * 1000); /* a's window (1 ms + margin) is over */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "key", 3);
	struct kvc_meta_watch_stats st;
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.events, 1, "the long-ttl client only, not a (it noted nothing)");
	kvc_meta_watches_unbind(w, a);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_unbind(w, l);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_client_back_after_an_unlogged_change_is_told_events_were_lost)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *b, *c;
	struct streamer s;
	int peer;
	cr_assert_eq(kvc_meta_watches_create(1024, 1, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 1, &b), 0);
	usleep((KVC_META_WATCH_MARGIN_MS + 100) * 1000); /* past the start log's window */
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "key", 3);
	/* A client caching for an hour comes back: the change is not in the
	 * log (it came after the log's window), so it is told it lost events. */
	cr_assert_eq(kvc_meta_watches_bind(w, id_c, KVC_META_WATCH_MAX_TTL_MS, &c), 0);
	start_stream(&s, w, c, &peer);
	uint32_t flags, kinds[8];
	uint64_t ids[8];
	char names[256];
	next_events(peer, &flags, kinds, ids, names);
	cr_assert(flags & KVC_WATCH_LOST);
	stop_stream(&s, w, peer);
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_unbind(w, c);
	kvc_meta_watches_destroy(w);
}

Test(meta_watches, a_large_replay_still_takes_more_events)
{
	struct kvc_meta_watches *w;
	struct kvc_meta_watcher *b, *c;
	cr_assert_eq(kvc_meta_watches_create(1024, 10000, &w), 0);
	cr_assert_eq(kvc_meta_watches_bind(w, id_b, 10000, &b), 0);
	char name[256];
	memset(name, 'n', sizeof(name));
	for (int i = 0; i < 2400; i++) { /* 672,000 bytes of log: no power of two */
		int len = snprintf(name, sizeof(name), "%d", i);
		name[len] = 'n';
		kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, name, 255);
	}
	cr_assert_eq(kvc_meta_watches_bind(w, id_c, 10000, &c), 0);
	kvc_meta_watches_changed(w, b, KVC_WATCH_NAME, 7, "one-more", 8);
	struct kvc_meta_watch_stats st;
	kvc_meta_watches_stats(w, &st);
	cr_assert_eq(st.dropped, 0, "the replayed queue grew to take it");
	kvc_meta_watches_unbind(w, b);
	kvc_meta_watches_unbind(w, c);
	kvc_meta_watches_destroy(w);
}
