/* Unit tests of kvc-storage's in-flight chain writes (storage/inflight.h):
 * one holder per chunk, others wait for it (bounded), busy while held,
 * distinct chunks and targets independent. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "storage/inflight.h"

static struct kvc_inflight *table;

static void setup(void)
{
	cr_assert_eq(kvc_inflight_create(&table), 0);
}

static void teardown(void)
{
	kvc_inflight_destroy(table);
}

TestSuite(inflight, .init = setup, .fini = teardown);

Test(inflight, busy_while_held_and_keys_are_distinct)
{
	cr_assert_not(kvc_inflight_busy(table, 1, 7, 3));
	cr_assert_eq(kvc_inflight_begin(table, 1, 7, 3, 1000), 0);
	cr_assert(kvc_inflight_busy(table, 1, 7, 3));
	cr_assert_not(kvc_inflight_busy(table, 2, 7, 3), "another target");
	cr_assert_not(kvc_inflight_busy(table, 1, 8, 3), "another inode");
	cr_assert_not(kvc_inflight_busy(table, 1, 7, 4), "another chunk");
	cr_assert_eq(kvc_inflight_begin(table, 1, 7, 4, 1000), 0, "another chunk does not wait");
	kvc_inflight_end(table, 1, 7, 3);
	cr_assert_not(kvc_inflight_busy(table, 1, 7, 3));
	cr_assert(kvc_inflight_busy(table, 1, 7, 4));
	kvc_inflight_end(table, 1, 7, 4);
	kvc_inflight_end(table, 1, 7, 4); /* not held: nothing happens */
}

Test(inflight, a_second_writer_times_out_while_held)
{
	cr_assert_eq(kvc_inflight_begin(table, 0, 1, 0, 1000), 0);
	cr_assert_eq(kvc_inflight_begin(table, 0, 1, 0, 50), -ETIMEDOUT);
	kvc_inflight_end(table, 0, 1, 0);
	cr_assert_eq(kvc_inflight_begin(table, 0, 1, 0, 50), 0);
	kvc_inflight_end(table, 0, 1, 0);
}

static atomic_int inside, most, done;

static void *writer(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200; i++) {
		cr_assert_eq(kvc_inflight_begin(table, 3, 99, 5, 60000), 0);
		int now = atomic_fetch_add(&inside, 1) + 1;
		if (now > atomic_load(&most))
			atomic_store(&most, now);
		atomic_fetch_sub(&inside, 1);
		kvc_inflight_end(table, 3, 99, 5);
	}
	atomic_fetch_add(&done, 1);
	return NULL;
}

Test(inflight, one_holder_at_a_time_under_contention)
{
	pthread_t threads[6];
	for (int i = 0; i < 6; i++)
		pthread_create(&threads[i], NULL, writer, NULL);
	for (int i = 0; i < 6; i++)
		pthread_join(threads[i], NULL);
	cr_assert_eq(atomic_load(&done), 6);
	cr_assert_eq(atomic_load(&most), 1, "two writers held one chunk at once");
	cr_assert_not(kvc_inflight_busy(table, 3, 99, 5));
}
