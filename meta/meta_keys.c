/* meta_keys: see meta_keys.h; messages: docs/protocol.md (KEYS_*). */
#include "meta/meta_keys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/lmdb_txn.h"
#include "meta/meta_store_internal.h"

/* Copy n bytes at *off to out (none when out is NULL) and step past them;
 * false when the body ends first. */
static bool take(const uint8_t *in, uint32_t len, uint32_t *off, void *out, uint32_t n)
{
	const void *p = kvc_wire_body_take(in, len, off, n);
	if (p && out)
		memcpy(out, p, n);
	return p != NULL;
}

int kvc_meta_keys_parse(uint16_t type, const struct kvc_msg_keys *m, const uint8_t *in, uint32_t len,
                 struct kvc_meta_key_record *recs)
{
	uint32_t off = 0;
	for (uint32_t i = 0; i < m->count; i++) {
		struct kvc_meta_key_record *r = &recs[i];
		*r = (struct kvc_meta_key_record){0};
		if (type == KVC_MSG_KEYS_PUBLISH &&
		    (!take(in, len, &off, &r->size, 8) || !take(in, len, &off, &r->temp_len, 4)))
			return -EINVAL;
		if (!take(in, len, &off, &r->name_len, 4))
			return -EINVAL;
		if (r->temp_len > KVC_WIRE_MAX_NAME || r->name_len > KVC_WIRE_MAX_NAME + 1)
			return -EINVAL;
		r->temp = (const char *)in + off;
		if (!take(in, len, &off, NULL, r->temp_len))
			return -EINVAL;
		r->name = (const char *)in + off;
		if (!take(in, len, &off, NULL, r->name_len))
			return -EINVAL;
	}
	return off == len ? 0 : -EINVAL;
}

/* A failure that concerns one name only (nothing was changed for it). */
static bool per_name(int rc)
{
	return rc == -ENOENT || rc == -EEXIST || rc == -EISDIR || rc == -EINVAL ||
	       rc == -ENAMETOOLONG;
}

/* The regular file at (parent, name): -ENOENT, -EISDIR (a directory),
 * -EINVAL (another type), -errno. */
static int file_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent, const char *name,
                    uint32_t len, struct kvc_inode_record *rec)
{
	struct kvc_meta_dirent d;
	int rc = kvc_wire_name_check(name, len);
	if (rc == 0)
		rc = kvc_meta_dirent_get(s, txn, parent, name, len, &d);
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, d.ino, rec);
	if (rc == 0 && !S_ISREG(rec->attr.mode))
		rc = S_ISDIR(rec->attr.mode) ? -EISDIR : -EINVAL;
	return rc;
}

/* A new regular file's record under dir, placed as every file is. */
static int new_file(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
                    const struct kvc_msg_keys *m, struct kvc_inode_record *rec)
{
	return kvc_meta_new_inode(s, txn, dir, S_IFREG | (m->mode & 07777), m->uid, m->gid, 0, rec);
}

static int key_create(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
                      const struct kvc_msg_keys *m, const struct kvc_meta_key_record *r,
                      struct kvc_attr *attr)
{
	struct kvc_meta_dirent d;
	struct kvc_inode_record rec;
	int rc = kvc_wire_name_check(r->name, r->name_len);
	if (rc == 0) {
		rc = kvc_meta_dirent_get(s, txn, dir->attr.ino, r->name, r->name_len, &d);
		rc = rc == 0 ? -EEXIST : rc == -ENOENT ? 0 : rc;
	}
	if (rc == 0)
		rc = new_file(s, txn, dir, m, &rec);
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &rec);
	if (rc == 0)
		rc = kvc_meta_dirent_put(s, txn, dir->attr.ino, r->name, r->name_len, rec.attr.ino,
		                rec.attr.mode);
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

/* Remove (parent, name) of rec: its name goes, the inode follows the
 * usual rules (gc queue, or an orphan while open somewhere). */
static int drop(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent, const char *name,
                uint32_t len, const struct kvc_inode_record *rec)
{
	int rc = kvc_meta_dirent_del(s, txn, parent, name, len);
	return rc == 0 ? kvc_meta_inode_unlinked(s, txn, rec) : rc;
}

static int key_publish(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent, uint32_t flags,
                       const struct kvc_meta_key_record *r, struct kvc_attr *attr)
{
	struct kvc_inode_record temp, old;
	int rc = kvc_wire_name_check(r->name, r->name_len);
	if (rc == 0)
		rc = file_get(s, txn, parent, r->temp, r->temp_len, &temp);
	if (rc < 0)
		return rc == -EISDIR ? -EINVAL : rc;
	int found = file_get(s, txn, parent, r->name, r->name_len, &old);
	if (found != -ENOENT && (found < 0 || !(flags & KVC_KEYS_REPLACE))) {
		/* Taken (or not a file): the key stays as it is, the temp goes. */
		rc = drop(s, txn, parent, r->temp, r->temp_len, &temp);
		return rc < 0 ? rc : found == 0 ? -EEXIST : found;
	}
	if (found == 0)
		rc = drop(s, txn, parent, r->name, r->name_len, &old);
	if (rc == 0)
		rc = kvc_meta_dirent_del(s, txn, parent, r->temp, r->temp_len);
	if (rc == 0)
		rc = kvc_meta_dirent_put(s, txn, parent, r->name, r->name_len, temp.attr.ino, temp.attr.mode);
	if (rc < 0)
		return rc;
	int64_t now = kvc_meta_now_ns();
	temp.attr.size = r->size;
	temp.attr.mtime_ns = temp.attr.ctime_ns = now;
	rc = kvc_meta_inode_put(s, txn, &temp);
	if (rc == 0)
		*attr = temp.attr;
	return rc;
}

static int key_one(struct kvc_meta_store *s, MDB_txn *txn, uint16_t type,
                   const struct kvc_inode_record *dir, const struct kvc_msg_keys *m,
                   const struct kvc_meta_key_record *r, struct kvc_attr *attr)
{
	struct kvc_inode_record rec;
	int rc;
	switch (type) { /* every type is a case: no default acts */
	case KVC_MSG_KEYS_CREATE:
		return key_create(s, txn, dir, m, r, attr);
	case KVC_MSG_KEYS_PUBLISH:
		return key_publish(s, txn, dir->attr.ino, m->flags, r, attr);
	case KVC_MSG_KEYS_REMOVE:
		rc = file_get(s, txn, dir->attr.ino, r->name, r->name_len, &rec);
		if (rc == 0)
			rc = drop(s, txn, dir->attr.ino, r->name, r->name_len, &rec);
		break;
	case KVC_MSG_KEYS_LOOKUP:
		rc = file_get(s, txn, dir->attr.ino, r->name, r->name_len, &rec);
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

int kvc_meta_keys_run(struct kvc_meta_store *s, uint16_t type, const struct kvc_msg_keys *m,
                      const uint8_t *records, uint32_t len, struct kvc_msg_key_result *out)
{
	if (m->count > KVC_WIRE_MAX_KEYS || (m->flags & ~KVC_KEYS_REPLACE))
		return -EINVAL;
	struct kvc_meta_key_record *recs = calloc(m->count ? m->count : 1, sizeof(*recs));
	if (!recs)
		return -ENOMEM;
	int rc = kvc_meta_keys_parse(type, m, records, len, recs);
	bool write = type != KVC_MSG_KEYS_LOOKUP, changed = false;
	MDB_txn *txn = NULL;
	struct kvc_inode_record dir;
	if (rc == 0)
		rc = kvc_meta_begin(s, write, &txn);
	if (rc < 0) {
		free(recs);
		return rc;
	}
	rc = kvc_meta_parent_get(s, txn, m->parent, &dir);
	for (uint32_t i = 0; rc == 0 && i < m->count; i++) {
		out[i] = (struct kvc_msg_key_result){0};
		int one = key_one(s, txn, type, &dir, m, &recs[i], &out[i].attr);
		if (one < 0 && !per_name(one))
			rc = one;
		out[i].rc = one;
		changed |= write && (one == 0 || type == KVC_MSG_KEYS_PUBLISH);
	}
	if (rc == 0 && changed) {
		dir.attr.mtime_ns = dir.attr.ctime_ns = kvc_meta_now_ns();
		rc = kvc_meta_inode_put(s, txn, &dir);
	}
	free(recs);
	if (!write) {
		mdb_txn_abort(txn);
		return rc;
	}
	return kvc_lmdb_finish(txn, rc);
}
