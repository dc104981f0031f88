/*
 * chunk_store: the chunks of one storage target (a local directory).
 *
 * A chunk is identified by (inode, chunk index) and holds up to chunk_size
 * bytes; bytes never written read as zeros (a hole), and a chunk that does
 * not exist is a hole as a whole.
 *
 * On disk, under the target directory:
 *
 *   FORMAT                    "kvc-target 1\n": refuses a target of another
 *                             format at open
 *   index/data.mdb            LMDB, one unnamed database:
 *     key   (12 bytes)  inode  u64 big-endian, chunk u32 big-endian
 *                       (big-endian so one inode's chunks are adjacent and
 *                       in order, for remove / truncate / last scans)
 *     value (little-endian)
 *       0   u32 magic        KVC_CHUNK_RECORD_MAGIC: the bytes are in the
 *                            chunk's file; KVC_CHUNK_RECORD_INLINE_MAGIC:
 *                            they follow the crcs in this value
 *       4   u32 length       bytes of the chunk (<= chunk_size; inline:
 *                            <= KVC_CHUNK_INLINE_LIMIT)
 *       8   u64 version      +1 on every write or truncate
 *       16  u32 chunk_crc    crc32c of the block crc array below
 *       20  u32 block_count  ceil(length / KVC_CHUNK_BLOCK)
 *       24  u32 block_crc[block_count]  crc32c of each 16 KiB block (the
 *                                       last one covers only up to length)
 *       inline records only:
 *       24 + 4 * block_count  u8 data[length]  the chunk's bytes (zeros
 *                                       where never written)
 *   chunks/XX/IIIIIIIIIIIIIIII.CCCCCCCC  a file-backed chunk's bytes at their
 *                             offsets (XX: low byte of the inode in hex; I:
 *                             inode, C: chunk index, in hex). Sparse where
 *                             unwritten or written as zeros only (those are
 *                             punched). An inline chunk has no file.
 *
 * Inline chunks: a chunk whose bytes end at or below the store's inline
 * limit (kvc_chunk_store_set_inline; KVC_CHUNK_INLINE_DEFAULT until then;
 * 0: none) lives in its index record, so a small file costs one LMDB put
 * instead of a file create, and one delete instead of an unlink. A write
 * that leaves it within the limit rewrites the record (read, change, put
 * in one write transaction); a write that takes it past the limit moves
 * it to a file for good: the file gets the old bytes and the new ones,
 * then the file-backed record replaces the inline one. A file-backed chunk
 * never becomes inline again (a store keeps whichever records it has: one
 * written before inline chunks existed, or with the limit at 0, reads and
 * writes as before). Zeros written into a missing chunk (a punch's edges)
 * still go to a sparse file. Where the index has reached its map size, a
 * chunk is kept in a file instead.
 *
 * Write order: the data file is written first, then the index record is
 * committed. A crash between the two leaves blocks whose crc does not match
 * their bytes: reads of them fail with -EIO, never return wrong bytes. An
 * inline chunk moving to its file is the same: a crash before the record
 * is committed leaves the inline record in force (the file, without a
 * record that names it, is ignored and started anew by the next move).
 * An inline write is one transaction: all or nothing.
 * Removal goes the other way: the record is deleted first, then the file;
 * a file left without a record (a crash between the two) is a hole, and
 * the next write of its chunk starts it again from empty (or leaves it
 * where the chunk becomes inline: such a file takes space until a move of
 * that chunk to a file truncates it). Removing an inline chunk is the
 * record's delete alone.
 *
 * Reads of an inline chunk copy its blocks out of a read transaction into
 * the piece's buffer and check the same block crcs as a file's; a batch
 * may mix both kinds. A write that keeps old bytes of an inline chunk
 * checks their crcs first (-EIO), so it never turns bad bytes into good
 * ones; a truncate never fails on them (the cut block keeps failing).
 * LMDB runs with MDB_NOSYNC (a process crash loses nothing: committed pages
 * are in the kernel's cache); kvc_chunk_store_sync makes everything durable.
 *
 * Crashes: the index is under checkpoints (core/lmdb_checkpoint.h;
 * index/checkpoint). Without them a machine crash could leave it corrupt,
 * synced records included: after a sync, later transactions reuse pages
 * of the synced tree in the page cache, and the disk may get those pages
 * with an older meta page. A checkpoint's pin keeps the last durable tree
 * whole, and opening after a reboot goes back to it: records committed
 * after it are lost (their chunks read as before, or fail their crcs:
 * -EIO, never wrong bytes). Checkpoints are taken by kvc_chunk_store_sync
 * (SYNC, a clean stop) and by kvc_chunk_store_checkpoint, which the
 * server calls on a schedule of its own (storage/main.c: every
 * KVC_CHUNK_CHECKPOINT_MS, the kernel's own age for dirty pages, and
 * early when the pages freed since the last, which it keeps from reuse,
 * pass a quarter of the target's reserve, 64 MiB ..
 * KVC_CHUNK_CHECKPOINT_GROWTH: deletes on a full target take their pages
 * from the reserve). Not on the file's growth (as kvc-meta's stores do
 * past 64 MiB) nor soon after writes: new inline chunks grow it at
 * page-cache speed, several times the disk's, and a checkpoint flushes
 * (a checkpoint a second after each burst halved the next burst's puts
 * on the H200 host, docs/benchmarks.md).
 *
 * The module is chunk_store.c (open, records, writes, range operations),
 * chunk_inline.c (chunks kept in their record), chunk_read.c (batched
 * reads and their ring) and chunk_list.c (the listing and the whole-chunk
 * set a resync uses).
 *
 * Reads queue the disk work of every piece of a batch on io_uring at once
 * (up to the ring's size per round), each into a buffer of its own, and
 * check the crcs there; the caller sends from those buffers. Writes and
 * crc recomputation are plain pwrite/pread: one synchronous operation gains
 * nothing from a ring.
 *
 * Concurrency: thread-safe. The locks, in the order they nest:
 *
 *   1. chunk locks: a reader/writer lock per chunk (striped over
 *      KVC_CHUNK_LOCK_SLOTS, so one lock may cover several chunks). Writes, punches,
 *      truncates and removes hold it exclusively while they change the
 *      chunk's file and record; a read holds it shared from index lookup
 *      until its bytes are in its buffer, and never while the caller sends
 *      them. A reader may hold several at once (one per piece); a writer
 *      waits for at most one at a time.
 *   2. the inline writes' group commit (core/lmdb_group.h): a write waits
 *      there with its chunk lock held, and the leader runs the waiting
 *      writes in its transaction (they take no lock there).
 *   3. LMDB's write transaction (LMDB's own writer mutex), innermost: a
 *      thread in a write transaction never waits for a chunk lock. The
 *      range operations (punch, truncate, remove) therefore only try the
 *      chunk locks inside their transaction; a chunk whose lock is busy is
 *      done afterwards on its own, its lock taken first.
 *
 * An inline write reads and puts its record inside one write transaction
 * (shared with the inline writes waiting at the same time), its chunk
 * lock taken before; range operations shorten or drop inline
 * records inside theirs, under the chunk locks they hold.
 *
 * Read transactions take neither. Every taking of a chunk lock's exclusive
 * side moves the slot's change counter (chunk_store_internal.h
 * kvc_chunk_lock_write), which same-host readers check around their
 * lock-free reads (kvc_chunk_store_local); the index's reader slots of
 * such readers that died are cleared at each checkpoint. Each server thread passes its own ring.
 * The reserve (core/reserve.h) has a mutex of its own, taken with no other
 * lock held, before a write takes its chunk lock.
 *
 * Full disks: a write is admitted only when it leaves the target's
 * filesystem above its reserve (kvc_chunk_store_set_reserve; none until
 * then), else it fails with -ENOSPC before touching anything, so the
 * LMDB databases on that filesystem (this index, kvc-meta's when it
 * shares the volume) always have room to commit. Removes, punches and
 * truncates are never refused, nor are writes of zeros (the edges of a
 * punch that is not chunk-aligned): those are punched out of the chunk
 * file (fallocate PUNCH_HOLE; a hole reads as zeros) and take no space,
 * or, into an inline chunk, rewrite its record (at most the inline limit
 * per chunk: the reserve is there for the index to commit).
 */
#ifndef KVC_CHUNK_STORE_H
#define KVC_CHUNK_STORE_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/chunk_format.h"
#include "core/reserve.h"


/* Inline chunks (above). The default, 64 KiB: the key size of issue 11 and
 * of a KV-cache block of one layer (16 tokens x 8 KV heads x 128 x K+V x
 * 2 bytes), so such keys take no file. Above it: every partial write
 * rewrites the whole record, under LMDB's one writer lock (a target's
 * small writes do not run in parallel), in longer runs of contiguous
 * overflow pages (docs/development.md has 64, 128 and 256 KiB measured);
 * and a large file written in 128 KiB pieces (cp's) would put each of its
 * chunks in a record first, then move it to a file. The limit: 256 KiB. */
#define KVC_CHUNK_INLINE_DEFAULT (64u << 10)

struct kvc_chunk_store;

/* One piece of a batched read. Callers fill the inputs; the store fills the
 * outputs; the private part is the store's. */
struct kvc_chunk_read {
	/* in */
	uint64_t inode;
	uint32_t chunk;
	uint32_t offset;
	uint32_t length;
	/* in, optional: where the piece's bytes go (same-host placement:
	 * client memory). When the piece covers at least one whole block, its
	 * whole blocks are read straight there (one vectored read: a kernel
	 * copy, memory gone is -EFAULT) and `placed` is set; the partial
	 * blocks at its edges are read into `edge` and checked here. The
	 * placed blocks' crcs are checked here only when `checked` says so
	 * (data the page cache held, checked as it landed): else the caller
	 * checks place[mid_offset, + mid_length) against
	 * block_crcs[mid_block..] under its guard (a range that leaves out
	 * the whole blocks read at once before the io_uring took over:
	 * read_from). It copies the edges' parts
	 * (head: edge[offset - aligned_start, head_length) to place[0..];
	 * tail: edge[head_length, + tail_copy) to place[tail_offset..]), all
	 * before kvc_chunk_store_read_release. A piece of an inline chunk is
	 * checked in its record and copied from there into place whole (under
	 * the memory guard), whatever its size: placed, with no edges and no
	 * whole blocks left for the caller (head_length, tail_copy and
	 * mid_length 0). */
	uint8_t *place;
	/* in, optional, instead of place: where a run of pieces goes (each
	 * piece of a ring key's segments to its own place): the piece's bytes
	 * in order, scatter[0].iov_len bytes to scatter[0].iov_base and so on
	 * (the lengths add up to `length`; past the chunk's end nothing is
	 * copied, a hole). Only an inline chunk is placed this way (as place
	 * above); a file-backed one is read into a buffer as without. */
	const struct iovec *scatter;
	uint32_t scatter_count;
	/* out: status 0 or -errno (-EIO on crc mismatch or a failed ring);
	 * `present` bytes at `data`, the rest of length is a hole */
	int status;
	uint32_t present;
	const uint8_t *data;
	bool placed;
	/* private */
	struct kvc_chunk_store *store;
	int fd;
	uint8_t *buffer; /* the aligned blocks, read from the chunk file (placed: = place) */
	int io_result;
	uint64_t aligned_start;
	uint32_t aligned_length;
	uint32_t first_block;
	uint32_t *block_crcs;
	unsigned lock_slot;
	bool locked;
	bool checked;   /* every block was checked as it was read (read_cached) */
	/* bytes of the aligned blocks read at once (checked, in place) before
	 * the page cache fell short: the io_uring reads the rest from there */
	uint32_t read_from;
	bool direct;    /* its ring read goes by O_DIRECT */
	bool queued;    /* its read is on the ring's submission queue */
	bool in_flight; /* submitted, completion not reaped yet */
	/* placed (see place): */
	uint8_t *edge;          /* the edge blocks (head then tail), or NULL */
	uint32_t head_length;   /* bytes of the head block in edge (0: none) */
	uint32_t tail_length;   /* bytes of the tail block in edge (0: none) */
	uint32_t tail_copy;     /* of those, the piece's */
	uint32_t tail_offset;   /* where they go in place */
	uint32_t mid_offset;    /* the whole blocks in place */
	uint32_t mid_length;
	uint32_t mid_block;     /* their first crc's index in block_crcs */
	struct iovec vec[3];
	int vec_count;
};

/* The io_uring one server thread reads through. ops is a seam for tests
 * (NULL: liburing's own submit and wait); a failed submit or wait fails
 * the pieces it concerns with -EIO, and the ring is then rebuilt, since
 * it may still hold their submissions. */
struct kvc_chunk_ring_ops {
	int (*submit)(struct io_uring *ring);
	int (*wait)(struct io_uring *ring, struct io_uring_cqe **cqe);
};

struct kvc_chunk_ring {
	struct io_uring ring;
	unsigned entries;
	bool ready; /* false: not set up (init or a rebuild failed) */
	const struct kvc_chunk_ring_ops *ops;
	bool ring_only; /* every read through the ring, none at once (tests of its failures) */
	uint8_t *bounce; /* where reads of cached data are checked (chunk_read.c) */
	uint64_t abandoned_bytes; /* buffers left to reads never reaped */
	/* Placed reads among them: the kernel may still write into the
	 * caller's memory, which its caller must keep mapped for good (a
	 * count that rises across kvc_chunk_store_read_batch says so). */
	uint64_t abandoned_places;
};

/* Set up a ring of `entries` submissions. Returns 0 or -errno. */
int kvc_chunk_ring_init(struct kvc_chunk_ring *ring, unsigned entries);

/* Tear it down; safe on a ring that is not ready. */
void kvc_chunk_ring_exit(struct kvc_chunk_ring *ring);

struct kvc_chunk_space {
	uint64_t fsid;
	uint64_t total_bytes;
	uint64_t free_bytes;      /* the filesystem's, now */
	uint64_t reserve_bytes;   /* kept back from chunk data */
	uint64_t available_bytes; /* what chunk data may still take */
	uint64_t refused_writes;  /* refused for the reserve since open */
	bool refusing;            /* at the reserve: new data gets -ENOSPC */
	uint64_t chunks;
};

/* Open (creating when empty) the target at path. Returns 0, or -ENOTDIR,
 * -EINVAL (another format), -errno from LMDB or the filesystem. */
int kvc_chunk_store_open(const char *path, struct kvc_chunk_store **out);

/* Close; safe on NULL. */
void kvc_chunk_store_close(struct kvc_chunk_store *store);

/* What a same-host reader is handed (PLACE_LOCAL, src/client/
 * transport_local.c): the target directory (index/ and chunks/, opened
 * read-only there) and the change counters, KVC_CHUNK_LOCK_SLOTS u64s in
 * sealed shared memory (only this process's mapping writes them), one per
 * chunk lock slot, odd while a writer holds the slot's lock. A reader
 * that reads a slot's counter even, reads the record and the bytes, and
 * reads the same count again saw no change of that chunk meanwhile; the
 * block crcs still check the bytes. The fds stay the store's. Returns 0,
 * or -EOPNOTSUPP where the counters could not be shared (a kernel without
 * sealed memfds: the store then keeps them privately and serves as before). */
int kvc_chunk_store_local(const struct kvc_chunk_store *store, int *dir_fd, int *changes_fd);

/* Keep `bytes` of the target's filesystem free of chunk data
 * (KVC_RESERVE_AUTO: sized to the filesystem, core/reserve.h). ops: NULL
 * for the real filesystem (a seam for tests). Call before serving.
 * Returns 0 or -errno from looking at the filesystem. */
int kvc_chunk_store_set_reserve(struct kvc_chunk_store *store, int64_t bytes,
                                const struct kvc_reserve_ops *ops);

/* Keep chunks that end at or below `bytes` in their index record (0: every
 * chunk in a file; records already inline stay readable, and move to a
 * file when next written). Call before serving. Returns 0 or -EINVAL
 * (above KVC_CHUNK_INLINE_LIMIT). */
int kvc_chunk_store_set_inline(struct kvc_chunk_store *store, uint32_t bytes);

/* Read chunk file data the page cache does not hold with O_DIRECT, from
 * the disk straight into the piece's buffers (placed: the client's
 * memory), where they and the file offset are 4 KiB-aligned: no copy out
 * of the page cache, and cold data does not push warm data out of it, but
 * no readahead either (false, the default: every read through the page
 * cache; docs/benchmarks.md "Cold reads"). A filesystem that refuses
 * O_DIRECT (tmpfs) is read through the page cache. Call before serving. */
void kvc_chunk_store_set_direct(struct kvc_chunk_store *store, bool direct);

/* Write [offset, offset + length) of a chunk. Requires offset + length <=
 * chunk_size <= KVC_LAYOUT_MAX_CHUNK and length > 0. On success *version
 * and *chunk_length describe the chunk afterwards. Returns 0, -EINVAL,
 * -ENOSPC (also: the write would go below the reserve; nothing written),
 * -EIO or -errno. */
int kvc_chunk_store_write(struct kvc_chunk_store *store, uint64_t inode,
                          uint32_t chunk, uint32_t chunk_size, uint32_t offset,
                          const void *data, uint32_t length, uint64_t *version,
                          uint32_t *chunk_length);

/* Batched read: look every piece up, queue the reads of all of them on
 * the ring at once (a round per ring size), then verify every piece's
 * crcs. Pieces that fail get their own status; the batch goes on.
 * `stores[i]` serves reads[i]; a NULL store (a target this server does not
 * have) fails that piece with -ENXIO. On return no chunk lock is held: the
 * data pointers are the batch's own buffers, valid until
 * kvc_chunk_store_read_release. Returns 0, or -EIO when the ring failed
 * (the pieces it concerned have -EIO; the ring was set up anew, and
 * ring->ready says whether that worked: a caller stops using a ring that
 * is not ready). */
int kvc_chunk_store_read_batch(struct kvc_chunk_store **stores,
                               struct kvc_chunk_ring *ring,
                               struct kvc_chunk_read *reads, int count);

/* Free and close what every piece of a batch holds (always call it). */
void kvc_chunk_store_read_release(struct kvc_chunk_read *reads, int count);

/* Remove every chunk of inode. Returns the count removed or -errno. */
int64_t kvc_chunk_store_remove(struct kvc_chunk_store *store, uint64_t inode);

/* Remove chunks first_chunk .. first_chunk + count - 1 of inode (those
 * this store holds); they read as holes after. Returns the count removed,
 * or -EINVAL (an empty or wrapping range), -errno. */
int64_t kvc_chunk_store_punch(struct kvc_chunk_store *store, uint64_t inode,
                              uint32_t first_chunk, uint32_t count);

/* Drop every byte of inode at or after `size`, for a file of chunk_size.
 * Returns the number of chunks removed or shortened, or -errno. */
int64_t kvc_chunk_store_truncate(struct kvc_chunk_store *store, uint64_t inode,
                                 uint64_t size, uint32_t chunk_size);

/* The highest chunk of inode: 1 and (*chunk, *length), 0 when none. */
int kvc_chunk_store_last(struct kvc_chunk_store *store, uint64_t inode,
                         uint32_t *chunk, uint32_t *length);

/* One chunk as kvc_chunk_store_list sees it. */
struct kvc_chunk_entry {
	uint64_t inode;
	uint32_t chunk;
	uint32_t length;
	uint32_t chunk_crc; /* the record's: crc32c of its block crcs */
};

/* Up to max chunks in (inode, chunk) order (the index's key order):
 * those after (after_inode, after_chunk) when `after`, else from the
 * first. *more: chunks remain after the last one returned. One read
 * transaction: a consistent snapshot of the index, taking no chunk lock
 * (a chunk being written shows its last committed record). Equal
 * (length, chunk_crc) means equal bytes (but for a crc collision); a
 * chunk whose bytes were damaged on disk keeps its record's crc, so a
 * listing does not find damage (a read does: -EIO). Returns the count, or
 * -EIO (a malformed key or record), -errno from LMDB. */
int kvc_chunk_store_list(struct kvc_chunk_store *store, bool after, uint64_t after_inode,
                         uint32_t after_chunk, struct kvc_chunk_entry *out, uint32_t max,
                         bool *more);

/* Make a chunk hold exactly `length` bytes of data (length 0: drop it),
 * whatever it held: under the chunk's lock, held once across both steps,
 * the old record and file go, then the bytes are written as a new chunk
 * (inline when they fit the store's inline limit), so no reader or writer
 * of the chunk sees it in between. A crash in between leaves the chunk
 * missing (a hole), never mixed. Non-zero data must leave the reserve
 * free (-ENOSPC, nothing changed). Returns 0, -EINVAL (length over
 * KVC_LAYOUT_MAX_CHUNK), -ENOSPC, -EIO or -errno. */
int kvc_chunk_store_set(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                        const void *data, uint32_t length);

/* Capacity of the target's filesystem (looked at now), its reserve and
 * its chunk count. */
int kvc_chunk_store_space(struct kvc_chunk_store *store,
                          struct kvc_chunk_space *space);

/* How many file pieces were read since open: at once from the page
 * cache (checked as they landed), through the io_uring by the page cache
 * (data not all cached, a retry, a mismatch or a fault), and through the
 * io_uring with O_DIRECT (data not all cached, into 4 KiB-aligned
 * buffers). Inline chunks count in none. */
void kvc_chunk_store_read_counts(struct kvc_chunk_store *store, uint64_t *cached,
                                 uint64_t *ring, uint64_t *direct);

/* Make every acknowledged write durable (syncfs, then a checkpoint of the
 * index). */
int kvc_chunk_store_sync(struct kvc_chunk_store *store);

/* A checkpoint of the index alone (what a machine crash goes back to;
 * the chunk files are not flushed). 0 or -errno. */
#define KVC_CHUNK_CHECKPOINT_MS 30000
#define KVC_CHUNK_CHECKPOINT_GROWTH ((size_t)4 << 30)
int kvc_chunk_store_checkpoint(struct kvc_chunk_store *store);

/* Bytes of index pages freed since its last checkpoint and kept from
 * reuse by it (core/lmdb_checkpoint.h kvc_lmdb_checkpoint_held). */
size_t kvc_chunk_store_index_held(struct kvc_chunk_store *store);

#endif
