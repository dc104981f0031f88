/* Unit tests of the meta store: namespace operations, their errors,
 * nlink bookkeeping, the gc queue and reopen from LMDB. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta/meta_store.h"
#include "test_dir.h"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_meta_store *store;
static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 2,
                                           .chain_count = 3};

static void setup(void)
{
	kvc_test_dir_make(dir, "meta");
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
}

static void teardown(void)
{
	kvc_meta_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(meta_store, .init = setup, .fini = teardown);

#define N(s) (s), (uint32_t)strlen(s)

static uint64_t mkfile(uint64_t parent, const char *name)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_create(store, parent, N(name), 0644, 1000, 1000, true, &a), 0);
	return a.ino;
}

static uint64_t mkdir_(uint64_t parent, const char *name)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_mkdir(store, parent, N(name), 0755, 0, 0, &a), 0);
	return a.ino;
}

Test(meta_store, root_exists)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_getattr(store, KVC_META_ROOT, &a), 0);
	cr_assert(S_ISDIR(a.mode));
	cr_assert_eq(a.nlink, 2);
	cr_assert_eq(a.layout.chunk_size, 1u << 20);
}

Test(meta_store, create_lookup_and_exclusive)
{
	struct kvc_attr a, b;
	cr_assert_eq(kvc_meta_store_create(store, 1, N("f"), 0640, 7, 8, true, &a), 0);
	cr_assert(S_ISREG(a.mode));
	cr_assert_eq(a.mode & 0777, 0640);
	cr_assert_eq(a.uid, 7);
	cr_assert_eq(a.layout.stripe, 2);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("f"), &b), 0);
	cr_assert_eq(a.ino, b.ino);
	cr_assert_eq(kvc_meta_store_create(store, 1, N("f"), 0640, 7, 8, true, &b), -EEXIST);
	cr_assert_eq(kvc_meta_store_create(store, 1, N("f"), 0640, 7, 8, false, &b), 0);
	cr_assert_eq(a.ino, b.ino, "plain create opens the existing file");
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("nope"), &b), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, a.ino, N("x"), &b), -ENOTDIR);
	cr_assert_eq(kvc_meta_store_create(store, 1, N("a/b"), 0640, 0, 0, true, &b), -EINVAL);
}

Test(meta_store, placement_rotates_first_target)
{
	struct kvc_attr a, b, c;
	cr_assert_eq(kvc_meta_store_create(store, 1, N("p1"), 0644, 0, 0, true, &a), 0);
	cr_assert_eq(kvc_meta_store_create(store, 1, N("p2"), 0644, 0, 0, true, &b), 0);
	cr_assert_eq(kvc_meta_store_create(store, 1, N("p3"), 0644, 0, 0, true, &c), 0);
	cr_assert_neq(a.layout.first_chain, b.layout.first_chain);
	cr_assert_neq(b.layout.first_chain, c.layout.first_chain);
	cr_assert_lt(c.layout.first_chain, 3);
}

Test(meta_store, mkdir_rmdir_and_nlink)
{
	uint64_t d = mkdir_(1, "d");
	struct kvc_attr root, a;
	kvc_meta_store_getattr(store, 1, &root);
	cr_assert_eq(root.nlink, 3);
	mkfile(d, "inner");
	cr_assert_eq(kvc_meta_store_rmdir(store, 1, N("d")), -ENOTEMPTY);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("d")), -EISDIR);
	cr_assert_eq(kvc_meta_store_rmdir(store, d, N("inner")), -ENOTDIR);
	cr_assert_eq(kvc_meta_store_unlink(store, d, N("inner")), 0);
	cr_assert_eq(kvc_meta_store_rmdir(store, 1, N("d")), 0);
	kvc_meta_store_getattr(store, 1, &root);
	cr_assert_eq(root.nlink, 2);
	cr_assert_eq(kvc_meta_store_getattr(store, d, &a), -ENOENT);
	cr_assert_eq(kvc_meta_store_mkdir(store, 1, N("e"), 0755, 0, 0, &a), 0);
	cr_assert_eq(kvc_meta_store_mkdir(store, 1, N("e"), 0755, 0, 0, &a), -EEXIST);
}

static int collect_names(void *arg, const char *name, uint32_t len, const struct kvc_attr *attr)
{
	char *out = arg;
	(void)attr;
	strncat(out, name, len);
	strcat(out, ",");
	return 0;
}

Test(meta_store, readdir_pages_in_order)
{
	char names[256] = "";
	bool more;
	mkfile(1, "c");
	mkfile(1, "a");
	mkfile(1, "b");
	mkdir_(1, "d");
	cr_assert_eq(kvc_meta_store_readdir(store, 1, "", 0, 2, collect_names, names, &more), 2);
	cr_assert_str_eq(names, "a,b,");
	cr_assert(more);
	names[0] = '\0';
	cr_assert_eq(kvc_meta_store_readdir(store, 1, N("b"), 10, collect_names, names, &more), 2);
	cr_assert_str_eq(names, "c,d,");
	cr_assert_not(more);
}

Test(meta_store, rename_moves_replaces_and_refuses_cycles)
{
	uint64_t d1 = mkdir_(1, "d1");
	uint64_t d2 = mkdir_(d1, "d2");
	uint64_t f = mkfile(1, "f");
	uint64_t g = mkfile(1, "g");
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("d1"), d2, N("x"), 0), -EINVAL);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("d1"), d1, N("x"), 0), -EINVAL);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("f"), 1, N("g"), KVC_RENAME_NOREPLACE), -EEXIST);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("f"), 1, N("g"), 0), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("g"), &a), 0);
	cr_assert_eq(a.ino, f);
	cr_assert_eq(kvc_meta_store_getattr(store, g, &a), -ENOENT, "replaced file is gone");
	uint64_t inos[4];
	struct kvc_layout layouts[4];
	cr_assert_eq(kvc_meta_store_gc_list(store, inos, layouts, 4), 1);
	cr_assert_eq(inos[0], g, "its chunks are queued for the collector");
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("g"), d1, N("moved"), 0), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, d1, N("moved"), &a), 0);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("d1"), 1, N("g2"), 0), 0);
	mkfile(1, "file");
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("g2"), 1, N("file"), 0), -ENOTDIR);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("file"), 1, N("g2"), 0), -EISDIR);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("missing"), 1, N("z"), 0), -ENOENT);
	/* moving a directory moves its nlink share */
	uint64_t d3 = mkdir_(1, "d3");
	cr_assert_eq(kvc_meta_store_rename(store, d1, N("d2"), d3, N("d2"), 0), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, d3, &a), 0);
	cr_assert_eq(a.nlink, 3);
	cr_assert_eq(kvc_meta_store_getattr(store, d1, &a), 0);
	cr_assert_eq(a.nlink, 2);
}

Test(meta_store, setattr_and_extend)
{
	uint64_t f = mkfile(1, "f");
	struct kvc_attr a;
	struct kvc_msg_setattr m = {.ino = f, .mask = KVC_SETATTR_MODE | KVC_SETATTR_UID |
	                                              KVC_SETATTR_SIZE | KVC_SETATTR_MTIME,
	                            .mode = 0600, .uid = 55, .size = 1ull << 40, .mtime_ns = 123};
	cr_assert_eq(kvc_meta_store_setattr(store, &m, &a), 0);
	cr_assert(S_ISREG(a.mode));
	cr_assert_eq(a.mode & 07777, 0600);
	cr_assert_eq(a.uid, 55);
	cr_assert_eq(a.size, 1ull << 40);
	cr_assert_eq(a.mtime_ns, 123);
	cr_assert_eq(kvc_meta_store_extend(store, f, 10, &a), 0);
	cr_assert_eq(a.size, 1ull << 40, "extend never shrinks");
	cr_assert_eq(kvc_meta_store_extend(store, f, (1ull << 40) + 5, &a), 0);
	cr_assert_eq(a.size, (1ull << 40) + 5);
	m = (struct kvc_msg_setattr){.ino = 1, .mask = KVC_SETATTR_SIZE};
	cr_assert_eq(kvc_meta_store_setattr(store, &m, &a), -EISDIR);
	m = (struct kvc_msg_setattr){.ino = f, .mask = 1u << 20};
	cr_assert_eq(kvc_meta_store_setattr(store, &m, &a), -EINVAL);
}

Test(meta_store, everything_survives_reopen)
{
	uint64_t d = mkdir_(1, "keep");
	uint64_t f = mkfile(d, "file");
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_extend(store, f, 4096, &a), 0);
	mkfile(1, "gone");
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("gone")), 0);
	kvc_meta_store_close(store);
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("file"), &a), 0);
	cr_assert_eq(a.ino, f);
	cr_assert_eq(a.size, 4096);
	uint64_t inos[4];
	struct kvc_layout layouts[4];
	cr_assert_eq(kvc_meta_store_gc_list(store, inos, layouts, 4), 1);
	cr_assert_eq(kvc_meta_store_gc_done(store, inos[0]), 0);
	cr_assert_eq(kvc_meta_store_gc_list(store, inos, layouts, 4), 0);
	/* new inode numbers continue after the old ones */
	uint64_t g = mkfile(1, "new");
	cr_assert_gt(g, f);
	uint64_t count;
	cr_assert_eq(kvc_meta_store_count_inodes(store, &count), 0);
	cr_assert_eq(count, 4);
}

Test(meta_store, the_gc_queue_lists_from_above_an_inode)
{
	uint64_t made[3], inos[4];
	struct kvc_layout layouts[4];
	const char *names[3] = {"q1", "q2", "q3"};
	for (int i = 0; i < 3; i++) {
		made[i] = mkfile(1, names[i]);
		cr_assert_eq(kvc_meta_store_unlink(store, 1, names[i], 2), 0);
	}
	cr_assert_eq(kvc_meta_store_gc_list_after(store, made[0], inos, layouts, 4), 2,
	             "past the first: the collector goes on past one that keeps failing");
	cr_assert_eq(inos[0], made[1]);
	cr_assert_eq(inos[1], made[2]);
	cr_assert_eq(kvc_meta_store_gc_list_after(store, made[2], inos, layouts, 4), 0);
	cr_assert_eq(kvc_meta_store_gc_list_after(store, 0, inos, layouts, 2), 2, "at most max");
	cr_assert_eq(inos[0], made[0]);
	cr_assert_eq(kvc_meta_store_gc_list_after(store, UINT64_MAX, inos, layouts, 4), -EINVAL);
}

static int gc_count(void)
{
	uint64_t inos[8];
	struct kvc_layout layouts[8];
	return kvc_meta_store_gc_list(store, inos, layouts, 8);
}

Test(meta_store, a_file_removed_while_open_stays_until_its_last_close)
{
	const uint8_t a[KVC_META_CLIENT_ID] = "client-a", b[KVC_META_CLIENT_ID] = "client-b";
	struct kvc_attr attr;
	uint64_t f = mkfile(1, "open");
	cr_assert_eq(kvc_meta_store_open_session(store, f, a, &attr), 0);
	cr_assert_eq(attr.ino, f);
	cr_assert_eq(kvc_meta_store_open_session(store, f, b, &attr), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("open")), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("open"), &attr), -ENOENT, "no name");
	cr_assert_eq(kvc_meta_store_getattr(store, f, &attr), 0, "the inode stays for its readers");
	cr_assert_eq(attr.nlink, 0);
	cr_assert_eq(gc_count(), 0, "its chunks are not reclaimed yet");
	struct kvc_meta_counts counts;
	cr_assert_eq(kvc_meta_store_counts(store, &counts), 0);
	cr_assert_eq(counts.open_sessions, 2);
	cr_assert_eq(counts.orphans, 1);
	cr_assert_eq(counts.gc_pending, 0);
	cr_assert_eq(kvc_meta_store_close_session(store, f, a), 0);
	cr_assert_eq(gc_count(), 0, "b still has it open");
	uint8_t clients[4][KVC_META_CLIENT_ID];
	cr_assert_eq(kvc_meta_store_session_clients(store, clients, 4), 1);
	cr_assert_eq(memcmp(clients[0], b, KVC_META_CLIENT_ID), 0);
	cr_assert_eq(kvc_meta_store_drop_client(store, b, NULL), 1, "b is declared gone");
	cr_assert_eq(gc_count(), 1, "now the chunks go");
	cr_assert_eq(kvc_meta_store_getattr(store, f, &attr), -ENOENT);
	/* Replacing an open file by rename keeps it the same way. */
	uint64_t g = mkfile(1, "victim");
	mkfile(1, "newer");
	cr_assert_eq(kvc_meta_store_open_session(store, g, a, &attr), 0);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("newer"), 1, N("victim"), 0), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, g, &attr), 0);
	cr_assert_eq(gc_count(), 1);
	cr_assert_eq(kvc_meta_store_close_session(store, g, a), 0);
	cr_assert_eq(gc_count(), 2);
	/* A closed file that was never removed is just closed. */
	uint64_t h = mkfile(1, "plain");
	cr_assert_eq(kvc_meta_store_open_session(store, h, a, &attr), 0);
	cr_assert_eq(kvc_meta_store_close_session(store, h, a), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, h, &attr), 0);
	cr_assert_eq(kvc_meta_store_open_session(store, 999999, a, &attr), -ENOENT);
}

Test(meta_store, sessions_are_listed_and_dropped_per_client)
{
	uint8_t ids[3][KVC_META_CLIENT_ID] = {"client-1", "client-2", "client-3"};
	struct kvc_attr attr;
	char name[16];
	for (int f = 0; f < 3; f++) {
		snprintf(name, sizeof(name), "f%d", f);
		uint64_t ino = mkfile(1, name);
		for (int c = 0; c < 3; c++)
			cr_assert_eq(kvc_meta_store_open_session(store, ino, ids[c], &attr), 0);
	}
	uint8_t got[8][KVC_META_CLIENT_ID];
	cr_assert_eq(kvc_meta_store_session_clients(store, got, 8), 3, "each client once");
	cr_assert_eq(kvc_meta_store_session_clients(store, got, 2), 2, "at most max");
	cr_assert_eq(kvc_meta_store_drop_client(store, ids[1], NULL), 3);
	cr_assert_eq(kvc_meta_store_drop_client(store, ids[1], NULL), 0, "nothing left of it");
	cr_assert_eq(kvc_meta_store_session_clients(store, got, 8), 2);
	struct kvc_meta_counts counts;
	cr_assert_eq(kvc_meta_store_counts(store, &counts), 0);
	cr_assert_eq(counts.open_sessions, 6);
}

static int set_size(uint64_t ino, uint64_t size)
{
	struct kvc_attr a;
	struct kvc_msg_setattr m = {.ino = ino, .mask = KVC_SETATTR_SIZE, .size = size};
	return kvc_meta_store_setattr(store, &m, &a);
}

/* A shrink commits its size and records the cut of the chunks beyond it;
 * until the cut is done the file does not grow, so no byte beyond the new
 * size is ever inside the size again before it was cut. */
Test(meta_store, a_shrink_records_its_cut_and_holds_growth_until_done)
{
	uint64_t f = mkfile(1, "f"), g = mkfile(1, "g"), size, inos[4];
	struct kvc_attr a;
	cr_assert_eq(set_size(f, 10 << 20), 0);
	cr_assert_eq(kvc_meta_store_truncate_pending(store, f, &size), 0, "growing cuts nothing");
	cr_assert_eq(set_size(f, 4 << 20), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f, &a), 0);
	cr_assert_eq(a.size, 4 << 20, "the size commits first");
	cr_assert_eq(kvc_meta_store_truncate_pending(store, f, &size), 1);
	cr_assert_eq(size, 4 << 20);
	cr_assert_eq(kvc_meta_store_extend(store, f, 5 << 20, &a), -EAGAIN, "no growth");
	cr_assert_eq(set_size(f, 6 << 20), -EAGAIN);
	cr_assert_eq(kvc_meta_store_extend(store, f, 4 << 20, &a), 0, "no change is fine");
	struct kvc_msg_setattr chmod = {.ino = f, .mask = KVC_SETATTR_MODE, .mode = 0600};
	cr_assert_eq(kvc_meta_store_setattr(store, &chmod, &a), 0, "other attributes change");
	/* A deeper cut while one is pending: the record names the deeper one;
	 * the first cut's done leaves it. */
	cr_assert_eq(set_size(f, 1 << 20), 0);
	cr_assert_eq(set_size(f, 2 << 20), -EAGAIN);
	cr_assert_eq(kvc_meta_store_truncate_done(store, f, 4 << 20), 0);
	cr_assert_eq(kvc_meta_store_truncate_pending(store, f, &size), 1);
	cr_assert_eq(size, 1 << 20);
	cr_assert_eq(kvc_meta_store_truncates_list(store, inos, 4), 1);
	cr_assert_eq(inos[0], f);
	cr_assert_eq(kvc_meta_store_truncate_done(store, f, 1 << 20), 0);
	cr_assert_eq(kvc_meta_store_truncate_pending(store, f, &size), 0);
	cr_assert_eq(kvc_meta_store_extend(store, f, 5 << 20, &a), 0, "grows once cut");
	cr_assert_eq(a.size, 5 << 20);
	/* The record survives a restart, and goes with its inode. */
	cr_assert_eq(set_size(g, 100), 0);
	cr_assert_eq(set_size(g, 0), 0);
	kvc_meta_store_close(store);
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(kvc_meta_store_truncate_pending(store, g, &size), 1);
	cr_assert_eq(size, 0);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("g")), 0);
	cr_assert_eq(kvc_meta_store_truncate_pending(store, g, &size), 0);
	cr_assert_eq(kvc_meta_store_truncates_list(store, inos, 4), 0);
}
