/* inode_table: see inode_table.h. */
#include "fuse/inode_table.h"

#include <errno.h>
#include <stdlib.h>

#define BUCKETS 4096

struct entry {
	struct entry *next;
	uint64_t ino;
	struct kvc_layout layout;
	uint64_t size;           /* what this daemon knows */
	uint64_t committed_size; /* what kvc-meta has */
	uint64_t written_end;    /* end of the writes since the last commit */
	uint32_t open_count;
	bool stale;              /* gone in kvc-meta while we were cut off */
	bool changed;            /* by another client (an event) since we learnt the size */
	uint64_t changed_seq;    /* the event's sequence */
	uint64_t learnt_seq;     /* when size became kvc-meta's (kvc_inode_table_learnt) */
	uint32_t doubt;          /* opens, commits, truncates not learnt yet */
	uint32_t committing;     /* sizes taken (take_dirty) and not settled yet */
	int64_t seen_mtime_ns;   /* kvc_inode_table_saw: what the kernel's pages are of */
	uint64_t seen_size;
};

struct kvc_inode_table {
	pthread_mutex_t lock;
	pthread_cond_t settled; /* a commit settled (kvc_inode_table_wait_commits) */
	struct entry *buckets[BUCKETS];
};

static struct entry **slot(struct kvc_inode_table *t, uint64_t ino)
{
	struct entry **p = &t->buckets[(ino * 0x9e3779b97f4a7c15ull) >> 52];
	while (*p && (*p)->ino != ino)
		p = &(*p)->next;
	return p;
}

/* Whether kvc-meta is to hear of e's size: it grew here, or writes
 * happened since the last commit (their end must be inside kvc-meta's
 * size even where this daemon's size already was: another client may have
 * shrunk the file meanwhile, and bytes beyond the size are never seen). */
static bool dirty(const struct entry *e)
{
	return e->size > e->committed_size || e->written_end > 0;
}

/* Whether e's size may be ahead of kvc-meta's: dirty, or a commit of it
 * in flight (taken: dirty() no longer says so until it is settled). */
static bool busy(const struct entry *e)
{
	return dirty(e) || e->committing > 0;
}

static void drop_if_unused(struct entry **p)
{
	struct entry *e = *p;
	if (e && e->open_count == 0 && !busy(e)) {
		*p = e->next;
		free(e);
	}
}

int kvc_inode_table_create(struct kvc_inode_table **out)
{
	struct kvc_inode_table *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->settled, NULL);
	*out = t;
	return 0;
}

void kvc_inode_table_destroy(struct kvc_inode_table *t)
{
	if (!t)
		return;
	for (int i = 0; i < BUCKETS; i++) {
		while (t->buckets[i]) {
			struct entry *e = t->buckets[i];
			t->buckets[i] = e->next;
			free(e);
		}
	}
	pthread_cond_destroy(&t->settled);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

int kvc_inode_table_open(struct kvc_inode_table *t, const struct kvc_attr *attr)
{
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, attr->ino);
	if (!*p) {
		struct entry *e = calloc(1, sizeof(*e));
		if (!e) {
			rc = -ENOMEM;
			goto out;
		}
		e->ino = attr->ino;
		e->size = e->committed_size = attr->size;
		*p = e;
	} else if (!busy(*p)) {
		/* Clean: take kvc-meta's word (another client may have grown it). */
		(*p)->size = (*p)->committed_size = attr->size;
		(*p)->changed = false;
	}
	(*p)->doubt++; /* until kvc_inode_table_learnt */
	(*p)->layout = attr->layout;
	(*p)->open_count++;
	/* the open kept the pages only when they are of this (file_ops.c) */
	(*p)->seen_mtime_ns = attr->mtime_ns;
	(*p)->seen_size = attr->size;
out:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

bool kvc_inode_table_saw(struct kvc_inode_table *t, const struct kvc_attr *attr)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, attr->ino);
	bool same = !e || (e->seen_mtime_ns == attr->mtime_ns && e->seen_size == attr->size);
	if (e) {
		e->seen_mtime_ns = attr->mtime_ns;
		e->seen_size = attr->size;
	}
	pthread_mutex_unlock(&t->lock);
	return same;
}

void kvc_inode_table_release(struct kvc_inode_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, ino);
	if (*p && (*p)->open_count > 0)
		(*p)->open_count--;
	drop_if_unused(p);
	pthread_mutex_unlock(&t->lock);
}

bool kvc_inode_table_is_open(struct kvc_inode_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	bool open = e && e->open_count > 0;
	pthread_mutex_unlock(&t->lock);
	return open;
}

int kvc_inode_table_get(struct kvc_inode_table *t, uint64_t ino, struct kvc_layout *layout,
                        uint64_t *size)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	if (e && e->stale) {
		rc = -ESTALE;
	} else if (e) {
		*layout = e->layout;
		*size = e->size;
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void kvc_inode_table_mark_stale(struct kvc_inode_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	if (e) {
		e->stale = true;
		e->size = e->committed_size; /* nothing left to commit */
		e->written_end = 0;
	}
	pthread_mutex_unlock(&t->lock);
}

int kvc_inode_table_list_open(struct kvc_inode_table *t, uint64_t *inos, int max)
{
	int count = 0;
	pthread_mutex_lock(&t->lock);
	for (int b = 0; b < BUCKETS; b++)
		for (struct entry *e = t->buckets[b]; e && count < max; e = e->next)
			if (e->open_count > 0 && !e->stale)
				inos[count++] = e->ino;
	pthread_mutex_unlock(&t->lock);
	return count;
}

void kvc_inode_table_wrote(struct kvc_inode_table *t, uint64_t ino, uint64_t end)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	if (e && end > e->size)
		e->size = end;
	if (e && end > e->written_end)
		e->written_end = end;
	pthread_mutex_unlock(&t->lock);
}

void kvc_inode_table_set_size(struct kvc_inode_table *t, uint64_t ino, uint64_t size)
{
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, ino);
	if (*p) {
		(*p)->size = (*p)->committed_size = size;
		(*p)->changed = false;
		(*p)->doubt++; /* until kvc_inode_table_learnt */
		drop_if_unused(p);
	}
	pthread_mutex_unlock(&t->lock);
}

void kvc_inode_table_patch_attr(struct kvc_inode_table *t, struct kvc_attr *attr,
                                uint64_t since)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, attr->ino);
	if (e && !busy(e) && e->doubt == 0 && since && since >= e->learnt_seq &&
	    (!e->changed || since >= e->changed_seq)) {
		e->size = e->committed_size = attr->size; /* asked for after the change */
		e->changed = false;
	} else if (e && e->size > attr->size) {
		attr->size = e->size;
	}
	pthread_mutex_unlock(&t->lock);
}

void kvc_inode_table_wait_commits(struct kvc_inode_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e;
	/* The entry cannot go while a commit is in flight (busy), and once
	 * none is, the loop ends: no dangling pointer across the wait. */
	while ((e = *slot(t, ino)) && e->committing > 0)
		pthread_cond_wait(&t->settled, &t->lock);
	pthread_mutex_unlock(&t->lock);
}

void kvc_inode_table_learnt(struct kvc_inode_table *t, uint64_t ino, uint64_t seq)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	if (e && seq > e->learnt_seq)
		e->learnt_seq = seq;
	if (e && e->doubt > 0)
		e->doubt--;
	pthread_mutex_unlock(&t->lock);
}

void kvc_inode_table_changed(struct kvc_inode_table *t, uint64_t ino, uint64_t seq)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	if (e) {
		e->changed = true;
		e->changed_seq = seq;
	}
	pthread_mutex_unlock(&t->lock);
}

bool kvc_inode_table_changed_since(struct kvc_inode_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	bool doubt = e && e->changed && !busy(e);
	pthread_mutex_unlock(&t->lock);
	return doubt;
}

int kvc_inode_table_take_dirty(struct kvc_inode_table *t, uint64_t ino, uint64_t *size)
{
	int taken = 0;
	pthread_mutex_lock(&t->lock);
	struct entry *e = *slot(t, ino);
	if (e && dirty(e)) {
		*size = e->size > e->committed_size ? e->size : e->written_end;
		e->written_end = 0; /* taken: the caller marks it again if it fails */
		e->committing++;    /* until committed or kvc_inode_table_commit_failed */
		taken = 1;
	}
	pthread_mutex_unlock(&t->lock);
	return taken;
}

void kvc_inode_table_committed(struct kvc_inode_table *t, uint64_t ino, uint64_t size)
{
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, ino);
	if (*p && size > (*p)->committed_size)
		(*p)->committed_size = size;
	if (*p && size > (*p)->size)
		(*p)->size = size; /* kvc-meta's is at least that now */
	if (*p) {
		(*p)->changed = false;
		(*p)->doubt++; /* until kvc_inode_table_learnt */
		if ((*p)->committing > 0)
			(*p)->committing--;
	}
	pthread_cond_broadcast(&t->settled);
	drop_if_unused(p);
	pthread_mutex_unlock(&t->lock);
}

void kvc_inode_table_commit_failed(struct kvc_inode_table *t, uint64_t ino)
{
	pthread_mutex_lock(&t->lock);
	struct entry **p = slot(t, ino);
	if (*p && (*p)->committing > 0)
		(*p)->committing--;
	pthread_cond_broadcast(&t->settled);
	drop_if_unused(p);
	pthread_mutex_unlock(&t->lock);
}

int kvc_inode_table_list_dirty(struct kvc_inode_table *t, uint64_t *inos, int max)
{
	int count = 0;
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < BUCKETS && count < max; i++)
		for (struct entry *e = t->buckets[i]; e && count < max; e = e->next)
			if (dirty(e))
				inos[count++] = e->ino;
	pthread_mutex_unlock(&t->lock);
	return count;
}
