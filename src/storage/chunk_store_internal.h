/*
 * chunk_store_internal: what chunk_store.c (open, index records, writes,
 * range drops) and chunk_read.c (batched reads) share. The record layout
 * and the lock order are chunk_store.h's.
 */
#ifndef KVC_CHUNK_STORE_INTERNAL_H
#define KVC_CHUNK_STORE_INTERNAL_H

#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stddef.h>

#include "core/layout.h"
#include "core/reserve.h"
#include "storage/chunk_store.h"

#define LOCK_SLOTS 1024
#define MAX_BLOCKS (KVC_LAYOUT_MAX_CHUNK / KVC_CHUNK_BLOCK)

struct kvc_chunk_store {
	char path[PATH_MAX];
	int dir_fd;
	MDB_env *env;
	MDB_dbi dbi;
	pthread_rwlock_t locks[LOCK_SLOTS]; /* the chunk locks (chunk_store.h) */
	struct kvc_reserve reserve;         /* of the target's filesystem (its own lock) */
};

/* A chunk's index record as stored (little-endian, 2-byte aligned in LMDB:
 * always copied, never cast). */
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

/* The lock slot of a chunk. */
unsigned kvc_chunk_lock_slot(uint64_t inode, uint32_t chunk);

/* Open a chunk's file with flags (O_CLOEXEC added). Returns the fd or
 * -errno. */
int kvc_chunk_open_file(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                        int flags);

/* Look up a chunk's record in txn; 1 found (copied into rec), 0 absent,
 * -errno (-EIO for a malformed record). */
int kvc_chunk_record_get(MDB_txn *txn, MDB_dbi dbi, uint64_t inode, uint32_t chunk,
                         struct record *rec);

#endif
