/*
 * chunk_store_internal: what chunk_store.c (open, index records, writes,
 * range drops), chunk_inline.c (chunks kept in their record),
 * chunk_read.c (batched reads) and chunk_list.c (listing, set) share. The record layouts and the lock
 * order are chunk_store.h's.
 */
#ifndef KVC_CHUNK_STORE_INTERNAL_H
#define KVC_CHUNK_STORE_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "core/chunk_format.h"
#include "core/layout.h"
#include "core/lmdb_checkpoint.h"
#include "core/lmdb_group.h"
#include "core/reserve.h"
#include "storage/chunk_store.h"


struct kvc_chunk_store {
	char path[PATH_MAX];
	int dir_fd;
	MDB_env *env;
	struct kvc_lmdb_checkpoint *checkpoint; /* the index's (chunk_store.h "Crashes") */
	MDB_dbi dbi;
	pthread_rwlock_t locks[KVC_CHUNK_LOCK_SLOTS]; /* the chunk locks (chunk_store.h) */
	/* A change counter per lock slot, in shared memory same-host readers
	 * map (chunk_local.c): odd while a writer holds the slot's lock. */
	_Atomic uint64_t *changes;
	int changes_fd;       /* -1: the counters are private (no sealed memfd here) */
	bool changes_private; /* changes is calloc'ed, not mapped */
	struct kvc_lmdb_group group;        /* inline writes' group commit (below the chunk locks) */
	struct kvc_reserve reserve;         /* of the target's filesystem (its own lock) */
	uint32_t inline_max; /* chunks ending at or below it stay inline (set before serving) */
	atomic_bool nowait_refused; /* its filesystem refuses RWF_NOWAIT: reads by the ring only */
	bool direct_reads;          /* data not cached read with O_DIRECT (set before serving) */
	atomic_bool direct_refused; /* its filesystem refuses O_DIRECT: through the page cache */
	atomic_bool no_cachestat;   /* the kernel has no cachestat(2) (before 6.5) */
	/* file pieces read at once from the page cache, through the ring by
	 * the page cache, and through the ring with O_DIRECT */
	atomic_uint_fast64_t reads_cached, reads_ring, reads_direct;
};

/* The change counters (chunk_local.c): made at open, given back at close. */
int kvc_chunk_changes_init(struct kvc_chunk_store *store);
void kvc_chunk_changes_destroy(struct kvc_chunk_store *store);

/* The exclusive side of a chunk lock: every change of a chunk's file or
 * record is made between these, and each moves the slot's change counter
 * (odd while held), so a same-host reader that saw the same even count
 * before and after its read saw no change. */
static inline void kvc_chunk_lock_write(struct kvc_chunk_store *store, unsigned slot)
{
	pthread_rwlock_wrlock(&store->locks[slot]);
	atomic_fetch_add(&store->changes[slot], 1);
	atomic_thread_fence(memory_order_seq_cst); /* the change after the odd count */
}

static inline bool kvc_chunk_trylock_write(struct kvc_chunk_store *store, unsigned slot)
{
	if (pthread_rwlock_trywrlock(&store->locks[slot]) != 0)
		return false;
	atomic_fetch_add(&store->changes[slot], 1);
	atomic_thread_fence(memory_order_seq_cst);
	return true;
}

static inline void kvc_chunk_unlock_write(struct kvc_chunk_store *store, unsigned slot)
{
	atomic_fetch_add(&store->changes[slot], 1);
	pthread_rwlock_unlock(&store->locks[slot]);
}

/* The chunk_crc of a record: crc32c of its block crc array. */
uint32_t kvc_chunk_record_crc(const struct kvc_chunk_record *rec);

/* Open a chunk's file with flags (O_CLOEXEC added). Returns the fd or
 * -errno. */
int kvc_chunk_open_file(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                        int flags);

/* Read or write the whole range with pread/pwrite; a short read (past the
 * end of the file) is zero-filled: a hole. Returns 0 or -errno. */
int kvc_chunk_file_io(int fd, bool write, void *buf, size_t length, uint64_t offset);

/* Look up a chunk's record in txn; 1 found (copied into rec; *inline_data
 * as kvc_chunk_record_parse, valid while txn lives), 0 absent, -errno (-EIO
 * for a malformed record). */
int kvc_chunk_record_get(MDB_txn *txn, MDB_dbi dbi, uint64_t inode, uint32_t chunk,
                         struct kvc_chunk_record *rec, const uint8_t **inline_data);

/* Whether length (> 0) bytes at data are all zeros. */
bool kvc_chunk_all_zeros(const uint8_t *data, uint32_t length);

/* Write [offset, offset + length) of a chunk with its lock held
 * exclusively (zeros: data is all zeros); rec describes the chunk after.
 * The reserve was admitted by the caller. Returns 0 or -errno. */
int kvc_chunk_write_locked(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                           uint32_t offset, const uint8_t *data, uint32_t length, bool zeros,
                           struct kvc_chunk_record *rec);

/* Remove a chunk's file (after its record is gone); a file already gone
 * is no error, another failure is logged. */
void kvc_chunk_unlink(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk);

/* chunk_inline.c. Every function runs with the chunk's lock held
 * exclusively (the read one: shared), as chunk_store.h's lock order says. */

/* Write [offset, offset + length) of a chunk in its inline record: read,
 * change and put the record in one write transaction (shared with the
 * inline writes that wait at the same time: core/lmdb_group.h). Returns 1 when
 * done (rec describes the chunk after), 0 when the chunk is not for an
 * inline record (a file-backed record, a result past inline_max, zeros
 * into a missing chunk, or an index at its map size): the caller writes
 * it as a file. -EIO when bytes the write keeps fail their crc, -errno. */
int kvc_chunk_inline_write(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                           uint32_t offset, const uint8_t *data, uint32_t length, bool zeros,
                           struct kvc_chunk_record *rec);

/* Move an inline chunk's bytes (rec, bytes: a copy of its record) into its
 * file, which starts anew; rec becomes a file-backed record for the same
 * bytes, still to be committed by the caller after the rest of its write
 * (data file first, record second). Returns the file's fd (O_RDWR) or
 * -errno (-EIO when the bytes fail their crc). */
int kvc_chunk_inline_to_file(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                             struct kvc_chunk_record *rec, const uint8_t *bytes);

/* Shorten the inline record under the cursor (key k, value v) to
 * keep_bytes inside the caller's write transaction. Returns 1 when
 * changed, 0 when already that short, -errno. */
int kvc_chunk_inline_shorten(MDB_cursor *cursor, const MDB_val *k, const MDB_val *v,
                             uint32_t keep_bytes);

/* Give a read piece its aligned blocks from an inline record's bytes, as
 * if its ring read had completed (the piece's aligned range is set; its
 * crcs are checked afterwards like those of a file's blocks). Returns 0 or
 * -ENOMEM. */
int kvc_chunk_inline_blocks(struct kvc_chunk_read *r, const uint8_t *bytes);

#endif
