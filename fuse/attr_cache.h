/*
 * attr_cache: what kvc-meta last told this client about its regular files
 * and directories (the answers to OPEN, CREATE, EXTEND_SIZE, SETATTR and
 * GETATTR, and a directory's attributes after a CREATE, UNLINK or RMDIR
 * in it), in a direct-mapped table by inode (a slot taken by another inode
 * only costs a round trip). Two uses:
 *
 * - The page cache is kept across opens of a file whose (mtime, size) at
 *   open is the one remembered (kvc_attr_cache_same): nothing changed it
 *   since this client last saw it, so the pages it holds are the file's.
 * - GETATTR is answered from the table while kvc-meta's events say the
 *   inode did not change since the answer (meta_events.h), for at most the
 *   events' ttl. The kernel asks after every write of ours (it drops its
 *   own attributes then), so a stat after a close costs no round trip.
 *   A directory's, so that the kernel's permission check after each
 *   create or unlink in it (it drops the directory's attributes then)
 *   costs no round trip either.
 *   Any namespace change made through this client (unlink, rename, link,
 *   xattrs: nlink and ctime change, and kvc-meta does not echo a client's
 *   own changes) forgets every answer held for GETATTR, and every answer
 *   to a request made before it that comes back later; a change of ours
 *   to a directory marks it changed in the events' table
 *   (kvc_meta_events_changed_here), so no answer asked for before serves,
 *   and an answer older (ctime) than the one held drops both.
 *
 * Thread-safe: one mutex, held for a slot copy only.
 */
#ifndef KVC_FUSE_ATTR_CACHE_H
#define KVC_FUSE_ATTR_CACHE_H

#include <stdbool.h>

#include "core/wire.h"
#include "fuse/meta_events.h"

struct kvc_attr_cache;

int kvc_attr_cache_create(struct kvc_attr_cache **out);
void kvc_attr_cache_destroy(struct kvc_attr_cache *cache);

/* kvc-meta answered attr to a request made after mark. */
void kvc_attr_cache_put(struct kvc_attr_cache *cache, const struct kvc_attr *attr,
                        struct kvc_meta_events_mark mark);
/* The same for the answer to a change of ours (a directory's attributes
 * after our unlink in it): current as of the forget that change made
 * (forgot: what kvc_attr_cache_forget returned), not past a later one;
 * mark still judges events. */
void kvc_attr_cache_put_own(struct kvc_attr_cache *cache, const struct kvc_attr *attr,
                            struct kvc_meta_events_mark mark, uint64_t forgot);
/* Whether attr's (mtime, size) is the one held for its inode. */
bool kvc_attr_cache_same(struct kvc_attr_cache *cache, const struct kvc_attr *attr);
/* The attributes held for ino while still fresh: seconds they may still be
 * cached (> 0) with *out set, or 0. */
double kvc_attr_cache_get(struct kvc_attr_cache *cache, struct kvc_meta_events *events,
                          uint64_t ino, struct kvc_attr *out);
/* A namespace change of ours: no held answer serves GETATTR any more, nor
 * any answer to a request made before this call (put later). Returns the
 * events' seq it moved to (for kvc_attr_cache_put_own). */
uint64_t kvc_attr_cache_forget(struct kvc_attr_cache *cache, struct kvc_meta_events *events);

#endif
