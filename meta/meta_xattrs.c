/*
 * meta_xattrs: an inode's extra records in the meta store: the target of
 * a symlink (`symlinks`: ino -> target bytes) and user extended
 * attributes (`xattrs`: ino + name -> value). Both go with their inode
 * (kvc_meta_extras_del).
 *
 * Rules, as Linux applies them to local filesystems: only the user.*
 * namespace is stored (others: EOPNOTSUPP), on regular files and
 * directories only (EPERM); names are 6..255 bytes, values at most 64 KiB;
 * the names of one inode fit a 64 KiB listxattr buffer and its values
 * KVC_META_MAX_XATTR_BYTES (ENOSPC past either). Setting or removing an
 * attribute changes the inode's ctime.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/lmdb_txn.h"
#include "meta/meta_store_internal.h"

#define XATTR_PREFIX "user."
#define XATTR_LIST_BYTES 65536 /* Linux's XATTR_LIST_MAX */

int kvc_meta_symlink_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const char *target, uint32_t len)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v = {len, (void *)target};
	return kvc_lmdb_errno(mdb_put(txn, s->symlinks, &k, &v, 0));
}

int kvc_meta_extras_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	MDB_cursor *cur;
	int rc = mdb_del(txn, s->symlinks, &k, NULL);
	rc = rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->xattrs, &cur));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (got == 0 && k.mv_size > 8 && memcmp(k.mv_data, key, 8) == 0) {
		got = mdb_cursor_del(cur, 0);
		if (got == 0)
			got = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
	}
	mdb_cursor_close(cur);
	return got == 0 || got == MDB_NOTFOUND || got == EINVAL ? 0 : kvc_lmdb_errno(got);
}

int kvc_meta_store_readlink(struct kvc_meta_store *s, uint64_t ino, char *out, uint32_t cap)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_meta_inode_get(s, txn, ino, &rec);
	if (rc == 0 && !S_ISLNK(rec.attr.mode))
		rc = -EINVAL;
	if (rc == 0) {
		rc = kvc_lmdb_errno(mdb_get(txn, s->symlinks, &k, &v));
		if (rc == -ENOENT)
			rc = -EIO; /* a symlink without its target: corrupt */
	}
	if (rc == 0 && (v.mv_size == 0 || v.mv_size > KVC_WIRE_MAX_SYMLINK))
		rc = -EIO;
	if (rc == 0 && v.mv_size > cap)
		rc = -ERANGE;
	if (rc == 0) {
		memcpy(out, v.mv_data, v.mv_size);
		rc = (int)v.mv_size;
	}
	mdb_txn_abort(txn);
	return rc;
}

static int check_name(const char *name, uint32_t len)
{
	if (len > KVC_WIRE_MAX_NAME)
		return -ERANGE;
	if (len <= sizeof(XATTR_PREFIX) - 1 || memchr(name, '\0', len))
		return len == 0 ? -ERANGE : -EINVAL;
	return memcmp(name, XATTR_PREFIX, sizeof(XATTR_PREFIX) - 1) == 0 ? 0 : -EOPNOTSUPP;
}

static size_t xattr_key(uint8_t *key, uint64_t ino, const char *name, uint32_t len)
{
	kvc_meta_be64(key, ino);
	memcpy(key + 8, name, len);
	return 8 + len;
}

/* The inode, checked to take user xattrs. */
static int xattr_inode(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       struct kvc_inode_record *rec)
{
	int rc = kvc_meta_inode_get(s, txn, ino, rec);
	if (rc == 0 && !S_ISREG(rec->attr.mode) && !S_ISDIR(rec->attr.mode))
		rc = -EPERM;
	return rc;
}

/* Walk ino's attributes: fn(arg, name, name_len, value_len) for each;
 * stops on a non-zero return. */
typedef int (*xattr_fn)(void *arg, const char *name, uint32_t len, size_t value_len);

static int each_xattr(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, xattr_fn fn,
                      void *arg)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	MDB_cursor *cur;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->xattrs, &cur));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && got == 0 && k.mv_size > 8 && memcmp(k.mv_data, key, 8) == 0) {
		rc = fn(arg, (const char *)k.mv_data + 8, (uint32_t)(k.mv_size - 8), v.mv_size);
		if (rc == 0)
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	if (rc == 0 && got != 0 && got != MDB_NOTFOUND)
		rc = kvc_lmdb_errno(got);
	return rc;
}

struct usage {
	const char *skip; /* the attribute being replaced */
	uint32_t skip_len;
	size_t names, values;
};

static int add_usage(void *arg, const char *name, uint32_t len, size_t value_len)
{
	struct usage *u = arg;
	if (len == u->skip_len && memcmp(name, u->skip, len) == 0)
		return 0;
	u->names += len + 1;
	u->values += value_len;
	return 0;
}

static int setxattr_txn(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, const char *name,
                        uint32_t name_len, const void *value, uint32_t value_len,
                        uint32_t flags)
{
	struct kvc_inode_record rec;
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	MDB_val k = {xattr_key(key, ino, name, name_len), key}, v;
	int rc = xattr_inode(s, txn, ino, &rec);
	if (rc < 0)
		return rc;
	int got = mdb_get(txn, s->xattrs, &k, &v);
	if (got != 0 && got != MDB_NOTFOUND)
		return kvc_lmdb_errno(got);
	if (got == 0 && (flags & KVC_XATTR_CREATE))
		return -EEXIST;
	if (got == MDB_NOTFOUND && (flags & KVC_XATTR_REPLACE))
		return -ENODATA;
	struct usage u = {.skip = name, .skip_len = name_len};
	rc = each_xattr(s, txn, ino, add_usage, &u);
	if (rc == 0 && (u.names + name_len + 1 > XATTR_LIST_BYTES ||
	                u.values + value_len > KVC_META_MAX_XATTR_BYTES))
		rc = -ENOSPC;
	v = (MDB_val){value_len, (void *)value};
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_put(txn, s->xattrs, &k, &v, 0));
	if (rc == 0) {
		rec.attr.ctime_ns = kvc_meta_now_ns();
		rc = kvc_meta_inode_put(s, txn, &rec);
	}
	return rc;
}

int kvc_meta_store_setxattr(struct kvc_meta_store *s, uint64_t ino, const char *name,
                            uint32_t name_len, const void *value, uint32_t value_len,
                            uint32_t flags)
{
	MDB_txn *txn;
	int rc = check_name(name, name_len);
	if (rc == 0 && value_len > KVC_WIRE_MAX_XATTR_VALUE)
		rc = -E2BIG;
	if (rc == 0 && (flags & ~(KVC_XATTR_CREATE | KVC_XATTR_REPLACE)))
		rc = -EINVAL;
	if (rc == 0)
		rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = setxattr_txn(s, txn, ino, name, name_len, value, value_len, flags);
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_getxattr(struct kvc_meta_store *s, uint64_t ino, const char *name,
                            uint32_t name_len, void *out, uint32_t cap)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	int rc = check_name(name, name_len);
	if (rc == -EOPNOTSUPP)
		rc = -ENODATA; /* nothing stored there: as on a filesystem without them */
	if (rc == 0)
		rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	MDB_val k = {xattr_key(key, ino, name, name_len), key}, v;
	rc = kvc_meta_inode_get(s, txn, ino, &rec);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_get(txn, s->xattrs, &k, &v));
	if (rc == -ENOENT)
		rc = kvc_meta_inode_get(s, txn, ino, &rec) == 0 ? -ENODATA : -ENOENT;
	if (rc == 0 && out && v.mv_size > cap)
		rc = -ERANGE;
	if (rc == 0) {
		if (out)
			memcpy(out, v.mv_data, v.mv_size);
		rc = (int)v.mv_size;
	}
	mdb_txn_abort(txn);
	return rc;
}

struct list_out {
	char *out;
	uint32_t cap;
	uint32_t len;
};

static int add_name(void *arg, const char *name, uint32_t len, size_t value_len)
{
	struct list_out *l = arg;
	(void)value_len;
	if (l->out && l->len + len + 1 > l->cap)
		return -ERANGE;
	if (l->out) {
		memcpy(l->out + l->len, name, len);
		l->out[l->len + len] = '\0';
	}
	l->len += len + 1;
	return 0;
}

int kvc_meta_store_listxattr(struct kvc_meta_store *s, uint64_t ino, char *out, uint32_t cap)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	struct list_out l = {.out = out, .cap = cap};
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_meta_inode_get(s, txn, ino, &rec);
	if (rc == 0)
		rc = each_xattr(s, txn, ino, add_name, &l);
	mdb_txn_abort(txn);
	return rc < 0 ? rc : (int)l.len;
}

int kvc_meta_store_removexattr(struct kvc_meta_store *s, uint64_t ino, const char *name,
                               uint32_t name_len)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	int rc = check_name(name, name_len);
	if (rc == -EOPNOTSUPP)
		rc = -ENODATA;
	if (rc == 0)
		rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	MDB_val k = {xattr_key(key, ino, name, name_len), key};
	rc = xattr_inode(s, txn, ino, &rec);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_del(txn, s->xattrs, &k, NULL));
	if (rc == -ENOENT && kvc_meta_inode_get(s, txn, ino, &rec) == 0)
		rc = -ENODATA;
	if (rc == 0) {
		rec.attr.ctime_ns = kvc_meta_now_ns();
		rc = kvc_meta_inode_put(s, txn, &rec);
	}
	return kvc_lmdb_finish(txn, rc);
}
