/*
 * wire_storage: the bodies of kvc-storage's messages: chunk I/O and range
 * operations (CHUNK_*), same-host placement (PLACE_*, on the server's
 * local socket), resync and SPACE. Part of core/wire.h; include that,
 * not this. docs/protocol.md describes every message.
 */
#ifndef KVC_WIRE_STORAGE_H
#define KVC_WIRE_STORAGE_H

#ifndef KVC_WIRE_H
#error "include core/wire.h"
#endif

/* CHUNK_WRITE: data_len bytes follow; offset + data_len <= chunk_size.
 * target is the member of `chain` (at chain_version) the frame is for: the
 * head from a client, the next member when forwarded. */
#define KVC_CHUNK_FORWARDED 1u /* flags: from the previous member */
struct kvc_msg_chunk_write {
	uint64_t inode;
	uint32_t target;
	uint32_t chunk;
	uint32_t chunk_size;
	uint32_t offset;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_write) == 40, "");
/* reply: */
struct kvc_msg_chunk_write_reply {
	uint64_t version;
	uint32_t length; /* chunk length after the write */
	uint32_t reserved;
};

/* CHUNK_READ: kvc_msg_chunk_read then count pieces. The reply body is
 * count kvc_msg_piece_result; the data is the concatenation of each
 * piece's `length` bytes in order. Bytes past `length` up to the asked
 * length are a hole: the reader fills them with zeros. */
struct kvc_msg_chunk_read {
	uint32_t count;
	uint32_t reserved;
};
struct kvc_msg_piece {
	uint64_t inode;
	uint32_t target; /* a member of chain: the replica asked */
	uint32_t chunk;
	uint32_t offset;
	uint32_t length;
	uint32_t chain;
	uint32_t chain_version;
};
_Static_assert(sizeof(struct kvc_msg_piece) == 32, "");
struct kvc_msg_piece_result {
	int32_t status; /* 0 or -errno (-EIO: crc mismatch; -EAGAIN: a write
	                   is in flight at this replica, ask the tail;
	                   -ESTALE: not a member of that chain version) */
	uint32_t length; /* bytes present in the data section */
};

/* Same-host placement (kvc-storage's local Unix socket, see
 * src/client/transport.h). PLACE_HELLO: empty; reply
 * kvc_msg_place_hello_reply (the server's host identity: the client
 * places only when it equals its own). */
#define KVC_PLACE_HOST_ID 32
struct kvc_msg_place_hello_reply {
	uint8_t host_id[KVC_PLACE_HOST_ID]; /* sha256(machine-id, boot id) */
	uint32_t max_pieces;                /* KVC_WIRE_MAX_PIECES */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_place_hello_reply) == 40, "");

/* PLACE_REGISTER: one fd rides along (shared memory of tmpfs or
 * hugetlbfs); the region is its bytes [file_offset, file_offset + size),
 * known as `region` to the registering process (its SO_PEERCRED pid) for
 * as long as the registering connection stays open. Reply empty.
 * PLACE_UNREGISTER: kvc_msg_place_region; reply empty. */
struct kvc_msg_place_register {
	uint64_t region;
	uint64_t size;
	uint64_t file_offset;
};
_Static_assert(sizeof(struct kvc_msg_place_register) == 24, "");
struct kvc_msg_place_region {
	uint64_t region;
};
_Static_assert(sizeof(struct kvc_msg_place_region) == 8, "");

/* PLACE_READ: kvc_msg_place_read, count pieces (as CHUNK_READ's), then
 * `spans` kvc_msg_place_span, in order: piece i's bytes go to the next
 * spans of the region, as many as add up to its length (one span for a
 * piece whose bytes go to one place; a ring key's segments are several).
 * count <= spans <= KVC_WIRE_MAX_PIECES, every piece and every span at
 * least one byte, no span crossing from one piece to the next. Reply: count
 * kvc_msg_piece_result, no data section (the bytes are in the region;
 * past `length` a hole, which the reader fills with zeros). A piece whose
 * region bytes are gone (the memory shrank) is -EFAULT. */
struct kvc_msg_place_read {
	uint64_t region;
	uint32_t count;
	uint32_t spans;
};
_Static_assert(sizeof(struct kvc_msg_place_read) == 16, "");
struct kvc_msg_place_span {
	uint64_t offset; /* in the region */
	uint32_t length;
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct kvc_msg_place_span) == 16, "");

/* PLACE_WRITE: a CHUNK_WRITE whose `length` bytes are taken from
 * [region_offset, region_offset + length) of the region instead of a
 * data section. Reply: kvc_msg_chunk_write_reply. */
struct kvc_msg_place_write {
	struct kvc_msg_chunk_write write;
	uint64_t region;
	uint64_t region_offset;
	uint32_t length;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_place_write) == 64, "");

/* PLACE_LOCAL: kvc_msg_place_local; reply kvc_msg_place_local_reply with
 * two fds: the target's directory (its index/ and chunks/, which the
 * client reads itself) and its change counters (`slots` u64s of sealed
 * shared memory, read-only to the client, one per chunk lock slot of
 * core/chunk_format.h: storage/chunk_store.h kvc_chunk_store_local).
 * -ENXIO: not a target of this server; -EOPNOTSUPP: the target is not
 * its chain's only copy in a table that never changes (a server with
 * managers, or replicas above 1: reads go through the server, which
 * knows what the chain has committed). */
struct kvc_msg_place_local {
	uint32_t target;
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct kvc_msg_place_local) == 8, "");
struct kvc_msg_place_local_reply {
	uint32_t slots; /* KVC_CHUNK_LOCK_SLOTS */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_place_local_reply) == 8, "");

/* CHUNK_REMOVE: all chunks of inode on target, a member of chain at
 * chain_version (range operations carry them as writes do: a request
 * delayed across a membership change is -ESTALE, never applied late).
 * Range operations come down the chain as writes do (wire version 12): a
 * client sends them to the head, each member applies and passes them on
 * with KVC_CHUNK_FORWARDED in flags, the answer is the tail's.
 * Reply: removed count. */
struct kvc_msg_chunk_remove {
	uint64_t inode;
	uint32_t target;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* KVC_CHUNK_FORWARDED or 0 */
};
_Static_assert(sizeof(struct kvc_msg_chunk_remove) == 24, "");
struct kvc_msg_count_reply {
	uint64_t count;
};

/* CHUNK_TRUNCATE: drop bytes at or beyond size of inode on target. */
struct kvc_msg_chunk_truncate {
	uint64_t inode;
	uint64_t size;
	uint32_t target;
	uint32_t chunk_size;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* KVC_CHUNK_FORWARDED or 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_truncate) == 40, "");

/* CHUNK_PUNCH: drop chunks first_chunk .. first_chunk + count - 1 of
 * inode on target (they read as holes). Reply: kvc_msg_count_reply. */
struct kvc_msg_chunk_punch {
	uint64_t inode;
	uint32_t target;
	uint32_t first_chunk;
	uint32_t count;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* KVC_CHUNK_FORWARDED or 0 */
};
_Static_assert(sizeof(struct kvc_msg_chunk_punch) == 32, "");

/* CHUNK_LAST: highest chunk of inode on target. */
struct kvc_msg_chunk_last {
	uint64_t inode;
	uint32_t target;
	uint32_t reserved;
};
struct kvc_msg_chunk_last_reply {
	uint32_t found;
	uint32_t chunk;
	uint32_t length;
	uint32_t reserved;
};

/* CHUNK_LIST: up to max_entries (1 .. KVC_WIRE_MAX_CHUNK_LIST) chunks of
 * target in (inode, chunk) order, starting after (after_inode,
 * after_chunk) when flags has KVC_CHUNK_LIST_AFTER, else from the first.
 * With KVC_CHUNK_LIST_AT_VERSION (a resync's source), target must be a
 * member of chain at chain_version in the server's table (else -ESTALE),
 * and the page is read only after every write and range operation the
 * target took under an older table is done (storage/inflight.h: drain);
 * without it, chain and chain_version must be 0.
 * Reply: kvc_msg_chunk_list_reply then count kvc_msg_chunk_entry; `more`
 * is 1 when chunks remain after the last one (ask again after it). */
#define KVC_WIRE_MAX_CHUNK_LIST 16384
#define KVC_CHUNK_LIST_AFTER 1u
#define KVC_CHUNK_LIST_AT_VERSION 2u
struct kvc_msg_chunk_list {
	uint64_t after_inode;
	uint32_t after_chunk;
	uint32_t target;
	uint32_t max_entries;
	uint32_t flags;
	uint32_t chain;
	uint32_t chain_version;
};
_Static_assert(sizeof(struct kvc_msg_chunk_list) == 32, "");
struct kvc_msg_chunk_list_reply {
	uint32_t count;
	uint32_t more;
};
_Static_assert(sizeof(struct kvc_msg_chunk_list_reply) == 8, "");
struct kvc_msg_chunk_entry {
	uint64_t inode;
	uint32_t chunk;
	uint32_t length;    /* bytes of the chunk */
	uint32_t chunk_crc; /* crc32c of its block crcs (docs/on-disk.md) */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_entry) == 24, "");
_Static_assert(sizeof(struct kvc_msg_chunk_list_reply) +
                       KVC_WIRE_MAX_CHUNK_LIST * sizeof(struct kvc_msg_chunk_entry) <=
                       KVC_WIRE_MAX_BODY, "a whole page fits a body");

/* CHUNK_RESYNC: make local `target` hold exactly what `source` (another
 * member of `chain`, at chain_version) holds, on a thread of the server's
 * own; the reply (empty) comes at once: 0 started, -EBUSY one runs for
 * target, -ENXIO target not here or chain unknown, -ESTALE either is not
 * a member of that chain version, -EINVAL source == target or flags.
 * CHUNK_RESYNC_STATUS: kvc_msg_chunk_target; reply kvc_msg_resync_status
 * of the last resync of target (state IDLE when none ran). */
struct kvc_msg_chunk_resync {
	uint32_t target;
	uint32_t source;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_resync) == 24, "");
struct kvc_msg_chunk_target {
	uint32_t target;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_target) == 8, "");
#define KVC_RESYNC_IDLE 0u    /* none since the server started */
#define KVC_RESYNC_RUNNING 1u
#define KVC_RESYNC_DONE 2u    /* result 0 */
#define KVC_RESYNC_FAILED 3u  /* result -errno */
struct kvc_msg_resync_status {
	uint32_t state;
	int32_t result;
	uint32_t source;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t passes;        /* whole comparisons made */
	uint64_t compared;      /* chunks compared (both listings) */
	uint64_t copied;        /* chunks set to the source's bytes */
	uint64_t dropped;       /* chunks the source lacks, dropped here */
	uint64_t bytes;         /* bytes copied */
	uint64_t retries;       /* copies retried (a write in flight at the source) */
	uint64_t elapsed_ms;    /* since it started (to its end when over) */
};
_Static_assert(sizeof(struct kvc_msg_resync_status) == 72, "");

/* SPACE reply: count records, one per target the server serves. */
struct kvc_msg_space_reply {
	uint32_t count;
	uint32_t reserved;
};
struct kvc_msg_target_space {
	uint32_t target;
	uint32_t flags; /* KVC_SPACE_REFUSING */
	uint64_t fsid;  /* filesystem id, to count shared disks once */
	uint64_t total_bytes;
	uint64_t free_bytes;     /* the filesystem's, reserve included */
	uint64_t chunks;
	uint64_t reserve_bytes;  /* kept back from chunk data for metadata */
	uint64_t refused_writes; /* refused for the reserve since the server started */
};
_Static_assert(sizeof(struct kvc_msg_target_space) == 56, "");

#endif
