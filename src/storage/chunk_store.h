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
 *       0   u32 magic        KVC_CHUNK_RECORD_MAGIC
 *       4   u32 length       bytes of the chunk (<= chunk_size)
 *       8   u64 version      +1 on every write or truncate
 *       16  u32 chunk_crc    crc32c of the block crc array below
 *       20  u32 block_count  ceil(length / KVC_CHUNK_BLOCK)
 *       24  u32 block_crc[block_count]  crc32c of each 16 KiB block (the
 *                                       last one covers only up to length)
 *   chunks/XX/IIIIIIIIIIIIIIII.CCCCCCCC  the chunk's bytes at their offsets
 *                             (XX: low byte of the inode in hex; I: inode,
 *                             C: chunk index, in hex). Sparse where unwritten.
 *
 * Write order: the data file is written first, then the index record is
 * committed. A crash between the two leaves blocks whose crc does not match
 * their bytes: reads of them fail with -EIO, never return wrong bytes.
 * Removal goes the other way: the record is deleted first, then the file;
 * a file left without a record (a crash between the two) is a hole, and
 * the next write of its chunk starts it again from empty.
 * LMDB runs with MDB_NOSYNC (a process crash loses nothing: committed pages
 * are in the kernel's cache); kvc_chunk_store_sync makes everything durable.
 *
 * Reads queue the disk work of every piece of a batch on io_uring at once:
 * pieces of up to 64 KiB are read into a buffer; larger ones are mapped
 * from the chunk file and read ahead, their crcs checked straight from the
 * page cache and the caller sends from the mapping: no copy inside the
 * server. Writes and crc recomputation go through io_uring.
 *
 * Concurrency: thread-safe. The locks, in the order they nest:
 *
 *   1. chunk locks: a reader/writer lock per chunk (striped over
 *      LOCK_SLOTS, so one lock may cover several chunks). Writes, punches,
 *      truncates and removes hold it exclusively while they change the
 *      chunk's file and record; a read holds it shared from index lookup
 *      until the caller releases the read (after sending), so the bytes
 *      sent are the bytes that were checked. A reader may hold several at
 *      once (one per piece); a writer waits for at most one at a time.
 *   2. LMDB's write transaction (LMDB's own writer mutex), innermost: a
 *      thread in a write transaction never waits for a chunk lock. The
 *      range operations (punch, truncate, remove) therefore only try the
 *      chunk locks inside their transaction; a chunk whose lock is busy is
 *      done afterwards on its own, its lock taken first.
 *
 * Read transactions take neither. Each server thread passes its own
 * io_uring.
 */
#ifndef KVC_CHUNK_STORE_H
#define KVC_CHUNK_STORE_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#define KVC_CHUNK_BLOCK (16u << 10)
#define KVC_CHUNK_RECORD_MAGIC 0x4b43484bu /* "KHCK" */

struct kvc_chunk_store;

/* One piece of a batched read. Callers fill the inputs; the store fills the
 * outputs; the private part is the store's. */
struct kvc_chunk_read {
	/* in */
	uint64_t inode;
	uint32_t chunk;
	uint32_t offset;
	uint32_t length;
	/* out: status 0 or -errno (-EIO on crc mismatch); `present` bytes at
	 * `data`, the rest of length is a hole */
	int status;
	uint32_t present;
	const uint8_t *data;
	/* private */
	struct kvc_chunk_store *store;
	int fd;
	void *map; /* the aligned blocks: a mapping or a read buffer */
	size_t map_length;
	bool mapped;
	int io_result;
	uint64_t aligned_start;
	uint32_t aligned_length;
	uint32_t first_block;
	uint32_t *block_crcs;
	unsigned lock_slot;
	bool locked;
};

struct kvc_chunk_space {
	uint64_t fsid;
	uint64_t total_bytes;
	uint64_t free_bytes;
	uint64_t chunks;
};

/* Open (creating when empty) the target at path. Returns 0, or -ENOTDIR,
 * -EINVAL (another format), -errno from LMDB or the filesystem. */
int kvc_chunk_store_open(const char *path, struct kvc_chunk_store **out);

/* Close; safe on NULL. */
void kvc_chunk_store_close(struct kvc_chunk_store *store);

/* Write [offset, offset + length) of a chunk. Requires offset + length <=
 * chunk_size <= KVC_LAYOUT_MAX_CHUNK and length > 0. On success *version
 * and *chunk_length describe the chunk afterwards. Returns 0, -EINVAL,
 * -ENOSPC, -EIO or -errno. */
int kvc_chunk_store_write(struct kvc_chunk_store *store, struct io_uring *ring,
                          uint64_t inode, uint32_t chunk, uint32_t chunk_size,
                          uint32_t offset, const void *data, uint32_t length,
                          uint64_t *version, uint32_t *chunk_length);

/* Batched read: look every piece up and map it, queue the readahead of
 * all of them on ring at once, then verify every piece's crcs. Pieces that
 * fail get their own status; the batch goes on. `stores[i]` serves
 * reads[i]; a NULL store (a target this server does not have) fails that
 * piece with -ENXIO. The data pointers stay valid, and the chunks locked
 * against writers, until kvc_chunk_store_read_release. */
void kvc_chunk_store_read_batch(struct kvc_chunk_store **stores,
                                struct io_uring *ring,
                                struct kvc_chunk_read *reads, int count);

/* Unmap, close and unlock every piece of a batch (always call it). */
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
int64_t kvc_chunk_store_truncate(struct kvc_chunk_store *store,
                                 struct io_uring *ring, uint64_t inode,
                                 uint64_t size, uint32_t chunk_size);

/* The highest chunk of inode: 1 and (*chunk, *length), 0 when none. */
int kvc_chunk_store_last(struct kvc_chunk_store *store, uint64_t inode,
                         uint32_t *chunk, uint32_t *length);

/* Capacity of the target's filesystem and its chunk count. */
int kvc_chunk_store_space(struct kvc_chunk_store *store,
                          struct kvc_chunk_space *space);

/* Make every acknowledged write durable (LMDB sync + syncfs). */
int kvc_chunk_store_sync(struct kvc_chunk_store *store);

#endif
