/*
 * meta_sizes: a file's size in the meta store: setattr (with the other
 * attributes it sets), extend, and the truncations still to finish on the
 * storage servers (table `truncates`: ino (u64 BE) -> u64 size: the
 * file's chunks must still be cut to that size).
 *
 * Shrinking a file takes two steps, ordered so that no byte cut off can
 * come back: (1) the new size commits, and the same transaction records
 * the cut in `truncates` (the smaller size when one is already there);
 * (2) kvc-meta cuts the chunks on the storage servers (collector.h:
 * kvc_meta_collector_truncate) and then drops the record, only if it
 * still names the size just cut (kvc_meta_store_truncate_done). While a
 * record is there the file does not grow: setattr and extend to a larger
 * size answer -EAGAIN, and the caller finishes the cut first. So a byte
 * beyond the new size is never inside the size again before it was cut:
 * no reader sees old bytes, wherever its idea of the size comes from. A
 * write that lands between (1) and the end of (2) loses what it put
 * beyond the new size (a write racing a truncate may go either way);
 * whatever size it commits later can only show zeros there. A crash
 * between (1) and (2) leaves the record: the collector finishes the cut.
 *
 * Invariant: a `truncates` record exists only for a regular file that
 * exists; it goes with its inode.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/layout.h"
#include "core/lmdb_txn.h"
#include "meta/meta_store_internal.h"

/* The pending cut of ino: 0 and *size, -ENOENT, -EIO. */
static int cut_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, uint64_t *size)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->truncates, &k, &v));
	if (rc == 0 && v.mv_size != sizeof(*size))
		rc = -EIO;
	if (rc == 0)
		memcpy(size, v.mv_data, sizeof(*size));
	return rc;
}

static int cut_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, uint64_t size)
{
	uint64_t pending;
	uint8_t key[8];
	int rc = cut_get(s, txn, ino, &pending);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	if (rc == 0 && pending <= size)
		return 0; /* a deeper cut is pending: it covers this one */
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v = {sizeof(size), &size};
	return kvc_lmdb_errno(mdb_put(txn, s->truncates, &k, &v, 0));
}

int kvc_meta_truncate_forget(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key};
	int rc = mdb_del(txn, s->truncates, &k, NULL);
	return rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
}

/* A size change of a regular file rec to size: record the cut when it
 * shrinks, -EAGAIN when it grows while a cut is pending. */
static int size_change(struct kvc_meta_store *s, MDB_txn *txn,
                       const struct kvc_inode_record *rec, uint64_t size)
{
	uint64_t pending;
	if (size < rec->attr.size)
		return cut_put(s, txn, rec->attr.ino, size);
	if (size == rec->attr.size)
		return 0;
	int rc = cut_get(s, txn, rec->attr.ino, &pending);
	return rc == 0 ? -EAGAIN : rc == -ENOENT ? 0 : rc;
}

int kvc_meta_store_setattr(struct kvc_meta_store *s, const struct kvc_msg_setattr *req,
                           struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	if (req->mask & ~KVC_SETATTR_ALL)
		return -EINVAL;
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_meta_inode_get(s, txn, req->ino, &rec);
	if (rc == 0 && (req->mask & KVC_SETATTR_SIZE)) {
		if (S_ISDIR(rec.attr.mode))
			rc = -EISDIR;
		else if (!S_ISREG(rec.attr.mode))
			rc = -EINVAL;
		else if (req->size > KVC_LAYOUT_MAX_FILE_SIZE)
			rc = -EFBIG;
		else
			rc = size_change(s, txn, &rec, req->size);
	}
	if (rc < 0)
		goto out;
	int64_t now = kvc_meta_now_ns();
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
	rc = kvc_meta_inode_put(s, txn, &rec);
	if (rc == 0)
		*attr = rec.attr;
out:
	return kvc_lmdb_finish(txn, rc);
}

struct extend_call {
	uint64_t ino, size;
	struct kvc_attr *attr;
};

static int extend_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	const struct extend_call *call = arg;
	struct kvc_inode_record rec;
	int rc = kvc_meta_inode_get(s, txn, call->ino, &rec);
	if (rc == 0 && S_ISDIR(rec.attr.mode))
		rc = -EISDIR;
	else if (rc == 0 && !S_ISREG(rec.attr.mode))
		rc = -EINVAL;
	/* A commit of written data: mtime moves even when the size does not
	 * (an overwrite in place), so another client's open sees the file
	 * changed and drops the pages it kept (close-to-open). */
	if (rc == 0 && call->size > rec.attr.size) {
		rc = size_change(s, txn, &rec, call->size);
		rec.attr.size = call->size;
	}
	if (rc == 0) {
		rec.attr.mtime_ns = rec.attr.ctime_ns = kvc_meta_now_ns();
		rc = kvc_meta_inode_put(s, txn, &rec);
	}
	if (rc == 0)
		*call->attr = rec.attr;
	return rc;
}

/* With the group commit (core/lmdb_group.h): the size commits of files closed
 * together share one transaction. */
int kvc_meta_store_extend(struct kvc_meta_store *s, uint64_t ino, uint64_t size,
                          struct kvc_attr *attr)
{
	struct extend_call call = {ino, size, attr};
	if (size > KVC_LAYOUT_MAX_FILE_SIZE)
		return -EFBIG;
	return kvc_meta_group_run(s, extend_in, &call);
}

int kvc_meta_store_truncate_pending(struct kvc_meta_store *s, uint64_t ino, uint64_t *size)
{
	MDB_txn *txn;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = cut_get(s, txn, ino, size);
	mdb_txn_abort(txn);
	return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

int kvc_meta_store_truncate_done(struct kvc_meta_store *s, uint64_t ino, uint64_t size)
{
	MDB_txn *txn;
	uint64_t pending;
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = cut_get(s, txn, ino, &pending);
	if (rc == 0 && pending == size)
		rc = kvc_meta_truncate_forget(s, txn, ino);
	return kvc_lmdb_finish(txn, rc == -ENOENT ? 0 : rc);
}

int kvc_meta_store_truncates_list(struct kvc_meta_store *s, uint64_t *inos, int max)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int count = 0;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->truncates, &cur));
	int got = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	while (got == 0 && count < max) {
		if (k.mv_size == 8)
			inos[count++] = kvc_meta_from_be64(k.mv_data);
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == 0)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc < 0 ? rc : count;
}
