/*
 * pool_store_evict: how keys go away (part of pool_store, see
 * pool_store_internal.h): eviction when a pool is full, delete and clear,
 * the end of read leases, and the sweep of retired keys. Owns dropping a
 * record (its pages freed on every rank, its LRU entry and record gone)
 * and retiring one (moved out of sight under the reserved name byte 1 +
 * u64 sequence, pages kept), and the namespace's eviction hint
 * (pool_world.no_eviction_before_ms).
 *
 * Invariants it keeps:
 * - a key under a read lease (lease_until > now) is never dropped:
 *   eviction skips it, delete and clear retire it; a retired key is
 *   invisible to readers and gives its pages back once its lease ended
 *   (eviction takes retired keys first, the sweep finds them);
 * - eviction takes keys in LRU order, looks at no more than EVICT_SCAN
 *   entries per allocation, and after a scan that found nothing records
 *   the earliest lease end it saw, before which no scan can succeed;
 *   ending leases early and deleting (or clearing) keys clear that hint;
 * - clearing runs in transactions of CLEAR_CHUNK keys, so it never holds
 *   the single writer for long; keys added meanwhile may survive.
 */
#include "meta/pool_store_internal.h"

#include <stdlib.h>

#define EVICT_SCAN 4096         /* LRU entries one allocation may look at */
#define CLEAR_CHUNK 4096        /* keys one clear transaction deletes */
#define SWEEP_MAX 4096          /* retired keys one sweep frees per namespace */

/* Free every page a record holds and drop it (and its LRU entry). */
static int record_drop(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                       const struct kvc_pool_key *key, const struct key_record *r,
                       struct counts *c)
{
	int rc = 0;
	for (uint32_t rank = 0; rank < r->head.world && rc == 0; rank++)
		if (r->slots[rank].state != SLOT_NONE)
			rc = kvc_pool_page_free(s, txn, ns, rank, (uint32_t)r->slots[rank].page, c);
	if (rc == 0 && r->head.lru_seq)
		rc = kvc_pool_lru_del(s, txn, ns, r->head.lru_seq);
	if (rc == 0)
		rc = kvc_pool_record_del(s, txn, ns, key);
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
	int rc = r->head.lru_seq ? kvc_pool_lru_del(s, txn, ns, r->head.lru_seq) : 0;
	if (rc == 0)
		rc = kvc_pool_record_del(s, txn, ns, key);
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
		rc = kvc_pool_record_put(s, txn, ns, &retired, r);
	if (rc == 0)
		rc = kvc_pool_lru_put(s, txn, ns, r->head.lru_seq, &retired);
	return rc;
}

int kvc_pool_evict_for(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                       uint64_t now_ms, struct pool_world *w, struct counts *c)
{
	uint8_t buf[KEYBUF], name[KVC_POOL_MAX_KEY];
	size_t prefix = key_ns(buf, ns);
	MDB_val k = {prefix, buf}, v;
	uint64_t earliest_lease = UINT64_MAX;
	if (now_ms < w->no_eviction_before_ms)
		return KVC_POOL_NONE;
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
			if (kvc_pool_record_get(s, txn, ns, &key, &r) == 0) {
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
			return KVC_POOL_NONE;
		}
		bool frees_ours = rank < r.head.world && r.slots[rank].state != SLOT_NONE;
		rc = record_drop(s, txn, ns, &key, &r, c);
		if (rc < 0)
			return rc;
		w->evictions++;
		if (frees_ours)
			return 0;
	}
	return KVC_POOL_NONE;
}

int kvc_pool_release_leases(struct kvc_pool_store *s, const char *ns,
                            const struct kvc_pool_key *keys, const uint32_t *leases,
                            uint32_t count, uint64_t now_ms, bool *held)
{
	MDB_txn *txn;
	struct key_record r;
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, true, &txn), still = 0;
	if (rc < 0)
		return rc;
	bool ended = false;
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		held[i] = false;
		int got = kvc_pool_check_key(&keys[i]) == 0
		                  ? kvc_pool_record_get(s, txn, ns, &keys[i], &r)
		                  : -ENOENT;
		if (got < 0) {
			rc = got == -ENOENT ? 0 : got;
			continue;
		}
		if (r.head.lease_until <= now_ms || !leases[i] ||
		    kvc_pool_lease_number(&r.head) != leases[i])
			continue; /* ended, never given, or a later lease than this reader's */
		held[i] = true;
		still++;
		if (r.head.readers == READERS_UNKNOWN)
			continue; /* ends by time */
		if (r.head.readers > 1) {
			r.head.readers--;
		} else {
			r.head.readers = 0;
			r.head.lease_until = 0;
			ended = true;
		}
		rc = kvc_pool_record_put(s, txn, ns, &keys[i], &r);
	}
	/* A lease ended early: evictions may succeed again at once. */
	struct pool_world w;
	if (rc == 0 && ended && kvc_pool_world_get(s, txn, ns, &w) == 0 &&
	    w.no_eviction_before_ms) {
		w.no_eviction_before_ms = 0;
		rc = kvc_pool_world_put(s, txn, ns, &w);
	}
	rc = kvc_lmdb_finish(txn, rc);
	return rc < 0 ? rc : still;
}

/* ---- delete and clear ---- */

/* Delete or retire one key inside a transaction; 1 when it existed. */
static int delete_one(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                      const struct kvc_pool_key *key, uint64_t now_ms, struct pool_world *w,
                      struct counts *c)
{
	struct key_record r;
	int rc = kvc_pool_record_get(s, txn, ns, key, &r);
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
	if (kvc_pool_check_ns(ns) < 0 || count > KVC_POOL_MAX_BATCH)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, true, &txn), deleted = 0;
	if (rc < 0)
		return rc;
	struct counts *c = calloc(1, sizeof(*c));
	rc = c ? kvc_pool_world_get(s, txn, ns, &w) : -ENOMEM;
	if (rc == -ENOENT)
		rc = 0;
	for (uint32_t i = 0; i < count && rc >= 0; i++) {
		if (kvc_pool_check_key(&keys[i]) < 0)
			continue;
		rc = delete_one(s, txn, ns, &keys[i], now_ms, &w, c);
		deleted += rc > 0;
	}
	if (rc >= 0)
		rc = kvc_pool_counts_flush(s, txn, ns, c);
	if (rc >= 0)
		rc = kvc_pool_world_put(s, txn, ns, &w);
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
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_pool_world_get(s, txn, ns, &w);
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
		rc = kvc_pool_counts_flush(s, txn, ns, c);
	if (rc >= 0)
		rc = kvc_pool_world_put(s, txn, ns, &w);
	free(c);
	rc = kvc_lmdb_finish(txn, rc < 0 ? rc : 0);
	if (rc == 0) /* committed: waits on ns end (their keys are gone) */
		kvc_pool_waits_notify(s, ns, true);
	return rc;
}

int kvc_pool_clear(struct kvc_pool_store *s, const char *ns, uint64_t now_ms)
{
	/* In transactions of CLEAR_CHUNK keys, so a large namespace does not
	 * hold the (single) writer for seconds; clearing needs no atomicity. */
	bool left = true;
	int rc = kvc_pool_check_ns(ns);
	while (rc == 0 && left)
		rc = kvc_pool_clear_some(s, ns, now_ms, CLEAR_CHUNK, &left);
	return rc;
}

/* ---- the sweep of retired keys ---- */

/* Free the retired keys of ns whose lease ended (at most max). Retired
 * keys sort first in the namespace's LRU, so this reads only its head. */
static int sweep_namespace(struct kvc_pool_store *s, const char *ns, uint64_t now_ms, int max)
{
	MDB_txn *txn;
	struct pool_world w;
	uint8_t buf[KEYBUF], name[KVC_POOL_MAX_KEY];
	int freed = 0;
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_pool_world_get(s, txn, ns, &w);
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
			uint64_t seq = get_be64((const uint8_t *)k.mv_data + prefix);
			if (seq >= LRU_BASE || v.mv_size > sizeof(name))
				break;
			key.length = (uint32_t)v.mv_size;
			memcpy(name, v.mv_data, v.mv_size);
			if (kvc_pool_record_get(s, txn, ns, &key, &r) == 0 &&
			    r.head.lease_until <= now_ms) {
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
		rc = kvc_pool_counts_flush(s, txn, ns, c);
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
	int n = sweep_namespace(a->s, ns, a->now_ms, SWEEP_MAX);
	a->freed += n > 0 ? n : 0;
	return 0;
}

int kvc_pool_sweep(struct kvc_pool_store *s, uint64_t now_ms)
{
	struct sweep_arg a = {.s = s, .now_ms = now_ms};
	int rc = kvc_pool_list(s, sweep_pool, &a);
	return rc < 0 ? rc : a.freed;
}
