/* Unit tests of what a same-host reader is handed (chunk_local.c): every
 * change of a chunk moves its slot's change counter by two (odd while it
 * is made), and readers can neither write nor resize the counters. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "storage/chunk_store.h"
#include "test_dir.h"

#define CS (1u << 20)

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store;
static const _Atomic uint64_t *changes;
static int changes_fd;

static void setup(void)
{
	int dir_fd;
	kvc_test_dir_make(dir, "chunk-local");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	cr_assert_eq(kvc_chunk_store_local(store, &dir_fd, &changes_fd), 0);
	cr_assert_geq(dir_fd, 0);
	void *map = mmap(NULL, KVC_CHUNK_LOCK_SLOTS * 8, PROT_READ, MAP_SHARED, changes_fd, 0);
	cr_assert_neq(map, MAP_FAILED);
	changes = map;
}

static void teardown(void)
{
	munmap((void *)changes, KVC_CHUNK_LOCK_SLOTS * 8);
	kvc_chunk_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(chunk_local, .init = setup, .fini = teardown);

static uint64_t count(uint64_t inode, uint32_t chunk)
{
	return atomic_load(&changes[kvc_chunk_lock_slot(inode, chunk)]);
}

Test(chunk_local, every_change_moves_its_slot_by_two)
{
	static uint8_t data[CS];
	uint64_t version;
	uint32_t length;
	memset(data, 7, sizeof(data));
	uint64_t file0 = count(5, 0), inline1 = count(5, 1);
	cr_assert_eq(file0 % 2, 0);
	cr_assert_eq(kvc_chunk_store_write(store, 5, 0, CS, 0, data, CS, &version, &length), 0);
	cr_assert_eq(count(5, 0), file0 + 2);
	cr_assert_eq(kvc_chunk_store_write(store, 5, 1, CS, 0, data, 100, &version, &length), 0);
	cr_assert_eq(count(5, 1), inline1 + 2); /* an inline chunk's record too */
	/* a truncate shortens chunk 0 and drops chunk 1 */
	file0 = count(5, 0);
	inline1 = count(5, 1);
	cr_assert_eq(kvc_chunk_store_truncate(store, 5, 4096, CS), 2);
	cr_assert_geq(count(5, 0), file0 + 2);
	cr_assert_geq(count(5, 1), inline1 + 2);
	file0 = count(5, 0);
	cr_assert_eq(kvc_chunk_store_remove(store, 5), 1);
	cr_assert_geq(count(5, 0), file0 + 2);
	for (unsigned s = 0; s < KVC_CHUNK_LOCK_SLOTS; s++)
		cr_assert_eq(atomic_load(&changes[s]) % 2, 0, "slot %u held after the changes", s);
}

Test(chunk_local, readers_cannot_write_or_resize_the_counters)
{
	errno = 0;
	cr_assert_eq(mmap(NULL, KVC_CHUNK_LOCK_SLOTS * 8, PROT_READ | PROT_WRITE, MAP_SHARED,
	                  changes_fd, 0),
	             MAP_FAILED);
	cr_assert_eq(errno, EPERM);
	cr_assert_eq(ftruncate(changes_fd, 0), -1);
	cr_assert_eq(errno, EPERM);
}
