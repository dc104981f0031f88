/* Unit tests of open-session leases: dropping a silent client, and the
 * drop's record, which tells the client however many other clients were
 * dropped since and whatever restarted in between, until it rejoins. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta_store.h"
#include "meta/sessions.h"
#include "test_dir.h"

#define TIMEOUT 3000

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_meta_store *store;
static struct kvc_meta_sessions *sessions;
static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 1,
                                           .chain_count = 1};

static void setup(void)
{
	kvc_test_dir_make(dir, "sessions");
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(kvc_meta_sessions_create(TIMEOUT, &sessions), 0);
}

static void teardown(void)
{
	kvc_meta_sessions_destroy(sessions);
	kvc_meta_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(meta_sessions, .init = setup, .fini = teardown);

static void id_of(uint8_t id[KVC_META_CLIENT_ID], unsigned n)
{
	memset(id, 0, KVC_META_CLIENT_ID);
	memcpy(id, "client", 6);
	id[12] = (uint8_t)(n >> 24), id[13] = (uint8_t)(n >> 16);
	id[14] = (uint8_t)(n >> 8), id[15] = (uint8_t)n;
}

/* A client opens a new file at time `at`. */
static uint64_t open_one(const uint8_t *id, uint64_t at)
{
	struct kvc_attr a;
	char name[32];
	static unsigned next;
	snprintf(name, sizeof(name), "f%u", next++);
	cr_assert_eq(kvc_meta_store_create(store, KVC_META_ROOT, name, (uint32_t)strlen(name),
	                                   0644, 0, 0, true, &a), 0);
	cr_assert_eq(kvc_meta_store_open_session(store, a.ino, id, &a), 0);
	kvc_meta_sessions_touch(sessions, id, at);
	return a.ino;
}

static int renew(const uint8_t *id, uint32_t flags, uint64_t at)
{
	return kvc_meta_sessions_renew(sessions, store, id, flags, at);
}

Test(meta_sessions, a_live_client_renews_and_a_silent_one_is_dropped)
{
	uint8_t a[KVC_META_CLIENT_ID], b[KVC_META_CLIENT_ID];
	id_of(a, 1);
	id_of(b, 2);
	open_one(a, 1000);
	open_one(b, 1000);
	cr_assert_eq(renew(a, 0, 2000), -EREMCHG, "told to open its files again after a start");
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, 2001), 0);
	cr_assert_eq(renew(a, 0, 3000), 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 4500), 1, "b is silent");
	cr_assert_eq(renew(a, 0, 4600), 0, "a renewed in time");
	cr_assert_eq(renew(b, 0, 4600), -ESTALE);
	cr_assert_eq(renew(b, 0, 4700), -ESTALE, "told until it rejoins, not once");
	struct kvc_meta_dropped d;
	cr_assert_eq(kvc_meta_store_client_dropped(store, b, &d), 1);
	cr_assert_eq(d.drops, 1);
	cr_assert_eq(d.files, 1);
	cr_assert_eq(kvc_meta_store_client_dropped(store, a, &d), 0);
	cr_assert_eq(renew(b, KVC_RENEW_REJOIN, 4800), 0, "rejoins after reopening");
	cr_assert_eq(renew(b, 0, 4900), 0);
	cr_assert_eq(kvc_meta_store_client_dropped(store, b, &d), 0, "the record is gone");
	cr_assert_eq(renew(b, 2, 5000), -EINVAL, "unknown flags");
}

/* The 256-entry ring of old forgot a client after 256 newer drops, and
 * all of them at a restart: the record does neither. */
Test(meta_sessions, the_word_survives_many_drops_and_restarts)
{
	uint8_t first[KVC_META_CLIENT_ID];
	id_of(first, 0);
	open_one(first, 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 0), 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, TIMEOUT + 1), 1);
	for (unsigned i = 1; i <= 300; i++) {
		uint8_t id[KVC_META_CLIENT_ID];
		id_of(id, i);
		uint64_t at = (uint64_t)i * 10 * TIMEOUT;
		open_one(id, at);
		cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, at + TIMEOUT + 1), 1);
	}
	/* kvc-meta restarts: a new sessions table, the store reopened. */
	kvc_meta_sessions_destroy(sessions);
	kvc_meta_store_close(store);
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(kvc_meta_sessions_create(TIMEOUT, &sessions), 0);
	cr_assert_eq(renew(first, 0, 10), -ESTALE, "after 300 drops and a restart");
	cr_assert_eq(renew(first, KVC_RENEW_REJOIN, 20), 0);
	cr_assert_eq(renew(first, 0, 30), 0);
}

/* Rejoining without having been told (e.g. told before a restart) tells
 * it again instead of forgetting the drop. */
Test(meta_sessions, rejoin_needs_the_word_of_this_drop)
{
	uint8_t a[KVC_META_CLIENT_ID];
	id_of(a, 7);
	open_one(a, 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 0), 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, TIMEOUT + 1), 1);
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, TIMEOUT + 2), -ESTALE, "never told");
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, TIMEOUT + 3), 0, "told by the answer above");
}

/* Dropped again while it was reopening its files: its rejoin (for the
 * first drop) is refused, so it reopens again instead of reading holes. */
Test(meta_sessions, dropped_again_while_reopening_is_told_again)
{
	uint8_t a[KVC_META_CLIENT_ID];
	id_of(a, 9);
	open_one(a, 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 0), 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, TIMEOUT + 1), 1);
	cr_assert_eq(renew(a, 0, TIMEOUT + 2), -ESTALE);
	/* It reopens one file, then stalls past the timeout. */
	open_one(a, TIMEOUT + 3);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 3 * TIMEOUT), 1);
	struct kvc_meta_dropped d;
	cr_assert_eq(kvc_meta_store_client_dropped(store, a, &d), 1);
	cr_assert_eq(d.drops, 2);
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, 3 * TIMEOUT + 1), -ESTALE, "a second drop");
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, 3 * TIMEOUT + 2), 0);
}

/* A client with no session left is not dropped (nothing to tell), and a
 * restart gives every client the whole timeout again. */
Test(meta_sessions, restarts_never_drop_a_live_client)
{
	uint8_t a[KVC_META_CLIENT_ID];
	id_of(a, 11);
	uint64_t ino = open_one(a, 0);
	kvc_meta_sessions_destroy(sessions);
	cr_assert_eq(kvc_meta_sessions_create(TIMEOUT, &sessions), 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 50 * TIMEOUT), 0, "first seen now");
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, 50 * TIMEOUT + 5), -EREMCHG,
	             "a REJOIN this process did not ask for (the process before did) says nothing");
	cr_assert_eq(renew(a, 0, 50 * TIMEOUT + 10), -EREMCHG, "a new process: open them again");
	cr_assert_eq(renew(a, KVC_RENEW_REJOIN, 50 * TIMEOUT + 11), 0);
	cr_assert_eq(renew(a, 0, 50 * TIMEOUT + 12), 0, "told once a process");
	cr_assert_eq(kvc_meta_store_close_session(store, ino, a), 0);
	cr_assert_eq(kvc_meta_sessions_sweep(sessions, store, 100 * TIMEOUT), 0);
	cr_assert_eq(renew(a, 0, 100 * TIMEOUT + 1), 0);
}
