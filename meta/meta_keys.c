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
		if (type == KVC_MSG_KEYS_CREATE)
			continue; /* no record: a temp has no name */
		if (type == KVC_MSG_KEYS_PUBLISH &&
		    (!take(in, len, &off, &r->size, 8) || !take(in, len, &off, &r->temp, 8)))
			return -EINVAL;
		if (!take(in, len, &off, &r->name_len, 4))
			return -EINVAL;
		if (r->name_len > KVC_WIRE_MAX_NAME + 1)
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
	       rc == -ENAMETOOLONG || rc == -ESTALE;
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

/* A put's temp: a nameless regular file the client has open (an orphan,
 * reclaimed when the client closes it or is dropped). */
static int key_create(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
                      const struct kvc_msg_keys *m, const struct kvc_meta_key_record *r,
                      struct kvc_attr *attr)
{
	struct kvc_inode_record rec;
	(void)r; /* a temp has no record */
	int rc = new_file(s, txn, dir, m, &rec);
	rec.attr.nlink = 0;
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &rec);
	if (rc == 0)
		rc = kvc_meta_session_put(s, txn, rec.attr.ino, m->client);
	if (rc == 0)
		rc = kvc_meta_orphan_mark(s, txn, rec.attr.ino, KVC_ORPHAN_TEMP);
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

/* The temp of a publish: a temp client made with CREATE and has open
 * (not published or closed yet); else -ESTALE (a temp reclaimed with a
 * dropped client, a number that was never one, or a file whose last name
 * went while it was open: no publish gives that one a name again). */
static int temp_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                    const uint8_t client[KVC_WIRE_CLIENT_ID], struct kvc_inode_record *rec)
{
	int rc = kvc_meta_orphan_kind(s, txn, ino);
	rc = rc < 0 ? rc : rc == KVC_ORPHAN_TEMP ? kvc_meta_inode_get(s, txn, ino, rec) : -ESTALE;
	if (rc == 0 && (!S_ISREG(rec->attr.mode) || rec->attr.nlink != 0))
		rc = -ESTALE;
	if (rc == 0)
		rc = kvc_meta_session_has(s, txn, ino, client);
	return rc == 1 ? 0 : rc == 0 || rc == -ENOENT ? -ESTALE : rc;
}

static int key_publish(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
                       const struct kvc_msg_keys *m, const struct kvc_meta_key_record *r,
                       struct kvc_attr *attr)
{
	uint64_t parent = dir->attr.ino;
	struct kvc_inode_record temp, old;
	int rc = kvc_wire_name_check(r->name, r->name_len);
	if (rc == 0)
		rc = temp_get(s, txn, r->temp, m->client, &temp);
	if (rc < 0)
		return rc;
	int found = file_get(s, txn, parent, r->name, r->name_len, &old);
	if (found != -ENOENT && (found < 0 || !(m->flags & KVC_KEYS_REPLACE))) {
		/* Taken (or not a file): the key stays as it is, the temp goes. */
		rc = kvc_meta_session_end(s, txn, r->temp, m->client);
		return rc < 0 ? rc : found == 0 ? -EEXIST : found;
	}
	if (found == 0)
		rc = drop(s, txn, parent, r->name, r->name_len, &old);
	if (rc == 0)
		rc = kvc_meta_dirent_put(s, txn, parent, r->name, r->name_len, temp.attr.ino, temp.attr.mode);
	if (rc == 0)
		rc = kvc_meta_orphan_mark(s, txn, r->temp, 0);
	if (rc == 0) {
		int64_t now = kvc_meta_now_ns();
		temp.attr.nlink = 1;
		temp.attr.size = r->size;
		temp.attr.mtime_ns = temp.attr.ctime_ns = now;
		rc = kvc_meta_inode_put(s, txn, &temp);
	}
	if (rc == 0)
		rc = kvc_meta_session_end(s, txn, r->temp, m->client); /* named now: kept */
	if (rc == 0)
		*attr = temp.attr;
	return rc;
}

static int key_lookup(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
                      const struct kvc_msg_keys *m, const struct kvc_meta_key_record *r,
                      struct kvc_attr *attr)
{
	struct kvc_inode_record rec;
	(void)m;
	int rc = file_get(s, txn, dir->attr.ino, r->name, r->name_len, &rec);
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

static int key_remove(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
                      const struct kvc_msg_keys *m, const struct kvc_meta_key_record *r,
                      struct kvc_attr *attr)
{
	struct kvc_inode_record rec;
	(void)m;
	int rc = file_get(s, txn, dir->attr.ino, r->name, r->name_len, &rec);
	if (rc == 0)
		rc = drop(s, txn, dir->attr.ino, r->name, r->name_len, &rec);
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

/* The KEYS_* messages, by type - KVC_MSG_KEYS_LOOKUP: what one record
 * does, and whether the message writes. */
static const struct {
	int (*one)(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_inode_record *dir,
	           const struct kvc_msg_keys *m, const struct kvc_meta_key_record *r,
	           struct kvc_attr *attr);
	bool write;
} key_ops[] = {
	[KVC_MSG_KEYS_LOOKUP - KVC_MSG_KEYS_LOOKUP] = {key_lookup, false},
	[KVC_MSG_KEYS_CREATE - KVC_MSG_KEYS_LOOKUP] = {key_create, true},
	[KVC_MSG_KEYS_PUBLISH - KVC_MSG_KEYS_LOOKUP] = {key_publish, true},
	[KVC_MSG_KEYS_REMOVE - KVC_MSG_KEYS_LOOKUP] = {key_remove, true},
};

int kvc_meta_keys_run(struct kvc_meta_store *s, uint16_t type, const struct kvc_msg_keys *m,
                      const uint8_t *records, uint32_t len, struct kvc_msg_key_result *out)
{
	unsigned op = (unsigned)type - KVC_MSG_KEYS_LOOKUP;
	if (op >= sizeof(key_ops) / sizeof(key_ops[0]) || !key_ops[op].one)
		return -EOPNOTSUPP;
	if (m->count > KVC_WIRE_MAX_KEYS || (m->flags & ~KVC_KEYS_REPLACE))
		return -EINVAL;
	struct kvc_meta_key_record *recs = calloc(m->count ? m->count : 1, sizeof(*recs));
	if (!recs)
		return -ENOMEM;
	int rc = kvc_meta_keys_parse(type, m, records, len, recs);
	bool write = key_ops[op].write, changed = false;
	MDB_txn *txn = NULL;
	struct kvc_inode_record dir;
	if (rc == 0)
		rc = kvc_meta_begin(s, write, &txn);
	if (rc < 0) {
		free(recs);
		return rc;
	}
	rc = kvc_meta_parent_get(s, txn, m->parent, &dir);
	/* a dropped client that has not rejoined holds no new sessions (its
	 * temps would outlive what it was told) */
	if (rc == 0 && type == KVC_MSG_KEYS_CREATE) {
		int dropped = kvc_meta_dropped_has(s, txn, m->client);
		rc = dropped > 0 ? -ESTALE : dropped;
	}
	for (uint32_t i = 0; rc == 0 && i < m->count; i++) {
		out[i] = (struct kvc_msg_key_result){0};
		int one = key_ops[op].one(s, txn, &dir, m, &recs[i], &out[i].attr);
		if (one < 0 && !per_name(one))
			rc = one;
		out[i].rc = one;
		/* temps are nameless: making one leaves the directory as it was */
		changed |= type != KVC_MSG_KEYS_CREATE && write && one == 0;
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
