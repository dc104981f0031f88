/*
 * resync: a target of this server catching up with another member of its
 * chain (docs/architecture.md "Chains"). A target that comes back after a
 * failure, or a new empty one, holds an old or no copy of its chain's
 * chunks; since a target is in exactly one chain, what it must hold is
 * exactly what any up-to-date member holds. kvc_resync_target makes local
 * target t hold what source target p (another member of the same chain,
 * on another server, reached through svc->peers) holds, while writes to
 * the chain go on.
 *
 * How: pages of p's listing (CHUNK_LIST over the network) and of t's own
 * (kvc_chunk_store_list) are merged by (inode, chunk). A chunk on both
 * with equal (length, chunk_crc) is left alone; any other (missing at t,
 * different, or only at t) is "synced": t's copy is set to what p holds
 * now, read whole from p (CHUNK_READ; absent at p: dropped at t).
 * Counters (compared, copied, dropped, bytes, retries, passes: 1 once the
 * comparison ran) are in the
 * target's kvc_resync_state, read by CHUNK_RESYNC_STATUS and the metrics.
 *
 * Ordering against chain writes. Writes come down the chain head -> ...
 * -> tail; each member applies a write, then forwards it. While t is
 * syncing (state->syncing set for the whole resync):
 *   (1) every write t applies takes its chunk K in the in-flight table
 *       first and keeps it until the rest of the chain answered (a
 *       non-tail member always does; the tail does while syncing), and
 *   (2) the sync of K holds K in t's in-flight table from before its read
 *       at p until its set at t is done.
 * The chain's head lets one write of K into the chain at a time (until
 * the tail acknowledged it), so at most one write W of K is on its way
 * down while K is synced. Take the sync's read of K at p:
 *   - W reached t before the sync took K: W is applied at t and, since t
 *     keeps K until the tail answered, W is on every member (p too) before
 *     the sync can take K: p's copy includes W.
 *   - W reaches t while the sync holds K: it waits at t (1) and lands on
 *     top of the copy. If p is upstream of t, the copy may include W
 *     already: W is then applied twice at t, with the same bytes at the
 *     same offsets: the result is the same. If p is downstream of t, W
 *     has not reached p (it waits at t), so the copy does not include it.
 *     No write after W can be at p yet (the head waits for W's
 *     acknowledgement, which needs t), so the copy is never newer than W.
 *   - The tail raced with setting the flag (it applied W without (1) just
 *     as the resync started): the copy is p's state with or without W and
 *     t's chunk lock orders W's apply and the set: W before the set is
 *     overwritten by a copy that includes it (p is upstream of the tail),
 *     W after the set re-applies W: the same either way.
 * So after the sync of K, t's K equals p's K once W (if any) is done, and
 * every later write reaches t through the chain. Every chunk is synced or
 * found equal once per pass, so at the end t holds what p holds, but for
 * writes in flight, which land on both.
 *
 * Writes under an older table. The proof above takes every write that
 * reaches p to come down the chain through t. A write W the head took
 * under the table before t joined does not: it goes to p and never to t.
 * So p's listing (CHUNK_LIST with KVC_CHUNK_LIST_AT_VERSION) is read only
 * once p follows the resync's table (else -ESTALE: the resync fails and
 * runs again on a later heartbeat) and after a drain of p's applies
 * (inflight.h): a write checks its chain version again inside p's apply
 * gate, so W was either applied at p before the drain returned (the
 * listing shows it, or a sync copies it) or is refused -ESTALE there and
 * sent again by its client under the new table, through t. Range
 * operations take the same gate. (A CI run of the netns tests once lost
 * an acknowledged rewrite after a chain's tail was killed and brought back
 * under a rewrite load; this window is the one that explains it.)
 *
 * Changes at t under an older table. A request t checked against a
 * table from before it joined (a write or range operation its sender gave
 * up on, delivered late by TCP retransmission once the link came back)
 * may be inside t's apply gate when the resync starts: applied after t
 * listed K equal to p's, it would leave t different for good. So before
 * its first listing the resync checks that t follows the resync's table
 * (-ESTALE else) and drains t's applies too: such a change is in t's
 * listing, or was refused -ESTALE by its check inside the gate. A repair
 * of a chunk at t (repair.c: a copy read from another member under the
 * table it knew) is set the same way, inside the gate with its version
 * checked again.
 *
 * A read of p's K may find a write in flight at p (-EAGAIN: p is not the
 * tail): the sync lets K go (a write waiting for K at t must get through,
 * or the chain deadlocks: W holds K at p until t answers) and tries again
 * shortly, up to RESYNC_RETRY_MS in all.
 *
 * Range operations (CHUNK_REMOVE, TRUNCATE, PUNCH) come down the chain
 * as writes do (wire version 12) and hold the chunks they change in the
 * in-flight table where writes hold their chunk (every member of a chain
 * of several, the tail while syncing), so the argument above holds for
 * them with "a range operation over K" for "a write of K": a sync of K
 * waits for a range operation over K held at t, and one waits for the
 * sync. (Before,
 * clients sent them to every member one after another, and a copy read at
 * p before p's remove could be set at t after t's: each resync compared
 * again while they came, and a client stalled between its calls could
 * still bring a removed chunk back.)
 *
 * Reads: while syncing, t answers reads of its chunks with -EAGAIN (the
 * reader asks another member): t serves reads again only once caught up.
 * When a resync fails (p unreachable, a stale chain version, a disk
 * error) the flag is cleared and the target serves as before (with what
 * it had plus what the resync copied), and the state says FAILED with the
 * error: the caller runs it again.
 *
 * Threads: kvc_resync_target runs on the caller's thread (one resync of a
 * target at a time: the syncing flag); kvc_resync_start runs it on
 * a detached thread of its own. Locks: none of its own; the in-flight
 * entry of K is taken before K's chunk lock (as chain_write does) and no
 * chunk lock is held across the network read.
 */
#ifndef KVC_STORAGE_RESYNC_H
#define KVC_STORAGE_RESYNC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

struct kvc_storage_service;

#define RESYNC_RETRY_MS 30000
#define RESYNC_PAGE 4096 /* listing entries per page */

/* One target's resync state; lives in the service (all zero: never ran). */
struct kvc_resync_state {
	atomic_bool syncing;        /* a resync runs: writes hold their chunk, reads -EAGAIN */
	/* The last (or running) resync, as CHUNK_RESYNC_STATUS tells it. */
	_Atomic uint32_t state;     /* KVC_RESYNC_* */
	_Atomic int32_t result;
	_Atomic uint32_t source, chain, chain_version, passes;
	_Atomic uint64_t compared, copied, dropped, bytes, retries;
	_Atomic int64_t started_ns, ended_ns;
	/* Since the server started, all resyncs of the target (metrics). */
	_Atomic uint64_t total_compared, total_copied, total_dropped, total_bytes;
	_Atomic uint64_t runs, failures;
};

/* Check a resync request against this server and its chain table:
 * 0, -ENXIO (target not here, chain unknown), -ESTALE (target or source
 * not a member of chain at chain_version), -EINVAL (source == target,
 * flags), -EOPNOTSUPP (a server without peers: single copy). */
int kvc_resync_check(const struct kvc_storage_service *svc,
                     const struct kvc_msg_chunk_resync *request);

/* Make local target hold what source holds (above), on this thread
 * (checked as kvc_resync_check says, by the caller). Takes the target's
 * syncing flag for the run (-EBUSY when a resync of it runs) and lets it
 * go before the state says DONE or FAILED. Returns 0, -ESTALE, -EAGAIN (range operations kept
 * coming; a write in flight at the source for too long), a transport
 * -errno (-EIO, -ECONNREFUSED, -ETIMEDOUT: the source is unreachable), or
 * a local -errno (-ENOSPC, -EIO). */
int kvc_resync_target(struct kvc_storage_service *svc, uint32_t target, uint32_t source,
                      uint32_t chain, uint32_t chain_version);

/* Check the request, take the target's flag (-EBUSY when a resync of it
 * runs) and run the resync on a thread of its own (the flag goes with it). Returns 0 (started) or
 * -errno. */
int kvc_resync_start(struct kvc_storage_service *svc,
                     const struct kvc_msg_chunk_resync *request);

/* The state of target's last resync (-ENXIO: not here). */
int kvc_resync_status(const struct kvc_storage_service *svc, uint32_t target,
                      struct kvc_msg_resync_status *out);

#endif
