/* Unit tests of the page pools: completeness across ranks, reuse, release
 * rules, racing writers, LRU eviction, leases, delete/clear, accounting
 * after every operation, reopen. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <lmdb.h>
#include <string.h>

#include "meta/pool_store.h"
#include "test_dir.h"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_pool_store *store;

static void setup(void)
{
	kvc_test_dir_make(dir, "pool");
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
}

static void teardown(void)
{
	kvc_pool_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(pool_store, .init = setup, .fini = teardown);

static struct kvc_pool_key K(const char *s)
{
	return (struct kvc_pool_key){s, (uint32_t)strlen(s)};
}

/* free + used == num_pages and every page held by exactly its key. */
static void check_accounting(void)
{
	cr_assert_eq(kvc_pool_fsck(store, false), 0, "fsck found problems");
}

static int64_t alloc1(const char *ns, uint32_t rank, const char *key, uint64_t now, bool *already)
{
	struct kvc_pool_key k = K(key);
	struct kvc_pool_allocation a;
	cr_assert_eq(kvc_pool_allocate(store, ns, rank, &k, 1, now, &a), 0);
	if (already)
		*already = a.already;
	check_accounting();
	return a.page;
}

static void confirm1(const char *ns, uint32_t rank, const char *key, int64_t page)
{
	struct kvc_pool_key k = K(key);
	int status = 99;
	cr_assert_eq(kvc_pool_confirm(store, ns, rank, &k, &page, 1, NULL, 0, 0, &status), 0);
	cr_assert_eq(status, 0, "confirm %s page %lld", key, (long long)page);
	check_accounting();
}

static bool exists1(const char *ns, const char *key)
{
	struct kvc_pool_key k = K(key);
	bool out = false;
	cr_assert_eq(kvc_pool_exists(store, ns, &k, 1, &out), 0);
	return out;
}

static uint64_t free_pages(const char *ns, uint32_t rank)
{
	struct kvc_pool_stats st;
	cr_assert_eq(kvc_pool_stats(store, ns, rank, 0, &st), 0);
	return st.free_pages;
}

Test(pool_store, completeness_needs_every_rank_of_the_world)
{
	for (uint32_t world = 1; world <= 8; world *= 2) {
		char ns[16];
		snprintf(ns, sizeof(ns), "w%u", world);
		for (uint32_t r = 0; r < world; r++)
			cr_assert_eq(kvc_pool_init(store, ns, r, 16, world), 0);
		for (uint32_t r = 0; r < world; r++) {
			cr_assert_not(exists1(ns, "blk"), "complete before rank %u", r);
			int64_t page = alloc1(ns, r, "blk", 0, NULL);
			cr_assert_geq(page, 0);
			confirm1(ns, r, "blk", page);
		}
		cr_assert(exists1(ns, "blk"), "world %u", world);
	}
}

Test(pool_store, complete_keys_reuse_their_page)
{
	bool already;
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 1), 0);
	int64_t page = alloc1("kv", 0, "a", 0, &already);
	cr_assert_not(already);
	confirm1("kv", 0, "a", page);
	uint64_t before = free_pages("kv", 0);
	cr_assert_eq(alloc1("kv", 0, "a", 0, &already), page);
	cr_assert(already, "confirmed key says so");
	cr_assert_eq(free_pages("kv", 0), before, "no page consumed");
}

Test(pool_store, failed_writes_release_only_unconfirmed_pages)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 1), 0);
	int64_t a = alloc1("kv", 0, "a", 0, NULL);
	int64_t b = alloc1("kv", 0, "b", 0, NULL);
	confirm1("kv", 0, "a", a);
	struct kvc_pool_key none[1];
	int64_t release[3] = {a, b, 3};
	cr_assert_eq(kvc_pool_confirm(store, "kv", 0, none, NULL, 0, release, 3, 0, NULL), 0);
	check_accounting();
	cr_assert(exists1("kv", "a"), "a confirmed page is never released");
	cr_assert_eq(free_pages("kv", 0), 3, "b's page came back, page 3 was free already");
	/* confirming a released allocation is refused, not resurrected */
	struct kvc_pool_key kb = K("b");
	int status = 0;
	cr_assert_eq(kvc_pool_confirm(store, "kv", 0, &kb, &b, 1, NULL, 0, 0, &status), 0);
	cr_assert_eq(status, -ESTALE);
	cr_assert_not(exists1("kv", "b"));
}

Test(pool_store, racing_writers_share_one_page)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 1), 0);
	int64_t first = alloc1("kv", 0, "same", 0, NULL);
	int64_t second = alloc1("kv", 0, "same", 0, NULL);
	cr_assert_eq(first, second, "one key, one page");
	cr_assert_eq(free_pages("kv", 0), 3);
	confirm1("kv", 0, "same", first);
	confirm1("kv", 0, "same", second); /* idempotent */
	/* the loser's failure release cannot free the winner's page */
	struct kvc_pool_key none[1];
	cr_assert_eq(kvc_pool_confirm(store, "kv", 0, none, NULL, 0, &first, 1, 0, NULL), 0);
	cr_assert(exists1("kv", "same"));
	check_accounting();
}

static void fill_at(const char *ns, int count, const char *prefix, uint64_t now)
{
	for (int i = 0; i < count; i++) {
		char key[32];
		snprintf(key, sizeof(key), "%s%d", prefix, i);
		confirm1(ns, 0, key, alloc1(ns, 0, key, now, NULL));
	}
}

static void fill(const char *ns, int count, const char *prefix)
{
	fill_at(ns, count, prefix, 0);
}

Test(pool_store, full_pool_evicts_least_recently_used)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 3, 1), 0);
	fill("kv", 3, "k");
	/* touch k0: k1 is now the oldest */
	struct kvc_pool_key k0 = K("k0");
	int64_t page;
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, &k0, 1, 1000, 0, &page, NULL), 0);
	int64_t fresh = alloc1("kv", 0, "new", 1000, NULL);
	cr_assert_geq(fresh, 0);
	cr_assert_not(exists1("kv", "k1"), "the LRU key went");
	cr_assert(exists1("kv", "k0") && exists1("kv", "k2"));
	struct kvc_pool_stats st;
	kvc_pool_stats(store, "kv", 0, 0, &st);
	cr_assert_eq(st.evictions, 1);
}

Test(pool_store, leased_keys_are_never_evicted_until_the_lease_ends)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 2, 1), 0);
	fill("kv", 2, "k");
	struct kvc_pool_key keys[2] = {K("k0"), K("k1")};
	int64_t pages[2];
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, keys, 2, 1000, 5000, pages, NULL), 0);
	cr_assert_eq(alloc1("kv", 0, "x", 2000, NULL), -1, "both leased: nothing to evict");
	cr_assert(exists1("kv", "k0") && exists1("kv", "k1"));
	cr_assert_geq(alloc1("kv", 0, "x", 7000, NULL), 0, "leases over: evicts");
	/* an explicit release ends a lease early */
	fill_at("kv", 1, "y", 8000);
	struct kvc_pool_key y = K("y0");
	uint32_t lease = 0;
	bool held = false;
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, &y, 1, 8000, 60000, pages, &lease), 0);
	cr_assert_neq(lease, 0);
	cr_assert_eq(kvc_pool_release_leases(store, "kv", &y, &lease, 1, 8000, &held), 1);
	cr_assert(held);
	struct kvc_pool_stats st;
	kvc_pool_stats(store, "kv", 0, 8000, &st);
	cr_assert_eq(st.leased_keys, 0);
}

/* One reader's lease of a key with the lease number it was given. */
static uint32_t lease1(const char *key, uint64_t now, uint32_t lease_ms)
{
	struct kvc_pool_key k = K(key);
	int64_t page = -1;
	uint32_t lease = 0;
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, &k, 1, now, lease_ms, &page, &lease), 0);
	cr_assert_geq(page, 0, "%s is complete", key);
	return lease;
}

static bool release1(const char *key, uint32_t lease, uint64_t now)
{
	struct kvc_pool_key k = K(key);
	bool held = true;
	int rc = kvc_pool_release_leases(store, "kv", &k, &lease, 1, now, &held);
	cr_assert_eq(rc, held ? 1 : 0);
	return held;
}

/* Two readers of one key (two ranks' readers, or two decoders) share its
 * lease: the first one done does not end it under the second, and a
 * reader whose lease ended (a read slower than its lease) is told so,
 * even when another reader leased the key again since. */
Test(pool_store, a_lease_ends_with_its_last_reader_and_a_release_says_whether_it_held)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 1, 1), 0);
	fill_at("kv", 1, "k", 1000);
	uint32_t a = lease1("k0", 1000, 5000), b = lease1("k0", 2000, 5000);
	cr_assert(a != 0 && a == b, "b joined a's lease");
	cr_assert(release1("k0", a, 2500), "a's lease held");
	cr_assert_eq(alloc1("kv", 0, "x", 3000, NULL), -1, "still b's: not evicted");
	cr_assert(exists1("kv", "k0"));
	cr_assert(release1("k0", b, 3000));
	cr_assert_eq(release1("k0", b, 3000), false, "b released already: ended");
	int64_t x = alloc1("kv", 0, "x", 3000, NULL);
	cr_assert_geq(x, 0, "the last release ended the lease: evicted at once");
	confirm1("kv", 0, "x", x);
	check_accounting();

	/* c's lease runs out; d leases the key anew; c's late release is
	 * told its lease did not hold and leaves d's alone */
	uint32_t c = lease1("x", 4000, 1000), d = lease1("x", 6000, 1000);
	cr_assert_neq(c, d, "a new lease, a new number");
	cr_assert_eq(release1("x", c, 6100), false);
	cr_assert_eq(alloc1("kv", 0, "w", 6200, NULL), -1, "d's lease still holds");
	cr_assert_eq(release1("x", 0, 6200), false, "no lease named");
	cr_assert(release1("x", d, 6300));
	/* a release after the lease's end, nobody else reading */
	uint32_t e = lease1("x", 7000, 1000);
	cr_assert_eq(release1("x", e, 9000), false);
	cr_assert_geq(alloc1("kv", 0, "w", 9000, NULL), 0);
	cr_assert_eq(release1("x", e, 9000), false, "evicted: nothing to release");
	check_accounting();
}

Test(pool_store, delete_and_clear_respect_leases)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 3, 1), 0);
	fill("kv", 3, "k");
	struct kvc_pool_key k0 = K("k0"), k1 = K("k1");
	int64_t page;
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, &k0, 1, 1000, 5000, &page, NULL), 0);
	cr_assert_eq(kvc_pool_delete(store, "kv", &k0, 1, 1000), 1);
	cr_assert_eq(kvc_pool_delete(store, "kv", &k1, 1, 1000), 1);
	check_accounting();
	cr_assert_not(exists1("kv", "k0"), "deleted keys vanish at once");
	cr_assert_eq(free_pages("kv", 0), 1, "k1's page is free; leased k0's is not yet");
	cr_assert_eq(kvc_pool_clear(store, "kv", 1000), 0);
	check_accounting();
	cr_assert_eq(free_pages("kv", 0), 2);
	/* the retired page comes back once its lease is over */
	alloc1("kv", 0, "a", 7000, NULL);
	alloc1("kv", 0, "b", 7000, NULL);
	cr_assert_geq(alloc1("kv", 0, "c", 7000, NULL), 0, "retired page reused after the lease");
	cr_assert_eq(free_pages("kv", 0), 0);
}

Test(pool_store, init_rules)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 8, 2), 0);
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 8, 2), 0, "repeat is fine");
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 2), -EINVAL, "no shrinking");
	cr_assert_eq(kvc_pool_init(store, "kv", 1, 8, 4), -EINVAL, "another world size");
	cr_assert_eq(kvc_pool_init(store, "kv", 2, 8, 2), -EINVAL, "rank outside the world");
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 12, 2), 0, "growing adds pages");
	cr_assert_eq(kvc_pool_init(store, "kv", 1, 4, 2), 0);
	cr_assert_eq(kvc_pool_set_world(store, "kv", 1), -EINVAL, "rank 1 is outside a world of 1");
	cr_assert_eq(kvc_pool_set_world(store, "kv", 4), 0, "no keys yet: may change");
	alloc1("kv", 0, "held", 0, NULL);
	cr_assert_eq(kvc_pool_set_world(store, "kv", 2), -EBUSY, "keys exist");
	cr_assert_eq(free_pages("kv", 0), 11);
	cr_assert_eq(kvc_pool_init(store, "", 0, 8, 1), -EINVAL);
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 0, 1), -EINVAL);
	struct kvc_pool_key k = K("x");
	struct kvc_pool_allocation a;
	cr_assert_eq(kvc_pool_allocate(store, "nope", 0, &k, 1, 0, &a), -ENOENT);
	struct kvc_pool_key bad = {"\1hidden", 7};
	cr_assert_eq(kvc_pool_allocate(store, "kv", 0, &bad, 1, 0, &a), -EINVAL);
	check_accounting();
}

Test(pool_store, everything_survives_reopen)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 2), 0);
	cr_assert_eq(kvc_pool_init(store, "kv", 1, 4, 2), 0);
	int64_t p0 = alloc1("kv", 0, "x", 0, NULL), p1 = alloc1("kv", 1, "x", 0, NULL);
	confirm1("kv", 0, "x", p0);
	confirm1("kv", 1, "x", p1);
	alloc1("kv", 0, "half", 0, NULL);
	kvc_pool_store_close(store);
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	check_accounting();
	cr_assert(exists1("kv", "x"));
	cr_assert_not(exists1("kv", "half"));
	cr_assert_eq(free_pages("kv", 0), 2);
	cr_assert_eq(free_pages("kv", 1), 3);
}

Test(pool_store, fsck_finds_and_repairs_a_lost_free_page)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 1), 0);
	fill("kv", 2, "k");
	kvc_pool_store_close(store);
	store = NULL;
	/* Damage the database behind the store's back: lose a free page. */
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_cursor *cur;
	MDB_val k, v;
	cr_assert_eq(mdb_env_create(&env), 0);
	mdb_env_set_maxdbs(env, 8);
	mdb_env_set_mapsize(env, 32ull << 30);
	cr_assert_eq(mdb_env_open(env, dir, 0, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "free", 0, &dbi), 0);
	cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
	cr_assert_eq(mdb_cursor_get(cur, &k, &v, MDB_FIRST), 0);
	cr_assert_eq(mdb_cursor_del(cur, 0), 0);
	mdb_cursor_close(cur);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);

	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	cr_assert_gt(kvc_pool_fsck(store, false), 0, "the lost page is found");
	cr_assert_gt(kvc_pool_fsck(store, true), 0, "and repaired");
	check_accounting();
	cr_assert_eq(free_pages("kv", 0), 2);
	cr_assert(exists1("kv", "k0") && exists1("kv", "k1"));
}

Test(pool_store, keys_list_in_pages_and_skip_retired)
{
	struct kvc_pool_key_info out[4];
	bool more;
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 16, 2), 0);
	fill("kv", 3, "k");  /* confirmed on rank 0 of 2: partial */
	struct kvc_pool_key none = {"", 0};
	cr_assert_eq(kvc_pool_keys(store, "kv", &none, 2, out, &more), 2);
	cr_assert(more);
	cr_assert_eq(out[0].length, 2);
	cr_assert_eq(memcmp(out[0].bytes, "k0", 2), 0);
	cr_assert_not(out[0].complete);
	cr_assert_eq(out[0].confirmed, 1);
	cr_assert_eq(out[0].world, 2);
	struct kvc_pool_key after = {out[1].bytes, out[1].length};
	cr_assert_eq(kvc_pool_keys(store, "kv", &after, 4, out, &more), 1);
	cr_assert_not(more);
	cr_assert_eq(memcmp(out[0].bytes, "k2", 2), 0);
	/* a leased key deleted is retired: not listed */
	struct kvc_pool_key k1 = K("k1");
	kvc_pool_delete(store, "kv", &k1, 1, 0);
	cr_assert_eq(kvc_pool_keys(store, "kv", &none, 4, out, &more), 2);
}

Test(pool_store, one_batch_taking_and_evicting_keeps_accounting)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 16, 1), 0);
	fill("kv", 16, "old");
	char names[16][8];
	struct kvc_pool_key keys[16];
	struct kvc_pool_allocation out[16];
	for (int i = 0; i < 16; i++) {
		snprintf(names[i], sizeof(names[i]), "new%d", i);
		keys[i] = K(names[i]);
	}
	cr_assert_eq(kvc_pool_allocate(store, "kv", 0, keys, 16, 0, out), 0);
	bool seen[16] = {0};
	for (int i = 0; i < 16; i++) {
		cr_assert(out[i].page >= 0 && out[i].page < 16, "key %d got %lld", i,
		          (long long)out[i].page);
		cr_assert_not(seen[out[i].page], "page %lld given twice", (long long)out[i].page);
		seen[out[i].page] = true;
	}
	check_accounting();
	cr_assert_eq(free_pages("kv", 0), 0);
	/* and a batch on a pool with free pages spread around */
	struct kvc_pool_key drop[3] = {K("new1"), K("new7"), K("new12")};
	kvc_pool_delete(store, "kv", drop, 3, 0);
	struct kvc_pool_key more[3] = {K("m0"), K("m1"), K("m2")};
	cr_assert_eq(kvc_pool_allocate(store, "kv", 0, more, 3, 0, out), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_geq(out[i].page, 0);
	check_accounting();
}

Test(pool_store, sweep_frees_retired_keys_once_their_lease_ends)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 8, 1), 0);
	fill("kv", 2, "k");
	struct kvc_pool_key keys[2] = {K("k0"), K("k1")};
	int64_t pages[2];
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, keys, 2, 1000, 5000, pages, NULL), 0);
	cr_assert_eq(kvc_pool_delete(store, "kv", keys, 2, 1000), 2);
	cr_assert_eq(free_pages("kv", 0), 6, "retired: pages held while leased");
	cr_assert_eq(kvc_pool_sweep(store, 2000), 0, "leases still running");
	cr_assert_eq(free_pages("kv", 0), 6);
	cr_assert_eq(kvc_pool_sweep(store, 6001), 2);
	cr_assert_eq(free_pages("kv", 0), 8, "pages back without any pressure");
	check_accounting();
	struct kvc_pool_stats st;
	kvc_pool_stats(store, "kv", 0, 6001, &st);
	cr_assert_eq(st.retired_keys, 0);
}

static uint64_t pending(const char *ns, uint32_t rank)
{
	struct kvc_pool_binding b;
	cr_assert_eq(kvc_pool_binding_get(store, ns, rank, &b), 0);
	return b.punch_pending;
}

Test(pool_store, bound_pool_lists_freed_pages_for_punching)
{
	struct kvc_pool_binding b = {.inode = 77, .page_size = 1 << 20, .path = "/pools/n/rank-0"};
	cr_assert_eq(kvc_pool_bind(store, "n", 0, &b), -ENOENT, "no such pool yet");
	cr_assert_eq(kvc_pool_init(store, "n", 0, 8, 1), 0);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, &b), 0);
	struct kvc_pool_binding got;
	cr_assert_eq(kvc_pool_binding_get(store, "n", 0, &got), 0);
	cr_assert_eq(got.inode, 77);
	cr_assert_str_eq(got.path, "/pools/n/rank-0");
	const char *names[4] = {"a", "b", "c", "d"};
	for (int i = 0; i < 4; i++)
		confirm1("n", 0, names[i], alloc1("n", 0, names[i], 1, NULL));
	struct kvc_pool_key gone[2] = {K("a"), K("b")};
	cr_assert_eq(kvc_pool_delete(store, "n", gone, 2, 1), 2);
	check_accounting();
	cr_assert_eq(pending("n", 0), 2, "two freed pages listed");
	cr_assert_eq(free_pages("n", 0), 6);

	/* The collector takes them: out of the free list while punched. */
	struct kvc_pool_punch p[8];
	cr_assert_eq(kvc_pool_punch_take(store, p, 8), 2);
	cr_assert_eq(p[0].inode, 77);
	cr_assert_eq(p[0].page_size, 1 << 20);
	cr_assert_eq(free_pages("n", 0), 4);
	check_accounting();
	for (int i = 0; i < 4; i++) { /* no writer gets a page being punched */
		char key[8];
		snprintf(key, sizeof(key), "w%d", i);
		int64_t page = alloc1("n", 0, key, 2, NULL);
		cr_assert(page >= 0 && page != p[0].page && page != p[1].page);
	}
	bool punched[2] = {true, false};
	cr_assert_eq(kvc_pool_punch_done(store, p, 2, punched), 0);
	check_accounting();
	cr_assert_eq(free_pages("n", 0), 2);
	cr_assert_eq(pending("n", 0), 1, "the one not punched is listed again");
	alloc1("n", 0, "x1", 3, NULL);
	alloc1("n", 0, "x2", 3, NULL);
	cr_assert_eq(pending("n", 0), 0, "taking a listed page cancels its punch");

	/* Unbinding drops the list; the pages stay free. */
	struct kvc_pool_key c = K("c");
	cr_assert_eq(kvc_pool_delete(store, "n", &c, 1, 4), 1);
	cr_assert_eq(pending("n", 0), 1);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, NULL), 0);
	cr_assert_eq(kvc_pool_binding_get(store, "n", 0, &got), -ENOENT);
	cr_assert_eq(free_pages("n", 0), 1);
	check_accounting();
}

Test(pool_store, pages_being_punched_at_a_crash_come_back_at_open)
{
	struct kvc_pool_binding b = {.inode = 5, .page_size = 4096, .path = "/f"};
	cr_assert_eq(kvc_pool_init(store, "n", 0, 4, 1), 0);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, &b), 0);
	confirm1("n", 0, "a", alloc1("n", 0, "a", 1, NULL));
	struct kvc_pool_key a = K("a");
	cr_assert_eq(kvc_pool_delete(store, "n", &a, 1, 1), 1);
	struct kvc_pool_punch p[4];
	cr_assert_eq(kvc_pool_punch_take(store, p, 4), 1);
	cr_assert_eq(free_pages("n", 0), 3);
	/* "Crash": the store closes with the page taken and not given back. */
	kvc_pool_store_close(store);
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	check_accounting();
	cr_assert_eq(free_pages("n", 0), 4, "the page is free again");
	cr_assert_eq(pending("n", 0), 1, "and listed to be punched again");
}

/* A page being punched when its pool is unbound and kvc-meta dies comes
 * back free but not listed: a key may take it while the pool is unbound,
 * and binding the pool again must not hand that key's page to the
 * collector. */
Test(pool_store, recovery_lists_pages_of_bound_pools_only)
{
	struct kvc_pool_binding b = {.inode = 9, .page_size = 4096, .path = "/f"};
	cr_assert_eq(kvc_pool_init(store, "n", 0, 4, 1), 0);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, &b), 0);
	int64_t page = alloc1("n", 0, "a", 1, NULL);
	confirm1("n", 0, "a", page);
	struct kvc_pool_key a = K("a");
	cr_assert_eq(kvc_pool_delete(store, "n", &a, 1, 1), 1);
	struct kvc_pool_punch p[4];
	cr_assert_eq(kvc_pool_punch_take(store, p, 4), 1);
	cr_assert_eq(p[0].page, (uint32_t)page);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, NULL), 0); /* unbound meanwhile */
	kvc_pool_store_close(store);                          /* and a crash */
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	check_accounting();
	cr_assert_eq(free_pages("n", 0), 4, "the page is free again");
	/* A key gets that page while the pool is unbound. */
	int64_t again = alloc1("n", 0, "k", 2, NULL);
	cr_assert_eq(again, page, "the first free page");
	confirm1("n", 0, "k", again);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, &b), 0);
	check_accounting();
	cr_assert_eq(pending("n", 0), 0, "nothing listed");
	cr_assert_eq(kvc_pool_punch_take(store, p, 4), 0, "the key's page is not handed out");
	check_accounting();
}

/* A listed page that is no longer free (a repair took it, or a listing
 * that should not exist) is dropped from the list, never handed out. */
Test(pool_store, punch_take_counts_only_pages_that_left_the_free_list)
{
	struct kvc_pool_binding b = {.inode = 9, .page_size = 4096, .path = "/f"};
	cr_assert_eq(kvc_pool_init(store, "n", 0, 2, 1), 0);
	cr_assert_eq(kvc_pool_bind(store, "n", 0, &b), 0);
	int64_t page = alloc1("n", 0, "a", 1, NULL);
	confirm1("n", 0, "a", page);
	/* List the used page by hand, as an old store could have. */
	kvc_pool_store_close(store);
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi punch;
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 32ull << 30), 0);
	cr_assert_eq(mdb_env_open(env, dir, 0, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "punch", 0, &punch), 0);
	uint8_t key[2 + 8] = {'n', 0, 0, 0, 0, 0, 0, 0, 0, (uint8_t)page}; /* ns, rank 0, page */
	MDB_val k = {sizeof(key), key}, one = {1, "\1"};
	cr_assert_eq(mdb_put(txn, punch, &k, &one, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	cr_assert_eq(kvc_pool_fsck(store, false), 1, "a listed page in use");
	struct kvc_pool_punch p[4];
	cr_assert_eq(kvc_pool_punch_take(store, p, 4), 0, "a used page is never handed out");
	check_accounting();
}

/* Put a raw value into `worlds` of the closed store in dir. */
static void put_worlds(const char *key, size_t key_len, const void *value, size_t len)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi worlds;
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 32ull << 30), 0);
	cr_assert_eq(mdb_env_open(env, dir, 0, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "worlds", 0, &worlds), 0);
	MDB_val k = {key_len, (void *)key}, v = {len, (void *)value};
	cr_assert_eq(mdb_put(txn, worlds, &k, &v, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

/* The pool clock never goes back and goes on across a restart from where
 * it stood (a reboot restarts CLOCK_MONOTONIC from zero; the wall clock
 * may step): leases taken before a restart keep their meaning. */
Test(pool_store, pool_clock_goes_on_across_restarts)
{
	uint64_t first = kvc_pool_now_ms(store);
	cr_assert_gt(first, 1500000000000ull, "a new store starts from the wall clock");
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 2, 1), 0);
	int64_t page = alloc1("kv", 0, "a", first, NULL);
	confirm1("kv", 0, "a", page);
	struct kvc_pool_key a = K("a");
	int64_t got;
	uint64_t now = kvc_pool_now_ms(store);
	cr_assert_eq(kvc_pool_locations(store, "kv", 0, &a, 1, now, 60000, &got, NULL), 0);
	cr_assert_eq(got, page);
	kvc_pool_store_close(store);

	/* A clock far behind the leases (as after a reboot with a monotonic
	 * clock at zero) would end nothing; the saved one is ahead instead. */
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	uint64_t again = kvc_pool_now_ms(store);
	cr_assert_geq(again, now, "the clock never goes back");
	struct kvc_pool_stats st;
	cr_assert_eq(kvc_pool_stats(store, "kv", 0, again, &st), 0);
	cr_assert_eq(st.leased_keys, 1, "the lease still runs after the restart");
	cr_assert_eq(kvc_pool_stats(store, "kv", 0, again + 60001, &st), 0);
	cr_assert_eq(st.leased_keys, 0, "and ends on the same clock");
	kvc_pool_store_close(store);

	/* A saved reading is where the clock goes on from, whatever the wall
	 * clock says. */
	uint64_t saved = 5000;
	put_worlds("\0clock", 6, &saved, sizeof(saved));
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	uint64_t from = kvc_pool_now_ms(store);
	cr_assert(from >= 5000 && from < 5000 + 600000, "clock at %llu", (unsigned long long)from);
	cr_assert_eq(kvc_pool_store_sync(store), 0);
	kvc_pool_store_close(store);
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	cr_assert_geq(kvc_pool_now_ms(store), from, "saved at sync and close");
	cr_assert_lt(kvc_pool_now_ms(store), 5000 + 600000);
}

/* A store at its size limit is not a full pool: allocations that cannot
 * be written answer -ENOSPC (nothing is evicted for them, no page -1
 * while the rank has free pages), and the store goes on serving. */
Test(pool_store, a_store_at_its_size_limit_answers_enospc_not_a_full_pool)
{
	kvc_pool_store_close(store);
	store = NULL;
	kvc_test_dir_remove(dir);
	kvc_test_dir_make(dir, "pool");
	cr_assert_eq(kvc_pool_store_open_sized(dir, 1 << 20, &store), 0);
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4096, 1), 0);
	struct kvc_pool_key keys[64];
	struct kvc_pool_allocation out[64];
	static char names[64][KVC_POOL_MAX_KEY];
	int rc = 0, batches = 0;
	uint64_t taken = 0;
	for (; batches < 1000 && rc == 0; batches++) {
		for (int i = 0; i < 64; i++) {
			memset(names[i], 'a' + i % 26, KVC_POOL_MAX_KEY);
			snprintf(names[i], 16, "b%d-%d", batches, i);
			names[i][strlen(names[i])] = 'x';
			keys[i] = (struct kvc_pool_key){names[i], KVC_POOL_MAX_KEY};
		}
		rc = kvc_pool_allocate(store, "kv", 0, keys, 64, 0, out);
		for (int i = 0; i < 64 && rc == 0; i++) {
			cr_assert_geq(out[i].page, 0, "a page -1 while %llu of 4096 were taken",
			              (unsigned long long)taken);
			taken++;
		}
	}
	cr_assert_eq(rc, -ENOSPC, "at the size limit: %d after %d batches", rc, batches);
	cr_assert_lt(taken, 4096, "the limit came before the pool was full");
	cr_assert_eq(free_pages("kv", 0), 4096 - taken, "the failed batch took nothing");
	cr_assert(exists1("kv", "nothing") == false, "and the store still answers");
}

/* A key dropped and made again, or leased again and again, never hands
 * out a number an old reader still holds: numbers come from the
 * namespace, not from the key or the clock. */
Test(pool_store, lease_numbers_are_never_given_twice)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 1, 1), 0);
	fill_at("kv", 1, "k", 1000);
	uint32_t old = lease1("k0", 1000, 1000);
	/* the lease runs out, k0 is evicted for x, made again 65,536 ms on
	 * (a clock-seeded number would repeat there) */
	confirm1("kv", 0, "x", alloc1("kv", 0, "x", 3000, NULL));
	cr_assert_not(exists1("kv", "k0"));
	struct kvc_pool_key x = K("x");
	cr_assert_eq(kvc_pool_delete(store, "kv", &x, 1, 4000), 1);
	fill_at("kv", 1, "k", 1000 + 65536);
	uint32_t again = lease1("k0", 1000 + 65536, 60000);
	cr_assert_neq(again, old);
	cr_assert_eq(release1("k0", old, 1000 + 65537), false, "the old reader's page was x's");
	cr_assert_eq(alloc1("kv", 0, "y", 1000 + 65538, NULL), -1, "the new lease holds");
	uint32_t seen[512];
	seen[0] = again;
	for (int i = 1; i < 512; i++) { /* one reader at a time */
		cr_assert(release1("k0", seen[i - 1], 70000 + (uint64_t)i));
		seen[i] = lease1("k0", 70000 + (uint64_t)i, 1000);
		for (int j = 0; j < i; j++)
			cr_assert_neq(seen[i], seen[j]);
	}
	check_accounting();
}

/* After a reboot the store went back to its last checkpoint, and lease
 * numbers given out after it may still be held by readers on other hosts:
 * the numbering jumps past them. Not in the same boot. */
Test(pool_store, lease_numbers_jump_after_a_reboot)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 4, 1), 0);
	fill_at("kv", 2, "k", 1000);
	uint32_t before = lease1("k0", 1000, 1000);
	kvc_pool_store_close(store);
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	uint32_t same_boot = lease1("k1", 3000, 1000);
	cr_assert_eq(same_boot, before + 1);
	kvc_pool_store_close(store);
	setenv("KVC_BOOT_ID", "another-boot", 1);
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	unsetenv("KVC_BOOT_ID");
	uint32_t rebooted = lease1("k0", 5000, 1000);
	cr_assert_eq(rebooted - same_boot, KVC_POOL_LEASE_REBOOT_GAP + 1, "%u after %u", rebooted,
	             same_boot);
	check_accounting();
}

/* A store of format 1 (before leases counted their readers): its key
 * heads' high halves are zero, which reads as a lease of unknown readers
 * with no number. It opens, is marked format 2 (which an older kvc-meta
 * refuses), and such a lease ends by time only, not by a new reader's
 * release (its older readers were never counted). A format it does not
 * know does not open. */
Test(pool_store, a_format_1_store_opens_as_2_and_its_leases_end_by_time)
{
	cr_assert_eq(kvc_pool_init(store, "kv", 0, 1, 1), 0);
	fill_at("kv", 1, "k", 1000);
	uint32_t old = lease1("k0", 1000, 60000);
	cr_assert_neq(old, 0);
	kvc_pool_store_close(store);
	store = NULL;

	/* what format 1 wrote: readers and lease_period zero */
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi keys, worlds;
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 32ull << 30), 0);
	cr_assert_eq(mdb_env_open(env, dir, 0, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "keys", 0, &keys), 0);
	cr_assert_eq(mdb_dbi_open(txn, "worlds", 0, &worlds), 0);
	MDB_val k = {5, "kv\0k0"}, v;
	cr_assert_eq(mdb_get(txn, keys, &k, &v), 0);
	uint8_t record[512];
	cr_assert_leq(v.mv_size, sizeof(record));
	memcpy(record, v.mv_data, v.mv_size);
	memset(record + 6, 0, 2);  /* lease_high */
	memset(record + 26, 0, 2); /* readers */
	memset(record + 30, 0, 2); /* lease_low */
	v.mv_data = record;
	cr_assert_eq(mdb_put(txn, keys, &k, &v, 0), 0);
	uint32_t format = 1;
	MDB_val fk = {7, "\0format"}, fv = {4, &format};
	cr_assert_eq(mdb_put(txn, worlds, &fk, &fv, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);

	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	uint32_t joined = lease1("k0", 2000, 5000);
	cr_assert(release1("k0", joined, 2500), "joined a held lease");
	cr_assert_eq(alloc1("kv", 0, "x", 3000, NULL), -1, "its old readers may still read");
	cr_assert_geq(alloc1("kv", 0, "x", 62000, NULL), 0, "ended by time");
	kvc_pool_store_close(store);
	store = NULL;

	/* marked 2 on open; a format after it does not open */
	format = 0;
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
	cr_assert_eq(mdb_env_open(env, dir, MDB_RDONLY, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "worlds", 0, &worlds), 0);
	cr_assert_eq(mdb_get(txn, worlds, &fk, &fv), 0);
	memcpy(&format, fv.mv_data, 4);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	cr_assert_eq(format, 2);
	format = 3;
	put_worlds("\0format", 7, &format, sizeof(format));
	cr_assert_eq(kvc_pool_store_open(dir, &store), -EINVAL);
	store = NULL;
}
