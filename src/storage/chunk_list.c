/* chunk_list: the listing of a target's chunks and the whole-chunk set a
 * resync makes (storage/resync.h); see chunk_store.h for the contracts
 * and the lock order. */
#include <errno.h>
#include <string.h>

#include "core/lmdb_txn.h"
#include "storage/chunk_store_internal.h"

static void key_decode(const uint8_t *key, uint64_t *inode, uint32_t *chunk)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | key[i];
	*inode = v;
	*chunk = (uint32_t)key[8] << 24 | (uint32_t)key[9] << 16 | (uint32_t)key[10] << 8 | key[11];
}

/* An entry from a record's header (copied: LMDB aligns values to 2). */
static int entry_of(const MDB_val *k, const MDB_val *v, struct kvc_chunk_entry *e)
{
	struct kvc_chunk_record rec;
	if (k->mv_size != 12 || v->mv_size < KVC_CHUNK_RECORD_HEADER)
		return -EIO;
	memcpy(&rec, v->mv_data, KVC_CHUNK_RECORD_HEADER);
	if (rec.magic != KVC_CHUNK_RECORD_MAGIC && !kvc_chunk_record_inline(&rec))
		return -EIO;
	key_decode(k->mv_data, &e->inode, &e->chunk);
	e->length = rec.length;
	e->chunk_crc = rec.chunk_crc;
	return 0;
}

int kvc_chunk_store_list(struct kvc_chunk_store *store, bool after, uint64_t after_inode,
                         uint32_t after_chunk, struct kvc_chunk_entry *out, uint32_t max,
                         bool *more)
{
	MDB_txn *txn;
	MDB_cursor *cursor = NULL;
	uint8_t key[12];
	int count = 0;
	bool left = false;
	int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = mdb_cursor_open(txn, store->dbi, &cursor);
	MDB_val k = {0, NULL}, v;
	if (rc == 0 && after) {
		kvc_chunk_key(key, after_inode, after_chunk);
		k = (MDB_val){sizeof(key), key};
		rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
		if (rc == 0 && k.mv_size == sizeof(key) && memcmp(k.mv_data, key, sizeof(key)) == 0)
			rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT); /* strictly after */
	} else if (rc == 0) {
		rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST);
	}
	int err = 0;
	while (rc == 0 && err == 0) {
		if ((uint32_t)count == max) {
			left = true;
			break;
		}
		err = entry_of(&k, &v, &out[count]);
		if (err == 0)
			count++;
		rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
	}
	if (err == 0 && rc != 0 && rc != MDB_NOTFOUND)
		err = kvc_lmdb_errno(rc);
	if (cursor)
		mdb_cursor_close(cursor);
	mdb_txn_abort(txn);
	if (err < 0)
		return err;
	*more = left;
	return count;
}

/* Drop a chunk's record, then its file; its lock is held exclusively.
 * Returns 0 (also when it had none) or -errno. */
static int drop_locked(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk)
{
	uint8_t key[12];
	MDB_txn *txn;
	uint32_t magic = 0;
	kvc_chunk_key(key, inode, chunk);
	MDB_val k = {sizeof(key), key}, v;
	int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = mdb_get(txn, store->dbi, &k, &v);
	if (rc == 0 && v.mv_size >= sizeof(magic))
		memcpy(&magic, v.mv_data, sizeof(magic));
	if (rc == 0)
		rc = mdb_del(txn, store->dbi, &k, NULL);
	int result = rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
	result = kvc_lmdb_finish(txn, result);
	/* The record is gone: a file left of it (or of an earlier removal cut
	 * short) is a hole either way. */
	if (result == 0 && magic != KVC_CHUNK_RECORD_INLINE_MAGIC)
		kvc_chunk_unlink(store, inode, chunk);
	return result;
}

int kvc_chunk_store_set(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                        const void *data, uint32_t length)
{
	struct kvc_chunk_record rec;
	if (length > KVC_LAYOUT_MAX_CHUNK)
		return -EINVAL;
	bool zeros = length == 0 || kvc_chunk_all_zeros(data, length);
	int rc = zeros ? 0 : kvc_reserve_admit(&store->reserve, length);
	if (rc < 0)
		return rc;
	unsigned slot = kvc_chunk_lock_slot(inode, chunk);
	kvc_chunk_lock_write(store, slot);
	rc = drop_locked(store, inode, chunk);
	if (rc == 0 && length > 0)
		rc = kvc_chunk_write_locked(store, inode, chunk, 0, data, length, zeros, &rec);
	kvc_chunk_unlock_write(store, slot);
	if (!zeros)
		kvc_reserve_done(&store->reserve, length);
	return rc;
}
