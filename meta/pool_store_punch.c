/*
 * pool_store_punch: pools bound to files, and giving freed pages' space
 * back (part of pool_store, see pool_store_internal.h). Owns the tables
 * `bindings` (ns,rank -> struct pool_binding), `punch` (ns,rank,page: a
 * free page whose bytes are still to be punched) and `punching`
 * (ns,rank,page: out of the free list while the collector punches it).
 *
 * A page freed in a bound pool is free at once and also listed in
 * `punch` (pool_store_pages.c; taking the page again unlists it). The
 * collector takes listed pages out of the free list into `punching` (so
 * no writer can get them while their bytes are punched), punches them,
 * and gives them back. A crash in between leaves them in `punching`:
 * opening the store puts them back (free, listed again).
 *
 * Invariants it keeps:
 * - a page in `punching` is in neither `free` nor `pages`, and its
 *   pool's free count does not include it: free + used + punching ==
 *   num_pages; a page moves between `free` and `punching` together with
 *   its count, and only when it really was where it is taken from;
 * - only a bound pool's pages are listed: unbinding drops the pool's
 *   list (its pages stay free), recovery at open lists a page again only
 *   while its pool is bound, and a listed page whose pool is no longer
 *   bound is dropped from the list when taken;
 * - the collector gets only pages that really left the free list: a
 *   listed page a key holds meanwhile is dropped from the list, never
 *   handed out (punching it would zero the key's bytes).
 */
#include "meta/pool_store_internal.h"

/* bindings: a pool bound to a file of the namespace: page p is bytes
 * p * page_size .. (p + 1) * page_size of inode. Stored up to the end of
 * its path (path_length bytes, no NUL). */
struct pool_binding {
	uint64_t inode;
	uint64_t page_size;
	uint32_t path_length;
	uint32_t reserved;
	char path[KVC_POOL_MAX_PATH];
};

/* Decode a page_key (ns, rank, page); false for another shape. */
static bool page_key_decode(const MDB_val *k, char ns[KVC_POOL_MAX_NAMESPACE + 1],
                            uint32_t *rank, uint32_t *page)
{
	const uint8_t *rest;
	if (!ns_key_decode(k, 8, ns, &rest) || ns[0] == '\0')
		return false;
	*rank = get_be32(rest);
	*page = get_be32(rest + 4);
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
 * free count only when the page really moved. Returns 1 when it moved, 0
 * when it was not where it is taken from (taken by a key or repaired
 * meanwhile: nothing to move, and nothing to punch), or -errno. */
static int punch_move(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                      uint32_t page, bool to_punching)
{
	uint8_t buf[KEYBUF];
	struct pool_info p;
	MDB_val k = page_key(buf, ns, rank, page), one = {1, "\1"};
	MDB_dbi from = to_punching ? s->free : s->punching, to = to_punching ? s->punching : s->free;
	int rc = mdb_del(txn, from, &k, NULL);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc == 0)
		rc = mdb_put(txn, to, &k, &one, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST)
		return 0;
	rc = kvc_lmdb_errno(rc);
	if (rc == 0)
		rc = kvc_pool_info_get(s, txn, ns, rank, &p);
	if (rc == 0) {
		p.free_pages += to_punching ? (uint32_t)-1 : 1u;
		rc = kvc_pool_info_put(s, txn, ns, rank, &p);
	}
	return rc == -ENOENT ? 0 : rc == 0 ? 1 : rc;
}

int kvc_pool_punching_recover(struct kvc_pool_store *s, MDB_txn *txn)
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
			struct pool_binding b;
			rc = punch_move(s, txn, ns, rank, page, false);
			/* Listed again only while its pool is still bound: a listing
			 * of an unbound pool would survive a key taking the page,
			 * and a later binding would hand that key's page out. */
			int bound = rc >= 0 ? binding_get(s, txn, ns, rank, &b) : rc;
			if (rc >= 0 && bound == 0)
				rc = kvc_lmdb_errno(mdb_put(txn, s->punch, &copy, &one, 0));
			else if (rc >= 0 && bound != -ENOENT)
				rc = bound;
			rc = rc < 0 ? rc : 0;
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
	if (kvc_pool_check_ns(ns) < 0 || rank >= KVC_POOL_MAX_WORLD)
		return -EINVAL;
	if (binding && (binding->inode == 0 || binding->page_size == 0 ||
	                binding->page_size > KVC_POOL_MAX_PAGE_SIZE ||
	                strnlen(binding->path, sizeof(binding->path)) > KVC_POOL_MAX_PATH))
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_pool_info_get(s, txn, ns, rank, &p);
	MDB_val k = rank_key(buf, ns, rank);
	if (rc == 0 && binding) {
		struct pool_binding b = {.inode = binding->inode, .page_size = binding->page_size,
		                         .path_length = (uint32_t)strlen(binding->path)};
		memcpy(b.path, binding->path, b.path_length);
		MDB_val v = {offsetof(struct pool_binding, path) + b.path_length, &b};
		rc = kvc_lmdb_errno(mdb_put(txn, s->bindings, &k, &v, 0));
	} else if (rc == 0) {
		rc = del_if_present(txn, s->bindings, &k);
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
	if (kvc_pool_check_ns(ns) < 0 || rank >= KVC_POOL_MAX_WORLD)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, false, &txn);
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
	int rc = kvc_pool_txn_begin(s, true, &txn);
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
			count += rc == 1; /* only a page that really left the free list */
			rc = rc < 0 ? rc : 0;
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
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	for (int i = 0; i < count && rc == 0; i++) {
		const struct kvc_pool_punch *p = &punches[i];
		rc = punch_move(s, txn, p->ns, p->rank, p->page, false);
		rc = rc < 0 ? rc : 0;
		MDB_val k = page_key(buf, p->ns, p->rank, p->page), one = {1, "\1"};
		/* Not punched (a storage server down): listed again, if still bound. */
		if (rc == 0 && !punched[i] && binding_get(s, txn, p->ns, p->rank, &b) == 0)
			rc = kvc_lmdb_errno(mdb_put(txn, s->punch, &k, &one, 0));
	}
	return kvc_lmdb_finish(txn, rc);
}
