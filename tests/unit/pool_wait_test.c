/* Unit tests of waiting for complete keys (meta/pool_store_wait.c): a
 * waiter stays blocked until the last rank confirms, then wakes; the
 * timeout names the keys still missing; a clear, an end fd and the limits
 * end a wait with their errors. No test depends on timing: waits that
 * must wake have minutes to spare, and a timeout is asserted only where
 * the keys can never complete. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "meta/pool_store.h"
#include "test_dir.h"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_pool_store *store;

static void setup(void)
{
	kvc_test_dir_make(dir, "pool-wait");
	cr_assert_eq(kvc_pool_store_open(dir, &store), 0);
	for (uint32_t rank = 0; rank < 2; rank++)
		cr_assert_eq(kvc_pool_init(store, "kv", rank, 64, 2), 0);
}

static void teardown(void)
{
	kvc_pool_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(pool_wait, .init = setup, .fini = teardown);

static struct kvc_pool_key K(const char *s)
{
	return (struct kvc_pool_key){s, (uint32_t)strlen(s)};
}

/* Allocate and confirm key on rank. */
static void write1(uint32_t rank, const char *key)
{
	struct kvc_pool_key k = K(key);
	struct kvc_pool_allocation a;
	int status = 99;
	cr_assert_eq(kvc_pool_allocate(store, "kv", rank, &k, 1, 0, &a), 0);
	cr_assert_geq(a.page, 0);
	cr_assert_eq(kvc_pool_confirm(store, "kv", rank, &k, &a.page, 1, NULL, 0, 0, &status), 0);
	cr_assert_eq(status, 0);
}

struct waiting {
	const char *ns;
	struct kvc_pool_key keys[3];
	uint32_t count;
	uint32_t timeout_ms;
	struct pollfd end; /* fd -1: none */
	bool complete[3];
	int rc;
	atomic_bool done;
	pthread_t thread;
};

static void *wait_main(void *arg)
{
	struct waiting *w = arg;
	w->rc = kvc_pool_wait(store, w->ns, w->keys, w->count, w->timeout_ms, &w->end,
	                      w->end.fd >= 0 ? 1 : 0, w->complete);
	atomic_store(&w->done, true);
	return NULL;
}

static void start_in(struct waiting *w, const char *ns, uint32_t timeout_ms, int end_fd)
{
	memset(w, 0, sizeof(*w));
	w->ns = ns;
	w->keys[0] = K("a");
	w->keys[1] = K("b");
	w->count = 2;
	w->timeout_ms = timeout_ms;
	w->end = (struct pollfd){.fd = end_fd, .events = POLLIN};
	cr_assert_eq(pthread_create(&w->thread, NULL, wait_main, w), 0);
}

static void start(struct waiting *w, uint32_t timeout_ms, int end_fd)
{
	start_in(w, "kv", timeout_ms, end_fd);
}

Test(pool_wait, a_waiter_wakes_when_the_last_rank_confirms)
{
	struct waiting w;
	start(&w, 120000, -1);
	write1(0, "a");
	write1(0, "b");
	write1(1, "a");
	/* Not complete yet (b lacks rank 1): a correct wait cannot have
	 * returned; give a wrong one a moment to show. */
	usleep(100 * 1000);
	cr_assert_not(atomic_load(&w.done), "returned before every rank confirmed");
	write1(1, "b");
	pthread_join(w.thread, NULL);
	cr_assert_eq(w.rc, 0);
	cr_assert(w.complete[0] && w.complete[1]);
}

Test(pool_wait, complete_keys_answer_at_once_and_a_timeout_names_the_missing)
{
	struct kvc_pool_key keys[2] = {K("a"), K("b")};
	bool complete[2] = {false, true};
	write1(0, "a");
	write1(1, "a");
	write1(0, "b");
	cr_assert_eq(kvc_pool_wait(store, "kv", keys, 1, 0, NULL, 0, complete), 0);
	cr_assert(complete[0]);
	cr_assert_eq(kvc_pool_wait(store, "kv", keys, 2, 30, NULL, 0, complete), -ETIMEDOUT);
	cr_assert(complete[0] && !complete[1], "b lacks rank 1");
	cr_assert_eq(kvc_pool_wait(store, "kv", keys, 0, 0, NULL, 0, complete), 0, "no keys");
}

Test(pool_wait, a_clear_ends_the_waits_of_its_namespace)
{
	struct waiting w, other;
	int stop = eventfd(0, EFD_CLOEXEC);
	cr_assert_eq(kvc_pool_init(store, "elsewhere", 0, 4, 1), 0);
	start(&w, 120000, -1);
	start_in(&other, "elsewhere", 120000, stop);
	write1(0, "a");
	/* Clear until the wait ends: one clear may come before the waiter
	 * joined (then it has nothing to end). */
	for (int i = 0; i < 10000 && !atomic_load(&w.done); i++) {
		cr_assert_eq(kvc_pool_clear(store, "kv", 0), 0);
		usleep(1000);
	}
	pthread_join(w.thread, NULL);
	cr_assert_eq(w.rc, -ECANCELED);
	cr_assert(!w.complete[0] && !w.complete[1]);
	usleep(100 * 1000);
	cr_assert_not(atomic_load(&other.done), "a clear of kv ended a wait on another namespace");
	cr_assert_eq(eventfd_write(stop, 1), 0);
	pthread_join(other.thread, NULL);
	cr_assert_eq(other.rc, -ECONNABORTED);
	close(stop);
}

Test(pool_wait, an_end_fd_ends_a_wait)
{
	int stop = eventfd(0, EFD_CLOEXEC);
	struct waiting w;
	start(&w, 120000, stop);
	cr_assert_eq(eventfd_write(stop, 1), 0);
	pthread_join(w.thread, NULL);
	cr_assert_eq(w.rc, -ECONNABORTED);
	close(stop);
}

Test(pool_wait, limits)
{
	static struct kvc_pool_key many[KVC_POOL_MAX_WAIT_KEYS + 1];
	static bool complete[KVC_POOL_MAX_WAIT_KEYS + 1];
	for (uint32_t i = 0; i <= KVC_POOL_MAX_WAIT_KEYS; i++)
		many[i] = K("k");
	cr_assert_eq(kvc_pool_wait(store, "kv", many, KVC_POOL_MAX_WAIT_KEYS + 1, 0, NULL, 0,
	                           complete), -EINVAL);
	cr_assert_eq(kvc_pool_wait(store, "kv", many, 1, KVC_POOL_MAX_WAIT_MS + 1, NULL, 0,
	                           complete), -EINVAL);
	struct kvc_pool_key empty = {"", 0};
	cr_assert_eq(kvc_pool_wait(store, "kv", &empty, 1, 0, NULL, 0, complete), -EINVAL);
	cr_assert_eq(kvc_pool_wait(store, "", many, 1, 0, NULL, 0, complete), -EINVAL);
	cr_assert_eq(kvc_pool_wait(store, "nobody", many, 1, 0, NULL, 0, complete), -ENOENT);
	cr_assert_eq(kvc_pool_wait(store, "kv", many, KVC_POOL_MAX_WAIT_KEYS, 0, NULL, 0,
	                           complete), -ETIMEDOUT);
}

Test(pool_wait, waits_at_once_are_bounded, .timeout = 300)
{
	static struct waiting w[KVC_POOL_MAX_WAITS];
	int stop = eventfd(0, EFD_CLOEXEC);
	for (int i = 0; i < KVC_POOL_MAX_WAITS; i++)
		start(&w[i], 120000, stop);
	/* Once all have joined, one more is refused (until then it times out
	 * at once: timeout 0). However long the threads take to start (a
	 * loaded machine, sanitizers): the test's timeout bounds it. */
	struct kvc_pool_key a = K("a");
	bool complete;
	int rc;
	while ((rc = kvc_pool_wait(store, "kv", &a, 1, 0, NULL, 0, &complete)) != -EBUSY) {
		cr_assert_eq(rc, -ETIMEDOUT);
		usleep(1000);
	}
	cr_assert_eq(eventfd_write(stop, 1), 0);
	for (int i = 0; i < KVC_POOL_MAX_WAITS; i++) {
		pthread_join(w[i].thread, NULL);
		cr_assert_eq(w[i].rc, -ECONNABORTED);
	}
	cr_assert_eq(kvc_pool_wait(store, "kv", &a, 1, 0, NULL, 0, &complete), -ETIMEDOUT);
	close(stop);
}
