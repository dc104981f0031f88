/*
 * dir_names: the names of the directories where this client looks up
 * names that are not there (keys about to be created), so that such a
 * LOOKUP is answered here instead of by a kvc-meta round trip. The kernel
 * holds a directory's lock across an O_CREAT open's LOOKUP and CREATE, so
 * the creates of one directory run one at a time: their LOOKUP was half
 * of that critical section.
 *
 * A directory is taken in after FILL_AFTER lookups in it that kvc-meta
 * answered ENOENT: a thread here asks kvc-meta to tell this client of
 * every change of a name in it (WATCH_DIR, meta/watches.h), then lists
 * it, keeping a set of 64-bit hashes of its names. From then on a name
 * whose hash is not in the set is absent; a hash collision or a name
 * removed since only costs the usual round trip. The set only grows:
 * names this client makes are added before it asks kvc-meta to make them
 * (create, mkdir, mknod, symlink, link, rename, ring keys), and names
 * another client makes arrive as NAME events (meta_events.c) and are
 * added before the kernel's entry is dropped.
 *
 * Why no name is missed: the watch is placed before the listing reads, so
 * a change either committed before the listing (listed) or is told after
 * the watch (an event). A watch lives for the client's cache ttl; it is
 * renewed at half of it while the directory is used, and what is known
 * counts only until the last successful renewal's send time + ttl, and
 * only while kvc-meta's event stream is the one it was when the watch was
 * placed (a reconnect or lost events drop it, as they drop everything
 * cached). A DIR event (kvc-meta may have missed telling a change) drops
 * the directory. So a name another client creates is seen here within the
 * event's trip, the visibility rule of every cached name (meta_events.h).
 *
 * Bounded: DIRS directories (the least recently used one goes), at most
 * MAX_NAMES names each (a bigger directory is not taken in; retried after
 * TOO_BIG_RETRY_S).
 *
 * Threads: any FUSE worker, the event stream and the fill thread. One
 * mutex, a leaf, never held across a kvc-meta call.
 */
#ifndef KVC_FUSE_DIR_NAMES_H
#define KVC_FUSE_DIR_NAMES_H

#include <stddef.h>
#include <stdint.h>

struct kvc_fuse;
struct kvc_dir_names;

/* Start the fill thread. Stop joins it and forgets every directory (before
 * the event stream stops: the thread reads its generation); the state
 * itself lives until exit, as kvc-fuse's does (workers may still call). */
int kvc_dir_names_start(struct kvc_fuse *fs, struct kvc_dir_names **out);
void kvc_dir_names_stop(struct kvc_dir_names *d);

/* Whether (parent, name) is known to be absent: the seconds the kernel may
 * cache that (> 0), or 0 (ask kvc-meta). NULL d, or a name over
 * KVC_WIRE_MAX_NAME bytes: 0. */
double kvc_dir_names_absent(struct kvc_dir_names *d, uint64_t parent, const char *name);
/* kvc-meta answered ENOENT for a name of parent. */
void kvc_dir_names_missed(struct kvc_dir_names *d, uint64_t parent);
/* This client is about to ask kvc-meta to make (parent, name): it may
 * exist from now on. Returns a ticket for end, called once kvc-meta
 * answered: a listing waits for the requests that began before it (their
 * names went nowhere while the directory was not being listed, and a
 * listing that read past a name before its request committed would miss
 * it, with no event: kvc-meta tells no client of its own changes). */
uint32_t kvc_dir_names_begin(struct kvc_dir_names *d, uint64_t parent, const char *name,
                             size_t len);
void kvc_dir_names_end(struct kvc_dir_names *d, uint32_t ticket);
/* (parent, name) may exist from now on: an event, or a name of a request
 * begun with another name's ticket. */
void kvc_dir_names_heard(struct kvc_dir_names *d, uint64_t parent, const char *name,
                         size_t len);
/* The inode (parent, name) names as this client last heard it (its own
 * create, a lookup kvc-meta answered, the listing), while parent's names
 * count: 0 when not known (another client changed the name since, this
 * client is making or removed it). Early removals (early_creates.h) are
 * made only for a known inode, and kvc-meta removes the name only while
 * it still names that inode. */
uint64_t kvc_dir_names_ino(struct kvc_dir_names *d, uint64_t parent, const char *name,
                           size_t len);
/* (parent, name) names ino now as kvc-meta answered this client (0: not
 * known any more: removed or renamed away here). */
void kvc_dir_names_named(struct kvc_dir_names *d, uint64_t parent, const char *name, size_t len,
                         uint64_t ino);
/* Forget what is known of parent's names. */
void kvc_dir_names_forget(struct kvc_dir_names *d, uint64_t parent);

/* Counters (metrics): lookups answered here, directories taken in. */
struct kvc_dir_names_stats {
	uint64_t answered, fills, dirs_complete;
};
void kvc_dir_names_stats(struct kvc_dir_names *d, struct kvc_dir_names_stats *out);

#endif
