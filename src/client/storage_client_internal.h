/*
 * storage_client_internal.h: what the files of the storage client share
 * (storage_client.c: set-up, writes and the per-target operations;
 * storage_read.c: reads; storage_routing.c: the chain table and the
 * manager's routing). Not an interface: only those files include it.
 */
#ifndef KVC_STORAGE_CLIENT_INTERNAL_H
#define KVC_STORAGE_CLIENT_INTERNAL_H

#include "client/storage_client.h"
#include "core/layout.h"

/* Map transport failures to -EIO; keep what a server answered. */
int kvc_storage_client_error(int rc);
/* A connection that broke because its server restarted (reused, reset). */
bool kvc_storage_client_retryable(int rc, bool reused);
/* Record the first failure of an io (receiving threads may race here). */
void kvc_storage_io_fail(struct kvc_storage_io *io, int rc);

/* Walk every chunk piece of every valid io, in order, calling fn (each
 * io's result is set to its check's first). */
typedef int (*kvc_storage_piece_fn)(void *arg, struct kvc_storage_io *io, uint32_t io_index,
                                    const struct kvc_layout_piece *piece);
int kvc_storage_client_for_each_piece(struct kvc_storage_client *client,
                                      struct kvc_storage_io *ios, int count,
                                      kvc_storage_piece_fn fn, void *arg);

/* Run a batch (run: one try over the table in use); when the client
 * follows the managers and ios failed for what a new table may cure,
 * wait for the table to change (kvc_storage_client_patience_ns in all)
 * and run those again. Returns 0 or the first io's error. */
int kvc_storage_client_with_routing(struct kvc_storage_client *client,
                                    struct kvc_storage_io *ios, int count,
                                    int (*run)(struct kvc_storage_client *client,
                                               struct kvc_storage_io *ios, int count));

/* How long an operation waits out a failure for a new routing table. */
int64_t kvc_storage_client_patience_ns(const struct kvc_storage_client *client);

/* Zero dst, memory another process may shrink under us (a USRBIO iov):
 * the kernel writes the zeros, so a page gone is -EFAULT, not SIGBUS.
 * Returns 0 or -EFAULT. */
int kvc_storage_zero_fill(uint8_t *dst, size_t len);

/* Reads avoid a server that just failed them this long. */
#define KVC_STORAGE_AVOID_NS (2ll * 1000 * 1000 * 1000)

#endif
