/*
 * repair: a bad copy of a chunk, found by a read (its crc did not match,
 * or the disk failed it), is replaced by a good one from another member
 * of its chain, in the background. The reader was already answered -EIO
 * for that piece and read it from another member (storage_client.h); the
 * server queues (target, inode, chunk) here, and one thread per server
 * copies the chunk whole from the last member of the chain that serves
 * reads (not this target) and sets it here.
 *
 * Against concurrent writes, as a resync's chunk (resync.h): the repair
 * holds the chunk in the in-flight table from its read at the source to
 * its set here, and every member of a chain of several holds it while it
 * applies a write (the tail too), so a write lands before the copy (and is
 * in it, or the source answers -EAGAIN: a write in flight there, and the
 * repair lets the chunk go and tries again) or after it. The queue is
 * bounded (a full queue drops the newest: the next read that meets the bad
 * copy queues it again) and holds each chunk once.
 */
#ifndef KVC_STORAGE_REPAIR_H
#define KVC_STORAGE_REPAIR_H

#include <stdatomic.h>
#include <stdint.h>

struct kvc_storage_service;

/* Counts since the server started (metrics). */
struct kvc_repair_counts {
	_Atomic uint64_t queued, repaired, failed;
};

/* Start the repair thread of a server with peers (a chain table).
 * Returns 0 or -errno. */
int kvc_repair_start(struct kvc_storage_service *svc);

/* Queue a repair of (target, inode, chunk); nothing when the server has
 * no repair thread, the chunk is queued already or the queue is full. */
void kvc_repair_queue(struct kvc_storage_service *svc, uint32_t target, uint64_t inode,
                      uint32_t chunk);

#endif
