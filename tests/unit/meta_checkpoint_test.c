/* Unit tests of crash consistency (core/lmdb_checkpoint) through kvc-meta's
 * two stores. A machine crash is simulated by building the data file a
 * disk could hold after one: the file as flushed at the last checkpoint,
 * with any subset of the pages written since (the kernel writes dirty
 * pages back in any order), the new meta pages included; the page cache
 * (the live file) is lost. Opened "after a reboot" (another boot id), the
 * store must be exactly what it was at the checkpoint and consistent. In
 * the same boot (kvc-meta killed) nothing committed may be lost. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meta/meta_store.h"
#include "meta/pool_store.h"
#include "crash_image.h"
#include "test_dir.h"

static char live_dir[KVC_TEST_DIR_MAX], crash_dir[KVC_TEST_DIR_MAX];

static void setup(void)
{
	kvc_test_dir_make(live_dir, "ckpt-live");
	kvc_test_dir_make(crash_dir, "ckpt-crash");
	unsetenv("KVC_BOOT_ID");
}

static void teardown(void)
{
	kvc_test_dir_remove(live_dir);
	kvc_test_dir_remove(crash_dir);
}

TestSuite(meta_checkpoint, .init = setup, .fini = teardown);

static int changed_pages;

static void crash_image(const struct kvc_test_file *flushed, const struct kvc_test_file *live,
                        const struct kvc_test_file *checkpoint, unsigned seed, int keep_percent)
{
	changed_pages = kvc_test_crash_image(crash_dir, flushed, live, checkpoint, seed,
	                                     keep_percent);
}

/* ---- the namespace ---- */

static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 1,
                                           .chain_count = 1};

static void create(struct kvc_meta_store *s, const char *prefix, int i)
{
	char name[32];
	struct kvc_attr a;
	snprintf(name, sizeof(name), "%s%04d", prefix, i);
	cr_assert_eq(kvc_meta_store_create(s, KVC_META_ROOT, name, (uint32_t)strlen(name), 0644,
	                                   0, 0, true, &a), 0);
}

struct listing {
	int count, f, g;
	char last[64];
	struct kvc_meta_store *store;
};

static int count_entry(void *arg, const char *name, uint32_t len, const struct kvc_attr *attr)
{
	struct listing *l = arg;
	struct kvc_attr again;
	cr_assert_eq(kvc_meta_store_getattr(l->store, attr->ino, &again), 0);
	cr_assert_eq(again.ino, attr->ino);
	l->count++;
	l->f += name[0] == 'f';
	l->g += name[0] == 'g';
	cr_assert_lt(len, sizeof(l->last));
	memcpy(l->last, name, len);
	l->last[len] = '\0';
	return 0;
}

/* Every entry of the root, page by page, each one's inode read too. */
static struct listing list_root(struct kvc_meta_store *s)
{
	struct listing l = {.store = s};
	bool more = true;
	while (more) {
		char after[64];
		strcpy(after, l.last);
		int n = kvc_meta_store_readdir(s, KVC_META_ROOT, after, (uint32_t)strlen(after), 64,
		                               count_entry, &l, &more);
		cr_assert_geq(n, 0, "readdir: %d", n);
	}
	return l;
}

/* Files f0000..f0299 at the checkpoint; then half of them go and 600 g
 * files come (enough churn that LMDB reuses freed pages), not flushed.
 * Returns the store, still open: the test closes it once it built its
 * images (the process "died" with it open). */
static struct kvc_meta_store *namespace_history(struct kvc_test_file *flushed, struct kvc_test_file *live,
                                                struct kvc_test_file *checkpoint)
{
	struct kvc_meta_store *s;
	cr_assert_eq(kvc_meta_store_open(live_dir, &defaults, &s), 0);
	for (int i = 0; i < 300; i++)
		create(s, "f", i);
	cr_assert_eq(kvc_meta_store_sync(s), 0);
	*flushed = kvc_test_slurp(live_dir, "data.mdb");
	*checkpoint = kvc_test_slurp(live_dir, "checkpoint");
	for (int i = 0; i < 150; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%04d", i);
		cr_assert_eq(kvc_meta_store_unlink(s, KVC_META_ROOT, name, 5), 0);
	}
	for (int i = 0; i < 600; i++)
		create(s, "g", i);
	*live = kvc_test_slurp(live_dir, "data.mdb");
	return s;
}

Test(meta_checkpoint, a_machine_crash_goes_back_to_the_checkpoint_whatever_reached_the_disk)
{
	struct kvc_test_file flushed, live, checkpoint;
	struct kvc_meta_store *dead = namespace_history(&flushed, &live, &checkpoint);
	setenv("KVC_BOOT_ID", "another-boot", 1);
	int percents[] = {0, 10, 50, 90, 100};
	for (unsigned seed = 1; seed <= 10; seed++) {
		for (size_t p = 0; p < sizeof(percents) / sizeof(percents[0]); p++) {
			crash_image(&flushed, &live, &checkpoint, seed, percents[p]);
			cr_assert_gt(changed_pages, 10, "the history must rewrite pages");
			struct kvc_meta_store *s;
			cr_assert_eq(kvc_meta_store_open(crash_dir, &defaults, &s), 0,
			             "seed %u, %d%% of the pages", seed, percents[p]);
			struct listing l = list_root(s);
			cr_assert_eq(l.f, 300, "seed %u, %d%%: every file of the checkpoint", seed,
			             percents[p]);
			cr_assert_eq(l.g, 0, "and nothing after it");
			create(s, "h", 0); /* and it takes new work */
			kvc_meta_store_close(s);
		}
	}
	unsetenv("KVC_BOOT_ID");
	kvc_meta_store_close(dead);
	kvc_test_release(&flushed), kvc_test_release(&live), kvc_test_release(&checkpoint);
}

Test(meta_checkpoint, numbers_given_out_after_the_checkpoint_are_not_given_again_after_a_crash)
{
	struct kvc_test_file flushed, live, checkpoint;
	struct kvc_meta_store *dead = namespace_history(&flushed, &live, &checkpoint);
	struct kvc_attr last, a, b;
	cr_assert_eq(kvc_meta_store_create(dead, KVC_META_ROOT, "last", 4, 0644, 0, 0, true, &last),
	             0);
	setenv("KVC_BOOT_ID", "another-boot", 1);
	/* None of the later pages on the disk (nothing to go back over, yet
	 * the numbers went), and all of them. */
	for (int percent = 0; percent <= 100; percent += 100) {
		crash_image(&flushed, &live, &checkpoint, 1, percent);
		struct kvc_meta_store *s;
		cr_assert_eq(kvc_meta_store_open(crash_dir, &defaults, &s), 0);
		cr_assert_eq(kvc_meta_store_create(s, KVC_META_ROOT, "new", 3, 0644, 0, 0, true, &a), 0);
		cr_assert_gt(a.ino, last.ino, "%d%%: inode %llu given out again", percent,
		             (unsigned long long)a.ino);
		kvc_meta_store_close(s);
		/* The same boot again: no jump. */
		cr_assert_eq(kvc_meta_store_open(crash_dir, &defaults, &s), 0);
		cr_assert_eq(kvc_meta_store_create(s, KVC_META_ROOT, "next", 4, 0644, 0, 0, true, &b),
		             0);
		cr_assert_eq(b.ino, a.ino + 1);
		kvc_meta_store_close(s);
	}
	unsetenv("KVC_BOOT_ID");
	kvc_meta_store_close(dead);
	kvc_test_release(&flushed), kvc_test_release(&live), kvc_test_release(&checkpoint);
}

Test(meta_checkpoint, a_killed_process_loses_nothing_committed)
{
	struct kvc_test_file flushed, live, checkpoint;
	struct kvc_meta_store *dead = namespace_history(&flushed, &live, &checkpoint);
	/* Same boot: the page cache (the live file) is what the disk shows. */
	kvc_test_spill(crash_dir, "data.mdb", live.bytes, live.size, live.full_size);
	kvc_test_spill(crash_dir, "checkpoint", checkpoint.bytes, checkpoint.size, 0);
	struct kvc_meta_store *s;
	cr_assert_eq(kvc_meta_store_open(crash_dir, &defaults, &s), 0);
	struct listing l = list_root(s);
	cr_assert_eq(l.f, 150);
	cr_assert_eq(l.g, 600);
	kvc_meta_store_close(s);
	/* A clean close leaves nothing to go back over after a reboot. */
	setenv("KVC_BOOT_ID", "another-boot", 1);
	cr_assert_eq(kvc_meta_store_open(crash_dir, &defaults, &s), 0);
	l = list_root(s);
	cr_assert_eq(l.f, 150);
	cr_assert_eq(l.g, 600);
	kvc_meta_store_close(s);
	unsetenv("KVC_BOOT_ID");
	kvc_meta_store_close(dead);
	kvc_test_release(&flushed), kvc_test_release(&live), kvc_test_release(&checkpoint);
}

/* ---- the page pools ---- */

static void confirm(struct kvc_pool_store *p, const char *prefix, int i)
{
	char name[32];
	snprintf(name, sizeof(name), "%s%04d", prefix, i);
	struct kvc_pool_key k = {name, (uint32_t)strlen(name)};
	struct kvc_pool_allocation a;
	cr_assert_eq(kvc_pool_allocate(p, "kv", 0, &k, 1, 1, &a), 0);
	cr_assert_geq(a.page, 0);
	int status;
	cr_assert_eq(kvc_pool_confirm(p, "kv", 0, &k, &a.page, 1, NULL, 0, 1, &status), 0);
	cr_assert_eq(status, 0);
}

static int count_keys(struct kvc_pool_store *p, const char *prefix, int n)
{
	int found = 0;
	for (int i = 0; i < n; i++) {
		char name[32];
		bool there;
		snprintf(name, sizeof(name), "%s%04d", prefix, i);
		struct kvc_pool_key k = {name, (uint32_t)strlen(name)};
		cr_assert_eq(kvc_pool_exists(p, "kv", &k, 1, &there), 0);
		found += there;
	}
	return found;
}

Test(meta_checkpoint, page_pools_go_back_to_the_checkpoint_with_their_accounting)
{
	struct kvc_pool_store *p;
	cr_assert_eq(kvc_pool_store_open(live_dir, &p), 0);
	cr_assert_eq(kvc_pool_init(p, "kv", 0, 4096, 1), 0);
	for (int i = 0; i < 300; i++)
		confirm(p, "k", i);
	cr_assert_eq(kvc_pool_store_sync(p), 0);
	struct kvc_test_file flushed = kvc_test_slurp(live_dir, "data.mdb");
	struct kvc_test_file checkpoint = kvc_test_slurp(live_dir, "checkpoint");
	struct kvc_pool_key gone[150];
	char names[150][8];
	for (int i = 0; i < 150; i++) {
		snprintf(names[i], sizeof(names[i]), "k%04d", i);
		gone[i] = (struct kvc_pool_key){names[i], 5};
	}
	cr_assert_eq(kvc_pool_delete(p, "kv", gone, 150, 1), 150);
	for (int i = 0; i < 600; i++)
		confirm(p, "m", i);
	struct kvc_test_file live = kvc_test_slurp(live_dir, "data.mdb");

	setenv("KVC_BOOT_ID", "another-boot", 1);
	int percents[] = {0, 30, 70, 100};
	for (unsigned seed = 1; seed <= 5; seed++) {
		for (size_t i = 0; i < sizeof(percents) / sizeof(percents[0]); i++) {
			crash_image(&flushed, &live, &checkpoint, seed, percents[i]);
			cr_assert_gt(changed_pages, 10);
			struct kvc_pool_store *q;
			cr_assert_eq(kvc_pool_store_open(crash_dir, &q), 0);
			cr_assert_eq(kvc_pool_fsck(q, false), 0, "seed %u, %d%%: accounting", seed,
			             percents[i]);
			cr_assert_eq(count_keys(q, "k", 300), 300, "the checkpoint's keys");
			cr_assert_eq(count_keys(q, "m", 600), 0, "nothing after it");
			kvc_pool_store_close(q);
		}
	}
	unsetenv("KVC_BOOT_ID");
	kvc_pool_store_close(p);
	kvc_test_release(&flushed), kvc_test_release(&live), kvc_test_release(&checkpoint);
}
