/* Unit tests of kvc-storage's in-flight chain writes (storage/inflight.h):
 * one holder per chunk, others wait for it (bounded), busy while held,
 * distinct chunks and targets independent; a range hold (a range
 * operation) excludes the chunks of its range both ways, not others, is
 * not starved by them, and ends exactly itself; a drain of applies waits
 * for the older ones only. */
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

/* A range hold, as a range operation takes it. */
struct range_arg {
	uint32_t target;
	uint64_t inode;
	uint32_t first, last; /* a chunk hold when range is false: first */
	bool range;
	int timeout_ms;
	struct kvc_inflight_hold *hold;
	atomic_int rc;
	atomic_bool returned;
};

static void *holder(void *p)
{
	struct range_arg *a = p;
	int rc = a->range ? kvc_inflight_begin_range(table, a->target, a->inode, a->first, a->last,
	                                             a->timeout_ms, &a->hold)
	                  : kvc_inflight_begin(table, a->target, a->inode, a->first, a->timeout_ms);
	atomic_store(&a->rc, rc);
	atomic_store(&a->returned, true);
	return NULL;
}

Test(inflight, a_range_hold_excludes_its_chunks_both_ways_and_no_others)
{
	struct kvc_inflight_hold *h = NULL, *other = NULL;
	cr_assert_eq(kvc_inflight_begin_range(table, 1, 7, 2, 5, 1000, &h), 0);
	cr_assert_not_null(h);
	for (uint32_t c = 2; c <= 5; c++)
		cr_assert(kvc_inflight_busy(table, 1, 7, c), "reads of chunk %u ask the tail", c);
	cr_assert_not(kvc_inflight_busy(table, 1, 7, 1), "a chunk before the range");
	cr_assert_not(kvc_inflight_busy(table, 1, 7, 6), "a chunk after it");
	cr_assert_not(kvc_inflight_busy(table, 1, 8, 3), "another inode");
	cr_assert_not(kvc_inflight_busy(table, 2, 7, 3), "another target");
	cr_assert_eq(kvc_inflight_begin(table, 1, 7, 3, 50), -ETIMEDOUT, "a chunk in it waits");
	cr_assert_eq(kvc_inflight_begin(table, 1, 7, 6, 50), 0, "a chunk outside it does not");
	kvc_inflight_end(table, 1, 7, 6);
	cr_assert_eq(kvc_inflight_begin_range(table, 1, 7, 5, 9, 50, &other), -ETIMEDOUT,
	             "an overlapping range waits");
	cr_assert_null(other);
	cr_assert_eq(kvc_inflight_begin_range(table, 1, 7, 6, 9, 50, &other), 0,
	             "a range beside it does not");
	kvc_inflight_end_range(table, other);
	kvc_inflight_end(table, 1, 7, 3); /* a chunk not held: the range hold stays */
	cr_assert(kvc_inflight_busy(table, 1, 7, 3));
	/* a chunk waiting for it goes on once it ends */
	struct range_arg a = {.target = 1, .inode = 7, .first = 3, .timeout_ms = 60000};
	pthread_t thread;
	pthread_create(&thread, NULL, holder, &a);
	usleep(100 * 1000);
	cr_assert_not(atomic_load(&a.returned));
	kvc_inflight_end_range(table, h);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&a.rc), 0);
	/* and the other way: a range hold waits for a chunk held before it */
	struct range_arg w = {.target = 1, .inode = 7, .first = 0, .last = UINT32_MAX,
	                      .range = true, .timeout_ms = 60000};
	pthread_create(&thread, NULL, holder, &w);
	usleep(100 * 1000);
	cr_assert_not(atomic_load(&w.returned), "a range hold did not wait for a chunk");
	kvc_inflight_end(table, 1, 7, 3);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&w.rc), 0);
	kvc_inflight_end_range(table, w.hold);
	cr_assert_not(kvc_inflight_busy(table, 1, 7, 3));
	kvc_inflight_end_range(table, NULL); /* nothing */
	cr_assert_eq(kvc_inflight_begin_range(table, 1, 7, 5, 4, 50, &other), -EINVAL);
}

Test(inflight, a_waiting_range_hold_keeps_new_chunks_out_and_gives_up_cleanly)
{
	cr_assert_eq(kvc_inflight_begin(table, 4, 9, 0, 1000), 0);
	struct range_arg w = {.target = 4, .inode = 9, .first = 0, .last = 10, .range = true,
	                      .timeout_ms = 60000};
	pthread_t thread;
	pthread_create(&thread, NULL, holder, &w);
	usleep(100 * 1000);
	/* while it waits for chunk 0, chunk 1 is not handed out: a stream of
	 * writes cannot starve a range operation */
	cr_assert_eq(kvc_inflight_begin(table, 4, 9, 1, 50), -ETIMEDOUT);
	kvc_inflight_end(table, 4, 9, 0);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&w.rc), 0);
	kvc_inflight_end_range(table, w.hold);
	/* one that times out takes its entry back, and only its own */
	struct kvc_inflight_hold *first = NULL, *late = NULL;
	cr_assert_eq(kvc_inflight_begin(table, 4, 9, 20, 1000), 0);
	cr_assert_eq(kvc_inflight_begin_range(table, 4, 9, 0, 5, 1000, &first), 0);
	/* beside the first, so it goes in, then times out on chunk 20 */
	cr_assert_eq(kvc_inflight_begin_range(table, 4, 9, 10, UINT32_MAX, 50, &late), -ETIMEDOUT);
	cr_assert_null(late);
	cr_assert(kvc_inflight_busy(table, 4, 9, 3), "the first hold is still there");
	cr_assert_not(kvc_inflight_busy(table, 4, 9, 30), "the timed-out one is gone");
	kvc_inflight_end_range(table, first);
	kvc_inflight_end(table, 4, 9, 20);
	cr_assert_not(kvc_inflight_busy(table, 4, 9, 0));
}

Test(inflight, a_long_range_finds_chunks_held_far_apart)
{
	/* past the probing limit the range looks through every bucket */
	cr_assert_eq(kvc_inflight_begin(table, 2, 5, 4000000, 1000), 0);
	struct kvc_inflight_hold *h = NULL;
	cr_assert_eq(kvc_inflight_begin_range(table, 2, 5, 10, UINT32_MAX, 50, &h), -ETIMEDOUT);
	cr_assert_eq(kvc_inflight_begin_range(table, 2, 5, 10, 3999999, 50, &h), 0);
	kvc_inflight_end_range(table, h);
	kvc_inflight_end(table, 2, 5, 4000000);
	cr_assert_eq(kvc_inflight_begin_range(table, 2, 5, 10, UINT32_MAX, 50, &h), 0);
	kvc_inflight_end_range(table, h);
}
