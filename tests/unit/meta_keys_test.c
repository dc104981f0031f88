/* Unit tests of kvc-meta's batched key operations (meta/meta_keys.c):
 * each name of a KEYS_* message gets its own result, a publish is a
 * rename that gives the file its size (never replacing without the flag),
 * and malformed records change nothing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta/meta_keys.h"
#include "meta/meta_store.h"
#include "test_dir.h"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_meta_store *store;
static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 1,
                                           .chain_count = 3};

static void setup(void)
{
	kvc_test_dir_make(dir, "keys");
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
}

static void teardown(void)
{
	kvc_meta_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(meta_keys, .init = setup, .fini = teardown);

struct records {
	uint8_t bytes[4096];
	uint32_t len;
};

static void add(struct records *r, const void *p, uint32_t n)
{
	cr_assert_leq(r->len + n, sizeof(r->bytes));
	memcpy(r->bytes + r->len, p, n);
	r->len += n;
}

static void name_record(struct records *r, const char *name)
{
	uint32_t len = (uint32_t)strlen(name);
	add(r, &len, 4);
	add(r, name, len);
}

static void publish_record(struct records *r, uint64_t size, const char *temp, const char *name)
{
	uint32_t t = (uint32_t)strlen(temp), n = (uint32_t)strlen(name);
	add(r, &size, 8);
	add(r, &t, 4);
	add(r, &n, 4);
	add(r, temp, t);
	add(r, name, n);
}

/* Run one message of type over the names (or publish records). */
static int run(uint16_t type, uint64_t parent, uint32_t flags, const struct records *r,
               uint32_t count, struct kvc_msg_key_result *out)
{
	struct kvc_msg_keys m = {.parent = parent, .count = count, .flags = flags, .mode = 0644,
	                         .uid = 7, .gid = 8};
	return kvc_meta_keys_run(store, type, &m, r->bytes, r->len, out);
}

static uint64_t key_dir(void)
{
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_mkdir(store, 1, "keys", 4, 0755, 0, 0, &attr), 0);
	return attr.ino;
}

Test(meta_keys, create_publish_lookup_remove_each_with_its_result)
{
	uint64_t parent = key_dir();
	struct kvc_msg_key_result out[4];
	struct records r = {.len = 0};
	name_record(&r, "t1");
	name_record(&r, "..");
	name_record(&r, "t2");
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, parent, 0, &r, 3, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[1].rc, -EINVAL, "a bad name fails alone");
	cr_assert_eq(out[2].rc, 0);
	cr_assert(S_ISREG(out[0].attr.mode));
	cr_assert_eq(out[0].attr.uid, 7);
	cr_assert_eq(out[0].attr.gid, 8);

	r.len = 0;
	publish_record(&r, 65536, "t1", "key-a");
	publish_record(&r, 100, "t2", "key-b");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 2, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[0].attr.size, 65536);
	cr_assert_eq(out[1].rc, 0);

	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "t1", 2, &attr), -ENOENT, "temp renamed");
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key-a", 5, &attr), 0);
	cr_assert_eq(attr.size, 65536);

	r.len = 0;
	name_record(&r, "key-a");
	name_record(&r, "missing");
	cr_assert_eq(run(KVC_MSG_KEYS_LOOKUP, parent, 0, &r, 2, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[0].attr.size, 65536);
	cr_assert_eq(out[1].rc, -ENOENT);

	cr_assert_eq(run(KVC_MSG_KEYS_REMOVE, parent, 0, &r, 2, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[1].rc, -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key-a", 5, &attr), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key-b", 5, &attr), 0);
}

Test(meta_keys, publish_never_replaces_without_the_flag)
{
	uint64_t parent = key_dir();
	struct kvc_msg_key_result out[2];
	struct records r = {.len = 0};
	name_record(&r, "a");
	name_record(&r, "b");
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, parent, 0, &r, 2, out), 0);
	r.len = 0;
	publish_record(&r, 10, "a", "key");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, 0);
	r.len = 0;
	publish_record(&r, 20, "b", "key");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, -EEXIST);
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key", 3, &attr), 0);
	cr_assert_eq(attr.size, 10, "the first key stands");
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "b", 1, &attr), -ENOENT,
	             "the refused temp is removed");
}

Test(meta_keys, malformed_records_change_nothing)
{
	uint64_t parent = key_dir();
	struct kvc_msg_key_result out[2];
	struct records r = {.len = 0};
	name_record(&r, "x");
	r.bytes[r.len++] = 0; /* a byte past the last record */
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, parent, 0, &r, 1, out), -EINVAL);
	r.len = 0;
	uint32_t huge = 1u << 30;
	add(&r, &huge, 4);
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, parent, 0, &r, 1, out), -EINVAL);
	r.len = 0;
	name_record(&r, "x");
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, parent, 0, &r, 2, out), -EINVAL, "count past the body");
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "x", 1, &attr), -ENOENT);
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, 999999, 0, &r, 1, out) < 0, 1,
	             "a missing directory fails the message");
}
