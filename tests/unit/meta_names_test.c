/* Unit tests of the meta store's object types and links (meta_names.c,
 * meta_xattrs.c): mknod, symlinks, hard links with nlink and ctime, the
 * last link of an open file, renames over links, user xattrs and their
 * limits, and records written before device numbers existed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "meta/meta_store.h"
#include "test_dir.h"

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_meta_store *store;
static const struct kvc_layout defaults = {.chunk_size = 1 << 20, .stripe = 2,
                                           .chain_count = 3};

static void setup(void)
{
	kvc_test_dir_make(dir, "names");
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
}

static void teardown(void)
{
	kvc_meta_store_close(store);
	kvc_test_dir_remove(dir);
}

TestSuite(meta_names, .init = setup, .fini = teardown);

#define N(s) (s), (uint32_t)strlen(s)

static struct kvc_attr mkfile(uint64_t parent, const char *name)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_create(store, parent, N(name), 0644, 1000, 1000, true, &a), 0);
	return a;
}

static uint64_t gc_count(void)
{
	struct kvc_meta_counts c;
	cr_assert_eq(kvc_meta_store_counts(store, &c), 0);
	return c.gc_pending;
}

Test(meta_names, mknod_makes_every_type)
{
	struct kvc_attr a;
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("fifo"), S_IFIFO | 0600, 0, 1, 2, &a), 0);
	cr_assert(S_ISFIFO(a.mode));
	cr_assert_eq(a.layout.chunk_size, 0, "no data, no layout");
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("sock"), S_IFSOCK | 0600, 0, 1, 2, &a), 0);
	cr_assert(S_ISSOCK(a.mode));
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("null"), S_IFCHR | 0666, makedev(1, 3), 0, 0,
	                                  &a), 0);
	cr_assert(S_ISCHR(a.mode));
	cr_assert_eq(major(a.rdev), 1);
	cr_assert_eq(minor(a.rdev), 3);
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("blk"), S_IFBLK | 0600, makedev(259, 70000),
	                                  0, 0, &a), 0);
	cr_assert_eq(major(a.rdev), 259);
	cr_assert_eq(minor(a.rdev), 70000);
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("reg"), 0644, 0, 0, 0, &a), 0);
	cr_assert(S_ISREG(a.mode), "mknod type 0 is a regular file");
	cr_assert_neq(a.layout.chunk_size, 0);
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("fifo"), S_IFIFO | 0600, 0, 0, 0, &a),
	             -EEXIST);
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("d"), S_IFDIR | 0755, 0, 0, 0, &a), -EINVAL);
	cr_assert_eq(kvc_meta_store_create(store, 1, N("fifo"), 0644, 0, 0, false, &a), -EEXIST,
	             "a plain create does not open a fifo");
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("null"), &a), 0);
	cr_assert_eq(minor(a.rdev), 3);
}

Test(meta_names, symlinks_keep_their_target)
{
	struct kvc_attr a, b;
	char target[KVC_WIRE_MAX_SYMLINK + 1];
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("l"), N("../some/where"), 5, 6, &a), 0);
	cr_assert(S_ISLNK(a.mode));
	cr_assert_eq(a.size, strlen("../some/where"));
	cr_assert_eq(a.uid, 5);
	int n = kvc_meta_store_readlink(store, a.ino, target, sizeof(target));
	cr_assert_eq(n, (int)strlen("../some/where"));
	cr_assert_eq(memcmp(target, "../some/where", (size_t)n), 0);
	cr_assert_eq(kvc_meta_store_readlink(store, a.ino, target, 3), -ERANGE);
	b = mkfile(1, "f");
	cr_assert_eq(kvc_meta_store_readlink(store, b.ino, target, sizeof(target)), -EINVAL);
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("l"), N("x"), 0, 0, &b), -EEXIST);
	memset(target, 'a', sizeof(target));
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("long"), target, KVC_WIRE_MAX_SYMLINK,
	                                    0, 0, &b), 0);
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("longer"), target,
	                                    KVC_WIRE_MAX_SYMLINK + 1, 0, 0, &b), -ENAMETOOLONG);
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("empty"), "", 0, 0, 0, &b), -EINVAL);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("l")), 0);
	n = kvc_meta_store_readlink(store, a.ino, target, sizeof(target));
	cr_assert_eq(n, -ENOENT, "readlink after unlink: %d", n);
	cr_assert_eq(gc_count(), 0, "a symlink has no chunks to reclaim");
}

Test(meta_names, hard_links_count_names)
{
	struct kvc_attr f = mkfile(1, "f"), a, d;
	cr_assert_eq(kvc_meta_store_mkdir(store, 1, N("d"), 0755, 0, 0, &d), 0);
	cr_assert_eq(kvc_meta_store_link(store, f.ino, d.ino, N("g"), &a), 0);
	cr_assert_eq(a.ino, f.ino);
	cr_assert_eq(a.nlink, 2);
	cr_assert_geq(a.ctime_ns, f.ctime_ns);
	cr_assert_eq(kvc_meta_store_lookup(store, d.ino, N("g"), &a), 0);
	cr_assert_eq(a.ino, f.ino);
	cr_assert_eq(kvc_meta_store_link(store, f.ino, d.ino, N("g"), &a), -EEXIST);
	cr_assert_eq(kvc_meta_store_link(store, d.ino, 1, N("dl"), &a), -EPERM);
	cr_assert_eq(kvc_meta_store_link(store, 999999, 1, N("x"), &a), -ENOENT);
	cr_assert_eq(kvc_meta_store_link(store, f.ino, f.ino, N("x"), &a), -ENOTDIR);
	/* One name goes: the file stays, with nlink 1, and no gc. */
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("f")), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f.ino, &a), 0);
	cr_assert_eq(a.nlink, 1);
	cr_assert_eq(gc_count(), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, d.ino, N("g")), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f.ino, &a), -ENOENT);
	cr_assert_eq(gc_count(), 1, "the last name sends the chunks to the gc queue");
}

Test(meta_names, last_link_of_an_open_file)
{
	struct kvc_attr f = mkfile(1, "f"), a;
	uint8_t client[KVC_META_CLIENT_ID] = {1};
	cr_assert_eq(kvc_meta_store_link(store, f.ino, 1, N("g"), &a), 0);
	cr_assert_eq(kvc_meta_store_open_session(store, f.ino, client, &a), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("f")), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("g")), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f.ino, &a), 0, "kept while open");
	cr_assert_eq(a.nlink, 0);
	cr_assert_eq(kvc_meta_store_link(store, f.ino, 1, N("back"), &a), -ENOENT);
	cr_assert_eq(gc_count(), 0);
	cr_assert_eq(kvc_meta_store_close_session(store, f.ino, client), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f.ino, &a), -ENOENT);
	cr_assert_eq(gc_count(), 1);
}

Test(meta_names, rename_over_links_and_types)
{
	struct kvc_attr f = mkfile(1, "f"), a, d, l;
	cr_assert_eq(kvc_meta_store_link(store, f.ino, 1, N("g"), &a), 0);
	/* Two names of one file: rename does nothing, both stay. */
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("f"), 1, N("g"), 0), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("f"), &a), 0);
	cr_assert_eq(a.nlink, 2);
	/* Another file over one of the names: the linked file keeps one. */
	struct kvc_attr h = mkfile(1, "h");
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("h"), 1, N("g"), 0), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f.ino, &a), 0);
	cr_assert_eq(a.nlink, 1);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("g"), &a), 0);
	cr_assert_eq(a.ino, h.ino);
	/* Symlinks, fifos and files replace each other; directories do not. */
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("l"), N("f"), 0, 0, &l), 0);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("l"), 1, N("g"), 0), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("g"), &a), 0);
	cr_assert(S_ISLNK(a.mode));
	cr_assert_eq(kvc_meta_store_mknod(store, 1, N("p"), S_IFIFO | 0644, 0, 0, 0, &a), 0);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("p"), 1, N("g"), 0), 0);
	cr_assert_eq(kvc_meta_store_mkdir(store, 1, N("d"), 0755, 0, 0, &d), 0);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("g"), 1, N("d"), 0), -EISDIR);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("d"), 1, N("g"), 0), -ENOTDIR);
	cr_assert_eq(kvc_meta_store_rename(store, 1, N("f"), 1, N("g"), KVC_RENAME_NOREPLACE),
	             -EEXIST);
}

Test(meta_names, user_xattrs)
{
	struct kvc_attr f = mkfile(1, "f"), a, l;
	char buf[256];
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.a"), "1", 1, 0), 0);
	cr_assert_eq(kvc_meta_store_getattr(store, f.ino, &a), 0);
	cr_assert_geq(a.ctime_ns, f.ctime_ns);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.b"), "", 0, 0), 0);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.a"), "22", 2,
	                                     KVC_XATTR_CREATE), -EEXIST);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.c"), "3", 1,
	                                     KVC_XATTR_REPLACE), -ENODATA);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.a"), "22", 2,
	                                     KVC_XATTR_REPLACE), 0);
	cr_assert_eq(kvc_meta_store_getxattr(store, f.ino, N("user.a"), buf, sizeof(buf)), 2);
	cr_assert_eq(memcmp(buf, "22", 2), 0);
	cr_assert_eq(kvc_meta_store_getxattr(store, f.ino, N("user.a"), NULL, 0), 2);
	cr_assert_eq(kvc_meta_store_getxattr(store, f.ino, N("user.a"), buf, 1), -ERANGE);
	cr_assert_eq(kvc_meta_store_getxattr(store, f.ino, N("user.b"), buf, sizeof(buf)), 0);
	cr_assert_eq(kvc_meta_store_getxattr(store, f.ino, N("user.zz"), buf, sizeof(buf)),
	             -ENODATA);
	cr_assert_eq(kvc_meta_store_getxattr(store, 999999, N("user.a"), buf, sizeof(buf)),
	             -ENOENT);
	int n = kvc_meta_store_listxattr(store, f.ino, buf, sizeof(buf));
	cr_assert_eq(n, (int)sizeof("user.a\0user.b"));
	cr_assert_eq(memcmp(buf, "user.a\0user.b", (size_t)n), 0);
	cr_assert_eq(kvc_meta_store_listxattr(store, f.ino, buf, 4), -ERANGE);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("trusted.a"), "1", 1, 0),
	             -EOPNOTSUPP);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user."), "1", 1, 0), -EINVAL);
	static char big[KVC_WIRE_MAX_XATTR_VALUE + 1];
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.big"), big, sizeof(big), 0),
	             -E2BIG);
	cr_assert_eq(kvc_meta_store_setxattr(store, f.ino, N("user.big"), big, sizeof(big) - 1,
	                                     0), 0);
	cr_assert_eq(kvc_meta_store_removexattr(store, f.ino, N("user.a")), 0);
	cr_assert_eq(kvc_meta_store_removexattr(store, f.ino, N("user.a")), -ENODATA);
	cr_assert_eq(kvc_meta_store_symlink(store, 1, N("l"), N("f"), 0, 0, &l), 0);
	cr_assert_eq(kvc_meta_store_setxattr(store, l.ino, N("user.a"), "1", 1, 0), -EPERM);
	/* They go with the inode. */
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("f")), 0);
	struct kvc_attr g = mkfile(1, "f");
	cr_assert_eq(kvc_meta_store_listxattr(store, g.ino, buf, sizeof(buf)), 0);
}

Test(meta_names, xattr_limits_per_inode)
{
	struct kvc_attr f = mkfile(1, "f");
	static char value[KVC_WIRE_MAX_XATTR_VALUE];
	char name[32];
	int rc = 0, i;
	for (i = 0; i < 64 && rc == 0; i++) {
		snprintf(name, sizeof(name), "user.v%d", i);
		rc = kvc_meta_store_setxattr(store, f.ino, N(name), value, sizeof(value), 0);
	}
	cr_assert_eq(rc, -ENOSPC, "values past KVC_META_MAX_XATTR_BYTES are refused");
	cr_assert_eq(i - 1, (int)(KVC_META_MAX_XATTR_BYTES / sizeof(value)));
}

/* A store written before device numbers existed holds 88-byte inode
 * records: they read with rdev 0 and are rewritten in the new size. */
Test(meta_names, old_inode_records_still_read)
{
	struct kvc_attr f = mkfile(1, "old"), a;
	kvc_meta_store_close(store);
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 16ull << 30), 0);
	cr_assert_eq(mdb_env_open(env, dir, MDB_NOTLS, 0600), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "inodes", 0, &dbi), 0);
	uint8_t key[8];
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)(f.ino >> (56 - 8 * i));
	MDB_val k = {8, key}, v;
	cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
	cr_assert_eq(v.mv_size, sizeof(struct kvc_inode_record));
	uint8_t old[KVC_INODE_RECORD_V1_SIZE];
	memcpy(old, v.mv_data, sizeof(old));
	v = (MDB_val){sizeof(old), old};
	cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("old"), &a), 0);
	cr_assert_eq(a.ino, f.ino);
	cr_assert_eq(a.rdev, 0);
	cr_assert_eq(a.layout.chunk_size, f.layout.chunk_size);
	cr_assert_eq(kvc_meta_store_link(store, f.ino, 1, N("new"), &a), 0);
	cr_assert_eq(a.nlink, 2);
}
