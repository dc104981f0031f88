/*
 * crash_image: what a disk may hold after a machine crash, for the tests
 * of LMDB environments under checkpoints (core/lmdb_checkpoint.h): the
 * data file as flushed at the last checkpoint, with any subset of the
 * pages written since (the kernel writes dirty pages back in any order),
 * the new meta pages always among them (the worst case); the page cache
 * (the live file) is lost.
 *
 * A header of static functions: each unit test is a program of its own.
 */
#ifndef KVC_TEST_CRASH_IMAGE_H
#define KVC_TEST_CRASH_IMAGE_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KVC_TEST_PAGE 4096

struct kvc_test_file {
	uint8_t *bytes;
	size_t size;      /* up to the end of its last written extent */
	size_t full_size; /* st_size: LMDB with MDB_WRITEMAP makes it the map's */
};

/* A file's bytes up to its last data extent (a page pool's file is as big
 * as its map, 32 GiB, and sparse). */
static inline struct kvc_test_file kvc_test_slurp(const char *dir, const char *name)
{
	char path[256];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0 && fstat(fd, &st) == 0, "%s", path);
	off_t end = 0, at = 0, data;
	while ((data = lseek(fd, at, SEEK_DATA)) >= 0) {
		end = lseek(fd, data, SEEK_HOLE);
		at = end;
	}
	struct kvc_test_file f = {malloc((size_t)end + KVC_TEST_PAGE), (size_t)end,
	                          (size_t)st.st_size};
	cr_assert_eq(pread(fd, f.bytes, f.size, 0), (ssize_t)f.size);
	close(fd);
	return f;
}

static inline void kvc_test_spill(const char *dir, const char *name, const uint8_t *bytes,
                                  size_t size, size_t full_size)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, bytes, size, 0), (ssize_t)size);
	cr_assert_eq(ftruncate(fd, (off_t)(full_size > size ? full_size : size)), 0);
	close(fd);
}

static inline void kvc_test_release(struct kvc_test_file *f)
{
	free(f->bytes);
	f->bytes = NULL;
}

/* Write into dir (emptied first) the data file a disk may hold (the
 * flushed one, then the pages written since that keep_percent says
 * reached the disk, meta pages always) and the checkpoint file as it was
 * flushed. Returns how many pages changed since the flush. */
static inline int kvc_test_crash_image(const char *dir, const struct kvc_test_file *flushed,
                                       const struct kvc_test_file *live,
                                       const struct kvc_test_file *checkpoint, unsigned seed,
                                       int keep_percent)
{
	size_t size = live->size > flushed->size ? live->size : flushed->size;
	uint8_t *disk = calloc(1, size);
	memcpy(disk, flushed->bytes, flushed->size);
	srand(seed);
	int changed_pages = 0;
	for (size_t at = 0; at + KVC_TEST_PAGE <= live->size; at += KVC_TEST_PAGE) {
		bool changed = at + KVC_TEST_PAGE > flushed->size ||
		               memcmp(flushed->bytes + at, live->bytes + at, KVC_TEST_PAGE) != 0;
		changed_pages += changed;
		if (changed && (at < 2 * KVC_TEST_PAGE || rand() % 100 < keep_percent))
			memcpy(disk + at, live->bytes + at, KVC_TEST_PAGE);
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -f %s/*", dir);
	cr_assert_eq(system(cmd), 0);
	kvc_test_spill(dir, "data.mdb", disk, size, live->full_size);
	kvc_test_spill(dir, "checkpoint", checkpoint->bytes, checkpoint->size, 0);
	free(disk);
	return changed_pages;
}

#endif
