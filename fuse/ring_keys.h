/*
 * ring_keys: key operations on USRBIO rings (put, get, exists, remove,
 * wait; layout in src/core/ring.h, protocol in docs/usrbio.md "Keys"). A
 * key is a regular file named by one path component of a key directory
 * (a directory of the mount the client registered like an fd); kvc-fuse
 * creates, sizes and publishes it itself.
 *
 * A batch's key entries run together: each entry's descriptor is copied
 * out of the client's iov under the memory guard (core/mem_guard.h: a
 * client that shrinks its memory gets -EFAULT, kvc-fuse no SIGBUS) and
 * checked
 * (name, segment count and ranges, no overlap, sizes); permissions are
 * checked as the kernel would for the client's uid and groups
 * (kvc_usrbio_client_may: x on the key directory for every op, w+x for
 * put and remove with the sticky-bit rule, r on the key for get); the
 * namespace work of all entries of a directory is one KEYS_* message per
 * kind (lookup, create, publish, remove) and the storage I/O of all
 * segments of all keys is one batched read or write (device segments
 * through device_io's staging).
 *
 * put: create a nameless temp file (an orphan this kvc-fuse has open in
 * kvc-meta), write the segments, then publish (size and name in one
 * transaction, -EEXIST when the key exists unless KVC_RING_KEY_REPLACE):
 * a key is never visible incomplete, and a put cut short (a failed write,
 * a kvc-fuse killed) leaves no file behind: kvc-meta reclaims the temp
 * when it is closed or when this client is dropped. get: -EMSGSIZE unless the segments add up to
 * the key's size. wait: completes with the key's size once it is
 * published; an entry whose key is not there is parked (ring_keys_wait.c)
 * and never holds a worker.
 */
#ifndef KVC_FUSE_RING_KEYS_H
#define KVC_FUSE_RING_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/ring.h"
#include "fuse/device_io.h"
#include "fuse/operations.h"
#include "fuse/usrbio_service.h"

/* The result of a parked entry: not posted now (its wait posts it). */
#define KVC_RING_KEYS_PARKED INT64_MIN

/* Parked waits: at most the ring's entries per ring, these per uid and
 * in all (more: -EDQUOT). A parked key is looked up again after 1 ms,
 * doubling up to 20 ms, besides the wake-ups of kvc_ring_keys_notify. */
#define KVC_RING_KEYS_UID_WAITS 16384
#define KVC_RING_KEYS_ALL_WAITS 65536

struct kvc_ring_keys_scratch; /* a worker's buffers, made on first use */
void kvc_ring_keys_scratch_free(struct kvc_ring_keys_scratch *scratch);

static inline bool kvc_ring_keys_is_key_op(uint32_t op)
{
	return op >= KVC_RING_KEY_PUT && op <= KVC_RING_KEY_WAIT;
}

/* The key entries of a ring batch (the client entered). */
struct kvc_ring_keys_batch {
	struct kvc_fuse *fs;
	struct kvc_ring_server_ring *ring;
	struct kvc_usrbio_client *client;
	struct kvc_ring_keys_scratch **scratch;
	struct kvc_device_stager **stager;
	const struct kvc_ring_sqe *sqes; /* the batch's copied entries */
	uint32_t head, mask;             /* slot of sqes[i]: (head + i) & mask */
	const uint32_t *index;           /* which sqes are key entries */
	int count;
	int64_t *results;                /* per sqe: size, -errno or PARKED */
	int lease; /* the batch's lease check: -EIO failed (puts fail without
	            * waiting again), else 0 */
};
void kvc_ring_keys_execute(const struct kvc_ring_keys_batch *batch);

/* Decode a descriptor copied out of client memory for op: len is the
 * entry's length; raw holds min(len, KVC_RING_KEY_DESC_MAX) bytes. Returns
 * 0, -EINVAL (malformed: length, flags, empty segment, segments on an op
 * that takes none), -E2BIG (over KVC_RING_KEY_MAX_SEGS segments),
 * -ENAMETOOLONG, or the name's -EINVAL ('/', NUL, ".", ".."). Pure: the
 * fuzz harness drives it. */
int kvc_ring_keys_decode(const void *raw, size_t len, uint32_t op,
                         struct kvc_ring_key_desc *desc, struct kvc_ring_key_seg *segs);

/* Key (parent, name) was published: wake the waits parked on it (they
 * look it up now). Called for puts of this kvc-fuse and from kvc-meta's
 * change events. */
void kvc_ring_keys_notify(struct kvc_fuse *fs, uint64_t parent, const char *name,
                          size_t name_len);

/* ring_keys_wait.c: park a wait for (parent, name) of ring slot, until
 * timeout_ms. Returns 0 (the wait owns a ring reference and posts the
 * completion) or -EDQUOT (too many parked), -ENOMEM. */
int kvc_ring_keys_park(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring, uid_t uid,
                       uint32_t slot, uint64_t userdata, uint64_t parent, const char *name,
                       size_t name_len, uint32_t timeout_ms);

#endif
