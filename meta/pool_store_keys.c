/*
 * pool_store_keys: key records (part of pool_store, see
 * pool_store_internal.h). Owns the `keys` table (ns,key -> a head and a
 * (page, state) slot per rank of the key's world) and the `lru` table
 * (ns,seq -> key), and what readers and writers do to a key: confirm its
 * writes, release pages whose writes failed, ask whether keys exist, get
 * their pages (touching and leasing them), list them, count them.
 *
 * Invariants it keeps:
 * - a record's size follows from its head (record_size(world)); a record
 *   of another shape or magic reads as -EIO, never as a key;
 * - a key is complete when every rank of its world confirmed and it is
 *   not retired; only complete keys exist for readers (exists,
 *   locations) and only they have an LRU entry of a seq >= LRU_BASE,
 *   taken when the last rank confirms and renewed when it is read;
 * - confirming is idempotent and never changes a key that does not hold
 *   that page on that rank (-ESTALE);
 * - releasing after a failed write frees a page only while it is still
 *   allocated, unconfirmed, to a key that is not retired; a record left
 *   with no page on any rank goes.
 */
#include "meta/pool_store_internal.h"

#include <stdlib.h>

static size_t record_size(uint32_t world)
{
	return sizeof(struct key_head) + world * sizeof(struct slot);
}

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

int kvc_pool_record_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
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

int kvc_pool_record_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                        const struct kvc_pool_key *key, const struct key_record *r)
{
	uint8_t buf[KEYBUF];
	MDB_val k = record_key(buf, ns, key), v = {record_size(r->head.world), (void *)r};
	return kvc_lmdb_errno(mdb_put(txn, s->keys, &k, &v, 0));
}

int kvc_pool_record_del(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                        const struct kvc_pool_key *key)
{
	uint8_t buf[KEYBUF];
	MDB_val k = record_key(buf, ns, key);
	return kvc_lmdb_errno(mdb_del(txn, s->keys, &k, NULL));
}

int kvc_pool_lru_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint64_t seq,
                     const struct kvc_pool_key *key)
{
	uint8_t buf[KEYBUF];
	MDB_val k = lru_key(buf, ns, seq), v = {key->length, (void *)key->bytes};
	return kvc_lmdb_errno(mdb_put(txn, s->lru, &k, &v, 0));
}

int kvc_pool_lru_del(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint64_t seq)
{
	uint8_t buf[KEYBUF];
	MDB_val k = lru_key(buf, ns, seq);
	return del_if_present(txn, s->lru, &k);
}

static bool complete(const struct key_head *h)
{
	return !h->retired && h->confirmed == h->world;
}

/* ---- writers: confirm and release ---- */

static int confirm_one(struct kvc_pool_store *s, MDB_txn *txn, struct record_at *at,
                       const char *ns, uint32_t rank, const struct kvc_pool_key *key,
                       int64_t page, struct pool_world *w, uint32_t *completed)
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
		(*completed)++;
		r.head.lru_seq = w->next_lru++;
		rc = kvc_pool_lru_put(s, txn, ns, r.head.lru_seq, key);
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
	rc = kvc_pool_record_get(s, txn, ns, &key, &r);
	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	if (rank >= r.head.world || r.slots[rank].page != page ||
	    r.slots[rank].state != SLOT_ALLOCATED || r.head.retired)
		return 0; /* confirmed (or someone else's): never freed here */
	r.slots[rank] = (struct slot){-1, SLOT_NONE};
	rc = kvc_pool_page_free(s, txn, ns, rank, (uint32_t)page, c);
	bool empty = true;
	for (uint32_t i = 0; i < r.head.world; i++)
		empty &= r.slots[i].state == SLOT_NONE;
	if (rc == 0)
		rc = empty ? kvc_pool_record_del(s, txn, ns, &key)
		           : kvc_pool_record_put(s, txn, ns, &key, &r);
	return rc;
}

struct confirm_call {
	const char *ns;
	uint32_t rank, count, release_count;
	const struct kvc_pool_key *keys;
	const int64_t *pages, *release;
	int *statuses;
	uint32_t completed; /* out: keys this batch made complete */
};

static int confirm_in(struct kvc_pool_store *s, MDB_txn *txn, struct pool_world *w, void *arg)
{
	struct confirm_call *cc = arg;
	struct record_at at = {.cursor = NULL};
	cc->completed = 0;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &at.cursor));
	for (uint32_t i = 0; i < cc->count && rc == 0; i++) {
		int one = confirm_one(s, txn, &at, cc->ns, cc->rank, &cc->keys[i], cc->pages[i], w,
		                      &cc->completed);
		if (cc->statuses)
			cc->statuses[i] = one == -ESTALE ? -ESTALE : 0;
		rc = one == -ESTALE ? 0 : one;
	}
	mdb_cursor_close(at.cursor); /* closing NULL is a no-op */
	struct counts *c = cc->release_count ? calloc(1, sizeof(*c)) : NULL;
	if (cc->release_count && !c && rc == 0)
		rc = -ENOMEM;
	for (uint32_t i = 0; i < cc->release_count && rc == 0; i++)
		rc = release_one(s, txn, cc->ns, cc->rank, cc->release[i], c);
	if (rc == 0 && c)
		rc = kvc_pool_counts_flush(s, txn, cc->ns, c);
	free(c);
	return rc;
}

int kvc_pool_confirm(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                     const struct kvc_pool_key *keys, const int64_t *pages, uint32_t count,
                     const int64_t *release, uint32_t release_count, uint64_t now_ms,
                     int *statuses)
{
	(void)now_ms;
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH ||
	    release_count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (kvc_pool_check_key(&keys[i]) < 0)
			return -EINVAL;
	struct confirm_call cc = {.ns = ns, .rank = rank, .count = count,
	                          .release_count = release_count, .keys = keys, .pages = pages,
	                          .release = release, .statuses = statuses};
	int rc = kvc_pool_batch_run(s, ns, rank, confirm_in, &cc);
	if (rc == 0 && cc.completed) /* committed: the waiters see it */
		kvc_pool_waits_notify(s, ns, false);
	return rc;
}

/* ---- readers ---- */

int kvc_pool_exists(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *keys,
                    uint32_t count, bool *out)
{
	MDB_txn *txn;
	struct key_record r;
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		int got = kvc_pool_check_key(&keys[i]) == 0
		                  ? kvc_pool_record_get(s, txn, ns, &keys[i], &r)
		                  : -ENOENT;
		out[i] = got == 0 && complete(&r.head);
		rc = got == -ENOENT || got == 0 ? 0 : got;
	}
	mdb_txn_abort(txn);
	return rc;
}

struct locations_call {
	const char *ns;
	uint32_t rank, count, lease_ms;
	const struct kvc_pool_key *keys;
	uint64_t now_ms;
	int64_t *pages;
	uint32_t *leases; /* optional */
};

/* Lease a key's record until now_ms + lease_ms for one more reader:
 * while its lease is held the reader joins it (and stretches it); else a
 * new lease begins with this reader alone, under the namespace's next
 * number (w). Returns the lease's number. */
static uint32_t lease_join(struct key_head *h, struct pool_world *w, uint64_t now_ms,
                           uint32_t lease_ms)
{
	bool held = h->lease_until > now_ms;
	/* a held lease of a format 1 store (readers 0): its readers are unknown */
	if (held && h->readers != READERS_UNKNOWN)
		h->readers = h->readers ? h->readers + 1 : READERS_UNKNOWN;
	if (!held || !kvc_pool_lease_number(h)) {
		uint32_t next = ++w->next_lease ? w->next_lease : ++w->next_lease;
		h->lease_high = (uint16_t)(next >> 16);
		h->lease_low = (uint16_t)next;
	}
	if (!held)
		h->readers = 1;
	if (now_ms + lease_ms > h->lease_until)
		h->lease_until = now_ms + lease_ms;
	return kvc_pool_lease_number(h);
}

static int locations_in(struct kvc_pool_store *s, MDB_txn *txn, struct pool_world *w,
                        void *arg)
{
	const struct locations_call *l = arg;
	struct key_record r;
	struct record_at at = {.cursor = NULL};
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->keys, &at.cursor));
	for (uint32_t i = 0; i < l->count && rc == 0; i++) {
		const struct kvc_pool_key *key = &l->keys[i];
		l->pages[i] = -1;
		if (l->leases)
			l->leases[i] = 0;
		int got = kvc_pool_check_key(key) == 0 ? record_seek(&at, l->ns, key, &r) : -ENOENT;
		if (got == -ENOENT || (got == 0 && (!complete(&r.head) || l->rank >= r.head.world))) {
			w->misses++;
			continue;
		}
		if (got < 0) {
			rc = got;
			break;
		}
		w->hits++;
		l->pages[i] = r.slots[l->rank].page;
		/* Touch: move to the young end of the LRU (unless it is there
		 * already); lease it. */
		bool touch = r.head.lru_seq + 1 != w->next_lru;
		if (touch) {
			rc = kvc_pool_lru_del(s, txn, l->ns, r.head.lru_seq);
			r.head.lru_seq = w->next_lru++;
			if (rc == 0)
				rc = kvc_pool_lru_put(s, txn, l->ns, r.head.lru_seq, key);
		}
		if (l->lease_ms) {
			uint32_t number = lease_join(&r.head, w, l->now_ms, l->lease_ms);
			if (l->leases)
				l->leases[i] = number;
		}
		if (rc == 0 && (touch || l->lease_ms))
			rc = record_rewrite(&at, &r);
	}
	mdb_cursor_close(at.cursor);
	return rc;
}

int kvc_pool_locations(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                       const struct kvc_pool_key *keys, uint32_t count, uint64_t now_ms,
                       uint32_t lease_ms, int64_t *pages, uint32_t *leases)
{
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	struct locations_call l = {ns, rank, count, lease_ms, keys, now_ms, pages, leases};
	return kvc_pool_batch_run(s, ns, rank, locations_in, &l);
}

/* ---- administration: listing and counting ---- */

int kvc_pool_keys(struct kvc_pool_store *s, const char *ns, const struct kvc_pool_key *after,
                  uint32_t max, struct kvc_pool_key_info *out, bool *more)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	uint8_t buf[KEYBUF];
	if (kvc_pool_check_ns(ns) < 0 || (after->length && kvc_pool_check_key(after) < 0))
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, false, &txn);
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

int kvc_pool_stats(struct kvc_pool_store *s, const char *ns, uint32_t rank, uint64_t now_ms,
                   struct kvc_pool_stats *out)
{
	MDB_txn *txn;
	struct pool_world w;
	struct pool_info p = {0};
	uint8_t buf[KEYBUF];
	if (kvc_pool_check_ns(ns) < 0)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	rc = kvc_pool_world_get(s, txn, ns, &w);
	if (rc == 0) {
		int has = kvc_pool_info_get(s, txn, ns, rank, &p);
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
				out->complete_keys += complete(&h);
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
