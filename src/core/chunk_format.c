/* chunk_format: see chunk_format.h. */
#include "core/chunk_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void kvc_chunk_key(uint8_t key[12], uint64_t inode, uint32_t chunk)
{
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)(inode >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		key[8 + i] = (uint8_t)(chunk >> (24 - 8 * i));
}

unsigned kvc_chunk_lock_slot(uint64_t inode, uint32_t chunk)
{
	uint64_t h = (inode * 0x9e3779b97f4a7c15ull) ^ (chunk * 0xff51afd7ed558ccdull);
	return (unsigned)(h >> 40) % KVC_CHUNK_LOCK_SLOTS;
}

void kvc_chunk_file_name(uint64_t inode, uint32_t chunk, char *out, size_t size)
{
	snprintf(out, size, "chunks/%02x/%016" PRIx64 ".%08x", (unsigned)(inode & 0xff), inode,
	         chunk);
}

int kvc_chunk_record_parse(const MDB_val *v, struct kvc_chunk_record *rec,
                           const uint8_t **inline_data)
{
	if (v->mv_size < KVC_CHUNK_RECORD_HEADER)
		return -EIO;
	memcpy(rec, v->mv_data, KVC_CHUNK_RECORD_HEADER); /* 2-byte aligned in LMDB: copied */
	bool is_inline = kvc_chunk_record_inline(rec);
	if ((rec->magic != KVC_CHUNK_RECORD_MAGIC && !is_inline) ||
	    rec->block_count > KVC_CHUNK_MAX_BLOCKS ||
	    (is_inline && (rec->length > KVC_CHUNK_INLINE_LIMIT ||
	                   rec->block_count != kvc_chunk_blocks(rec->length))))
		return -EIO;
	size_t crcs = rec->block_count * 4u;
	if (v->mv_size != KVC_CHUNK_RECORD_HEADER + crcs + (is_inline ? rec->length : 0))
		return -EIO;
	memcpy(rec->block_crc, (const uint8_t *)v->mv_data + KVC_CHUNK_RECORD_HEADER, crcs);
	if (inline_data && is_inline)
		*inline_data = (const uint8_t *)v->mv_data + KVC_CHUNK_RECORD_HEADER + crcs;
	else if (inline_data)
		*inline_data = NULL;
	return 0;
}
