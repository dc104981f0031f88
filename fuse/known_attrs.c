/* known_attrs: see known_attrs.h. */
#include "fuse/known_attrs.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>

#define SLOTS 8192 /* power of two; 704 KiB */

/* ino is written under the lock, and read without it only as a hint by
 * kvc_known_attrs_note for regular files (the hot path: most entries). */
struct slot {
	_Atomic uint64_t ino; /* 0: empty */
	struct kvc_attr attr;
};

struct kvc_known_attrs {
	pthread_mutex_t lock;
	struct slot slots[SLOTS];
};

int kvc_known_attrs_create(struct kvc_known_attrs **out)
{
	struct kvc_known_attrs *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

void kvc_known_attrs_destroy(struct kvc_known_attrs *table)
{
	if (!table)
		return;
	pthread_mutex_destroy(&table->lock);
	free(table);
}

static struct slot *slot_of(struct kvc_known_attrs *t, uint64_t ino)
{
	return &t->slots[(ino * 0x9e3779b97f4a7c15ull) >> 51 & (SLOTS - 1)];
}

void kvc_known_attrs_note(struct kvc_known_attrs *table, const struct kvc_attr *attr)
{
	if (!table || attr->ino == 0)
		return;
	struct slot *s = slot_of(table, attr->ino);
	bool file = S_ISREG(attr->mode);
	/* A regular file: not kept, but a slot that holds its number as
	 * another type goes (a number kvc-meta handed out again after a crash
	 * of its host: known_attrs.h). Most entries are files that no slot
	 * names: no lock for them. */
	if (file && atomic_load_explicit(&s->ino, memory_order_relaxed) != attr->ino)
		return;
	pthread_mutex_lock(&table->lock);
	uint64_t held = atomic_load_explicit(&s->ino, memory_order_relaxed);
	if (file) {
		if (held == attr->ino)
			atomic_store_explicit(&s->ino, 0, memory_order_relaxed);
	} else if (held != attr->ino || attr->ctime_ns >= s->attr.ctime_ns) {
		s->attr = *attr; /* not over a newer answer of the same inode (ctime) */
		atomic_store_explicit(&s->ino, attr->ino, memory_order_relaxed);
	}
	pthread_mutex_unlock(&table->lock);
}

bool kvc_known_attrs_gone(struct kvc_known_attrs *table, uint64_t ino, struct kvc_attr *out)
{
	bool found = false;
	if (!table || ino == 0)
		return false;
	pthread_mutex_lock(&table->lock);
	struct slot *s = slot_of(table, ino);
	if (atomic_load_explicit(&s->ino, memory_order_relaxed) == ino) {
		*out = s->attr;
		out->nlink = 0;
		found = true;
	}
	pthread_mutex_unlock(&table->lock);
	return found;
}
