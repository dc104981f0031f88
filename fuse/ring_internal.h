/*
 * ring_internal: what ring_service.c (rings, workers, taking entries and
 * posting completions) and ring_batch.c (a taken batch's entries checked
 * and run through the storage client) share: a ring's server state and a
 * worker's batch.
 *
 * Locks of a ring, never held together nor across I/O or a call on
 * client memory: take_lock (taking entries: sq_head, reserved, running's
 * rise; the service's timer_lock may be taken under it) and post_lock
 * (writing completions: cq_tail; a leaf).
 * A completion is posted once: by the batch's worker when the batch
 * ends, or, for a host read, by kvc_ring_service_landed as its io lands
 * (the batch then skips it); either way its reserved room is given back.
 */
#ifndef KVC_FUSE_RING_INTERNAL_H
#define KVC_FUSE_RING_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/storage_client.h"
#include "core/ring.h"
#include "fuse/ring_service.h"

#define MAX_BATCH 256

struct kvc_ring_server_ring {
	struct kvc_usrbio_client *client;
	struct kvc_ring_shared *shared;
	size_t bytes;
	uint32_t entries;
	uint32_t mask;
	bool for_read;
	int io_depth;
	int timeout_ms;
	uint64_t flags;
	int bell;  /* kvc-fuse's end of the doorbell: in epoll, drained here */
	int poke;  /* the client's end (a copy): the timer writes to it */
	uint32_t slot;
	uint32_t generation;
	atomic_int refs;
	atomic_bool dead;
	/* io_depth > 0: when fewer entries than io_depth started waiting */
	_Atomic int64_t partial_since_ns;
	/* Entries are taken (sq_head advanced, completion room reserved) by
	 * one worker at a time. Never held with post_lock; the service's
	 * timer_lock may be taken under it (set_partial). */
	pthread_mutex_t take_lock;
	uint32_t reserved; /* completions owed by batches running; take_lock */
	atomic_int running; /* batches of this ring running; raised under take_lock */
	bool ordered; /* a layout-1 client: one batch at a time, in order */
	/* Completions are posted by the workers running the ring and by the
	 * key waits (ring_keys_wait.c): one at a time. A leaf lock. */
	pthread_mutex_t post_lock;
	atomic_int parked; /* key waits parked on this ring */
};

/* A worker's batch: its entries, and the ios of those that run. */
struct kvc_ring_batch {
	struct kvc_ring_sqe sqe[MAX_BATCH];
	struct kvc_storage_io io[MAX_BATCH];
	uint64_t ino[MAX_BATCH];
	int device[MAX_BATCH];     /* per io: the GPU of its iov, or -1 */
	int64_t result[MAX_BATCH]; /* set early for refused entries */
	int runnable[MAX_BATCH];   /* index into io of each runnable entry, or -1 */
	/* A batch mixing device and host iovs: each kind gathered, and
	 * where each io came from in io[]. */
	struct kvc_storage_io device_io[MAX_BATCH], host_io[MAX_BATCH];
	int device_of[MAX_BATCH];
	int device_from[MAX_BATCH], host_from[MAX_BATCH];
	struct kvc_device_stager *stager; /* the worker's, made on first use */
	uint32_t key_index[MAX_BATCH];     /* the key entries (ring_keys) */
	struct kvc_ring_keys_scratch *keys; /* the worker's, made on first use */
	/* Host reads complete as their io lands (ring_batch.c's entry_landed), not with the
	 * batch's slowest request: a client keeping its depth by resubmitting
	 * as entries complete gets its next entries taken meanwhile. */
	struct kvc_ring_server_ring *ring;
	uint32_t head;
	struct kvc_ring_landed { struct kvc_ring_batch *b; uint32_t entry; } landed[MAX_BATCH];
	/* per entry: posted by entry_landed; read after the storage batch
	 * returned (its threads' ends order the writes before) */
	bool posted[MAX_BATCH];
};

/* Check and run a taken batch's n entries (slots head..head+n-1 of the
 * ring) and set each one's result (KVC_RING_KEYS_PARKED: a key wait
 * completed later); host reads may complete meanwhile (b->posted). */
void kvc_ring_batch_execute(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring,
                            struct kvc_ring_batch *b, uint32_t head, uint32_t n);

/* Post the completion of the entry of slot (its copy e) now, from any
 * thread, and give back its reserved room; wakes the client. */
void kvc_ring_service_landed(struct kvc_ring_server_ring *ring, uint32_t slot,
                             const struct kvc_ring_sqe *e, int64_t result);

#endif
