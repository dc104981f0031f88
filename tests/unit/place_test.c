/* Unit tests of same-host placement's server side (src/storage/place.c):
 * what memory registers, who may name a region, copies into and out of
 * client memory that shrinks under them (-EFAULT, no signal), crcs
 * checked in client memory, and chunk reads placed straight into it
 * (chunk_read.c's `place`). */

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "storage/chunk_store.h"
#include "storage/place.h"
#include "test_dir.h"

#define SIZE (1u << 20)

static struct kvc_place_table table;
static int owner_a, owner_b; /* their addresses name two connections */

static int memory(size_t size)
{
	int fd = memfd_create("place-test", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	return fd;
}

static int reg(const void *owner, pid_t pid, int fd, uint64_t id, uint64_t size,
               uint64_t offset)
{
	struct kvc_msg_place_register m = {.region = id, .size = size, .file_offset = offset};
	return kvc_place_register(&table, owner, pid, fd, &m);
}

static void setup(void)
{
	cr_assert_eq(kvc_place_init(&table), 0);
}

TestSuite(place, .init = setup);

Test(place, only_enough_shared_memory_registers)
{
	cr_assert_eq(reg(&owner_a, 1, open("/proc/self/exe", O_RDONLY), 1, 4096, 0), -EINVAL);
	cr_assert_eq(reg(&owner_a, 1, memory(4096), 1, 8192, 0), -EINVAL); /* too small */
	cr_assert_eq(reg(&owner_a, 1, memory(8192), 1, 4096, 8000), -EINVAL);
	cr_assert_eq(reg(&owner_a, 1, memory(4096), 1, 0, 0), -EINVAL);
	cr_assert_eq(reg(&owner_a, 1, -1, 1, 4096, 0), -EINVAL);
	cr_assert_eq(reg(&owner_a, 1, memory(8192), 1, 4096, 4000), 0); /* an unaligned offset */
	cr_assert_eq(reg(&owner_a, 1, memory(8192), 1, 4096, 0), -EEXIST);
	cr_assert_eq(reg(&owner_b, 2, memory(8192), 1, 4096, 0), 0); /* another process's id */
}

Test(place, a_region_is_its_process_and_goes_with_its_connection)
{
	cr_assert_eq(reg(&owner_a, 1, memory(SIZE), 7, SIZE, 0), 0);
	cr_assert_null(kvc_place_get(&table, 2, 7)); /* another process */
	struct kvc_place_region *r = kvc_place_get(&table, 1, 7);
	cr_assert_not_null(r);
	cr_assert_eq(kvc_place_unregister(&table, &owner_b, 1, 7), -ENOENT); /* not its owner */
	kvc_place_drop_owner(&table, &owner_a);
	cr_assert_null(kvc_place_get(&table, 1, 7));
	/* still mapped for the holder until its put */
	char byte = 1;
	cr_assert_eq(kvc_place_copy_out(r, 0, &byte, 1), 0);
	kvc_place_put(&table, r);
	cr_assert_eq(reg(&owner_a, 1, memory(SIZE), 7, SIZE, 0), 0); /* the id is free again */
	cr_assert_eq(kvc_place_unregister(&table, &owner_a, 1, 7), 0);
	cr_assert_eq(kvc_place_unregister(&table, &owner_a, 1, 7), -ENOENT);
}

Test(place, a_kept_region_stays_mapped_after_its_last_put)
{
	cr_assert_eq(reg(&owner_a, 1, memory(SIZE), 8, SIZE, 0), 0);
	struct kvc_place_region *r = kvc_place_get(&table, 1, 8);
	cr_assert_not_null(r);
	uint8_t *at = kvc_place_at(r, SIZE - 1);
	kvc_place_keep(&table, r); /* a read left in the kernel may land there */
	kvc_place_put(&table, r);
	cr_assert_eq(kvc_place_unregister(&table, &owner_a, 1, 8), 0);
	cr_assert_null(kvc_place_get(&table, 1, 8), "it leaves the table as usual");
	*at = 7; /* unmapped, this would fault */
	cr_assert_eq(*at, 7);
}

Test(place, memory_that_shrinks_is_efault_not_a_signal)
{
	int fd = memory(SIZE);
	int mine = dup(fd);
	cr_assert_eq(reg(&owner_a, 1, fd, 3, SIZE, 0), 0);
	struct kvc_place_region *r = kvc_place_get(&table, 1, 3);
	uint8_t *buf = malloc(SIZE);
	for (uint32_t i = 0; i < SIZE; i++)
		buf[i] = (uint8_t)(i * 7);
	cr_assert_eq(kvc_place_copy_out(r, 0, buf, SIZE), 0);
	uint8_t *back = malloc(SIZE);
	cr_assert_eq(kvc_place_copy_in(r, 0, back, SIZE), 0);
	cr_assert_eq(memcmp(buf, back, SIZE), 0);
	uint32_t crcs[SIZE / 16384];
	for (uint32_t b = 0; b < SIZE / 16384; b++)
		crcs[b] = kvc_crc32c(0, buf + b * 16384, 16384);
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, 0), SIZE, 16384, crcs), 0);
	crcs[3] ^= 1;
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, 0), SIZE, 16384, crcs), -EIO);
	cr_assert_eq(kvc_place_copy_out(r, SIZE - 10, buf, 11), -EFAULT); /* outside */
	/* the client shrinks its memory */
	cr_assert_eq(ftruncate(mine, 4096), 0);
	cr_assert_eq(kvc_place_copy_out(r, 0, buf, SIZE), -EFAULT);
	cr_assert_eq(kvc_place_copy_in(r, 0, back, SIZE), -EFAULT);
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, 0), SIZE, 16384, crcs), -EFAULT);
	cr_assert_eq(kvc_place_copy_out(r, 0, buf, 4096), 0); /* what is left still works */
	cr_assert_eq(kvc_place_copy_in(r, 0, back, 4096), 0);
	kvc_place_put(&table, r);
	close(mine);
	free(buf);
	free(back);
}

/* A chunk store in a fresh directory and a read ring, for the chunk
 * reads below; chunks_close takes them down and the directory with them. */
static char dir[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store;
static struct kvc_chunk_ring ring;

static void chunks_open(void)
{
	kvc_test_dir_make(dir, "place");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	cr_assert_eq(kvc_chunk_ring_init(&ring, 16), 0);
}

static void chunks_close(void)
{
	kvc_chunk_ring_exit(&ring);
	kvc_chunk_store_close(store);
	kvc_test_dir_remove(dir);
}

Test(place, chunk_reads_of_whole_blocks_land_in_place)
{
	chunks_open();
	cr_assert_eq(kvc_chunk_store_set_inline(store, 0), 0);
	uint32_t length = 5 * 16384 + 100; /* the last block is short */
	uint8_t *data = malloc(length);
	for (uint32_t i = 0; i < length; i++)
		data[i] = (uint8_t)(i * 13 + 1);
	uint64_t version;
	uint32_t chunk_length;
	cr_assert_eq(kvc_chunk_store_write(store, 9, 0, SIZE, 0, data, length, &version,
	                                   &chunk_length), 0);
	int fd = memory(SIZE);
	int mine = dup(fd);
	cr_assert_eq(reg(&owner_a, 1, fd, 1, SIZE, 0), 0);
	struct kvc_place_region *r = kvc_place_get(&table, 1, 1);
	struct kvc_chunk_store *stores[3] = {store, store, store};
	struct kvc_chunk_read reads[3] = {
		/* the whole chunk and past its end: placed */
		{.inode = 9, .chunk = 0, .offset = 0, .length = SIZE, .place = kvc_place_at(r, 0)},
		/* inside a block: through the store's buffer */
		{.inode = 9, .chunk = 0, .offset = 100, .length = 16384,
		 .place = kvc_place_at(r, SIZE / 2)},
		/* from a block to the chunk's end: placed */
		{.inode = 9, .chunk = 0, .offset = 16384, .length = length - 16384,
		 .place = kvc_place_at(r, SIZE / 4)}};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, reads, 3), 0);
	cr_assert(reads[0].placed && !reads[1].placed && reads[2].placed);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(reads[i].status, 0, "%d", i);
		cr_assert(reads[i].checked, "%d: read from the page cache, checked as it landed", i);
	}
	cr_assert_eq(reads[0].present, length);
	cr_assert_eq(memcmp(kvc_place_at(r, 0), data, length), 0);
	cr_assert_eq(kvc_place_check_blocks(reads[0].buffer, reads[0].aligned_length, 16384,
	                                    reads[0].block_crcs), 0);
	cr_assert_eq(memcmp(reads[1].data, data + 100, 16384), 0);
	cr_assert_eq(memcmp(kvc_place_at(r, SIZE / 4), data + 16384, length - 16384), 0);
	kvc_chunk_store_read_release(reads, 3);
	/* starting and ending inside blocks: the whole blocks between go in
	 * place, the edges through `edge` (checked there), copied by us */
	uint32_t from = 100, span = 3 * 16384;
	reads[0] = (struct kvc_chunk_read){.inode = 9, .chunk = 0, .offset = from, .length = span,
	                                   .place = kvc_place_at(r, SIZE / 8)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, reads, 1), 0);
	cr_assert_eq(reads[0].status, 0);
	cr_assert(reads[0].placed);
	cr_assert(reads[0].checked, "edges and middle checked as they landed");
	cr_assert_eq(reads[0].mid_offset, 16384 - from);
	cr_assert_eq(reads[0].mid_length, 2 * 16384);
	cr_assert_eq(reads[0].head_length, 16384);
	cr_assert_eq(reads[0].tail_copy, from);
	cr_assert_eq(kvc_place_check_blocks(reads[0].buffer + reads[0].mid_offset,
	                                    reads[0].mid_length, 16384,
	                                    reads[0].block_crcs + reads[0].mid_block), 0);
	cr_assert_eq(kvc_place_copy_out(r, SIZE / 8, reads[0].edge + from, 16384 - from), 0);
	cr_assert_eq(kvc_place_copy_out(r, SIZE / 8 + reads[0].tail_offset,
	                                reads[0].edge + reads[0].head_length, reads[0].tail_copy),
	             0);
	cr_assert_eq(memcmp(kvc_place_at(r, SIZE / 8), data + from, span), 0);
	kvc_chunk_store_read_release(reads, 1);
	/* client memory gone under a placed read: -EFAULT for that piece */
	cr_assert_eq(ftruncate(mine, 0), 0);
	reads[0] = (struct kvc_chunk_read){.inode = 9, .chunk = 0, .offset = 0, .length = SIZE,
	                                   .place = kvc_place_at(r, 0)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, reads, 1), 0);
	cr_assert_eq(reads[0].status, -EFAULT);
	kvc_chunk_store_read_release(reads, 1);
	close(mine);
	kvc_place_put(&table, r);
	free(data);
	chunks_close();
}

/* Placed reads of a whole 1 MiB chunk, its middle streamed into client
 * memory from the bounce buffer: the bytes land at any alignment with
 * their edges, a corrupt block makes the read not `checked` (the caller's
 * check of the placed blocks finds it), and memory cut short under the
 * read is -EFAULT for that read only. */
Test(place, large_placed_reads_are_checked_as_they_land_and_fail_alone)
{
	chunks_open();
	uint8_t *data = malloc(SIZE);
	static uint8_t data_back[SIZE / 2];
	for (uint32_t i = 0; i < SIZE; i++)
		data[i] = (uint8_t)(i * 29 + 7);
	uint64_t version;
	uint32_t chunk_length;
	cr_assert_eq(kvc_chunk_store_write(store, 10, 0, SIZE, 0, data, SIZE, &version,
	                                   &chunk_length), 0);
	int fd = memory(2 * SIZE);
	int mine = dup(fd);
	cr_assert_eq(reg(&owner_a, 1, fd, 1, 2 * SIZE, 0), 0);
	struct kvc_place_region *r = kvc_place_get(&table, 1, 1);
	struct kvc_chunk_store *stores[1] = {store};
	uint32_t from = 100, span = SIZE - 200, at = 4096 + 3; /* edges; no alignment */
	struct kvc_chunk_read read = {.inode = 10, .chunk = 0, .offset = from, .length = span,
	                              .place = kvc_place_at(r, at)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert(read.placed && read.checked);
	cr_assert_geq(read.mid_length, 256u << 10, "large enough to be streamed");
	cr_assert_eq(memcmp(kvc_place_at(r, at + read.mid_offset), data + from + read.mid_offset,
	                    read.mid_length), 0);
	cr_assert_eq(memcmp(read.edge, data, read.head_length), 0, "head edge");
	cr_assert_eq(memcmp(read.edge + read.head_length, data + SIZE - read.tail_length,
	                    read.tail_length), 0, "tail edge");
	kvc_chunk_store_read_release(&read, 1);

	/* one byte of a late block goes bad on disk (in the page cache) */
	char path[256];
	snprintf(path, sizeof(path), "%s/chunks/0a/%016x.%08x", dir, 10, 0);
	int chunk_fd = open(path, O_RDWR);
	cr_assert_geq(chunk_fd, 0, "chunk file %s", path);
	uint8_t bad = (uint8_t)~data[900000];
	cr_assert_eq(pwrite(chunk_fd, &bad, 1, 900000), 1);
	close(chunk_fd);
	read = (struct kvc_chunk_read){.inode = 10, .chunk = 0, .offset = 0, .length = SIZE,
	                               .place = kvc_place_at(r, 0)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert(read.placed);
	cr_assert_not(read.checked, "a mismatch is not passed as checked");
	/* the slices before the bad one were checked as they landed; the
	 * caller checks from the bad one's slice on, and finds it */
	cr_assert_eq(read.read_from, 900000 / (128u << 10) * (128u << 10));
	cr_assert_eq(read.mid_offset, read.read_from);
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, read.mid_offset), read.mid_length,
	                                    16384, read.block_crcs + read.mid_block), -EIO);
	cr_assert_eq(memcmp(kvc_place_at(r, 0), data, 900000 / 16384 * 16384), 0,
	             "the blocks before it");
	kvc_chunk_store_read_release(&read, 1);
	cr_assert_eq(pwrite(chunk_fd = open(path, O_RDWR), &data[900000], 1, 900000), 1);

	/* only the chunk's first half in the page cache (the whole file
	 * dropped, a part of a large folio cannot be; the half read back
	 * without readahead): it is read at once, the rest by the ring, edges
	 * and all */
	cr_assert_eq(fdatasync(chunk_fd), 0);
	cr_assert_eq(posix_fadvise(chunk_fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	cr_assert_eq(posix_fadvise(chunk_fd, 0, 0, POSIX_FADV_RANDOM), 0);
	cr_assert_eq(pread(chunk_fd, data_back, SIZE / 2, 0), (ssize_t)(SIZE / 2));
	uint8_t resident[SIZE / 4096];
	void *map = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, chunk_fd, 0);
	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mincore(map, SIZE, resident), 0);
	munmap(map, SIZE);
	bool partly = !(resident[SIZE / 4096 - 1] & 1); /* tmpfs keeps it all */
	uint32_t cached = 0; /* the resident prefix */
	while (cached < SIZE && (resident[cached / 4096] & 1))
		cached += 4096;
	close(chunk_fd);
	memset(kvc_place_at(r, at), 0, SIZE);
	read = (struct kvc_chunk_read){.inode = 10, .chunk = 0, .offset = from, .length = span,
	                               .place = kvc_place_at(r, at)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert(read.placed);
	cr_assert_eq(read.checked, !partly);
	/* read at once: the head edge's block, then whole 128 KiB slices of
	 * the middle up to the first one the page cache lacks a page of */
	uint32_t head = 16384, mid_start = head - from, mid_end = SIZE - 16384 - from;
	uint32_t expect = head + (cached - head) / (128u << 10) * (128u << 10);
	cr_assert(!partly || read.read_from == expect, "read_from %u, %u cached", read.read_from,
	          cached);
	/* the caller checks only the blocks the ring read */
	cr_assert_eq(read.mid_offset, mid_start + (partly ? expect - head : 0));
	cr_assert_eq(read.mid_offset + read.mid_length, mid_end);
	cr_assert_eq(read.mid_block, 1 + (partly ? (expect - head) / 16384 : 0));
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, at + read.mid_offset), read.mid_length,
	                                    16384, read.block_crcs + read.mid_block), 0);
	cr_assert_eq(memcmp(kvc_place_at(r, at + mid_start), data + head, mid_end - mid_start), 0);
	cr_assert_eq(memcmp(read.edge, data, read.head_length), 0, "head edge");
	cr_assert_eq(memcmp(read.edge + read.head_length, data + SIZE - read.tail_length,
	                    read.tail_length), 0, "tail edge");
	kvc_chunk_store_read_release(&read, 1);

	/* the client cuts its memory to half a chunk under a streamed read */
	cr_assert_eq(ftruncate(mine, SIZE / 2), 0);
	read = (struct kvc_chunk_read){.inode = 10, .chunk = 0, .offset = 0, .length = SIZE,
	                               .place = kvc_place_at(r, 0)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, -EFAULT);
	cr_assert_not(read.checked);
	kvc_chunk_store_read_release(&read, 1);
	close(mine);
	kvc_place_put(&table, r);
	free(data);
	chunks_close();
}

/* How many pages of a chunk file the page cache holds. */
static uint32_t resident(const char *path)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "chunk file %s", path);
	uint8_t pages[SIZE / 4096];
	void *map = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mincore(map, SIZE, pages), 0);
	munmap(map, SIZE);
	close(fd);
	uint32_t n = 0;
	for (uint32_t i = 0; i < SIZE / 4096; i++)
		n += pages[i] & 1;
	return n;
}

/* Drop a chunk file's pages (written back first); false when some stay
 * resident (tmpfs keeps them all). */
static bool dropped(const char *path)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "chunk file %s", path);
	cr_assert_eq(fdatasync(fd), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	return resident(path) == 0;
}

static uint64_t reads_of(int path) /* 0 cached, 1 io_uring, 2 direct */
{
	uint64_t n[3];
	kvc_chunk_store_read_counts(store, &n[0], &n[1], &n[2]);
	return n[path];
}

/* Data the page cache does not hold is read with O_DIRECT straight into
 * place when the place is 4 KiB-aligned: no page-cache copy and nothing
 * left in the page cache, the bytes and the caller's checks as for any
 * read (a block bad on the disk is found). A place at an odd address, or
 * a store told not to, reads through the page cache. */
Test(place, cold_placed_reads_go_by_o_direct_where_they_align)
{
	chunks_open();
	uint8_t *data = malloc(SIZE);
	for (uint32_t i = 0; i < SIZE; i++)
		data[i] = (uint8_t)(i * 13 + 5);
	uint64_t version;
	uint32_t chunk_length;
	cr_assert_eq(kvc_chunk_store_write(store, 11, 0, SIZE, 0, data, SIZE, &version,
	                                   &chunk_length), 0);
	int fd = memory(2 * SIZE);
	cr_assert_eq(reg(&owner_a, 1, fd, 1, 2 * SIZE, 0), 0);
	struct kvc_place_region *r = kvc_place_get(&table, 1, 1);
	struct kvc_chunk_store *stores[1] = {store};
	char path[256];
	snprintf(path, sizeof(path), "%s/chunks/0b/%016x.%08x", dir, 11, 0);
	if (!dropped(path))
		cr_skip_test("%s keeps its files in memory (tmpfs?)", dir);
	kvc_chunk_store_set_direct(store, true); /* storage_direct_reads = on */

	uint64_t direct = reads_of(2), ring_reads = reads_of(1);
	struct kvc_chunk_read read = {.inode = 11, .chunk = 0, .offset = 0, .length = SIZE,
	                              .place = kvc_place_at(r, 0)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert(read.placed);
	cr_assert_not(read.checked, "the caller checks what O_DIRECT placed");
	cr_assert_eq(reads_of(2), direct + 1, "read by O_DIRECT");
	cr_assert_eq(reads_of(1), ring_reads);
	cr_assert_eq(read.mid_length, SIZE);
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, read.mid_offset), read.mid_length,
	                                    16384, read.block_crcs + read.mid_block), 0);
	cr_assert_eq(memcmp(kvc_place_at(r, 0), data, SIZE), 0);
	kvc_chunk_store_read_release(&read, 1);
	cr_assert_eq(resident(path), 0, "the page cache was left alone (no readahead either)");

	/* at an odd address: through the page cache */
	read = (struct kvc_chunk_read){.inode = 11, .chunk = 0, .offset = 0, .length = SIZE,
	                               .place = kvc_place_at(r, 3)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert_eq(reads_of(1), ring_reads + 1);
	cr_assert_eq(reads_of(2), direct + 1);
	cr_assert_eq(memcmp(kvc_place_at(r, 3), data, SIZE), 0);
	kvc_chunk_store_read_release(&read, 1);

	/* told not to */
	kvc_chunk_store_set_direct(store, false);
	cr_assert(dropped(path));
	read = (struct kvc_chunk_read){.inode = 11, .chunk = 0, .offset = 0, .length = SIZE,
	                               .place = kvc_place_at(r, 0)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert_eq(reads_of(1), ring_reads + 2);
	cr_assert_eq(reads_of(2), direct + 1);
	kvc_chunk_store_read_release(&read, 1);
	kvc_chunk_store_set_direct(store, true);

	/* a block gone bad on the disk */
	int chunk_fd = open(path, O_RDWR);
	uint8_t bad = (uint8_t)~data[500000];
	cr_assert_eq(pwrite(chunk_fd, &bad, 1, 500000), 1);
	close(chunk_fd);
	cr_assert(dropped(path));
	memset(kvc_place_at(r, 0), 0, SIZE);
	read = (struct kvc_chunk_read){.inode = 11, .chunk = 0, .offset = 0, .length = SIZE,
	                               .place = kvc_place_at(r, 0)};
	cr_assert_eq(kvc_chunk_store_read_batch(stores, &ring, &read, 1), 0);
	cr_assert_eq(read.status, 0);
	cr_assert_eq(reads_of(2), direct + 2);
	cr_assert_eq(kvc_place_check_blocks(kvc_place_at(r, read.mid_offset), read.mid_length,
	                                    16384, read.block_crcs + read.mid_block), -EIO);
	kvc_chunk_store_read_release(&read, 1);
	close(fd);
	kvc_place_put(&table, r);
	free(data);
	chunks_close();
}
