/*
 * storage_target: requests to one named target of a cluster (not a file's
 * byte range): a page of its chunk listing, one whole chunk read from it,
 * and any small message for its server. kvc-storage's resync
 * (storage/resync.h) compares and copies through them; kvc-admin starts
 * and watches a resync through them. Connections come from the storage
 * client's per-server pools (thread-safe); a connection that broke
 * because its server restarted is retried once, as storage_client's.
 */
#ifndef KVC_STORAGE_TARGET_H
#define KVC_STORAGE_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#include "client/storage_client.h"

/* One exchange without data sections with the server of target: as
 * kvc_rpc_call. -EINVAL for a target the cluster does not have. */
int kvc_storage_target_call(struct kvc_storage_client *client, uint32_t target, uint16_t type,
                            const void *body, uint32_t body_len, void *reply,
                            uint32_t reply_cap, uint32_t *reply_len);

/* The same for a request that may be applied twice (a range operation):
 * when the connection reset under it (its server restarted unseen, the
 * request perhaps delivered), the server's pooled connections are dropped
 * and it is sent once more on a fresh one. A SYNC's answer is awaited up
 * to KVC_STORAGE_SYNC_WAIT_MS past io_timeout_ms: the writeback of a large
 * write (up to the kernel's dirty limit, a fifth of memory by default, at
 * disk speed) takes longer than a request should. Without a manager a
 * server that hangs costs an fsync that minute, then EIO; with one, the
 * wait ends (-ETIMEDOUT) at the first io_timeout_ms slice after the
 * target left the routing table (a server that stops heartbeating leaves
 * its chains within failure_timeout_ms), and a server that heartbeats
 * while it writes back is waited for. */
#define KVC_STORAGE_SYNC_WAIT_MS (60 * 1000)
int kvc_storage_target_call_idempotent(struct kvc_storage_client *client, uint32_t target,
                                       uint16_t type, const void *body, uint32_t body_len,
                                       void *reply, uint32_t reply_cap, uint32_t *reply_len);

/* CHUNK_LIST: up to max (<= KVC_WIRE_MAX_CHUNK_LIST) chunks of target,
 * a member of chain at version there (KVC_CHUNK_LIST_AT_VERSION: its
 * older writes done first, wire.h), after (inode, chunk) (after false:
 * from the first) into out; *more as the reply says. Returns the count,
 * the server's -errno (-ESTALE: not at that version), a transport -errno,
 * or -EBADMSG (a reply that breaks the format or the order). */
int kvc_storage_target_list(struct kvc_storage_client *client, uint32_t target,
                            uint32_t chain, uint32_t version, bool after, uint64_t inode,
                            uint32_t chunk, struct kvc_msg_chunk_entry *out, uint32_t max,
                            bool *more);

/* Read chunk (inode, chunk) of target, a member of chain at version,
 * whole (at most cap bytes, cap <= KVC_LAYOUT_MAX_CHUNK) into buf:
 * *present bytes came (0: the target has no such chunk, or it is empty).
 * Returns 0, the piece's -errno (-EAGAIN: a write of it is in flight
 * there; -ESTALE; -EIO: crc mismatch), a transport -errno, -EBADMSG. */
int kvc_storage_target_read_chunk(struct kvc_storage_client *client, uint32_t target,
                                  uint32_t chain, uint32_t version, uint64_t inode,
                                  uint32_t chunk, void *buf, uint32_t cap, uint32_t *present);

#endif
