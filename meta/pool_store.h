/*
 * pool_store: kvc-meta's page pools for inference KV caches. A pool is
 * (namespace, rank) with num_pages pages of one big per-rank file; a key
 * (a block hash) gets one page on each rank of the namespace's tensor-
 * parallel world and is complete once every rank confirmed its write.
 * Only complete keys exist for readers.
 *
 * Rules it keeps (each one is a unit test):
 * - accounting: for every pool, free pages + used pages == num_pages,
 *   after every operation and after any crash (one LMDB transaction per
 *   batch, committed before the caller answers);
 * - a page belongs to at most one key; a key reuses its page when asked
 *   again (a confirmed key consumes nothing; a racing writer gets the
 *   same unconfirmed page);
 * - releasing after a failed write frees a page only while it is still
 *   allocated, unconfirmed, to some key; confirmed pages never;
 * - eviction (when a pool is full) takes least recently used complete
 *   keys, never one under a read lease; a deleted or cleared key that is
 *   leased is retired (invisible, pages kept) until its lease ends.
 *
 * On disk: an LMDB environment of its own (directory `pools` in the meta
 * data directory), databases (keys are namespace, NUL, then big-endian
 * integers or the key's bytes):
 *   worlds  ns                 -> struct pool_world (world size, counters);
 *           "\0format"         -> u32 KVC_POOL_FORMAT
 *   pools   ns,rank            -> struct pool_info (num_pages, free)
 *   free    ns,rank,page       -> (1 byte) the page is free
 *   pages   ns,rank,page       -> key bytes: who holds the page
 *   keys    ns,key             -> key record: head + per-rank (page, state)
 *   lru     ns,seq             -> key bytes: complete or retired keys by
 *                                 last use (retired keys sort first)
 *   bindings ns,rank           -> the pool's file: inode, page size, path
 *   punch   ns,rank,page       -> (1 byte) a free page of a bound pool whose
 *                                 bytes are still to be punched out
 *   punching ns,rank,page      -> (1 byte) taken out of the free list while
 *                                 the collector punches it
 * (bindings, punch and punching were added without a format change: older
 * stores get them empty.) With a binding, accounting reads free + used +
 * punching == num_pages.
 *
 * Durability: MDB_NOSYNC (not MDB_WRITEMAP: a writable map faults with
 * SIGBUS when the disk is full, where LMDB's writes return ENOSPC, and
 * kvc-meta must survive a full disk), so a kill -9 loses nothing
 * committed; kvc_pool_store_sync is a checkpoint (core/lmdb_checkpoint.h)
 * that a machine crash goes back to, consistent, losing at most what was
 * committed after it (kvc-meta takes one every sync_interval_ms).
 *
 * Waiting for keys to become complete (kvc_pool_wait) sleeps until a
 * confirm or clear of the namespace wakes it (meta/pool_store_wait.c).
 *
 * Thread-safe (LMDB serializes writers). Times are passed in (now_ms, on
 * the pool clock: kvc_pool_now_ms) so tests can move time.
 *
 * The pool clock counts milliseconds with CLOCK_MONOTONIC while the store
 * is open, so a step of the wall clock (NTP, an administrator) neither
 * ends a lease early nor stretches one. Its reading is saved in the store
 * ("\0clock" in `worlds`) at every kvc_pool_store_sync and at close, and
 * a reopened store goes on from the saved reading: lease deadlines stay
 * meaningful across a restart or a reboot (where CLOCK_MONOTONIC starts
 * again from zero), time while kvc-meta was down does not count (a lease
 * granted before a crash lasts its full length after it, plus at most one
 * sync interval), and the clock never goes back. A store without a saved
 * reading (a new one, or one written before the pool clock, whose lease
 * times are wall-clock milliseconds) starts from the wall clock.
 *
 * The implementation is one file per concept (meta/pool_store*.c);
 * meta/pool_store_internal.h lists them and holds what they share.
 */
#ifndef KVC_POOL_STORE_H
#define KVC_POOL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* After a reboot every namespace's lease numbers jump by this much: more
 * than a sync interval gives out, past any a reader that outlived the
 * crash still holds (a machine crash takes the store back to its last
 * checkpoint, and the counter with it). */
#define KVC_POOL_LEASE_REBOOT_GAP (1u << 24)

#define KVC_POOL_MAX_NAMESPACE 64
#define KVC_POOL_MAX_KEY 400
#define KVC_POOL_MAX_WORLD 256
#define KVC_POOL_MAX_PAGES (1u << 24)
#define KVC_POOL_MAX_BATCH 4096
#define KVC_POOL_FORMAT 2 /* changes with any record layout below (2: leases' readers) */
#define KVC_POOL_MAX_PATH 400 /* of a bound file, in the namespace */
#define KVC_POOL_MAX_PAGE_SIZE (1ull << 30)
#define KVC_POOL_MAX_WAIT_KEYS KVC_POOL_MAX_BATCH /* keys of one wait */
#define KVC_POOL_MAX_WAIT_MS 600000u /* a wait's longest timeout (10 min) */
#define KVC_POOL_MAX_WAITS 256 /* waits in progress at once, per store */
#define KVC_POOL_WAIT_MAX_ENDS 2 /* end fds of one wait */

struct kvc_pool_store;

/* A key as bytes (not NUL-terminated). */
struct kvc_pool_key {
	const char *bytes;
	uint32_t length;
};

struct kvc_pool_allocation {
	int64_t page;  /* -1: the pool is full and nothing can be evicted */
	bool already;  /* the key is confirmed on this rank: its page, no write needed */
};

struct kvc_pool_stats {
	uint32_t world_size;     /* 0: not known (inferred from initialized ranks) */
	uint32_t ranks;          /* initialized pools of the namespace */
	uint64_t num_pages;      /* of this rank */
	uint64_t free_pages;
	uint64_t keys;           /* records of the namespace (any state) */
	uint64_t complete_keys;
	uint64_t leased_keys;
	uint64_t retired_keys;
	uint64_t evictions;
};

/* Open (creating) the store in dir. Returns 0, -EINVAL (another format),
 * -errno. */
int kvc_pool_store_open(const char *dir, struct kvc_pool_store **out);
/* The same with a map of map_bytes (the store's size limit; open uses 32
 * GiB): calls that would grow it past that answer -ENOSPC. */
int kvc_pool_store_open_sized(const char *dir, uint64_t map_bytes,
                              struct kvc_pool_store **out);
void kvc_pool_store_close(struct kvc_pool_store *store);
/* Save the pool clock, then take a checkpoint: every transaction
 * committed before the call is durable when it returns 0. */
int kvc_pool_store_sync(struct kvc_pool_store *store);
/* The pool clock now (ms; see above). */
uint64_t kvc_pool_now_ms(struct kvc_pool_store *store);

/* Create the pool (ns, rank) with num_pages, or accept a repeat with the
 * same count; a larger count grows it. world_size > 0 sets the namespace's
 * world (-EINVAL when it differs from a world set before). Errors: -EINVAL
 * (bad names, zero or too many pages, shrinking), -ENOSPC, -EIO. */
int kvc_pool_init(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                  uint32_t num_pages, uint32_t world_size);

/* Set a namespace's world size, or change it while it has no key
 * (-EBUSY otherwise; -EINVAL when initialized pools lie outside it). */
int kvc_pool_set_world(struct kvc_pool_store *store, const char *ns, uint32_t world_size);

/* Allocate a page per key on rank (see the rules above). -ENOENT when the
 * pool does not exist; -EINVAL for a bad key (empty, too long, starting
 * with byte 1). */
int kvc_pool_allocate(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                      const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms,
                      struct kvc_pool_allocation *out);

/* Confirm (key, page) writes on rank; then release pages whose writes
 * failed. statuses (may be NULL) gets 0, or -ESTALE when the key does not
 * hold that page on that rank (nothing changes for it). */
int kvc_pool_confirm(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                     const struct kvc_pool_key *keys, const int64_t *pages, uint32_t count,
                     const int64_t *release, uint32_t release_count, uint64_t now_ms,
                     int *statuses);

/* Whether each key is complete. Counts hits and misses. */
int kvc_pool_exists(struct kvc_pool_store *store, const char *ns,
                    const struct kvc_pool_key *keys, uint32_t count, bool *out);

struct pollfd;

/* Wait until every key is complete (confirmed on every rank of the
 * namespace's world), for at most timeout_ms (<= KVC_POOL_MAX_WAIT_MS; 0:
 * look once). A confirm that completes a key of ns wakes the wait: no
 * polling. complete[i]: keys[i] was seen complete during the wait (a key
 * evicted or deleted after that still counts; readers ask locations).
 * ends (nends <= KVC_POOL_WAIT_MAX_ENDS, may be NULL): fds whose events
 * end the wait early (a peer's socket with POLLRDHUP, a stop eventfd with
 * POLLIN). Returns 0 (all complete), or with complete[] filled -ETIMEDOUT
 * (the timeout came first) or -ECANCELED (a clear of ns ran meanwhile);
 * or -ECONNABORTED (an end fd fired), -ESHUTDOWN (the store is closing),
 * -EBUSY (KVC_POOL_MAX_WAITS waits in progress), -ENOENT (no pool of ns
 * was ever initialized), -EINVAL (bad namespace, key, count or timeout),
 * -ENOMEM, -EIO. Holds no lock and no transaction while it sleeps. */
int kvc_pool_wait(struct kvc_pool_store *store, const char *ns,
                  const struct kvc_pool_key *keys, uint32_t count, uint32_t timeout_ms,
                  const struct pollfd *ends, int nends, bool *complete);

/* The page of each complete key on rank (-1 otherwise); each found key is
 * touched (LRU) and leased until now_ms + lease_ms (0: no lease). A key's
 * lease is shared by its readers: one given while it is held joins it
 * (and stretches it). leases (optional): per key the lease's number, for
 * kvc_pool_release_leases (0: not leased). */
int kvc_pool_locations(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                       const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms,
                       uint32_t lease_ms, int64_t *pages, uint32_t *leases);

/* A reader is done with keys it leased (leases: the numbers locations
 * gave). held[i] says whether key i's lease was still held, that is,
 * whether no eviction, delete or clear could have given its pages to
 * another key since locations answered: a read that ended before its
 * release saw held read the key's own bytes. A held lease loses this
 * reader and ends when it was the last (evictions may take the key at
 * once); a lease that ended, or a later lease than the one named, is left
 * alone. Returns how many were held. */
int kvc_pool_release_leases(struct kvc_pool_store *store, const char *ns,
                            const struct kvc_pool_key *keys, const uint32_t *leases,
                            uint32_t count, uint64_t now_ms, bool *held);

/* Delete keys (all ranks). Leased ones are retired until their lease ends.
 * Returns how many keys existed. */
int kvc_pool_delete(struct kvc_pool_store *store, const char *ns,
                    const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms);

/* Delete every key of the namespace (leased ones retired); pools stay.
 * Runs in transactions of a few thousand keys, so writers are not held
 * up: keys added meanwhile may survive. */
int kvc_pool_clear(struct kvc_pool_store *store, const char *ns, uint64_t now_ms);

/* One step of a clear: delete up to max live keys of ns in one
 * transaction; *left tells whether any remain. For callers that must
 * answer within a bound (the binary protocol). */
int kvc_pool_clear_some(struct kvc_pool_store *store, const char *ns, uint64_t now_ms, int max,
                        bool *left);

/* Counts of a pool and its namespace (walks the namespace's keys: for
 * administration, not for every request). */
int kvc_pool_stats(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                   uint64_t now_ms, struct kvc_pool_stats *out);

/* Whether the pool (ns, rank) exists: 0 (and its page counts), -ENOENT.
 * One lookup. */
int kvc_pool_info(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                  uint32_t *num_pages, uint32_t *free_pages);

/* A key as listed: its bytes and state. */
struct kvc_pool_key_info {
	char bytes[KVC_POOL_MAX_KEY];
	uint32_t length;
	uint32_t world;
	uint32_t confirmed;   /* ranks that confirmed */
	bool complete;
	uint64_t lease_until; /* ms, 0: none */
};

/* List up to max live keys of ns that sort after `after` (length 0: from
 * the first), in byte order. Returns the count; *more tells if more follow. */
int kvc_pool_keys(struct kvc_pool_store *store, const char *ns,
                  const struct kvc_pool_key *after, uint32_t max,
                  struct kvc_pool_key_info *out, bool *more);

/* Give back the pages of retired keys whose lease ended (up to 4096 keys
 * per namespace per call; kvc-meta calls it every sync interval). Returns
 * how many keys were freed. */
int kvc_pool_sweep(struct kvc_pool_store *store, uint64_t now_ms);

/* Visit every pool: fn(arg, ns, rank, num_pages, free_pages); stop on
 * non-zero. */
int kvc_pool_list(struct kvc_pool_store *store,
                  int (*fn)(void *arg, const char *ns, uint32_t rank, uint32_t num_pages,
                            uint32_t free_pages),
                  void *arg);

/* A pool's file: page p is bytes p * page_size .. (p + 1) * page_size of
 * inode (path: as the administrator named it, for display). */
struct kvc_pool_binding {
	uint64_t inode;
	uint64_t page_size;
	uint64_t punch_pending; /* out: freed pages not punched yet */
	char path[KVC_POOL_MAX_PATH + 1];
};

/* Bind the pool (ns, rank) to a file, or unbind it (binding NULL). From
 * then on, pages freed by delete, clear, eviction or release are punched
 * out of the file by kvc-meta's collector (the space goes back to the
 * storage servers); a page taken again before that is not punched.
 * -ENOENT (no such pool), -EINVAL. */
int kvc_pool_bind(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                  const struct kvc_pool_binding *binding);
/* The binding of (ns, rank): 0, -ENOENT (not bound). */
int kvc_pool_binding_get(struct kvc_pool_store *store, const char *ns, uint32_t rank,
                         struct kvc_pool_binding *out);

/* For the collector: a page whose bytes are to be punched. */
struct kvc_pool_punch {
	char ns[KVC_POOL_MAX_NAMESPACE + 1];
	uint32_t rank;
	uint32_t page;
	uint64_t inode;
	uint64_t page_size;
};

/* Take up to max listed pages out of their free lists (no writer can get
 * them now). Returns the count. Every taken page must be handed to
 * kvc_pool_punch_done (a crash before that puts them back at open). */
int kvc_pool_punch_take(struct kvc_pool_store *store, struct kvc_pool_punch *out, int max);
/* Give taken pages back to their free lists; those not punched[i] are
 * listed again (still bound) for a later pass. */
int kvc_pool_punch_done(struct kvc_pool_store *store, const struct kvc_pool_punch *punches,
                        int count, const bool *punched);

/* Cross-check page accounting: free + used == num_pages per pool, every
 * used page held by a key that names it, every key's page mapped back.
 * Returns the number of problems found; with repair, fixes them (pages
 * nobody holds become free, dangling records go). */
int64_t kvc_pool_fsck(struct kvc_pool_store *store, bool repair);

#endif
