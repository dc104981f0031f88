/* meta_events: see meta_events.h. */
#include "fuse/meta_events.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/net.h"
#include "core/wire.h"
#include "fuse/operations.h"
#include "fuse/ring_keys.h"

#define RECENT_SLOTS 4096          /* power of two */
#define SILENT_STREAM_MS 5000      /* kvc-meta beats every second */
#define RETRY_MS 200
#define SHORT_TTL 1.0              /* seconds, with no stream */

struct kvc_meta_events {
	struct kvc_fuse *fs;
	pthread_t thread;
	atomic_bool stopping;
	atomic_int fd; /* the stream's, -1 between streams (stop shuts it down) */
	/* gen is odd while the stream is up; it moves at every change. */
	_Atomic uint64_t seq, gen;
	_Atomic uint64_t applied; /* events whose drops are done (the metric) */
	_Atomic uint64_t drops;   /* every cached name dropped at once (forget_names) */
	atomic_bool drop_refused; /* the kernel cannot: said once */
	bool streamed;            /* a stream was up before (stream thread only) */
	_Atomic uint64_t recent[RECENT_SLOTS]; /* seq of the last event per slot */
};

static uint32_t slot_of(uint32_t kind, uint64_t id, const char *name, uint32_t len)
{
	return (uint32_t)kvc_wire_watch_hash(kind, id, name, len) & (RECENT_SLOTS - 1);
}

struct kvc_meta_events_mark kvc_meta_events_mark(struct kvc_meta_events *ev)
{
	struct kvc_meta_events_mark m = {0, 0};
	if (ev) {
		m.gen = atomic_load(&ev->gen);
		m.seq = atomic_load(&ev->seq);
	}
	return m;
}

/* A slot of the recent table only ever rises: two changes hashed to one
 * slot may store out of order. */
static void recent_raise(_Atomic uint64_t *slot, uint64_t seq)
{
	uint64_t held = atomic_load(slot);
	while (held < seq && !atomic_compare_exchange_weak(slot, &held, seq))
		;
}

double kvc_meta_events_ttl(struct kvc_meta_events *ev, struct kvc_meta_events_mark mark,
                           uint64_t parent, const char *name, uint64_t ino)
{
	if (!ev)
		return SHORT_TTL;
	/* A change since the mark (told, or made here) whether or not the
	 * stream is up now. */
	if (name && atomic_load(&ev->recent[slot_of(KVC_WATCH_NAME, parent, name,
	                                              (uint32_t)strlen(name))]) > mark.seq)
		return 0;
	if (ino && atomic_load(&ev->recent[slot_of(KVC_WATCH_INODE, ino, NULL, 0)]) > mark.seq)
		return 0;
	if (!(mark.gen & 1) || atomic_load(&ev->gen) != mark.gen)
		return SHORT_TTL;
	return ev->fs->config.cache_ttl_ms / 1000.0;
}

uint64_t kvc_meta_events_tick(struct kvc_meta_events *ev)
{
	return ev ? atomic_fetch_add(&ev->seq, 1) + 1 : 0;
}

void kvc_meta_events_changed_here(struct kvc_meta_events *ev, uint64_t ino)
{
	if (!ev)
		return;
	uint64_t seq = atomic_fetch_add(&ev->seq, 1) + 1;
	recent_raise(&ev->recent[slot_of(KVC_WATCH_INODE, ino, NULL, 0)], seq);
}

/* Another client changed inode ino (an event's seq): a file open here
 * may have shrunk (its size is in doubt), and the kernel's attributes and
 * pages of it go. */
static void inode_changed(struct kvc_meta_events *ev, uint64_t ino, uint64_t seq)
{
	kvc_inode_table_changed(ev->fs->inodes, ino, seq);
	if (ev->fs->session)
		fuse_lowlevel_notify_inval_inode(ev->fs->session, ino, 0, 0);
}

void kvc_meta_events_inode_changed(struct kvc_meta_events *ev, uint64_t ino)
{
	if (!ev)
		return;
	uint64_t seq = atomic_fetch_add(&ev->seq, 1) + 1;
	recent_raise(&ev->recent[slot_of(KVC_WATCH_INODE, ino, NULL, 0)], seq);
	inode_changed(ev, ino, seq);
}

/* FUSE_NOTIFY_INC_EPOCH (Linux 6.16, FUSE 7.44; libfuse 3.14 has no call
 * for it): every name the kernel caches for the mount is looked up again
 * at its next use. */
#define NOTIFY_INC_EPOCH 8

/* Drop every name the kernel caches, when this client may have missed
 * changes: kvc-meta said some events were lost, or the stream was down
 * (kvc-meta may have restarted, and what it had not sent yet died with
 * it; docs/architecture.md). Attributes come fresh with each lookup. */
static void forget_names(struct kvc_meta_events *ev, const char *why)
{
	struct fuse_session *se = ev->fs->session;
	struct {
		uint32_t len;
		int32_t error; /* the notification's code */
		uint64_t unique; /* 0: a notification */
	} head = {sizeof(head), NOTIFY_INC_EPOCH, 0};
	if (!se)
		return;
	if (write(fuse_session_fd(se), &head, sizeof(head)) == (ssize_t)sizeof(head)) {
		atomic_fetch_add(&ev->drops, 1);
		kvc_log_info("dropped every cached name (%s)", why);
	} else if (!atomic_exchange(&ev->drop_refused, true)) {
		kvc_log_warn("the kernel cannot drop every cached name at once (%s; Linux 6.16 "
		             "can): after %s, names may stay stale for up to %u ms",
		             strerror(errno), why, ev->fs->config.cache_ttl_ms);
	}
}

/* One event: remember it, then drop what the kernel caches of it. */
static void apply(struct kvc_meta_events *ev, const struct kvc_msg_watch_event *e,
                  const char *name)
{
	struct fuse_session *se = ev->fs->session;
	uint32_t len = e->kind == KVC_WATCH_NAME ? e->name_len : 0;
	uint64_t seq = atomic_fetch_add(&ev->seq, 1) + 1;
	recent_raise(&ev->recent[slot_of(e->kind, e->id, name, len)], seq);
	if (e->kind == KVC_WATCH_NAME) {
		/* Known to the directory's names before the kernel looks again. */
		kvc_dir_names_heard(ev->fs->dir_names, e->id, name, len);
		if (se)
			fuse_lowlevel_notify_inval_entry(se, e->id, name, len);
		kvc_ring_keys_notify(ev->fs, e->id, name, len);
	} else if (e->kind == KVC_WATCH_DIR) {
		kvc_dir_names_forget(ev->fs->dir_names, e->id);
	} else {
		inode_changed(ev, e->id, seq);
	}
	atomic_fetch_add(&ev->applied, 1);
}

/* A WATCH_EVENTS body from kvc-meta, checked record by record. */
static int apply_frame(struct kvc_meta_events *ev, const uint8_t *body, uint32_t len)
{
	uint32_t off = 0;
	const struct kvc_msg_watch_events *head = kvc_wire_body_take(body, len, &off,
	                                                             sizeof(*head));
	if (!head)
		return -EBADMSG;
	if (head->flags & KVC_WATCH_LOST) {
		/* Some changes were not told: answers from now on are fresh,
		 * but what the kernel holds may be stale for up to the ttl. */
		atomic_fetch_add(&ev->gen, 2);
		kvc_log_warn("kvc-meta dropped change events for this client: cached attributes "
		             "may be stale for up to %u ms", ev->fs->config.cache_ttl_ms);
		forget_names(ev, "events lost");
	}
	for (uint32_t i = 0; i < head->count; i++) {
		const struct kvc_msg_watch_event *e = kvc_wire_body_take(body, len, &off, sizeof(*e));
		if (!e || (e->kind != KVC_WATCH_NAME && e->kind != KVC_WATCH_INODE &&
		           e->kind != KVC_WATCH_DIR) ||
		    (e->kind != KVC_WATCH_NAME && e->name_len != 0))
			return -EBADMSG;
		uint32_t name_len = e->kind == KVC_WATCH_NAME ? e->name_len : 0;
		const char *name = kvc_wire_body_take(body, len, &off, (name_len + 7) & ~7u);
		if (!name || (e->kind == KVC_WATCH_NAME && kvc_wire_name_check(name, name_len) < 0))
			return -EBADMSG;
		apply(ev, e, name);
	}
	return off == len ? 0 : -EBADMSG;
}

/* One stream: WATCH, then events until it breaks. */
static int stream(struct kvc_meta_events *ev, uint8_t *body)
{
	struct kvc_fuse *fs = ev->fs;
	bool reused;
	int fd = kvc_rpc_pool_get(&fs->meta.pool, &reused);
	if (fd < 0)
		return fd;
	struct kvc_msg_client_hello m = {.ttl_ms = fs->config.cache_ttl_ms};
	memcpy(m.client, fs->client_id, sizeof(m.client));
	struct kvc_wire_header h;
	uint64_t id = kvc_rpc_next_id(&fs->meta.pool);
	kvc_wire_header_init(&h, KVC_MSG_WATCH, id, 0, sizeof(m), 0);
	int rc = kvc_wire_send(fd, &h, &m, NULL, 0);
	if (rc == 0)
		rc = kvc_wire_recv(fd, &h, body, KVC_WIRE_MAX_BODY);
	if (rc == 0 && (h.type != KVC_MSG_WATCH || h.request_id != id || h.body_len || h.data_len))
		rc = -EBADMSG;
	if (rc == 0 && h.status)
		rc = h.status < 0 ? h.status : -EBADMSG;
	if (rc == 0)
		rc = kvc_net_set_timeout(fd, SILENT_STREAM_MS);
	if (rc == 0) {
		atomic_store(&ev->fd, fd);
		atomic_fetch_add(&ev->gen, 1); /* odd: up */
		if (atomic_load(&ev->stopping))
			shutdown(fd, SHUT_RDWR);
		if (ev->streamed) /* back after a gap: changes may have gone untold */
			forget_names(ev, "the change-event stream came back");
		ev->streamed = true;
	}
	while (rc == 0 && !atomic_load(&ev->stopping)) {
		rc = kvc_wire_recv(fd, &h, body, KVC_WIRE_MAX_BODY);
		if (rc == 0 && (h.type != KVC_MSG_WATCH_EVENTS || h.data_len))
			rc = -EBADMSG;
		if (rc == 0)
			rc = apply_frame(ev, body, h.body_len);
	}
	if (atomic_exchange(&ev->fd, -1) == fd)
		atomic_fetch_add(&ev->gen, 1); /* even: down */
	close(fd);
	return rc;
}

static void *stream_main(void *arg)
{
	struct kvc_meta_events *ev = arg;
	uint8_t *body = malloc(KVC_WIRE_MAX_BODY);
	int last = 0;
	while (body && !atomic_load(&ev->stopping)) {
		int rc = stream(ev, body);
		if (rc != last && !atomic_load(&ev->stopping))
			kvc_log_warn("kvc-meta's change events: %s; names and attributes are cached "
			             "for 1 s until they come back", strerror(-rc));
		last = rc;
		if (!atomic_load(&ev->stopping))
			usleep(RETRY_MS * 1000);
	}
	free(body);
	return NULL;
}

int kvc_meta_events_start(struct kvc_fuse *fs, struct kvc_meta_events **out)
{
	struct kvc_meta_events *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->fs = fs;
	atomic_init(&ev->fd, -1);
	int rc = -pthread_create(&ev->thread, NULL, stream_main, ev);
	if (rc < 0) {
		free(ev);
		return rc;
	}
	*out = ev;
	return 0;
}

void kvc_meta_events_stop(struct kvc_meta_events *ev)
{
	if (!ev)
		return;
	atomic_store(&ev->stopping, true);
	int fd = atomic_load(&ev->fd);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
	pthread_join(ev->thread, NULL);
	free(ev);
}

bool kvc_meta_events_up(struct kvc_meta_events *ev)
{
	return ev && (atomic_load(&ev->gen) & 1) != 0;
}

uint64_t kvc_meta_events_received(struct kvc_meta_events *ev)
{
	return ev ? atomic_load(&ev->applied) : 0;
}

uint64_t kvc_meta_events_name_drops(struct kvc_meta_events *ev)
{
	return ev ? atomic_load(&ev->drops) : 0;
}
