/*
 * storage_client: reads and writes file byte ranges against the storage
 * servers of a cluster. A range is cut into chunk pieces by the layout;
 * reads send one request per server holding pieces (the server batches its
 * disk reads) and receive every piece's bytes straight into the caller's
 * buffer; writes send each piece on its own connection, so the pieces of a
 * range are written in parallel. Holes read as zeros.
 *
 * Chains (core/chains.h): a layout names chains, and the chain table says
 * which targets hold each. A piece is read from one replica of its chain
 * (spread by chunk, servers seen failing in the last seconds avoided);
 * a piece that fails there (server down or timed out, crc mismatch,
 * -ESTALE) is read again from another replica, and one with a write in
 * flight at that replica (-EAGAIN) from the tail, so a read fails only
 * when no replica could serve it. Writes go to the head of the chain,
 * which passes them down the chain (src/storage/service.h); the answer
 * is the tail's. Removes, truncates and punches go to each chain's head
 * and come down the chain the same way; syncs go to every member.
 *
 * Failures are bounded by the cluster's timeouts. A connection that breaks
 * because its server restarted is retried once on a fresh one (chunk reads
 * and writes are idempotent); anything else fails the call with -EIO (or
 * -ENOSPC / -EINVAL when a server said so), never a partial success.
 *
 * Thread-safe: connections come from per-server pools.
 */
#ifndef KVC_STORAGE_CLIENT_H
#define KVC_STORAGE_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "client/transport.h"
#include "core/chains.h"
#include "core/config.h"
#include "core/rpc.h"

struct kvc_storage_receivers;

struct kvc_storage_client {
	struct kvc_storage_receivers *receivers; /* NULL: the caller receives */
	/* Servers and targets: the cluster file's, then those a newer routing
	 * table adds (storage_routing.c). They only grow: an entry, once its
	 * count covers it, never changes, and a pool is never freed or moved
	 * before kvc_storage_client_destroy, so readers use them without a
	 * lock (the counts are stored with release after the entries are set,
	 * and a target is used only once a chain installed after it names it).
	 * hosts_lock (taken before chains_lock) serializes the growers. */
	uint32_t server_count;
	uint32_t target_count;
	uint32_t target_server[KVC_WIRE_MAX_TARGETS];
	char server_address[KVC_CONFIG_MAX_SERVERS][KVC_NET_ADDRESS_MAX];
	struct kvc_rpc_pool pools[KVC_CONFIG_MAX_SERVERS];
	pthread_mutex_t hosts_lock;
	struct kvc_auth_cred cred; /* for the pools of servers added later */
	int connect_timeout_ms;
	int io_timeout_ms;
	/* Monotonic ns until which reads avoid a server that just failed. */
	_Atomic int64_t avoid_until_ns[KVC_CONFIG_MAX_SERVERS];
	/* The chain table (storage_routing.c): the cluster file's, then the
	 * manager's when kvc_storage_client_follow runs. Lock order: chains_lock
	 * is a leaf (held to copy a chain in or out, never across I/O);
	 * routing_lock guards only the wake-up of routing waiters. */
	pthread_rwlock_t chains_lock;
	struct kvc_chains chains;
	pthread_mutex_t routing_lock;
	pthread_cond_t routing_changed;
	/* Managers (kvc-mgmt) the routing table comes from; 0: none. */
	uint32_t manager_count;
	struct kvc_rpc_pool managers[KVC_CONFIG_MAX_MANAGERS];
	_Atomic uint32_t manager_next; /* the one that answered last */
	int failure_timeout_ms;
	bool following;
	/* Counts for metrics: pieces read again from another member, batches
	 * run again on a new table. */
	_Atomic uint64_t replica_retries;
	_Atomic uint64_t routing_retries;
	/* Transports (client/transport.h): same-host placement's state (NULL:
	 * TCP only), requests and bytes per transport, placed requests that
	 * fell back to TCP; how many bytes one placed read request carries
	 * (kvc_transport_place_init). */
	struct kvc_place_client *place;
	/* Same-host reads without a message (transport_local.h; NULL: off). */
	struct kvc_local_client *local;
	uint32_t place_request_bytes;
	_Atomic uint64_t transport_ops[KVC_TRANSPORT_KINDS];
	_Atomic uint64_t transport_bytes[KVC_TRANSPORT_KINDS];
	_Atomic uint64_t place_fallbacks;
	/* Moves whenever memory a server placed into may still be written by
	 * it later: a placed request that fell back to TCP (a stalled
	 * server), or a placed piece that failed with -EIO (the server may
	 * have left a read into it in flight). Memory of ours that servers
	 * place into (ring keys' bounce buffer, a FUSE read buffer, the GPU
	 * staging of fuse/device_io.c) is dropped, never reused, once it
	 * moved during its use. */
	_Atomic uint64_t place_epoch;
	_Atomic uint64_t place_dropped; /* such memory given up (kvc_transport_region_drop) */
};

struct kvc_metrics;

/* One I/O of a batch: a byte range of a file and the caller's buffer. */
struct kvc_storage_io {
	uint64_t inode;
	struct kvc_layout layout;
	uint64_t offset;
	uint64_t length;
	void *buf;
	/* buf lies in this region (NULL: none): a same-host server may place
	 * the bytes straight there (client/transport.h). */
	const struct kvc_storage_region *region;
	/* Reads, optional (NULL: buf): the io's bytes in order to these
	 * places instead, scatter[0].iov_len bytes to scatter[0].iov_base and
	 * so on, the lengths adding up to length (a ring key's segments: one
	 * io, planned once, one piece a chunk with a span a place it covers,
	 * storage_read.c); every place lies in region when region is set. */
	const struct iovec *scatter;
	uint32_t scatter_count;
	bool forbid_holes; /* reads: a hole fails the io with -ENODATA */
	int result;        /* out: 0 or -errno (the io's first failure) */
	/* Reads, optional (NULL: none): called once, on any of the batch's
	 * threads, as soon as the io's last piece has landed and the io
	 * succeeded, while the rest of the batch may still run (a ring entry
	 * completes then, not with the batch's slowest request). Never for an
	 * io that failed: its result stands when the batch returns. It must
	 * not block; done_arg is the caller's (an io may be a copy). */
	void (*done)(struct kvc_storage_io *io);
	void *done_arg;
	int pending; /* the batch's own: pieces not landed yet, while done is set */
};

struct kvc_storage_space {
	uint64_t total_bytes;
	uint64_t free_bytes;  /* the filesystems' free bytes, reserves included */
	uint64_t avail_bytes; /* what chunk data may still take: free - reserve */
	uint64_t chunks;
	uint32_t targets_refusing; /* at their reserve: new data gets -ENOSPC */
	uint32_t targets_up;
	uint32_t targets_down;
};

int kvc_storage_client_init(struct kvc_storage_client *client,
                            const struct kvc_config *config);

/* Receive the answers of a read wave on `threads` threads besides the
 * caller (one core receives at a few GB/s: more cores, more bandwidth).
 * The threads live as long as the process. Returns 0 or -errno. */
int kvc_storage_client_start_receivers(struct kvc_storage_client *client, int threads);
void kvc_storage_client_destroy(struct kvc_storage_client *client);

/* Run many reads (or writes) at once: the pieces of all ios are grouped by
 * server and sent together; each io gets its own result, so one bad io
 * does not fail the others. Returns 0 or the first io's error. */
int kvc_storage_client_read_batch(struct kvc_storage_client *client,
                                  struct kvc_storage_io *ios, int count);
int kvc_storage_client_write_batch(struct kvc_storage_client *client,
                                   struct kvc_storage_io *ios, int count);

/* Write [offset, offset + length) of inode from buf. Returns 0, -EIO,
 * -ENOSPC, -EINVAL, -EFBIG. */
int kvc_storage_client_write(struct kvc_storage_client *client, uint64_t inode,
                             const struct kvc_layout *layout, uint64_t offset,
                             uint64_t length, const void *buf);

/* Follow the managers' routing table (when the cluster file names
 * managers; else a no-op returning 0): fetch it now (bounded by the
 * connect timeout; the cluster file's table stays when no manager
 * answers) and keep it current on a thread of its own, which long-polls
 * the leading manager. From then on, writes (and reads that no replica
 * could serve) that fail while the table may be about to change are
 * retried on the new table, for up to twice failure_timeout_ms plus two
 * io timeouts (an attempt that met a stopped server): a write
 * to a chain whose member died stalls for the detection time, then goes
 * on. Returns 0 or -errno (no thread). */
int kvc_storage_client_follow(struct kvc_storage_client *client);

/* Fetch the managers' table once (tools). Returns 0, or -errno when no
 * manager answered (the table is unchanged). */
int kvc_storage_client_refresh(struct kvc_storage_client *client);

/* Install table when it is newer than the one in use (a manager's answer,
 * or a storage server's). Servers and targets it has beyond the client's
 * are added first (pools created); a table that disagrees with the
 * client's servers (another address at an index, another target range)
 * is refused. Returns 1 when installed, 0 when not newer, -EINVAL when
 * refused, -ENOMEM. */
int kvc_storage_client_set_chains(struct kvc_storage_client *client,
                                  const struct kvc_chains *table);

/* Check and install a MGMT_ROUTING reply of len bytes (docs/protocol.md:
 * the head, chains, servers; every count and field checked, a hostile
 * reply changes nothing). Returns 1 installed, 0 not newer (or the
 * unchanged answer), -EBADMSG, -EINVAL (it disagrees with the servers the
 * client has), -ENOMEM. */
int kvc_storage_client_install_reply(struct kvc_storage_client *client, const void *reply,
                                     uint32_t len);

/* A copy of chain id of the table in use; false when there is none. */
bool kvc_storage_client_chain(struct kvc_storage_client *client, uint32_t id,
                              struct kvc_chain *out);

/* A copy of the table in use. */
void kvc_storage_client_chains(struct kvc_storage_client *client, struct kvc_chains *out);
/* Whether target is a member of a chain of the table in use: 0 no, 1 yes,
 * 2 yes and its chain's only member serving (a manager never takes that
 * one out, silent or not). */
int kvc_storage_client_serves(struct kvc_storage_client *client, uint32_t target);
/* Whether target is the one member of its chain in the table in use. */
bool kvc_storage_client_sole_copy(struct kvc_storage_client *client, uint32_t target);
/* The number of chains of the table in use (it only grows). */
uint32_t kvc_storage_client_chain_count(struct kvc_storage_client *client);

/* Wait until the table's version is past `known`, at most timeout_ms.
 * Returns the version then. */
uint64_t kvc_storage_client_wait_routing(struct kvc_storage_client *client, uint64_t known,
                                         int timeout_ms);

/* Register the routing table's metrics in registry (prefix, e.g.
 * "kvc_fuse"): PREFIX_routing_version, PREFIX_chain_version{chain},
 * PREFIX_chain_members{chain}, PREFIX_chain_catching_up{chain} (set when
 * scraped), PREFIX_replica_retries_total, PREFIX_routing_retries_total.
 * Returns 0 or -ENOMEM. */
int kvc_storage_client_metrics(struct kvc_storage_client *client, struct kvc_metrics *registry,
                               const char *prefix);

/* Send one CHUNK_WRITE (a chain member passing a write on to the next:
 * msg->target names it) and wait for its answer. Returns the answer's
 * status, -EIO when the server could not be reached. */
int kvc_storage_client_forward(struct kvc_storage_client *client,
                               const struct kvc_msg_chunk_write *msg, const void *data,
                               uint32_t length);

/* Remove every chunk of inode from the targets of its layout. */
int kvc_storage_client_remove(struct kvc_storage_client *client, uint64_t inode,
                              const struct kvc_layout *layout);

/* Drop the bytes of inode at or beyond size on every target of its layout. */
int kvc_storage_client_truncate(struct kvc_storage_client *client, uint64_t inode,
                                const struct kvc_layout *layout, uint64_t size);

/* Make [offset, offset + length) of inode read as zeros, up to size (the
 * file's size: nothing past it is touched, so the file never grows). Whole
 * chunks inside the range are dropped on their targets, returning their
 * space; the partial chunks at its edges get zeros written. Returns 0,
 * -EINVAL, -EIO, -ENOSPC. */
int kvc_storage_client_punch(struct kvc_storage_client *client, uint64_t inode,
                             const struct kvc_layout *layout, uint64_t offset,
                             uint64_t length, uint64_t size);

/* What a punch does (kvc_storage_client_punch computes it with this):
 * zeros written over [zero_from[i], zero_to[i]) (the partial chunks at
 * the edges; an empty range when from == to), and the whole chunks in
 * between dropped, as `ranges` CHUNK_PUNCH ranges of (first, count): a
 * count is 32 bits on the wire and a file may hold 2^32 chunks (256 TiB of
 * 64 KiB), so it may take two. Returns 0 or -EINVAL. */
struct kvc_storage_punch_plan {
	uint64_t zero_from[2], zero_to[2];
	int ranges;
	uint32_t first[2], count[2];
};
int kvc_storage_client_punch_plan(const struct kvc_layout *layout, uint64_t offset,
                                  uint64_t length, uint64_t size,
                                  struct kvc_storage_punch_plan *plan);

/* Make acknowledged writes on the layout's targets durable. */
int kvc_storage_client_sync(struct kvc_storage_client *client,
                            const struct kvc_layout *layout);

/* Capacity of all targets; a disk shared by several targets counts once
 * (with the largest reserve of its targets). Servers that do not answer
 * count as targets_down. */
int kvc_storage_client_space(struct kvc_storage_client *client,
                             struct kvc_storage_space *space);

/* One server's SPACE answer (for status tools): the target records into
 * out (capacity max). Returns the count or -errno. */
int kvc_storage_client_server_space(struct kvc_storage_client *client, uint32_t server,
                                    struct kvc_msg_target_space *out, int max);

#endif
