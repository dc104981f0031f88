/* Unit tests of the space reserve (src/core/reserve.c) and of the chunk
 * store's use of it: the auto sizes, the cached free figure (looked at
 * again only after 100 ms or refresh_bytes, and before a refusal that may
 * be stale), bytes in flight and done, kvc-meta's growth check, and a
 * store that refuses writes at its reserve but still removes, punches and
 * truncates. The volume and the clock are a fake the tests move. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/reserve.h"
#include "storage/chunk_store.h"
#include "test_dir.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define MS (1000ull * 1000)

static struct fake {
	uint64_t total, free_bytes, now;
	int looks;
	int fail; /* -errno the next looks return */
} fake;

static int fake_stat(void *arg, uint64_t *total, uint64_t *free_bytes)
{
	struct fake *f = arg;
	if (f->fail)
		return f->fail;
	f->looks++;
	*total = f->total;
	*free_bytes = f->free_bytes;
	return 0;
}

static uint64_t fake_now(void *arg)
{
	return ((struct fake *)arg)->now;
}

static const struct kvc_reserve_ops fake_ops = {fake_stat, fake_now, &fake};
static struct kvc_reserve r;

static void setup(void)
{
	fake = (struct fake){.total = GIB, .free_bytes = 100 * MIB, .now = 1000 * MS};
}

static void teardown(void)
{
	kvc_reserve_destroy(&r);
}

TestSuite(reserve, .init = setup, .fini = teardown);

Test(reserve, auto_sizes_scale_with_the_volume)
{
	/* 2%, at least 8 MiB, at most 1 GiB, at most a quarter; meta: half. */
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_DATA, 96 * MIB), 8 * MIB);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_META, 96 * MIB), 4 * MIB);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_DATA, 16 * MIB), 4 * MIB);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_DATA, 20 * GIB), 20 * GIB / 50);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_META, 20 * GIB), 20 * GIB / 100);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_DATA, 4096 * GIB), GIB);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_META, 4096 * GIB), GIB / 2);
	cr_assert_eq(kvc_reserve_auto_bytes(KVC_RESERVE_DATA, 0), 0);

	fake.total = 96 * MIB;
	cr_assert_eq(kvc_reserve_init(&r, -1, KVC_RESERVE_AUTO, KVC_RESERVE_META, &fake_ops), 0);
	cr_assert_eq(r.reserve_bytes, 4 * MIB);
}

Test(reserve, writes_use_the_cached_figure_between_looks)
{
	cr_assert_eq(kvc_reserve_init(&r, -1, 10 * MIB, KVC_RESERVE_DATA, &fake_ops), 0);
	cr_assert_eq(fake.looks, 1, "init looks once");
	/* 2 MiB in 64 KiB writes (under refresh_bytes, 2.5 MiB), no time
	 * passing: not one statvfs. */
	for (int i = 0; i < 32; i++) {
		cr_assert_eq(kvc_reserve_admit(&r, 64 << 10), 0);
		kvc_reserve_done(&r, 64 << 10);
	}
	cr_assert_eq(fake.looks, 1);
	/* 100 ms later the figure is taken again. */
	fake.now += 100 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 4096), 0);
	kvc_reserve_done(&r, 4096);
	cr_assert_eq(fake.looks, 2);
	cr_assert_eq(r.charged, 4096, "the look starts the count again");
	/* And after refresh_bytes (a quarter of the reserve) written. */
	cr_assert_eq(r.refresh_bytes, 10 * MIB / 4);
	cr_assert_eq(kvc_reserve_admit(&r, 3 * MIB), 0);
	kvc_reserve_done(&r, 3 * MIB);
	cr_assert_eq(fake.looks, 2);
	cr_assert_eq(kvc_reserve_admit(&r, 4096), 0);
	cr_assert_eq(fake.looks, 3);
	kvc_reserve_done(&r, 4096);
}

Test(reserve, bytes_in_flight_count_until_done)
{
	cr_assert_eq(kvc_reserve_init(&r, -1, 10 * MIB, KVC_RESERVE_DATA, &fake_ops), 0);
	/* 100 MiB free, 10 kept: 90 MiB may be in flight at once, not a byte more. */
	cr_assert_eq(kvc_reserve_admit(&r, 45 * MIB), 0);
	cr_assert_eq(kvc_reserve_admit(&r, 45 * MIB), 0);
	cr_assert_eq(r.in_flight, 90 * MIB);
	cr_assert_eq(kvc_reserve_admit(&r, 1), -ENOSPC);
	cr_assert_eq(kvc_reserve_admit(&r, 1), -ENOSPC);
	cr_assert_eq(fake.looks, 1, "nothing done since the look: refused from the cache");
	cr_assert_eq(r.refused, 2);
	struct kvc_reserve_state st;
	cr_assert_eq(kvc_reserve_state(&r, &st), 0);
	cr_assert(st.refusing);
	cr_assert_eq(st.available_bytes, 0);
	cr_assert_eq(st.free_bytes, 100 * MIB);
	cr_assert_eq(st.reserve_bytes, 10 * MIB);
	cr_assert_eq(st.refused, 2);

	/* One write ends: its bytes are on the volume now (the fake shows
	 * them), and the other's are still in flight. */
	kvc_reserve_done(&r, 45 * MIB);
	fake.free_bytes = 55 * MIB;
	cr_assert_eq(kvc_reserve_admit(&r, 1 * MIB), -ENOSPC, "55 - 45 in flight = the reserve");
	cr_assert_eq(fake.looks, 3, "a lowered figure is looked at again before a refusal");
	kvc_reserve_done(&r, 45 * MIB);
	fake.free_bytes = 10 * MIB + 512 * 1024;
	fake.now += 100 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 512 * 1024), 0, "exactly down to the reserve");
	kvc_reserve_done(&r, 512 * 1024);
	cr_assert_eq(r.in_flight, 0);
}

Test(reserve, a_refusal_is_checked_against_a_fresh_look)
{
	/* Overwrites are charged as new bytes: the cached figure falls while
	 * the volume does not. A refusal looks again before it says no. */
	cr_assert_eq(kvc_reserve_init(&r, -1, 10 * MIB, KVC_RESERVE_DATA, &fake_ops), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(kvc_reserve_admit(&r, 2 * MIB), 0);
		kvc_reserve_done(&r, 2 * MIB);
	}
	fake.free_bytes = 12 * MIB; /* someone else filled the volume */
	cr_assert_eq(kvc_reserve_admit(&r, 1 * MIB), 0, "2 MiB free above the reserve");
	cr_assert_eq(fake.looks, 2);
	kvc_reserve_done(&r, 1 * MIB);
	cr_assert_eq(kvc_reserve_admit(&r, 2 * MIB), 0, "the done MiB was an overwrite");
	cr_assert_eq(fake.looks, 3);
	kvc_reserve_done(&r, 2 * MIB);
	fake.free_bytes = 11 * MIB;
	cr_assert_eq(kvc_reserve_admit(&r, 2 * MIB), -ENOSPC);
	cr_assert_eq(fake.looks, 4);
	/* A failed look keeps the figure it had. */
	fake.fail = -EIO;
	fake.now += 200 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 512 * 1024), 0);
	kvc_reserve_done(&r, 512 * 1024);
	struct kvc_reserve_state st = {.total_bytes = 7};
	cr_assert_eq(kvc_reserve_state(&r, &st), -EIO);
	cr_assert_eq(st.total_bytes, 7, "left as it was");
}

Test(reserve, near_the_reserve_every_write_looks)
{
	cr_assert_eq(kvc_reserve_init(&r, -1, 10 * MIB, KVC_RESERVE_DATA, &fake_ops), 0);
	/* Far from it: the cache, even though others are writing. */
	fake.free_bytes = 60 * MIB;
	cr_assert_eq(kvc_reserve_admit(&r, 1 * MIB), 0);
	kvc_reserve_done(&r, 1 * MIB);
	cr_assert_eq(fake.looks, 1);
	/* Near it: another process took the volume from 13 to 11 MiB free
	 * since this one looked; a 2 MiB write would go below the reserve. */
	fake.free_bytes = 13 * MIB;
	fake.now += 100 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 1), 0);
	kvc_reserve_done(&r, 1);
	cr_assert_eq(fake.looks, 2);
	fake.free_bytes = 11 * MIB;
	fake.now += 2 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 2 * MIB), -ENOSPC);
	cr_assert_eq(fake.looks, 3);
	/* A flood of refusals looks at most once a millisecond. */
	for (int i = 0; i < 100; i++)
		cr_assert_eq(kvc_reserve_admit(&r, 2 * MIB), -ENOSPC);
	cr_assert_eq(fake.looks, 3);
	fake.now += 1 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 2 * MIB), -ENOSPC);
	cr_assert_eq(fake.looks, 4);
	cr_assert_eq(r.refused, 102);
}

Test(reserve, growth_checks_ask_for_no_bytes)
{
	/* kvc-meta asks with 0 bytes: refused only below the reserve. */
	cr_assert_eq(kvc_reserve_init(&r, -1, 10 * MIB, KVC_RESERVE_META, &fake_ops), 0);
	cr_assert_eq(kvc_reserve_admit(&r, 0), 0);
	fake.free_bytes = 10 * MIB;
	fake.now += 100 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 0), 0, "at the reserve: not below it");
	fake.free_bytes = 10 * MIB - 1;
	fake.now += 100 * MS;
	cr_assert_eq(kvc_reserve_admit(&r, 0), -ENOSPC);
	cr_assert_eq(r.in_flight, 0);
}

Test(reserve, zero_or_unset_refuses_nothing)
{
	struct kvc_reserve unset = {0};
	cr_assert_eq(kvc_reserve_admit(&unset, GIB), 0);
	kvc_reserve_done(&unset, GIB);
	struct kvc_reserve_state st;
	cr_assert_eq(kvc_reserve_state(&unset, &st), -ENODEV);
	kvc_reserve_destroy(&unset);

	fake.free_bytes = 0;
	cr_assert_eq(kvc_reserve_init(&r, -1, 0, KVC_RESERVE_DATA, &fake_ops), 0);
	cr_assert_eq(kvc_reserve_admit(&r, GIB), 0);
	kvc_reserve_done(&r, GIB);
	cr_assert_eq(fake.looks, 1, "no reserve, no looks");
	cr_assert_eq(kvc_reserve_state(&r, &st), 0);
	cr_assert_not(st.refusing);
}

Test(reserve, init_fails_when_the_volume_cannot_be_looked_at)
{
	fake.fail = -EACCES;
	cr_assert_eq(kvc_reserve_init(&r, -1, KVC_RESERVE_AUTO, KVC_RESERVE_DATA, &fake_ops),
	             -EACCES);
	cr_assert_eq(kvc_reserve_admit(&r, GIB), 0, "a reserve never set up refuses nothing");
	/* The real volume: a directory that is there. */
	int fd = open("/tmp", O_RDONLY | O_DIRECTORY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(kvc_reserve_init(&r, fd, KVC_RESERVE_AUTO, KVC_RESERVE_DATA, NULL), 0);
	cr_assert_gt(r.total_bytes, 0);
	cr_assert_leq(r.reserve_bytes, GIB);
	cr_assert_eq(r.reserve_bytes, kvc_reserve_auto_bytes(KVC_RESERVE_DATA, r.total_bytes));
	kvc_reserve_destroy(&r);
	close(fd);
}

/* The cluster file's keys: storage_reserve_mb (global) and [meta]
 * reserve_mb, "auto" by default, in MiB. text: the global lines, a NUL,
 * then the [meta] lines. */
static int parse(const char *text, struct kvc_config *config, char *err, size_t size)
{
	char full[512];
	snprintf(full, sizeof(full), "%s\n[meta]\naddress = 127.0.0.1:1\n%s\n"
	         "[storage s]\naddress = 127.0.0.1:2\ntarget = /t\n", text, text + strlen(text) + 1);
	return kvc_config_parse(full, "test", config, err, size);
}

Test(reserve, cluster_file_keys)
{
	static struct kvc_config config;
	char err[256];
	cr_assert_eq(parse("\0", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.storage_reserve_bytes, KVC_RESERVE_AUTO);
	cr_assert_eq(config.meta_reserve_bytes, KVC_RESERVE_AUTO);
	cr_assert_eq(parse("storage_reserve_mb = 64\0reserve_mb = 0", &config, err, sizeof(err)),
	             0, "%s", err);
	cr_assert_eq(config.storage_reserve_bytes, 64 * MIB);
	cr_assert_eq(config.meta_reserve_bytes, 0);
	cr_assert_eq(parse("storage_reserve_mb = auto\0reserve_mb = 3", &config, err, sizeof(err)),
	             0, "%s", err);
	cr_assert_eq(config.storage_reserve_bytes, KVC_RESERVE_AUTO);
	cr_assert_eq(config.meta_reserve_bytes, 3 * MIB);
	cr_assert_eq(parse("storage_reserve_mb = 1G\0", &config, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "test:1: storage_reserve_mb must be auto or a size in MiB"), "%s", err);
	cr_assert_eq(parse("\0reserve_mb = -1", &config, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "reserve_mb must be auto"), "%s", err);
	cr_assert_eq(parse("reserve_mb = 1\0", &config, err, sizeof(err)), -EINVAL,
	             "reserve_mb belongs to [meta]");
}

/* The chunk store at its reserve: writes refused before anything is
 * written, everything that frees space served. */
static char dir[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store;

static void store_setup(void)
{
	setup();
	kvc_test_dir_make(dir, "reserve");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
}

static void store_teardown(void)
{
	kvc_chunk_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(store, .init = store_setup, .fini = store_teardown);

static int write_chunk(uint64_t inode, uint32_t chunk, uint32_t length)
{
	static uint8_t data[1 << 20];
	uint64_t version;
	uint32_t chunk_length;
	memset(data, 0x5a, length);
	return kvc_chunk_store_write(store, inode, chunk, 1 << 20, 0, data, length, &version,
	                             &chunk_length);
}

Test(store, no_reserve_until_one_is_set)
{
	struct kvc_chunk_space space;
	cr_assert_eq(write_chunk(1, 0, 4096), 0);
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_eq(space.reserve_bytes, 0);
	cr_assert_not(space.refusing);
	cr_assert_eq(space.available_bytes, space.free_bytes);
}

Test(store, refuses_data_at_the_reserve_and_still_frees)
{
	struct kvc_chunk_space space;
	cr_assert_eq(kvc_chunk_store_set_reserve(store, 8 * MIB, &fake_ops), 0);
	for (uint32_t c = 0; c < 4; c++)
		cr_assert_eq(write_chunk(7, c, 1 << 20), 0);
	/* The volume fills up to 8.5 MiB free: a 1 MiB write would go below. */
	fake.free_bytes = 8 * MIB + 512 * 1024;
	fake.now += 100 * MS;
	cr_assert_eq(write_chunk(7, 4, 1 << 20), -ENOSPC);
	cr_assert_eq(write_chunk(8, 0, 1 << 20), -ENOSPC);
	cr_assert_eq(write_chunk(8, 0, 256 * 1024), 0, "what fits above the reserve is taken");
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_eq(space.chunks, 5, "a refused write makes no chunk");
	cr_assert(space.refusing, "a write as large as the last refused one is refused");
	cr_assert_eq(space.reserve_bytes, 8 * MIB);
	cr_assert_eq(space.free_bytes, 8 * MIB + 512 * 1024);
	cr_assert_eq(space.available_bytes, 512 * 1024);
	cr_assert_eq(space.refused_writes, 2);
	cr_assert_eq(write_chunk(8, 1, 128 * 1024), 0);
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert(space.refusing, "a smaller write taken: still full for 1 MiB");
	fake.free_bytes = 9 * MIB;
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_not(space.refusing, "room for 1 MiB again");
	fake.free_bytes = 8 * MIB;
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert(space.refusing);

	/* Deleting never asks the reserve. */
	cr_assert_eq(kvc_chunk_store_truncate(store, 7, 3 << 20, 1 << 20), 1);
	cr_assert_eq(kvc_chunk_store_punch(store, 7, 1, 1), 1);
	cr_assert_eq(kvc_chunk_store_remove(store, 7), 2);
	cr_assert_eq(kvc_chunk_store_remove(store, 8), 2);
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_eq(space.chunks, 0);

	/* Space back: writes work again. */
	fake.free_bytes = 40 * MIB;
	fake.now += 100 * MS;
	cr_assert_eq(write_chunk(7, 0, 1 << 20), 0);
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_not(space.refusing);
	cr_assert_eq(space.refused_writes, 2);
}

/* The blocks a chunk's file takes on disk. */
static long long file_blocks(uint64_t inode, uint32_t chunk)
{
	char path[160];
	struct stat st;
	snprintf(path, sizeof(path), "%s/chunks/%02x/%016llx.%08x", dir, (unsigned)(inode & 0xff),
	         (unsigned long long)inode, chunk);
	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (long long)st.st_blocks;
}

Test(store, zeros_take_no_space_and_pass_the_reserve)
{
	/* The edges of a punch that is not chunk-aligned are writes of zeros:
	 * at the reserve they must still go through, and free space. */
	static uint8_t zeros[1 << 20], back[1 << 20];
	struct kvc_chunk_ring ring;
	uint64_t version;
	uint32_t length;
	cr_assert_eq(kvc_chunk_ring_init(&ring, 8), 0);
	cr_assert_eq(kvc_chunk_store_set_reserve(store, 8 * MIB, &fake_ops), 0);
	cr_assert_eq(write_chunk(9, 0, 1 << 20), 0);
	long long full_blocks = file_blocks(9, 0);
	fake.free_bytes = 8 * MIB;
	fake.now += 100 * MS;
	cr_assert_eq(write_chunk(9, 1, 4096), -ENOSPC);
	cr_assert_eq(kvc_chunk_store_write(store, 9, 0, 1 << 20, 256 * 1024, zeros, 512 * 1024,
	                                   &version, &length), 0);
	cr_assert_eq(length, 1 << 20);
	cr_assert_lt(file_blocks(9, 0), full_blocks, "punched, not written");
	/* Zeros past the end extend the chunk sparsely; a new chunk of zeros
	 * is a record and a hole. */
	cr_assert_eq(kvc_chunk_store_write(store, 9, 2, 1 << 20, 4096, zeros, 8192, &version,
	                                   &length), 0);
	cr_assert_eq(length, 12288);
	cr_assert_eq(file_blocks(9, 2), 0);

	struct kvc_chunk_read r[2] = {
		{.inode = 9, .chunk = 0, .offset = 0, .length = 1 << 20},
		{.inode = 9, .chunk = 2, .offset = 0, .length = 12288},
	};
	struct kvc_chunk_store *stores[2] = {store, store};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, r, 2), 0);
	cr_assert_eq(r[0].status, 0, "the crcs match the punched bytes");
	cr_assert_eq(r[0].present, 1 << 20);
	memcpy(back, r[0].data, r[0].present);
	cr_assert_eq(r[1].status, 0);
	cr_assert(r[1].present == 0 || memcmp(r[1].data, zeros, r[1].present) == 0);
	kvc_chunk_store_read_release(r, 2);
	for (uint32_t i = 0; i < (1u << 20); i++)
		cr_assert_eq(back[i], i >= 256 * 1024 && i < 768 * 1024 ? 0 : 0x5a, "byte %u", i);
	kvc_chunk_ring_exit(&ring);
}
