/*
 * transport: how chunk bytes move between the storage client and one
 * storage server. The read and write paths (storage_read.c,
 * storage_client.c) decide what to ask of which replica, settle each
 * piece's result and fail over; a transport only moves a request's bytes:
 *
 *   connect   whether (and how) a server can be reached this way
 *             (kvc_transport_place_ready: lazily, once per server);
 *   register  make client memory (a region) known to the server, once;
 *   post      send a read or write request: for a read, the pieces and
 *             where each piece's bytes go; for a write, where its bytes
 *             come from;
 *   complete  receive the answer: the piece results, and, for TCP, each
 *             piece's bytes (read_data).
 *
 * Two implementations:
 * - TCP (transport_tcp.c): CHUNK_READ / CHUNK_WRITE on the server's pooled
 *   TCP connections; bytes travel in the frames' data sections.
 * - Same-host placement (transport_place.c): when the server runs on
 *   this host (its address is local and its PLACE_HELLO host identity,
 *   core/host_id.h, equals ours), the client passes a region's shared
 *   memory fd to the server once (PLACE_REGISTER over the server's
 *   abstract Unix socket, authenticated like every connection and checked
 *   with SO_PEERCRED), and PLACE_READ / PLACE_WRITE name (region, offset,
 *   length): the server copies chunk bytes straight into, or out of, that
 *   memory (src/storage/place.h). No bytes cross a socket.
 * Local reads (transport_local.h) are no transport: where a same-host
 * target is its chain's only copy, kvc-fuse reads its cached chunks
 * itself and sends a piece by placement only when it cannot.
 * An RDMA transport would be a third file with the same operations:
 * register = ibv_reg_mr of the region (rkey and address sent to the
 * server once), post = a request naming (rkey, address) per piece, the
 * server's one-sided RDMA WRITE (reads) or READ (writes) over an RC QP,
 * complete = its answer after the transfer's completion.
 *
 * A transport failure (the socket broke, the server does not know the
 * region, the server is not on this host after all) is the transport's
 * fault, not the data's: the request runs again over TCP and placement to
 * that server pauses for a few seconds (then reconnects and registers
 * again). A placed write whose answer timed out is not sent again: the
 * server may still apply it later, after a newer write of its range; it
 * fails (EIO) as a TCP write that times out does. Per-piece results
 * (crc, -ESTALE, -EAGAIN) are the same for both transports and handled
 * by the paths above as before. A piece whose region memory is gone (the
 * caller shrank it) is -EFAULT for its io.
 *
 * Thread-safe. Lock order: each server's placement lock is held across
 * its registration exchanges on the local Unix socket (bounded by the io
 * timeout) and nothing else is taken under it; the data path takes it
 * only to check a region is registered.
 */
#ifndef KVC_CLIENT_TRANSPORT_H
#define KVC_CLIENT_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

struct kvc_storage_client;
struct kvc_config;
struct kvc_rpc_pool;

enum kvc_transport_kind { KVC_TRANSPORT_TCP = 0, KVC_TRANSPORT_PLACE = 1, KVC_TRANSPORT_KINDS };

/* Caller memory a transport may move bytes into or out of directly:
 * shared memory (tmpfs or hugetlbfs) mapped at base. The owner keeps fd
 * open and the mapping alive until kvc_transport_forget_region returned. */
struct kvc_storage_region {
	uint64_t id; /* kvc_transport_region_id(): unique in this process */
	int fd;
	uint64_t file_offset; /* the region's first byte in fd */
	uint64_t size;
	uint8_t *base;
};

/* A new region id. */
uint64_t kvc_transport_region_id(void);

/* Shared memory of bytes this process owns, for placement: a memfd
 * (named name) mapped here (populate: prefaulted) as *out. Returns 0 or
 * -errno (nothing made). */
int kvc_transport_region_create(size_t bytes, const char *name, bool populate,
                                struct kvc_storage_region *out);
/* Give back what kvc_transport_region_create made: unregistered from
 * client's servers (client NULL: it was never used), unmapped, closed;
 * *region is left empty (base NULL, fd -1). A no-op on an empty one. */
void kvc_transport_region_destroy(struct kvc_storage_client *client,
                                  struct kvc_storage_region *region);

/* The client's place_epoch now (storage_client.h), and whether it moved
 * since `epoch`: memory servers placed into meanwhile must be given up
 * (kvc_transport_region_drop), never reused. */
uint64_t kvc_transport_place_epoch(struct kvc_storage_client *client);
bool kvc_transport_place_moved(struct kvc_storage_client *client, uint64_t epoch);

/* kvc_transport_region_destroy for memory given up because the client's
 * place_epoch moved while it was in use (storage_client.h): counted in
 * PREFIX_transport_place_memory_dropped_total. */
void kvc_transport_region_drop(struct kvc_storage_client *client,
                               struct kvc_storage_region *region);

/* Set up placement for client (off with config->transport_tcp_only).
 * Returns 0 or -ENOMEM. */
int kvc_transport_place_init(struct kvc_storage_client *client, const struct kvc_config *config);
void kvc_transport_place_destroy(struct kvc_storage_client *client);

/* Set up placement to server i (its address in client->server_address),
 * before client->server_count covers it: at init, and for a server a
 * newer routing table adds (storage_routing.c). A no-op without
 * placement. */
void kvc_transport_place_add_server(struct kvc_storage_client *client, uint32_t i);

/* Whether requests to server may name region: connects (and checks the
 * host) on first use, registers the region with the server once.
 * False: use TCP. */
bool kvc_transport_place_ready(struct kvc_storage_client *client, uint32_t server,
                               const struct kvc_storage_region *region);

/* The transport this process's requests to server take for registered
 * memory: "place" (a same-host server that answered its PLACE_HELLO with
 * our host identity; connects now if it has not) or "tcp". */
const char *kvc_transport_for(struct kvc_storage_client *client, uint32_t server);

/* An authenticated connection to server's placement socket from its pool
 * (*reused: an idle one), when placement to server is on, for a caller's
 * own exchange (transport_local.c's PLACE_LOCAL); given back with
 * kvc_transport_place_connection_done (healthy: in frame, reusable).
 * Returns the fd or -errno (-EOPNOTSUPP: no placement to server, ever;
 * -EAGAIN: not now). */
int kvc_transport_place_connection(struct kvc_storage_client *client, uint32_t server,
                                   bool *reused);
void kvc_transport_place_connection_done(struct kvc_storage_client *client, uint32_t server,
                                         int fd, bool healthy);

/* A placement request failed for the transport's sake: stop placing on
 * server for a few seconds (its registrations are dropped). */
void kvc_transport_place_failed(struct kvc_storage_client *client, uint32_t server, int rc);

/* The region is going away: unregister it from every server. */
void kvc_transport_forget_region(struct kvc_storage_client *client,
                                 const struct kvc_storage_region *region);

/* A transport's operations (transport.c dispatches on the kind). */
struct kvc_transport_request;
struct kvc_transport_ops {
	const char *name;
	struct kvc_rpc_pool *(*pool)(struct kvc_storage_client *client, uint32_t server);
	int (*read_post)(struct kvc_storage_client *client, struct kvc_transport_request *t,
	                 const struct kvc_msg_piece *pieces, uint32_t count,
	                 const struct kvc_storage_region *region,
	                 const struct kvc_msg_place_span *spans, uint32_t span_count);
	uint16_t read_type; /* the answer's message type */
	bool data_inline;   /* read bytes come in the answer's data section */
	int (*write_post)(struct kvc_storage_client *client, struct kvc_transport_request *t,
	                  const struct kvc_msg_chunk_write *msg, const void *data,
	                  uint32_t length, const struct kvc_storage_region *region,
	                  uint64_t region_offset);
	uint16_t write_type;
};
extern const struct kvc_transport_ops kvc_transport_tcp_ops;
extern const struct kvc_transport_ops kvc_transport_place_ops;

/* One request on one connection of a transport. */
struct kvc_transport_request {
	enum kvc_transport_kind kind;
	uint32_t server;
	int fd;
	bool reused;
	uint64_t id;
};

/* post: a read of count pieces (TCP: into the data section; placement:
 * into region at the spans, each piece's in order: wire_storage.h's
 * PLACE_READ). Returns 0 or a transport -errno. */
int kvc_transport_read_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                            const struct kvc_msg_piece *pieces, uint32_t count,
                            const struct kvc_storage_region *region,
                            const struct kvc_msg_place_span *spans, uint32_t span_count);
/* complete: the answer's header and piece results (count of them; a
 * whole-request error has none: *status). Returns 0 or -errno (-EBADMSG
 * for a malformed answer). */
int kvc_transport_read_complete(struct kvc_transport_request *t, uint32_t count,
                                struct kvc_msg_piece_result *results, int32_t *status,
                                uint64_t *data_len);
/* The bytes of a piece answered ok: TCP receives them into dst;
 * placement has them in place already. Returns 0 or -errno. */
int kvc_transport_read_data(struct kvc_transport_request *t, void *dst, uint32_t length);

/* post a write of length bytes (TCP: data; placement: region at
 * region_offset). Returns 0 or a transport -errno. */
int kvc_transport_write_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                             const struct kvc_msg_chunk_write *msg, const void *data,
                             uint32_t length, const struct kvc_storage_region *region,
                             uint64_t region_offset);
/* complete a write: 1 (answered ok, connection reusable), the server's
 * -errno, or a transport -errno. */
int kvc_transport_write_complete(struct kvc_transport_request *t);

/* Give the request's connection back (healthy) or close it. */
void kvc_transport_done(struct kvc_storage_client *client, struct kvc_transport_request *t,
                        bool healthy);
/* Close the idle connections of the request's transport to its server. */
void kvc_transport_drain(struct kvc_storage_client *client, struct kvc_transport_request *t);

/* Register PREFIX_transport_requests_total{transport},
 * PREFIX_transport_bytes_total{transport},
 * PREFIX_transport_place_fallbacks_total,
 * PREFIX_transport_place_epoch_total,
 * PREFIX_transport_place_memory_dropped_total and local reads' counters
 * (transport_local.h) in registry. Returns 0 or -ENOMEM. */
struct kvc_metrics;
int kvc_transport_metrics(struct kvc_storage_client *client, struct kvc_metrics *registry,
                          const char *prefix);

#endif
