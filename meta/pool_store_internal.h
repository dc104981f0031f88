/*
 * pool_store_internal: what the parts of the page-pool store share; for
 * meta/pool_store*.c only. meta/pool_store.h stays the interface (the
 * model, the rules and the tables); this header holds the store's handle,
 * the layouts of the records in its tables, the encoding of their keys,
 * and the helpers that more than one part needs. One concept per part:
 *
 *   pool_store.c         the environment, its tables and format word,
 *                        transactions; the namespaces' world records and
 *                        the pools' records (init, world, info, list)
 *   pool_store_pages.c   the free list and the page table: taking and
 *                        freeing pages, a batch's free counts, allocation
 *   pool_store_keys.c    key records and their LRU entries: confirmation
 *                        and completeness, release after a failed write,
 *                        exists, locations (touch and lease), listing, stats
 *   pool_store_evict.c   how keys go away: eviction, delete and clear
 *                        (leased keys retired), ending leases, the sweep
 *   pool_store_punch.c   bindings of pools to files and the punch lists
 *   pool_store_fsck.c    the accounting check and its repair
 *   pool_store_wait.c    waits for keys to become complete, and their
 *                        wake-ups after confirms and clears
 *
 * The helpers declared here work inside a transaction their caller owns
 * and never commit or abort it; they return 0 or -errno unless they say
 * otherwise. The handle is not changed after kvc_pool_store_open, so it
 * needs no lock (its waiters have a lock of their own, a leaf: see
 * pool_store_wait.c); LMDB serializes the writers, and every public
 * function is one transaction (kvc_pool_clear: a series of them).
 */
#ifndef KVC_POOL_STORE_INTERNAL_H
#define KVC_POOL_STORE_INTERNAL_H

#include <errno.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/lmdb_checkpoint.h"
#include "core/lmdb_group.h"
#include "core/lmdb_txn.h"
#include "meta/pool_store.h"

#define WORLD_MAGIC 0x444c5257u /* "WRLD" */
#define KEY_MAGIC 0x5945594bu   /* "KEYY" */
#define SLOT_NONE 0
#define SLOT_ALLOCATED 1
#define SLOT_CONFIRMED 2
#define LRU_BASE (1ull << 62)   /* retired keys use seqs below: they go first */
/* Room for any table's key: ns, NUL, then a key's bytes or integers. */
#define KEYBUF (KVC_POOL_MAX_NAMESPACE + 1 + KVC_POOL_MAX_KEY + 16)

/* The tables of pool_store.h; set by kvc_pool_store_open, then constant. */
struct kvc_pool_store {
	MDB_env *env;
	struct kvc_lmdb_checkpoint *checkpoint;
	MDB_dbi worlds, pools, free, pages, keys, lru, bindings, punch, punching;
	/* The pool clock (kvc_pool_now_ms): clock_base_ms at the monotonic
	 * instant clock_start_ms. */
	uint64_t clock_base_ms, clock_start_ms;
	struct pool_waits *waits; /* pool_store_wait.c */
	struct kvc_lmdb_group group; /* the batches' group commit */
};

/* worlds: ns -> a namespace's world and counters. */
struct pool_world {
	uint32_t magic;
	uint32_t world_size; /* 0: unknown */
	uint32_t ranks;      /* initialized pools */
	uint32_t next_lease; /* the last lease number given (0 in format 1);
	                        jumps by KVC_POOL_LEASE_REBOOT_GAP after a reboot */
	uint64_t next_lru;
	uint64_t next_retired;
	uint64_t evictions;
	uint64_t hits;
	uint64_t misses;
	/* After a scan found nothing to evict: no eviction can succeed before
	 * this time (the earliest lease end seen) unless a lease or key goes
	 * first. Spares a full, leased pool a scan per allocation. */
	uint64_t no_eviction_before_ms;
};

/* pools: ns,rank -> the pool's size and free count. */
struct pool_info {
	uint32_t num_pages;
	uint32_t free_pages;
};

/* keys: ns,key -> a head and then world slots (the record's size follows
 * from the head: records never change size). */
struct key_head {
	uint32_t magic;
	uint16_t world;         /* ranks (KVC_POOL_MAX_WORLD fits) */
	uint16_t lease_high;    /* the lease's number, high half */
	uint64_t lru_seq;       /* 0 while not complete */
	uint64_t lease_until;   /* ms */
	uint16_t confirmed;     /* ranks confirmed (KVC_POOL_MAX_WORLD fits) */
	/* The lease's readers: leases given since it began, less releases.
	 * READERS_UNKNOWN: too many to count (or a lease of a store written
	 * before readers were counted): it ends by time only. */
	uint16_t readers;
	uint16_t retired;
	uint16_t lease_low;     /* the lease's number, low half */
};
#define READERS_UNKNOWN UINT16_MAX
_Static_assert(sizeof(struct key_head) == 32, "the keys table's head (docs/on-disk.md)");
_Static_assert(KVC_POOL_MAX_WORLD <= UINT16_MAX, "world and confirmed count ranks in 16 bits");

/* Which lease of its key this is: a lease begun while none is held takes
 * the namespace's next number (pool_world.next_lease), so a release that
 * names an ended lease, or one of a key dropped and made again, matches
 * nothing. 0: no number (never leased, or leased by format 1). */
static inline uint32_t kvc_pool_lease_number(const struct key_head *h)
{
	return (uint32_t)h->lease_high << 16 | h->lease_low;
}

struct slot {
	int32_t page;
	uint32_t state;         /* SLOT_* */
};

struct key_record {
	struct key_head head;
	struct slot slots[KVC_POOL_MAX_WORLD];
};

/* The free counts of a namespace's pools as one transaction changes them:
 * read on first use, written back once by kvc_pool_counts_flush. Callers
 * allocate it zeroed (calloc: it is too big for a stack). */
struct counts {
	uint64_t loaded[KVC_POOL_MAX_WORLD / 64];
	uint64_t dirty[KVC_POOL_MAX_WORLD / 64];
	struct pool_info info[KVC_POOL_MAX_WORLD];
	/* The free list's cursor of an allocation batch: after taking a page
	 * it rests on the next free one, so the next take needs no descent. */
	MDB_cursor *free_cursor;
	bool free_positioned;
	uint8_t bound[KVC_POOL_MAX_WORLD]; /* 0: not looked up, 1: no, 2: bound to a file */
};

/* ---- keys of the tables: ns NUL then big-endian integers or bytes ---- */

static inline size_t key_ns(uint8_t *out, const char *ns)
{
	size_t n = strlen(ns);
	memcpy(out, ns, n);
	out[n] = 0;
	return n + 1;
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static inline uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static inline MDB_val page_key(uint8_t *buf, const char *ns, uint32_t rank, uint32_t page)
{
	size_t n = key_ns(buf, ns);
	put_be32(buf + n, rank);
	put_be32(buf + n + 4, page);
	return (MDB_val){n + 8, buf};
}

static inline MDB_val rank_key(uint8_t *buf, const char *ns, uint32_t rank)
{
	size_t n = key_ns(buf, ns);
	put_be32(buf + n, rank);
	return (MDB_val){n + 4, buf};
}

static inline MDB_val record_key(uint8_t *buf, const char *ns, const struct kvc_pool_key *k)
{
	size_t n = key_ns(buf, ns);
	memcpy(buf + n, k->bytes, k->length);
	return (MDB_val){n + k->length, buf};
}

static inline MDB_val lru_key(uint8_t *buf, const char *ns, uint64_t seq)
{
	size_t n = key_ns(buf, ns);
	put_be64(buf + n, seq);
	return (MDB_val){n + 8, buf};
}

/* The inverse of key_ns for a key of `suffix` more bytes: copies the
 * namespace out and points *rest past its NUL. False when k has another
 * shape. */
static inline bool ns_key_decode(const MDB_val *k, size_t suffix,
                                 char ns[KVC_POOL_MAX_NAMESPACE + 1], const uint8_t **rest)
{
	const uint8_t *key = k->mv_data;
	size_t n = strnlen((const char *)key, k->mv_size);
	if (n + 1 + suffix != k->mv_size || n > KVC_POOL_MAX_NAMESPACE)
		return false;
	memcpy(ns, key, n);
	ns[n] = '\0';
	*rest = key + n + 1;
	return true;
}

/* Delete k from db when it is there: 0 also when it was not. */
static inline int del_if_present(MDB_txn *txn, MDB_dbi db, MDB_val *k)
{
	int rc = mdb_del(txn, db, k, NULL);
	return rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
}

/* ---- pool_store.c: transactions, names, worlds and pools ---- */

int kvc_pool_txn_begin(struct kvc_pool_store *s, bool write, MDB_txn **txn);
/* A write batch on the pool (ns, rank): fn runs in a write transaction
 * with the namespace's world loaded, and the world is stored after it
 * succeeds. Batches of several clients that arrive together share one
 * transaction (core/lmdb_group.h), so fn has no effect outside txn but
 * its arg's outputs (it may run twice). Returns fn's answer, -ENOENT (no
 * such pool) or the commit's error. */
typedef int (*kvc_pool_batch_fn)(struct kvc_pool_store *s, MDB_txn *txn, struct pool_world *w,
                                 void *arg);
int kvc_pool_batch_run(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                       kvc_pool_batch_fn fn, void *arg);
/* -EINVAL for a namespace that is empty or too long. */
int kvc_pool_check_ns(const char *ns);
/* -EINVAL for a key that is empty, too long or starts with byte 1. */
int kvc_pool_check_key(const struct kvc_pool_key *k);
/* The world of ns; -ENOENT (with *w a fresh world) when it has none. */
int kvc_pool_world_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                       struct pool_world *w);
int kvc_pool_world_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                       const struct pool_world *w);
/* The record of the pool (ns, rank); -ENOENT when there is no such pool. */
int kvc_pool_info_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                      struct pool_info *p);
int kvc_pool_info_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                      const struct pool_info *p);
/* An entry of the pools table as (ns, rank, record); false for an entry
 * of another shape. */
bool kvc_pool_entry_decode(const MDB_val *k, const MDB_val *v,
                           char ns[KVC_POOL_MAX_NAMESPACE + 1], uint32_t *rank,
                           struct pool_info *p);

/* ---- pool_store_pages.c: the free list and the page table ---- */

/* Give a page back to its rank's free list (and c's count of its pool);
 * a bound pool's page is also listed for punching. */
int kvc_pool_page_free(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                       uint32_t page, struct counts *c);
/* Write back the free counts c changed. */
int kvc_pool_counts_flush(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                          struct counts *c);

/* ---- pool_store_keys.c: key records and LRU entries ---- */

int kvc_pool_record_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                        const struct kvc_pool_key *key, struct key_record *r);
int kvc_pool_record_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                        const struct kvc_pool_key *key, const struct key_record *r);
int kvc_pool_record_del(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                        const struct kvc_pool_key *key);
int kvc_pool_lru_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint64_t seq,
                     const struct kvc_pool_key *key);
/* 0 also when there was no such entry. */
int kvc_pool_lru_del(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint64_t seq);

/* ---- pool_store_evict.c: eviction ---- */

/* What allocation's helpers answer when a rank has no free page, or
 * nothing can be evicted: not an error (the key gets page -1), and apart
 * from -ENOSPC, which is LMDB's map or transaction being full. */
#define KVC_POOL_NONE 1

/* Evict LRU keys (retired first) not under lease until `rank` has a free
 * page. Returns 0 when one was freed, KVC_POOL_NONE when nothing can go,
 * or -errno (the transaction failed: -ENOSPC when LMDB is full). */
int kvc_pool_evict_for(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                       uint64_t now_ms, struct pool_world *w, struct counts *c);

/* ---- pool_store_punch.c: punch lists ---- */

/* At open: pages a crash left in `punching` go back, listed again. */
int kvc_pool_punching_recover(struct kvc_pool_store *s, MDB_txn *txn);

/* ---- pool_store_wait.c: waiters ---- */

int kvc_pool_waits_open(struct kvc_pool_store *s);
/* Wake every waiter (-ESHUTDOWN) and wait until they left; then free. */
void kvc_pool_waits_close(struct kvc_pool_store *s);
/* After a commit that completed keys of ns (or cleared it): wake its
 * waiters. Call with no transaction open. */
void kvc_pool_waits_notify(struct kvc_pool_store *s, const char *ns, bool cleared);

#endif
