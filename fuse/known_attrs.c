/* known_attrs: see known_attrs.h. */
#include "fuse/known_attrs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

#define SLOTS 8192 /* power of two; 640 KiB */

struct kvc_known_attrs {
	pthread_mutex_t lock;
	struct kvc_attr slots[SLOTS]; /* ino 0: empty */
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

static struct kvc_attr *slot_of(struct kvc_known_attrs *t, uint64_t ino)
{
	return &t->slots[(ino * 0x9e3779b97f4a7c15ull) >> 51 & (SLOTS - 1)];
}

void kvc_known_attrs_note(struct kvc_known_attrs *table, const struct kvc_attr *attr)
{
	if (!table || attr->ino == 0 || S_ISREG(attr->mode))
		return;
	pthread_mutex_lock(&table->lock);
	struct kvc_attr *s = slot_of(table, attr->ino);
	/* Not over a newer answer about the same inode (ctime orders them) */
	if (s->ino != attr->ino || attr->ctime_ns >= s->ctime_ns)
		*s = *attr;
	pthread_mutex_unlock(&table->lock);
}

bool kvc_known_attrs_gone(struct kvc_known_attrs *table, uint64_t ino, struct kvc_attr *out)
{
	bool found = false;
	if (!table || ino == 0)
		return false;
	pthread_mutex_lock(&table->lock);
	struct kvc_attr *s = slot_of(table, ino);
	if (s->ino == ino) {
		*out = *s;
		out->nlink = 0;
		found = true;
	}
	pthread_mutex_unlock(&table->lock);
	return found;
}
