/* Unit tests of the chunk index's crash consistency (storage/chunk_store.h
 * "Crashes"): inline chunks written and synced, then half removed and
 * many more written (LMDB reuses the freed pages: without the checkpoint's
 * pin, pages of the synced tree). A machine crash is simulated as in
 * meta_checkpoint_test (crash_image.h: the index as flushed at the sync,
 * with any subset of the pages written since); opened "after a reboot",
 * the target must hold exactly the synced chunks, byte for byte. In the
 * same boot (kvc-storage killed) nothing committed may be lost. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/chunk_store.h"
#include "crash_image.h"
#include "test_dir.h"

#define CS (1u << 20)
#define KEY (16u << 10) /* an inline chunk of 16 KiB: one block */

static char live_dir[KVC_TEST_DIR_MAX], crash_dir[KVC_TEST_DIR_MAX];
static char live_index[KVC_TEST_DIR_MAX + 8], crash_index[KVC_TEST_DIR_MAX + 8];
static struct kvc_chunk_ring ring;

static void setup(void)
{
	kvc_test_dir_make(live_dir, "ckpt-target");
	kvc_test_dir_make(crash_dir, "ckpt-target-crash");
	snprintf(live_index, sizeof(live_index), "%s/index", live_dir);
	snprintf(crash_index, sizeof(crash_index), "%s/index", crash_dir);
	cr_assert_eq(kvc_chunk_ring_init(&ring, 64), 0);
	unsetenv("KVC_BOOT_ID");
}

static void teardown(void)
{
	kvc_chunk_ring_exit(&ring);
	kvc_test_dir_remove(live_dir);
	kvc_test_dir_remove(crash_dir);
	unsetenv("KVC_BOOT_ID");
}

TestSuite(chunk_checkpoint, .init = setup, .fini = teardown, .timeout = 120);

static void fill(uint8_t *buf, uint64_t inode, unsigned round)
{
	for (uint32_t i = 0; i < KEY; i++)
		buf[i] = (uint8_t)(inode * 31 + round * 7 + i * 13 + (i >> 9));
}

static void put(struct kvc_chunk_store *s, uint64_t inode, unsigned round)
{
	static uint8_t data[KEY];
	uint64_t version;
	uint32_t length;
	fill(data, inode, round);
	cr_assert_eq(kvc_chunk_store_write(s, inode, 0, CS, 0, data, KEY, &version, &length), 0);
}

/* 0: the chunk holds round's bytes; 1: it is missing; -1: anything else. */
static int holds(struct kvc_chunk_store *s, uint64_t inode, unsigned round)
{
	static uint8_t want[KEY];
	struct kvc_chunk_read r = {.inode = inode, .chunk = 0, .offset = 0, .length = KEY};
	cr_assert_eq(kvc_chunk_store_read_batch(&s, &ring, &r, 1), 0);
	fill(want, inode, round);
	int rc = r.status != 0 ? -1
	         : r.present == 0 ? 1
	         : r.present == KEY && memcmp(r.data, want, KEY) == 0 ? 0 : -1;
	kvc_chunk_store_read_release(&r, 1);
	return rc;
}

/* Chunks 1..300 synced; then 1..150 removed, 151..300 rewritten (round 1)
 * and 1001..1600 written: the live index, never synced. */
static struct kvc_chunk_store *history(struct kvc_test_file *flushed, struct kvc_test_file *live,
                                       struct kvc_test_file *checkpoint)
{
	struct kvc_chunk_store *s;
	cr_assert_eq(kvc_chunk_store_open(live_dir, &s), 0);
	for (uint64_t i = 1; i <= 300; i++)
		put(s, i, 0);
	cr_assert_eq(kvc_chunk_store_sync(s), 0);
	*flushed = kvc_test_slurp(live_index, "data.mdb");
	*checkpoint = kvc_test_slurp(live_index, "checkpoint");
	for (uint64_t i = 1; i <= 150; i++)
		cr_assert_eq(kvc_chunk_store_remove(s, i), 1);
	for (uint64_t i = 151; i <= 300; i++)
		put(s, i, 1);
	for (uint64_t i = 1001; i <= 1600; i++)
		put(s, i, 0);
	*live = kvc_test_slurp(live_index, "data.mdb");
	return s;
}

Test(chunk_checkpoint, a_machine_crash_goes_back_to_the_synced_index_whatever_reached_the_disk)
{
	struct kvc_test_file flushed, live, checkpoint;
	struct kvc_chunk_store *dead = history(&flushed, &live, &checkpoint), *s;
	/* The crash target: its own FORMAT and chunk directories. */
	cr_assert_eq(kvc_chunk_store_open(crash_dir, &s), 0);
	kvc_chunk_store_close(s);
	setenv("KVC_BOOT_ID", "another-boot", 1);
	int percents[] = {0, 10, 50, 90, 100};
	for (unsigned seed = 1; seed <= 4; seed++) {
		for (size_t p = 0; p < sizeof(percents) / sizeof(percents[0]); p++) {
			int changed = kvc_test_crash_image(crash_index, &flushed, &live, &checkpoint,
			                                   seed, percents[p]);
			cr_assert_gt(changed, 10, "the history must rewrite pages");
			cr_assert_eq(kvc_chunk_store_open(crash_dir, &s), 0, "seed %u, %d%%", seed,
			             percents[p]);
			for (uint64_t i = 1; i <= 300; i++)
				cr_assert_eq(holds(s, i, 0), 0, "seed %u, %d%%: chunk %llu as synced",
				             seed, percents[p], (unsigned long long)i);
			for (uint64_t i = 1001; i <= 1600; i += 50)
				cr_assert_eq(holds(s, i, 0), 1, "and nothing after the sync");
			put(s, 2000, 0); /* and it takes new work */
			cr_assert_eq(holds(s, 2000, 0), 0);
			kvc_chunk_store_close(s);
		}
	}
	kvc_chunk_store_close(dead);
	kvc_test_release(&flushed), kvc_test_release(&live), kvc_test_release(&checkpoint);
}

Test(chunk_checkpoint, a_killed_server_loses_nothing_committed)
{
	struct kvc_test_file flushed, live, checkpoint;
	struct kvc_chunk_store *dead = history(&flushed, &live, &checkpoint), *s;
	cr_assert_eq(kvc_chunk_store_open(crash_dir, &s), 0);
	kvc_chunk_store_close(s);
	/* Same boot: the page cache (the live file) is what the disk shows. */
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -f %s/*", crash_index);
	cr_assert_eq(system(cmd), 0);
	kvc_test_spill(crash_index, "data.mdb", live.bytes, live.size, live.full_size);
	kvc_test_spill(crash_index, "checkpoint", checkpoint.bytes, checkpoint.size, 0);
	cr_assert_eq(kvc_chunk_store_open(crash_dir, &s), 0);
	for (uint64_t i = 1; i <= 300; i++)
		cr_assert_eq(holds(s, i, i <= 150 ? 0 : 1), i <= 150 ? 1 : 0, "chunk %llu",
		             (unsigned long long)i);
	for (uint64_t i = 1001; i <= 1600; i++)
		cr_assert_eq(holds(s, i, 0), 0);
	kvc_chunk_store_close(s);
	kvc_chunk_store_close(dead);
	kvc_test_release(&flushed), kvc_test_release(&live), kvc_test_release(&checkpoint);
}

Test(chunk_checkpoint, pages_freed_since_a_checkpoint_are_counted_until_the_next)
{
	struct kvc_chunk_store *s;
	cr_assert_eq(kvc_chunk_store_open(live_dir, &s), 0);
	for (uint64_t i = 1; i <= 300; i++)
		put(s, i, 0);
	cr_assert_eq(kvc_chunk_store_checkpoint(s), 0);
	size_t before = kvc_chunk_store_index_held(s);
	for (uint64_t i = 1; i <= 150; i++)
		cr_assert_eq(kvc_chunk_store_remove(s, i), 1);
	size_t held = kvc_chunk_store_index_held(s);
	cr_assert_geq(held, before + 150 * (size_t)KEY, "150 chunks' pages freed: %zu", held);
	cr_assert_eq(kvc_chunk_store_checkpoint(s), 0);
	cr_assert_lt(kvc_chunk_store_index_held(s), held / 10, "reusable again");
	kvc_chunk_store_close(s);
}
