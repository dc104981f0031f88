/* meta_fixture: what the unit tests of meta_store's batch messages
 * (meta_adopt_test.c, meta_remove_many_test.c) share: a store in a
 * fresh directory, a message body being built, and short ways to make
 * and look at files. Test-only; each helper asserts its own success. */
#ifndef KVC_TEST_META_FIXTURE_H
#define KVC_TEST_META_FIXTURE_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "meta/meta_store.h"
#include "test_dir.h"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_meta_store *store;
static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 1,
                                           .chain_count = 3};

static inline void meta_fixture_open(const char *name)
{
	kvc_test_dir_make(dir, name);
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
}

static inline void meta_fixture_close(void)
{
	kvc_meta_store_close(store);
	kvc_test_dir_remove(dir);
}

#define N(s) (s), (uint32_t)strlen(s)
#define MAX_RECORDS 16

/* A body being built: the records after the message's head (the largest
 * record, kvc_msg_adopt_record, and a name of up to 300 bytes each). */
struct body {
	uint8_t bytes[MAX_RECORDS * (sizeof(struct kvc_msg_adopt_record) + 300)];
	uint32_t len, count;
};

static inline void add(struct body *b, const void *p, uint32_t n)
{
	cr_assert_leq(b->len + n, sizeof(b->bytes));
	memcpy(b->bytes + b->len, p, n);
	b->len += n;
}

static inline struct kvc_meta_counts counts(void)
{
	struct kvc_meta_counts c;
	cr_assert_eq(kvc_meta_store_counts(store, &c), 0);
	return c;
}

static inline uint64_t mkdir_at(uint64_t parent, const char *name)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_mkdir(store, parent, N(name), 0755, 0, 0, &a), 0);
	return a.ino;
}

static inline struct kvc_attr mkfile(uint64_t parent, const char *name)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_create(store, parent, N(name), 0644, 1, 1, true, &a), 0);
	return a;
}

static inline struct kvc_attr attr_of(uint64_t ino)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_getattr(store, ino, &a), 0);
	return a;
}

/* Let the clock move, so that a touched time is later. */
static inline void tick(void)
{
	nanosleep(&(struct timespec){0, 2000000}, NULL);
}

/* Whether ino waits in the collector's queue. */
static inline bool in_gc(uint64_t ino)
{
	uint64_t inos[64];
	struct kvc_layout layouts[64];
	int n = kvc_meta_store_gc_list(store, inos, layouts, 64);
	cr_assert_geq(n, 0);
	for (int i = 0; i < n; i++)
		if (inos[i] == ino)
			return true;
	return false;
}

#endif
