/*
 * pool_store_pages: the pages of the pools (part of pool_store, see
 * pool_store_internal.h). Owns the free list (`free`: ns,rank,page), the
 * page table (`pages`: ns,rank,page -> the key holding the page), the
 * free counts of the pools' records as a batch changes them (struct
 * counts), and allocation: a page per key on a rank, evicting when the
 * pool is full.
 *
 * Invariants it keeps:
 * - a page is in exactly one of `free` and `pages` (or, while the
 *   collector punches it, in `punching`: pool_store_punch.c), and the
 *   pool's free_pages counts the first: taking and freeing move a page
 *   and its count in the same transaction, so free + used (+ punching)
 *   == num_pages holds after every commit;
 * - a page belongs to at most one key: a key that holds a page on a rank
 *   (allocated or confirmed) gets that page again, never a second one;
 * - a freed page of a bound pool is listed in `punch`; taking it again
 *   takes it off that list (it is about to be rewritten);
 * - an allocation batch is one transaction; a full pool that cannot
 *   evict answers page -1 for the key, not an error.
 */
#include "meta/pool_store_internal.h"

#include <stdlib.h>

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
		int rc = kvc_pool_info_get(s, txn, ns, rank, &c->info[rank]);
		if (rc < 0)
			return rc;
		c->loaded[rank / 64] |= bit;
	}
	c->info[rank].free_pages += (uint32_t)delta;
	c->dirty[rank / 64] |= bit;
	return 0;
}

int kvc_pool_counts_flush(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                          struct counts *c)
{
	for (uint32_t rank = 0; rank < KVC_POOL_MAX_WORLD; rank++) {
		if (!(c->dirty[rank / 64] & (1ull << (rank % 64))))
			continue;
		int rc = kvc_pool_info_put(s, txn, ns, rank, &c->info[rank]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int kvc_pool_page_free(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
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

/* Take the lowest free page of a rank for key: 0, KVC_POOL_NONE when the
 * rank has none, or -errno (-ENOSPC: LMDB is full, not the rank). */
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
		return KVC_POOL_NONE;
	rc = kvc_lmdb_errno(rc);
	MDB_val pk = page_key(buf, ns, rank, *page), kv = {key->length, (void *)key->bytes};
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_put(txn, s->pages, &pk, &kv, 0));
	int bound = rc == 0 ? is_bound(s, txn, ns, rank, c) : 0;
	if (bound < 0)
		rc = bound;
	if (rc == 0 && bound) /* about to be written: no punch */
		rc = del_if_present(txn, s->punch, &pk);
	if (rc == 0)
		rc = counts_adjust(s, txn, ns, c, rank, -1);
	return rc;
}

/* The world size keys of this namespace use now (inferred when unknown). */
static uint32_t world_size(const struct pool_world *w)
{
	return w->world_size ? w->world_size : (w->ranks ? w->ranks : 1);
}

/* Allocate one key on rank inside the batch transaction. */
static int allocate_one(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                        const struct kvc_pool_key *key, uint64_t now_ms, struct pool_world *w,
                        struct counts *c, struct kvc_pool_allocation *out)
{
	struct key_record r;
	uint32_t page;
	*out = (struct kvc_pool_allocation){.page = -1};
	int rc = kvc_pool_record_get(s, txn, ns, key, &r);
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
	if (rc == KVC_POOL_NONE) {
		rc = kvc_pool_evict_for(s, txn, ns, rank, now_ms, w, c);
		if (rc == 0)
			rc = page_take(s, txn, ns, rank, key, &page, c);
	}
	if (rc == KVC_POOL_NONE)
		return 0; /* full: page -1 */
	if (rc < 0)
		return rc; /* LMDB full (-ENOSPC) or failed: the call's answer */
	*slot = (struct slot){(int32_t)page, SLOT_ALLOCATED};
	out->page = page;
	return kvc_pool_record_put(s, txn, ns, key, &r);
}

struct allocate_call {
	const char *ns;
	uint32_t rank, count;
	const struct kvc_pool_key *keys;
	uint64_t now_ms;
	struct kvc_pool_allocation *out;
};

static int allocate_in(struct kvc_pool_store *s, MDB_txn *txn, struct pool_world *w, void *arg)
{
	const struct allocate_call *a = arg;
	struct counts *c = calloc(1, sizeof(*c));
	int rc = c ? 0 : -ENOMEM;
	for (uint32_t i = 0; i < a->count && rc == 0; i++)
		rc = allocate_one(s, txn, a->ns, a->rank, &a->keys[i], a->now_ms, w, c, &a->out[i]);
	if (c)
		mdb_cursor_close(c->free_cursor); /* NULL when nothing was taken */
	if (rc == 0)
		rc = kvc_pool_counts_flush(s, txn, a->ns, c);
	free(c);
	return rc;
}

int kvc_pool_allocate(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                      const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms,
                      struct kvc_pool_allocation *out)
{
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (kvc_pool_check_key(&keys[i]) < 0)
			return -EINVAL;
	struct allocate_call a = {ns, rank, count, keys, now_ms, out};
	return kvc_pool_batch_run(s, ns, rank, allocate_in, &a);
}
