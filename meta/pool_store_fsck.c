/*
 * pool_store_fsck: the accounting check of the page pools and its repair
 * (part of pool_store, see pool_store_internal.h). Owns nothing on disk;
 * reads every pool's pages in `free`, `pages`, `punching` and `punch`
 * and, asked to, rewrites them.
 *
 * What it checks, per pool (ns, rank): every page below num_pages is in
 * exactly one of free, used (in `pages`, held by a key whose record
 * names that page on that rank) and punching; no entry lies beyond the
 * pool; a page being punched is neither free nor used; a listed page is
 * free; free_pages equals the count of pages that should be free.
 * Repair makes pages that nobody validly holds free, drops dangling
 * entries, and rewrites the count; records of keys are never changed.
 * The whole check is one write transaction, so it sees (and fixes) one
 * state; without repair it is aborted.
 */
#include "meta/pool_store_internal.h"

#include <stdlib.h>

/* Per page, in struct page_scan's state. */
#define PAGE_FREE 1
#define PAGE_USED 2     /* validly held */
#define PAGE_PUNCHING 4
#define PAGE_LISTED 8   /* listed for punching */

struct fsck {
	struct kvc_pool_store *s;
	MDB_txn *txn;
	bool repair;
	int64_t problems;
	int rc;
};

/* Walk the entries of db under prefix; fn gets the suffix and value. */
static int walk(MDB_txn *txn, MDB_dbi db, const uint8_t *prefix, size_t n,
                int (*fn)(void *, const uint8_t *, size_t, MDB_val *), void *arg)
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
	return rc;
}

struct page_scan {
	uint8_t *state; /* per page: PAGE_* bits */
	uint32_t num_pages;
	struct fsck *f;
	const char *ns;
	uint32_t rank;
	int64_t problems;
};

/* Mark the page named by a suffix (a page number) with bit. */
static int scan_mark(struct page_scan *p, const uint8_t *suffix, size_t n, uint8_t bit)
{
	if (n != 4)
		return 0;
	uint32_t page = get_be32(suffix);
	if (page >= p->num_pages)
		p->problems++; /* beyond the pool */
	else
		p->state[page] |= bit;
	return 0;
}

static int scan_free(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	(void)v;
	return scan_mark(arg, suffix, n, PAGE_FREE);
}

static int scan_punching(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	(void)v;
	return scan_mark(arg, suffix, n, PAGE_PUNCHING);
}

static int scan_punch(void *arg, const uint8_t *suffix, size_t n, MDB_val *v)
{
	(void)v;
	return scan_mark(arg, suffix, n, PAGE_LISTED);
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
	            kvc_pool_record_get(p->f->s, p->f->txn, p->ns, &key, &r) == 0 &&
	            p->rank < r.head.world && r.slots[p->rank].page == (int32_t)page &&
	            r.slots[p->rank].state != SLOT_NONE;
	if (page >= p->num_pages || !held) {
		p->problems++;
		return 0; /* repaired below: the page becomes free */
	}
	p->state[page] |= PAGE_USED;
	return 0;
}

/* Repair the punch lists of one page: a page being punched is neither
 * free nor used; a listed page must be free. */
static int fsck_punch_lists(struct fsck *f, struct page_scan *p, uint32_t page, MDB_val *k)
{
	uint8_t st = p->state[page];
	bool bad_punching = (st & PAGE_PUNCHING) && (st & (PAGE_FREE | PAGE_USED)),
	     bad_listed = (st & PAGE_LISTED) && (st & (PAGE_FREE | PAGE_USED)) != PAGE_FREE;
	p->problems += bad_punching + bad_listed;
	int rc = 0;
	if (f->repair && bad_punching)
		rc = kvc_lmdb_errno(mdb_del(f->txn, f->s->punching, k, NULL));
	if (rc == 0 && f->repair && bad_listed)
		rc = kvc_lmdb_errno(mdb_del(f->txn, f->s->punch, k, NULL));
	if (bad_punching)
		p->state[page] &= (uint8_t)~PAGE_PUNCHING;
	return rc;
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
	int rc = walk(f->txn, f->s->free, prefix, pk.mv_size, scan_free, &p);
	if (rc == 0)
		rc = walk(f->txn, f->s->pages, prefix, pk.mv_size, scan_used, &p);
	if (rc == 0)
		rc = walk(f->txn, f->s->punching, prefix, pk.mv_size, scan_punching, &p);
	if (rc == 0)
		rc = walk(f->txn, f->s->punch, prefix, pk.mv_size, scan_punch, &p);
	uint32_t free_count = 0;
	for (uint32_t page = 0; page < num_pages && rc == 0; page++) {
		MDB_val k = page_key(buf, ns, rank, page), one = {1, "\1"};
		rc = fsck_punch_lists(f, &p, page, &k);
		uint8_t st = p.state[page] & (PAGE_FREE | PAGE_USED | PAGE_PUNCHING);
		if ((st & (PAGE_FREE | PAGE_USED)) == (PAGE_FREE | PAGE_USED) || st == 0)
			p.problems++; /* both free and used, or none of free, used, punching */
		bool should_be_free = !(st & PAGE_USED) && !(st & PAGE_PUNCHING);
		free_count += should_be_free;
		if (!f->repair || rc < 0)
			continue;
		if (should_be_free && !(st & PAGE_FREE))
			rc = kvc_lmdb_errno(mdb_put(f->txn, f->s->free, &k, &one, 0));
		if (rc == 0 && should_be_free)
			rc = del_if_present(f->txn, f->s->pages, &k);
		if (rc == 0 && !should_be_free && (st & PAGE_FREE))
			rc = kvc_lmdb_errno(mdb_del(f->txn, f->s->free, &k, NULL));
	}
	if (rc == 0 && free_count != free_pages) {
		p.problems++;
		if (f->repair) {
			struct pool_info info = {num_pages, free_count};
			rc = kvc_pool_info_put(f->s, f->txn, ns, rank, &info);
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
	int rc = kvc_pool_txn_begin(s, true, &f.txn);
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
		if (kvc_pool_entry_decode(&k, &v, ns, &rank, &p)) {
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
