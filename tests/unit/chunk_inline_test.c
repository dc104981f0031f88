/* Unit tests of inline chunks (storage/chunk_inline.c): chunks that end at
 * or below the store's inline limit live in their index record and have no
 * file. Round trips of random writes against a model, the move to a file
 * past the limit, punch / truncate / remove, crc checks of the record's
 * bytes (corrupted through LMDB directly), reopening, batches mixing
 * inline, file-backed and missing chunks, the limit at 0, the cluster
 * file's storage_inline_kb, the reserve of a full volume, threads
 * writing at once (the group commit), the records writes leave (bytes and
 * block crcs, through the record parse) and a batch rerun after a failure. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/crc32c.h"
#include "core/lmdb_group.h"
#include "storage/chunk_store.h"
#include "storage/chunk_store_internal.h"
#include "test_dir.h"

#define CS (1u << 20)
#define IMAX KVC_CHUNK_INLINE_DEFAULT

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store;
static struct kvc_chunk_ring ring;

static void setup(void)
{
	kvc_test_dir_make(dir, "inline");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	cr_assert_eq(kvc_chunk_ring_init(&ring, 64), 0);
}

static void teardown(void)
{
	kvc_chunk_store_close(store);
	kvc_chunk_ring_exit(&ring);
	kvc_test_dir_remove(dir);
}

TestSuite(chunk_inline, .init = setup, .fini = teardown, .timeout = 60);

static uint32_t next_random(uint32_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 17;
	*state ^= *state << 5;
	return *state;
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seed + i * 13 + (i >> 10));
}

/* Chunk files under the target (every chunks/XX directory). */
static int chunk_files(void)
{
	char path[128];
	int count = 0;
	for (int i = 0; i < 256; i++) {
		snprintf(path, sizeof(path), "%s/chunks/%02x", dir, i);
		DIR *d = opendir(path);
		cr_assert_not_null(d, "%s", path);
		for (struct dirent *e; (e = readdir(d));)
			count += e->d_name[0] != '.';
		closedir(d);
	}
	return count;
}

static bool chunk_file_exists(uint64_t inode, uint32_t chunk)
{
	char path[256];
	struct stat st;
	snprintf(path, sizeof(path), "%s/chunks/%02x/%016llx.%08x", dir, (unsigned)(inode & 0xff),
	         (unsigned long long)inode, chunk);
	return stat(path, &st) == 0;
}

/* Read one range; returns status, fills out (holes as zeros). */
static int read_range(uint64_t inode, uint32_t chunk, uint32_t off, uint32_t len, uint8_t *out)
{
	struct kvc_chunk_read r = {.inode = inode, .chunk = chunk, .offset = off, .length = len};
	cr_assert_eq(kvc_chunk_store_read_batch(&store, &ring, &r, 1), 0);
	if (r.status == 0) {
		if (r.present)
			memcpy(out, r.data, r.present);
		memset(out + r.present, 0, len - r.present);
	}
	kvc_chunk_store_read_release(&r, 1);
	return r.status;
}

static void write_ok(uint64_t inode, uint32_t chunk, uint32_t off, const uint8_t *data,
                     uint32_t len, uint32_t expect_length)
{
	uint64_t version;
	uint32_t length;
	cr_assert_eq(kvc_chunk_store_write(store, inode, chunk, CS, off, data, len, &version,
	                                   &length), 0, "write of %u at %u", len, off);
	cr_assert_eq(length, expect_length);
}

static void expect_chunk(uint64_t inode, uint32_t chunk, const uint8_t *model, uint32_t len)
{
	static uint8_t back[CS];
	cr_assert_eq(read_range(inode, chunk, 0, len, back), 0);
	cr_assert_eq(memcmp(back, model, len), 0, "inode %llu chunk %u", (unsigned long long)inode,
	             chunk);
}

Test(chunk_inline, random_writes_and_reads_round_trip)
{
	static uint8_t model[4][IMAX], data[IMAX], back[IMAX];
	uint32_t lengths[4] = {0}, seed = 12345;
	for (int op = 0; op < 400; op++) {
		uint32_t c = next_random(&seed) % 4;
		uint32_t off = next_random(&seed) % IMAX;
		uint32_t len = 1 + next_random(&seed) % (IMAX - off);
		fill(data, len, (unsigned)op);
		memcpy(model[c] + off, data, len);
		if (off + len > lengths[c])
			lengths[c] = off + len;
		write_ok(7, c, off, data, len, lengths[c]);
		/* a random range of a random chunk, past its end too */
		uint32_t rc = next_random(&seed) % 4;
		uint32_t roff = next_random(&seed) % IMAX;
		uint32_t rlen = 1 + next_random(&seed) % (IMAX - roff);
		cr_assert_eq(read_range(7, rc, roff, rlen, back), 0);
		cr_assert_eq(memcmp(back, model[rc] + roff, rlen), 0, "op %d: chunk %u [%u, +%u)", op,
		             rc, roff, rlen);
	}
	for (uint32_t c = 0; c < 4; c++)
		expect_chunk(7, c, model[c], IMAX);
	cr_assert_eq(chunk_files(), 0, "inline chunks have no file");
	struct kvc_chunk_space space;
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_eq(space.chunks, 4);
}

Test(chunk_inline, growth_past_the_limit_moves_the_chunk_to_a_file)
{
	static uint8_t model[CS], data[CS];
	uint64_t version;
	uint32_t length;
	/* a gap of zeros first: it stays a hole in the file */
	fill(data, IMAX, 1);
	cr_assert_eq(kvc_chunk_store_write(store, 9, 2, CS, 40000, data, IMAX - 40000, &version,
	                                   &length), 0);
	memcpy(model + 40000, data, IMAX - 40000);
	cr_assert_eq(version, 1);
	cr_assert_eq(length, IMAX);
	cr_assert_not(chunk_file_exists(9, 2), "inline at exactly the limit");
	expect_chunk(9, 2, model, IMAX);
	cr_assert_eq(kvc_chunk_store_write(store, 9, 2, CS, 100, data, 1000, &version, &length), 0);
	memcpy(model + 100, data, 1000);
	cr_assert_eq(version, 2);
	cr_assert_not(chunk_file_exists(9, 2));
	/* one byte past the limit, and the bytes before it are what they were */
	fill(data, 70000, 2);
	cr_assert_eq(kvc_chunk_store_write(store, 9, 2, CS, IMAX - 5000, data, 5001, &version,
	                                   &length), 0);
	memcpy(model + IMAX - 5000, data, 5001);
	cr_assert_eq(version, 3);
	cr_assert_eq(length, IMAX + 1);
	cr_assert(chunk_file_exists(9, 2), "past the limit: a file");
	expect_chunk(9, 2, model, CS);
	struct stat st;
	char path[256];
	snprintf(path, sizeof(path), "%s/chunks/09/%016x.%08x", dir, 9, 2);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_size, IMAX + 1);
	/* it stays a file, even for a write inside the limit */
	cr_assert_eq(kvc_chunk_store_write(store, 9, 2, CS, 0, data, 10, &version, &length), 0);
	memcpy(model, data, 10);
	cr_assert(chunk_file_exists(9, 2));
	expect_chunk(9, 2, model, CS);
	uint32_t chunk, len;
	cr_assert_eq(kvc_chunk_store_last(store, 9, &chunk, &len), 1);
	cr_assert_eq(len, IMAX + 1);
	/* a first write past the limit goes straight to a file */
	fill(data, CS, 3);
	write_ok(9, 3, 0, data, CS, CS);
	cr_assert(chunk_file_exists(9, 3));
	expect_chunk(9, 3, data, CS);
}

Test(chunk_inline, truncate_punch_and_remove_of_inline_chunks)
{
	static uint8_t data[IMAX], back[IMAX];
	uint32_t chunk, len;
	fill(data, IMAX, 4);
	for (uint32_t c = 0; c < 5; c++)
		write_ok(11, c, 0, data, 50000, 50000);
	write_ok(12, 0, 0, data, 300, 300);
	/* truncate into chunk 3 at 20000 + 7: chunk 3 shortened, chunk 4 gone */
	cr_assert_eq(kvc_chunk_store_truncate(store, 11, 3ull * CS + 20007, CS), 2);
	cr_assert_eq(kvc_chunk_store_last(store, 11, &chunk, &len), 1);
	cr_assert_eq(chunk, 3);
	cr_assert_eq(len, 20007);
	cr_assert_eq(read_range(11, 3, 0, IMAX, back), 0);
	cr_assert_eq(memcmp(back, data, 20007), 0);
	for (uint32_t i = 20007; i < IMAX; i++)
		cr_assert_eq(back[i], 0, "byte %u past the cut", i);
	/* growing it again: the cut bytes do not come back */
	write_ok(11, 3, 30000, data, 10, 30010);
	cr_assert_eq(read_range(11, 3, 20000, 10010, back), 0);
	cr_assert_eq(memcmp(back, data + 20000, 7), 0);
	for (uint32_t i = 7; i < 10000; i++)
		cr_assert_eq(back[i], 0);
	cr_assert_eq(memcmp(back + 10000, data, 10), 0);
	/* truncate at a block boundary */
	cr_assert_eq(kvc_chunk_store_truncate(store, 11, 3ull * CS + 16384, CS), 1);
	cr_assert_eq(kvc_chunk_store_last(store, 11, &chunk, &len), 1);
	cr_assert_eq(len, 16384);
	expect_chunk(11, 3, data, 16384);
	/* punch chunks 1 and 2 */
	cr_assert_eq(kvc_chunk_store_punch(store, 11, 1, 2), 2);
	cr_assert_eq(read_range(11, 1, 0, IMAX, back), 0);
	for (uint32_t i = 0; i < IMAX; i++)
		cr_assert_eq(back[i], 0, "a punched inline chunk is a hole");
	expect_chunk(11, 0, data, 50000);
	cr_assert_eq(kvc_chunk_store_remove(store, 11), 2);
	cr_assert_eq(kvc_chunk_store_last(store, 11, &chunk, &len), 0);
	cr_assert_eq(kvc_chunk_store_last(store, 12, &chunk, &len), 1, "the neighbour stays");
	cr_assert_eq(chunk_files(), 0);
}

Test(chunk_inline, zeros_into_a_missing_chunk_take_a_sparse_file)
{
	static uint8_t zeros[20000], data[1000], back[30000];
	fill(data, sizeof(data), 5);
	write_ok(13, 0, 5000, zeros, sizeof(zeros), 25000);
	cr_assert(chunk_file_exists(13, 0), "zeros take no space: a sparse file, not a record");
	/* zeros into an inline chunk stay in its record */
	write_ok(13, 1, 0, data, sizeof(data), 1000);
	write_ok(13, 1, 500, zeros, 300, 1000);
	cr_assert_not(chunk_file_exists(13, 1));
	cr_assert_eq(read_range(13, 1, 0, 1000, back), 0);
	cr_assert_eq(memcmp(back, data, 500), 0);
	for (int i = 500; i < 800; i++)
		cr_assert_eq(back[i], 0);
	cr_assert_eq(memcmp(back + 800, data + 800, 200), 0);
}

/* Flip one byte of an inline record's data (at `at`) through LMDB
 * directly, with the store closed. */
static void corrupt_record(uint64_t inode, uint32_t chunk, uint32_t at)
{
	char path[128];
	uint8_t key[12];
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val v;
	kvc_chunk_store_close(store);
	store = NULL;
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)(inode >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		key[8 + i] = (uint8_t)(chunk >> (24 - 8 * i));
	MDB_val k = {sizeof(key), key};
	snprintf(path, sizeof(path), "%s/index", dir);
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 1ull << 40), 0);
	cr_assert_eq(mdb_env_open(env, path, 0, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
	cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
	uint8_t *copy = malloc(v.mv_size);
	memcpy(copy, v.mv_data, v.mv_size);
	uint32_t magic, blocks;
	memcpy(&magic, copy, 4);
	memcpy(&blocks, copy + 20, 4);
	cr_assert_eq(magic, KVC_CHUNK_RECORD_INLINE_MAGIC);
	copy[24 + 4 * blocks + at] ^= 0x40;
	MDB_val nv = {v.mv_size, copy};
	cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	free(copy);
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
}

Test(chunk_inline, a_corrupted_record_reads_as_eio)
{
	static uint8_t data[IMAX], back[IMAX];
	uint64_t version;
	uint32_t length;
	fill(data, IMAX, 6);
	write_ok(0x77, 1, 0, data, 60000, 60000);
	write_ok(0x77, 2, 0, data, 60000, 60000);
	corrupt_record(0x77, 1, 40000); /* block 2 */
	corrupt_record(0x77, 2, 59990); /* block 3, the short last one */
	cr_assert_eq(read_range(0x77, 1, 0, 60000, back), -EIO);
	cr_assert_eq(read_range(0x77, 1, 39000, 2000, back), -EIO);
	/* blocks away from the damage still verify and read */
	cr_assert_eq(read_range(0x77, 1, 0, 32768, back), 0);
	cr_assert_eq(memcmp(back, data, 32768), 0);
	cr_assert_eq(read_range(0x77, 1, 49152, 10848, back), 0);
	cr_assert_eq(memcmp(back, data + 49152, 10848), 0);
	/* a write that keeps the bad block's other bytes is refused */
	cr_assert_eq(kvc_chunk_store_write(store, 0x77, 1, CS, 40010, data, 10, &version, &length),
	             -EIO);
	/* one that covers the whole block replaces it */
	write_ok(0x77, 1, 32768, data + 32768, 16384, 60000);
	expect_chunk(0x77, 1, data, 60000);
	/* moving a bad chunk to a file is refused too: its bytes would be vouched for */
	cr_assert_eq(kvc_chunk_store_write(store, 0x77, 2, CS, 60000, data, 10000, &version,
	                                   &length), -EIO);
	cr_assert_not(chunk_file_exists(0x77, 2));
	/* a truncate still goes through, and the cut block keeps failing */
	cr_assert_eq(kvc_chunk_store_truncate(store, 0x77, 2ull * CS + 59000, CS), 1);
	cr_assert_eq(read_range(0x77, 2, 50000, 9000, back), -EIO);
	cr_assert_eq(read_range(0x77, 2, 0, 49152, back), 0);
	/* and removal always works */
	cr_assert_eq(kvc_chunk_store_remove(store, 0x77), 2);
}

Test(chunk_inline, inline_chunks_survive_reopen)
{
	static uint8_t data[IMAX];
	fill(data, IMAX, 7);
	write_ok(42, 7, 1000, data, 30000, 31000);
	write_ok(42, 8, 0, data, 1, 1);
	kvc_chunk_store_close(store);
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	static uint8_t model[31000];
	memcpy(model + 1000, data, 30000);
	expect_chunk(42, 7, model, 31000);
	expect_chunk(42, 8, data, 1);
	uint32_t chunk, len;
	cr_assert_eq(kvc_chunk_store_last(store, 42, &chunk, &len), 1);
	cr_assert_eq(chunk, 8);
	cr_assert_eq(len, 1);
	cr_assert_eq(chunk_files(), 0);
}

Test(chunk_inline, a_batch_mixes_inline_file_and_missing_chunks)
{
	static uint8_t big[CS], small[IMAX];
	struct kvc_chunk_ring four;
	struct kvc_chunk_read reads[10];
	struct kvc_chunk_store *stores[10];
	fill(big, CS, 8);
	fill(small, IMAX, 9);
	for (uint32_t c = 0; c < 10; c++) {
		if (c % 3 == 0)
			write_ok(31, c, 0, big, CS, CS);
		else if (c % 3 == 1)
			write_ok(31, c, 0, small, IMAX - c, IMAX - c);
		/* c % 3 == 2: missing */
		reads[c] = (struct kvc_chunk_read){.inode = 31, .chunk = c, .offset = c * 100,
		                                   .length = 50000};
		stores[c] = store;
	}
	cr_assert_eq(chunk_files(), 4, "chunks 0, 3, 6 and 9");
	cr_assert_eq(kvc_chunk_ring_init(&four, 4), 0); /* several rounds */
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &four, reads, 10), 0);
	for (uint32_t c = 0; c < 10; c++) {
		cr_assert_eq(reads[c].status, 0, "piece %u", c);
		cr_assert_eq(reads[c].present, c % 3 == 2 ? 0 : 50000, "piece %u", c);
		if (c % 3 != 2)
			cr_assert_eq(memcmp(reads[c].data, (c % 3 ? small : big) + c * 100, 50000), 0,
			             "piece %u", c);
	}
	/* no lock is held: the chunks can be written before the release */
	write_ok(31, 1, 0, big, 10, IMAX - 1);
	cr_assert_eq(memcmp(reads[1].data, small + 100, 50000), 0, "the checked bytes stay");
	kvc_chunk_store_read_release(reads, 10);
	kvc_chunk_ring_exit(&four);
}

Test(chunk_inline, a_limit_of_zero_keeps_every_chunk_in_a_file)
{
	static uint8_t data[IMAX], model[IMAX];
	fill(data, IMAX, 10);
	write_ok(51, 0, 0, data, 1000, 1000); /* inline, before the limit changes */
	cr_assert_eq(kvc_chunk_store_set_inline(store, 0), 0);
	write_ok(51, 1, 0, data, 10, 10);
	cr_assert(chunk_file_exists(51, 1), "no inline chunk");
	cr_assert_not(chunk_file_exists(51, 0));
	expect_chunk(51, 0, data, 1000); /* an inline record still reads */
	/* and moves to a file on its next write */
	write_ok(51, 0, 2000, data, 10, 2010);
	cr_assert(chunk_file_exists(51, 0));
	memcpy(model, data, 1000);
	memcpy(model + 2000, data, 10);
	expect_chunk(51, 0, model, 2010);
	cr_assert_eq(kvc_chunk_store_set_inline(store, KVC_CHUNK_INLINE_LIMIT + 1), -EINVAL);
	cr_assert_eq(kvc_chunk_store_set_inline(store, KVC_CHUNK_INLINE_LIMIT), 0);
	write_ok(51, 2, 0, data, IMAX, IMAX);
	write_ok(51, 2, IMAX, data, IMAX, 2 * IMAX);
	cr_assert_not(chunk_file_exists(51, 2), "inline up to the largest limit");
	cr_assert_eq(chunk_files(), 2);
}

Test(chunk_inline, a_stale_file_is_started_anew_by_the_move)
{
	/* A removal cut short left a file; the chunk then became inline. */
	static uint8_t junk[CS], data[IMAX], back[CS];
	char path[256];
	memset(junk, 0xab, sizeof(junk));
	snprintf(path, sizeof(path), "%s/chunks/%02x/%016x.%08x", dir, 0x31, 0x31, 4);
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	fill(data, IMAX, 11);
	write_ok(0x31, 4, 20000, data, 1000, 21000);
	cr_assert_eq(read_range(0x31, 4, 0, 30000, back), 0);
	for (uint32_t i = 0; i < 20000; i++)
		cr_assert_eq(back[i], 0, "byte %u of the old file came back", i);
	write_ok(0x31, 4, 100000, data, 10, 100010); /* moves to the file */
	cr_assert_eq(read_range(0x31, 4, 0, 100010, back), 0);
	for (uint32_t i = 0; i < 100000; i++)
		cr_assert_eq(back[i], i >= 20000 && i < 21000 ? data[i - 20000] : 0, "byte %u", i);
	cr_assert_eq(memcmp(back + 100000, data, 10), 0);
}

/* The cluster file's storage_inline_kb (global, KiB, 0 to 256; absent: the
 * chunk store's default). */
static int parse(const char *line, struct kvc_config *config, char *err, size_t size)
{
	char full[512];
	snprintf(full, sizeof(full), "%s\n[meta]\naddress = 127.0.0.1:1\n"
	         "[storage s]\naddress = 127.0.0.1:2\ntarget = /t\n", line);
	return kvc_config_parse(full, "test", config, err, size);
}

Test(chunk_inline, cluster_file_key)
{
	static struct kvc_config config;
	char err[256];
	cr_assert_eq(parse("", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.storage_inline_bytes, -1);
	cr_assert_eq(parse("storage_inline_kb = 128", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.storage_inline_bytes, 128 << 10);
	cr_assert_eq(kvc_chunk_store_set_inline(store, (uint32_t)config.storage_inline_bytes), 0);
	cr_assert_eq(parse("storage_inline_kb = 0", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.storage_inline_bytes, 0);
	cr_assert_eq(parse("storage_inline_kb = 257", &config, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "test:1: storage_inline_kb"), "%s", err);
	cr_assert_eq(parse("storage_inline_kb = 64K", &config, err, sizeof(err)), -EINVAL);
	cr_assert_eq((256u << 10), KVC_CHUNK_INLINE_LIMIT, "the key's bound is the store's");
}

/* A volume at its reserve (core/reserve.h's seam): inline writes of data
 * are refused like a file's, zeros into an inline chunk and everything
 * that frees go through. */
static uint64_t fake_free;
static int fake_stat(void *arg, uint64_t *total, uint64_t *free_bytes)
{
	(void)arg;
	*total = 1ull << 30;
	*free_bytes = fake_free;
	return 0;
}

static uint64_t fake_now(void *arg)
{
	(void)arg;
	return 0;
}

Test(chunk_inline, the_reserve_refuses_inline_data_and_never_frees)
{
	static const struct kvc_reserve_ops ops = {fake_stat, fake_now, NULL};
	static uint8_t data[IMAX], zeros[1000], back[IMAX];
	uint64_t version;
	uint32_t length, chunk, len;
	fake_free = 100u << 20;
	cr_assert_eq(kvc_chunk_store_set_reserve(store, 8 << 20, &ops), 0);
	fill(data, IMAX, 12);
	write_ok(61, 0, 0, data, 50000, 50000);
	write_ok(61, 1, 0, data, 50000, 50000);
	fake_free = 8u << 20; /* the volume is full: a fresh look at it */
	cr_assert_eq(kvc_chunk_store_set_reserve(store, 8 << 20, &ops), 0);
	cr_assert_eq(kvc_chunk_store_write(store, 61, 2, CS, 0, data, 100, &version, &length),
	             -ENOSPC, "a new inline chunk");
	cr_assert_eq(kvc_chunk_store_write(store, 61, 0, CS, 10, data, 100, &version, &length),
	             -ENOSPC, "an inline rewrite");
	expect_chunk(61, 0, data, 50000); /* untouched */
	write_ok(61, 0, 10, zeros, sizeof(zeros), 50000); /* a punch's edge */
	cr_assert_eq(read_range(61, 0, 0, 2000, back), 0);
	cr_assert_eq(memcmp(back, data, 10), 0);
	for (int i = 10; i < 1010; i++)
		cr_assert_eq(back[i], 0);
	cr_assert_eq(kvc_chunk_store_truncate(store, 61, 1000, CS), 2, "chunk 0 cut, 1 gone");
	cr_assert_eq(kvc_chunk_store_last(store, 61, &chunk, &len), 1);
	cr_assert_eq(len, 1000);
	cr_assert_eq(kvc_chunk_store_remove(store, 61), 1);
	struct kvc_chunk_space space;
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_eq(space.chunks, 0);
	cr_assert_eq(space.refused_writes, 2);
}

/* Threads writing at once share the index's transactions (the group
 * commit): each gets its own answer (length, a version that grows per
 * chunk), some chunks grow past the limit into files meanwhile, and every
 * chunk reads back as its thread's model. */
#define WRITERS 8
#define WRITER_CHUNKS 4
static uint8_t writer_model[WRITERS][WRITER_CHUNKS][2 * IMAX];
static uint32_t writer_length[WRITERS][WRITER_CHUNKS];
static atomic_int writer_failures;

static void *writer(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint32_t seed = 777u + (uint32_t)id;
	uint64_t last_version[WRITER_CHUNKS] = {0};
	static _Thread_local uint8_t data[2 * IMAX];
	for (int op = 0; op < 300; op++) {
		uint32_t c = next_random(&seed) % WRITER_CHUNKS;
		/* chunk 3 of every inode may pass the limit; the others not */
		uint32_t span = c == 3 ? 2 * IMAX : IMAX;
		uint32_t off = next_random(&seed) % span;
		uint32_t len = 1 + next_random(&seed) % (span - off);
		fill(data, len, (unsigned)(op * WRITERS + id));
		memcpy(writer_model[id][c] + off, data, len);
		if (off + len > writer_length[id][c])
			writer_length[id][c] = off + len;
		uint64_t version;
		uint32_t length;
		int rc = kvc_chunk_store_write(store, 100 + (uint64_t)id, c, CS, off, data, len,
		                               &version, &length);
		if (rc != 0 || length != writer_length[id][c] || version <= last_version[c])
			atomic_fetch_add(&writer_failures, 1);
		last_version[c] = version;
	}
	return NULL;
}

Test(chunk_inline, concurrent_writes_share_transactions_and_get_their_own_answers)
{
	pthread_t threads[WRITERS];
	for (int t = 0; t < WRITERS; t++)
		cr_assert_eq(pthread_create(&threads[t], NULL, writer, (void *)(intptr_t)t), 0);
	for (int t = 0; t < WRITERS; t++)
		pthread_join(threads[t], NULL);
	cr_assert_eq(atomic_load(&writer_failures), 0);
	for (int t = 0; t < WRITERS; t++)
		for (uint32_t c = 0; c < WRITER_CHUNKS; c++) {
			expect_chunk(100 + (uint64_t)t, c, writer_model[t][c], writer_length[t][c]);
			cr_assert_eq(chunk_file_exists(100 + (uint64_t)t, c),
			             writer_length[t][c] > IMAX, "thread %d chunk %u", t, c);
		}
}

/* An inline chunk's record as the index holds it (the record parse)
 * against its model: its bytes, a crc per block of them, the chunk crc
 * over those, its version; and the bytes through the read API. */
static void expect_record(uint64_t inode, uint32_t chunk, const uint8_t *model, uint32_t len,
                          uint64_t version)
{
	MDB_txn *txn;
	struct kvc_chunk_record rec;
	const uint8_t *bytes = NULL;
	cr_assert_eq(mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn), 0);
	int found = kvc_chunk_record_get(txn, store->dbi, inode, chunk, &rec, &bytes);
	bool same = found == 1 && bytes && rec.length == len && memcmp(bytes, model, len) == 0;
	mdb_txn_abort(txn);
	cr_assert(same, "inode %llu chunk %u: found %d", (unsigned long long)inode, chunk, found);
	cr_assert(kvc_chunk_record_inline(&rec));
	cr_assert_eq(rec.version, version, "chunk %u", chunk);
	cr_assert_eq(rec.block_count, kvc_chunk_blocks(len));
	for (uint32_t b = 0; b < rec.block_count; b++)
		cr_assert_eq(rec.block_crc[b], kvc_crc32c(0, model + b * KVC_CHUNK_BLOCK,
		                                          kvc_chunk_block_bytes(len, b)),
		             "chunk %u block %u", chunk, b);
	cr_assert_eq(rec.chunk_crc, kvc_chunk_record_crc(&rec));
	expect_chunk(inode, chunk, model, len);
}

#define BLK KVC_CHUNK_BLOCK

Test(chunk_inline, a_new_chunk_written_whole_has_its_bytes_and_block_crcs)
{
	static uint8_t data[IMAX];
	uint32_t lengths[] = {IMAX, 3 * BLK + 1000, BLK, 1};
	fill(data, IMAX, 20);
	for (uint32_t c = 0; c < 4; c++) {
		write_ok(71, c, 0, data, lengths[c], lengths[c]);
		expect_record(71, c, data, lengths[c], 1);
	}
	cr_assert_eq(chunk_files(), 0);
}

Test(chunk_inline, a_new_chunk_written_at_an_offset_starts_with_zeros)
{
	static uint8_t data[IMAX], model[IMAX];
	/* zeros then a block partly, a whole one and a short end; a whole
	 * block of zeros then whole blocks; zeros up to the limit's last
	 * bytes; one block partly and the next's first bytes */
	const uint32_t writes[][2] = {{20000, 30000}, {BLK, 2 * BLK}, {IMAX - 10, 10}, {5, BLK}};
	fill(data, IMAX, 21);
	for (uint32_t c = 0; c < 4; c++) {
		uint32_t off = writes[c][0], len = writes[c][1];
		memset(model, 0, IMAX);
		memcpy(model + off, data, len);
		write_ok(72, c, off, data, len, off + len);
		expect_record(72, c, model, off + len, 1);
	}
}

Test(chunk_inline, a_write_over_whole_and_partial_blocks_of_an_existing_chunk)
{
	static uint8_t data[IMAX], model[IMAX], zeros[IMAX];
	/* offset, length, seed: each changes the chunk the one before left */
	const uint32_t writes[][3] = {
		{0, 60000, 1},               /* new, a short last block */
		{10000, 30000, 2},           /* partly, whole, partly: all within */
		{0, 20000, 3},               /* whole, then partly: the chunk goes on */
		{49152, IMAX - 49152, 4},    /* the short last block made whole */
		{IMAX - 100, 100, 5},        /* the end of the last block */
	};
	uint64_t version = 0;
	for (uint32_t i = 0; i < 5; i++) {
		fill(data, writes[i][1], writes[i][2]);
		memcpy(model + writes[i][0], data, writes[i][1]);
		uint32_t len = i < 3 ? 60000 : IMAX;
		write_ok(73, 0, writes[i][0], data, writes[i][1], len);
		expect_record(73, 0, model, len, ++version);
	}
	/* zeros over a whole block and part of the next */
	write_ok(73, 0, BLK, zeros, BLK + 10, IMAX);
	memset(model + BLK, 0, BLK + 10);
	expect_record(73, 0, model, IMAX, ++version);
	/* shortened, then written from inside its last block past its old
	 * end: that block is given whole, the next ones too, then a short end */
	cr_assert_eq(kvc_chunk_store_truncate(store, 73, 20000, CS), 1);
	memset(model + 20000, 0, IMAX - 20000);
	fill(data, 40000, 6);
	write_ok(73, 0, BLK, data, 40000, BLK + 40000);
	memcpy(model + BLK, data, 40000);
	expect_record(73, 0, model, BLK + 40000, version += 2);
	/* past the end with a gap: the old short block gets zeros, then bytes */
	fill(data, 3000, 7);
	write_ok(73, 0, BLK + 42000, data, 3000, BLK + 45000);
	memcpy(model + BLK + 42000, data, 3000);
	expect_record(73, 0, model, BLK + 45000, ++version);
}

Test(chunk_inline, a_write_keeping_part_of_a_bad_block_changes_nothing)
{
	static uint8_t data[IMAX], other[IMAX], model[IMAX], back[IMAX];
	uint64_t version;
	uint32_t length;
	fill(data, IMAX, 22);
	fill(other, IMAX, 23);
	write_ok(0x78, 0, 0, data, IMAX, IMAX);
	corrupt_record(0x78, 0, 2 * BLK + 5); /* block 2 */
	/* block 1 whole and the bad block 2 partly; the bad block from inside
	 * to its end and block 3 whole: both refused, nothing changes */
	cr_assert_eq(kvc_chunk_store_write(store, 0x78, 0, CS, BLK, other, BLK + 100, &version,
	                                   &length), -EIO);
	cr_assert_eq(kvc_chunk_store_write(store, 0x78, 0, CS, 2 * BLK + 100, other, 2 * BLK - 100,
	                                   &version, &length), -EIO);
	cr_assert_eq(read_range(0x78, 0, 0, 2 * BLK, back), 0);
	cr_assert_eq(memcmp(back, data, 2 * BLK), 0);
	cr_assert_eq(read_range(0x78, 0, 3 * BLK, BLK, back), 0);
	cr_assert_eq(memcmp(back, data + 3 * BLK, BLK), 0);
	cr_assert_eq(read_range(0x78, 0, 2 * BLK, 100, back), -EIO);
	/* block 1 partly and the bad block 2 whole: replaced */
	write_ok(0x78, 0, BLK + 100, other, 2 * BLK - 100, IMAX);
	memcpy(model, data, IMAX);
	memcpy(model + BLK + 100, other, 2 * BLK - 100);
	expect_record(0x78, 0, model, IMAX, 2);
}

/* A batch of inline writes with one that fails (-EIO): the group runs it
 * again nested (lmdb_group.h), and the others' records are as if each
 * had run once: their crcs, computed before the transaction, are still
 * theirs the second time, and each answer is set afresh. The group is
 * held in a transaction of its own until they all wait behind it (seen
 * in the group's queue: its tail moves when a call joins). */
static kvc_lmdb_group_begin_fn store_begin;
static atomic_int begins;
static atomic_bool gate_open;
static int gate_rc;

static int counting_begin(void *owner, MDB_txn **txn)
{
	atomic_fetch_add(&begins, 1);
	return store_begin(owner, txn);
}

static int wait_for_gate(void *owner, MDB_txn *txn, void *arg)
{
	(void)owner;
	(void)txn;
	(void)arg;
	while (!atomic_load(&gate_open))
		usleep(1000);
	return 0;
}

static void *hold_group(void *arg)
{
	(void)arg;
	gate_rc = kvc_lmdb_group_run(&store->group, wait_for_gate, NULL);
	return NULL;
}

/* The group's queue tail, and whether a batch runs. */
static struct kvc_lmdb_group_call **group_state(bool *running)
{
	pthread_mutex_lock(&store->group.lock);
	struct kvc_lmdb_group_call **tail = store->group.tail;
	*running = store->group.running;
	pthread_mutex_unlock(&store->group.lock);
	return tail;
}

struct batch_write {
	uint32_t chunk, offset, length;
	int rc;
};
static uint8_t batch_data[IMAX];

static void *batch_writer(void *arg)
{
	struct batch_write *w = arg;
	uint64_t version;
	uint32_t length;
	w->rc = kvc_chunk_store_write(store, 81, w->chunk, CS, w->offset, batch_data, w->length,
	                              &version, &length);
	return NULL;
}

Test(chunk_inline, a_failing_write_reruns_its_batch_and_the_others_stay_whole)
{
	enum { N = 6 };
	static uint8_t old[IMAX], model[IMAX], back[IMAX];
	fill(old, IMAX, 24);
	fill(batch_data, IMAX, 25);
	write_ok(81, 0, 0, old, IMAX, IMAX);
	write_ok(81, 1, 0, old, IMAX, IMAX);
	corrupt_record(81, 1, 10); /* block 0 */
	struct batch_write w[N] = {
		{.chunk = 2, .offset = 0, .length = IMAX},     /* new, whole */
		{.chunk = 3, .offset = 20000, .length = 30000}, /* new, at an offset */
		{.chunk = 0, .offset = 10000, .length = 40000}, /* partly, whole, partly */
		{.chunk = 1, .offset = 100, .length = 100},     /* keeps part of a bad block */
		{.chunk = 4, .offset = 0, .length = 50000},     /* new, after the failure */
		{.chunk = 5, .offset = 0, .length = IMAX},
	};
	for (int i = 0; i < N; i++)
		for (int j = 0; j < i; j++) /* or one waits for another's chunk lock */
			cr_assert_neq(kvc_chunk_lock_slot(81, w[i].chunk),
			              kvc_chunk_lock_slot(81, w[j].chunk));
	store_begin = store->group.begin;
	store->group.begin = counting_begin;
	pthread_t holder, threads[N];
	bool running = false;
	pthread_create(&holder, NULL, hold_group, NULL);
	while (group_state(&running), !running) /* it leads, inside its transaction */
		usleep(1000);
	for (int i = 0; i < N; i++) { /* they wait in this order */
		struct kvc_lmdb_group_call **tail = group_state(&running);
		pthread_create(&threads[i], NULL, batch_writer, &w[i]);
		while (group_state(&running) == tail)
			usleep(1000);
	}
	int before = atomic_load(&begins);
	atomic_store(&gate_open, true);
	pthread_join(holder, NULL);
	for (int i = 0; i < N; i++)
		pthread_join(threads[i], NULL);
	cr_assert_eq(gate_rc, 0);
	for (int i = 0; i < N; i++)
		cr_assert_eq(w[i].rc, i == 3 ? -EIO : 0, "write %d: %d", i, w[i].rc);
	cr_assert_eq(atomic_load(&begins) - before, 2, "one batch, then its nested rerun");
	for (int i = 0; i < N; i++) {
		if (i == 3)
			continue;
		uint32_t c = w[i].chunk, len = c == 0 ? IMAX : w[i].offset + w[i].length;
		memset(model, 0, IMAX);
		if (c == 0)
			memcpy(model, old, IMAX);
		memcpy(model + w[i].offset, batch_data, w[i].length);
		expect_record(81, c, model, len, c == 0 ? 2 : 1);
	}
	/* the failed one left its chunk as it was */
	cr_assert_eq(read_range(81, 1, BLK, IMAX - BLK, back), 0);
	cr_assert_eq(memcmp(back, old + BLK, IMAX - BLK), 0);
	cr_assert_eq(read_range(81, 1, 0, 200, back), -EIO);
}
