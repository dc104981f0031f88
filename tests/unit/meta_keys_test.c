/* Unit tests of kvc-meta's batched key operations (meta/meta_keys.c):
 * each name of a KEYS_* message gets its own result, a temp is a
 * nameless file its client has open, a publish names it and gives it its
 * size (never replacing without the flag), and malformed records change
 * nothing. */
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

static void publish_record(struct records *r, uint64_t size, uint64_t temp, const char *name)
{
	uint32_t n = (uint32_t)strlen(name);
	add(r, &size, 8);
	add(r, &temp, 8);
	add(r, &n, 4);
	add(r, name, n);
}

static const uint8_t client_a[KVC_META_CLIENT_ID] = "client-a-123456";
static const uint8_t client_b[KVC_META_CLIENT_ID] = "client-b-123456";

/* Run one message of type over the names (or publish records), sent by
 * client. */
static int run_as(const uint8_t *client, uint16_t type, uint64_t parent, uint32_t flags,
                  const struct records *r, uint32_t count, struct kvc_msg_key_result *out)
{
	struct kvc_msg_keys m = {.parent = parent, .count = count, .flags = flags, .mode = 0644,
	                         .uid = 7, .gid = 8};
	memcpy(m.client, client, KVC_META_CLIENT_ID);
	return kvc_meta_keys_run(store, type, &m, r->bytes, r->len, out);
}

static int run(uint16_t type, uint64_t parent, uint32_t flags, const struct records *r,
               uint32_t count, struct kvc_msg_key_result *out)
{
	return run_as(client_a, type, parent, flags, r, count, out);
}

/* count temps made by client (their inodes in temps). */
static void make_temps(const uint8_t *client, uint64_t parent, uint32_t count, uint64_t *temps)
{
	struct kvc_msg_key_result out[8];
	struct records none = {.len = 0};
	cr_assert_leq(count, 8);
	cr_assert_eq(run_as(client, KVC_MSG_KEYS_CREATE, parent, 0, &none, count, out), 0);
	for (uint32_t i = 0; i < count; i++) {
		cr_assert_eq(out[i].rc, 0);
		cr_assert(S_ISREG(out[i].attr.mode));
		cr_assert_eq(out[i].attr.nlink, 0, "a temp has no name");
		temps[i] = out[i].attr.ino;
	}
}

static struct kvc_meta_counts counts(void)
{
	struct kvc_meta_counts c;
	cr_assert_eq(kvc_meta_store_counts(store, &c), 0);
	return c;
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
	struct kvc_attr before, attr;
	cr_assert_eq(kvc_meta_store_getattr(store, parent, &before), 0);
	uint64_t temps[2];
	make_temps(client_a, parent, 2, temps);
	cr_assert_neq(temps[0], temps[1]);
	cr_assert_eq(counts().orphans, 2, "nameless, kept while client a has them");
	cr_assert_eq(kvc_meta_store_getattr(store, parent, &attr), 0);
	cr_assert_eq(attr.mtime_ns, before.mtime_ns, "making temps names nothing");

	publish_record(&r, 65536, temps[0], "key-a");
	publish_record(&r, 100, temps[1], "..");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 2, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[0].attr.size, 65536);
	cr_assert_eq(out[0].attr.nlink, 1);
	cr_assert_eq(out[0].attr.uid, 7);
	cr_assert_eq(out[0].attr.gid, 8);
	cr_assert_eq(out[1].rc, -EINVAL, "a bad name fails alone");
	r.len = 0;
	publish_record(&r, 100, temps[1], "key-b");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(counts().orphans, 0, "published: named files");
	cr_assert_eq(counts().open_sessions, 0, "publishing ends the temp's session");

	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key-a", 5, &attr), 0);
	cr_assert_eq(attr.size, 65536);
	cr_assert_eq(attr.ino, temps[0]);

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
	uint64_t temps[3];
	make_temps(client_a, parent, 3, temps);
	publish_record(&r, 10, temps[0], "key");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, 0);
	uint64_t gc_before = counts().gc_pending;
	r.len = 0;
	publish_record(&r, 20, temps[1], "key");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, -EEXIST);
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key", 3, &attr), 0);
	cr_assert_eq(attr.size, 10, "the first key stands");
	cr_assert_eq(counts().gc_pending, gc_before + 1, "the refused temp is reclaimed");
	cr_assert_eq(counts().orphans, 1, "temps[2] only");
	/* with the flag the old file goes to the collector */
	r.len = 0;
	publish_record(&r, 30, temps[2], "key");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, KVC_KEYS_REPLACE, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "key", 3, &attr), 0);
	cr_assert_eq(attr.ino, temps[2]);
	cr_assert_eq(counts().gc_pending, gc_before + 2);
}

/* A temp is its client's: another client, a number that is no temp, a
 * temp published or closed already, all get -ESTALE and change nothing.
 * A client dropped (dead kvc-fuse) leaves nothing behind: its temps are
 * reclaimed with its sessions, and it makes no new ones until it rejoins. */
Test(meta_keys, temps_belong_to_their_client_and_go_with_it)
{
	uint64_t parent = key_dir();
	struct kvc_msg_key_result out[4];
	struct records r = {.len = 0};
	uint64_t a[2], b[1];
	make_temps(client_a, parent, 2, a);
	make_temps(client_b, parent, 1, b);
	publish_record(&r, 1, a[0], "stolen");
	publish_record(&r, 1, parent, "dir");  /* not a temp: a directory */
	publish_record(&r, 1, 999999, "none"); /* no such inode */
	cr_assert_eq(run_as(client_b, KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 3, out), 0);
	cr_assert_eq(out[0].rc, -ESTALE, "a's temp, b's publish");
	cr_assert_eq(out[1].rc, -ESTALE);
	cr_assert_eq(out[2].rc, -ESTALE);
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "stolen", 6, &attr), -ENOENT);
	cr_assert_eq(counts().orphans, 3);

	/* a file of client a's whose last name went while a had it open is
	 * nameless and open too, but no temp: no publish names it again */
	struct kvc_attr made;
	cr_assert_eq(kvc_meta_store_create(store, parent, "open", 4, 0644, 7, 8, true, &made), 0);
	cr_assert_eq(kvc_meta_store_open_session(store, made.ino, client_a, &attr), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, parent, "open", 4), 0);
	r.len = 0;
	publish_record(&r, 1, made.ino, "revived");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, -ESTALE);
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "revived", 7, &attr), -ENOENT);
	cr_assert_eq(kvc_meta_store_close_session(store, made.ino, client_a), 0);

	/* a closed temp (a failed write's) is reclaimed and cannot be published */
	uint64_t gc_before = counts().gc_pending;
	cr_assert_eq(kvc_meta_store_close_session(store, a[1], client_a), 0);
	cr_assert_eq(counts().gc_pending, gc_before + 1);
	r.len = 0;
	publish_record(&r, 1, a[1], "late");
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, -ESTALE);

	/* client b dies mid-put: dropped, its temp goes; its publish after is
	 * -ESTALE and its creates too until it rejoins */
	cr_assert_geq(kvc_meta_store_drop_client(store, client_b, NULL), 1);
	cr_assert_eq(counts().gc_pending, gc_before + 2);
	r.len = 0;
	publish_record(&r, 1, b[0], "b-key");
	cr_assert_eq(run_as(client_b, KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), 0);
	cr_assert_eq(out[0].rc, -ESTALE);
	struct records none = {.len = 0};
	cr_assert_eq(run_as(client_b, KVC_MSG_KEYS_CREATE, parent, 0, &none, 1, out), -ESTALE);
	cr_assert_eq(counts().orphans, 1, "a[0] only");
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "b-key", 5, &attr), -ENOENT);
}

Test(meta_keys, malformed_records_change_nothing)
{
	uint64_t parent = key_dir();
	struct kvc_msg_key_result out[2];
	struct records r = {.len = 0};
	name_record(&r, "x");
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, parent, 0, &r, 1, out), -EINVAL, "a create has no records");
	r.len = 0;
	uint32_t huge = 1u << 30;
	add(&r, &huge, 4);
	cr_assert_eq(run(KVC_MSG_KEYS_LOOKUP, parent, 0, &r, 1, out), -EINVAL);
	r.len = 0;
	name_record(&r, "x");
	cr_assert_eq(run(KVC_MSG_KEYS_REMOVE, parent, 0, &r, 2, out), -EINVAL, "count past the body");
	r.len = 0;
	publish_record(&r, 1, 5, "x");
	r.len--; /* a name cut short */
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), -EINVAL);
	r.len++;
	r.bytes[r.len++] = 0; /* a byte past the last record */
	cr_assert_eq(run(KVC_MSG_KEYS_PUBLISH, parent, 0, &r, 1, out), -EINVAL);
	struct kvc_attr attr;
	cr_assert_eq(kvc_meta_store_lookup(store, parent, "x", 1, &attr), -ENOENT);
	cr_assert_eq(counts().orphans, 0);
	struct records none = {.len = 0};
	cr_assert_eq(run(KVC_MSG_KEYS_CREATE, 999999, 0, &none, 1, out) < 0, 1,
	             "a missing directory fails the message");
	cr_assert_eq(run(KVC_MSG_KEYS_REMOVE + 1, parent, 0, &none, 0, out), -EOPNOTSUPP);
	cr_assert_eq(run(KVC_MSG_KEYS_LOOKUP - 1, parent, 0, &none, 0, out), -EOPNOTSUPP);
}
