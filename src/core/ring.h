/*
 * ring: the shared-memory layout of a USRBIO ring, shared by libkvc (the
 * client side, src/client/usrbio.c) and kvc-fuse (the server side,
 * fuse/ring_service.c). Nothing else reads or writes it.
 *
 * The client creates the memory (a memfd sealed with F_SEAL_SHRINK and
 * F_SEAL_GROW, so that it can never shrink under kvc-fuse), registers it
 * with kvc-fuse over the control socket, gets the ring's doorbell back (a
 * socket kvc-fuse made: docs/usrbio.md), and both map it. Layout
 * (little-endian, offsets in bytes):
 *
 *   0     u32 magic          KVC_RING_MAGIC ("KVCR")
 *   4     u32 layout         KVC_RING_LAYOUT: changes with this layout
 *   8     u32 entries        power of two, <= KVC_RING_MAX_ENTRIES
 *   12    u32 reserved
 *   16    u32 need_wakeup    kvc-fuse: 1 unless a worker is watching
 *                            sq_tail right now (then 0)
 *   64    u32 sq_tail        client: entries submitted (free-running)
 *   128   u32 sq_head        kvc-fuse: entries taken
 *   192   u32 cq_tail        kvc-fuse: completions posted (futex word)
 *   256   u32 cq_head        client: completions consumed
 *   512   struct kvc_ring_sqe sqes[entries]
 *   512 + 48 * entries       struct kvc_ring_cqe cqes[entries]
 *
 * Each index lives on its own cache line and has one writer. Indices are
 * free-running u32; slot = index & (entries - 1).
 *
 * Protocol and ordering:
 * - The client fills sqes[tail & mask] and then store-releases sq_tail;
 *   then (after a full fence) it reads need_wakeup and rings the doorbell
 *   (writes 8 bytes to it) only when it is set. A worker about to stop watching
 *   sets need_wakeup, fences, and reads sq_tail once more: one of the two
 *   sides always sees the other (as in io_uring's SQPOLL), so no
 *   submission waits unseen. kvc-fuse load-acquires sq_tail,
 *   copies each entry out before checking it (the client may scribble on
 *   the ring at any time), and store-releases sq_head.
 * - kvc-fuse fills cqes[cq_tail & mask], store-releases cq_tail and wakes
 *   futex waiters on cq_tail. The client load-acquires cq_tail, reads the
 *   completions and store-releases cq_head.
 * - The client never has more than `entries` entries outstanding (prepared
 *   and not yet reaped), so the completion queue cannot overflow; kvc-fuse
 *   still takes no more entries than the completion queue has room for, so
 *   a client that breaks this rule only stalls its own ring.
 */
#ifndef KVC_RING_H
#define KVC_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define KVC_RING_MAGIC 0x5243564bu /* "KVCR" */
/* 2: entries carry a tag (the client's index, echoed in the completion)
 * and complete in any order. kvc-fuse still serves layout 1 (a libkvc
 * from before: completions are indexed by slot, so its batches run one
 * at a time and complete in order); a kvc-fuse from before refuses 2. */
#define KVC_RING_LAYOUT 2
#define KVC_RING_LAYOUT_ORDERED 1
#define KVC_RING_MAX_ENTRIES 4096
#define KVC_RING_HEADER 512u

enum kvc_ring_op {
	KVC_RING_READ = 1,
	KVC_RING_WRITE = 2,
	/* Key ops (fuse/ring_keys.h, docs/usrbio.md "Keys"), on rings of either
	 * direction: fd is a registered directory of the mount (the key
	 * directory), iov_handle + iov_offset locate the entry's key
	 * descriptor in a registered host iov, length is its size in bytes
	 * (sizeof(struct kvc_ring_key_desc) + nsegs * sizeof(struct
	 * kvc_ring_key_seg)), file_offset is 0. */
	KVC_RING_KEY_PUT = 3,
	KVC_RING_KEY_GET = 4,
	KVC_RING_KEY_EXISTS = 5,
	KVC_RING_KEY_REMOVE = 6,
	KVC_RING_KEY_WAIT = 7,
};

/* A key descriptor: the key's name (one path component of the key
 * directory: 1..255 bytes, no '/', no NUL, not "." or ".."), its
 * segments (put: gathered in order; get: scattered in order; the other
 * ops take none), and per op: flags (put: KVC_RING_KEY_REPLACE), mode
 * (put: permission bits of a new key, 0 = 0644), timeout_ms (wait: 0 =
 * kvc-fuse's longest, KVC_RING_KEY_MAX_WAIT_MS). kvc-fuse copies it out
 * of the iov before it checks it. */
#define KVC_RING_KEY_MAX_SEGS 64
#define KVC_RING_KEY_MAX_NAME 255
#define KVC_RING_KEY_REPLACE 1u
#define KVC_RING_KEY_MAX_WAIT_MS 3600000u

struct kvc_ring_key_seg {
	uint32_t iov_handle;  /* a registered iov (host or device) */
	uint32_t reserved;
	uint64_t offset;      /* in the iov */
	uint64_t length;      /* > 0 */
};
_Static_assert(sizeof(struct kvc_ring_key_seg) == 24, "");

struct kvc_ring_key_desc {
	uint16_t name_len;
	uint16_t nsegs;       /* <= KVC_RING_KEY_MAX_SEGS */
	uint32_t flags;
	uint32_t timeout_ms;
	uint32_t mode;
	char name[KVC_RING_KEY_MAX_NAME + 1]; /* name_len bytes used */
	/* struct kvc_ring_key_seg segs[nsegs] follow */
};
_Static_assert(sizeof(struct kvc_ring_key_desc) == 272, "");

#define KVC_RING_KEY_DESC_MAX                                                            \
	(sizeof(struct kvc_ring_key_desc) + KVC_RING_KEY_MAX_SEGS * sizeof(struct kvc_ring_key_seg))

struct kvc_ring_sqe {
	uint64_t iov_offset;  /* into the registered iov */
	uint64_t file_offset;
	uint64_t length;
	uint64_t userdata;    /* echoed in the completion */
	int32_t fd;           /* the client's registered fd number */
	uint32_t iov_handle;  /* from IOV_REGISTER */
	uint32_t op;          /* enum kvc_ring_op */
	/* Layout 2: the entry's index + 1, as the client numbers its
	 * outstanding entries (unique among them until the completion is
	 * reaped); echoed as the completion's index. 0 (layout 1): the
	 * completion's index is the entry's slot. */
	uint32_t tag;
};
_Static_assert(sizeof(struct kvc_ring_sqe) == 48, "");

/* The index a completion of entry e, taken from `slot`, carries: opaque
 * to kvc-fuse, echoed to the client that wrote it. */
static inline uint32_t kvc_ring_cqe_index(const struct kvc_ring_sqe *e, uint32_t slot)
{
	return e->tag ? e->tag - 1 : slot;
}

struct kvc_ring_cqe {
	int64_t result;       /* bytes transferred or -errno */
	uint64_t userdata;
	uint32_t index;       /* the index prep returned (kvc_ring_cqe_index) */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_ring_cqe) == 24, "");

struct kvc_ring_shared {
	uint32_t magic;
	uint32_t layout;
	uint32_t entries;
	uint32_t reserved;
	_Atomic uint32_t need_wakeup;
	uint8_t pad0[44];
	_Atomic uint32_t sq_tail;
	uint8_t pad1[60];
	_Atomic uint32_t sq_head;
	uint8_t pad2[60];
	_Atomic uint32_t cq_tail;
	uint8_t pad3[60];
	_Atomic uint32_t cq_head;
	uint8_t pad4[60];
};
_Static_assert(offsetof(struct kvc_ring_shared, sq_tail) == 64, "");
_Static_assert(offsetof(struct kvc_ring_shared, cq_head) == 256, "");
_Static_assert(sizeof(struct kvc_ring_shared) <= KVC_RING_HEADER, "");

static inline size_t kvc_ring_bytes(uint32_t entries)
{
	size_t bytes = KVC_RING_HEADER + (size_t)entries *
	               (sizeof(struct kvc_ring_sqe) + sizeof(struct kvc_ring_cqe));
	return (bytes + 4095) & ~(size_t)4095;
}

static inline struct kvc_ring_sqe *kvc_ring_sqes(struct kvc_ring_shared *r)
{
	return (struct kvc_ring_sqe *)((char *)r + KVC_RING_HEADER);
}

static inline struct kvc_ring_cqe *kvc_ring_cqes(struct kvc_ring_shared *r, uint32_t entries)
{
	return (struct kvc_ring_cqe *)((char *)r + KVC_RING_HEADER +
	                               (size_t)entries * sizeof(struct kvc_ring_sqe));
}

#endif
