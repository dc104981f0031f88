/*
 * collector: gives storage back. (1) The chunks of removed files: kvc-meta
 * queues a file in the store's gc table in the same transaction that
 * removes its last name; this thread removes its chunks from every target
 * of its layout and then drops the queue entry. (2) The pages freed in
 * pools bound to a file (pool_store.h): it takes them out of their free
 * lists, punches their bytes out of the file on the storage servers, and
 * gives them back. Both queues are in LMDB, so work left by a crash or by
 * a storage server that was down is picked up again (every pass retries
 * what failed before; a pass over the removed files goes on from where
 * the last full batch of them ended, so files that keep failing do not
 * hold up those after them). (3) Each pass first drops the open sessions of
 * clients gone silent (sessions.h), so the files they held are reclaimed.
 * (4) The chunks beyond the size a shrinking setattr committed
 * (meta_sizes.c): kvc-meta's request handler cuts them at once through
 * kvc_meta_collector_truncate; each pass finishes any cut a crash or a
 * storage server that was down left.
 *
 * Nothing is removed from the storage servers before the change that
 * frees it is durable: each of (1), (2) and (4) takes a checkpoint of its
 * store first (kvc_meta_store_sync, kvc_pool_store_sync; concurrent ones
 * share one), so a machine crash that takes kvc-meta back to its last
 * checkpoint never brings back a file, a key or a size over bytes that
 * are gone.
 *
 * Cuts of one inode run one at a time (a cut that finished early must not
 * let the file grow while another, slower one of the same size is still
 * cutting): an in-flight set under the collector's mutex, which is never
 * held across I/O; others wait on a condition until the running one ends.
 */
#ifndef KVC_META_COLLECTOR_H
#define KVC_META_COLLECTOR_H

#include "meta/meta_store.h"
#include "meta/watches.h"
#include "meta/pool_store.h"
#include "meta/sessions.h"
#include "client/storage_client.h"

struct kvc_meta_collector;

/* Start the thread; interval_ms between passes when idle. */
int kvc_meta_collector_start(struct kvc_meta_store *store, struct kvc_pool_store *pools,
                             struct kvc_meta_sessions *sessions,
                             struct kvc_storage_client *storage, int interval_ms,
                             struct kvc_meta_collector **out);
/* Ask for a pass now (after an unlink). */
/* Tell watches (meta/watches.h) of files whose pages were punched; call
 * before the first wake. */
void kvc_meta_collector_set_watches(struct kvc_meta_collector *c,
                                    struct kvc_meta_watches *watches);
void kvc_meta_collector_wake(struct kvc_meta_collector *collector);

/* Finish ino's pending cut: cut its chunks on every target of its layout
 * to the recorded size, then drop the record (again while a deeper cut
 * was recorded meanwhile). 0 when none is left, or the storage error
 * (the record stays; a later pass retries). */
int kvc_meta_collector_truncate(struct kvc_meta_collector *collector, uint64_t ino);

#endif
