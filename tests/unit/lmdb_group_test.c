/* Unit tests of the group commit (core/lmdb_group.h) on a real LMDB
 * environment: calls that run together commit together; when one call of
 * a batch fails, it leaves nothing, the others are kept, each gets its own
 * answer, and the batch costs one rerun in one transaction (nested
 * transactions), not a transaction per call. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/lmdb_group.h"
#include "core/lmdb_txn.h"
#include "test_dir.h"

static MDB_env *env;
static MDB_dbi dbi;
static struct kvc_lmdb_group group;
static atomic_int begins;
static char dir[KVC_TEST_DIR_MAX];

static int begin(void *owner, MDB_txn **txn)
{
	(void)owner;
	atomic_fetch_add(&begins, 1);
	return kvc_lmdb_errno(mdb_txn_begin(env, NULL, 0, txn));
}

static void setup(void)
{
	kvc_test_dir_make(dir, "lmdb_group");
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 64 << 20), 0);
	cr_assert_eq(mdb_env_open(env, dir, MDB_NOSYNC, 0600), 0);
	MDB_txn *txn;
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	cr_assert_eq(kvc_lmdb_group_init(&group, begin, NULL), 0);
}

static void teardown(void)
{
	kvc_lmdb_group_destroy(&group);
	mdb_env_close(env);
	kvc_test_dir_remove(dir);
}

TestSuite(lmdb_group, .init = setup, .fini = teardown);

/* A call: put key (and its value), then fail with `fail` if set (after
 * the put: what a failing call wrote must not stay). A gate holds the
 * first call inside its transaction until the others wait behind it. */
struct call {
	char key[16];
	int fail;
	atomic_bool *gate;
	int rc;
};

static int put_then_maybe_fail(void *owner, MDB_txn *txn, void *arg)
{
	(void)owner;
	struct call *c = arg;
	while (c->gate && !atomic_load(c->gate))
		usleep(1000);
	MDB_val k = {strlen(c->key), c->key}, v = {strlen(c->key), c->key};
	int rc = kvc_lmdb_errno(mdb_put(txn, dbi, &k, &v, 0));
	return rc < 0 ? rc : -c->fail;
}

static void *caller(void *arg)
{
	struct call *c = arg;
	c->rc = kvc_lmdb_group_run(&group, put_then_maybe_fail, c);
	return NULL;
}

static bool present(const char *key)
{
	MDB_txn *txn;
	cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	MDB_val k = {strlen(key), (void *)key}, v;
	bool found = mdb_get(txn, dbi, &k, &v) == 0;
	mdb_txn_abort(txn);
	return found;
}

Test(lmdb_group, one_failing_call_costs_its_batch_one_rerun)
{
	enum { N = 16 };
	atomic_bool open_gate = false;
	struct call first = {.key = "first", .gate = &open_gate};
	struct call calls[N];
	pthread_t lead, threads[N];
	pthread_create(&lead, NULL, caller, &first);
	usleep(50 * 1000); /* first leads, held inside its transaction */
	for (int i = 0; i < N; i++) {
		calls[i] = (struct call){.fail = i % 5 == 2 ? EEXIST : 0};
		snprintf(calls[i].key, sizeof(calls[i].key), "k%d", i);
		pthread_create(&threads[i], NULL, caller, &calls[i]);
	}
	usleep(300 * 1000); /* they queue behind it */
	int before = atomic_load(&begins);
	atomic_store(&open_gate, true);
	pthread_join(lead, NULL);
	for (int i = 0; i < N; i++)
		pthread_join(threads[i], NULL);
	cr_assert_eq(first.rc, 0);
	cr_assert(present("first"));
	for (int i = 0; i < N; i++) {
		cr_assert_eq(calls[i].rc, -calls[i].fail, "call %d: %d", i, calls[i].rc);
		cr_assert_eq(present(calls[i].key), calls[i].fail == 0, "call %d's put", i);
	}
	/* The 16 ran as one batch (or a few, had one come late): a shared
	 * transaction, then one nested rerun; one transaction per call
	 * would be 17. */
	int used = atomic_load(&begins) - before;
	cr_assert_leq(used, 5, "%d transactions for one batch with failing calls", used);
}

Test(lmdb_group, a_call_alone_keeps_its_own_answer)
{
	struct call ok = {.key = "alone"}, bad = {.key = "bad", .fail = ENOENT};
	caller(&ok);
	caller(&bad);
	cr_assert_eq(ok.rc, 0);
	cr_assert_eq(bad.rc, -ENOENT);
	cr_assert(present("alone"));
	cr_assert_not(present("bad"));
}
