/* meta_store: see meta_store.h for the tables and their formats. */
#include "meta/meta_store.h"

#include <errno.h>
#include <lmdb.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fsutil.h"
#include "core/layout.h"
#include "core/lmdb_txn.h"

#define MAP_SIZE (16ull << 30)
#define DIRENT_KEY_MAX (8 + KVC_WIRE_MAX_NAME)

struct kvc_meta_store {
	MDB_env *env;
	MDB_dbi inodes, dirents, gc, state, opens, orphans, clients;
	struct kvc_layout default_layout;
};

struct dirent_value {
	uint64_t ino;
	uint32_t mode;
	uint32_t reserved;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void be64(uint8_t *out, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t from_be64(const uint8_t *in)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | in[i];
	return v;
}

static int begin(struct kvc_meta_store *s, bool write, MDB_txn **txn)
{
	return kvc_lmdb_errno(mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, txn));
}

static int inode_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                     struct kvc_inode_record *rec)
{
	uint8_t key[8];
	be64(key, ino);
	MDB_val k = {8, key}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->inodes, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size != sizeof(*rec))
		return -EIO;
	memcpy(rec, v.mv_data, sizeof(*rec));
	return rec->magic == KVC_INODE_MAGIC ? 0 : -EIO;
}

static int inode_put(struct kvc_meta_store *s, MDB_txn *txn,
                     const struct kvc_inode_record *rec)
{
	uint8_t key[8];
	be64(key, rec->attr.ino);
	MDB_val k = {8, key}, v = {sizeof(*rec), (void *)rec};
	return kvc_lmdb_errno(mdb_put(txn, s->inodes, &k, &v, 0));
}

static int inode_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	be64(key, ino);
	MDB_val k = {8, key};
	return kvc_lmdb_errno(mdb_del(txn, s->inodes, &k, NULL));
}

static size_t dirent_key(uint8_t *key, uint64_t parent, const char *name, uint32_t len)
{
	be64(key, parent);
	memcpy(key + 8, name, len);
	return 8 + len;
}

static int dirent_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                      const char *name, uint32_t len, struct dirent_value *out)
{
	uint8_t key[DIRENT_KEY_MAX];
	MDB_val k = {dirent_key(key, parent, name, len), key}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->dirents, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size != sizeof(*out))
		return -EIO;
	memcpy(out, v.mv_data, sizeof(*out));
	return 0;
}

static int dirent_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                      const char *name, uint32_t len, uint64_t ino, uint32_t mode)
{
	uint8_t key[DIRENT_KEY_MAX];
	struct dirent_value value = {ino, mode, 0};
	MDB_val k = {dirent_key(key, parent, name, len), key}, v = {sizeof(value), &value};
	return kvc_lmdb_errno(mdb_put(txn, s->dirents, &k, &v, 0));
}

static int dirent_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                      const char *name, uint32_t len)
{
	uint8_t key[DIRENT_KEY_MAX];
	MDB_val k = {dirent_key(key, parent, name, len), key};
	return kvc_lmdb_errno(mdb_del(txn, s->dirents, &k, NULL));
}

/* 1 when directory ino has no entries, 0 when it has, -errno. */
static int dir_empty(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	MDB_cursor *cur;
	uint8_t key[8];
	be64(key, ino);
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->dirents, &cur));
	if (rc < 0)
		return rc;
	MDB_val k = {8, key}, v;
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	int empty = rc == MDB_NOTFOUND || (rc == 0 && from_be64(k.mv_data) != ino);
	mdb_cursor_close(cur);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return kvc_lmdb_errno(rc);
	return empty;
}

static int state_get(struct kvc_meta_store *s, MDB_txn *txn, const char *name,
                     void *out, size_t size)
{
	MDB_val k = {strlen(name), (void *)name}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->state, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size != size)
		return -EIO;
	memcpy(out, v.mv_data, size);
	return 0;
}

static int state_put(struct kvc_meta_store *s, MDB_txn *txn, const char *name,
                     const void *value, size_t size)
{
	MDB_val k = {strlen(name), (void *)name}, v = {size, (void *)value};
	return kvc_lmdb_errno(mdb_put(txn, s->state, &k, &v, 0));
}

/* The parent directory record, checked to be a directory. */
static int parent_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                      struct kvc_inode_record *rec)
{
	int rc = inode_get(s, txn, parent, rec);
	if (rc == 0 && !S_ISDIR(rec->attr.mode))
		rc = -ENOTDIR;
	return rc;
}

static void touch(struct kvc_inode_record *rec, int64_t now)
{
	rec->attr.mtime_ns = now;
	rec->attr.ctime_ns = now;
}

static int create_root(struct kvc_meta_store *s, MDB_txn *txn)
{
	struct kvc_inode_record root = {.magic = KVC_INODE_MAGIC, .parent = KVC_META_ROOT};
	int64_t now = now_ns();
	uint32_t format = KVC_META_FORMAT, next_target = 0;
	uint64_t next_ino = KVC_META_ROOT + 1;
	root.attr = (struct kvc_attr){.ino = KVC_META_ROOT, .mode = S_IFDIR | 0755,
	                              .nlink = 2, .atime_ns = now, .mtime_ns = now,
	                              .ctime_ns = now, .layout = s->default_layout};
	int rc = inode_put(s, txn, &root);
	if (rc == 0)
		rc = state_put(s, txn, "format", &format, sizeof(format));
	if (rc == 0)
		rc = state_put(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0)
		rc = state_put(s, txn, "next_target", &next_target, sizeof(next_target));
	return rc;
}

static int open_tables(struct kvc_meta_store *s)
{
	MDB_txn *txn;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_dbi_open(txn, "inodes", MDB_CREATE, &s->inodes));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "dirents", MDB_CREATE, &s->dirents));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "gc", MDB_CREATE, &s->gc));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "state", MDB_CREATE, &s->state));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "opens", MDB_CREATE, &s->opens));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "orphans", MDB_CREATE, &s->orphans));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "clients", MDB_CREATE, &s->clients));
	uint32_t format = 0;
	int has = rc == 0 ? state_get(s, txn, "format", &format, sizeof(format)) : rc;
	if (has == -ENOENT)
		rc = create_root(s, txn);
	else if (has < 0)
		rc = has;
	else if (format != KVC_META_FORMAT)
		rc = -EINVAL;
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_open(const char *dir, const struct kvc_layout *default_layout,
                        struct kvc_meta_store **out)
{
	struct kvc_meta_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->default_layout = *default_layout;
	int rc = kvc_layout_check(default_layout);
	if (rc == 0)
		rc = kvc_fsutil_mkdirs(dir, 0700);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_create(&s->env));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_mapsize(s->env, MAP_SIZE));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_maxdbs(s->env, 16));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_maxreaders(s->env, 4096));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_open(s->env, dir, MDB_NOSYNC | MDB_NOTLS, 0600));
	if (rc == 0)
		rc = open_tables(s);
	if (rc < 0) {
		kvc_meta_store_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void kvc_meta_store_close(struct kvc_meta_store *s)
{
	if (!s)
		return;
	kvc_lmdb_close(s->env);
	free(s);
}

int kvc_meta_store_sync(struct kvc_meta_store *s)
{
	return kvc_lmdb_errno(mdb_env_sync(s->env, 1));
}

int kvc_meta_store_lookup(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len, struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	struct dirent_value d;
	int rc = kvc_wire_name_check(name, name_len);
	if (rc < 0)
		return rc;
	rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = parent_get(s, txn, parent, &rec);
	if (rc == 0)
		rc = dirent_get(s, txn, parent, name, name_len, &d);
	if (rc == 0)
		rc = inode_get(s, txn, d.ino, &rec);
	if (rc == 0)
		*attr = rec.attr;
	mdb_txn_abort(txn);
	return rc;
}

int kvc_meta_store_getattr(struct kvc_meta_store *s, uint64_t ino, struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = inode_get(s, txn, ino, &rec);
	if (rc == 0)
		*attr = rec.attr;
	mdb_txn_abort(txn);
	return rc;
}

/* A new inode record under parent: next id, placement, times. */
static int new_inode(struct kvc_meta_store *s, MDB_txn *txn,
                     const struct kvc_inode_record *parent, uint32_t mode, uint32_t uid,
                     uint32_t gid, struct kvc_inode_record *rec)
{
	uint64_t next_ino;
	uint32_t next_target;
	int rc = state_get(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0)
		rc = state_get(s, txn, "next_target", &next_target, sizeof(next_target));
	if (rc < 0)
		return rc;
	struct kvc_layout layout = parent->attr.layout;
	/* The cluster may have grown since the parent was placed. */
	layout.target_count = s->default_layout.target_count;
	if (layout.stripe > layout.target_count)
		layout.stripe = layout.target_count;
	layout.first_target = next_target % layout.target_count;
	int64_t now = now_ns();
	*rec = (struct kvc_inode_record){.magic = KVC_INODE_MAGIC, .parent = parent->attr.ino};
	rec->attr = (struct kvc_attr){.ino = next_ino, .mode = mode, .uid = uid, .gid = gid,
	                              .nlink = S_ISDIR(mode) ? 2 : 1, .atime_ns = now,
	                              .mtime_ns = now, .ctime_ns = now, .layout = layout};
	next_ino++;
	next_target = (next_target + 1) % layout.target_count;
	rc = state_put(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0)
		rc = state_put(s, txn, "next_target", &next_target, sizeof(next_target));
	return rc;
}

static int make_entry(struct kvc_meta_store *s, uint64_t parent, const char *name,
                      uint32_t name_len, uint32_t mode, uint32_t uid, uint32_t gid,
                      bool exclusive, struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record dir, rec;
	struct dirent_value d;
	int rc = kvc_wire_name_check(name, name_len);
	if (rc < 0)
		return rc;
	rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = parent_get(s, txn, parent, &dir);
	if (rc < 0)
		goto out;
	rc = dirent_get(s, txn, parent, name, name_len, &d);
	if (rc == 0) {
		/* Existing entry: open semantics for a plain create. */
		rc = exclusive || S_ISDIR(mode) ? -EEXIST : inode_get(s, txn, d.ino, &rec);
		if (rc == 0 && S_ISDIR(rec.attr.mode))
			rc = -EISDIR;
		if (rc == 0)
			*attr = rec.attr;
		goto out;
	}
	if (rc != -ENOENT)
		goto out;
	rc = new_inode(s, txn, &dir, mode, uid, gid, &rec);
	if (rc == 0)
		rc = inode_put(s, txn, &rec);
	if (rc == 0)
		rc = dirent_put(s, txn, parent, name, name_len, rec.attr.ino, mode);
	if (rc == 0) {
		touch(&dir, rec.attr.ctime_ns);
		if (S_ISDIR(mode))
			dir.attr.nlink++;
		rc = inode_put(s, txn, &dir);
	}
	if (rc == 0)
		*attr = rec.attr;
out:
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_create(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len, uint32_t mode, uint32_t uid, uint32_t gid,
                          bool exclusive, struct kvc_attr *attr)
{
	return make_entry(s, parent, name, name_len, S_IFREG | (mode & 07777), uid, gid,
	                  exclusive, attr);
}

int kvc_meta_store_mkdir(struct kvc_meta_store *s, uint64_t parent, const char *name,
                         uint32_t name_len, uint32_t mode, uint32_t uid, uint32_t gid,
                         struct kvc_attr *attr)
{
	return make_entry(s, parent, name, name_len, S_IFDIR | (mode & 07777), uid, gid,
	                  true, attr);
}

/* Whether some client has ino open (an `opens` entry with its prefix). */
static int has_opens(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	be64(key, ino);
	MDB_cursor *cur;
	MDB_val k = {8, key}, v;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->opens, &cur));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	bool open = got == 0 && k.mv_size == 8 + KVC_META_CLIENT_ID &&
	            memcmp(k.mv_data, key, 8) == 0;
	mdb_cursor_close(cur);
	return got != 0 && got != MDB_NOTFOUND ? kvc_lmdb_errno(got) : open;
}

/* Drop inode rec that lost its last name: files go to the gc queue, or,
 * while some client has them open, become orphans (no name, nlink 0,
 * data kept) until the last client closes them. */
static int drop_inode(struct kvc_meta_store *s, MDB_txn *txn,
                      const struct kvc_inode_record *rec)
{
	int open = S_ISREG(rec->attr.mode) ? has_opens(s, txn, rec->attr.ino) : 0;
	if (open < 0)
		return open;
	if (open) {
		struct kvc_inode_record orphan = *rec;
		uint8_t key[8];
		be64(key, rec->attr.ino);
		MDB_val k = {8, key}, one = {1, "\1"};
		orphan.attr.nlink = 0;
		int rc = inode_put(s, txn, &orphan);
		return rc < 0 ? rc : kvc_lmdb_errno(mdb_put(txn, s->orphans, &k, &one, 0));
	}
	int rc = inode_del(s, txn, rec->attr.ino);
	if (rc == 0 && S_ISREG(rec->attr.mode)) {
		uint8_t key[8];
		be64(key, rec->attr.ino);
		MDB_val k = {8, key}, v = {sizeof(rec->attr.layout), (void *)&rec->attr.layout};
		rc = kvc_lmdb_errno(mdb_put(txn, s->gc, &k, &v, 0));
	}
	return rc;
}

static int remove_entry(struct kvc_meta_store *s, uint64_t parent, const char *name,
                        uint32_t name_len, bool want_dir)
{
	MDB_txn *txn;
	struct kvc_inode_record dir, rec;
	struct dirent_value d;
	int rc = kvc_wire_name_check(name, name_len);
	if (rc < 0)
		return rc;
	rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = parent_get(s, txn, parent, &dir);
	if (rc == 0)
		rc = dirent_get(s, txn, parent, name, name_len, &d);
	if (rc == 0)
		rc = inode_get(s, txn, d.ino, &rec);
	if (rc < 0)
		goto out;
	if (want_dir && !S_ISDIR(rec.attr.mode))
		rc = -ENOTDIR;
	else if (!want_dir && S_ISDIR(rec.attr.mode))
		rc = -EISDIR;
	else if (want_dir)
		rc = dir_empty(s, txn, rec.attr.ino) == 1 ? 0 : -ENOTEMPTY;
	if (rc == 0)
		rc = dirent_del(s, txn, parent, name, name_len);
	if (rc == 0)
		rc = drop_inode(s, txn, &rec);
	if (rc == 0) {
		touch(&dir, now_ns());
		if (want_dir)
			dir.attr.nlink--;
		rc = inode_put(s, txn, &dir);
	}
out:
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_unlink(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len)
{
	return remove_entry(s, parent, name, name_len, false);
}

int kvc_meta_store_rmdir(struct kvc_meta_store *s, uint64_t parent, const char *name,
                         uint32_t name_len)
{
	return remove_entry(s, parent, name, name_len, true);
}

/* -EINVAL when dir `ino` is `ancestor` or lies under it. */
static int check_not_under(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                           uint64_t ancestor)
{
	struct kvc_inode_record rec;
	for (int depth = 0; depth < 4096; depth++) {
		if (ino == ancestor)
			return -EINVAL;
		if (ino == KVC_META_ROOT)
			return 0;
		int rc = inode_get(s, txn, ino, &rec);
		if (rc < 0)
			return rc;
		ino = rec.parent;
	}
	return -ELOOP;
}

/* Remove the entry that a rename replaces; checks type compatibility. */
static int replace_target(struct kvc_meta_store *s, MDB_txn *txn,
                          const struct kvc_inode_record *src,
                          const struct dirent_value *existing, struct kvc_inode_record *newdir)
{
	struct kvc_inode_record old;
	int rc = inode_get(s, txn, existing->ino, &old);
	if (rc < 0)
		return rc;
	if (S_ISDIR(src->attr.mode) && !S_ISDIR(old.attr.mode))
		return -ENOTDIR;
	if (!S_ISDIR(src->attr.mode) && S_ISDIR(old.attr.mode))
		return -EISDIR;
	if (S_ISDIR(old.attr.mode)) {
		rc = dir_empty(s, txn, old.attr.ino);
		if (rc != 1)
			return rc < 0 ? rc : -ENOTEMPTY;
		newdir->attr.nlink--;
	}
	return drop_inode(s, txn, &old);
}

static int rename_txn(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                      const char *name, uint32_t len, uint64_t new_parent,
                      const char *new_name, uint32_t new_len, uint32_t flags)
{
	struct kvc_inode_record dir, newdir, src;
	struct dirent_value d, existing;
	int rc = parent_get(s, txn, parent, &dir);
	if (rc == 0)
		rc = parent_get(s, txn, new_parent, &newdir);
	if (rc == 0)
		rc = dirent_get(s, txn, parent, name, len, &d);
	if (rc == 0)
		rc = inode_get(s, txn, d.ino, &src);
	if (rc < 0)
		return rc;
	if (S_ISDIR(src.attr.mode) && new_parent != parent)
		rc = check_not_under(s, txn, new_parent, src.attr.ino);
	if (rc < 0)
		return rc;
	int found = dirent_get(s, txn, new_parent, new_name, new_len, &existing);
	if (found == 0 && existing.ino == src.attr.ino)
		return 0; /* same entry: nothing to do */
	if (found == 0 && (flags & KVC_RENAME_NOREPLACE))
		return -EEXIST;
	if (found == 0)
		rc = replace_target(s, txn, &src, &existing, &newdir);
	else if (found != -ENOENT)
		rc = found;
	if (rc == 0)
		rc = dirent_del(s, txn, parent, name, len);
	if (rc == 0)
		rc = dirent_put(s, txn, new_parent, new_name, new_len, src.attr.ino,
		                src.attr.mode);
	if (rc < 0)
		return rc;
	int64_t now = now_ns();
	src.attr.ctime_ns = now;
	if (S_ISDIR(src.attr.mode) && new_parent != parent) {
		src.parent = new_parent;
		dir.attr.nlink--;
		newdir.attr.nlink++;
	}
	touch(&newdir, now);
	rc = inode_put(s, txn, &src);
	if (rc == 0 && new_parent != parent) {
		touch(&dir, now);
		rc = inode_put(s, txn, &dir);
	}
	if (rc == 0)
		rc = inode_put(s, txn, &newdir);
	return rc;
}

int kvc_meta_store_rename(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len, uint64_t new_parent, const char *new_name,
                          uint32_t new_name_len, uint32_t flags)
{
	MDB_txn *txn;
	int rc = kvc_wire_name_check(name, name_len);
	if (rc == 0)
		rc = kvc_wire_name_check(new_name, new_name_len);
	if (rc == 0 && (flags & ~KVC_RENAME_NOREPLACE))
		rc = -EINVAL;
	if (rc == 0)
		rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = rename_txn(s, txn, parent, name, name_len, new_parent, new_name, new_name_len,
	                flags);
	return kvc_lmdb_finish(txn, rc);
}

static int readdir_txn(struct kvc_meta_store *s, MDB_txn *txn, MDB_cursor *cur,
                       uint64_t ino, const char *after, uint32_t after_len, uint32_t max,
                       kvc_meta_dirent_fn fn, void *arg, bool *more)
{
	uint8_t key[DIRENT_KEY_MAX];
	struct kvc_inode_record rec;
	int count = 0;
	MDB_val k = {dirent_key(key, ino, after, after_len), key}, v;
	int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	/* Resume strictly after `after`. */
	if (rc == 0 && after_len && k.mv_size == 8 + after_len &&
	    memcmp((uint8_t *)k.mv_data + 8, after, after_len) == 0)
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	*more = false;
	while (rc == 0 && k.mv_size > 8 && from_be64(k.mv_data) == ino) {
		if ((uint32_t)count == max) {
			*more = true;
			break;
		}
		struct dirent_value d;
		if (v.mv_size != sizeof(d))
			return -EIO;
		memcpy(&d, v.mv_data, sizeof(d));
		int got = inode_get(s, txn, d.ino, &rec);
		if (got < 0)
			return got;
		count++;
		if (fn(arg, (const char *)k.mv_data + 8, (uint32_t)(k.mv_size - 8), &rec.attr))
			break;
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		return kvc_lmdb_errno(rc);
	return count;
}

int kvc_meta_store_readdir(struct kvc_meta_store *s, uint64_t ino, const char *after,
                           uint32_t after_len, uint32_t max, kvc_meta_dirent_fn fn,
                           void *arg, bool *more)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	struct kvc_inode_record rec;
	if (after_len > KVC_WIRE_MAX_NAME)
		return -ENAMETOOLONG;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = parent_get(s, txn, ino, &rec);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->dirents, &cur));
	if (rc == 0) {
		rc = readdir_txn(s, txn, cur, ino, after, after_len, max, fn, arg, more);
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return rc;
}

int kvc_meta_store_setattr(struct kvc_meta_store *s, const struct kvc_msg_setattr *req,
                           struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	if (req->mask & ~KVC_SETATTR_ALL)
		return -EINVAL;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = inode_get(s, txn, req->ino, &rec);
	if (rc == 0 && (req->mask & KVC_SETATTR_SIZE)) {
		if (S_ISDIR(rec.attr.mode))
			rc = -EISDIR;
		else if (req->size > KVC_LAYOUT_MAX_FILE_SIZE)
			rc = -EFBIG;
	}
	if (rc < 0)
		goto out;
	int64_t now = now_ns();
	if (req->mask & KVC_SETATTR_MODE)
		rec.attr.mode = (rec.attr.mode & (uint32_t)S_IFMT) | (req->mode & 07777);
	if (req->mask & KVC_SETATTR_UID)
		rec.attr.uid = req->uid;
	if (req->mask & KVC_SETATTR_GID)
		rec.attr.gid = req->gid;
	if (req->mask & KVC_SETATTR_SIZE) {
		rec.attr.size = req->size;
		rec.attr.mtime_ns = now;
	}
	if (req->mask & KVC_SETATTR_ATIME)
		rec.attr.atime_ns = req->atime_ns;
	if (req->mask & KVC_SETATTR_MTIME)
		rec.attr.mtime_ns = req->mtime_ns;
	rec.attr.ctime_ns = now;
	rc = inode_put(s, txn, &rec);
	if (rc == 0)
		*attr = rec.attr;
out:
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_extend(struct kvc_meta_store *s, uint64_t ino, uint64_t size,
                          struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	if (size > KVC_LAYOUT_MAX_FILE_SIZE)
		return -EFBIG;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = inode_get(s, txn, ino, &rec);
	if (rc == 0 && S_ISDIR(rec.attr.mode))
		rc = -EISDIR;
	if (rc == 0 && size > rec.attr.size) {
		rec.attr.size = size;
		touch(&rec, now_ns());
		rc = inode_put(s, txn, &rec);
	}
	if (rc == 0)
		*attr = rec.attr;
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_count_inodes(struct kvc_meta_store *s, uint64_t *inodes)
{
	struct kvc_meta_counts counts;
	int rc = kvc_meta_store_counts(s, &counts);
	if (rc == 0)
		*inodes = counts.inodes;
	return rc;
}

int kvc_meta_store_counts(struct kvc_meta_store *s, struct kvc_meta_counts *out)
{
	MDB_txn *txn;
	MDB_dbi tables[4] = {s->inodes, s->opens, s->orphans, s->gc};
	uint64_t *fields[4] = {&out->inodes, &out->open_sessions, &out->orphans, &out->gc_pending};
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	for (int i = 0; i < 4 && rc == 0; i++) {
		MDB_stat st;
		rc = kvc_lmdb_errno(mdb_stat(txn, tables[i], &st));
		*fields[i] = rc == 0 ? st.ms_entries : 0;
	}
	mdb_txn_abort(txn);
	return rc;
}

int kvc_meta_store_gc_list(struct kvc_meta_store *s, uint64_t *inos,
                           struct kvc_layout *layouts, int max)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	int count = 0;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->gc, &cur));
	if (rc == 0) {
		MDB_val k, v;
		int got = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
		while (got == 0 && count < max) {
			if (k.mv_size == 8 && v.mv_size == sizeof(layouts[0])) {
				inos[count] = from_be64(k.mv_data);
				memcpy(&layouts[count], v.mv_data, sizeof(layouts[0]));
				count++;
			}
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return rc < 0 ? rc : count;
}

int kvc_meta_store_gc_done(struct kvc_meta_store *s, uint64_t ino)
{
	MDB_txn *txn;
	uint8_t key[8];
	be64(key, ino);
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	MDB_val k = {8, key};
	rc = kvc_lmdb_errno(mdb_del(txn, s->gc, &k, NULL));
	if (rc == -ENOENT)
		rc = 0;
	return kvc_lmdb_finish(txn, rc);
}

/* ---- open sessions: files kept while clients have them open ---- */

static MDB_val open_key(uint8_t *key, uint64_t ino, const uint8_t client[KVC_META_CLIENT_ID])
{
	be64(key, ino);
	memcpy(key + 8, client, KVC_META_CLIENT_ID);
	return (MDB_val){8 + KVC_META_CLIENT_ID, key};
}

/* The same pair, client first: the `clients` index. */
static MDB_val client_key(uint8_t *key, const uint8_t client[KVC_META_CLIENT_ID], uint64_t ino)
{
	memcpy(key, client, KVC_META_CLIENT_ID);
	be64(key + KVC_META_CLIENT_ID, ino);
	return (MDB_val){KVC_META_CLIENT_ID + 8, key};
}

/* Record or end the session (ino, client) in both tables. */
static int session_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       const uint8_t client[KVC_META_CLIENT_ID])
{
	uint8_t a[8 + KVC_META_CLIENT_ID], b[KVC_META_CLIENT_ID + 8];
	MDB_val ka = open_key(a, ino, client), kb = client_key(b, client, ino), one = {1, "\1"};
	int rc = kvc_lmdb_errno(mdb_put(txn, s->opens, &ka, &one, 0));
	return rc < 0 ? rc : kvc_lmdb_errno(mdb_put(txn, s->clients, &kb, &one, 0));
}

static int session_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       const uint8_t client[KVC_META_CLIENT_ID])
{
	uint8_t a[8 + KVC_META_CLIENT_ID], b[KVC_META_CLIENT_ID + 8];
	MDB_val ka = open_key(a, ino, client), kb = client_key(b, client, ino);
	int rc = mdb_del(txn, s->opens, &ka, NULL);
	if (rc == 0 || rc == MDB_NOTFOUND)
		rc = mdb_del(txn, s->clients, &kb, NULL);
	return rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
}

/* After a close: an orphan nobody has open any more goes to the gc queue. */
static int settle_orphan(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	be64(key, ino);
	MDB_val k = {8, key}, v;
	struct kvc_inode_record rec;
	int open = has_opens(s, txn, ino);
	if (open != 0)
		return open < 0 ? open : 0;
	int rc = mdb_get(txn, s->orphans, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0;
	rc = kvc_lmdb_errno(rc);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_del(txn, s->orphans, &k, NULL));
	if (rc == 0)
		rc = inode_get(s, txn, ino, &rec);
	return rc == 0 ? drop_inode(s, txn, &rec) : (rc == -ENOENT ? 0 : rc);
}

int kvc_meta_store_open_session(struct kvc_meta_store *s, uint64_t ino,
                                const uint8_t client[KVC_META_CLIENT_ID], struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = inode_get(s, txn, ino, &rec);
	if (rc == 0 && S_ISREG(rec.attr.mode))
		rc = session_put(s, txn, ino, client);
	if (rc == 0)
		*attr = rec.attr;
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_close_session(struct kvc_meta_store *s, uint64_t ino,
                                 const uint8_t client[KVC_META_CLIENT_ID])
{
	MDB_txn *txn;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = session_del(s, txn, ino, client);
	if (rc == 0)
		rc = settle_orphan(s, txn, ino);
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_drop_client(struct kvc_meta_store *s, const uint8_t client[KVC_META_CLIENT_ID])
{
	MDB_txn *txn;
	MDB_cursor *cur;
	int dropped = 0;
	int rc = begin(s, true, &txn);
	if (rc < 0)
		return rc;
	/* The client's sessions, one by one from the start of its range in
	 * the index (each step changes the tables: look again each time). */
	for (;;) {
		uint8_t start[KVC_META_CLIENT_ID + 8];
		MDB_val k = client_key(start, client, 0), v;
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->clients, &cur));
		if (rc < 0)
			break;
		int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		bool mine = got == 0 && k.mv_size == sizeof(start) &&
		            memcmp(k.mv_data, client, KVC_META_CLIENT_ID) == 0;
		uint64_t ino = mine ? from_be64((const uint8_t *)k.mv_data + KVC_META_CLIENT_ID) : 0;
		mdb_cursor_close(cur);
		if (got != 0 && got != MDB_NOTFOUND)
			rc = kvc_lmdb_errno(got);
		if (!mine || rc < 0)
			break;
		rc = session_del(s, txn, ino, client);
		if (rc == 0)
			rc = settle_orphan(s, txn, ino);
		if (rc < 0)
			break;
		dropped++;
	}
	rc = kvc_lmdb_finish(txn, rc);
	return rc < 0 ? rc : dropped;
}

int kvc_meta_store_session_clients(struct kvc_meta_store *s, uint8_t (*out)[KVC_META_CLIENT_ID],
                                   int max)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int count = 0;
	int rc = begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->clients, &cur));
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0 && count < max) {
		if (k.mv_size != KVC_META_CLIENT_ID + 8)
			break; /* not ours: the index has one shape */
		memcpy(out[count++], k.mv_data, KVC_META_CLIENT_ID);
		/* Jump past this client's sessions: the largest key it can have. */
		uint8_t next[KVC_META_CLIENT_ID + 8];
		memcpy(next, k.mv_data, KVC_META_CLIENT_ID);
		memset(next + KVC_META_CLIENT_ID, 0xff, 8);
		k = (MDB_val){sizeof(next), next};
		got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (got == 0 && memcmp(k.mv_data, next, sizeof(next)) == 0)
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc < 0 ? rc : count;
}
