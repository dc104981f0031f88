/*
 * inflight: the chain writes a storage server has applied to a chunk but
 * not yet seen acknowledged by the chain's tail (chain replication,
 * docs/architecture.md "Chains").
 *
 * Two uses, one table keyed by (target, inode, chunk), where a range
 * operation (remove, truncate, punch) holds the chunks it changes (a
 * punch its chunks, a truncate every chunk from the one its size falls
 * in, a remove all):
 *  - Order. A chain's head lets one write per chunk, or one range
 *    operation over it, into the chain at a time (kvc_inflight_begin and
 *    _begin_range wait, bounded, for what holds it before), so every
 *    member applies the changes of a chunk in the same order: the next one
 *    enters only after the tail acknowledged the last. A range hold goes
 *    in before it waits for the range's chunks to drain, so a stream of
 *    writes cannot starve it; writes to chunks outside it go on.
 *  - Clean reads (CRAQ). A member other than the tail holds a chunk in the
 *    table from applying a write until the write is acknowledged, so a
 *    read that finds the chunk here (kvc_inflight_busy, asked after the
 *    read) may have seen bytes the chain has not committed: the reader asks
 *    the tail instead.
 *
 * And applies, per target (a third use): a write or range operation checks
 * its chain version and changes the target's chunks between
 * kvc_inflight_apply_enter and _leave (never across network I/O), so once
 * this server follows a new table, kvc_inflight_apply_drain waits out every
 * change still made under an older version. A resync lists its source only
 * after such a drain there (resync.h): what the listing shows then holds
 * every write the source took under a version the syncing target was not
 * part of.
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
/* A range operation's hold of chunks first..last (inclusive) of
 * (target, inode): wait for another range hold over any of them, then for
 * every chunk of the range held, at most timeout_ms in all; no chunk of
 * the range can be taken meanwhile. Returns 0 with *hold (given to
 * _end_range, which releases exactly it), or -ETIMEDOUT, -ENOMEM, -EINVAL
 * (first > last) with *hold NULL. */
struct kvc_inflight_hold;
int kvc_inflight_begin_range(struct kvc_inflight *table, uint32_t target, uint64_t inode,
                             uint32_t first, uint32_t last, int timeout_ms,
                             struct kvc_inflight_hold **hold);
/* Release a hold (NULL: nothing). */
void kvc_inflight_end_range(struct kvc_inflight *table, struct kvc_inflight_hold *hold);
/* Whether a write of (target, inode, chunk), or a range operation over
 * it, is in flight. */
bool kvc_inflight_busy(struct kvc_inflight *table, uint32_t target, uint64_t inode,
                       uint32_t chunk);

/* An apply of target: a ticket for _leave. Cannot fail. */
unsigned kvc_inflight_apply_enter(struct kvc_inflight *table, uint32_t target);
void kvc_inflight_apply_leave(struct kvc_inflight *table, uint32_t target, unsigned ticket);
/* Wait until every apply of target that entered before this call left,
 * at most timeout_ms. Returns 0 or -ETIMEDOUT. */
int kvc_inflight_apply_drain(struct kvc_inflight *table, uint32_t target, int timeout_ms);

#endif
