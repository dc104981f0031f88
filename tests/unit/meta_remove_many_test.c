/* Unit tests of REMOVE_MANY (meta/meta_adopt.c): many names of one or
 * more directories removed in one transaction as UNLINK removes them,
 * each only while it names the inode sent; each record gets its own
 * result (a bad one changes nothing and the others go on), malformed
 * bodies change nothing, and a message sent again removes nothing more. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "meta/meta_adopt.h"
#include "meta_fixture.h"

static const uint8_t client[KVC_WIRE_CLIENT_ID] = "remove-client-1";

static void setup(void)
{
	meta_fixture_open("remove_many");
}

TestSuite(meta_remove_many, .init = setup, .fini = meta_fixture_close);

static void record_r(struct body *b, uint64_t parent, uint64_t ino, const char *name,
                     uint32_t name_len, uint32_t reserved)
{
	struct kvc_msg_remove_record rec = {.parent = parent, .ino = ino, .name_len = name_len,
	                                    .reserved = reserved};
	add(b, &rec, sizeof(rec));
	add(b, name, name_len);
	b->count++;
}

static void record(struct body *b, uint64_t parent, uint64_t ino, const char *name,
                   uint32_t name_len)
{
	record_r(b, parent, ino, name, name_len, 0);
}

/* What kvc-meta's handler does with a body: parse, then run. */
static int remove_as(uint32_t count, uint32_t reserved, const uint8_t *bytes, uint32_t len,
                     struct kvc_msg_key_result *out)
{
	struct kvc_msg_remove_many m = {.count = count, .reserved = reserved};
	struct kvc_meta_remove_record *recs = calloc(count ? count : 1, sizeof(*recs));
	cr_assert_not_null(recs);
	int rc = kvc_meta_remove_many_parse(&m, bytes, len, recs);
	if (rc == 0)
		rc = kvc_meta_remove_many_run(store, &m, recs, out);
	free(recs);
	return rc;
}

static int remove_many(const struct body *b, struct kvc_msg_key_result *out)
{
	return remove_as(b->count, 0, b->bytes, b->len, out);
}

Test(meta_remove_many, files_of_two_directories_go_in_one_message)
{
	uint64_t d1 = mkdir_at(1, "d1"), d2 = mkdir_at(1, "d2");
	struct kvc_attr a = mkfile(d1, "a"), b = mkfile(d1, "b"), c = mkfile(d2, "c");
	struct kvc_attr keep = mkfile(d1, "keep"), got;
	struct kvc_attr before1 = attr_of(d1), before2 = attr_of(d2);
	struct kvc_meta_counts cb = counts();
	tick();
	struct body body = {0};
	record(&body, d1, a.ino, N("a"));
	record(&body, d2, c.ino, N("c"));
	record(&body, d1, b.ino, N("b"));
	struct kvc_msg_key_result out[3];
	cr_assert_eq(remove_many(&body, out), 0);
	uint64_t want[] = {a.ino, c.ino, b.ino};
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(out[i].rc, 0, "record %d: %d", i, out[i].rc);
		cr_assert_eq(out[i].attr.ino, want[i]);
		cr_assert_eq(out[i].attr.nlink, 0, "its last name went");
		cr_assert(S_ISREG(out[i].attr.mode));
		cr_assert_eq(kvc_meta_store_getattr(store, want[i], &got), -ENOENT);
		cr_assert(in_gc(want[i]), "record %d's inode waits for the collector", i);
	}
	cr_assert_eq(kvc_meta_store_lookup(store, d1, N("a"), &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, d1, N("b"), &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, d2, N("c"), &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, d1, N("keep"), &got), 0);
	cr_assert_eq(got.ino, keep.ino);

	struct kvc_attr after1 = attr_of(d1), after2 = attr_of(d2);
	cr_assert_gt(after1.mtime_ns, before1.mtime_ns, "the parents' mtime moves");
	cr_assert_gt(after1.ctime_ns, before1.ctime_ns);
	cr_assert_gt(after2.mtime_ns, before2.mtime_ns);
	cr_assert_gt(after2.ctime_ns, before2.ctime_ns);
	cr_assert_eq(after1.nlink, before1.nlink, "files take no link of their parent");
	struct kvc_meta_counts ca = counts();
	cr_assert_eq(ca.inodes, cb.inodes - 3);
	cr_assert_eq(ca.gc_pending, cb.gc_pending + 3);
	cr_assert_eq(ca.orphans, 0);
}

Test(meta_remove_many, open_file_becomes_an_orphan)
{
	struct kvc_attr f = mkfile(1, "open"), held, got;
	cr_assert_eq(kvc_meta_store_open_session(store, f.ino, client, &held), 0);
	struct body b = {0};
	record(&b, 1, f.ino, N("open"));
	struct kvc_msg_key_result out[1];
	cr_assert_eq(remove_many(&b, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[0].attr.ino, f.ino);
	cr_assert_eq(out[0].attr.nlink, 0);
	struct kvc_meta_counts c = counts();
	cr_assert_eq(c.orphans, 1, "kept, nameless, while open");
	cr_assert_eq(c.gc_pending, 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("open"), &got), -ENOENT);
	got = attr_of(f.ino);
	cr_assert_eq(got.nlink, 0);
	cr_assert_eq(kvc_meta_store_close_session(store, f.ino, client), 0);
	c = counts();
	cr_assert_eq(c.orphans, 0);
	cr_assert_eq(c.gc_pending, 1, "the last close frees it");
	cr_assert(in_gc(f.ino));
}

Test(meta_remove_many, a_hard_link_keeps_the_inode)
{
	struct kvc_attr f = mkfile(1, "f"), linked, got;
	uint64_t d = mkdir_at(1, "d");
	cr_assert_eq(kvc_meta_store_link(store, f.ino, d, N("g"), &linked), 0);
	cr_assert_eq(linked.nlink, 2);
	struct body b = {0};
	record(&b, 1, f.ino, N("f"));
	struct kvc_msg_key_result out[1];
	cr_assert_eq(remove_many(&b, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[0].attr.ino, f.ino);
	cr_assert_eq(out[0].attr.nlink, 1, "the reply has the inode after, nlink lowered");
	got = attr_of(f.ino);
	cr_assert_eq(got.nlink, 1);
	cr_assert_eq(memcmp(&got, &out[0].attr, sizeof(got)), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("g"), &got), 0);
	cr_assert_eq(got.ino, f.ino);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("f"), &got), -ENOENT);
	cr_assert_eq(counts().gc_pending, 0);
	cr_assert(!in_gc(f.ino));
}

Test(meta_remove_many, a_name_of_another_inode_stays)
{
	struct kvc_attr old = mkfile(1, "n"), got;
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("n")), 0);
	struct kvc_attr now = mkfile(1, "n"); /* another client's newer file */
	struct kvc_attr before = attr_of(1);
	struct kvc_meta_counts cb = counts();
	tick();
	struct body b = {0};
	record(&b, 1, old.ino, N("n"));
	struct kvc_msg_key_result out[1];
	cr_assert_eq(remove_many(&b, out), 0);
	cr_assert_eq(out[0].rc, -ENOENT, "the name names another inode now");
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("n"), &got), 0);
	cr_assert_eq(got.ino, now.ino, "the other file stays");
	struct kvc_attr after = attr_of(1);
	cr_assert_eq(after.mtime_ns, before.mtime_ns, "nothing changed: the parent is untouched");
	struct kvc_meta_counts ca = counts();
	cr_assert_eq(memcmp(&cb, &ca, sizeof(cb)), 0);
}

Test(meta_remove_many, each_bad_record_fails_alone)
{
	uint64_t d = mkdir_at(1, "d");
	uint64_t sub = mkdir_at(d, "sub");
	struct kvc_attr f = mkfile(d, "f"), ok = mkfile(d, "ok"), got;
	char long_name[KVC_WIRE_MAX_NAME + 1];
	memset(long_name, 'x', sizeof(long_name));
	struct body b = {0};
	struct {
		uint64_t parent, ino;
		const char *name;
		uint32_t name_len, reserved;
		int rc;
	} cases[] = {
		{d, f.ino + 1000, N("missing"), 0, -ENOENT},
		{d, sub, N("sub"), 0, -EISDIR},
		{12345, f.ino, N("f"), 0, -ENOENT},   /* no such parent */
		{f.ino, f.ino, N("f"), 0, -ENOTDIR}, /* a file as parent */
		{d, f.ino, N("."), 0, -EINVAL},
		{d, f.ino, N(".."), 0, -EINVAL},
		{d, f.ino, N("a/b"), 0, -EINVAL},
		{d, f.ino, long_name, sizeof(long_name), 0, -ENAMETOOLONG},
		{d, f.ino, "", 0, 0, -EINVAL},
		{d, f.ino, N("f"), 1, -EINVAL}, /* reserved not 0 */
		{d, f.ino, N("F"), 0, -ENOENT},
		{d, ok.ino, N("ok"), 0, 0}, /* the batch's last record succeeds */
	};
	size_t n = sizeof(cases) / sizeof(cases[0]);
	for (size_t i = 0; i < n; i++)
		record_r(&b, cases[i].parent, cases[i].ino, cases[i].name, cases[i].name_len,
		         cases[i].reserved);
	struct kvc_meta_counts cb = counts();
	struct kvc_msg_key_result out[MAX_RECORDS];
	cr_assert_eq(remove_many(&b, out), 0);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(out[i].rc, cases[i].rc, "record %zu (%.*s): %d", i,
		             (int)(cases[i].name_len > 20 ? 20 : cases[i].name_len), cases[i].name,
		             out[i].rc);
	cr_assert_eq(out[n - 1].attr.ino, ok.ino);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("f"), &got), 0, "f stays");
	cr_assert_eq(got.ino, f.ino);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("sub"), &got), 0, "sub stays");
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("ok"), &got), -ENOENT);
	struct kvc_meta_counts ca = counts();
	cr_assert_eq(ca.inodes, cb.inodes - 1, "only ok went");
	cr_assert_eq(ca.gc_pending, cb.gc_pending + 1);
}

Test(meta_remove_many, malformed_bodies_change_nothing)
{
	struct kvc_attr a = mkfile(1, "one"), b2 = mkfile(1, "two"), got;
	struct body b = {0};
	record(&b, 1, a.ino, N("one"));
	record(&b, 1, b2.ino, N("two"));
	struct kvc_msg_key_result out[KVC_WIRE_MAX_KEYS + 1];
	struct kvc_meta_counts before = counts();
	uint32_t second = (uint32_t)(sizeof(struct kvc_msg_remove_record) + 3);

	cr_assert_eq(remove_as(2, 0, b.bytes, b.len - 1, out), -EINVAL, "last name cut");
	cr_assert_eq(remove_as(2, 0, b.bytes, second + 10, out), -EINVAL, "record cut");
	cr_assert_eq(remove_as(2, 0, b.bytes, second, out), -EINVAL, "record missing");
	cr_assert_eq(remove_as(1, 0, b.bytes, second + 1, out), -EINVAL, "trailing byte");
	cr_assert_eq(remove_as(3, 0, b.bytes, b.len, out), -EINVAL, "count past the records");
	cr_assert_eq(remove_as(0, 0, b.bytes, 0, out), -EINVAL, "count 0");
	cr_assert_eq(remove_as(KVC_WIRE_MAX_KEYS + 1, 0, b.bytes, b.len, out), -EINVAL,
	             "count over KVC_WIRE_MAX_KEYS");
	cr_assert_eq(remove_as(2, 1, b.bytes, b.len, out), -EINVAL, "message reserved not 0");

	/* A name_len that runs past the body's end, and one past any name. */
	struct body past = b;
	struct kvc_msg_remove_record rec;
	memcpy(&rec, past.bytes + second, sizeof(rec));
	rec.name_len = 200;
	memcpy(past.bytes + second, &rec, sizeof(rec));
	cr_assert_eq(remove_as(2, 0, past.bytes, past.len, out), -EINVAL, "name past the end");
	struct body huge = {0};
	record(&huge, 1, a.ino, N("x"));
	memcpy(&rec, huge.bytes, sizeof(rec));
	rec.name_len = UINT32_MAX;
	memcpy(huge.bytes, &rec, sizeof(rec));
	cr_assert_eq(remove_as(1, 0, huge.bytes, huge.len, out), -EINVAL, "name_len wraps");

	/* The run refuses a count out of range by itself too. */
	struct kvc_msg_remove_many zero = {0};
	cr_assert_eq(kvc_meta_remove_many_run(store, &zero, NULL, out), -EINVAL);

	struct kvc_meta_counts after = counts();
	cr_assert_eq(memcmp(&before, &after, sizeof(before)), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("one"), &got), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("two"), &got), 0);
	/* The well-formed body goes through. */
	cr_assert_eq(remove_many(&b, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[1].rc, 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("one"), &got), -ENOENT);
}

Test(meta_remove_many, sent_twice_removes_once)
{
	uint64_t d = mkdir_at(1, "d");
	struct kvc_attr a = mkfile(d, "a"), b2 = mkfile(1, "b");
	struct body b = {0};
	record(&b, d, a.ino, N("a"));
	record(&b, 1, b2.ino, N("b"));
	struct kvc_msg_key_result out[2];
	cr_assert_eq(remove_many(&b, out), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[1].rc, 0);
	struct kvc_meta_counts cb = counts();
	struct kvc_attr d_before = attr_of(d), root_before = attr_of(1);
	tick();
	/* Sent again (its answer was lost): nothing is left to remove. */
	cr_assert_eq(remove_many(&b, out), 0);
	cr_assert_eq(out[0].rc, -ENOENT);
	cr_assert_eq(out[1].rc, -ENOENT);
	struct kvc_meta_counts ca = counts();
	cr_assert_eq(memcmp(&cb, &ca, sizeof(cb)), 0);
	struct kvc_attr d_after = attr_of(d), root_after = attr_of(1);
	cr_assert_eq(d_after.mtime_ns, d_before.mtime_ns);
	cr_assert_eq(root_after.mtime_ns, root_before.mtime_ns);
}
