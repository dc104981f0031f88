/* Unit tests of the memory guard (core/mem_guard.h): copies into, out of
 * and crcs of shared memory whose file shrank under the mapping answer
 * -EFAULT instead of raising SIGBUS, copies of live memory are plain
 * copies, and the guard is let go after each (a later copy of live memory
 * still works, on this and on other threads). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/mem_guard.h"

#define SIZE (64u << 10)

static int fd = -1;
static unsigned char *map;

static void setup(void)
{
	cr_assert_eq(kvc_mem_guard_init(), 0);
	cr_assert_eq(kvc_mem_guard_init(), 0, "a second init is harmless");
	fd = memfd_create("mem_guard_test", 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, SIZE), 0);
	map = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(map, MAP_FAILED);
}

static void teardown(void)
{
	munmap(map, SIZE);
	close(fd);
}

TestSuite(mem_guard, .init = setup, .fini = teardown);

Test(mem_guard, live_memory_copies_as_memcpy)
{
	static unsigned char src[SIZE], back[SIZE];
	for (unsigned i = 0; i < SIZE; i++)
		src[i] = (unsigned char)(i * 7 + 1);
	cr_assert_eq(kvc_mem_guard_copy(map, src, SIZE), 0);
	cr_assert_eq(kvc_mem_guard_copy(back, map, SIZE), 0);
	cr_assert_eq(memcmp(src, back, SIZE), 0);
	uint32_t crc = 0;
	cr_assert_eq(kvc_mem_guard_crc32c(map, SIZE, &crc), 0);
	cr_assert_eq(crc, kvc_crc32c(0, src, SIZE));
	cr_assert_eq(kvc_mem_guard_copy(back, map, 0), 0, "an empty copy");
}

Test(mem_guard, shrunk_memory_is_efault_both_ways_and_the_guard_is_let_go)
{
	static unsigned char buf[SIZE];
	memset(map, 5, SIZE);
	cr_assert_eq(ftruncate(fd, 4096), 0); /* the client shrinks it */
	cr_assert_eq(kvc_mem_guard_copy(buf, map, SIZE), -EFAULT, "copy out of it");
	cr_assert_eq(kvc_mem_guard_copy(map + 8192, buf, 100), -EFAULT, "copy into it");
	uint32_t crc = 7;
	cr_assert_eq(kvc_mem_guard_crc32c(map + 4096, 10, &crc), -EFAULT);
	cr_assert_eq(crc, 7u, "no crc on a failed read");
	/* what is left of it still copies, again and again */
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(kvc_mem_guard_copy(buf, map, 4096), 0);
		cr_assert_eq(kvc_mem_guard_copy(buf, map + 4096, 1), -EFAULT);
	}
	cr_assert_eq(buf[0], 5);
	/* grown back: the same mapping serves again (zeros past the old end) */
	cr_assert_eq(ftruncate(fd, SIZE), 0);
	cr_assert_eq(kvc_mem_guard_copy(buf, map, SIZE), 0);
	cr_assert_eq(buf[4095], 5);
	cr_assert_eq(buf[4096], 0);
}

Test(mem_guard, streamed_copies_are_copies_at_any_alignment_and_efault_when_gone)
{
	static unsigned char src[SIZE];
	static const size_t lengths[] = {0, 1, 15, 16, 63, 64, 65, 127, 4096 + 7, SIZE - 40};
	for (unsigned i = 0; i < SIZE; i++)
		src[i] = (unsigned char)(i * 11 + 3);
	for (size_t to = 0; to < 18; to++)
		for (size_t from = 0; from < 3; from++)
			for (size_t k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
				size_t n = lengths[k];
				memset(map, 0xee, SIZE);
				cr_assert_eq(kvc_mem_guard_stream(map + to, src + from, n), 0);
				cr_assert_eq(memcmp(map + to, src + from, n), 0, "to %zu from %zu n %zu",
				             to, from, n);
				for (size_t b = 0; b < to; b++)
					cr_assert_eq(map[b], 0xee, "before the copy");
				cr_assert_eq(map[to + n], 0xee, "after the copy");
			}
	cr_assert_eq(ftruncate(fd, 4096), 0); /* the client shrinks it */
	cr_assert_eq(kvc_mem_guard_stream(map + 100, src, 8192), -EFAULT);
	cr_assert_eq(kvc_mem_guard_stream(map, src, 4096), 0, "what is left still copies");
	cr_assert_eq(memcmp(map, src, 4096), 0);
}

static void *other_thread(void *arg)
{
	(void)arg;
	static unsigned char buf[SIZE];
	long rc = kvc_mem_guard_copy(buf, map, SIZE);
	return (void *)rc;
}

Test(mem_guard, each_thread_has_its_own_guard)
{
	cr_assert_eq(ftruncate(fd, 0), 0);
	pthread_t threads[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&threads[i], NULL, other_thread, NULL);
	for (int i = 0; i < 4; i++) {
		void *rc;
		pthread_join(threads[i], &rc);
		cr_assert_eq((long)rc, -EFAULT);
	}
	static unsigned char buf[16];
	unsigned char live[16] = {1, 2, 3};
	cr_assert_eq(kvc_mem_guard_copy(buf, live, sizeof(live)), 0);
	cr_assert_eq(buf[2], 3);
}

Test(mem_guard, a_scatter_fills_its_places_in_turn_and_faults_as_a_copy)
{
	static unsigned char src[SIZE];
	for (unsigned i = 0; i < SIZE; i++)
		src[i] = (unsigned char)(i * 13 + 3);
	memset(map, 0xee, SIZE);
	/* places out of order in memory; the last longer than what is left */
	struct iovec places[3] = {{map + 40000, 1000}, {map + 100, 3000}, {map + 20000, 9000}};
	cr_assert_eq(kvc_mem_guard_scatter(places, 3, src, 6000), 0);
	cr_assert_eq(memcmp(map + 40000, src, 1000), 0);
	cr_assert_eq(memcmp(map + 100, src + 1000, 3000), 0);
	cr_assert_eq(memcmp(map + 20000, src + 4000, 2000), 0);
	cr_assert_eq(map[22000], 0xee, "nothing past the bytes given");
	cr_assert_eq(map[99], 0xee);
	cr_assert_eq(kvc_mem_guard_scatter(places, 0, src, 10), 0, "no places: nothing");
	/* a place in memory that is gone: -EFAULT, and the guard let go */
	cr_assert_eq(ftruncate(fd, 8192), 0);
	cr_assert_eq(kvc_mem_guard_scatter(places, 3, src, 6000), -EFAULT);
	cr_assert_eq(kvc_mem_guard_scatter(places + 1, 1, src, 3000), 0);
	cr_assert_eq(memcmp(map + 100, src, 3000), 0);
}
