/*
 * inflight: the chain writes a storage server has applied to a chunk but
 * not yet seen acknowledged by the chain's tail (chain replication,
 * docs/architecture.md "Chains").
 *
 * Two uses, one table keyed by (target, inode, chunk):
 *  - Order. A chain's head lets one write per chunk into the chain at a
 *    time (kvc_inflight_begin waits, bounded, for the one before), so every
 *    member applies the writes of a chunk in the same order: the next one
 *    enters only after the tail acknowledged the last.
 *  - Clean reads (CRAQ). A member other than the tail holds a chunk in the
 *    table from applying a write until the write is acknowledged, so a
 *    read that finds the chunk here (kvc_inflight_busy, asked after the
 *    read) may have seen bytes the chain has not committed: the reader asks
 *    the tail instead.
 *
 * The table's mutex is a leaf lock, held only for the lookup: nothing
 * waits on the network or a disk with it held (begin sleeps on the
 * condition variable, which releases it). Entries are freed at end.
 */
#ifndef KVC_STORAGE_INFLIGHT_H
#define KVC_STORAGE_INFLIGHT_H

#include <stdbool.h>
#include <stdint.h>

struct kvc_inflight;

int kvc_inflight_create(struct kvc_inflight **out);
void kvc_inflight_destroy(struct kvc_inflight *table);

/* Hold (target, inode, chunk): wait while another holds it, at most
 * timeout_ms. Returns 0, -ETIMEDOUT or -ENOMEM. */
int kvc_inflight_begin(struct kvc_inflight *table, uint32_t target, uint64_t inode,
                       uint32_t chunk, int timeout_ms);
/* Release what begin held. */
void kvc_inflight_end(struct kvc_inflight *table, uint32_t target, uint64_t inode,
                      uint32_t chunk);
/* Whether a write of (target, inode, chunk) is in flight. */
bool kvc_inflight_busy(struct kvc_inflight *table, uint32_t target, uint64_t inode,
                       uint32_t chunk);

#endif
