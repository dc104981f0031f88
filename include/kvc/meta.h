/*
 * kvc/meta.h: the page pools of kvc-meta for inference engines, over the
 * binary protocol (faster than its HTTP routes; same semantics). A pool is
 * (namespace, rank) with num_pages pages of one per-rank file; a key gets
 * one page per rank and is complete once every rank of the namespace's
 * world confirmed its write. docs/pools.md explains the rules.
 *
 * Thread-safe: a handle keeps a pool of connections. Every function
 * returns 0 (or a count) on success and -errno on failure: -ENOENT (pool
 * not initialized), -EINVAL (bad namespace, key, count or world),
 * -EMSGSIZE (batch too large for one request), -ECONNREFUSED / -ETIMEDOUT
 * / -EIO (kvc-meta unreachable), -EACCES (no or a wrong pool secret, or
 * a message the secret does not open, or a kvc-meta that could not prove
 * it holds the secret).
 */
#ifndef KVC_META_H
#define KVC_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

#define KVC_META_MAX_BATCH 4096
#define KVC_META_MAX_KEY 400
#define KVC_META_MAX_WAIT_KEYS 4096    /* keys of one kvc_meta_wait */
#define KVC_META_MAX_WAIT_MS 600000u   /* its longest timeout */

struct kvc_meta;

struct kvc_meta_key {
	const char *bytes;
	uint32_t length;
};

struct kvc_meta_pool_stats {
	uint32_t world_size; /* 0: inferred from the initialized ranks */
	uint32_t ranks;
	uint64_t num_pages;
	uint64_t free_pages;
	uint64_t keys;
	uint64_t complete_keys;
	uint64_t leased_keys;
	uint64_t retired_keys;
	uint64_t evictions;
};

struct kvc_meta_pool_entry {
	char ns[64];
	uint32_t rank;
	uint32_t num_pages;
	uint32_t free_pages;
	uint32_t reserved;
};

/* Connect to kvc-meta at "host:port", proving pool_secret: the text of
 * the cluster's pool_secret_file (a trailing newline is ignored; NULL or
 * "": no credentials, which kvc-meta refuses). Or to the kvc-meta a
 * cluster file names, proving its pool secret (or, for a user who can
 * read only that, its cluster secret). Connections open lazily, so a
 * refused secret shows as -EACCES from the first call. Returns 0,
 * -ENOMEM, -EINVAL (a secret of the wrong length) or the errors of
 * reading the cluster file and the secret (-ENOENT, -EACCES, -EINVAL). */
int kvc_meta_open(struct kvc_meta **out, const char *address, const char *pool_secret);
int kvc_meta_open_config(struct kvc_meta **out, const char *config_path);
void kvc_meta_close(struct kvc_meta *meta);

int kvc_meta_pool_init(struct kvc_meta *meta, const char *ns, uint32_t rank,
                       uint32_t num_pages, uint32_t world_size);
int kvc_meta_pool_set_world(struct kvc_meta *meta, const char *ns, uint32_t world_size);

/* pages[i]: the page of keys[i] on rank, -1 when the pool is full and
 * nothing can be evicted; already[i] (may be NULL): confirmed before. */
int kvc_meta_allocate(struct kvc_meta *meta, const char *ns, uint32_t rank,
                      const struct kvc_meta_key *keys, uint32_t count, int64_t *pages,
                      bool *already);
/* Confirm written (key, page) pairs, then release the pages of failed
 * writes. statuses (may be NULL): 0 or -ESTALE per key. */
int kvc_meta_confirm(struct kvc_meta *meta, const char *ns, uint32_t rank,
                     const struct kvc_meta_key *keys, const int64_t *pages, uint32_t count,
                     const int64_t *release, uint32_t release_count, int *statuses);
int kvc_meta_exists(struct kvc_meta *meta, const char *ns, const struct kvc_meta_key *keys,
                    uint32_t count, bool *out);
/* Wait until every key is complete (confirmed on every rank of ns's
 * world), for at most timeout_ms (<= KVC_META_MAX_WAIT_MS; 0: look once):
 * the decode side of a prefill/decode handoff. kvc-meta answers as soon
 * as the last rank confirms, without polling. complete[i]: keys[i] was
 * seen complete. Returns how many keys are complete (count: all; fewer:
 * the timeout came first, and complete[] names the missing ones), or
 * -ECANCELED (ns was cleared during the wait), -EBUSY (too many waits in
 * progress in kvc-meta: 256), -ENOENT (no pool of ns was initialized),
 * -EINVAL (over KVC_META_MAX_WAIT_KEYS keys, a timeout over the cap, a bad
 * key), and the errors above. Holds one connection of the handle for the
 * wait. */
int kvc_meta_wait(struct kvc_meta *meta, const char *ns, const struct kvc_meta_key *keys,
                  uint32_t count, uint32_t timeout_ms, bool *complete);
/* Pages of complete keys on rank (-1 otherwise), each leased for lease_ms
 * (0: none): no eviction, delete or clear gives a leased key's pages to
 * another key. A key's lease is shared by all its readers (every rank's).
 * kvc_meta_lease_locations also gives, per key, the number of the lease
 * this reader joined (0: not leased), for kvc_meta_leases_release; a
 * lease taken by kvc_meta_locations ends by time only. */
int kvc_meta_locations(struct kvc_meta *meta, const char *ns, uint32_t rank,
                       const struct kvc_meta_key *keys, uint32_t count, uint32_t lease_ms,
                       int64_t *pages);
int kvc_meta_lease_locations(struct kvc_meta *meta, const char *ns, uint32_t rank,
                             const struct kvc_meta_key *keys, uint32_t count, uint32_t lease_ms,
                             int64_t *pages, uint32_t *leases);
/* The reader is done with the pages of keys it leased (leases: as
 * kvc_meta_lease_locations gave them). held[i] (optional) says whether key
 * i's lease was still held: a read that ended before this call returned
 * with held read the key's own bytes; one whose lease had ended may have
 * read a page given to another key meanwhile (a read that took longer
 * than its lease), and should be dropped, as should one of a key deleted
 * or cleared meanwhile (not held: its lease runs on out of sight). A
 * lease ends early when its last reader releases it. Returns how many
 * leases were held, or -errno (-EINVAL: more than KVC_META_MAX_BATCH keys,
 * or leases NULL with keys to release). */
int kvc_meta_leases_release(struct kvc_meta *meta, const char *ns,
                            const struct kvc_meta_key *keys, const uint32_t *leases,
                            uint32_t count, bool *held);
/* Deprecated (before lease numbers): releases nothing, since it cannot
 * tell this reader's lease from another's; leases end by time. Use
 * kvc_meta_leases_release. */
int kvc_meta_release_leases(struct kvc_meta *meta, const char *ns,
                            const struct kvc_meta_key *keys, uint32_t count);
/* Returns how many of the keys existed. */
int kvc_meta_delete(struct kvc_meta *meta, const char *ns, const struct kvc_meta_key *keys,
                    uint32_t count);
int kvc_meta_clear(struct kvc_meta *meta, const char *ns);
int kvc_meta_pool_stats(struct kvc_meta *meta, const char *ns, uint32_t rank,
                        struct kvc_meta_pool_stats *out);
/* Up to max pools; returns the count. */
int kvc_meta_pool_list(struct kvc_meta *meta, struct kvc_meta_pool_entry *out, int max);
struct kvc_meta_key_info {
	char bytes[KVC_META_MAX_KEY];
	uint32_t length;
	uint32_t world;      /* ranks the key needs */
	uint32_t confirmed;  /* ranks that confirmed */
	bool complete;
	uint64_t lease_until_ms;
};

/* List up to max (<= 1024) keys of ns after key `after` (NULL: from the
 * first), in byte order. Returns the count; *more tells if more follow. */
int kvc_meta_keys(struct kvc_meta *meta, const char *ns, const struct kvc_meta_key *after,
                  uint32_t max, struct kvc_meta_key_info *out, bool *more);

/* Problems found (and fixed with repair). */
int64_t kvc_meta_pool_fsck(struct kvc_meta *meta, bool repair);

/* Bind the pool (ns, rank) to a file of the namespace (path from the
 * mount's root, e.g. "/pools/vllm/rank-0"; page p is bytes p * page_size
 * .. (p + 1) * page_size): pages freed by delete, clear, eviction or
 * release then have their bytes punched out of the file by kvc-meta, so
 * their space returns to the storage servers. path NULL unbinds.
 * -ENOENT (no such pool or file), -EISDIR, -EINVAL. */
#define KVC_META_MAX_PATH 400
struct kvc_meta_pool_binding {
	uint64_t inode;
	uint64_t page_size;
	uint64_t punch_pending; /* freed pages not punched yet */
	char path[KVC_META_MAX_PATH + 1];
};
int kvc_meta_pool_bind(struct kvc_meta *meta, const char *ns, uint32_t rank, const char *path,
                       uint64_t page_size);
/* -ENOENT when the pool is not bound. */
int kvc_meta_pool_binding(struct kvc_meta *meta, const char *ns, uint32_t rank,
                          struct kvc_meta_pool_binding *out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
