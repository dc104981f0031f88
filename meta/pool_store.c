/*
 * pool_store: the store itself (see pool_store.h for the model, rules and
 * tables, pool_store_internal.h for its parts). Owns the LMDB
 * environment, its tables and the format word; the transactions every
 * part begins; the checks of names and keys; the namespaces' world
 * records (`worlds`) and the pools' records (`pools`): creating and
 * growing a pool with its free pages, setting a world, a pool's counts
 * and the list of pools.
 *
 * Invariants it keeps:
 * - the format word ("\0format" in `worlds`, a key no namespace can have)
 *   is written into a new store and checked in an existing one: a store
 *   of another format does not open;
 * - a pool is created with all its pages free (num_pages entries in
 *   `free`, free_pages == num_pages) and only grows, in one transaction
 *   with its new free pages; it never shrinks (that would orphan pages);
 * - a namespace's world changes only while it has no key, and never to
 *   one that leaves an initialized pool outside it;
 * - opening a store puts back the pages a crash left being punched
 *   (pool_store_punch.c), before any other transaction.
 */
#include "meta/pool_store_internal.h"

#include <stdlib.h>
#include <time.h>

#include "core/fsutil.h"
#include "meta/sessions.h"

#define MAP_SIZE (32ull << 30)

int kvc_pool_check_ns(const char *ns)
{
	size_t n = ns ? strnlen(ns, KVC_POOL_MAX_NAMESPACE + 1) : 0;
	return n == 0 || n > KVC_POOL_MAX_NAMESPACE ? -EINVAL : 0;
}

int kvc_pool_check_key(const struct kvc_pool_key *k)
{
	if (k->length == 0 || k->length > KVC_POOL_MAX_KEY || k->bytes[0] == 1)
		return -EINVAL; /* byte 1 starts the names of retired keys */
	return 0;
}

/* ---- the world record ---- */

int kvc_pool_world_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
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

int kvc_pool_world_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns,
                       const struct pool_world *w)
{
	uint8_t buf[KEYBUF];
	MDB_val k = {key_ns(buf, ns) - 1, buf}, v = {sizeof(*w), (void *)w};
	return kvc_lmdb_errno(mdb_put(txn, s->worlds, &k, &v, 0));
}

/* ---- the pool record ---- */

int kvc_pool_info_get(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
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

int kvc_pool_info_put(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                      const struct pool_info *p)
{
	uint8_t buf[KEYBUF];
	MDB_val k = rank_key(buf, ns, rank), v = {sizeof(*p), (void *)p};
	return kvc_lmdb_errno(mdb_put(txn, s->pools, &k, &v, 0));
}

bool kvc_pool_entry_decode(const MDB_val *k, const MDB_val *v,
                           char ns[KVC_POOL_MAX_NAMESPACE + 1], uint32_t *rank,
                           struct pool_info *p)
{
	const uint8_t *rest;
	if (v->mv_size != sizeof(*p) || !ns_key_decode(k, 4, ns, &rest))
		return false;
	*rank = get_be32(rest);
	memcpy(p, v->mv_data, sizeof(*p));
	return true;
}

/* ---- transactions ---- */

int kvc_pool_txn_begin(struct kvc_pool_store *s, bool write, MDB_txn **txn)
{
	int rc = write ? kvc_lmdb_checkpoint_admit(s->checkpoint) : 0;
	return rc < 0 ? rc : kvc_lmdb_errno(mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, txn));
}

/* The format word, under a key no namespace can have (it starts with
 * NUL): written into a new store, checked in an existing one. Format 1
 * (before leases counted their readers) reads as format 2 and is marked
 * 2 on open, so an older kvc-meta, which knows 1 only, refuses it. */
static int check_format(struct kvc_pool_store *s, MDB_txn *txn)
{
	uint32_t format = KVC_POOL_FORMAT;
	MDB_val k = {7, "\0format"}, v;
	int rc = mdb_get(txn, s->worlds, &k, &v);
	if (rc && rc != MDB_NOTFOUND)
		return kvc_lmdb_errno(rc);
	if (rc == 0 && v.mv_size != sizeof(format))
		return -EINVAL;
	if (rc == 0)
		memcpy(&format, v.mv_data, sizeof(format));
	if (format != KVC_POOL_FORMAT && format != 1)
		return -EINVAL;
	if (rc == MDB_NOTFOUND || format != KVC_POOL_FORMAT) {
		format = KVC_POOL_FORMAT;
		v = (MDB_val){sizeof(format), &format};
		return kvc_lmdb_errno(mdb_put(txn, s->worlds, &k, &v, 0));
	}
	return 0;
}

/* ---- the pool clock ---- */

#define CLOCK_KEY "\0clock" /* in `worlds`: a key no namespace can have */

uint64_t kvc_pool_now_ms(struct kvc_pool_store *s)
{
	return s->clock_base_ms + (kvc_meta_sessions_now_ms() - s->clock_start_ms);
}

/* At open: go on from the saved reading (the wall clock for a store that
 * has none). */
static int clock_load(struct kvc_pool_store *s, MDB_txn *txn)
{
	MDB_val k = {sizeof(CLOCK_KEY) - 1, CLOCK_KEY}, v;
	int rc = mdb_get(txn, s->worlds, &k, &v);
	s->clock_start_ms = kvc_meta_sessions_now_ms();
	if (rc == MDB_NOTFOUND) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		s->clock_base_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
		return 0;
	}
	if (rc)
		return kvc_lmdb_errno(rc);
	if (v.mv_size != sizeof(s->clock_base_ms))
		return -EIO;
	memcpy(&s->clock_base_ms, v.mv_data, sizeof(s->clock_base_ms));
	return 0;
}

static int clock_save(struct kvc_pool_store *s)
{
	MDB_txn *txn;
	uint64_t now = kvc_pool_now_ms(s);
	MDB_val k = {sizeof(CLOCK_KEY) - 1, CLOCK_KEY}, v = {sizeof(now), &now};
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	return kvc_lmdb_finish(txn, kvc_lmdb_errno(mdb_put(txn, s->worlds, &k, &v, 0)));
}

struct batch_call {
	const char *ns;
	uint32_t rank;
	kvc_pool_batch_fn fn;
	void *arg;
};

static int batch_in(void *owner, MDB_txn *txn, void *arg)
{
	struct kvc_pool_store *s = owner;
	const struct batch_call *b = arg;
	struct pool_info p;
	struct pool_world w;
	int rc = kvc_pool_info_get(s, txn, b->ns, b->rank, &p);
	if (rc == 0)
		rc = kvc_pool_world_get(s, txn, b->ns, &w);
	if (rc == 0)
		rc = b->fn(s, txn, &w, b->arg);
	if (rc == 0)
		rc = kvc_pool_world_put(s, txn, b->ns, &w);
	return rc;
}

int kvc_pool_batch_run(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                       kvc_pool_batch_fn fn, void *arg)
{
	struct batch_call b = {ns, rank, fn, arg};
	return kvc_lmdb_group_run(&s->group, batch_in, &b);
}

static int group_begin(void *owner, MDB_txn **txn)
{
	return kvc_pool_txn_begin(owner, true, txn);
}

/* After a reboot (the newest checkpoint another boot's): every namespace's
 * lease numbers jump by KVC_POOL_LEASE_REBOOT_GAP, past any given out after
 * that checkpoint (a reader that outlived the crash still holds one, and
 * its release must not end a new lease of the same number). */
static int skip_given_leases(struct kvc_pool_store *s, MDB_txn *txn)
{
	MDB_cursor *cursor;
	MDB_val k, v;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->worlds, &cursor));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cursor, &k, &v, MDB_FIRST);
	while (got == 0 && rc == 0) {
		struct pool_world w;
		if (v.mv_size == sizeof(w)) { /* not the format record */
			memcpy(&w, v.mv_data, sizeof(w));
			if (w.magic == WORLD_MAGIC) {
				w.next_lease += KVC_POOL_LEASE_REBOOT_GAP;
				MDB_val nv = {sizeof(w), &w};
				rc = kvc_lmdb_errno(mdb_cursor_put(cursor, &k, &nv, MDB_CURRENT));
			}
		}
		got = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
	}
	if (rc == 0 && got != MDB_NOTFOUND)
		rc = kvc_lmdb_errno(got);
	mdb_cursor_close(cursor);
	return rc;
}

/* ---- the environment ---- */

int kvc_pool_store_open(const char *dir, struct kvc_pool_store **out)
{
	return kvc_pool_store_open_sized(dir, MAP_SIZE, out);
}

int kvc_pool_store_open_sized(const char *dir, uint64_t map_bytes,
                              struct kvc_pool_store **out)
{
	struct kvc_pool_store *s = calloc(1, sizeof(*s));
	MDB_txn *txn;
	if (!s)
		return -ENOMEM;
	int rc = kvc_lmdb_group_init(&s->group, group_begin, s);
	if (rc < 0) {
		free(s);
		return rc;
	}
	rc = kvc_pool_waits_open(s);
	if (rc == 0)
		rc = kvc_lmdb_checkpoint_env_open(dir, map_bytes, 12, &s->env, &s->checkpoint);
	if (rc == 0)
		rc = kvc_pool_txn_begin(s, true, &txn);
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
		rc = clock_load(s, txn);
	if (rc == 0)
		rc = kvc_pool_punching_recover(s, txn);
	bool rebooted = kvc_lmdb_checkpoint_after_reboot(s->checkpoint);
	if (rc == 0 && rebooted)
		rc = skip_given_leases(s, txn);
	rc = kvc_lmdb_finish(txn, rc);
	if (rc == 0 && rebooted) /* the jump is durable before any lease goes */
		rc = kvc_lmdb_checkpoint_sync(s->checkpoint);
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
	kvc_pool_waits_close(s); /* no waiter looks at the store after this */
	if (s->clock_start_ms) /* opened: the clock goes on from here next time */
		clock_save(s);
	kvc_lmdb_checkpoint_close(s->checkpoint);
	kvc_lmdb_close(s->env);
	kvc_lmdb_group_destroy(&s->group);
	free(s);
}

int kvc_pool_store_sync(struct kvc_pool_store *s)
{
	int rc = clock_save(s);
	return rc < 0 ? rc : kvc_lmdb_checkpoint_sync(s->checkpoint);
}

/* ---- pools and worlds ---- */

static int init_txn(struct kvc_pool_store *s, MDB_txn *txn, const char *ns, uint32_t rank,
                    uint32_t num_pages, uint32_t world)
{
	struct pool_world w;
	struct pool_info p;
	uint8_t buf[KEYBUF];
	int rc = kvc_pool_world_get(s, txn, ns, &w);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	if (world && w.world_size && w.world_size != world)
		return -EINVAL;
	if (world)
		w.world_size = world;
	rc = kvc_pool_info_get(s, txn, ns, rank, &p);
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
	rc = kvc_pool_info_put(s, txn, ns, rank, &p);
	return rc == 0 ? kvc_pool_world_put(s, txn, ns, &w) : rc;
}

int kvc_pool_init(struct kvc_pool_store *s, const char *ns, uint32_t rank, uint32_t num_pages,
                  uint32_t world)
{
	MDB_txn *txn;
	if (kvc_pool_check_ns(ns) < 0 || num_pages == 0 || num_pages > KVC_POOL_MAX_PAGES ||
	    world > KVC_POOL_MAX_WORLD || rank >= KVC_POOL_MAX_WORLD || (world && rank >= world))
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	return kvc_lmdb_finish(txn, init_txn(s, txn, ns, rank, num_pages, world));
}

int kvc_pool_set_world(struct kvc_pool_store *s, const char *ns, uint32_t world)
{
	MDB_txn *txn;
	struct pool_world w;
	if (kvc_pool_check_ns(ns) < 0 || world == 0 || world > KVC_POOL_MAX_WORLD)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_pool_world_get(s, txn, ns, &w);
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
			if (kvc_pool_info_get(s, txn, ns, rank, &p) == 0)
				rc = -EINVAL;
	}
	if (rc == 0 || rc == -ENOENT) {
		w.world_size = world;
		rc = kvc_pool_world_put(s, txn, ns, &w);
	}
	return kvc_lmdb_finish(txn, rc);
}

int kvc_pool_info(struct kvc_pool_store *s, const char *ns, uint32_t rank,
                  uint32_t *num_pages, uint32_t *free_pages)
{
	MDB_txn *txn;
	struct pool_info p;
	if (kvc_pool_check_ns(ns) < 0)
		return -EINVAL;
	int rc = kvc_pool_txn_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_pool_info_get(s, txn, ns, rank, &p);
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
	int rc = kvc_pool_txn_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->pools, &cur));
	MDB_val k, v;
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0) {
		struct pool_info p;
		char ns[KVC_POOL_MAX_NAMESPACE + 1];
		uint32_t rank;
		if (kvc_pool_entry_decode(&k, &v, ns, &rank, &p) &&
		    fn(arg, ns, rank, p.num_pages, p.free_pages))
			break;
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc;
}
