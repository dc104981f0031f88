/* chunk_store: see chunk_store.h for the on-disk format and locking. */
#include "storage/chunk_store.h"
#include "storage/chunk_store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/fsutil.h"
#include "core/layout.h"
#include "core/log.h"
#include "core/lmdb_txn.h"

#define FORMAT_LINE "kvc-target 1\n"
/* Address space only (no MDB_WRITEMAP: the file grows with what it holds);
 * inline chunks make the index as large as the small chunks it keeps. */
#define MAP_SIZE (1ull << 40)
/* Chunks one write transaction of a range operation handles at most. */
#define RANGE_BATCH 64

static uint64_t key_inode(const uint8_t *key)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | key[i];
	return v;
}

static uint32_t key_chunk(const uint8_t *key)
{
	return (uint32_t)key[8] << 24 | (uint32_t)key[9] << 16 | (uint32_t)key[10] << 8 | key[11];
}

int kvc_chunk_record_get(MDB_txn *txn, MDB_dbi dbi, uint64_t inode, uint32_t chunk,
                         struct kvc_chunk_record *rec, const uint8_t **inline_data)
{
	uint8_t key[12];
	kvc_chunk_key(key, inode, chunk);
	MDB_val k = {sizeof(key), key}, v;
	int rc = mdb_get(txn, dbi, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = kvc_chunk_record_parse(&v, rec, inline_data);
	return rc < 0 ? rc : 1;
}

static int record_put(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                      const struct kvc_chunk_record *rec)
{
	uint8_t key[12];
	MDB_txn *txn;
	kvc_chunk_key(key, inode, chunk);
	MDB_val k = {sizeof(key), key};
	MDB_val v = {KVC_CHUNK_RECORD_HEADER + rec->block_count * 4u, (void *)rec};
	int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = mdb_put(txn, store->dbi, &k, &v, 0);
	if (rc) {
		mdb_txn_abort(txn);
		return kvc_lmdb_errno(rc);
	}
	rc = mdb_txn_commit(txn);
	return rc ? kvc_lmdb_errno(rc) : 0;
}

int kvc_chunk_file_io(int fd, bool write, void *buf, size_t length, uint64_t offset)
{
	size_t done = 0;
	while (done < length) {
		ssize_t n = write ? pwrite(fd, (const char *)buf + done, length - done,
		                           (off_t)(offset + done))
		                  : pread(fd, (char *)buf + done, length - done, (off_t)(offset + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) {
			if (write)
				return -EIO;
			memset((char *)buf + done, 0, length - done);
			return 0;
		}
		done += (size_t)n;
	}
	return 0;
}

int kvc_chunk_open_file(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                        int flags)
{
	char name[64];
	kvc_chunk_file_name(inode, chunk, name, sizeof(name));
	int fd = openat(store->dir_fd, name, flags | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

static int check_format(int dir_fd)
{
	char buf[64] = {0};
	int fd = openat(dir_fd, "FORMAT", O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(dir_fd, "FORMAT", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		ssize_t n = write(fd, FORMAT_LINE, strlen(FORMAT_LINE));
		int rc = n == (ssize_t)strlen(FORMAT_LINE) ? fsync(fd) : -1;
		close(fd);
		return rc == 0 ? 0 : -EIO;
	}
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 && strcmp(buf, FORMAT_LINE) == 0 ? 0 : -EINVAL;
}

static int make_dirs(int dir_fd)
{
	char name[32];
	if (mkdirat(dir_fd, "index", 0700) < 0 && errno != EEXIST)
		return -errno;
	if (mkdirat(dir_fd, "chunks", 0700) < 0 && errno != EEXIST)
		return -errno;
	for (int i = 0; i < 256; i++) {
		snprintf(name, sizeof(name), "chunks/%02x", i);
		if (mkdirat(dir_fd, name, 0700) < 0 && errno != EEXIST)
			return -errno;
	}
	return 0;
}

static int open_index(struct kvc_chunk_store *store)
{
	char index[PATH_MAX + 8];
	MDB_txn *txn;
	snprintf(index, sizeof(index), "%s/index", store->path);
	/* After a machine crash, back to the last checkpoint (chunk_store.h
	 * "Crashes"); an index from before checkpoints gets its first now. */
	int rc = kvc_lmdb_checkpoint_env_open(index, MAP_SIZE, 0, &store->env, &store->checkpoint);
	if (rc < 0)
		return rc;
	rc = mdb_txn_begin(store->env, NULL, 0, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = mdb_dbi_open(txn, NULL, 0, &store->dbi);
	if (rc) {
		mdb_txn_abort(txn);
		return kvc_lmdb_errno(rc);
	}
	rc = mdb_txn_commit(txn);
	return rc ? kvc_lmdb_errno(rc) : 0;
}

static int group_begin(void *owner, MDB_txn **txn)
{
	struct kvc_chunk_store *store = owner;
	return kvc_lmdb_errno(mdb_txn_begin(store->env, NULL, 0, txn));
}

int kvc_chunk_store_open(const char *path, struct kvc_chunk_store **out)
{
	struct kvc_chunk_store *store = calloc(1, sizeof(*store));
	int rc;
	if (!store)
		return -ENOMEM;
	store->dir_fd = -1;
	store->changes_fd = -1;
	store->inline_max = KVC_CHUNK_INLINE_DEFAULT;
	store->direct_reads = false;
	for (unsigned i = 0; i < KVC_CHUNK_LOCK_SLOTS; i++)
		pthread_rwlock_init(&store->locks[i], NULL);
	rc = kvc_lmdb_group_init(&store->group, group_begin, store);
	if (rc == 0) {
		rc = kvc_chunk_changes_init(store);
		if (rc < 0)
			kvc_lmdb_group_destroy(&store->group);
	}
	if (rc < 0) {
		for (unsigned i = 0; i < KVC_CHUNK_LOCK_SLOTS; i++)
			pthread_rwlock_destroy(&store->locks[i]);
		free(store);
		return rc;
	}
	if (strlen(path) >= sizeof(store->path)) {
		rc = -ENAMETOOLONG;
		goto fail;
	}
	strcpy(store->path, path);
	rc = kvc_fsutil_mkdirs(path, 0700);
	if (rc < 0)
		goto fail;
	store->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (store->dir_fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = kvc_reserve_init(&store->reserve, store->dir_fd, 0, KVC_RESERVE_DATA, NULL);
	if (rc == 0)
		rc = check_format(store->dir_fd);
	if (rc == 0)
		rc = make_dirs(store->dir_fd);
	if (rc == 0)
		rc = open_index(store);
	if (rc < 0)
		goto fail;
	*out = store;
	return 0;
fail:
	kvc_chunk_store_close(store);
	return rc;
}

void kvc_chunk_store_close(struct kvc_chunk_store *store)
{
	if (!store)
		return;
	kvc_lmdb_checkpoint_close(store->checkpoint);
	kvc_lmdb_close(store->env);
	kvc_reserve_destroy(&store->reserve);
	if (store->dir_fd >= 0)
		close(store->dir_fd);
	for (unsigned i = 0; i < KVC_CHUNK_LOCK_SLOTS; i++)
		pthread_rwlock_destroy(&store->locks[i]);
	kvc_lmdb_group_destroy(&store->group);
	kvc_chunk_changes_destroy(store);
	free(store);
}

/* Recompute the crc of block b of a chunk of `length` bytes from the file,
 * or from `data` when the write covered the whole block. */
static int block_crc(int fd, uint32_t b, uint32_t length, uint32_t write_offset,
                     const uint8_t *data, uint32_t write_length, uint32_t *crc)
{
	uint32_t start = b * KVC_CHUNK_BLOCK;
	uint32_t end = start + KVC_CHUNK_BLOCK < length ? start + KVC_CHUNK_BLOCK : length;
	if (start >= write_offset && end <= write_offset + write_length) {
		*crc = kvc_crc32c(0, data + (start - write_offset), end - start);
		return 0;
	}
	uint8_t buf[KVC_CHUNK_BLOCK];
	int rc = kvc_chunk_file_io(fd, false, buf, end - start, start);
	if (rc == 0)
		*crc = kvc_crc32c(0, buf, end - start);
	return rc;
}

uint32_t kvc_chunk_record_crc(const struct kvc_chunk_record *rec)
{
	return kvc_crc32c(0, rec->block_crc, rec->block_count * 4u);
}

bool kvc_chunk_all_zeros(const uint8_t *data, uint32_t length)
{
	return data[0] == 0 && memcmp(data, data + 1, length - 1) == 0;
}

/* Zeros over [offset, offset + length) of a chunk file of old_length
 * bytes, taking no space: the range is punched out (a hole reads as
 * zeros) and the file extended sparsely. Where the filesystem cannot
 * punch, they are written. Returns 0 or -errno. */
static int put_zeros(int fd, uint32_t offset, uint32_t length, uint32_t old_length,
                     const uint8_t *data)
{
	if (offset < old_length &&
	    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) < 0)
		return errno == EOPNOTSUPP ? kvc_chunk_file_io(fd, true, (void *)data, length, offset)
		                           : -errno;
	if (offset + length > old_length && ftruncate(fd, (off_t)offset + length) < 0)
		return -errno;
	return 0;
}

/* A chunk's record (1; 0 when absent, or -errno) and, for an inline one,
 * a copy of its bytes in *bytes (the caller frees it; NULL otherwise). */
static int lookup(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                  struct kvc_chunk_record *rec, uint8_t **bytes)
{
	MDB_txn *txn;
	const uint8_t *inline_data = NULL;
	*bytes = NULL;
	int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	int found = kvc_chunk_record_get(txn, store->dbi, inode, chunk, rec, &inline_data);
	if (found > 0 && inline_data) {
		*bytes = malloc(rec->length ? rec->length : 1);
		if (*bytes)
			memcpy(*bytes, inline_data, rec->length);
		else
			found = -ENOMEM;
	}
	mdb_txn_abort(txn);
	return found;
}

/* The write itself; the chunk's lock is held exclusively. zeros: data is
 * all zeros (put_zeros). An inline chunk (chunk_inline.c) stays in its
 * record when it can, else moves to its file first. */
int kvc_chunk_write_locked(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                           uint32_t offset, const uint8_t *data, uint32_t length, bool zeros,
                           struct kvc_chunk_record *rec)
{
	uint8_t *inline_bytes;
	int rc = 0;
	if (offset + length <= store->inline_max)
		rc = kvc_chunk_inline_write(store, inode, chunk, offset, data, length, zeros, rec);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	int found = lookup(store, inode, chunk, rec, &inline_bytes);
	if (found < 0)
		return found;
	if (!found)
		*rec = (struct kvc_chunk_record){.magic = KVC_CHUNK_RECORD_MAGIC};

	/* No record: whatever a file may hold (its removal was cut short) is
	 * a hole, so the file starts empty. */
	int fd = inline_bytes
	                 ? kvc_chunk_inline_to_file(store, inode, chunk, rec, inline_bytes)
	                 : kvc_chunk_open_file(store, inode, chunk,
	                                       O_RDWR | O_CREAT | (found ? 0 : O_TRUNC));
	free(inline_bytes);
	if (fd < 0)
		return fd;
	uint32_t old_length = rec->length;
	rc = zeros ? put_zeros(fd, offset, length, old_length, data)
	           : kvc_chunk_file_io(fd, true, (void *)data, length, offset);
	if (rc < 0)
		goto out;

	uint32_t new_length = offset + length > old_length ? offset + length : old_length;
	uint32_t first = (offset < old_length ? offset : old_length) / KVC_CHUNK_BLOCK;
	uint32_t last = (offset + length - 1) / KVC_CHUNK_BLOCK;
	rec->length = new_length;
	rec->block_count = (new_length + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK;
	for (uint32_t b = first; b <= last && rc == 0; b++)
		rc = block_crc(fd, b, new_length, offset, data, length, &rec->block_crc[b]);
	if (rc < 0)
		goto out;
	rec->version++;
	rec->chunk_crc = kvc_chunk_record_crc(rec);
	rc = record_put(store, inode, chunk, rec); /* the LMDB write lock, innermost */
out:
	close(fd);
	return rc;
}

int kvc_chunk_store_write(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                          uint32_t chunk_size, uint32_t offset, const void *data,
                          uint32_t length, uint64_t *version, uint32_t *chunk_length)
{
	struct kvc_chunk_record rec;
	if (length == 0 || chunk_size > KVC_LAYOUT_MAX_CHUNK || offset > chunk_size ||
	    length > chunk_size - offset)
		return -EINVAL;
	/* Zeros take no space (put_zeros): a punch's edges go through even
	 * at the reserve. Other data must leave the reserve free. */
	bool zeros = kvc_chunk_all_zeros(data, length);
	int rc = zeros ? 0 : kvc_reserve_admit(&store->reserve, length);
	if (rc < 0)
		return rc;
	unsigned slot = kvc_chunk_lock_slot(inode, chunk);
	kvc_chunk_lock_write(store, slot);
	rc = kvc_chunk_write_locked(store, inode, chunk, offset, data, length, zeros, &rec);
	kvc_chunk_unlock_write(store, slot);
	if (!zeros)
		kvc_reserve_done(&store->reserve, length);
	if (rc == 0) {
		*version = rec.version;
		*chunk_length = rec.length;
	}
	return rc;
}

/* A range operation: every chunk of inode in [from, to] is dropped, but
 * for truncate's boundary chunk, which keeps keep_bytes when that is not
 * zero. */
struct range_op {
	uint64_t inode;
	uint32_t from, to;
	uint32_t boundary_chunk;
	uint32_t keep_bytes;
};

/* Shorten the boundary chunk (the record under the cursor) to keep_bytes:
 * ftruncate its file, recompute its last block's crc, rewrite the record.
 * Returns 1 when changed, 0 when already that short, -errno. */
static int shorten(struct kvc_chunk_store *store, const struct range_op *op,
                   MDB_cursor *cursor, const MDB_val *k, const MDB_val *v)
{
	struct kvc_chunk_record rec;
	const uint8_t *inline_data;
	int rc = kvc_chunk_record_parse(v, &rec, &inline_data);
	if (rc < 0)
		return rc;
	if (inline_data)
		return kvc_chunk_inline_shorten(cursor, k, v, op->keep_bytes);
	if (rec.length <= op->keep_bytes)
		return 0;
	int fd = kvc_chunk_open_file(store, op->inode, op->boundary_chunk, O_RDWR | O_CREAT);
	rc = fd < 0 ? fd : (ftruncate(fd, op->keep_bytes) < 0 ? -errno : 0);
	rec.length = op->keep_bytes;
	rec.block_count = (op->keep_bytes + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK;
	if (rc == 0 && op->keep_bytes % KVC_CHUNK_BLOCK)
		rc = block_crc(fd, rec.block_count - 1, rec.length, 0, NULL, 0,
		               &rec.block_crc[rec.block_count - 1]);
	if (rc == 0) {
		rec.version++;
		rec.chunk_crc = kvc_chunk_record_crc(&rec);
		MDB_val key = *k, nv = {KVC_CHUNK_RECORD_HEADER + rec.block_count * 4u, &rec};
		rc = mdb_cursor_put(cursor, &key, &nv, MDB_CURRENT);
		rc = rc ? kvc_lmdb_errno(rc) : 1;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Apply the range operation to the chunk whose record is under the cursor;
 * its lock is held exclusively. *drop is set when its file is to go once
 * the transaction committed (an inline chunk has none). Returns 1 when
 * changed, 0 or -errno. */
static int change_chunk(struct kvc_chunk_store *store, const struct range_op *op,
                        MDB_cursor *cursor, uint32_t chunk, const MDB_val *k,
                        const MDB_val *v, bool *drop)
{
	uint32_t magic = 0;
	*drop = false;
	if (chunk == op->boundary_chunk && op->keep_bytes > 0)
		return shorten(store, op, cursor, k, v);
	if (v->mv_size >= sizeof(magic))
		memcpy(&magic, v->mv_data, sizeof(magic));
	int rc = mdb_cursor_del(cursor, 0);
	if (rc)
		return kvc_lmdb_errno(rc);
	*drop = magic != KVC_CHUNK_RECORD_INLINE_MAGIC;
	return 1;
}

void kvc_chunk_unlink(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk)
{
	char name[64];
	kvc_chunk_file_name(inode, chunk, name, sizeof(name));
	if (unlinkat(store->dir_fd, name, 0) < 0 && errno != ENOENT)
		kvc_log_warn("cannot remove %s/%s: %s", store->path, name, strerror(errno));
}

static bool holds(const unsigned *held, int count, unsigned slot)
{
	for (int i = 0; i < count; i++)
		if (held[i] == slot)
			return true;
	return false;
}

/* One write transaction over the chunks of [*next, op->to]. Inside it a
 * chunk lock is only tried, never waited for (chunk_store.h's lock
 * order): the first chunk whose lock is busy ends the batch and is named
 * in *busy, as does reaching RANGE_BATCH chunks. *next moves past what
 * the batch handled (op->to + 1 when nothing is left). Files of dropped
 * chunks go after the commit, before their locks are released. Returns the
 * count changed or -errno. */
static int64_t range_batch(struct kvc_chunk_store *store, const struct range_op *op,
                           uint64_t *next, bool *busy_found, uint32_t *busy)
{
	unsigned held[RANGE_BATCH];
	uint32_t dropped[RANGE_BATCH];
	int held_count = 0, dropped_count = 0, visited = 0, err = 0;
	int64_t count = 0;
	uint8_t key[12];
	MDB_txn *txn;
	MDB_cursor *cursor;
	*busy_found = false;
	int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = mdb_cursor_open(txn, store->dbi, &cursor);
	if (rc) {
		mdb_txn_abort(txn);
		return kvc_lmdb_errno(rc);
	}
	kvc_chunk_key(key, op->inode, (uint32_t)*next);
	MDB_val k = {sizeof(key), key}, v;
	uint64_t resume = (uint64_t)op->to + 1;
	rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size == 12 && key_inode(k.mv_data) == op->inode &&
	       key_chunk(k.mv_data) <= op->to) {
		uint32_t chunk = key_chunk(k.mv_data);
		unsigned slot = kvc_chunk_lock_slot(op->inode, chunk);
		if (visited == RANGE_BATCH) {
			resume = chunk;
			break;
		}
		if (!holds(held, held_count, slot)) {
			if (!kvc_chunk_trylock_write(store, slot)) {
				*busy_found = true;
				*busy = chunk;
				resume = chunk;
				break;
			}
			held[held_count++] = slot;
		}
		visited++;
		bool drop;
		int changed = change_chunk(store, op, cursor, chunk, &k, &v, &drop);
		if (changed < 0) {
			err = changed;
			break;
		}
		count += changed;
		if (drop)
			dropped[dropped_count++] = chunk;
		rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cursor);
	if (err == 0 && rc != 0 && rc != MDB_NOTFOUND)
		err = kvc_lmdb_errno(rc);
	if (err == 0) {
		rc = mdb_txn_commit(txn);
		err = rc ? kvc_lmdb_errno(rc) : 0;
	} else {
		mdb_txn_abort(txn);
	}
	for (int i = 0; i < dropped_count && err == 0; i++)
		kvc_chunk_unlink(store, op->inode, dropped[i]);
	for (int i = 0; i < held_count; i++)
		kvc_chunk_unlock_write(store, held[i]);
	*next = resume;
	return err < 0 ? err : count;
}

/* The range operation on one chunk whose lock was busy: its lock first,
 * then a transaction of its own. Returns 1 when changed, 0 or -errno. */
static int range_one(struct kvc_chunk_store *store, const struct range_op *op, uint32_t chunk)
{
	uint8_t key[12];
	MDB_txn *txn = NULL;
	MDB_cursor *cursor = NULL;
	bool drop = false;
	unsigned slot = kvc_chunk_lock_slot(op->inode, chunk);
	kvc_chunk_lock_write(store, slot);
	kvc_chunk_key(key, op->inode, chunk);
	MDB_val k = {sizeof(key), key}, v;
	int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
	if (rc == 0)
		rc = mdb_cursor_open(txn, store->dbi, &cursor);
	if (rc == 0)
		rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_KEY);
	int result = rc == MDB_NOTFOUND ? 0 : rc ? kvc_lmdb_errno(rc)
	                                         : change_chunk(store, op, cursor, chunk, &k, &v, &drop);
	if (cursor)
		mdb_cursor_close(cursor);
	if (txn && result >= 0) {
		rc = mdb_txn_commit(txn);
		result = rc ? kvc_lmdb_errno(rc) : result;
	} else if (txn) {
		mdb_txn_abort(txn);
	}
	if (result > 0 && drop)
		kvc_chunk_unlink(store, op->inode, chunk);
	kvc_chunk_unlock_write(store, slot);
	return result;
}

static int64_t range_apply(struct kvc_chunk_store *store, const struct range_op *op)
{
	int64_t total = 0;
	uint64_t next = op->from;
	while (next <= op->to) {
		bool busy_found;
		uint32_t busy;
		int64_t n = range_batch(store, op, &next, &busy_found, &busy);
		if (n >= 0 && busy_found) {
			total += n;
			n = range_one(store, op, busy);
			next = (uint64_t)busy + 1;
		}
		if (n < 0)
			return n;
		total += n;
	}
	return total;
}

int64_t kvc_chunk_store_remove(struct kvc_chunk_store *store, uint64_t inode)
{
	struct range_op op = {.inode = inode, .from = 0, .to = UINT32_MAX};
	return range_apply(store, &op);
}

int64_t kvc_chunk_store_punch(struct kvc_chunk_store *store, uint64_t inode,
                              uint32_t first_chunk, uint32_t count)
{
	if (count == 0 || count - 1 > UINT32_MAX - first_chunk)
		return -EINVAL;
	struct range_op op = {.inode = inode, .from = first_chunk,
	                      .to = first_chunk + (count - 1)};
	return range_apply(store, &op);
}

int64_t kvc_chunk_store_truncate(struct kvc_chunk_store *store, uint64_t inode,
                                 uint64_t size, uint32_t chunk_size)
{
	if (chunk_size == 0 || chunk_size > KVC_LAYOUT_MAX_CHUNK)
		return -EINVAL;
	if (size / chunk_size > UINT32_MAX)
		return 0; /* no chunk index lies past it */
	struct range_op op = {.inode = inode, .from = (uint32_t)(size / chunk_size),
	                      .to = UINT32_MAX, .boundary_chunk = (uint32_t)(size / chunk_size),
	                      .keep_bytes = (uint32_t)(size % chunk_size)};
	return range_apply(store, &op);
}

int kvc_chunk_store_last(struct kvc_chunk_store *store, uint64_t inode, uint32_t *chunk,
                         uint32_t *length)
{
	MDB_txn *txn;
	MDB_cursor *cursor;
	uint8_t key[12];
	int found = 0;
	int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	rc = mdb_cursor_open(txn, store->dbi, &cursor);
	if (rc) {
		mdb_txn_abort(txn);
		return kvc_lmdb_errno(rc);
	}
	kvc_chunk_key(key, inode, UINT32_MAX);
	MDB_val k = {sizeof(key), key}, v;
	rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
	if (rc == 0 && key_inode(k.mv_data) == inode && key_chunk(k.mv_data) == UINT32_MAX)
		rc = 0; /* the very last index is itself present */
	else if (rc == 0)
		rc = mdb_cursor_get(cursor, &k, &v, MDB_PREV);
	else if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST);
	if (rc == 0 && k.mv_size == 12 && key_inode(k.mv_data) == inode &&
	    v.mv_size >= KVC_CHUNK_RECORD_HEADER) {
		/* LMDB aligns values to 2 bytes only: copy, never cast. */
		memcpy(length, (const uint8_t *)v.mv_data + offsetof(struct kvc_chunk_record, length),
		       sizeof(*length));
		*chunk = key_chunk(k.mv_data);
		found = 1;
	}
	mdb_cursor_close(cursor);
	mdb_txn_abort(txn);
	return found;
}

int kvc_chunk_store_set_reserve(struct kvc_chunk_store *store, int64_t bytes,
                                const struct kvc_reserve_ops *ops)
{
	kvc_reserve_destroy(&store->reserve);
	return kvc_reserve_init(&store->reserve, store->dir_fd, bytes, KVC_RESERVE_DATA, ops);
}

void kvc_chunk_store_set_direct(struct kvc_chunk_store *store, bool direct)
{
	store->direct_reads = direct;
}

int kvc_chunk_store_set_inline(struct kvc_chunk_store *store, uint32_t bytes)
{
	if (bytes > KVC_CHUNK_INLINE_LIMIT)
		return -EINVAL;
	store->inline_max = bytes;
	return 0;
}

int kvc_chunk_store_space(struct kvc_chunk_store *store, struct kvc_chunk_space *space)
{
	struct statvfs vfs;
	struct kvc_reserve_state state;
	MDB_stat stat;
	if (fstatvfs(store->dir_fd, &vfs) < 0)
		return -errno;
	int rc = kvc_reserve_state(&store->reserve, &state);
	if (rc < 0)
		return rc;
	rc = mdb_env_stat(store->env, &stat);
	if (rc)
		return kvc_lmdb_errno(rc);
	*space = (struct kvc_chunk_space){
		.fsid = vfs.f_fsid, .total_bytes = state.total_bytes,
		.free_bytes = state.free_bytes, .reserve_bytes = state.reserve_bytes,
		.available_bytes = state.available_bytes, .refused_writes = state.refused,
		.refusing = state.refusing, .chunks = stat.ms_entries};
	return 0;
}

void kvc_chunk_store_read_counts(struct kvc_chunk_store *store, uint64_t *cached,
                                 uint64_t *ring, uint64_t *direct)
{
	*cached = atomic_load_explicit(&store->reads_cached, memory_order_relaxed);
	*ring = atomic_load_explicit(&store->reads_ring, memory_order_relaxed);
	*direct = atomic_load_explicit(&store->reads_direct, memory_order_relaxed);
}

int kvc_chunk_store_sync(struct kvc_chunk_store *store)
{
	/* The chunk files' bytes first, so the checkpoint's records of every
	 * write acknowledged before the SYNC name bytes on the disk. (Records
	 * committed meanwhile, and those of timed checkpoints, may name bytes
	 * a crash still takes: their blocks then fail their crcs, -EIO, as
	 * after any crash between a chunk's write and its record.) */
	int rc = syncfs(store->dir_fd) < 0 ? -errno : 0;
	return rc < 0 ? rc : kvc_lmdb_checkpoint_sync(store->checkpoint);
}

int kvc_chunk_store_checkpoint(struct kvc_chunk_store *store)
{
	int dead = 0;
	/* Reader slots of same-host readers that died mid-read pin pages
	 * until cleared. */
	mdb_reader_check(store->env, &dead);
	return kvc_lmdb_checkpoint_sync(store->checkpoint);
}

size_t kvc_chunk_store_index_held(struct kvc_chunk_store *store)
{
	return kvc_lmdb_checkpoint_held(store->checkpoint);
}
