/* dir_aliases: see dir_aliases.h. */
#define FUSE_USE_VERSION 312
#include "fuse/dir_aliases.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/wire.h"

#define SLOTS 4096 /* power of two; about 1.1 MiB */
#define QUEUE 256

struct name {
	uint64_t parent;
	uint16_t len;
	char bytes[KVC_WIRE_MAX_NAME + 1]; /* NUL-terminated (libfuse sends len + 1) */
};

struct slot {
	uint64_t ino; /* 0: empty */
	struct name name;
};

struct kvc_dir_aliases {
	struct fuse_session *const *session;
	pthread_t thread;
	pthread_mutex_t lock; /* everything below */
	pthread_cond_t work;
	bool stop;
	uint32_t head, count; /* the queue of old names to drop */
	struct name queue[QUEUE];
	struct slot slots[SLOTS];
	uint32_t hashes[SLOTS]; /* of each slot's name: a rename scans these */
	_Atomic uint64_t dropped;
};

static uint32_t slot_of(uint64_t ino)
{
	return (uint32_t)((ino * 0x9e3779b97f4a7c15ull) >> 52 & (SLOTS - 1));
}

/* FNV-1a of (parent, name); never 0 (an empty slot's). */
static uint32_t name_hash(uint64_t parent, const char *name, size_t len)
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 8; i++)
		h = (h ^ (uint8_t)(parent >> (8 * i))) * 16777619u;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 16777619u;
	return h ? h : 1;
}

static void set_name(struct name *n, uint64_t parent, const char *name, size_t len)
{
	n->parent = parent;
	n->len = (uint16_t)len;
	memcpy(n->bytes, name, len);
	n->bytes[len] = '\0';
}

/* Whether n is name in parent. */
static bool name_is(const struct name *n, uint64_t parent, const char *name, size_t len)
{
	return n->parent == parent && n->len == len && memcmp(n->bytes, name, len) == 0;
}

/* Slot i noted nothing any more (a->lock held). */
static void clear_slot(struct kvc_dir_aliases *a, uint32_t i)
{
	a->slots[i].ino = 0;
	a->hashes[i] = 0;
}

/* Queue name to be dropped from the kernel (a->lock held). */
static void queue_drop(struct kvc_dir_aliases *a, const struct name *name)
{
	if (a->count == QUEUE) { /* full: the oldest goes */
		a->head = (a->head + 1) % QUEUE;
		a->count--;
	}
	a->queue[(a->head + a->count++) % QUEUE] = *name;
	pthread_cond_signal(&a->work);
}

static void *drop_main(void *arg)
{
	struct kvc_dir_aliases *a = arg;
	pthread_mutex_lock(&a->lock);
	for (;;) {
		while (!a->stop && a->count == 0)
			pthread_cond_wait(&a->work, &a->lock);
		if (a->stop)
			break;
		struct name old = a->queue[a->head];
		a->head = (a->head + 1) % QUEUE;
		a->count--;
		pthread_mutex_unlock(&a->lock);
		struct fuse_session *se = *a->session;
		/* Waits for the parent's lock: a rename holding it ends first.
		 * Not once the session ended (nobody answers the kernel then). */
		if (se && !fuse_session_exited(se))
			fuse_lowlevel_notify_inval_entry(se, old.parent, old.bytes, old.len);
		atomic_fetch_add(&a->dropped, 1);
		pthread_mutex_lock(&a->lock);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

int kvc_dir_aliases_start(struct fuse_session *const *session, struct kvc_dir_aliases **out)
{
	struct kvc_dir_aliases *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->session = session;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->work, NULL);
	int rc = pthread_create(&a->thread, NULL, drop_main, a);
	if (rc) {
		pthread_cond_destroy(&a->work);
		pthread_mutex_destroy(&a->lock);
		free(a);
		return -rc;
	}
	*out = a;
	return 0;
}

void kvc_dir_aliases_stop(struct kvc_dir_aliases *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stop = true;
	pthread_cond_signal(&a->work);
	pthread_mutex_unlock(&a->lock);
	/* A drop may wait in the kernel for a parent that an operation holds
	 * while it waits for an answer nobody reads now: give the thread 2 s,
	 * then leave it (and the table it uses) to the process's exit, so the
	 * unmount that ends such waits is not held up. */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(a->thread, NULL, &until) != 0) {
		pthread_detach(a->thread);
		return;
	}
	pthread_cond_destroy(&a->work);
	pthread_mutex_destroy(&a->lock);
	free(a);
}

void kvc_dir_aliases_note(struct kvc_dir_aliases *a, uint64_t ino, uint64_t parent,
                          const char *name, size_t len)
{
	if (!a || ino == 0 || len == 0 || len > KVC_WIRE_MAX_NAME)
		return;
	uint32_t i = slot_of(ino);
	struct slot *s = &a->slots[i];
	pthread_mutex_lock(&a->lock);
	if (s->ino == ino && !name_is(&s->name, parent, name, len)) /* moved */
		queue_drop(a, &s->name);
	s->ino = ino;
	set_name(&s->name, parent, name, len);
	a->hashes[i] = name_hash(parent, name, len);
	pthread_mutex_unlock(&a->lock);
}

void kvc_dir_aliases_renamed(struct kvc_dir_aliases *a, uint64_t parent, const char *name,
                             size_t len, uint64_t new_parent, const char *new_name,
                             size_t new_len)
{
	if (!a || len == 0 || len > KVC_WIRE_MAX_NAME || new_len == 0 ||
	    new_len > KVC_WIRE_MAX_NAME)
		return;
	/* By name, not number (a rename answers no inode): the names'
	 * hashes (16 KiB) first, a slot only where one matches. */
	uint32_t h = name_hash(parent, name, len);
	pthread_mutex_lock(&a->lock);
	for (uint32_t i = 0; i < SLOTS; i++) {
		struct name *n = &a->slots[i].name;
		if (a->hashes[i] == h && a->slots[i].ino && name_is(n, parent, name, len)) {
			set_name(n, new_parent, new_name, new_len);
			a->hashes[i] = name_hash(new_parent, new_name, new_len);
		}
	}
	pthread_mutex_unlock(&a->lock);
}

uint64_t kvc_dir_aliases_dropped(struct kvc_dir_aliases *a)
{
	return a ? atomic_load(&a->dropped) : 0;
}

void kvc_dir_aliases_forget(struct kvc_dir_aliases *a, uint64_t ino)
{
	if (!a || ino == 0)
		return;
	uint32_t i = slot_of(ino);
	pthread_mutex_lock(&a->lock);
	if (a->slots[i].ino == ino)
		clear_slot(a, i);
	pthread_mutex_unlock(&a->lock);
}

int kvc_dir_aliases_list(struct kvc_dir_aliases *a, uint32_t *cursor,
                         struct kvc_dir_alias *out, int max)
{
	int n = 0;
	if (!a) {
		*cursor = 0;
		return 0;
	}
	uint32_t i = *cursor < SLOTS ? *cursor : 0;
	pthread_mutex_lock(&a->lock);
	for (; i < SLOTS && n < max; i++) {
		const struct slot *s = &a->slots[i];
		if (!s->ino)
			continue;
		out[n].ino = s->ino;
		out[n].parent = s->name.parent;
		out[n].len = s->name.len;
		memcpy(out[n].name, s->name.bytes, (size_t)s->name.len + 1);
		n++;
	}
	pthread_mutex_unlock(&a->lock);
	*cursor = i < SLOTS ? i : 0;
	return n;
}

void kvc_dir_aliases_drop(struct kvc_dir_aliases *a, const struct kvc_dir_alias *alias,
                          uint64_t now_ino)
{
	if (!a || alias->len == 0 || alias->len > KVC_WIRE_MAX_NAME)
		return;
	uint32_t i = slot_of(alias->ino);
	struct slot *s = &a->slots[i];
	pthread_mutex_lock(&a->lock);
	/* Only the name as listed: a lookup or rename since noted a newer one. */
	if (s->ino == alias->ino && name_is(&s->name, alias->parent, alias->name, alias->len)) {
		/* The directory now under the name was given to the kernel
		 * under it (noted): that entry is right, and stays. */
		const struct slot *now = &a->slots[slot_of(now_ino)];
		if (!now_ino || now_ino == alias->ino || now->ino != now_ino ||
		    !name_is(&now->name, alias->parent, alias->name, alias->len))
			queue_drop(a, &s->name);
		clear_slot(a, i);
	}
	pthread_mutex_unlock(&a->lock);
}
