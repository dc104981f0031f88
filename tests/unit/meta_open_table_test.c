/* Open sessions kept in memory (meta/open_table.c) and the store's use of
 * them (meta/meta_opens.c): the table's rules, a file removed under a
 * plain OPEN, an OPEN racing a removal, and a restart's hold. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "meta/open_table.h"
#include "meta_fixture.h"

static const uint8_t client_a[KVC_META_CLIENT_ID] = "client-a-0000000";
static const uint8_t client_b[KVC_META_CLIENT_ID] = "client-b-0000000";

Test(open_table, sessions_are_a_set_and_the_last_close_of_an_orphan_settles)
{
	struct kvc_meta_open_table *t;
	uint64_t doomed;
	cr_assert_eq(kvc_meta_open_table_create(&t), 0);
	cr_assert_eq(kvc_meta_open_table_add(t, 7, client_a, &doomed), 1, "new");
	cr_assert_eq(doomed, 0);
	cr_assert_eq(kvc_meta_open_table_add(t, 7, client_a, &doomed), 0, "already there");
	cr_assert_eq(kvc_meta_open_table_add(t, 7, client_b, &doomed), 1);
	cr_assert_eq(kvc_meta_open_table_count(t), 2, "one session per client and file");
	cr_assert_eq(kvc_meta_open_table_has(t, 7), 1);
	cr_assert_eq(kvc_meta_open_table_has(t, 8), 0);
	cr_assert_eq(kvc_meta_open_table_doom(t, 7, 100), 1, "open: becomes an orphan");
	cr_assert_eq(kvc_meta_open_table_remove(t, 7, client_a), 0, "b still has it");
	cr_assert_eq(kvc_meta_open_table_remove(t, 7, client_b), 1, "the last close settles");
	cr_assert_eq(kvc_meta_open_table_remove(t, 7, client_b), 0, "already gone");
	cr_assert_eq(kvc_meta_open_table_count(t), 0);
	/* Nobody has 9 open: doomed by transaction 200, which an OPEN hears of. */
	cr_assert_eq(kvc_meta_open_table_doom(t, 9, 200), 0);
	cr_assert_eq(kvc_meta_open_table_add(t, 9, client_a, &doomed), 1);
	cr_assert_eq(doomed, 200);
	kvc_meta_open_table_undoom(t, 9, 200);
	cr_assert_eq(kvc_meta_open_table_remove(t, 9, client_a), 0, "never an orphan");
	cr_assert_eq(kvc_meta_open_table_add(t, 9, client_a, &doomed), 1);
	cr_assert_eq(doomed, 0, "the mark is gone");
	kvc_meta_open_table_destroy(t);
}

Test(open_table, a_drop_lists_the_client_s_files_and_clients_are_listed_once)
{
	struct kvc_meta_open_table *t;
	uint64_t doomed, *inos;
	cr_assert_eq(kvc_meta_open_table_create(&t), 0);
	for (uint64_t ino = 1; ino <= 5000; ino++) /* past the first buckets */
		cr_assert_eq(kvc_meta_open_table_add(t, ino, ino % 2 ? client_a : client_b, &doomed), 1);
	uint8_t ids[4][KVC_META_CLIENT_ID];
	cr_assert_eq(kvc_meta_open_table_clients(t, ids, 0, 4), 2);
	cr_assert_eq(kvc_meta_open_table_count_client(t, client_a), 2500);
	cr_assert_eq(kvc_meta_open_table_drop_client(t, client_a, &inos), 2500);
	uint64_t sum = 0;
	for (int i = 0; i < 2500; i++)
		sum += inos[i] % 2;
	cr_assert_eq(sum, 2500, "only a's files");
	free(inos);
	cr_assert_eq(kvc_meta_open_table_count(t), 2500);
	cr_assert_eq(kvc_meta_open_table_has(t, 1), 0);
	cr_assert_eq(kvc_meta_open_table_has(t, 2), 1);
	cr_assert_eq(kvc_meta_open_table_drop_client(t, client_a, &inos), 0);
	cr_assert_null(inos);
	kvc_meta_open_table_destroy(t);
}

Test(open_table, many_marks_are_pruned_once_their_transactions_ended)
{
	struct kvc_meta_open_table *t;
	uint64_t doomed;
	cr_assert_eq(kvc_meta_open_table_create(&t), 0);
	for (uint64_t ino = 1; ino <= 20000; ino++)
		cr_assert_eq(kvc_meta_open_table_doom(t, ino, ino), 0);
	cr_assert_eq(kvc_meta_open_table_add(t, 19999, client_a, &doomed), 1);
	cr_assert_eq(doomed, 19999, "a recent mark is kept");
	cr_assert_eq(kvc_meta_open_table_add(t, 1, client_a, &doomed), 1);
	cr_assert_eq(doomed, 0, "an old one was pruned");
	kvc_meta_open_table_destroy(t);
}

static void setup(void)
{
	meta_fixture_open("open_table");
}

static void teardown(void)
{
	meta_fixture_close();
}

static uint64_t file_at(const char *name)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_create(store, KVC_META_ROOT, N(name), 0644, 0, 0, true, &a), 0);
	return a.ino;
}

Test(meta_open_table, a_file_removed_under_a_plain_open_stays_until_its_close, .init = setup,
     .fini = teardown)
{
	uint64_t ino = file_at("f");
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_open_session(store, ino, client_a, &a), 0);
	cr_assert_eq(a.ino, ino);
	cr_assert_eq(counts().open_sessions, 1, "counted though held in memory");
	cr_assert_eq(kvc_meta_store_unlink(store, KVC_META_ROOT, N("f")), 0);
	cr_assert_eq(counts().orphans, 1);
	cr_assert_eq(counts().gc_pending, 0, "not reclaimed while open");
	cr_assert_eq(kvc_meta_store_close_session(store, ino, client_a), 0);
	cr_assert_eq(counts().orphans, 0);
	cr_assert_eq(counts().gc_pending, 1, "reclaimed at the last close");
	/* A directory gets no session; a missing inode is -ENOENT. */
	cr_assert_eq(kvc_meta_store_open_session(store, KVC_META_ROOT, client_a, &a), 0);
	cr_assert_eq(counts().open_sessions, 0);
	cr_assert_eq(kvc_meta_store_open_session(store, ino, client_a, &a), -ENOENT);
	cr_assert_eq(counts().open_sessions, 0);
	/* A drop ends sessions held in memory and says so. */
	uint64_t g = file_at("g");
	cr_assert_eq(kvc_meta_store_open_session(store, g, client_b, &a), 0);
	uint8_t ids[4][KVC_META_CLIENT_ID];
	cr_assert_eq(kvc_meta_store_session_clients(store, ids, 4), 1);
	cr_assert_eq(memcmp(ids[0], client_b, KVC_META_CLIENT_ID), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, KVC_META_ROOT, N("g")), 0);
	cr_assert_eq(kvc_meta_store_drop_client(store, client_b, NULL), 1);
	cr_assert_eq(counts().orphans, 0);
	cr_assert_eq(counts().gc_pending, 2);
	struct kvc_meta_dropped d;
	cr_assert_eq(kvc_meta_store_client_dropped(store, client_b, &d), 1, "told at its renew");
}

/* An OPEN by inode and the removal of the file's name, at once: either
 * the OPEN fails (the file went first) or the file is kept until the
 * close; never an open file in the collector's queue. */
struct race {
	uint64_t ino;
	const char *name;
	pthread_barrier_t *go;
	int open_rc;
};

static void *race_open(void *arg)
{
	struct race *r = arg;
	struct kvc_attr a;
	pthread_barrier_wait(r->go);
	r->open_rc = kvc_meta_store_open_session(store, r->ino, client_a, &a);
	return NULL;
}

Test(meta_open_table, an_open_racing_a_removal_never_loses_the_file, .init = setup,
     .fini = teardown, .timeout = 120)
{
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, 2);
	uint64_t gc = 0;
	int opened = 0, missed = 0;
	for (int i = 0; i < 10000; i++) {
		char name[32];
		snprintf(name, sizeof(name), "r%d", i);
		struct race r = {file_at(name), name, &go, 0};
		pthread_t thread;
		cr_assert_eq(pthread_create(&thread, NULL, race_open, &r), 0);
		pthread_barrier_wait(&go);
		cr_assert_eq(kvc_meta_store_unlink(store, KVC_META_ROOT, N(name)), 0);
		pthread_join(thread, NULL);
		struct kvc_meta_counts c = counts();
		if (r.open_rc == 0) {
			opened++;
			cr_assert_eq(c.gc_pending, gc, "round %d: an open file was queued for gc", i);
			cr_assert_eq(c.orphans, 1, "round %d", i);
			cr_assert_eq(kvc_meta_store_close_session(store, r.ino, client_a), 0);
		} else {
			missed++;
			cr_assert_eq(r.open_rc, -ENOENT, "round %d", i);
		}
		gc++;
		cr_assert_eq(counts().gc_pending, gc, "round %d", i);
		cr_assert_eq(counts().orphans, 0, "round %d", i);
		cr_assert_eq(counts().open_sessions, 0, "round %d", i);
	}
	pthread_barrier_destroy(&go);
	cr_log_info("opened first %d, removed first %d", opened, missed);
}

/* After a start: files removed while the hold is on are kept (some client
 * may not have told the new process it holds them), and settled after. */
Test(meta_open_table, a_restart_holds_removed_files_until_clients_had_time, .init = setup,
     .fini = teardown)
{
	uint64_t f = file_at("f"), g = file_at("g"), h = file_at("h");
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_open_session(store, f, client_a, &a), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, KVC_META_ROOT, N("f")), 0);
	cr_assert_eq(counts().orphans, 1);
	/* The process ends with f open in memory; a new one starts. */
	kvc_meta_store_close(store);
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	kvc_meta_store_hold_opens(store, 300);
	cr_assert(kvc_meta_store_holding_opens(store));
	cr_assert_eq(kvc_meta_store_settle_orphans(store), -EAGAIN);
	cr_assert_eq(counts().orphans, 1, "f: its client may still read it");
	cr_assert_eq(kvc_meta_store_unlink(store, KVC_META_ROOT, N("g")), 0);
	cr_assert_eq(counts().orphans, 2, "g: kept too, nobody can tell yet");
	/* a opens f again (as kvc-fuse does at -EREMCHG), and h. */
	cr_assert_eq(kvc_meta_store_open_session(store, f, client_a, &a), 0);
	cr_assert_eq(a.nlink, 0);
	cr_assert_eq(kvc_meta_store_open_session(store, h, client_a, &a), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, KVC_META_ROOT, N("h")), 0);
	uint64_t gc = counts().gc_pending;
	struct timespec wait = {0, 350 * 1000 * 1000};
	nanosleep(&wait, NULL);
	cr_assert_not(kvc_meta_store_holding_opens(store));
	cr_assert_eq(kvc_meta_store_settle_orphans(store), 1, "g only: nobody opened it again");
	cr_assert_eq(counts().gc_pending, gc + 1);
	cr_assert_eq(counts().orphans, 2, "f and h are open");
	cr_assert_eq(kvc_meta_store_close_session(store, f, client_a), 0);
	cr_assert_eq(kvc_meta_store_close_session(store, h, client_a), 0);
	cr_assert_eq(counts().orphans, 0, "each settled at its close");
	cr_assert_eq(counts().gc_pending, gc + 3);
	(void)g;
}
