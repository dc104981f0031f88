/*
 * chunk_format: a storage target's chunk index records and chunk files,
 * as kvc-storage keeps them (docs/on-disk.md; src/storage/chunk_store.h
 * has the whole format and its write order) and as a same-host reader
 * finds them (src/client/transport_local.c reads chunks of a target it
 * was handed, checking the same block crcs).
 *
 * What it owns: the record layout and its parse, the index key, the
 * chunk file's name, and the chunk lock slot hash (kvc-storage's chunk
 * locks and the change counters a same-host reader checks are indexed
 * by it). Pure functions; no state.
 */
#ifndef KVC_CORE_CHUNK_FORMAT_H
#define KVC_CORE_CHUNK_FORMAT_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/layout.h"

/* Every KVC_CHUNK_BLOCK bytes of a chunk have a crc32c in its record. */
#define KVC_CHUNK_BLOCK (16u << 10)
#define KVC_CHUNK_MAX_BLOCKS (KVC_LAYOUT_MAX_CHUNK / KVC_CHUNK_BLOCK)
#define KVC_CHUNK_RECORD_MAGIC 0x4b43484bu        /* "KHCK": the bytes are in the chunk's file */
#define KVC_CHUNK_RECORD_INLINE_MAGIC 0x4c43484bu /* "KHCL": inline, the bytes follow */
/* An inline record's bytes, at most (chunk_store.h "Inline chunks"). */
#define KVC_CHUNK_INLINE_LIMIT (256u << 10)
/* Chunk lock slots (and change counters) of a target. */
#define KVC_CHUNK_LOCK_SLOTS 1024u

/* A chunk's index record as stored (little-endian, 2-byte aligned in
 * LMDB: always copied, never cast). */
struct kvc_chunk_record {
	uint32_t magic;
	uint32_t length;
	uint64_t version;
	uint32_t chunk_crc;
	uint32_t block_count;
	uint32_t block_crc[KVC_CHUNK_MAX_BLOCKS];
};
#define KVC_CHUNK_RECORD_HEADER 24u
_Static_assert(offsetof(struct kvc_chunk_record, block_crc) == KVC_CHUNK_RECORD_HEADER, "");

static inline bool kvc_chunk_record_inline(const struct kvc_chunk_record *rec)
{
	return rec->magic == KVC_CHUNK_RECORD_INLINE_MAGIC;
}

/* Blocks of a chunk of `length` bytes, and the bytes of block b. */
static inline uint32_t kvc_chunk_blocks(uint32_t length)
{
	return (length + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK;
}

static inline uint32_t kvc_chunk_block_bytes(uint32_t length, uint32_t b)
{
	uint32_t start = b * KVC_CHUNK_BLOCK;
	return length - start < KVC_CHUNK_BLOCK ? length - start : KVC_CHUNK_BLOCK;
}

/* The index key of a chunk: inode u64 then chunk u32, big-endian. */
void kvc_chunk_key(uint8_t key[12], uint64_t inode, uint32_t chunk);

/* The lock slot of a chunk (0 .. KVC_CHUNK_LOCK_SLOTS - 1). */
unsigned kvc_chunk_lock_slot(uint64_t inode, uint32_t chunk);

/* A file-backed chunk's path under its target directory:
 * chunks/XX/IIIIIIIIIIIIIIII.CCCCCCCC. */
void kvc_chunk_file_name(uint64_t inode, uint32_t chunk, char *out, size_t size);

/* Check a record value and copy its header and crcs into rec. *inline_data
 * (when not NULL) is set to its bytes inside v for an inline record, NULL
 * for a file-backed one. Returns 0 or -EIO (malformed). */
int kvc_chunk_record_parse(const MDB_val *v, struct kvc_chunk_record *rec,
                           const uint8_t **inline_data);

#endif
