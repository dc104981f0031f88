/*
 * wire_pool: page-pool messages (POOL_*) and the key lists they carry
 * (kvc_wire_keys_encode/decode, in wire.c). Part of core/wire.h; include
 * that, not this. docs/protocol.md describes every message.
 */
#ifndef KVC_WIRE_POOL_H
#define KVC_WIRE_POOL_H

#ifndef KVC_WIRE_H
#error "include core/wire.h"
#endif

/* Page pool messages. Every body starts with kvc_msg_pool, then the
 * namespace (ns_len bytes), then a key list where the message has keys:
 * count entries of (u32 length, bytes), unpadded (kvc_wire_keys_*).
 * POOL_CONFIRM adds count i64 pages, then release_count i64 pages, after
 * its keys. Replies:
 *   ALLOCATE   count kvc_msg_pool_allocation
 *   CONFIRM    count i32 statuses (0 or -ESTALE)
 *   EXISTS     count u8 (1: complete)
 *   LOCATIONS  count i64 pages (-1: not complete)
 *   DELETE     u64 deleted;  FSCK: i64 problems
 *   CLEAR      u64: 1 when keys remain (each request clears a bounded
 *              number; the client repeats)
 *   STATS      kvc_msg_pool_stats
 *   LIST       count kvc_msg_pool_entry (kvc_msg_count_reply first)
 *   KEYS       (request: count 0 or 1 key to start after, value = max)
 *              u32 count, u32 more, then count kvc_msg_pool_key_info
 *              each followed by its key bytes
 *   WAIT       (request: keys as EXISTS', value = timeout_ms, at most
 *              600000) count u8 (1: complete), sent when all are
 *              complete or at the timeout (status 0 either way: the 0
 *              flags name the keys still missing); -ECANCELED when the
 *              namespace was cleared meanwhile, -EBUSY when too many
 *              waits are in progress, -ENOENT for a namespace without
 *              pools */
struct kvc_msg_pool {
	uint32_t rank;
	uint32_t count;         /* keys */
	uint32_t ns_len;
	uint32_t value;         /* INIT: num_pages; WORLD: world size;
	                           LOCATIONS: lease_ms; CONFIRM: release_count;
	                           FSCK: 1 to repair; WAIT: timeout_ms */
	uint32_t world_size;    /* INIT */
	uint32_t reserved;
	uint64_t now_ms;        /* 0: the server's clock */
};
_Static_assert(sizeof(struct kvc_msg_pool) == 32, "");

struct kvc_msg_pool_allocation {
	int64_t page;
	uint32_t already;
	uint32_t reserved;
};

struct kvc_msg_pool_stats {
	uint32_t world_size;
	uint32_t ranks;
	uint64_t num_pages;
	uint64_t free_pages;
	uint64_t keys;
	uint64_t complete_keys;
	uint64_t leased_keys;
	uint64_t retired_keys;
	uint64_t evictions;
};
_Static_assert(sizeof(struct kvc_msg_pool_stats) == 64, "");

struct kvc_msg_pool_entry {
	char ns[64];
	uint32_t rank;
	uint32_t num_pages;
	uint32_t free_pages;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_pool_entry) == 80, "");

/* POOL_BIND: count 1 (the path of the file in the namespace, as the one
 * key) then one i64 page size; count 0 unbinds. POOL_BINDING's reply:
 * this, then path_length bytes. */
struct kvc_msg_pool_binding {
	uint64_t inode;
	uint64_t page_size;
	uint64_t punch_pending;
	uint32_t path_length;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_pool_binding) == 32, "");

struct kvc_msg_pool_key_info {
	uint32_t length;
	uint32_t world;
	uint32_t confirmed;
	uint32_t complete;
	uint64_t lease_until_ms;
};
_Static_assert(sizeof(struct kvc_msg_pool_key_info) == 24, "");

/* A key list entry as decoded: points into the received body. */
struct kvc_wire_key {
	const char *bytes;
	uint32_t length;
};

/* Append count keys to buf (capacity cap) at *offset. -EMSGSIZE when
 * they do not fit. */
int kvc_wire_keys_encode(uint8_t *buf, uint32_t cap, uint32_t *offset,
                         const struct kvc_wire_key *keys, uint32_t count);

/* Decode count keys from a received body at *offset, each at most
 * max_length bytes. -EINVAL for a truncated or oversized list. */
int kvc_wire_keys_decode(const void *body, uint32_t body_len, uint32_t *offset,
                         struct kvc_wire_key *keys, uint32_t count, uint32_t max_length);

#endif
