/* pool_store: see pool_store.h for the model, rules and tables. */
#include "meta/pool_store.h"

#include <errno.h>
#include <lmdb.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/lmdb_txn.h"

#define MAP_SIZE (32ull << 30)
#define WORLD_MAGIC 0x444c5257u /* "WRLD" */
#define KEY_MAGIC 0x5945594bu   /* "KEYY" */
#define SLOT_NONE 0
#define SLOT_ALLOCATED 1
#define SLOT_CONFIRMED 2
#define LRU_BASE (1ull << 62)   /* retired keys use seqs below: they go first */
#define EVICT_SCAN 4096         /* LRU entries one allocation may look at */
#define CLEAR_CHUNK 4096        /* keys one clear transaction deletes */
#define KEYBUF (KVC_POOL_MAX_NAMESPACE + 1 + KVC_POOL_MAX_KEY + 16)

struct kvc_pool_store {
	MDB_env *env;
	MDB_dbi worlds, pools, free, pages, keys, lru, bindings, punch, punching;
};

/* A pool bound to a file of the namespace: page p is bytes
 * p * page_size .. (p + 1) * page_size of inode. */
struct pool_binding {
	uint64_t inode;
	uint64_t page_size;
	uint32_t path_length;
	uint32_t reserved;
	char path[KVC_POOL_MAX_PATH];
};

struct pool_world {
	uint32_t magic;
	uint32_t world_size; /* 0: unknown */
	uint32_t ranks;      /* initialized pools */
	uint32_t reserved;
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

struct pool_info {
	uint32_t num_pages;
	uint32_t free_pages;
};

struct key_head {
	uint32_t magic;
	uint32_t world;
	uint64_t lru_seq;       /* 0 while not complete */
	uint64_t lease_until;   /* ms */
	uint32_t confirmed;
	uint32_t retired;
};

struct slot {
	int32_t page;
	uint32_t state;
};

struct key_record {
	struct key_head head;
	struct slot slots[KVC_POOL_MAX_WORLD];
};

static size_t record_size(uint32_t world)
{
	return sizeof(struct key_head) + world * sizeof(struct slot);
}

/* Database keys: ns NUL then big-endian integers or bytes. */
static size_t key_ns(uint8_t *out, const char *ns)
{
	size_t n = strlen(ns);
	memcpy(out, ns, n);
	out[n] = 0;
	return n + 1;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static MDB_val page_key(uint8_t *buf, const char *ns, uint32_t rank, uint32_t page)
{
	size_t n = key_ns(buf, ns);
	put_be32(buf + n, rank);
	put_be32(buf + n + 4, page);
	return (MDB_val){n + 8, buf};
}

static MDB_val rank_key(uint8_t *buf, const char *ns, uint32_t rank)
{
	size_t n = key_ns(buf, ns);
	put_be32(buf + n, rank);
	return (MDB_val){n + 4, buf};
}

/* The inverse of rank_key plus its pool_info value; false for an entry of another shape. */
static bool pool_entry_decode(const MDB_val *k, const MDB_val *v,
                              char ns[KVC_POOL_MAX_NAMESPACE + 1], uint32_t *rank,
                              struct pool_info *p)
{
	const uint8_t *key = k->mv_data;
	size_t n = strnlen((const char *)key, k->mv_size);
	if (v->mv_size != sizeof(*p) || n + 5 != k->mv_size || n > KVC_POOL_MAX_NAMESPACE)
		return false;
	memcpy(ns, key, n);
	ns[n] = '\0';
	*rank = get_be32(key + n + 1);
	memcpy(p, v->mv_data, sizeof(*p));
	return true;
}

static MDB_val record_key(uint8_t *buf, const char *ns, const struct kvc_pool_key *k)
{
	size_t n = key_ns(buf, ns);
	memcpy(buf + n, k->bytes, k->length);
	return (MDB_val){n + k->length, buf};
}

static MDB_val lru_key(uint8_t *buf, const char *ns, uint64_t seq)
{
	size_t n = key_ns(buf, ns);
	put_be64(buf + n, seq);
	return (MDB_val){n + 8, buf};
}

static int check_ns(const char *ns)
{
	size_t n = ns ? strnlen(ns, KVC_POOL_MAX_NAMESPACE + 1) : 0;
	return n == 0 || n > KVC_POOL_MAX_NAMESPACE ? -EINVAL : 0;
}

static int check_key(const struct kvc_pool_key *k)
{
	if (k->length == 0 || k->length > KVC_POOL_MAX_KEY || k->bytes[0] == 1)
		return -EINVAL; /* byte 1 starts the names of retired keys */
	return 0;
}

/* ---- the world record ---- */

static int world_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                     struct pool_world *w)
{
	uint8_t buf[KEYBUF];
	MDB_val k = {key_ns(buf, ns) - 1, buf}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->worlds, &k, &v));
	if (rc == -ENOENT) {
		*w = (struct pool_world){.magic = WORLD_MAGIC, .next_lru = LRU_BASE, .next_retired = 1};
		return -ENOENT;
	}
	if (rc < 0)
		return rc;
	if (v.mv_size != sizeof(*w))
		return -EIO;
	memcpy(w, v.mv_data, sizeof(*w));
	return w->magic == WORLD_MAGIC ? 0 : -EIO;
}

static int world_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                     const struct pool_world *w)
{
	uint8_t buf[KEYBUF];
	MDB_val k = {key_ns(buf, ns) - 1, buf}, v = {sizeof(*w), (void *)w};
	return kvc_lmdb_errno(mdb_put(txn, s->worlds, &k, &v, 0));
}

/* The world size keys of this namespace use now (inferred when unknown). */
static uint32_t world_size(const struct pool_world *w)
{
	return w->world_size ? w->world_size : (w->ranks ? w->ranks : 1);
}

static int pool_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                    struct pool_info *p)
{
	uint8_t buf[KEYBUF];
	MDB_val k = rank_key(buf, ns, rank), v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->pools, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size != sizeof(*p))
		return -EIO;
	memcpy(p, v.mv_data, sizeof(*p));
	return 0;
}

static int pool_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                    const struct pool_info *p)
{
	uint8_t buf[KEYBUF];
	MDB_val k = rank_key(buf, ns, rank), v = {sizeof(*p), (void *)p};
	return kvc_lmdb_errno(mdb_put(txn, s->pools, &k, &v, 0));
}

/* ---- key records ---- */

/* Copy a stored record out, checking its shape. */
static int record_decode(const MDB_val *v, struct key_record *r)
{
	if (v->mv_size < sizeof(r->head))
		return -EIO;
	memcpy(&r->head, v->mv_data, sizeof(r->head));
	if (r->head.magic != KEY_MAGIC || r->head.world == 0 ||
	    r->head.world > KVC_POOL_MAX_WORLD || v->mv_size != record_size(r->head.world))
		return -EIO;
	memcpy(r->slots, (const uint8_t *)v->mv_data + sizeof(r->head),
	       r->head.world * sizeof(struct slot));
	return 0;
}

static int record_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                      const struct kvc_pool_key *key, struct key_record *r)
{
	uint8_t buf[KEYBUF];
	MDB_val k = record_key(buf, ns, key), v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->keys, &k, &v));
	return rc < 0 ? rc : record_decode(&v, r);
}

/* A record found through a batch's cursor, so that it can be rewritten
 * where it stands (records never change size): one descent, not two. */
struct record_at {
	MDB_cursor *cursor;
	uint8_t buf[KEYBUF];
	MDB_val key;
};

static int record_seek(struct record_at *at, const char *ns, const struct kvc_pool_key *key,
                       struct key_record *r)
{
	MDB_val v;
	at->key = record_key(at->buf, ns, key);
	int rc = kvc_lmdb_errno(mdb_cursor_get(at->cursor, &at->key, &v, MDB_SET_KEY));
	return rc < 0 ? rc : record_decode(&v, r);
}

static int record_rewrite(struct record_at *at, const struct key_record *r)
{
	MDB_val v = {record_size(r->head.world), (void *)r};
	return kvc_lmdb_errno(mdb_cursor_put(at->cursor, &at->key, &v, MDB_CURRENT));
}

static int record_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                      const struct kvc_pool_key *key, const struct key_record *r)
{
	uint8_t buf[KEYBUF];
	MDB_val k = record_key(buf, ns, key), v = {record_size(r->head.world), (void *)r};
	return kvc_lmdb_errno(mdb_put(txn, s->keys, &k, &v, 0));
}

static int record_del(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                      const struct kvc_pool_key *key)
{
	uint8_t buf[KEYBUF];
	MDB_val k = record_key(buf, ns, key);
	return kvc_lmdb_errno(mdb_del(txn, s->keys, &k, NULL));
}

static int lru_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint64_t seq,
                   const struct kvc_pool_key *key)
{
	uint8_t buf[KEYBUF];
	MDB_val k = lru_key(buf, ns, seq), v = {key->length, (void *)key->bytes};
	return kvc_lmdb_errno(mdb_put(txn, s->lru, &k, &v, 0));
}

static int lru_del(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint64_t seq)
{
	uint8_t buf[KEYBUF];
	MDB_val k = lru_key(buf, ns, seq);
	int rc = kvc_lmdb_errno(mdb_del(txn, s->lru, &k, NULL));
	return rc == -ENOENT ? 0 : rc;
}

/* ---- pages ---- */

/* The free counts of a namespace's pools as one transaction changes them:
 * read on first use, written back once by counts_flush. */
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

/* Whether rank's pool is bound to a file (looked up once per batch). */
static int is_bound(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                    struct counts *c)
{
	uint8_t buf[KEYBUF];
	if (rank >= KVC_POOL_MAX_WORLD)
		return -EIO;
	if (!c->bound[rank]) {
		MDB_val k = rank_key(buf, ns, rank), v;
		int rc = mdb_get(txn, s->bindings, &k, &v);
		if (rc != 0 && rc != MDB_NOTFOUND)
			return kvc_lmdb_errno(rc);
		c->bound[rank] = rc == 0 ? 2 : 1;
	}
	return c->bound[rank] == 2;
}

static int counts_adjust(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                         struct counts *c, uint32_t rank, int delta)
{
	uint64_t bit = 1ull << (rank % 64);
	if (rank >= KVC_POOL_MAX_WORLD)
		return -EIO;
	if (!(c->loaded[rank / 64] & bit)) {
		int rc = pool_get(s, txn, ns, rank, &c->info[rank]);
		if (rc < 0)
			return rc;
		c->loaded[rank / 64] |= bit;
	}
	c->info[rank].free_pages += (uint32_t)delta;
	c->dirty[rank / 64] |= bit;
	return 0;
}

static int counts_flush(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                        struct counts *c)
{
	for (uint32_t rank = 0; rank < KVC_POOL_MAX_WORLD; rank++) {
		if (!(c->dirty[rank / 64] & (1ull << (rank % 64))))
			continue;
		int rc = pool_put(s, txn, ns, rank, &c->info[rank]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Give a page back to its rank's free list (and its pool's count). */
static int page_free(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                     uint32_t page, struct counts *c)
{
	uint8_t buf[KEYBUF];
	MDB_val k = page_key(buf, ns, rank, page), one = {1, "\1"};
	int rc = kvc_lmdb_errno(mdb_del(txn, s->pages, &k, NULL));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_put(txn, s->free, &k, &one, 0));
	if (rc == 0)
		rc = counts_adjust(s, txn, ns, c, rank, 1);
	/* A bound pool's freed page is free at once and also queued for the
	 * collector to punch its bytes out of the file (space returned);
	 * taking the page again cancels that. */
	int bound = rc == 0 ? is_bound(s, txn, ns, rank, c) : 0;
	if (bound < 0)
		rc = bound;
	if (rc == 0 && bound)
		rc = kvc_lmdb_errno(mdb_put(txn, s->punch, &k, &one, 0));
	return rc;
}

/* Take the lowest free page of a rank for key. -ENOSPC when none. */
static int page_take(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                     const struct kvc_pool_key *key, uint32_t *page, struct counts *c)
{
	uint8_t buf[KEYBUF];
	MDB_val k = rank_key(buf, ns, rank), v;
	size_t prefix = k.mv_size;
	int rc = 0;
	if (!c->free_cursor)
		rc = mdb_cursor_open(txn, s->free, &c->free_cursor);
	if (rc)
		return kvc_lmdb_errno(rc);
	/* Where the last take left the cursor, when that is this rank's next
	 * free page; otherwise a search. Any free page of the rank will do. */
	rc = c->free_positioned ? mdb_cursor_get(c->free_cursor, &k, &v, MDB_GET_CURRENT)
	                        : MDB_NOTFOUND;
	if (rc != 0 || k.mv_size != prefix + 4 || memcmp(k.mv_data, buf, prefix) != 0) {
		k = (MDB_val){prefix, buf};
		rc = mdb_cursor_get(c->free_cursor, &k, &v, MDB_SET_RANGE);
		if (rc == 0 && (k.mv_size != prefix + 4 || memcmp(k.mv_data, buf, prefix) != 0))
			rc = MDB_NOTFOUND;
	}
	c->free_positioned = false;
	if (rc == 0) {
		*page = get_be32((const uint8_t *)k.mv_data + prefix);
		rc = mdb_cursor_del(c->free_cursor, 0);
		c->free_positioned = rc == 0;
	}
	if (rc == MDB_NOTFOUND)
		return -ENOSPC;
	rc = kvc_lmdb_errno(rc);
	MDB_val pk = page_key(buf, ns, rank, *page), kv = {key->length, (void *)key->bytes};
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_put(txn, s->pages, &pk, &kv, 0));
	int bound = rc == 0 ? is_bound(s, txn, ns, rank, c) : 0;
	if (bound < 0)
		rc = bound;
	if (rc == 0 && bound) { /* about to be written: no punch */
		int del = mdb_del(txn, s->punch, &pk, NULL);
		rc = del == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(del);
	}
	if (rc == 0)
		rc = counts_adjust(s, txn, ns, c, rank, -1);
	return rc;
}

/* Free every page a record holds and drop it (and its LRU entry). */
static int record_drop(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                       const struct kvc_pool_key *key, const struct key_record *r,
                       struct counts *c)
{
	int rc = 0;
	for (uint32_t rank = 0; rank < r->head.world && rc == 0; rank++)
		if (r->slots[rank].state != SLOT_NONE)
			rc = page_free(s, txn, ns, rank, (uint32_t)r->slots[rank].page, c);
	if (rc == 0 && r->head.lru_seq)
		rc = lru_del(s, txn, ns, r->head.lru_seq);
	if (rc == 0)
		rc = record_del(s, txn, ns, key);
	return rc;
}

/* Move a leased record out of sight under a reserved name ("\1" + seq);
 * its pages stay held until eviction finds its lease over. */
static int record_retire(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                         const struct kvc_pool_key *key, struct key_record *r,
                         struct pool_world *w)
{
	uint8_t name[9], buf[KEYBUF];
	name[0] = 1;
	put_be64(name + 1, w->next_retired++);
	struct kvc_pool_key retired = {(const char *)name, 9};
	int rc = r->head.lru_seq ? lru_del(s, txn, ns, r->head.lru_seq) : 0;
	if (rc == 0)
		rc = record_del(s, txn, ns, key);
	for (uint32_t rank = 0; rank < r->head.world && rc == 0; rank++) {
		if (r->slots[rank].state == SLOT_NONE)
			continue;
		MDB_val pk = page_key(buf, ns, rank, (uint32_t)r->slots[rank].page),
			kv = {retired.length, name};
		rc = kvc_lmdb_errno(mdb_put(txn, s->pages, &pk, &kv, 0));
	}
	r->head.retired = 1;
	r->head.lru_seq = w->next_retired - 1; /* below LRU_BASE: evicted first */
	if (rc == 0)
		rc = record_put(s, txn, ns, &retired, r);
	if (rc == 0)
		rc = lru_put(s, txn, ns, r->head.lru_seq, &retired);
	return rc;
}

/* Evict LRU keys (retired first) not under lease until `rank` has a free
 * page. Returns 0 when one was freed, -ENOSPC when nothing can go. */
static int evict_for(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                     uint64_t now_ms, struct pool_world *w, struct counts *c)
{
	uint8_t buf[KEYBUF], name[KVC_POOL_MAX_KEY];
	size_t prefix = key_ns(buf, ns);
	MDB_val k = {prefix, buf}, v;
	uint64_t earliest_lease = UINT64_MAX;
	if (now_ms < w->no_eviction_before_ms)
		return -ENOSPC;
	for (int scanned = 0; scanned < EVICT_SCAN; scanned++) {
		MDB_cursor *cur;
		int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->lru, &cur));
		if (rc < 0)
			return rc;
		k = (MDB_val){prefix, buf};
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		/* Skip the leased ones at the head, up to the scan budget. */
		struct key_record r;
		struct kvc_pool_key key = {(const char *)name, 0};
		int found = 0;
		while (rc == 0 && k.mv_size == prefix + 8 && memcmp(k.mv_data, buf, prefix) == 0 &&
		       scanned < EVICT_SCAN) {
			key.length = (uint32_t)v.mv_size;
			memcpy(name, v.mv_data, v.mv_size);
			if (record_get(s, txn, ns, &key, &r) == 0) {
				if (r.head.lease_until <= now_ms) {
					found = 1;
					break;
				}
				if (r.head.lease_until < earliest_lease)
					earliest_lease = r.head.lease_until;
			}
			scanned++;
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cur);
		if (!found) {
			/* Nothing evictable until the first lease we saw ends (or a
			 * short while, when the scan budget ran out first). */
			w->no_eviction_before_ms = earliest_lease != UINT64_MAX ? earliest_lease
			                                                        : now_ms + 10;
			return -ENOSPC;
		}
		bool frees_ours = rank < r.head.world && r.slots[rank].state != SLOT_NONE;
		rc = record_drop(s, txn, ns, &key, &r, c);
		if (rc < 0)
			return rc;
		w->evictions++;
		if (frees_ours)
			return 0;
	}
	return -ENOSPC;
}

/* ---- transactions ---- */

static int begin(struct kvc_pool_store *s, bool write, MDB_txn **txn)
{
	return kvc_lmdb_errno(mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, txn));
}

/* The format word, under a key no namespace can have (it starts with
 * NUL): written into a new store, checked in an existing one. */
static int check_format(struct kvc_pool_store *s, MDB_txn *txn)
{
	uint32_t format = KVC_POOL_FORMAT;
	MDB_val k = {7, "\0format"}, v;
	int rc = mdb_get(txn, s->worlds, &k, &v);
	if (rc == MDB_NOTFOUND) {
		v = (MDB_val){sizeof(format), &format};
		return kvc_lmdb_errno(mdb_put(txn, s->worlds, &k, &v, 0));
	}
	if (rc)
		return kvc_lmdb_errno(rc);
	if (v.mv_size != sizeof(format))
		return -EINVAL;
	memcpy(&format, v.mv_data, sizeof(format));
	return format == KVC_POOL_FORMAT ? 0 : -EINVAL;
}

/* Begin a write batch on the pool (ns, rank): the transaction and the
 * namespace's world. Returns 0, or -ENOENT (no such pool) or -errno with
 * nothing left open. */
static int batch_begin(struct kvc_pool_store *s, const char *ns, uint32_t rank, MDB_txn **txn,
                       struct pool_world *w)
{
	struct pool_info p;
	int rc = begin(s, true, txn);
	if (rc < 0)
		return rc;
	rc = pool_get(s, *txn, ns, rank, &p);
	if (rc == 0)
		rc = world_get(s, *txn, ns, w);
	if (rc < 0)
		mdb_txn_abort(*txn);
	return rc;
}

/* ---- file binding and hole punching ----
 *
 * A page freed in a bound pool is free at once and also listed in
 * `punch`. The collector takes listed pages out of the free list into
 * `punching` (so no writer can get them while their bytes are punched),
 * punches them, and gives them back. A crash in between leaves them in
 * `punching`: opening the store puts them back (free, listed again). */

/* Decode a page_key (ns, rank, page); false for another shape. */
static bool page_key_decode(const MDB_val *k, char ns[KVC_POOL_MAX_NAMESPACE + 1],
                            uint32_t *rank, uint32_t *page)
{
	const uint8_t *key = k->mv_data;
	size_t n = strnlen((const char *)key, k->mv_size);
	if (n + 9 != k->mv_size || n == 0 || n > KVC_POOL_MAX_NAMESPACE)
		return false;
	memcpy(ns, key, n);
	ns[n] = '\0';
	*rank = get_be32(key + n + 1);
	*page = get_be32(key + n + 5);
	return true;
}

static int binding_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                       struct pool_binding *b)
{
	uint8_t buf[KEYBUF];
	MDB_val k = rank_key(buf, ns, rank), v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->bindings, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size < offsetof(struct pool_binding, path) || v.mv_size > sizeof(*b))
		return -EIO;
	memset(b, 0, sizeof(*b));
	memcpy(b, v.mv_data, v.mv_size);
	return b->path_length <= KVC_POOL_MAX_PATH ? 0 : -EIO;
}

/* Move page between the free list and `punching`; adjusts the pool's
 * free count only when the page really moved. */
static int punch_move(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                      uint32_t page, bool to_punching)
{
	uint8_t buf[KEYBUF];
	struct pool_info p;
	MDB_val k = page_key(buf, ns, rank, page), one = {1, "\1"};
	MDB_dbi from = to_punching ? s->free : s->punching, to = to_punching ? s->punching : s->free;
	int rc = mdb_del(txn, from, &k, NULL);
	if (rc == MDB_NOTFOUND)
		return 0; /* taken (or repaired) meanwhile: nothing to move */
	if (rc == 0)
		rc = mdb_put(txn, to, &k, &one, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST)
		return 0;
	rc = kvc_lmdb_errno(rc);
	if (rc == 0)
		rc = pool_get(s, txn, ns, rank, &p);
	if (rc == 0) {
		p.free_pages += to_punching ? (uint32_t)-1 : 1u;
		rc = pool_put(s, txn, ns, rank, &p);
	}
	return rc == -ENOENT ? 0 : rc;
}

/* Opening: pages a crash left in `punching` go back, listed again. */
static int punching_recover(struct kvc_pool_store *s, MDB_txn *txn)
{
	MDB_cursor *cur;
	MDB_val k, v, one = {1, "\1"};
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->punching, &cur));
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0 && rc == 0) {
		char ns[KVC_POOL_MAX_NAMESPACE + 1];
		uint32_t rank, page;
		uint8_t key[KEYBUF];
		MDB_val copy = {k.mv_size, key};
		memcpy(key, k.mv_data, k.mv_size < sizeof(key) ? k.mv_size : sizeof(key));
		if (k.mv_size <= sizeof(key) && page_key_decode(&copy, ns, &rank, &page)) {
			rc = punch_move(s, txn, ns, rank, page, false);
			if (rc == 0)
				rc = kvc_lmdb_errno(mdb_put(txn, s->punch, &copy, &one, 0));
		} else {
			rc = kvc_lmdb_errno(mdb_del(txn, s->punching, &copy, NULL));
		}
		if (rc == 0) { /* the table changed under the cursor: start over */
			mdb_cursor_close(cur);
			rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->punching, &cur));
			got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
		}
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	return rc;
}

int kvc_pool_bind(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                  const struct kvc_pool_binding *binding)
{
	MDB_txn *txn;
	struct pool_info p;
	uint8_t buf[KEYBUF];
	if (check_ns(ns) < 0 || rank >= KVC_POOL_MAX_WORLD)
		return -EINVAL;
	if (binding && (binding->inode == 0 || binding->page_size == 0 ||
	                binding->page_size > KVC_POOL_MAX_PAGE_SIZE ||
	                strnlen(binding->path, sizeof(binding->path)) > KVC_POOL_MAX_PATH))
		return -EINVAL;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = pool_get(s, txn, ns, rank, &p);
	MDB_val k = rank_key(buf, ns, rank);
	if (rc == 0 && binding) {
		struct pool_binding b = {.inode = binding->inode, .page_size = binding->page_size,
		                         .path_length = (uint32_t)strlen(binding->path)};
		memcpy(b.path, binding->path, b.path_length);
		MDB_val v = {offsetof(struct pool_binding, path) + b.path_length, &b};
		rc = kvc_lmdb_errno(mdb_put(txn, s->bindings, &k, &v, 0));
	} else if (rc == 0) {
		int del = mdb_del(txn, s->bindings, &k, NULL);
		rc = del == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(del);
		/* Pages still listed stay free; they are just not punched. */
		MDB_cursor *cur;
		MDB_val pk = k, v;
		if (rc == 0)
			rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->punch, &cur));
		int got = rc == 0 ? mdb_cursor_get(cur, &pk, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
		while (got == 0 && rc == 0 && pk.mv_size == k.mv_size + 4 &&
		       memcmp(pk.mv_data, buf, k.mv_size) == 0) {
			uint8_t key[KEYBUF];
			memcpy(key, pk.mv_data, pk.mv_size);
			pk.mv_data = key;
			rc = kvc_lmdb_errno(mdb_del(txn, s->punch, &pk, NULL));
			got = rc == 0 ? mdb_cursor_get(cur, &pk, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
		}
		if (rc == 0)
			mdb_cursor_close(cur);
	}
	return kvc_lmdb_finish(txn, rc);
}

int kvc_pool_binding_get(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                         struct kvc_pool_binding *out)
{
	MDB_txn *txn;
	struct pool_binding b;
	uint8_t buf[KEYBUF];
	if (check_ns(ns) < 0 || rank >= KVC_POOL_MAX_WORLD)
		return -EINVAL;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = binding_get(s, txn, ns, rank, &b);
	if (rc == 0) {
		*out = (struct kvc_pool_binding){.inode = b.inode, .page_size = b.page_size};
		memcpy(out->path, b.path, b.path_length);
		out->path[b.path_length] = '\0';
		/* Listed pages of this rank: an administrator's count. */
		MDB_val prefix = rank_key(buf, ns, rank), k = prefix, v;
		MDB_cursor *cur;
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->punch, &cur));
		int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
		while (got == 0 && k.mv_size == prefix.mv_size + 4 &&
		       memcmp(k.mv_data, buf, prefix.mv_size) == 0) {
			out->punch_pending++;
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		if (rc == 0)
			mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return rc;
}

int kvc_pool_punch_take(struct kvc_pool_store *s, struct kvc_pool_punch *out, int max)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int count = 0;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->punch, &cur));
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0 && rc == 0 && count < max) {
		struct kvc_pool_punch *p = &out[count];
		struct pool_binding b;
		uint8_t key[KEYBUF];
		MDB_val at = {k.mv_size < sizeof(key) ? k.mv_size : sizeof(key), key};
		memcpy(key, k.mv_data, at.mv_size);
		bool keep = page_key_decode(&at, p->ns, &p->rank, &p->page) &&
		            binding_get(s, txn, p->ns, p->rank, &b) == 0;
		rc = kvc_lmdb_errno(mdb_del(txn, s->punch, &at, NULL)); /* listed no more */
		if (rc == 0 && keep) {
			p->inode = b.inode;
			p->page_size = b.page_size;
			rc = punch_move(s, txn, p->ns, p->rank, p->page, true);
			count++;
		}
		k = at;
		got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	rc = kvc_lmdb_finish(txn, rc);
	return rc < 0 ? rc : count;
}

int kvc_pool_punch_done(struct kvc_pool_store *s, const struct kvc_pool_punch *punches,
                        int count, const bool *punched)
{
	MDB_txn *txn;
	uint8_t buf[KEYBUF];
	struct pool_binding b;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	for (int i = 0; i < count && rc == 0; i++) {
		const struct kvc_pool_punch *p = &punches[i];
		rc = punch_move(s, txn, p->ns, p->rank, p->page, false);
		MDB_val k = page_key(buf, p->ns, p->rank, p->page), one = {1, "\1"};
		/* Not punched (a storage server down): listed again, if still bound. */
		if (rc == 0 && !punched[i] && binding_get(s, txn, p->ns, p->rank, &b) == 0)
			rc = kvc_lmdb_errno(mdb_put(txn, s->punch, &k, &one, 0));
	}
	return kvc_lmdb_finish(txn, rc);
}

int kvc_pool_store_open(const char *dir, struct kvc_pool_store **out)
{
	struct kvc_pool_store *s = calloc(1, sizeof(*s));
	MDB_txn *txn;
	if (!s)
		return -ENOMEM;
	int rc = kvc_fsutil_mkdirs(dir, 0700);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_create(&s->env));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_mapsize(s->env, MAP_SIZE));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_maxdbs(s->env, 12));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_maxreaders(s->env, 4096));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_open(s->env, dir, MDB_NOSYNC | MDB_NOTLS | MDB_WRITEMAP, 0600));
	if (rc == 0)
		rc = begin(s, true, &txn);
	if (rc < 0)
		goto fail;
	struct {
		const char *name;
		MDB_dbi *dbi;
	} tables[] = {{"worlds", &s->worlds}, {"pools", &s->pools}, {"free", &s->free},
	              {"pages", &s->pages},   {"keys", &s->keys},   {"lru", &s->lru},
	              {"bindings", &s->bindings}, {"punch", &s->punch},
	              {"punching", &s->punching}};
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]) && rc == 0; i++)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, tables[i].name, MDB_CREATE, tables[i].dbi));
	if (rc == 0)
		rc = check_format(s, txn);
	if (rc == 0)
		rc = punching_recover(s, txn);
	rc = kvc_lmdb_finish(txn, rc);
	if (rc < 0)
		goto fail;
	*out = s;
	return 0;
fail:
	kvc_pool_store_close(s);
	return rc;
}

void kvc_pool_store_close(struct kvc_pool_store *s)
{
	if (!s)
		return;
	kvc_lmdb_close(s->env);
	free(s);
}

int kvc_pool_store_sync(struct kvc_pool_store *s)
{
	return kvc_lmdb_errno(mdb_env_sync(s->env, 1));
}

static int init_txn(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                    uint32_t num_pages, uint32_t world)
{
	struct pool_world w;
	struct pool_info p;
	uint8_t buf[KEYBUF];
	int rc = world_get(s, txn, ns, &w);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	if (world && w.world_size && w.world_size != world)
		return -EINVAL;
	if (world)
		w.world_size = world;
	rc = pool_get(s, txn, ns, rank, &p);
	uint32_t from = 0;
	if (rc == 0) {
		if (num_pages < p.num_pages)
			return -EINVAL; /* shrinking would orphan pages: clear first */
		from = p.num_pages;
	} else if (rc == -ENOENT) {
		p = (struct pool_info){0};
		w.ranks++;
	} else {
		return rc;
	}
	for (uint32_t page = from; page < num_pages; page++) {
		MDB_val k = page_key(buf, ns, rank, page), one = {1, "\1"};
		int put = mdb_put(txn, s->free, &k, &one, MDB_APPEND);
		if (put == MDB_KEYEXIST) /* not after the last key: a plain put */
			put = mdb_put(txn, s->free, &k, &one, 0);
		if (put)
			return kvc_lmdb_errno(put);
	}
	p.free_pages += num_pages - from;
	p.num_pages = num_pages;
	rc = pool_put(s, txn, ns, rank, &p);
	return rc == 0 ? world_put(s, txn, ns, &w) : rc;
}

int kvc_pool_init(struct kvc_pool_store *s, const char *ns, uint32_t rank, uint32_t num_pages,
                  uint32_t world)
{
	MDB_txn *txn;
	if (check_ns(ns) < 0 || num_pages == 0 || num_pages > KVC_POOL_MAX_PAGES ||
	    world > KVC_POOL_MAX_WORLD || rank >= KVC_POOL_MAX_WORLD || (world && rank >= world))
		return -EINVAL;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	return kvc_lmdb_finish(txn, init_txn(s, txn, ns, rank, num_pages, world));
}

int kvc_pool_set_world(struct kvc_pool_store *s, const char *ns, uint32_t world)
{
	MDB_txn *txn;
	struct pool_world w;
	if (check_ns(ns) < 0 || world == 0 || world > KVC_POOL_MAX_WORLD)
		return -EINVAL;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = world_get(s, txn, ns, &w);
	if (rc == 0 && w.world_size != world) {
		/* Keys hold pages per rank of the old world: no change under them. */
		uint8_t buf[KEYBUF];
		size_t prefix = key_ns(buf, ns);
		MDB_cursor *cur;
		MDB_val k = {prefix, buf}, v;
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &cur));
		if (rc == 0) {
			int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
			if (got == 0 && k.mv_size > prefix && memcmp(k.mv_data, buf, prefix) == 0)
				rc = -EBUSY;
			mdb_cursor_close(cur);
		}
		/* Pools of ranks outside the new world would be orphaned. */
		struct pool_info p;
		for (uint32_t rank = world; rc == 0 && rank < KVC_POOL_MAX_WORLD; rank++)
			if (pool_get(s, txn, ns, rank, &p) == 0)
				rc = -EINVAL;
	}
	if (rc == 0 || rc == -ENOENT) {
		w.world_size = world;
		rc = world_put(s, txn, ns, &w);
	}
	return kvc_lmdb_finish(txn, rc);
}

/* Allocate one key on rank inside the batch transaction. */
static int allocate_one(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                        const struct kvc_pool_key *key, uint64_t now_ms, struct pool_world *w,
                        struct counts *c, struct kvc_pool_allocation *out)
{
	struct key_record r;
	uint32_t page;
	*out = (struct kvc_pool_allocation){.page = -1};
	int rc = record_get(s, txn, ns, key, &r);
	if (rc == -ENOENT) {
		r.head = (struct key_head){.magic = KEY_MAGIC, .world = world_size(w)};
		memset(r.slots, 0, r.head.world * sizeof(struct slot));
		for (uint32_t i = 0; i < r.head.world; i++)
			r.slots[i].page = -1;
	} else if (rc < 0) {
		return rc;
	}
	if (rank >= r.head.world)
		return -EINVAL; /* the rank is outside this key's world */
	struct slot *slot = &r.slots[rank];
	if (slot->state != SLOT_NONE) { /* confirmed: reuse; allocated: a racing writer */
		*out = (struct kvc_pool_allocation){slot->page, slot->state == SLOT_CONFIRMED};
		return 0;
	}
	rc = page_take(s, txn, ns, rank, key, &page, c);
	if (rc == -ENOSPC && evict_for(s, txn, ns, rank, now_ms, w, c) == 0)
		rc = page_take(s, txn, ns, rank, key, &page, c);
	if (rc == -ENOSPC)
		return 0; /* full: page -1 */
	if (rc < 0)
		return rc;
	*slot = (struct slot){(int32_t)page, SLOT_ALLOCATED};
	out->page = page;
	return record_put(s, txn, ns, key, &r);
}

int kvc_pool_allocate(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                      const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms,
                      struct kvc_pool_allocation *out)
{
	MDB_txn *txn;
	struct pool_world w;
	if (check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (check_key(&keys[i]) < 0)
			return -EINVAL;
	struct counts *c = calloc(1, sizeof(*c));
	int rc = c ? batch_begin(s, ns, rank, &txn, &w) : -ENOMEM;
	if (rc < 0) {
		free(c);
		return rc;
	}
	for (uint32_t i = 0; i < count && rc == 0; i++)
		rc = allocate_one(s, txn, ns, rank, &keys[i], now_ms, &w, c, &out[i]);
	mdb_cursor_close(c->free_cursor); /* NULL when nothing was taken */
	if (rc == 0)
		rc = counts_flush(s, txn, ns, c);
	if (rc == 0)
		rc = world_put(s, txn, ns, &w);
	free(c);
	return kvc_lmdb_finish(txn, rc);
}

static int confirm_one(struct kvc_pool_store *s, MDB_txn *txn, struct record_at *at,
                       const char *ns, uint32_t rank, const struct kvc_pool_key *key,
                       int64_t page, struct pool_world *w)
{
	struct key_record r;
	int rc = record_seek(at, ns, key, &r);
	if (rc == -ENOENT)
		return -ESTALE;
	if (rc < 0)
		return rc;
	if (rank >= r.head.world || r.slots[rank].page != page ||
	    r.slots[rank].state == SLOT_NONE)
		return -ESTALE;
	if (r.slots[rank].state == SLOT_CONFIRMED)
		return 0; /* already: idempotent */
	r.slots[rank].state = SLOT_CONFIRMED;
	r.head.confirmed++;
	if (r.head.confirmed == r.head.world) {
		r.head.lru_seq = w->next_lru++;
		rc = lru_put(s, txn, ns, r.head.lru_seq, key);
	}
	return rc == 0 ? record_rewrite(at, &r) : rc;
}

/* Release a page of rank if an unconfirmed allocation holds it. */
static int release_one(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                       int64_t page, struct counts *c)
{
	uint8_t buf[KEYBUF], name[KVC_POOL_MAX_KEY + 16];
	struct key_record r;
	if (page < 0 || page >= KVC_POOL_MAX_PAGES)
		return 0;
	MDB_val k = page_key(buf, ns, rank, (uint32_t)page), v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->pages, &k, &v));
	if (rc == -ENOENT)
		return 0; /* free already */
	if (rc < 0 || v.mv_size > sizeof(name))
		return rc < 0 ? rc : -EIO;
	memcpy(name, v.mv_data, v.mv_size);
	struct kvc_pool_key key = {(const char *)name, (uint32_t)v.mv_size};
	rc = record_get(s, txn, ns, &key, &r);
	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	if (rank >= r.head.world || r.slots[rank].page != page ||
	    r.slots[rank].state != SLOT_ALLOCATED || r.head.retired)
		return 0; /* confirmed (or someone else's): never freed here */
	r.slots[rank] = (struct slot){-1, SLOT_NONE};
	rc = page_free(s, txn, ns, rank, (uint32_t)page, c);
	bool empty = true;
	for (uint32_t i = 0; i < r.head.world; i++)
		empty &= r.slots[i].state == SLOT_NONE;
	if (rc == 0)
		rc = empty ? record_del(s, txn, ns, &key) : record_put(s, txn, ns, &key, &r);
	return rc;
}

int kvc_pool_confirm(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                     const struct kvc_pool_key *keys, const int64_t *pages, uint32_t count,
                     const int64_t *release, uint32_t release_count, uint64_t now_ms,
                     int *statuses)
{
	MDB_txn *txn;
	struct pool_world w;
	struct record_at at = {.cursor = NULL};
	(void)now_ms;
	if (check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH || release_count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (check_key(&keys[i]) < 0)
			return -EINVAL;
	int rc = batch_begin(s, ns, rank, &txn, &w);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &at.cursor));
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		int one = confirm_one(s, txn, &at, ns, rank, &keys[i], pages[i], &w);
		if (statuses)
			statuses[i] = one == -ESTALE ? -ESTALE : 0;
		rc = one == -ESTALE ? 0 : one;
	}
	mdb_cursor_close(at.cursor); /* closing NULL is a no-op */
	struct counts *c = release_count ? calloc(1, sizeof(*c)) : NULL;
	if (release_count && !c && rc == 0)
		rc = -ENOMEM;
	for (uint32_t i = 0; i < release_count && rc == 0; i++)
		rc = release_one(s, txn, ns, rank, release[i], c);
	if (rc == 0 && c)
		rc = counts_flush(s, txn, ns, c);
	free(c);
	if (rc == 0)
		rc = world_put(s, txn, ns, &w);
	return kvc_lmdb_finish(txn, rc);
}

static bool complete(const struct key_record *r)
{
	return !r->head.retired && r->head.confirmed == r->head.world;
}

int kvc_pool_exists(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *keys,
                    uint32_t count, bool *out)
{
	MDB_txn *txn;
	struct key_record r;
	if (check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		int got = check_key(&keys[i]) == 0 ? record_get(s, txn, ns, &keys[i], &r) : -ENOENT;
		out[i] = got == 0 && complete(&r);
		rc = got == -ENOENT || got == 0 ? 0 : got;
	}
	mdb_txn_abort(txn);
	return rc;
}

int kvc_pool_locations(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                       const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms,
                       uint32_t lease_ms, int64_t *pages)
{
	MDB_txn *txn;
	struct pool_world w;
	struct key_record r;
	if (check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	struct record_at at = {.cursor = NULL};
	int rc = batch_begin(s, ns, rank, &txn, &w);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &at.cursor));
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		pages[i] = -1;
		int got = check_key(&keys[i]) == 0 ? record_seek(&at, ns, &keys[i], &r) : -ENOENT;
		if (got == -ENOENT || (got == 0 && (!complete(&r) || rank >= r.head.world))) {
			w.misses++;
			continue;
		}
		if (got < 0) {
			rc = got;
			break;
		}
		w.hits++;
		pages[i] = r.slots[rank].page;
		/* Touch: move to the young end of the LRU (unless it is there
		 * already); lease it. */
		bool touch = r.head.lru_seq + 1 != w.next_lru;
		bool lease = lease_ms && now_ms + lease_ms > r.head.lease_until;
		if (touch) {
			rc = lru_del(s, txn, ns, r.head.lru_seq);
			r.head.lru_seq = w.next_lru++;
			if (rc == 0)
				rc = lru_put(s, txn, ns, r.head.lru_seq, &keys[i]);
		}
		if (lease)
			r.head.lease_until = now_ms + lease_ms;
		if (rc == 0 && (touch || lease))
			rc = record_rewrite(&at, &r);
	}
	mdb_cursor_close(at.cursor);
	if (rc == 0)
		rc = world_put(s, txn, ns, &w);
	return kvc_lmdb_finish(txn, rc);
}

int kvc_pool_release_leases(struct kvc_pool_store *s, const char *ns,
                            const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms)
{
	MDB_txn *txn;
	struct key_record r;
	(void)now_ms;
	if (check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		int got = check_key(&keys[i]) == 0 ? record_get(s, txn, ns, &keys[i], &r) : -ENOENT;
		if (got == 0 && r.head.lease_until) {
			r.head.lease_until = 0;
			rc = record_put(s, txn, ns, &keys[i], &r);
		} else if (got < 0 && got != -ENOENT) {
			rc = got;
		}
	}
	/* A lease ended early: evictions may succeed again at once. */
	struct pool_world w;
	if (rc == 0 && count && world_get(s, txn, ns, &w) == 0 && w.no_eviction_before_ms) {
		w.no_eviction_before_ms = 0;
		rc = world_put(s, txn, ns, &w);
	}
	return kvc_lmdb_finish(txn, rc);
}

/* Delete or retire one key inside a transaction; 1 when it existed. */
static int delete_one(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                      const struct kvc_pool_key *key, uint64_t now_ms, struct pool_world *w,
                      struct counts *c)
{
	struct key_record r;
	int rc = record_get(s, txn, ns, key, &r);
	if (rc == -ENOENT)
		return 0;
	w->no_eviction_before_ms = 0; /* pages (or retired keys) freed: look again */
	if (rc < 0)
		return rc;
	rc = r.head.lease_until > now_ms ? record_retire(s, txn, ns, key, &r, w)
	                                 : record_drop(s, txn, ns, key, &r, c);
	return rc < 0 ? rc : 1;
}

int kvc_pool_delete(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *keys,
                    uint32_t count, uint64_t now_ms)
{
	MDB_txn *txn;
	struct pool_world w;
	if (check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	int rc = begin(s, true, &txn), deleted = 0;
	if (rc < 0)
		return rc;
	struct counts *c = calloc(1, sizeof(*c));
	rc = c ? world_get(s, txn, ns, &w) : -ENOMEM;
	if (rc == -ENOENT)
		rc = 0;
	for (uint32_t i = 0; i < count && rc >= 0; i++) {
		if (check_key(&keys[i]) < 0)
			continue;
		rc = delete_one(s, txn, ns, &keys[i], now_ms, &w, c);
		deleted += rc > 0;
	}
	if (rc >= 0)
		rc = counts_flush(s, txn, ns, c);
	if (rc >= 0)
		rc = world_put(s, txn, ns, &w);
	free(c);
	rc = kvc_lmdb_finish(txn, rc);
	return rc < 0 ? rc : deleted;
}

int kvc_pool_clear_some(struct kvc_pool_store *s, const char *ns, uint64_t now_ms, int max,
                        bool *left)
{
	MDB_txn *txn;
	struct pool_world w;
	uint8_t buf[KEYBUF], name[KVC_POOL_MAX_KEY + 16];
	*left = false;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = world_get(s, txn, ns, &w);
	if (rc == -ENOENT)
		return kvc_lmdb_finish(txn, 0);
	struct counts *c = calloc(1, sizeof(*c));
	if (!c)
		return kvc_lmdb_finish(txn, -ENOMEM);
	size_t prefix = key_ns(buf, ns);
	/* Start past the retired keys ("\1..."), which stay until their
	 * lease ends: jumping over them keeps clearing linear. */
	buf[prefix] = 2;
	for (int done = 0; rc >= 0; done++) {
		MDB_cursor *cur;
		MDB_val k = {prefix + 1, buf}, v;
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &cur));
		if (rc < 0)
			break;
		int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		bool found = got == 0 && k.mv_size > prefix && memcmp(k.mv_data, buf, prefix) == 0;
		if (found)
			memcpy(name, (const uint8_t *)k.mv_data + prefix, k.mv_size - prefix);
		struct kvc_pool_key key = {(const char *)name, (uint32_t)(k.mv_size - prefix)};
		mdb_cursor_close(cur);
		if (!found)
			break;
		if (done == max) {
			*left = true;
			break;
		}
		rc = delete_one(s, txn, ns, &key, now_ms, &w, c);
	}
	if (rc >= 0)
		rc = counts_flush(s, txn, ns, c);
	if (rc >= 0)
		rc = world_put(s, txn, ns, &w);
	free(c);
	return kvc_lmdb_finish(txn, rc < 0 ? rc : 0);
}

int kvc_pool_clear(struct kvc_pool_store *s, const char *ns, uint64_t now_ms)
{
	/* In transactions of CLEAR_CHUNK keys, so a large namespace does not
	 * hold the (single) writer for seconds; clearing needs no atomicity. */
	bool left = true;
	int rc = check_ns(ns);
	while (rc == 0 && left)
		rc = kvc_pool_clear_some(s, ns, now_ms, CLEAR_CHUNK, &left);
	return rc;
}

int kvc_pool_stats(struct kvc_pool_store *s, const char *ns, uint32_t rank, uint64_t now_ms,
                   struct kvc_pool_stats *out)
{
	MDB_txn *txn;
	struct pool_world w;
	struct pool_info p = {0};
	uint8_t buf[KEYBUF];
	if (check_ns(ns) < 0)
		return -EINVAL;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	rc = world_get(s, txn, ns, &w);
	if (rc == 0) {
		int has = pool_get(s, txn, ns, rank, &p);
		rc = has == -ENOENT ? 0 : has;
	}
	if (rc == 0) {
		*out = (struct kvc_pool_stats){.world_size = w.world_size, .ranks = w.ranks,
		                               .num_pages = p.num_pages, .free_pages = p.free_pages,
		                               .evictions = w.evictions};
		size_t prefix = key_ns(buf, ns);
		MDB_cursor *cur;
		MDB_val k = {prefix, buf}, v;
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &cur));
		int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
		while (got == 0 && k.mv_size > prefix && memcmp(k.mv_data, buf, prefix) == 0) {
			struct key_head h;
			if (v.mv_size >= sizeof(h)) {
				memcpy(&h, v.mv_data, sizeof(h));
				out->keys++;
				out->retired_keys += h.retired != 0;
				out->complete_keys += !h.retired && h.confirmed == h.world;
				out->leased_keys += h.lease_until > now_ms;
			}
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		if (rc == 0)
			mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return rc;
}

int kvc_pool_keys(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *after,
                  uint32_t max, struct kvc_pool_key_info *out, bool *more)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	uint8_t buf[KEYBUF];
	if (check_ns(ns) < 0 || (after->length && check_key(after) < 0))
		return -EINVAL;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	size_t prefix = key_ns(buf, ns);
	buf[prefix] = 2; /* from the first live key: past the retired ("\1...") */
	MDB_val k = after->length ? record_key(buf, ns, after) : (MDB_val){prefix + 1, buf}, v;
	int count = 0;
	*more = false;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &cur));
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
	while (got == 0 && k.mv_size > prefix && memcmp(k.mv_data, buf, prefix) == 0) {
		const uint8_t *name = (const uint8_t *)k.mv_data + prefix;
		size_t len = k.mv_size - prefix;
		bool skip = name[0] == 1 || /* retired */
		            (after->length && len == after->length &&
		             memcmp(name, after->bytes, len) == 0);
		struct key_head h;
		if (!skip && v.mv_size >= sizeof(h)) {
			if ((uint32_t)count == max) {
				*more = true;
				break;
			}
			memcpy(&h, v.mv_data, sizeof(h));
			struct kvc_pool_key_info *o = &out[count++];
			memcpy(o->bytes, name, len);
			o->length = (uint32_t)len;
			o->world = h.world;
			o->confirmed = h.confirmed;
			o->complete = h.confirmed == h.world;
			o->lease_until = h.lease_until;
		}
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc < 0 ? rc : count;
}

/* Free the retired keys of ns whose lease ended (at most max). Retired
 * keys sort first in the namespace's LRU, so this reads only its head. */
static int sweep_namespace(struct kvc_pool_store *s, const char *ns, uint64_t now_ms, int max)
{
	MDB_txn *txn;
	struct pool_world w;
	uint8_t buf[KEYBUF], name[KVC_POOL_MAX_KEY];
	int freed = 0;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = world_get(s, txn, ns, &w);
	struct counts *c = rc == 0 ? calloc(1, sizeof(*c)) : NULL;
	if (rc == 0 && !c)
		rc = -ENOMEM;
	size_t prefix = key_ns(buf, ns);
	while (rc == 0 && freed < max) {
		MDB_cursor *cur;
		MDB_val k = {prefix, buf}, v;
		struct key_record r;
		struct kvc_pool_key key = {(const char *)name, 0};
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->lru, &cur));
		if (rc < 0)
			break;
		int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		bool found = false;
		/* Walk the retired head (seqs below LRU_BASE) for an ended lease. */
		while (got == 0 && k.mv_size == prefix + 8 && memcmp(k.mv_data, buf, prefix) == 0) {
			uint64_t seq = (uint64_t)get_be32((const uint8_t *)k.mv_data + prefix) << 32 |
			               get_be32((const uint8_t *)k.mv_data + prefix + 4);
			if (seq >= LRU_BASE || v.mv_size > sizeof(name))
				break;
			key.length = (uint32_t)v.mv_size;
			memcpy(name, v.mv_data, v.mv_size);
			if (record_get(s, txn, ns, &key, &r) == 0 && r.head.lease_until <= now_ms) {
				found = true;
				break;
			}
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cur);
		if (!found)
			break;
		rc = record_drop(s, txn, ns, &key, &r, c);
		freed++;
	}
	if (rc == 0 && freed)
		rc = counts_flush(s, txn, ns, c);
	free(c);
	rc = kvc_lmdb_finish(txn, rc);
	return rc < 0 ? rc : freed;
}

struct sweep_arg {
	struct kvc_pool_store *s;
	uint64_t now_ms;
	int freed;
	char last_ns[KVC_POOL_MAX_NAMESPACE + 1];
};

static int sweep_pool(void *arg, const char *ns, uint32_t rank, uint32_t num_pages,
                      uint32_t free_pages)
{
	struct sweep_arg *a = arg;
	(void)rank, (void)num_pages, (void)free_pages;
	if (strcmp(ns, a->last_ns) == 0)
		return 0; /* once per namespace (pools are listed per rank) */
	strcpy(a->last_ns, ns);
	int n = sweep_namespace(a->s, ns, a->now_ms, 4096);
	a->freed += n > 0 ? n : 0;
	return 0;
}

int kvc_pool_sweep(struct kvc_pool_store *s, uint64_t now_ms)
{
	struct sweep_arg a = {.s = s, .now_ms = now_ms};
	int rc = kvc_pool_list(s, sweep_pool, &a);
	return rc < 0 ? rc : a.freed;
}

int kvc_pool_info(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                  uint32_t *num_pages, uint32_t *free_pages)
{
	MDB_txn *txn;
	struct pool_info p;
	if (check_ns(ns) < 0)
		return -EINVAL;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = pool_get(s, txn, ns, rank, &p);
	mdb_txn_abort(txn);
	if (rc == 0) {
		*num_pages = p.num_pages;
		*free_pages = p.free_pages;
	}
	return rc;
}

int kvc_pool_list(struct kvc_pool_store *s,
                  int (*fn)(void *arg, const char *ns, uint32_t rank, uint32_t num_pages,
                            uint32_t free_pages),
                  void *arg)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->pools, &cur));
	MDB_val k, v;
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0) {
		struct pool_info p;
		char ns[KVC_POOL_MAX_NAMESPACE + 1];
		uint32_t rank;
		if (pool_entry_decode(&k, &v, ns, &rank, &p) &&
		    fn(arg, ns, rank, p.num_pages, p.free_pages))
			break;
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc;
}

/* ---- fsck ---- */

struct fsck {
	struct kvc_pool_store *s;
	MDB_txn *txn;
	bool repair;
	int64_t problems;
	int rc;
};

/* Walk the entries of db under prefix; fn gets the suffix and value. */
static int walk(struct kvc_pool_store *s, MDB_txn *txn, MDB_dbi db, const uint8_t *prefix,
                size_t n, int (*fn)(void *, const uint8_t *, size_t, MDB_val *), void *arg)
{
	MDB_cursor *cur;
	MDB_val k = {n, (void *)prefix}, v;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, db, &cur));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (got == 0 && k.mv_size >= n && memcmp(k.mv_data, prefix, n) == 0) {
		rc = fn(arg, (const uint8_t *)k.mv_data + n, k.mv_size - n, &v);
		if (rc < 0)
			break;
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	(void)s;
	return rc;
}

struct page_scan {
	uint8_t *state; /* per page: bit 1 free, 2 used (validly held), 4 punching,
	                   8 listed for punching */
	uint32_t num_pages;
	struct fsck *f;
	const char *ns;
	uint32_t rank;
	int64_t problems;
};

static int scan_free(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	struct page_scan *p = arg;
	(void)v;
	if (n != 4)
		return 0;
	uint32_t page = get_be32(suffix);
	if (page >= p->num_pages)
		p->problems++; /* beyond the pool */
	else
		p->state[page] |= 1;
	return 0;
}

static int scan_mark(struct page_scan *p, const uint8_t *suffix, size_t n, uint8_t bit)
{
	if (n != 4)
		return 0;
	uint32_t page = get_be32(suffix);
	if (page >= p->num_pages)
		p->problems++;
	else
		p->state[page] |= bit;
	return 0;
}

static int scan_punching(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	(void)v;
	return scan_mark(arg, suffix, n, 4);
}

static int scan_punch(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	(void)v;
	return scan_mark(arg, suffix, n, 8);
}

/* Repair the punch lists of one page: a page being punched is neither
 * free nor used; a listed page must be free. */
static int fsck_punch_lists(struct fsck *f, struct page_scan *p, uint32_t page, MDB_val *k)
{
	uint8_t st = p->state[page];
	bool bad_punching = (st & 4) && (st & 3), bad_listed = (st & 8) && (st & 3) != 1;
	p->problems += bad_punching + bad_listed;
	int rc = 0;
	if (f->repair && bad_punching)
		rc = kvc_lmdb_errno(mdb_del(f->txn, f->s->punching, k, NULL));
	if (rc == 0 && f->repair && bad_listed)
		rc = kvc_lmdb_errno(mdb_del(f->txn, f->s->punch, k, NULL));
	if (bad_punching)
		p->state[page] &= (uint8_t)~4;
	return rc;
}

static int scan_used(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	struct page_scan *p = arg;
	struct key_record r;
	if (n != 4)
		return 0;
	uint32_t page = get_be32(suffix);
	struct kvc_pool_key key = {v->mv_data, (uint32_t)v->mv_size};
	bool held = v->mv_size > 0 && v->mv_size <= KVC_POOL_MAX_KEY &&
	            record_get(p->f->s, p->f->txn, p->ns, &key, &r) == 0 && p->rank < r.head.world &&
	            r.slots[p->rank].page == (int32_t)page && r.slots[p->rank].state != SLOT_NONE;
	if (page >= p->num_pages || !held) {
		p->problems++;
		return 0; /* repaired below: the page becomes free */
	}
	p->state[page] |= 2;
	return 0;
}

/* Check one pool; with repair, rebuild its free list and count. */
static int fsck_pool(void *arg, const char *ns, uint32_t rank, uint32_t num_pages,
                     uint32_t free_pages)
{
	struct fsck *f = arg;
	uint8_t prefix[KEYBUF], buf[KEYBUF];
	struct page_scan p = {.num_pages = num_pages, .f = f, .ns = ns, .rank = rank};
	p.state = calloc(num_pages ? num_pages : 1, 1);
	if (!p.state) {
		f->rc = -ENOMEM;
		return 1;
	}
	MDB_val pk = rank_key(prefix, ns, rank);
	int rc = walk(f->s, f->txn, f->s->free, prefix, pk.mv_size, scan_free, &p);
	if (rc == 0)
		rc = walk(f->s, f->txn, f->s->pages, prefix, pk.mv_size, scan_used, &p);
	if (rc == 0)
		rc = walk(f->s, f->txn, f->s->punching, prefix, pk.mv_size, scan_punching, &p);
	if (rc == 0)
		rc = walk(f->s, f->txn, f->s->punch, prefix, pk.mv_size, scan_punch, &p);
	uint32_t free_count = 0;
	for (uint32_t page = 0; page < num_pages && rc == 0; page++) {
		MDB_val k = page_key(buf, ns, rank, page), one = {1, "\1"};
		rc = fsck_punch_lists(f, &p, page, &k);
		uint8_t st = p.state[page] & 7;
		if ((st & 3) == 3 || st == 0)
			p.problems++; /* both free and used, or none of free, used, punching */
		bool should_be_free = !(st & 2) && !(st & 4);
		free_count += should_be_free;
		if (!f->repair || rc < 0)
			continue;
		if (should_be_free && !(st & 1))
			rc = kvc_lmdb_errno(mdb_put(f->txn, f->s->free, &k, &one, 0));
		if (rc == 0 && should_be_free) {
			int del = mdb_del(f->txn, f->s->pages, &k, NULL);
			rc = del == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(del);
		}
		if (rc == 0 && !should_be_free && (st & 1))
			rc = kvc_lmdb_errno(mdb_del(f->txn, f->s->free, &k, NULL));
	}
	if (rc == 0 && free_count != free_pages) {
		p.problems++;
		if (f->repair) {
			struct pool_info info = {num_pages, free_count};
			rc = pool_put(f->s, f->txn, ns, rank, &info);
		}
	}
	free(p.state);
	f->problems += p.problems;
	f->rc = rc;
	return rc < 0;
}

int64_t kvc_pool_fsck(struct kvc_pool_store *s, bool repair)
{
	/* One write transaction: the check sees (and fixes) one state. */
	struct fsck f = {.s = s, .repair = repair};
	int rc = begin(s, true, &f.txn);
	if (rc < 0)
		return rc;
	MDB_cursor *cur;
	MDB_val k, v;
	rc = kvc_lmdb_errno(mdb_cursor_open(f.txn, s->pools, &cur));
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0 && f.rc == 0) {
		struct pool_info p;
		char ns[KVC_POOL_MAX_NAMESPACE + 1];
		uint32_t rank;
		if (pool_entry_decode(&k, &v, ns, &rank, &p)) {
			mdb_cursor_close(cur);
			fsck_pool(&f, ns, rank, p.num_pages, p.free_pages);
			/* The pool table may have changed: find our place again. */
			rc = kvc_lmdb_errno(mdb_cursor_open(f.txn, s->pools, &cur));
			if (rc < 0)
				break;
			uint8_t again[KEYBUF];
			MDB_val ak = rank_key(again, ns, rank);
			k = ak;
			got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
			if (got == 0)
				got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
			continue;
		}
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	rc = rc < 0 ? rc : f.rc;
	if (!repair && rc == 0) {
		mdb_txn_abort(f.txn);
		return f.problems;
	}
	rc = kvc_lmdb_finish(f.txn, rc);
	return rc < 0 ? rc : f.problems;
}
