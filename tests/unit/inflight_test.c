/* Unit tests of kvc-storage's in-flight chain writes (storage/inflight.h):
 * one holder per chunk, others wait for it (bounded), busy while held,
 * distinct chunks and targets independent; a drain of applies waits for
 * the older ones only. */
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

/* Applies: a drain waits for every apply of its target that entered
 * before it, not for later ones nor for other targets'. */
struct drain_arg {
	uint32_t target;
	int timeout_ms;
	atomic_int rc;
	atomic_bool returned;
};

static void *drainer(void *p)
{
	struct drain_arg *a = p;
	atomic_store(&a->rc, kvc_inflight_apply_drain(table, a->target, a->timeout_ms));
	atomic_store(&a->returned, true);
	return NULL;
}

Test(inflight, a_drain_waits_for_older_applies_only)
{
	cr_assert_eq(kvc_inflight_apply_drain(table, 2, 1000), 0, "nothing to wait for");
	unsigned older = kvc_inflight_apply_enter(table, 2);
	unsigned other_target = kvc_inflight_apply_enter(table, 5);
	struct drain_arg a = {.target = 2, .timeout_ms = 60000};
	pthread_t thread;
	pthread_create(&thread, NULL, drainer, &a);
	usleep(100 * 1000);
	cr_assert_not(atomic_load(&a.returned), "the drain did not wait for an older apply");
	/* an apply entering now is not waited for */
	unsigned newer = kvc_inflight_apply_enter(table, 2);
	kvc_inflight_apply_leave(table, 2, older);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&a.rc), 0);
	kvc_inflight_apply_leave(table, 2, newer);
	kvc_inflight_apply_leave(table, 5, other_target);
}

Test(inflight, a_drain_times_out_and_the_next_one_still_waits_for_what_it_left)
{
	unsigned stuck = kvc_inflight_apply_enter(table, 1);
	cr_assert_eq(kvc_inflight_apply_drain(table, 1, 50), -ETIMEDOUT);
	/* the apply left over is older than the next drain too */
	cr_assert_eq(kvc_inflight_apply_drain(table, 1, 50), -ETIMEDOUT);
	unsigned later = kvc_inflight_apply_enter(table, 1);
	kvc_inflight_apply_leave(table, 1, stuck);
	struct drain_arg a = {.target = 1, .timeout_ms = 60000};
	pthread_t thread;
	pthread_create(&thread, NULL, drainer, &a);
	usleep(100 * 1000);
	cr_assert_not(atomic_load(&a.returned), "the drain did not wait for the later apply");
	kvc_inflight_apply_leave(table, 1, later);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&a.rc), 0);
}
