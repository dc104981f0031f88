/* Unit tests of the meta store's group commit (meta/meta_group.c): many
 * threads creating, opening and sizing files at once get exactly the
 * answers they would get one by one: every file made once, one winner of
 * an exclusive race, each size committed, sessions recorded, and a batch
 * that holds a failing call commits nothing of it; opens, closes and
 * removals at once likewise. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta_store.h"
#include "test_dir.h"

#define THREADS 8
#define FILES 300

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_meta_store *store;
static uint64_t parent;
static atomic_int winners, losers, failures;
static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 1,
                                           .chain_count = 3};

static void setup(void)
{
	kvc_test_dir_make(dir, "group");
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_mkdir(store, 1, "keys", 4, 0755, 0, 0, &attr), 0);
	parent = attr.ino;
}

static void teardown(void)
{
	kvc_meta_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(meta_group, .init = setup, .fini = teardown);

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint8_t client[KVC_META_CLIENT_ID] = {(uint8_t)id};
	char name[32];
	for (int i = 0; i < FILES; i++) {
		int len = snprintf(name, sizeof(name), "t%d-%d", id, i);
		struct kvc_attr attr, grown;
		bool created;
		int rc = kvc_meta_store_create_open(store, parent, name, (uint32_t)len, 0644, 0, 0,
		                                    true, client, &attr, &created, NULL);
		if (rc == 0 && created)
			rc = kvc_meta_store_extend(store, attr.ino, (uint64_t)i * 100 + 1, &grown);
		if (rc == 0 && grown.size != (uint64_t)i * 100 + 1)
			rc = -EIO;
		if (rc != 0 || !created)
			atomic_fetch_add(&failures, 1);
		/* Every thread races for the same names now and then. */
		if (i % 50 == 0) {
			len = snprintf(name, sizeof(name), "shared-%d", i);
			rc = kvc_meta_store_create_open(store, parent, name, (uint32_t)len, 0644, 0, 0,
			                                true, client, &attr, &created, NULL);
			if (rc == 0 && created)
				atomic_fetch_add(&winners, 1);
			else if (rc == -EEXIST && !created)
				atomic_fetch_add(&losers, 1);
			else
				atomic_fetch_add(&failures, 1);
		}
	}
	return NULL;
}

static int count_entry(void *arg, const char *name, uint32_t name_len,
                       const struct kvc_attr *attr)
{
	(void)name, (void)name_len, (void)attr;
	(*(int *)arg)++;
	return 0;
}

Test(meta_group, concurrent_creates_and_size_commits_get_their_own_answers)
{
	pthread_t threads[THREADS];
	for (int t = 0; t < THREADS; t++)
		cr_assert_eq(pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(threads[t], NULL);
	cr_assert_eq(atomic_load(&failures), 0);
	cr_assert_eq(atomic_load(&winners), FILES / 50, "one winner per shared name");
	cr_assert_eq(atomic_load(&losers), FILES / 50 * (THREADS - 1));
	int entries = 0;
	char after[64] = "";
	bool more = true;
	while (more) {
		int before = entries;
		cr_assert_geq(kvc_meta_store_readdir(store, parent, after, (uint32_t)strlen(after),
		                                     1000000, count_entry, &entries, &more), 0);
		if (entries == before)
			break;
	}
	cr_assert_eq(entries, THREADS * FILES + FILES / 50);
	for (int t = 0; t < THREADS; t++) {
		char name[32];
		int len = snprintf(name, sizeof(name), "t%d-%d", t, FILES - 1);
		struct kvc_attr attr;
		cr_assert_eq(kvc_meta_store_lookup(store, parent, name, (uint32_t)len, &attr), 0);
		cr_assert_eq(attr.size, (uint64_t)(FILES - 1) * 100 + 1);
	}
	struct kvc_attr dir_attr;
	cr_assert_eq(kvc_meta_store_getattr(store, parent, &dir_attr), 0);
	cr_assert_eq(dir_attr.nlink, 2);
}

Test(meta_group, a_file_created_and_opened_keeps_its_data_when_removed)
{
	/* The session recorded in the create's transaction (grouped or not)
	 * keeps the file an orphan when its name goes. */
	uint8_t client[KVC_META_CLIENT_ID] = {42};
	struct kvc_attr attr;
	bool created;
	cr_assert_eq(kvc_meta_store_create_open(store, parent, "held", 4, 0644, 0, 0, true, client,
	                                        &attr, &created, NULL), 0);
	cr_assert(created);
	cr_assert_eq(kvc_meta_store_unlink(store, parent, "held", 4), 0);
	struct kvc_attr again;
	cr_assert_eq(kvc_meta_store_getattr(store, attr.ino, &again), 0, "an orphan, still there");
	cr_assert_eq(again.nlink, 0);
	cr_assert_eq(kvc_meta_store_close_session(store, attr.ino, client), 0);
}

/* Each thread makes its files, closes them, opens them again, removes
 * them while open (orphans), closes them (to the gc queue), and races the
 * others to remove shared names: one removal of each wins. */
static void *remover(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint8_t client[KVC_META_CLIENT_ID] = {(uint8_t)(id + 1)};
	char name[32];
	for (int i = 0; i < FILES; i++) {
		int len = snprintf(name, sizeof(name), "r%d-%d", id, i);
		struct kvc_attr attr, opened;
		bool created;
		int rc = kvc_meta_store_create_open(store, parent, name, (uint32_t)len, 0644, 0, 0,
		                                    true, client, &attr, &created, NULL);
		if (rc == 0)
			rc = kvc_meta_store_close_session(store, attr.ino, client);
		if (rc == 0)
			rc = kvc_meta_store_open_session(store, attr.ino, client, &opened);
		if (rc == 0 && opened.ino != attr.ino)
			rc = -EIO;
		if (rc == 0)
			rc = kvc_meta_store_unlink(store, parent, name, (uint32_t)len);
		if (rc == 0)
			rc = kvc_meta_store_getattr(store, attr.ino, &opened); /* an orphan */
		if (rc == 0 && opened.nlink != 0)
			rc = -EIO;
		if (rc == 0)
			rc = kvc_meta_store_close_sessions(store, &attr.ino, 1, client);
		if (rc == 0 && kvc_meta_store_getattr(store, attr.ino, &opened) != -ENOENT)
			rc = -EIO; /* the last close let it go */
		if (rc != 0)
			atomic_fetch_add(&failures, 1);
		if (i % 50 == 0) {
			len = snprintf(name, sizeof(name), "shared-%d", i);
			rc = kvc_meta_store_unlink(store, parent, name, (uint32_t)len);
			if (rc == 0)
				atomic_fetch_add(&winners, 1);
			else if (rc == -ENOENT)
				atomic_fetch_add(&losers, 1);
			else
				atomic_fetch_add(&failures, 1);
		}
	}
	return NULL;
}

Test(meta_group, concurrent_opens_closes_and_removals_get_their_own_answers)
{
	struct kvc_attr attr;
	struct kvc_meta_counts before, after;
	for (int i = 0; i < FILES; i += 50) {
		char name[32];
		int len = snprintf(name, sizeof(name), "shared-%d", i);
		cr_assert_eq(kvc_meta_store_create(store, parent, name, (uint32_t)len, 0644, 0, 0, true,
		                                   &attr), 0);
	}
	cr_assert_eq(kvc_meta_store_counts(store, &before), 0);
	pthread_t threads[THREADS];
	for (int t = 0; t < THREADS; t++)
		cr_assert_eq(pthread_create(&threads[t], NULL, remover, (void *)(intptr_t)t), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(threads[t], NULL);
	cr_assert_eq(atomic_load(&failures), 0);
	cr_assert_eq(atomic_load(&winners), FILES / 50, "one removal per shared name");
	cr_assert_eq(atomic_load(&losers), FILES / 50 * (THREADS - 1));
	cr_assert_eq(kvc_meta_store_counts(store, &after), 0);
	cr_assert_eq(after.inodes, before.inodes - FILES / 50, "every file gone");
	cr_assert_eq(after.open_sessions, 0);
	cr_assert_eq(after.orphans, 0);
	cr_assert_eq(after.gc_pending, before.gc_pending + THREADS * FILES + FILES / 50);
	cr_assert_eq(kvc_meta_store_getattr(store, parent, &attr), 0);
	cr_assert_eq(attr.nlink, 2);
}
