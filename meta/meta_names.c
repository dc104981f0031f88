/*
 * meta_names: the namespace's mutations in the meta store: creating every
 * object type (regular files, directories, fifos, sockets, devices,
 * symlinks), hard links, unlink, rmdir and rename, each one LMDB write
 * transaction.
 *
 * Invariants kept here:
 * - A directory has exactly one name; its nlink is 2 + its
 *   subdirectories, and its record's `parent` is the directory holding
 *   that name (rename's cycle check walks it).
 * - Any other inode has nlink = its number of names (hard links), at most
 *   KVC_META_MAX_LINKS; it goes when the last name goes (see
 *   kvc_meta_inode_unlinked), a regular file only once no client has it
 *   open.
 * - Every change of names updates the parents' mtime and ctime and the
 *   inode's ctime, as POSIX asks.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/lmdb_txn.h"
#include "meta/meta_store_internal.h"

int kvc_meta_dirent_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        const char *name, uint32_t len, uint64_t ino, uint32_t mode)
{
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	struct kvc_meta_dirent value = {ino, mode & (uint32_t)S_IFMT, 0};
	MDB_val k = {kvc_meta_dirent_key(key, parent, name, len), key},
		v = {sizeof(value), &value};
	return kvc_lmdb_errno(mdb_put(txn, s->dirents, &k, &v, 0));
}

int kvc_meta_dirent_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        const char *name, uint32_t len)
{
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	MDB_val k = {kvc_meta_dirent_key(key, parent, name, len), key};
	return kvc_lmdb_errno(mdb_del(txn, s->dirents, &k, NULL));
}

/* 1 when directory ino has no entries, 0 when it has, -errno. */
static int dir_empty(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	MDB_cursor *cur;
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->dirents, &cur));
	if (rc < 0)
		return rc;
	MDB_val k = {8, key}, v;
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	int empty = rc == MDB_NOTFOUND || (rc == 0 && kvc_meta_from_be64(k.mv_data) != ino);
	mdb_cursor_close(cur);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return kvc_lmdb_errno(rc);
	return empty;
}

static void touch(struct kvc_inode_record *rec, int64_t now)
{
	rec->attr.mtime_ns = now;
	rec->attr.ctime_ns = now;
}

static int inode_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key};
	int rc = kvc_lmdb_errno(mdb_del(txn, s->inodes, &k, NULL));
	if (rc == 0)
		rc = kvc_meta_truncate_forget(s, txn, ino); /* its chunks all go now */
	return rc < 0 ? rc : kvc_meta_extras_del(s, txn, ino);
}

int kvc_meta_inode_unlinked(struct kvc_meta_store *s, MDB_txn *txn,
                            const struct kvc_inode_record *rec)
{
	struct kvc_inode_record left = *rec;
	uint8_t key[8];
	kvc_meta_be64(key, rec->attr.ino);
	MDB_val k = {8, key};
	if (!S_ISDIR(rec->attr.mode) && rec->attr.nlink > 1) {
		left.attr.nlink--;
		left.attr.ctime_ns = kvc_meta_now_ns();
		return kvc_meta_inode_put(s, txn, &left);
	}
	int open = S_ISREG(rec->attr.mode) ? kvc_meta_doom_unless_open(s, txn, rec->attr.ino) : 0;
	if (open < 0)
		return open;
	if (open) {
		/* Removed while open: kept, nameless, until the last close. */
		left.attr.nlink = 0;
		left.attr.ctime_ns = kvc_meta_now_ns();
		int rc = kvc_meta_inode_put(s, txn, &left);
		return rc < 0 ? rc : kvc_meta_orphan_mark(s, txn, rec->attr.ino, KVC_ORPHAN_REMOVED);
	}
	int rc = inode_del(s, txn, rec->attr.ino);
	if (rc == 0 && S_ISREG(rec->attr.mode)) {
		MDB_val v = {sizeof(rec->attr.layout), (void *)&rec->attr.layout};
		rc = kvc_lmdb_errno(mdb_put(txn, s->gc, &k, &v, 0));
	}
	return rc;
}

/* A new inode record under parent: next id, placement (regular files and
 * directories only: nothing else has data), times. */
int kvc_meta_new_inode(struct kvc_meta_store *s, MDB_txn *txn,
                       const struct kvc_inode_record *parent, uint32_t mode, uint32_t uid,
                       uint32_t gid, uint64_t rdev, struct kvc_inode_record *rec)
{
	uint64_t next_ino;
	uint32_t next_target;
	int rc = kvc_meta_state_get(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0)
		rc = kvc_meta_state_get(s, txn, "next_target", &next_target, sizeof(next_target));
	if (rc < 0)
		return rc;
	struct kvc_layout layout = parent->attr.layout;
	/* The cluster may have grown since the parent was placed. */
	layout.chain_count = __atomic_load_n(&s->default_layout.chain_count, __ATOMIC_RELAXED);
	if (layout.stripe > layout.chain_count)
		layout.stripe = layout.chain_count;
	layout.first_chain = next_target % layout.chain_count;
	bool placed = S_ISREG(mode) || S_ISDIR(mode);
	int64_t now = kvc_meta_now_ns();
	*rec = (struct kvc_inode_record){.magic = KVC_INODE_MAGIC, .parent = parent->attr.ino};
	rec->attr = (struct kvc_attr){.ino = next_ino, .mode = mode, .uid = uid, .gid = gid,
	                              .nlink = S_ISDIR(mode) ? 2 : 1, .atime_ns = now,
	                              .mtime_ns = now, .ctime_ns = now,
	                              .rdev = S_ISCHR(mode) || S_ISBLK(mode) ? rdev : 0};
	if (placed)
		rec->attr.layout = layout;
	next_ino++;
	rc = kvc_meta_state_put(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0 && S_ISREG(mode)) {
		next_target = (next_target + 1) % layout.chain_count;
		rc = kvc_meta_state_put(s, txn, "next_target", &next_target, sizeof(next_target));
	}
	return rc;
}

/* What a new entry is: its type and permissions, owner, device number and
 * (symlinks) target. */
struct new_entry {
	uint32_t mode, uid, gid;
	uint64_t rdev;
	bool exclusive; /* a regular file's create: false opens an existing one */
	const uint8_t *open_client; /* create: open a file it makes for this client */
	bool *created;              /* create: whether it made the file */
	struct kvc_attr *parent_attr; /* create: the parent's attributes after it */
	const char *target;
	uint32_t target_len;
};

/* One make_entry, as a call of the store's group commit (core/lmdb_group.h):
 * everything happens in txn and its outputs are set afresh each run. */
struct entry_call {
	uint64_t parent;
	const char *name;
	uint32_t name_len;
	const struct new_entry *e;
	struct kvc_attr *attr;
};

static int make_entry_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	const struct entry_call *call = arg;
	const struct new_entry *e = call->e;
	uint64_t parent = call->parent;
	const char *name = call->name;
	uint32_t name_len = call->name_len;
	struct kvc_inode_record dir, rec;
	struct kvc_meta_dirent d;
	if (e->created)
		*e->created = false;
	int rc = kvc_meta_parent_get(s, txn, parent, &dir);
	if (rc < 0)
		return rc;
	if (e->parent_attr)
		*e->parent_attr = dir.attr;
	rc = kvc_meta_dirent_get(s, txn, parent, name, name_len, &d);
	if (rc == 0) {
		/* Existing entry: open semantics for a plain create only. */
		rc = e->exclusive || !S_ISREG(e->mode) ? -EEXIST
		   : kvc_meta_inode_get(s, txn, d.ino, &rec);
		if (rc == 0 && S_ISDIR(rec.attr.mode))
			rc = -EISDIR;
		else if (rc == 0 && !S_ISREG(rec.attr.mode))
			rc = -EEXIST; /* the kernel follows symlinks itself */
		if (rc == 0)
			*call->attr = rec.attr;
		return rc;
	}
	if (rc != -ENOENT)
		return rc;
	if (S_ISDIR(e->mode) && dir.attr.nlink >= KVC_META_MAX_LINKS)
		return -EMLINK;
	rc = kvc_meta_new_inode(s, txn, &dir, e->mode, e->uid, e->gid, e->rdev, &rec);
	if (rc == 0 && S_ISLNK(e->mode)) {
		rec.attr.size = e->target_len;
		rc = kvc_meta_symlink_put(s, txn, rec.attr.ino, e->target, e->target_len);
	}
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &rec);
	if (rc == 0)
		rc = kvc_meta_dirent_put(s, txn, parent, name, name_len, rec.attr.ino, e->mode);
	if (rc == 0) {
		touch(&dir, rec.attr.ctime_ns);
		if (S_ISDIR(e->mode))
			dir.attr.nlink++;
		rc = kvc_meta_inode_put(s, txn, &dir);
	}
	if (rc == 0 && e->parent_attr)
		*e->parent_attr = dir.attr;
	if (rc == 0 && e->open_client)
		rc = kvc_meta_session_put(s, txn, rec.attr.ino, e->open_client);
	if (rc == 0) {
		*call->attr = rec.attr;
		if (e->created)
			*e->created = true;
	}
	return rc;
}

/* Names and their inodes are made with the group commit: creates that
 * arrive together (a connector's keys) share one transaction. */
static int make_entry(struct kvc_meta_store *s, uint64_t parent, const char *name,
                      uint32_t name_len, const struct new_entry *e, struct kvc_attr *attr)
{
	struct entry_call call = {parent, name, name_len, e, attr};
	int rc = kvc_wire_name_check(name, name_len);
	return rc < 0 ? rc : kvc_meta_group_run(s, make_entry_in, &call);
}

int kvc_meta_store_create(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len, uint32_t mode, uint32_t uid, uint32_t gid,
                          bool exclusive, struct kvc_attr *attr)
{
	return kvc_meta_store_create_open(s, parent, name, name_len, mode, uid, gid, exclusive,
	                                  NULL, attr, NULL, NULL);
}

int kvc_meta_store_create_open(struct kvc_meta_store *s, uint64_t parent, const char *name,
                               uint32_t name_len, uint32_t mode, uint32_t uid, uint32_t gid,
                               bool exclusive, const uint8_t *client, struct kvc_attr *attr,
                               bool *created, struct kvc_attr *parent_attr)
{
	struct new_entry e = {.mode = S_IFREG | (mode & 07777), .uid = uid, .gid = gid,
	                      .exclusive = exclusive, .open_client = client, .created = created,
	                      .parent_attr = parent_attr};
	if (created)
		*created = false;
	return make_entry(s, parent, name, name_len, &e, attr);
}

int kvc_meta_store_mkdir(struct kvc_meta_store *s, uint64_t parent, const char *name,
                         uint32_t name_len, uint32_t mode, uint32_t uid, uint32_t gid,
                         struct kvc_attr *attr)
{
	struct new_entry e = {.mode = S_IFDIR | (mode & 07777), .uid = uid, .gid = gid,
	                      .exclusive = true};
	return make_entry(s, parent, name, name_len, &e, attr);
}

int kvc_meta_store_mknod(struct kvc_meta_store *s, uint64_t parent, const char *name,
                         uint32_t name_len, uint32_t mode, uint64_t rdev, uint32_t uid,
                         uint32_t gid, struct kvc_attr *attr)
{
	uint32_t type = mode & (uint32_t)S_IFMT;
	struct new_entry e = {.mode = mode & ((uint32_t)S_IFMT | 07777), .uid = uid, .gid = gid,
	                      .rdev = rdev, .exclusive = true};
	if (type == 0)
		e.mode |= S_IFREG; /* mknod(2): zero means a regular file */
	else if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
	         type != S_IFBLK)
		return -EINVAL;
	return make_entry(s, parent, name, name_len, &e, attr);
}

int kvc_meta_store_symlink(struct kvc_meta_store *s, uint64_t parent, const char *name,
                           uint32_t name_len, const char *target, uint32_t target_len,
                           uint32_t uid, uint32_t gid, struct kvc_attr *attr)
{
	struct new_entry e = {.mode = S_IFLNK | 0777, .uid = uid, .gid = gid, .exclusive = true,
	                      .target = target, .target_len = target_len};
	if (target_len == 0 || memchr(target, '\0', target_len))
		return -EINVAL;
	if (target_len > KVC_WIRE_MAX_SYMLINK)
		return -ENAMETOOLONG;
	return make_entry(s, parent, name, name_len, &e, attr);
}

static int link_txn(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, uint64_t new_parent,
                    const char *name, uint32_t name_len, struct kvc_attr *attr)
{
	struct kvc_inode_record dir, rec;
	struct kvc_meta_dirent d;
	int rc = kvc_meta_parent_get(s, txn, new_parent, &dir);
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, ino, &rec);
	if (rc < 0)
		return rc;
	if (S_ISDIR(rec.attr.mode))
		return -EPERM;
	if (rec.attr.nlink == 0)
		return -ENOENT; /* removed while open: linkat of its fd */
	if (rec.attr.nlink >= KVC_META_MAX_LINKS)
		return -EMLINK;
	rc = kvc_meta_dirent_get(s, txn, new_parent, name, name_len, &d);
	if (rc == 0)
		return -EEXIST;
	if (rc != -ENOENT)
		return rc;
	int64_t now = kvc_meta_now_ns();
	rec.attr.nlink++;
	rec.attr.ctime_ns = now;
	touch(&dir, now);
	rc = kvc_meta_dirent_put(s, txn, new_parent, name, name_len, ino, rec.attr.mode);
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &rec);
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &dir);
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

int kvc_meta_store_link(struct kvc_meta_store *s, uint64_t ino, uint64_t new_parent,
                        const char *name, uint32_t name_len, struct kvc_attr *attr)
{
	MDB_txn *txn;
	int rc = kvc_wire_name_check(name, name_len);
	if (rc == 0)
		rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = link_txn(s, txn, ino, new_parent, name, name_len, attr);
	return kvc_lmdb_finish(txn, rc);
}

struct remove_call {
	uint64_t parent;
	const char *name;
	uint32_t name_len;
	bool want_dir;
	struct kvc_attr *parent_attr;
	uint64_t *removed;
};

int kvc_meta_name_remove(struct kvc_meta_store *s, MDB_txn *txn, struct kvc_inode_record *dir,
                         const char *name, uint32_t len, const struct kvc_inode_record *rec)
{
	int rc = kvc_meta_dirent_del(s, txn, dir->attr.ino, name, len);
	if (rc == 0)
		rc = kvc_meta_inode_unlinked(s, txn, rec);
	if (rc == 0) {
		touch(dir, kvc_meta_now_ns());
		if (S_ISDIR(rec->attr.mode))
			dir->attr.nlink--;
		rc = kvc_meta_inode_put(s, txn, dir);
	}
	return rc;
}

static int remove_entry_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	const struct remove_call *call = arg;
	struct kvc_inode_record dir, rec;
	struct kvc_meta_dirent d;
	int rc = kvc_meta_parent_get(s, txn, call->parent, &dir);
	if (rc == 0)
		rc = kvc_meta_dirent_get(s, txn, call->parent, call->name, call->name_len, &d);
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, d.ino, &rec);
	if (rc < 0)
		return rc;
	if (call->want_dir && !S_ISDIR(rec.attr.mode))
		rc = -ENOTDIR;
	else if (!call->want_dir && S_ISDIR(rec.attr.mode))
		rc = -EISDIR;
	else if (call->want_dir)
		rc = dir_empty(s, txn, rec.attr.ino) == 1 ? 0 : -ENOTEMPTY;
	if (rc == 0)
		rc = kvc_meta_name_remove(s, txn, &dir, call->name, call->name_len, &rec);
	if (rc == 0 && call->parent_attr)
		*call->parent_attr = dir.attr;
	if (rc == 0 && call->removed)
		*call->removed = rec.attr.ino;
	return rc;
}

/* With the group commit, as creates: the removals of many keys at once
 * share transactions. */
int kvc_meta_store_remove_name(struct kvc_meta_store *s, uint64_t parent, const char *name,
                               uint32_t name_len, bool want_dir, struct kvc_attr *parent_attr,
                               uint64_t *removed)
{
	struct remove_call call = {parent, name, name_len, want_dir, parent_attr, removed};
	int rc = kvc_wire_name_check(name, name_len);
	return rc < 0 ? rc : kvc_meta_group_run(s, remove_entry_in, &call);
}

int kvc_meta_store_unlink(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len)
{
	return kvc_meta_store_remove_name(s, parent, name, name_len, false, NULL, NULL);
}

int kvc_meta_store_rmdir(struct kvc_meta_store *s, uint64_t parent, const char *name,
                         uint32_t name_len)
{
	return kvc_meta_store_remove_name(s, parent, name, name_len, true, NULL, NULL);
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
		int rc = kvc_meta_inode_get(s, txn, ino, &rec);
		if (rc < 0)
			return rc;
		ino = rec.parent;
	}
	return -ELOOP;
}

/* Remove the entry that a rename replaces; checks type compatibility. */
static int replace_target(struct kvc_meta_store *s, MDB_txn *txn,
                          const struct kvc_inode_record *src,
                          const struct kvc_meta_dirent *existing,
                          struct kvc_inode_record *newdir)
{
	struct kvc_inode_record old;
	int rc = kvc_meta_inode_get(s, txn, existing->ino, &old);
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
	return kvc_meta_inode_unlinked(s, txn, &old);
}

static int rename_txn(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                      const char *name, uint32_t len, uint64_t new_parent,
                      const char *new_name, uint32_t new_len, uint32_t flags)
{
	struct kvc_inode_record dir, newdir, src;
	struct kvc_meta_dirent d, existing;
	int rc = kvc_meta_parent_get(s, txn, parent, &dir);
	if (rc == 0)
		rc = kvc_meta_parent_get(s, txn, new_parent, &newdir);
	if (rc == 0)
		rc = kvc_meta_dirent_get(s, txn, parent, name, len, &d);
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, d.ino, &src);
	if (rc < 0)
		return rc;
	if (S_ISDIR(src.attr.mode) && new_parent != parent)
		rc = check_not_under(s, txn, new_parent, src.attr.ino);
	if (rc < 0)
		return rc;
	int found = kvc_meta_dirent_get(s, txn, new_parent, new_name, new_len, &existing);
	if (found == 0 && (flags & KVC_RENAME_NOREPLACE))
		return -EEXIST;
	if (found == 0 && existing.ino == src.attr.ino)
		return 0; /* the same file (the same entry, or hard links): nothing to do */
	if (found == 0)
		rc = replace_target(s, txn, &src, &existing, &newdir);
	else if (found != -ENOENT)
		rc = found;
	if (rc == 0 && S_ISDIR(src.attr.mode) && new_parent != parent &&
	    newdir.attr.nlink >= KVC_META_MAX_LINKS)
		rc = -EMLINK;
	if (rc == 0)
		rc = kvc_meta_dirent_del(s, txn, parent, name, len);
	if (rc == 0)
		rc = kvc_meta_dirent_put(s, txn, new_parent, new_name, new_len, src.attr.ino, src.attr.mode);
	if (rc < 0)
		return rc;
	int64_t now = kvc_meta_now_ns();
	src.attr.ctime_ns = now;
	if (S_ISDIR(src.attr.mode) && new_parent != parent) {
		src.parent = new_parent;
		dir.attr.nlink--;
		newdir.attr.nlink++;
	}
	touch(&newdir, now);
	rc = kvc_meta_inode_put(s, txn, &src);
	if (rc == 0 && new_parent != parent) {
		touch(&dir, now);
		rc = kvc_meta_inode_put(s, txn, &dir);
	}
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &newdir);
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
		rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = rename_txn(s, txn, parent, name, name_len, new_parent, new_name, new_name_len,
	                flags);
	return kvc_lmdb_finish(txn, rc);
}
