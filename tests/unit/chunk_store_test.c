/* Unit tests of the chunk store: write/read/overwrite, holes, crc mismatch
 * detection, truncate, remove, last, and reopen from disk. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "storage/chunk_store.h"
#include "test_dir.h"

#define CS (1u << 20)

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store;
static struct kvc_chunk_ring ring;

static void setup(void)
{
	kvc_test_dir_make(dir, "chunk");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	cr_assert_eq(kvc_chunk_ring_init(&ring, 64), 0);
}

static void teardown(void)
{
	kvc_chunk_store_close(store);
	kvc_chunk_ring_exit(&ring);
	kvc_test_dir_remove(dir);
}

TestSuite(chunk_store, .init = setup, .fini = teardown);

/* Read one range; returns status, fills out (holes as zeros). */
static int read_range(uint64_t inode, uint32_t chunk, uint32_t off, uint32_t len, uint8_t *out)
{
	struct kvc_chunk_read r = {.inode = inode, .chunk = chunk, .offset = off, .length = len};
	cr_assert_eq(kvc_chunk_store_read_batch(&store, &ring, &r, 1), 0);
	if (r.status == 0) {
		if (r.present) /* a hole has no data pointer */
			memcpy(out, r.data, r.present);
		memset(out + r.present, 0, len - r.present);
	}
	kvc_chunk_store_read_release(&r, 1);
	return r.status;
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seed + i * 7 + (i >> 9));
}

Test(chunk_store, write_then_read_back)
{
	static uint8_t data[CS], back[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 1);
	cr_assert_eq(kvc_chunk_store_write(store, 5, 0, CS, 0, data, CS, &version, &length), 0);
	cr_assert_eq(version, 1);
	cr_assert_eq(length, CS);
	cr_assert_eq(read_range(5, 0, 0, CS, back), 0);
	cr_assert_eq(memcmp(data, back, CS), 0);
	/* an unaligned middle range */
	cr_assert_eq(read_range(5, 0, 12345, 70000, back), 0);
	cr_assert_eq(memcmp(data + 12345, back, 70000), 0);
}

Test(chunk_store, missing_chunk_and_tail_are_holes)
{
	static uint8_t data[5000], back[20000];
	uint64_t version;
	uint32_t length;
	memset(back, 0xff, sizeof(back));
	cr_assert_eq(read_range(9, 3, 0, 20000, back), 0);
	for (size_t i = 0; i < sizeof(back); i++)
		cr_assert_eq(back[i], 0);
	fill(data, sizeof(data), 2);
	cr_assert_eq(kvc_chunk_store_write(store, 9, 3, CS, 10000, data, 5000, &version,
	                                   &length), 0);
	cr_assert_eq(length, 15000);
	memset(back, 0xff, sizeof(back));
	cr_assert_eq(read_range(9, 3, 0, 20000, back), 0);
	for (size_t i = 0; i < 10000; i++)
		cr_assert_eq(back[i], 0, "gap byte %zu", i);
	cr_assert_eq(memcmp(back + 10000, data, 5000), 0);
	for (size_t i = 15000; i < 20000; i++)
		cr_assert_eq(back[i], 0, "tail byte %zu", i);
}

Test(chunk_store, partial_overwrite_keeps_the_rest)
{
	static uint8_t data[CS], patch[100000], back[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 3);
	fill(patch, sizeof(patch), 99);
	cr_assert_eq(kvc_chunk_store_write(store, 1, 0, CS, 0, data, CS, &version, &length), 0);
	cr_assert_eq(kvc_chunk_store_write(store, 1, 0, CS, 30001, patch, sizeof(patch),
	                                   &version, &length), 0);
	cr_assert_eq(version, 2);
	memcpy(data + 30001, patch, sizeof(patch));
	cr_assert_eq(read_range(1, 0, 0, CS, back), 0);
	cr_assert_eq(memcmp(data, back, CS), 0);
}

/* Open the file of inode's chunk (as chunk_store.c names it). */
static int chunk_file(uint64_t inode, uint32_t chunk, int flags)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/chunks/%02x/%016" PRIx64 ".%08x", dir,
	         (unsigned)(inode & 0xff), inode, chunk);
	int fd = open(path, flags, 0600);
	cr_assert_geq(fd, 0, "chunk file %s: %m", path);
	return fd;
}

Test(chunk_store, corrupted_bytes_read_as_eio)
{
	static uint8_t data[CS], back[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 4);
	cr_assert_eq(kvc_chunk_store_write(store, 0x77, 2, CS, 0, data, CS, &version, &length), 0);
	int fd = chunk_file(0x77, 2, O_WRONLY);
	cr_assert_eq(pwrite(fd, "X", 1, 500000), 1);
	close(fd);
	cr_assert_eq(read_range(0x77, 2, 0, CS, back), -EIO);
	cr_assert_eq(read_range(0x77, 2, 490000, 20000, back), -EIO);
	/* blocks away from the damage still verify and read */
	cr_assert_eq(read_range(0x77, 2, 0, 16384, back), 0);
	cr_assert_eq(memcmp(back, data, 16384), 0);
}

/* Read [off, off + len) of inode 0x78's chunk 0 into out; says whether
 * it was read at once from the page cache (checked as it landed). */
static bool read_checked(uint32_t off, uint32_t len, uint8_t *out)
{
	struct kvc_chunk_read r = {.inode = 0x78, .chunk = 0, .offset = off, .length = len};
	cr_assert_eq(kvc_chunk_store_read_batch(&store, &ring, &r, 1), 0);
	cr_assert_eq(r.status, 0);
	cr_assert_eq(r.present, len);
	memcpy(out, r.data, len);
	bool checked = r.checked;
	kvc_chunk_store_read_release(&r, 1);
	return checked;
}

Test(chunk_store, cached_reads_are_checked_as_they_land_and_agree_with_the_ring)
{
	static uint8_t data[CS], back[CS];
	static const uint32_t ranges[][2] = {{0, CS}, {100, 50000}, {3 * 16384, 16384},
	                                     {CS - 7, 7}, {131072 - 3, 131072 + 6}};
	uint64_t version;
	uint32_t length;
	fill(data, CS, 9);
	cr_assert_eq(kvc_chunk_store_write(store, 0x78, 0, CS, 0, data, CS, &version, &length), 0);
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		uint32_t off = ranges[i][0], len = ranges[i][1];
		ring.ring_only = false;
		memset(back, 0, CS);
		cr_assert(read_checked(off, len, back), "just written: in the page cache");
		cr_assert_eq(memcmp(back, data + off, len), 0, "range %zu", i);
		ring.ring_only = true;
		memset(back, 0, CS);
		cr_assert_not(read_checked(off, len, back), "through the ring: checked after");
		cr_assert_eq(memcmp(back, data + off, len), 0, "range %zu by the ring", i);
	}
}

/* How many bytes from the start of fd's first `size` bytes the page
 * cache holds in one run. */
static size_t resident_run(int fd, size_t size)
{
	void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(map, MAP_FAILED);
	unsigned char resident[CS / 4096];
	cr_assert_eq(mincore(map, size, resident), 0);
	munmap(map, size);
	size_t run = 0;
	while (run < size / 4096 && (resident[run] & 1))
		run++;
	return run * 4096;
}

/* Leave only fd's first half (CS) in the page cache: the whole file
 * dropped (a part of a large folio cannot be), the first half read back
 * without readahead. Returns the resident run from the start. */
static size_t cache_first_half(int fd)
{
	static uint8_t scratch[CS / 2];
	cr_assert_eq(fdatasync(fd), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
	cr_assert_eq(pread(fd, scratch, CS / 2, 0), (ssize_t)(CS / 2));
	return resident_run(fd, CS);
}

Test(chunk_store, data_the_page_cache_dropped_is_read_through_the_ring)
{
	static uint8_t data[CS], back[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 10);
	cr_assert_eq(kvc_chunk_store_write(store, 0x78, 0, CS, 0, data, CS, &version, &length), 0);
	int fd = chunk_file(0x78, 0, O_RDONLY);
	cr_assert_eq(fdatasync(fd), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	/* Whether the kernel dropped it (tmpfs keeps its pages: then it is
	 * still read at once, and must be; from the first page dropped on,
	 * the piece goes through the ring). */
	bool all = resident_run(fd, CS) == CS;
	close(fd);
	/* through the page cache (storage_direct_reads = off) */
	kvc_chunk_store_set_direct(store, false);
	cr_assert_eq(read_checked(0, CS, back), all, "read at once only from the page cache");
	cr_assert_eq(memcmp(back, data, CS), 0);
	cr_assert(read_checked(0, CS, back), "the ring's read left it in the page cache");
	cr_assert_eq(memcmp(back, data, CS), 0);
	/* by O_DIRECT (the default; a filesystem that refuses it, as tmpfs
	 * does, keeps everything cached anyway): read from the disk each time,
	 * checked, and left out of the page cache */
	kvc_chunk_store_set_direct(store, true);
	fd = chunk_file(0x78, 0, O_RDONLY);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(read_checked(0, CS, back), all, "read %d at once only if tmpfs", i);
		cr_assert_eq(memcmp(back, data, CS), 0);
	}
}

Test(chunk_store, a_piece_partly_cached_is_read_at_once_up_to_the_gap)
{
	static uint8_t data[CS], back[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 11);
	cr_assert_eq(kvc_chunk_store_write(store, 0x79, 0, CS, 0, data, CS, &version, &length), 0);
	int fd = chunk_file(0x79, 0, O_RDONLY);
	size_t lead = cache_first_half(fd);
	cr_assert(lead == CS || lead == CS / 2, "lead %zu", lead);
	close(fd);
	struct kvc_chunk_read r = {.inode = 0x79, .chunk = 0, .offset = 0, .length = CS};
	cr_assert_eq(kvc_chunk_store_read_batch(&store, &ring, &r, 1), 0);
	cr_assert_eq(r.status, 0);
	cr_assert_eq(r.present, CS);
	cr_assert_eq(memcmp(r.data, data, CS), 0, "the slices read at once and the ring's rest");
	if (lead == CS) { /* tmpfs keeps its pages: all of it at once */
		cr_assert(r.checked);
	} else { /* the slices (128 KiB, chunk_read.c) before the gap, then the ring */
		cr_assert_not(r.checked);
		cr_assert_eq(r.read_from, lead / (128u << 10) * (128u << 10), "lead %zu", lead);
	}
	kvc_chunk_store_read_release(&r, 1);
	/* A block bad on disk after the gap: found by the ring's check */
	fd = chunk_file(0x79, 0, O_RDWR);
	cr_assert_eq(pwrite(fd, "X", 1, CS - 100), 1);
	cache_first_half(fd);
	close(fd);
	cr_assert_eq(read_range(0x79, 0, 0, CS, back), -EIO);
}

Test(chunk_store, survives_reopen)
{
	static uint8_t data[300000], back[300000];
	uint64_t version;
	uint32_t length;
	fill(data, sizeof(data), 5);
	cr_assert_eq(kvc_chunk_store_write(store, 42, 7, CS, 1000, data, sizeof(data),
	                                   &version, &length), 0);
	kvc_chunk_store_close(store);
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	cr_assert_eq(read_range(42, 7, 1000, sizeof(data), back), 0);
	cr_assert_eq(memcmp(data, back, sizeof(data)), 0);
	uint32_t chunk, len;
	cr_assert_eq(kvc_chunk_store_last(store, 42, &chunk, &len), 1);
	cr_assert_eq(chunk, 7);
	cr_assert_eq(len, 301000);
}

Test(chunk_store, remove_last_and_truncate)
{
	static uint8_t data[CS], back[CS];
	uint64_t version;
	uint32_t length, chunk, len;
	fill(data, CS, 6);
	for (uint32_t c = 0; c < 4; c++)
		cr_assert_eq(kvc_chunk_store_write(store, 8, c, CS, 0, data, CS, &version, &length), 0);
	cr_assert_eq(kvc_chunk_store_write(store, 9, 0, CS, 0, data, 10, &version, &length), 0);
	cr_assert_eq(kvc_chunk_store_last(store, 8, &chunk, &len), 1);
	cr_assert_eq(chunk, 3);
	/* truncate to 1.5 chunks: chunk 1 shortened, 2 and 3 gone */
	cr_assert_eq(kvc_chunk_store_truncate(store, 8, CS + CS / 2 + 7, CS), 3);
	cr_assert_eq(kvc_chunk_store_last(store, 8, &chunk, &len), 1);
	cr_assert_eq(chunk, 1);
	cr_assert_eq(len, CS / 2 + 7);
	cr_assert_eq(read_range(8, 1, 0, CS, back), 0);
	cr_assert_eq(memcmp(back, data, CS / 2 + 7), 0);
	for (uint32_t i = CS / 2 + 7; i < CS; i++)
		cr_assert_eq(back[i], 0);
	cr_assert_eq(kvc_chunk_store_remove(store, 8), 2);
	cr_assert_eq(kvc_chunk_store_last(store, 8, &chunk, &len), 0);
	/* the neighbour inode is untouched */
	cr_assert_eq(kvc_chunk_store_last(store, 9, &chunk, &len), 1);
	struct kvc_chunk_space space;
	cr_assert_eq(kvc_chunk_store_space(store, &space), 0);
	cr_assert_eq(space.chunks, 1);
	cr_assert_gt(space.total_bytes, 0);
}

Test(chunk_store, refuses_out_of_range_writes)
{
	uint8_t data[16] = {0};
	uint64_t version;
	uint32_t length;
	cr_assert_eq(kvc_chunk_store_write(store, 1, 0, CS, CS - 8, data, 16, &version, &length),
	             -EINVAL);
	cr_assert_eq(kvc_chunk_store_write(store, 1, 0, CS, 0, data, 0, &version, &length),
	             -EINVAL);
	cr_assert_eq(kvc_chunk_store_write(store, 1, 0, 1u << 30, 0, data, 16, &version,
	                                   &length), -EINVAL);
}

Test(chunk_store, batch_reads_many_pieces)
{
	static uint8_t data[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 8);
	for (uint32_t c = 0; c < 3; c++)
		cr_assert_eq(kvc_chunk_store_write(store, 3, c, CS, 0, data, CS, &version, &length), 0);
	struct kvc_chunk_read reads[4] = {
		{.inode = 3, .chunk = 0, .offset = 0, .length = 4096},
		{.inode = 3, .chunk = 1, .offset = 100, .length = 200000},
		{.inode = 3, .chunk = 9, .offset = 0, .length = 4096}, /* hole */
		{.inode = 3, .chunk = 2, .offset = CS - 10, .length = 10},
	};
	struct kvc_chunk_store *stores[4] = {store, store, store, NULL};
	kvc_chunk_store_read_batch(stores, &ring, reads, 4);
	cr_assert_eq(reads[0].status, 0);
	cr_assert_eq(memcmp(reads[0].data, data, 4096), 0);
	cr_assert_eq(reads[1].present, 200000);
	cr_assert_eq(memcmp(reads[1].data, data + 100, 200000), 0);
	cr_assert_eq(reads[2].status, 0);
	cr_assert_eq(reads[2].present, 0);
	cr_assert_eq(reads[3].status, -ENXIO, "a target this server lacks");
	kvc_chunk_store_read_release(reads, 4);
}

Test(chunk_store, refuses_a_foreign_format)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/other", dir);
	cr_assert_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/other/FORMAT", dir);
	FILE *f = fopen(path, "w");
	fputs("something else\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/other", dir);
	struct kvc_chunk_store *other;
	cr_assert_eq(kvc_chunk_store_open(path, &other), -EINVAL);
}

Test(chunk_store, punch_drops_a_range_of_chunks)
{
	static uint8_t data[CS], back[CS];
	uint64_t version;
	uint32_t length, chunk, len;
	fill(data, CS, 8);
	for (uint32_t c = 0; c < 6; c++)
		cr_assert_eq(kvc_chunk_store_write(store, 11, c, CS, 0, data, CS, &version,
		                                   &length), 0);
	cr_assert_eq(kvc_chunk_store_write(store, 12, 2, CS, 0, data, CS, &version, &length),
	             0);
	cr_assert_eq(kvc_chunk_store_punch(store, 11, 2, 3), 3, "chunks 2, 3 and 4 go");
	cr_assert_eq(kvc_chunk_store_punch(store, 11, 2, 3), 0, "again: nothing left to drop");
	memset(back, 0xff, CS);
	cr_assert_eq(read_range(11, 3, 0, CS, back), 0);
	for (uint32_t i = 0; i < CS; i++)
		cr_assert_eq(back[i], 0, "a punched chunk reads as a hole");
	cr_assert_eq(read_range(11, 5, 0, CS, back), 0);
	cr_assert_eq(memcmp(back, data, CS), 0, "after the range: intact");
	cr_assert_eq(read_range(11, 1, 0, CS, back), 0);
	cr_assert_eq(memcmp(back, data, CS), 0, "before the range: intact");
	cr_assert_eq(kvc_chunk_store_last(store, 12, &chunk, &len), 1, "another inode: intact");
	cr_assert_eq(kvc_chunk_store_punch(store, 11, 0, 0), -EINVAL, "empty range");
	cr_assert_eq(kvc_chunk_store_punch(store, 11, UINT32_MAX, 2), -EINVAL, "wrapping range");
	cr_assert_eq(kvc_chunk_store_punch(store, 11, UINT32_MAX, 1), 0, "the last chunk index");
}

Test(chunk_store, a_file_left_without_record_is_a_hole)
{
	/* A removal cut short by a crash: the record went, the file stayed. */
	static uint8_t junk[CS], data[1000], back[30000];
	uint64_t version;
	uint32_t length;
	memset(junk, 0xab, sizeof(junk));
	int fd = chunk_file(0x31, 4, O_WRONLY | O_CREAT);
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	fill(data, sizeof(data), 9);
	cr_assert_eq(kvc_chunk_store_write(store, 0x31, 4, CS, 20000, data, sizeof(data),
	                                   &version, &length), 0);
	cr_assert_eq(read_range(0x31, 4, 0, sizeof(back), back), 0);
	for (uint32_t i = 0; i < 20000; i++)
		cr_assert_eq(back[i], 0, "byte %u of the old file came back", i);
	cr_assert_eq(memcmp(back + 20000, data, sizeof(data)), 0);
}

Test(chunk_store, a_read_holds_no_lock_after_the_batch)
{
	static uint8_t data[CS], other[CS];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 10);
	fill(other, CS, 11);
	cr_assert_eq(kvc_chunk_store_write(store, 21, 0, CS, 0, data, CS, &version, &length), 0);
	struct kvc_chunk_read r = {.inode = 21, .chunk = 0, .offset = 0, .length = CS};
	cr_assert_eq(kvc_chunk_store_read_batch(&store, &ring, &r, 1), 0);
	/* Before the read is released (while a server would be sending it), a
	 * write of the same chunk goes through (on this very thread: a lock
	 * still held would hang here), and the read's bytes stay the ones
	 * that were checked. */
	cr_assert_eq(kvc_chunk_store_write(store, 21, 0, CS, 0, other, CS, &version, &length), 0);
	cr_assert_eq(kvc_chunk_store_truncate(store, 21, 0, CS), 1);
	cr_assert_eq(r.status, 0);
	cr_assert_eq(memcmp(r.data, data, CS), 0);
	kvc_chunk_store_read_release(&r, 1);
}

Test(chunk_store, a_batch_larger_than_the_ring_goes_in_rounds)
{
	static uint8_t data[CS];
	struct kvc_chunk_ring small;
	struct kvc_chunk_read reads[11];
	struct kvc_chunk_store *stores[11];
	uint64_t version;
	uint32_t length;
	fill(data, CS, 12);
	for (uint32_t c = 0; c < 11; c++) {
		if (c != 5) /* one hole in the middle */
			cr_assert_eq(kvc_chunk_store_write(store, 22, c, CS, 0, data, CS, &version,
			                                   &length), 0);
		reads[c] = (struct kvc_chunk_read){.inode = 22, .chunk = c, .offset = c * 1000,
		                                   .length = 70000};
		stores[c] = store;
	}
	cr_assert_eq(kvc_chunk_ring_init(&small, 4), 0);
	small.ring_only = true; /* cached pieces would take no room on it */
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &small, reads, 11), 0);
	for (uint32_t c = 0; c < 11; c++) {
		cr_assert_eq(reads[c].status, 0);
		cr_assert_eq(reads[c].present, c == 5 ? 0 : 70000);
		if (c != 5)
			cr_assert_eq(memcmp(reads[c].data, data + c * 1000, 70000), 0, "piece %u", c);
	}
	kvc_chunk_store_read_release(reads, 11);
	kvc_chunk_ring_exit(&small);
}

/* A ring whose submit or wait fails, through the ring's test seam. */
static int failing_submit(struct io_uring *r)
{
	(void)r;
	return -EBUSY;
}

static int waits_left;
static int wait_then_fail(struct io_uring *r, struct io_uring_cqe **cqe)
{
	return waits_left-- > 0 ? io_uring_wait_cqe(r, cqe) : -EBADR;
}

static void write_three(uint64_t inode, uint8_t *data)
{
	uint64_t version;
	uint32_t length;
	fill(data, CS, (unsigned)inode);
	for (uint32_t c = 0; c < 3; c++)
		cr_assert_eq(kvc_chunk_store_write(store, inode, c, CS, 0, data, CS, &version, &length),
		             0);
}

static void read_three(struct kvc_chunk_read *reads, struct kvc_chunk_store **stores,
                       uint64_t inode)
{
	for (uint32_t c = 0; c < 3; c++) {
		reads[c] = (struct kvc_chunk_read){.inode = inode, .chunk = c, .offset = 0,
		                                   .length = CS};
		stores[c] = store;
	}
}

static void check_ring_recovered(uint64_t inode, const uint8_t *data)
{
	struct kvc_chunk_read reads[3];
	struct kvc_chunk_store *stores[3];
	cr_assert(ring.ready, "the ring was set up again");
	ring.ops = NULL;
	read_three(reads, stores, inode);
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, reads, 3), 0);
	for (int c = 0; c < 3; c++) {
		cr_assert_eq(reads[c].status, 0);
		cr_assert_eq(memcmp(reads[c].data, data, CS), 0);
	}
	kvc_chunk_store_read_release(reads, 3);
	/* and no lock was left behind: the chunks can be written */
	uint64_t version;
	uint32_t length;
	for (uint32_t c = 0; c < 3; c++)
		cr_assert_eq(kvc_chunk_store_write(store, inode, c, CS, 0, data, 100, &version,
		                                   &length), 0);
}

Test(chunk_store, a_failed_submit_fails_that_batch_only, .timeout = 20)
{
	static uint8_t data[CS];
	static const struct kvc_chunk_ring_ops ops = {failing_submit, NULL};
	struct kvc_chunk_read reads[4];
	struct kvc_chunk_store *stores[4];
	write_three(23, data);
	read_three(reads, stores, 23);
	reads[3] = (struct kvc_chunk_read){.inode = 23, .chunk = 9, .length = 4096}; /* a hole */
	stores[3] = store;
	ring.ops = &ops;
	ring.ring_only = true; /* cached data would not meet the failing ring */
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, reads, 4), -EIO);
	for (int c = 0; c < 3; c++) {
		cr_assert_eq(reads[c].status, -EIO);
		cr_assert_eq(reads[c].present, 0);
	}
	cr_assert_eq(reads[3].status, 0, "a hole needs no disk read");
	kvc_chunk_store_read_release(reads, 4);
	cr_assert_eq(ring.abandoned_bytes, 0, "nothing was in flight");
	check_ring_recovered(23, data);
}

/* Read inode's three chunks (written with data first; into places when
 * given) through a ring whose second wait fails: the batch fails. */
static void read_three_with_a_failed_wait(uint64_t inode, uint8_t *data,
                                          struct kvc_chunk_read reads[3],
                                          uint8_t (*places)[CS])
{
	static const struct kvc_chunk_ring_ops ops = {io_uring_submit, wait_then_fail};
	struct kvc_chunk_store *stores[3];
	write_three(inode, data);
	read_three(reads, stores, inode);
	for (int c = 0; places && c < 3; c++)
		reads[c].place = places[c]; /* the caller's memory (a client's iov) */
	ring.ops = &ops;
	ring.ring_only = true; /* cached data would not meet the failing ring */
	waits_left = 1;
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, reads, 3), -EIO);
}

Test(chunk_store, a_failed_wait_fails_that_batch_only, .timeout = 20)
{
	static uint8_t data[CS];
	struct kvc_chunk_read reads[3];
	read_three_with_a_failed_wait(24, data, reads, NULL);
	int ok = 0;
	for (int c = 0; c < 3; c++) {
		if (reads[c].status == 0) {
			cr_assert_eq(memcmp(reads[c].data, data, CS), 0);
			ok++;
		} else {
			cr_assert_eq(reads[c].status, -EIO);
		}
	}
	cr_assert_eq(ok, 1, "the one completion reaped is served, the others fail");
	cr_assert_eq(ring.abandoned_bytes, 2ull * CS, "their buffers are never reused");
	kvc_chunk_store_read_release(reads, 3);
	check_ring_recovered(24, data);
}

Test(chunk_store, a_failed_wait_counts_the_placed_reads_it_leaves, .timeout = 20)
{
	static uint8_t data[CS], places[3][CS];
	struct kvc_chunk_read reads[3];
	uint64_t before = ring.abandoned_places;
	read_three_with_a_failed_wait(26, data, reads, places);
	int ok = 0;
	for (int c = 0; c < 3; c++)
		ok += reads[c].status == 0;
	cr_assert_eq(ok, 1, "the one completion reaped is served, the others fail");
	cr_assert_eq(ring.abandoned_places - before, 2,
	             "the caller learns that two reads may still land in its memory");
	kvc_chunk_store_read_release(reads, 3);
	check_ring_recovered(26, data);
}

Test(chunk_store, truncate_at_the_largest_size_drops_nothing)
{
	uint8_t data[16] = {1};
	uint64_t version;
	uint32_t length, chunk, len;
	cr_assert_eq(kvc_chunk_store_write(store, 25, UINT32_MAX, 64u << 10, 0, data, 16, &version,
	                                   &length), 0);
	/* 256 TiB with 64 KiB chunks: the boundary is chunk 2^32, past any index */
	cr_assert_eq(kvc_chunk_store_truncate(store, 25, 1ull << 48, 64u << 10), 0);
	cr_assert_eq(kvc_chunk_store_last(store, 25, &chunk, &len), 1);
	cr_assert_eq(chunk, UINT32_MAX);
	/* and just below it, the last chunk is cut */
	cr_assert_eq(kvc_chunk_store_truncate(store, 25, (1ull << 48) - (64u << 10) + 8, 64u << 10),
	             1);
	cr_assert_eq(kvc_chunk_store_last(store, 25, &chunk, &len), 1);
	cr_assert_eq(len, 8);
}
