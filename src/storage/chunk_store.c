/* chunk_store: see chunk_store.h for the on-disk format and locking. */
#include "storage/chunk_store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/fsutil.h"
#include "core/layout.h"
#include "core/log.h"
#include "core/lmdb_txn.h"

#define FORMAT_LINE "kvc-target 1\n"
#define LOCK_SLOTS 1024
#define MAP_SIZE (8ull << 30)
#define MAX_BLOCKS (KVC_LAYOUT_MAX_CHUNK / KVC_CHUNK_BLOCK)
/* Pieces up to this size are read into a buffer, larger ones mapped. */
#define SMALL_READ (64u << 10)
/* Chunks one write transaction of a range operation handles at most. */
#define RANGE_BATCH 64

struct kvc_chunk_store {
	char path[PATH_MAX];
	int dir_fd;
	MDB_env *env;
	MDB_dbi dbi;
	pthread_rwlock_t locks[LOCK_SLOTS];
};

struct record {
	uint32_t magic;
	uint32_t length;
	uint64_t version;
	uint32_t chunk_crc;
	uint32_t block_count;
	uint32_t block_crc[MAX_BLOCKS];
};
#define RECORD_HEADER 24u
_Static_assert(offsetof(struct record, block_crc) == RECORD_HEADER, "");

static void make_key(uint8_t key[12], uint64_t inode, uint32_t chunk)
{
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)(inode >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		key[8 + i] = (uint8_t)(chunk >> (24 - 8 * i));
}

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

static unsigned lock_slot(uint64_t inode, uint32_t chunk)
{
	uint64_t h = (inode * 0x9e3779b97f4a7c15ull) ^ (chunk * 0xff51afd7ed558ccdull);
	return (unsigned)(h >> 40) % LOCK_SLOTS;
}

static void chunk_file(uint64_t inode, uint32_t chunk, char *out, size_t size)
{
	snprintf(out, size, "chunks/%02x/%016" PRIx64 ".%08x", (unsigned)(inode & 0xff),
	         inode, chunk);
}

/* Look up a chunk's record; 1 found (copied into rec), 0 absent, -errno. */
static int record_get(MDB_txn *txn, MDB_dbi dbi, uint64_t inode, uint32_t chunk,
                      struct record *rec)
{
	uint8_t key[12];
	make_key(key, inode, chunk);
	MDB_val k = {sizeof(key), key}, v;
	int rc = mdb_get(txn, dbi, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return kvc_lmdb_errno(rc);
	if (v.mv_size < RECORD_HEADER || v.mv_size > sizeof(*rec))
		return -EIO;
	memcpy(rec, v.mv_data, v.mv_size);
	if (rec->magic != KVC_CHUNK_RECORD_MAGIC ||
	    v.mv_size != RECORD_HEADER + rec->block_count * 4u)
		return -EIO;
	return 1;
}

static int record_put(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                      const struct record *rec)
{
	uint8_t key[12];
	MDB_txn *txn;
	make_key(key, inode, chunk);
	MDB_val k = {sizeof(key), key};
	MDB_val v = {RECORD_HEADER + rec->block_count * 4u, (void *)rec};
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

/* One read or write of the whole range through io_uring; short reads past
 * the end of the file are zero-filled (holes). Returns 0 or -errno. */
static int ring_io(struct io_uring *ring, int fd, bool write, void *buf,
                   size_t length, uint64_t offset)
{
	size_t done = 0;
	while (done < length) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
		struct io_uring_cqe *cqe;
		if (!sqe)
			return -EBUSY;
		if (write)
			io_uring_prep_write(sqe, fd, (char *)buf + done,
			                    (unsigned)(length - done), offset + done);
		else
			io_uring_prep_read(sqe, fd, (char *)buf + done,
			                   (unsigned)(length - done), offset + done);
		int rc = io_uring_submit_and_wait(ring, 1);
		if (rc < 0)
			return rc;
		rc = io_uring_wait_cqe(ring, &cqe);
		if (rc < 0)
			return rc;
		int res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
		if (res < 0)
			return res;
		if (res == 0) {
			if (write)
				return -EIO;
			memset((char *)buf + done, 0, length - done);
			return 0;
		}
		done += (size_t)res;
	}
	return 0;
}

static int open_chunk(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                      int flags)
{
	char name[64];
	chunk_file(inode, chunk, name, sizeof(name));
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
	int rc = mdb_env_create(&store->env);
	if (rc == 0)
		rc = mdb_env_set_mapsize(store->env, MAP_SIZE);
	if (rc == 0)
		rc = mdb_env_set_maxreaders(store->env, 4096);
	if (rc == 0)
		rc = mdb_env_open(store->env, index, MDB_NOSYNC | MDB_NOTLS, 0600);
	if (rc == 0)
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

int kvc_chunk_store_open(const char *path, struct kvc_chunk_store **out)
{
	struct kvc_chunk_store *store = calloc(1, sizeof(*store));
	int rc;
	if (!store)
		return -ENOMEM;
	store->dir_fd = -1;
	for (int i = 0; i < LOCK_SLOTS; i++)
		pthread_rwlock_init(&store->locks[i], NULL);
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
	kvc_lmdb_close(store->env);
	if (store->dir_fd >= 0)
		close(store->dir_fd);
	for (int i = 0; i < LOCK_SLOTS; i++)
		pthread_rwlock_destroy(&store->locks[i]);
	free(store);
}

/* Recompute the crc of block b of a chunk of `length` bytes from the file,
 * or from `data` when the write covered the whole block. */
static int block_crc(struct io_uring *ring, int fd, uint32_t b, uint32_t length,
                     uint32_t write_offset, const uint8_t *data, uint32_t write_length,
                     uint32_t *crc)
{
	uint32_t start = b * KVC_CHUNK_BLOCK;
	uint32_t end = start + KVC_CHUNK_BLOCK < length ? start + KVC_CHUNK_BLOCK : length;
	if (start >= write_offset && end <= write_offset + write_length) {
		*crc = kvc_crc32c(0, data + (start - write_offset), end - start);
		return 0;
	}
	uint8_t buf[KVC_CHUNK_BLOCK];
	int rc = ring_io(ring, fd, false, buf, end - start, start);
	if (rc == 0)
		*crc = kvc_crc32c(0, buf, end - start);
	return rc;
}

static uint32_t chunk_crc(const struct record *rec)
{
	return kvc_crc32c(0, rec->block_crc, rec->block_count * 4u);
}

static int write_locked(struct kvc_chunk_store *store, struct io_uring *ring,
                        uint64_t inode, uint32_t chunk, uint32_t offset,
                        const uint8_t *data, uint32_t length, struct record *rec)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return kvc_lmdb_errno(rc);
	int found = record_get(txn, store->dbi, inode, chunk, rec);
	mdb_txn_abort(txn);
	if (found < 0)
		return found;
	if (!found)
		*rec = (struct record){.magic = KVC_CHUNK_RECORD_MAGIC};

	/* No record: whatever a file may hold (its removal was cut short) is
	 * a hole, so the file starts empty. */
	int fd = open_chunk(store, inode, chunk, O_RDWR | O_CREAT | (found ? 0 : O_TRUNC));
	if (fd < 0)
		return fd;
	rc = ring_io(ring, fd, true, (void *)data, length, offset);
	if (rc < 0)
		goto out;

	uint32_t old_length = rec->length;
	uint32_t new_length = offset + length > old_length ? offset + length : old_length;
	uint32_t first = (offset < old_length ? offset : old_length) / KVC_CHUNK_BLOCK;
	uint32_t last = (offset + length - 1) / KVC_CHUNK_BLOCK;
	rec->length = new_length;
	rec->block_count = (new_length + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK;
	for (uint32_t b = first; b <= last && rc == 0; b++)
		rc = block_crc(ring, fd, b, new_length, offset, data, length, &rec->block_crc[b]);
	if (rc < 0)
		goto out;
	rec->version++;
	rec->chunk_crc = chunk_crc(rec);
	rc = record_put(store, inode, chunk, rec); /* the LMDB write lock, innermost */
out:
	close(fd);
	return rc;
}

int kvc_chunk_store_write(struct kvc_chunk_store *store, struct io_uring *ring,
                          uint64_t inode, uint32_t chunk, uint32_t chunk_size,
                          uint32_t offset, const void *data, uint32_t length,
                          uint64_t *version, uint32_t *chunk_length)
{
	struct record rec;
	if (length == 0 || chunk_size > KVC_LAYOUT_MAX_CHUNK || offset > chunk_size ||
	    length > chunk_size - offset)
		return -EINVAL;
	pthread_rwlock_t *lock = &store->locks[lock_slot(inode, chunk)];
	pthread_rwlock_wrlock(lock);
	int rc = write_locked(store, ring, inode, chunk, offset, data, length, &rec);
	pthread_rwlock_unlock(lock);
	if (rc == 0) {
		*version = rec.version;
		*chunk_length = rec.length;
	}
	return rc;
}

/* Give the piece a home for its aligned blocks: a read buffer for small
 * pieces (a copy costs less than a mapping there), otherwise a read-only
 * mapping of the file. The file must hold the blocks: a mapping past its
 * end would fault (SIGBUS) on access. */
static int map_blocks(struct kvc_chunk_read *r)
{
	struct stat st;
	r->fd = open_chunk(r->store, r->inode, r->chunk, O_RDONLY);
	if (r->fd < 0)
		return r->fd == -ENOENT ? -EIO : r->fd; /* indexed but no data */
	if (fstat(r->fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < r->aligned_start + r->aligned_length) {
		kvc_log_error("chunk file of inode %" PRIu64 " chunk %u in %s is short",
		              r->inode, r->chunk, r->store->path);
		return -EIO;
	}
	r->map_length = r->aligned_length;
	if (r->aligned_length <= SMALL_READ) {
		r->map = malloc(r->aligned_length);
		r->mapped = false;
		return r->map ? 0 : -ENOMEM;
	}
	r->map = mmap(NULL, r->map_length, PROT_READ, MAP_SHARED, r->fd, (off_t)r->aligned_start);
	if (r->map == MAP_FAILED) {
		r->map = NULL;
		return -errno;
	}
	r->mapped = true;
	return 0;
}

/* Look the piece up, map its blocks and queue a readahead of them on the
 * ring. Leaves the piece locked (shared) and mapped when it has bytes. */
static int read_begin(struct kvc_chunk_read *r, struct io_uring *ring)
{
	int queued = 0;
	struct kvc_chunk_store *store = r->store;
	struct record *rec = malloc(sizeof(*rec));
	MDB_txn *txn = NULL;
	r->fd = -1;
	r->map = NULL;
	r->present = 0;
	r->data = NULL;
	r->block_crcs = NULL;
	r->status = 0;
	r->locked = false;
	if (!store || !rec) {
		r->status = !store ? -ENXIO : -ENOMEM;
		free(rec);
		return 0;
	}
	r->lock_slot = lock_slot(r->inode, r->chunk);
	pthread_rwlock_rdlock(&store->locks[r->lock_slot]);
	r->locked = true;
	int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
	int found = rc ? kvc_lmdb_errno(rc) : record_get(txn, store->dbi, r->inode, r->chunk, rec);
	if (txn)
		mdb_txn_abort(txn);
	if (found <= 0 || r->offset >= rec->length || r->length == 0) {
		r->status = found < 0 ? found : 0; /* absent or past the end: a hole */
		goto out;
	}
	uint32_t end = r->offset + r->length < rec->length ? r->offset + r->length : rec->length;
	r->first_block = r->offset / KVC_CHUNK_BLOCK;
	uint32_t last_block = (end - 1) / KVC_CHUNK_BLOCK;
	uint32_t aligned_end = (last_block + 1) * KVC_CHUNK_BLOCK;
	r->aligned_start = (uint64_t)r->first_block * KVC_CHUNK_BLOCK;
	r->aligned_length = (aligned_end < rec->length ? aligned_end : rec->length) -
	                    (uint32_t)r->aligned_start;
	r->present = end - r->offset;
	r->status = map_blocks(r);
	if (r->status < 0)
		goto out;
	r->block_crcs = malloc((last_block - r->first_block + 1) * 4u);
	if (!r->block_crcs) {
		r->status = -ENOMEM;
		goto out;
	}
	memcpy(r->block_crcs, &rec->block_crc[r->first_block],
	       (last_block - r->first_block + 1) * 4u);
	/* Every piece of the batch starts its disk work at once: small ones
	 * read into their buffer, mapped ones (maybe cold) read ahead. */
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		r->status = -EBUSY;
		goto out;
	}
	if (r->mapped) {
		io_uring_prep_madvise(sqe, r->map, r->aligned_length, MADV_WILLNEED);
		io_uring_sqe_set_data(sqe, NULL);
	} else {
		io_uring_prep_read(sqe, r->fd, r->map, r->aligned_length, r->aligned_start);
		io_uring_sqe_set_data(sqe, r);
		r->io_result = -EINPROGRESS;
	}
	queued = 1;
out:
	free(rec);
	if (r->status < 0)
		r->present = 0;
	return queued;
}

/* Check every block of the piece against its crc, straight from the
 * mapping (page cache): no copy. */
static void read_verify(struct kvc_chunk_read *r)
{
	for (uint32_t pos = 0; pos < r->aligned_length; pos += KVC_CHUNK_BLOCK) {
		uint32_t len = r->aligned_length - pos < KVC_CHUNK_BLOCK ? r->aligned_length - pos
		                                                         : KVC_CHUNK_BLOCK;
		if (kvc_crc32c(0, (const uint8_t *)r->map + pos, len) !=
		    r->block_crcs[pos / KVC_CHUNK_BLOCK]) {
			kvc_log_error("crc mismatch: inode %" PRIu64 " chunk %u block %u of %s",
			              r->inode, r->chunk, r->first_block + pos / KVC_CHUNK_BLOCK,
			              r->store->path);
			r->status = -EIO;
			r->present = 0;
			return;
		}
	}
	r->data = (const uint8_t *)r->map + (r->offset - r->aligned_start);
}

void kvc_chunk_store_read_batch(struct kvc_chunk_store **stores, struct io_uring *ring,
                                struct kvc_chunk_read *reads, int count)
{
	int queued = 0;
	for (int i = 0; i < count; i++) {
		reads[i].store = stores[i];
		queued += read_begin(&reads[i], ring);
		if (io_uring_sq_space_left(ring) == 0)
			io_uring_submit(ring);
	}
	if (queued)
		io_uring_submit(ring);
	/* Reap every completion so the ring is empty for the next user. Reads
	 * report their byte count; readahead results do not matter (the
	 * mapping faults in whatever is still missing). */
	for (int done = 0; done < queued; done++) {
		struct io_uring_cqe *cqe;
		int rc;
		do
			rc = io_uring_wait_cqe(ring, &cqe);
		while (rc == -EINTR);
		if (rc < 0) {
			kvc_log_error("io_uring wait failed: %s", strerror(-rc));
			abort(); /* a broken ring: nothing safe is left to do */
		}
		struct kvc_chunk_read *r = io_uring_cqe_get_data(cqe);
		if (r)
			r->io_result = cqe->res;
		io_uring_cqe_seen(ring, cqe);
	}
	for (int i = 0; i < count; i++) {
		struct kvc_chunk_read *r = &reads[i];
		if (!r->map || r->status < 0)
			continue;
		if (!r->mapped && r->io_result != (int)r->aligned_length) {
			r->status = r->io_result < 0 ? r->io_result : -EIO;
			r->present = 0;
			continue;
		}
		read_verify(r);
	}
}

void kvc_chunk_store_read_release(struct kvc_chunk_read *reads, int count)
{
	for (int i = 0; i < count; i++) {
		struct kvc_chunk_read *r = &reads[i];
		if (r->map && r->mapped)
			munmap(r->map, r->map_length);
		else
			free(r->map);
		if (r->fd >= 0)
			close(r->fd);
		free(r->block_crcs);
		if (r->locked)
			pthread_rwlock_unlock(&r->store->locks[r->lock_slot]);
		r->map = NULL;
		r->fd = -1;
		r->block_crcs = NULL;
		r->locked = false;
	}
}

/* A range operation: every chunk of inode in [from, to] is dropped, but
 * for truncate's boundary chunk, which keeps keep_bytes when that is not
 * zero. */
struct range_op {
	struct io_uring *ring; /* truncate: the boundary chunk's crc */
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
	struct record rec;
	if (v->mv_size < RECORD_HEADER || v->mv_size > sizeof(rec))
		return -EIO;
	memcpy(&rec, v->mv_data, v->mv_size);
	if (rec.length <= op->keep_bytes)
		return 0;
	int fd = open_chunk(store, op->inode, op->boundary_chunk, O_RDWR | O_CREAT);
	int rc = fd < 0 ? fd : (ftruncate(fd, op->keep_bytes) < 0 ? -errno : 0);
	rec.length = op->keep_bytes;
	rec.block_count = (op->keep_bytes + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK;
	if (rc == 0 && op->keep_bytes % KVC_CHUNK_BLOCK)
		rc = block_crc(op->ring, fd, rec.block_count - 1, rec.length, 0, NULL, 0,
		               &rec.block_crc[rec.block_count - 1]);
	if (rc == 0) {
		rec.version++;
		rec.chunk_crc = chunk_crc(&rec);
		MDB_val key = *k, nv = {RECORD_HEADER + rec.block_count * 4u, &rec};
		rc = mdb_cursor_put(cursor, &key, &nv, MDB_CURRENT);
		rc = rc ? kvc_lmdb_errno(rc) : 1;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Apply the range operation to the chunk whose record is under the cursor;
 * its lock is held exclusively. *drop is set when its file is to go once
 * the transaction committed. Returns 1 when changed, 0 or -errno. */
static int change_chunk(struct kvc_chunk_store *store, const struct range_op *op,
                        MDB_cursor *cursor, uint32_t chunk, const MDB_val *k,
                        const MDB_val *v, bool *drop)
{
	*drop = false;
	if (chunk == op->boundary_chunk && op->keep_bytes > 0)
		return shorten(store, op, cursor, k, v);
	int rc = mdb_cursor_del(cursor, 0);
	if (rc)
		return kvc_lmdb_errno(rc);
	*drop = true;
	return 1;
}

static void unlink_chunk(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk)
{
	char name[64];
	chunk_file(inode, chunk, name, sizeof(name));
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
	make_key(key, op->inode, (uint32_t)*next);
	MDB_val k = {sizeof(key), key}, v;
	uint64_t resume = (uint64_t)op->to + 1;
	rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size == 12 && key_inode(k.mv_data) == op->inode &&
	       key_chunk(k.mv_data) <= op->to) {
		uint32_t chunk = key_chunk(k.mv_data);
		unsigned slot = lock_slot(op->inode, chunk);
		if (visited == RANGE_BATCH) {
			resume = chunk;
			break;
		}
		if (!holds(held, held_count, slot)) {
			if (pthread_rwlock_trywrlock(&store->locks[slot]) != 0) {
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
		unlink_chunk(store, op->inode, dropped[i]);
	for (int i = 0; i < held_count; i++)
		pthread_rwlock_unlock(&store->locks[held[i]]);
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
	pthread_rwlock_t *lock = &store->locks[lock_slot(op->inode, chunk)];
	pthread_rwlock_wrlock(lock);
	make_key(key, op->inode, chunk);
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
		unlink_chunk(store, op->inode, chunk);
	pthread_rwlock_unlock(lock);
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

int64_t kvc_chunk_store_truncate(struct kvc_chunk_store *store, struct io_uring *ring,
                                 uint64_t inode, uint64_t size, uint32_t chunk_size)
{
	if (chunk_size == 0 || chunk_size > KVC_LAYOUT_MAX_CHUNK ||
	    size / chunk_size > UINT32_MAX)
		return -EINVAL;
	struct range_op op = {.ring = ring, .inode = inode, .from = (uint32_t)(size / chunk_size),
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
	make_key(key, inode, UINT32_MAX);
	MDB_val k = {sizeof(key), key}, v;
	rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
	if (rc == 0 && key_inode(k.mv_data) == inode && key_chunk(k.mv_data) == UINT32_MAX)
		rc = 0; /* the very last index is itself present */
	else if (rc == 0)
		rc = mdb_cursor_get(cursor, &k, &v, MDB_PREV);
	else if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST);
	if (rc == 0 && k.mv_size == 12 && key_inode(k.mv_data) == inode &&
	    v.mv_size >= RECORD_HEADER) {
		/* LMDB aligns values to 2 bytes only: copy, never cast. */
		memcpy(length, (const uint8_t *)v.mv_data + offsetof(struct record, length),
		       sizeof(*length));
		*chunk = key_chunk(k.mv_data);
		found = 1;
	}
	mdb_cursor_close(cursor);
	mdb_txn_abort(txn);
	return found;
}

int kvc_chunk_store_space(struct kvc_chunk_store *store, struct kvc_chunk_space *space)
{
	struct statvfs vfs;
	MDB_stat stat;
	if (fstatvfs(store->dir_fd, &vfs) < 0)
		return -errno;
	int rc = mdb_env_stat(store->env, &stat);
	if (rc)
		return kvc_lmdb_errno(rc);
	space->fsid = vfs.f_fsid;
	space->total_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	space->free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	space->chunks = stat.ms_entries;
	return 0;
}

int kvc_chunk_store_sync(struct kvc_chunk_store *store)
{
	int rc = mdb_env_sync(store->env, 1);
	if (rc)
		return kvc_lmdb_errno(rc);
	return syncfs(store->dir_fd) < 0 ? -errno : 0;
}
