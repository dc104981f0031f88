/* chunk_read: batched chunk reads through io_uring; see chunk_store.h for
 * the contract and the lock order. The blocks of an inline chunk are
 * copied from its record while the piece is looked up (no ring read); its
 * crcs are checked with everyone else's. A placed piece of an inline
 * chunk has its blocks checked in the record and its bytes copied from
 * there straight into place (one copy, none through a buffer).
 *
 * A batch goes in rounds of at most the ring's size. Each piece of a round
 * is looked up under its chunk lock (shared), gets a buffer covering its
 * aligned blocks and a read queued on the ring; the round is submitted,
 * every completion reaped, and the pieces' locks released; the crcs are
 * then checked in the private buffers. Nothing of the chunk store is held
 * when the batch returns.
 *
 * Ring failures: a submit that fails leaves the submissions it did not
 * take in the ring, where the next submit would send them with stale
 * buffers; a wait that fails leaves reads in flight that may still land in
 * their buffers. Either way the pieces concerned fail with -EIO, buffers a
 * read may still land in are abandoned (kept on a process-wide list, never
 * freed or reused; counted in abandoned_bytes and logged), and the ring is
 * torn down and set up again before anyone uses it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/lmdb_txn.h"
#include "core/mem_guard.h"
#include "storage/chunk_store_internal.h"

/* The slices a read of cached data goes in (read_cached), and the
 * smallest part for client memory that goes there with streaming stores
 * (smaller parts are plain copies, left in the caches for the client,
 * which reads them next: 64 KiB ring key gets ran 29% slower streamed). */
#define CACHED_SLICE (128u << 10)
#define STREAM_MIN (256u << 10)
/* O_DIRECT's alignment of buffers, lengths and file offsets: a page, which
 * covers any logical block size up to it. The piece's own buffers are
 * allocated on it. */
#define DIRECT_ALIGN 4096u

/* Whether the page cache holds every page of the piece's aligned blocks:
 * 1 yes, 0 no, -1 not known (a kernel without cachestat). Asked before
 * the reads of a store that reads cold data with O_DIRECT: a RWF_NOWAIT
 * read of data not cached starts the kernel's readahead before it gives
 * up, which would read the piece from the disk twice and put it in the
 * page cache after all. */
static int piece_cached(struct kvc_chunk_read *r)
{
	struct kvc_chunk_store *store = r->store;
	if (atomic_load_explicit(&store->no_cachestat, memory_order_relaxed))
		return -1;
	int cached = kvc_fsutil_cached(r->fd, r->aligned_start, r->aligned_length);
	if (cached == -ENOSYS)
		atomic_store_explicit(&store->no_cachestat, true, memory_order_relaxed);
	return cached < 0 ? -1 : cached;
}

/* Whether the piece goes by O_DIRECT if the page cache lacks it. */
static bool direct_wanted(const struct kvc_chunk_read *r)
{
	return r->store->direct_reads &&
	       !atomic_load_explicit(&r->store->direct_refused, memory_order_relaxed);
}

/* A buffer of n bytes that O_DIRECT may read into (freed with free). */
static uint8_t *direct_buffer(size_t n)
{
	return aligned_alloc(DIRECT_ALIGN, (n + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN);
}

static int default_submit(struct io_uring *ring)
{
	return io_uring_submit(ring);
}

static int default_wait(struct io_uring *ring, struct io_uring_cqe **cqe)
{
	return io_uring_wait_cqe(ring, cqe);
}

static const struct kvc_chunk_ring_ops default_ops = {default_submit, default_wait};

/* Buffers of reads submitted and never reaped: the kernel may still write
 * into them, even after their ring is gone, so they live as long as the
 * process. Only a failing ring puts anything here. */
struct abandoned {
	struct abandoned *next;
	void *buffer;
};
static struct abandoned *abandoned_list;
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;

static void abandon(struct kvc_chunk_ring *ring, struct kvc_chunk_read *r)
{
	if (r->placed) { /* place is the caller's memory (it keeps it): keep the edges */
		ring->abandoned_places++;
		r->buffer = r->edge;
		r->edge = NULL;
		r->placed = false;
		if (!r->buffer)
			return;
	}
	struct abandoned *a = malloc(sizeof(*a));
	ring->abandoned_bytes += r->aligned_length;
	if (a) { /* else it is merely unreachable, which is just as safe */
		a->buffer = r->buffer;
		pthread_mutex_lock(&abandoned_lock);
		a->next = abandoned_list;
		abandoned_list = a;
		pthread_mutex_unlock(&abandoned_lock);
	}
	r->buffer = NULL;
}

int kvc_chunk_ring_init(struct kvc_chunk_ring *ring, unsigned entries)
{
	memset(ring, 0, sizeof(*ring));
	ring->entries = entries;
	ring->bounce = aligned_alloc(4096, CACHED_SLICE); /* NULL: placed reads through the ring */
	int rc = io_uring_queue_init(entries, &ring->ring, 0);
	ring->ready = rc == 0;
	if (rc < 0) {
		free(ring->bounce);
		ring->bounce = NULL;
	}
	return rc;
}

void kvc_chunk_ring_exit(struct kvc_chunk_ring *ring)
{
	if (ring->ready)
		io_uring_queue_exit(&ring->ring);
	ring->ready = false;
	free(ring->bounce);
	ring->bounce = NULL;
}

/* Throw the ring away with whatever it still holds, and set up a new one. */
static void ring_rebuild(struct kvc_chunk_ring *ring)
{
	if (ring->ready)
		io_uring_queue_exit(&ring->ring);
	int rc = io_uring_queue_init(ring->entries, &ring->ring, 0);
	ring->ready = rc == 0;
	if (rc < 0)
		kvc_log_error("cannot set up a new io_uring: %s", strerror(-rc));
}

/* Same-host placement (chunk_store.h `place`): the piece's whole blocks
 * straight into place, the partial blocks at its edges into `edge`. False
 * when it covers no whole block (then it all goes through a buffer). */
static bool place_split(struct kvc_chunk_read *r)
{
	uint64_t start = r->aligned_start, end = start + r->aligned_length;
	uint64_t want_end = (uint64_t)r->offset + r->present; /* <= end */
	uint64_t mid_start = r->offset == start ? start : start + KVC_CHUNK_BLOCK;
	uint64_t mid_end = want_end == end ? end : want_end / KVC_CHUNK_BLOCK * KVC_CHUNK_BLOCK;
	if (mid_start >= mid_end)
		return false;
	r->head_length = (uint32_t)(mid_start - start);
	r->tail_length = (uint32_t)(end - mid_end);
	r->tail_copy = (uint32_t)(want_end - mid_end);
	r->tail_offset = (uint32_t)(mid_end - r->offset);
	r->mid_offset = (uint32_t)(mid_start - r->offset);
	r->mid_length = (uint32_t)(mid_end - mid_start);
	r->mid_block = (uint32_t)(mid_start / KVC_CHUNK_BLOCK) - r->first_block;
	r->edge = r->head_length + r->tail_length ? direct_buffer(r->head_length + r->tail_length)
	                                          : NULL;
	r->buffer = r->place;
	r->placed = true;
	r->vec_count = 0;
	if (r->head_length)
		r->vec[r->vec_count++] = (struct iovec){r->edge, r->head_length};
	r->vec[r->vec_count++] = (struct iovec){r->place + r->mid_offset, r->mid_length};
	if (r->tail_length)
		r->vec[r->vec_count++] = (struct iovec){r->edge + r->head_length, r->tail_length};
	return true;
}

/* The first block of file bytes [pos, pos + length) of the piece, at
 * `p`, that does not match its crc, counted from the piece's first
 * block; -1 when all match. The range starts on a block boundary and
 * holds whole blocks (the chunk's last one perhaps short). */
static int64_t first_bad_block(const struct kvc_chunk_read *r, const uint8_t *p, uint64_t pos,
                               size_t length)
{
	int64_t first = (int64_t)((pos - r->aligned_start) / KVC_CHUNK_BLOCK);
	for (size_t at = 0; at < length; at += KVC_CHUNK_BLOCK) {
		size_t n = length - at < KVC_CHUNK_BLOCK ? length - at : KVC_CHUNK_BLOCK;
		if (kvc_crc32c(0, p + at, n) != r->block_crcs[first + (int64_t)(at / KVC_CHUNK_BLOCK)])
			return first + (int64_t)(at / KVC_CHUNK_BLOCK);
	}
	return -1;
}

/* Whether the piece's aligned blocks at `blocks` match their crcs; a
 * mismatch is logged (which block of which chunk). */
static bool blocks_ok(const struct kvc_chunk_read *r, const uint8_t *blocks)
{
	int64_t bad = first_bad_block(r, blocks, r->aligned_start, r->aligned_length);
	if (bad >= 0)
		kvc_log_error("crc mismatch: inode %" PRIu64 " chunk %u block %" PRIu64 " of %s",
		              r->inode, r->chunk, r->first_block + (uint64_t)bad, r->store->path);
	return bad < 0;
}

/* A placed piece of an inline chunk (read transaction and chunk lock
 * held, so the record's bytes stay): its blocks checked in the record,
 * its bytes copied from there into place under the memory guard. Then it
 * is placed with nothing left to check or copy (no edges, no whole blocks
 * in place: chunk_store.h). Returns 0, -EIO (a crc) or -EFAULT (the
 * memory is gone). */
static int place_inline(struct kvc_chunk_read *r, const uint8_t *bytes)
{
	if (!blocks_ok(r, bytes + r->aligned_start))
		return -EIO;
	struct iovec one = {.iov_base = r->place, .iov_len = r->present};
	const struct iovec *to = r->scatter ? r->scatter : &one;
	int rc = kvc_mem_guard_scatter(to, r->scatter ? r->scatter_count : 1, bytes + r->offset,
	                               r->present);
	if (rc < 0)
		return rc;
	/* client memory (placed: never freed here), where read_verify finds
	 * what it asks of a placed piece */
	r->buffer = to[0].iov_base;
	r->placed = true;
	r->io_result = (int)r->aligned_length;
	r->head_length = r->tail_length = r->tail_copy = 0;
	r->mid_offset = r->mid_length = 0;
	return 0;
}

/* The slices before vec[v] + at are read and checked: the ring reads
 * from there (vec trimmed to what is left, read_from says how much). */
static void leave_to_ring(struct kvc_chunk_read *r, int v, size_t at, uint64_t pos)
{
	r->read_from = (uint32_t)(pos - r->aligned_start);
	int k = 0;
	for (int i = v; i < r->vec_count; i++)
		r->vec[k++] = r->vec[i];
	r->vec_count = k;
	r->vec[0].iov_base = (uint8_t *)r->vec[0].iov_base + at;
	r->vec[0].iov_len -= at;
}

/* Data the page cache holds is read at once, CACHED_SLICE bytes at a
 * time (RWF_NOWAIT: nothing that would wait for the disk). A slice bound
 * for client memory goes into the ring's bounce buffer, where its blocks
 * are checked while they are in this CPU's cache, and is then streamed
 * to its place with stores that bypass the caches (parts of STREAM_MIN
 * bytes and more; smaller ones are copied): the memory bus sees
 * the bytes twice (read from the page cache, written to their place), as
 * for a plain read, where a read straight into place followed by the
 * crcs there took three passes, the crcs reading the bytes back from
 * memory (docs/benchmarks.md "Checking crcs in a bounce buffer"). A slice
 * bound for our own buffer (a piece not placed, a placed piece's edges)
 * is read and checked where it is.
 *
 * Read the piece's aligned blocks now if the page cache holds them all,
 * each slice checked in `bounce` before it goes to its place (client
 * memory under the guard). True when done (io_result set, `checked`);
 * false when a slice fell short, failed, did not match or met client
 * memory that is gone: then the ring reads the piece from that slice on
 * (leave_to_ring), and everything is checked after, where a mismatch or
 * a fault is told apart and reported. The vec's entries start on block
 * boundaries, so every slice holds whole blocks. */
static bool read_cached(struct kvc_chunk_read *r, uint8_t *bounce)
{
	if (atomic_load_explicit(&r->store->nowait_refused, memory_order_relaxed))
		return false;
	uint64_t pos = r->aligned_start;
	for (int v = 0; v < r->vec_count; v++) {
		uint8_t *base = r->vec[v].iov_base;
		size_t length = r->vec[v].iov_len;
		/* our own buffer (not placed, or a placed piece's edges): read
		 * and check it where it is, no copy */
		bool client = r->placed && base == r->place + r->mid_offset;
		if (client && !bounce) { /* no bounce buffer (out of memory at init) */
			leave_to_ring(r, v, 0, pos);
			return false;
		}
		for (size_t at = 0; at < length;) {
			size_t n = length - at < CACHED_SLICE ? length - at : CACHED_SLICE;
			struct iovec one = {client ? bounce : base + at, n};
			ssize_t got = preadv2(r->fd, &one, 1, (off_t)pos, RWF_NOWAIT);
			if (got < 0 && errno == EOPNOTSUPP)
				atomic_store_explicit(&r->store->nowait_refused, true, memory_order_relaxed);
			if (got != (ssize_t)n || first_bad_block(r, one.iov_base, pos, n) >= 0 ||
			    (client && (length >= STREAM_MIN ? kvc_mem_guard_stream(base + at, bounce, n)
			                                     : kvc_mem_guard_copy(base + at, bounce, n)) < 0)) {
				leave_to_ring(r, v, at, pos);
				return false;
			}
			at += n;
			pos += n;
		}
	}
	r->io_result = (int)r->aligned_length;
	r->checked = true;
	atomic_fetch_add_explicit(&r->store->reads_cached, 1, memory_order_relaxed);
	return true;
}

/* Give the piece a buffer for its aligned blocks. The file must hold them:
 * a read short of them means the file lost bytes its record vouches for. */
static int open_blocks(struct kvc_chunk_read *r)
{
	struct stat st;
	r->fd = kvc_chunk_open_file(r->store, r->inode, r->chunk, O_RDONLY);
	if (r->fd < 0)
		return r->fd == -ENOENT ? -EIO : r->fd; /* indexed but no data */
	if (fstat(r->fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < r->aligned_start + r->aligned_length) {
		kvc_log_error("chunk file of inode %" PRIu64 " chunk %u in %s is short",
		              r->inode, r->chunk, r->store->path);
		return -EIO;
	}
	if (r->place && place_split(r))
		return r->edge || !(r->head_length | r->tail_length) ? 0 : -ENOMEM;
	r->buffer = direct_buffer(r->aligned_length);
	r->vec[0] = (struct iovec){r->buffer, r->aligned_length};
	r->vec_count = 1;
	return r->buffer ? 0 : -ENOMEM;
}

/* The ring read of a piece the page cache does not hold goes by O_DIRECT
 * when the store allows it and every buffer, length and the file offset
 * are DIRECT_ALIGN-aligned (a chunk's short last block, or client memory
 * placed at an odd offset, are not: those go through the page cache). */
static void direct_choose(struct kvc_chunk_read *r)
{
	struct kvc_chunk_store *store = r->store;
	bool fits = direct_wanted(r) && (r->aligned_start + r->read_from) % DIRECT_ALIGN == 0;
	for (int v = 0; fits && v < r->vec_count; v++)
		fits = (uintptr_t)r->vec[v].iov_base % DIRECT_ALIGN == 0 &&
		       r->vec[v].iov_len % DIRECT_ALIGN == 0;
	int flags = fits ? fcntl(r->fd, F_GETFL) : -1; /* the piece's own descriptor */
	if (flags >= 0 && fcntl(r->fd, F_SETFL, flags | O_DIRECT) == 0)
		r->direct = true;
	else if (flags >= 0 && errno == EINVAL)
		atomic_store_explicit(&store->direct_refused, true, memory_order_relaxed);
}

/* A direct read the kernel refused at submission time after all (a
 * filesystem that takes the flag but not the read): the piece is read
 * again through the page cache, here, and the store reads that way from
 * now on. */
static void direct_refused(struct kvc_chunk_read *r)
{
	if (!atomic_exchange_explicit(&r->store->direct_refused, true, memory_order_relaxed))
		kvc_log_error("%s refuses O_DIRECT reads: its reads go through the page cache",
		              r->store->path);
	int flags = fcntl(r->fd, F_GETFL);
	ssize_t got = flags >= 0 && fcntl(r->fd, F_SETFL, flags & ~O_DIRECT) == 0
	                      ? preadv(r->fd, r->vec, r->vec_count,
	                               (off_t)(r->aligned_start + r->read_from))
	                      : -1;
	r->io_result = got < 0 ? -errno : (int)got + (int)r->read_from;
}

static void unlock_piece(struct kvc_chunk_read *r)
{
	if (r->locked)
		pthread_rwlock_unlock(&r->store->locks[r->lock_slot]);
	r->locked = false;
}

/* Look the piece up and queue the read of its blocks. Leaves the piece
 * locked (shared) when its read is queued. Returns 1 when queued, 0 when
 * the piece is settled (a hole or an error), -EAGAIN when the ring's
 * submission queue is full (nothing taken: try again after a round). */
static int read_begin(struct kvc_chunk_read *r, struct kvc_chunk_ring *ring)
{
	struct kvc_chunk_store *store = r->store;
	struct kvc_chunk_record *rec = NULL;
	const uint8_t *inline_data = NULL;
	MDB_txn *txn = NULL;
	if (!store || !ring->ready) {
		r->status = !store ? -ENXIO : -EIO;
		return 0;
	}
	if (io_uring_sq_space_left(&ring->ring) == 0)
		return -EAGAIN;
	rec = malloc(sizeof(*rec));
	if (!rec) {
		r->status = -ENOMEM;
		return 0;
	}
	r->lock_slot = kvc_chunk_lock_slot(r->inode, r->chunk);
	pthread_rwlock_rdlock(&store->locks[r->lock_slot]);
	r->locked = true;
	int rc = mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn);
	int found = rc ? kvc_lmdb_errno(rc)
	               : kvc_chunk_record_get(txn, store->dbi, r->inode, r->chunk, rec,
	                                      &inline_data);
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
	r->block_crcs = malloc((last_block - r->first_block + 1) * 4u);
	if (!r->block_crcs) {
		r->status = -ENOMEM;
		goto out;
	}
	memcpy(r->block_crcs, &rec->block_crc[r->first_block],
	       (last_block - r->first_block + 1) * 4u);
	if (inline_data) { /* its blocks come from the record: no disk read */
		r->status = r->place || r->scatter ? place_inline(r, inline_data)
		                                   : kvc_chunk_inline_blocks(r, inline_data);
		goto out;
	}
	mdb_txn_abort(txn);
	txn = NULL;
	r->status = open_blocks(r);
	r->read_from = 0;
	/* data the page cache holds is read at once; with O_DIRECT reads on,
	 * only data it holds whole is tried (piece_cached) */
	if (r->status < 0 ||
	    (!ring->ring_only && (!direct_wanted(r) || piece_cached(r) != 0) &&
	     read_cached(r, ring->bounce)))
		goto out;
	direct_choose(r);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring->ring); /* space checked above */
	io_uring_prep_readv(sqe, r->fd, r->vec, (unsigned)r->vec_count,
	                    r->aligned_start + r->read_from);
	io_uring_sqe_set_data(sqe, r);
	r->io_result = -EINPROGRESS;
	r->queued = true;
	atomic_fetch_add_explicit(r->direct ? &store->reads_direct : &store->reads_ring, 1,
	                          memory_order_relaxed);
out:
	if (txn)
		mdb_txn_abort(txn);
	free(rec);
	if (!r->queued) {
		unlock_piece(r);
		if (r->status < 0)
			r->present = 0;
	}
	return r->queued;
}

/* Submit the `queued` reads on the ring. Returns 0, or -errno when the
 * kernel would not take them all; *submitted says how many it took (the
 * first ones: it takes them in order). */
static int submit_all(struct kvc_chunk_ring *ring, int queued, int *submitted)
{
	const struct kvc_chunk_ring_ops *ops = ring->ops ? ring->ops : &default_ops;
	int rc = 0;
	while (io_uring_sq_ready(&ring->ring) > 0) {
		rc = ops->submit(&ring->ring);
		if (rc == -EINTR)
			continue;
		if (rc <= 0)
			break;
	}
	/* What is still in the submission queue was not taken. */
	*submitted = queued - (int)io_uring_sq_ready(&ring->ring);
	if (*submitted == queued)
		return 0;
	kvc_log_error("io_uring submit took %d of %d reads: %s", *submitted, queued,
	              strerror(rc < 0 ? -rc : EIO));
	return rc < 0 ? rc : -EIO;
}

/* Run the round reads[from, to): submit its queued reads, reap their
 * completions, release their locks. Returns 0, or -EIO when the ring
 * failed (its pieces that did not complete get -EIO; the ring is rebuilt). */
static int run_round(struct kvc_chunk_ring *ring, struct kvc_chunk_read *reads, int from,
                     int to)
{
	const struct kvc_chunk_ring_ops *ops = ring->ops ? ring->ops : &default_ops;
	int queued = 0, submitted = 0, reaped = 0;
	for (int i = from; i < to; i++)
		queued += reads[i].queued;
	int broken = queued ? submit_all(ring, queued, &submitted) : 0;
	for (int i = from, k = 0; i < to; i++)
		if (reads[i].queued)
			reads[i].in_flight = k++ < submitted;
	while (reaped < submitted) {
		struct io_uring_cqe *cqe;
		int rc = ops->wait(&ring->ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0) {
			kvc_log_error("io_uring wait failed with %d of %d reads outstanding: %s",
			              submitted - reaped, submitted, strerror(-rc));
			broken = rc;
			break;
		}
		struct kvc_chunk_read *r = io_uring_cqe_get_data(cqe);
		r->io_result = cqe->res < 0 ? cqe->res : cqe->res + (int)r->read_from;
		r->in_flight = false;
		io_uring_cqe_seen(&ring->ring, cqe);
		reaped++;
		if (r->direct && r->io_result == -EINVAL)
			direct_refused(r);
	}
	for (int i = from; i < to; i++) {
		struct kvc_chunk_read *r = &reads[i];
		if (!r->queued)
			continue;
		r->queued = false;
		unlock_piece(r);
		if (r->in_flight) {
			/* Submitted and never reaped: the read may still land in its
			 * buffer, which therefore is never freed nor reused. */
			abandon(ring, r);
			r->in_flight = false;
		}
		if (r->io_result == -EINPROGRESS)
			r->io_result = -EIO;
	}
	if (broken == 0)
		return 0;
	kvc_log_error("io_uring failed: its reads fail with EIO and the ring is replaced "
	              "(%" PRIu64 " bytes of buffers abandoned so far)", ring->abandoned_bytes);
	ring_rebuild(ring);
	return -EIO;
}

/* Check every block of the piece against its crc, in its buffer. */
static void read_verify(struct kvc_chunk_read *r)
{
	if (!r->buffer || r->io_result != (int)r->aligned_length) {
		/* Placed: a short read stopped at client memory that is gone. */
		r->status = r->io_result < 0 ? r->io_result : r->placed ? -EFAULT : -EIO;
		r->present = 0;
		return;
	}
	if (r->checked) { /* as it was read */
		r->data = r->placed ? NULL : r->buffer + (r->offset - r->aligned_start);
		return;
	}
	if (r->placed) {
		/* The edges are ours: check them here; the whole blocks are in
		 * the caller's memory, which checks them. */
		uint32_t last = (r->aligned_length - 1) / KVC_CHUNK_BLOCK;
		if ((r->head_length &&
		     kvc_crc32c(0, r->edge, r->head_length) != r->block_crcs[0]) ||
		    (r->tail_length && kvc_crc32c(0, r->edge + r->head_length, r->tail_length) !=
		                               r->block_crcs[last])) {
			kvc_log_error("crc mismatch: inode %" PRIu64 " chunk %u (an edge block) of %s",
			              r->inode, r->chunk, r->store->path);
			r->status = -EIO;
			r->present = 0;
			return;
		}
		/* whole blocks read at once before the ring took over were
		 * checked as they landed: the caller checks the rest */
		if (r->read_from > r->head_length) {
			uint32_t done = r->read_from - r->head_length;
			if (done > r->mid_length)
				done = r->mid_length;
			r->mid_offset += done;
			r->mid_length -= done;
			r->mid_block += done / KVC_CHUNK_BLOCK;
		}
		r->data = NULL;
		return;
	}
	if (!blocks_ok(r, r->buffer)) {
		r->status = -EIO;
		r->present = 0;
		return;
	}
	r->data = r->buffer + (r->offset - r->aligned_start);
}

int kvc_chunk_store_read_batch(struct kvc_chunk_store **stores, struct kvc_chunk_ring *ring,
                               struct kvc_chunk_read *reads, int count)
{
	int result = 0;
	if (!ring->ready)
		ring_rebuild(ring);
	for (int i = 0; i < count; i++) {
		struct kvc_chunk_read *r = &reads[i];
		*r = (struct kvc_chunk_read){.inode = r->inode, .chunk = r->chunk,
		                             .offset = r->offset, .length = r->length,
		                             .place = r->place, .scatter = r->scatter,
		                             .scatter_count = r->scatter_count, .store = stores[i],
		                             .fd = -1};
	}
	int round_start = 0;
	for (int i = 0; i < count; i++) {
		if (read_begin(&reads[i], ring) != -EAGAIN)
			continue;
		/* The submission queue is full: run the round, then this piece. */
		if (run_round(ring, reads, round_start, i) < 0)
			result = -EIO;
		round_start = i;
		if (read_begin(&reads[i], ring) == -EAGAIN)
			reads[i].status = -EIO; /* a ring of no entries: nothing to do */
	}
	if (run_round(ring, reads, round_start, count) < 0)
		result = -EIO;
	for (int i = 0; i < count; i++) {
		struct kvc_chunk_read *r = &reads[i];
		if (r->status == 0 && r->present)
			read_verify(r);
	}
	return result;
}

void kvc_chunk_store_read_release(struct kvc_chunk_read *reads, int count)
{
	for (int i = 0; i < count; i++) {
		struct kvc_chunk_read *r = &reads[i];
		if (!r->placed)
			free(r->buffer);
		free(r->edge);
		r->edge = NULL;
		r->placed = false;
		if (r->fd >= 0)
			close(r->fd);
		free(r->block_crcs);
		unlock_piece(r);
		r->buffer = NULL;
		r->data = NULL;
		r->fd = -1;
		r->block_crcs = NULL;
	}
}
