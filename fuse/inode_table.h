/*
 * inode_table: kvc-fuse's in-memory state for files that are open: their
 * layout (so I/O needs no metadata round trip) and their size as this
 * daemon knows it. A write that ends past the size kvc-meta has recorded
 * raises `size` and marks it dirty; the dirty size is sent to kvc-meta at
 * flush, fsync and release, and by a background pass every second, so
 * other clients see it soon and exactly after close. Every write also
 * marks its end (written_end), sent likewise even when this daemon's size
 * covers it: another client may have shrunk the file since this one
 * learnt its size, and kvc-meta's size must come to cover every byte
 * written after a shrink (bytes beyond the size must never show up when
 * the file grows again).
 *
 * A clean entry takes kvc-meta's size from an answer asked for after it
 * learnt its own (open, commit, truncate, each followed by
 * kvc_inode_table_learnt; until then it only raises), down as well as up:
 * another client may have shrunk the file. A commit in flight (taken,
 * not settled) counts as dirty. Another client's
 * change (an event from kvc-meta) marks a clean entry changed: only an
 * answer asked for after that event counts, and until one came reads ask
 * kvc-meta first (kvc_inode_table_changed_since). A dirty entry keeps
 * raising what kvc-meta says to its own size.
 *
 * An entry lives while the file has open handles or a dirty size. A file
 * kvc-meta lost while this client was cut off is marked stale: its I/O
 * fails with ESTALE.
 * Thread-safe: one mutex guards the table and every entry's fields.
 */
#ifndef KVC_FUSE_INODE_TABLE_H
#define KVC_FUSE_INODE_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

struct kvc_inode_table;

int kvc_inode_table_create(struct kvc_inode_table **out);
void kvc_inode_table_destroy(struct kvc_inode_table *table);

/* Record an open of a file with the attributes kvc-meta returned. */
int kvc_inode_table_open(struct kvc_inode_table *table, const struct kvc_attr *attr);
/* Record a release; the entry goes when unused and clean. */
void kvc_inode_table_release(struct kvc_inode_table *table, uint64_t ino);

/* kvc-meta answered attr about an open file (our commit or truncate, a
 * check of open files; an open sets it too): returns whether its (mtime,
 * size) is the one last seen, the one the kernel's pages are of, and
 * takes it as the new one. true for a file not in the table. */
bool kvc_inode_table_saw(struct kvc_inode_table *table, const struct kvc_attr *attr);

/* Whether a file has open handles here. */
bool kvc_inode_table_is_open(struct kvc_inode_table *table, uint64_t ino);


/* Layout and known size of an open file. Returns 0, -ENOENT, or -ESTALE
 * (the file is gone: see mark_stale). */
int kvc_inode_table_get(struct kvc_inode_table *table, uint64_t ino,
                        struct kvc_layout *layout, uint64_t *size);

/* The file went away in kvc-meta while this client was cut off (its open
 * session dropped): its I/O fails with ESTALE from now on, never reading
 * holes where its bytes were. */
void kvc_inode_table_mark_stale(struct kvc_inode_table *table, uint64_t ino);

/* Up to max inodes open here (not stale). */
int kvc_inode_table_list_open(struct kvc_inode_table *table, uint64_t *inos, int max);

/* A write ended at `end`: raise the size, and mark the end to be sent
 * to kvc-meta (also after a failed commit: mark it again). */
void kvc_inode_table_wrote(struct kvc_inode_table *table, uint64_t ino, uint64_t end);

/* The size was set (truncate): take it as committed. */
void kvc_inode_table_set_size(struct kvc_inode_table *table, uint64_t ino, uint64_t size);

/* Raise attr->size to the local size when this daemon knows more; or,
 * for a clean entry another client changed, take attr->size as the size
 * when it was asked for after that change (since: the events' sequence
 * when the request began, meta_events.h; 0: unknown, only raise). */
void kvc_inode_table_patch_attr(struct kvc_inode_table *table, struct kvc_attr *attr,
                                uint64_t since);

/* This client's size of ino became kvc-meta's at the events' sequence
 * seq (an open, our commit, our truncate): an answer asked for before it
 * may predate it and only raises the size. */
void kvc_inode_table_learnt(struct kvc_inode_table *table, uint64_t ino, uint64_t seq);
/* Another client changed ino (an event, at the events' sequence seq). */
void kvc_inode_table_changed(struct kvc_inode_table *table, uint64_t ino, uint64_t seq);
/* Whether ino's size here is in doubt (changed elsewhere, clean here):
 * ask kvc-meta and patch with the answer before trusting it. */
bool kvc_inode_table_changed_since(struct kvc_inode_table *table, uint64_t ino);

/* Take what ino's size in kvc-meta must reach (1 and *size: the grown
 * size, or the end of the writes since the last commit), or 0 when clean.
 * The caller commits it (kvc-meta's size = max(size, *size)) and calls
 * kvc_inode_table_committed, or kvc_inode_table_wrote(*size) when that
 * failed. */
int kvc_inode_table_take_dirty(struct kvc_inode_table *table, uint64_t ino, uint64_t *size);
void kvc_inode_table_committed(struct kvc_inode_table *table, uint64_t ino, uint64_t size);
/* A size taken with take_dirty that was not committed (the caller marked
 * it again with kvc_inode_table_wrote, or the file is gone). */
void kvc_inode_table_commit_failed(struct kvc_inode_table *table, uint64_t ino);
/* Wait until no size commit of ino is in flight (another thread's, the
 * background pass's): a truncate sent before one lands would be undone
 * by it (kvc-meta's size becomes max(size, the commit's)). A commit is
 * bounded by the meta client's timeouts. */
void kvc_inode_table_wait_commits(struct kvc_inode_table *table, uint64_t ino);

/* Up to max dirty inodes (for the background pass). */
int kvc_inode_table_list_dirty(struct kvc_inode_table *table, uint64_t *inos, int max);

#endif
