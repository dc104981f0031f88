/* chunk_inline: chunks kept in their index record (chunk_store.h, "Inline
 * chunks", has the format and the rules; chunk_store_internal.h the
 * contracts).
 *
 * An inline value is built whole in a buffer of its own, then put: LMDB
 * keeps values past a page in overflow pages, which a put replaces as a
 * run, so a rewrite costs the record's size whatever it changes (the
 * reason for a modest limit). Bytes a change keeps are checked against
 * their block crc first: a bad block is never given a good crc. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/lmdb_txn.h"
#include "core/log.h"
#include "storage/chunk_store_internal.h"

static atomic_flag map_full_logged = ATOMIC_FLAG_INIT;

/* Bytes of an inline value for rec. */
static size_t value_size(const struct record *rec)
{
	return RECORD_HEADER + rec->block_count * 4u + rec->length;
}

/* Block b of `bytes` (a chunk of `length` bytes) against its crc in rec. */
static bool block_ok(const struct record *rec, const uint8_t *bytes, uint32_t length, uint32_t b)
{
	uint32_t start = b * KVC_CHUNK_BLOCK;
	return kvc_crc32c(0, bytes + start, kvc_chunk_block_bytes(length, b)) == rec->block_crc[b];
}

/* A new value for rec (its header and crcs as they are now, then room for
 * rec->length bytes, returned in *bytes). NULL when out of memory. */
static uint8_t *value_new(const struct record *rec, uint8_t **bytes)
{
	uint8_t *value = malloc(value_size(rec));
	if (!value)
		return NULL;
	*bytes = value + RECORD_HEADER + rec->block_count * 4u;
	return value;
}

/* Seal rec (version, chunk crc) and copy its header and crcs into value. */
static void value_seal(struct record *rec, uint8_t *value)
{
	rec->magic = KVC_CHUNK_RECORD_INLINE_MAGIC;
	rec->version++;
	rec->chunk_crc = kvc_chunk_record_crc(rec);
	memcpy(value, rec, RECORD_HEADER + rec->block_count * 4u);
}

/* The new bytes of an inline chunk in value (rec: the old record, old: its
 * bytes; rec is changed to the new one). Returns 0, or -EIO when a block
 * the write only partly covers fails its crc. */
static int merge(struct record *rec, const uint8_t *old, uint32_t offset, const uint8_t *data,
                 uint32_t length, uint8_t **value)
{
	uint32_t old_length = rec->length, old_blocks = rec->block_count;
	uint32_t new_length = offset + length > old_length ? offset + length : old_length;
	uint32_t first = (offset < old_length ? offset : old_length) / KVC_CHUNK_BLOCK;
	uint32_t last = (offset + length - 1) / KVC_CHUNK_BLOCK;
	uint8_t *bytes;
	for (uint32_t b = first; b <= last && b < old_blocks; b++) {
		uint32_t start = b * KVC_CHUNK_BLOCK;
		uint32_t end = start + kvc_chunk_block_bytes(new_length, b);
		if ((start < offset || end > offset + length) && !block_ok(rec, old, old_length, b))
			return -EIO;
	}
	rec->length = new_length;
	rec->block_count = kvc_chunk_blocks(new_length);
	*value = value_new(rec, &bytes);
	if (!*value)
		return -ENOMEM;
	memcpy(bytes, old, old_length);
	memset(bytes + old_length, 0, new_length - old_length);
	memcpy(bytes + offset, data, length);
	for (uint32_t b = first; b <= last; b++)
		rec->block_crc[b] = kvc_crc32c(0, bytes + b * KVC_CHUNK_BLOCK,
		                               kvc_chunk_block_bytes(new_length, b));
	value_seal(rec, *value);
	return 0;
}

/* One inline write, as a call of the index's group commit (lmdb_group.h):
 * everything happens in txn, and its outputs are set afresh each run. */
struct write_call {
	uint64_t inode;
	uint32_t chunk, offset, length;
	const uint8_t *data;
	bool zeros;
	struct record *rec;
	bool done; /* put inline; false: the chunk is a file's */
};

static int write_in(void *owner, MDB_txn *txn, void *arg)
{
	struct kvc_chunk_store *store = owner;
	struct write_call *call = arg;
	struct record *rec = call->rec;
	uint8_t key[12];
	uint8_t *value = NULL;
	const uint8_t *old = NULL;
	call->done = false;
	kvc_chunk_key(key, call->inode, call->chunk);
	MDB_val k = {sizeof(key), key}, v;
	int found = mdb_get(txn, store->dbi, &k, &v);
	int rc = 0;
	if (found == MDB_NOTFOUND) { /* a new chunk: empty and inline */
		*rec = (struct record){.magic = KVC_CHUNK_RECORD_INLINE_MAGIC};
		old = (const uint8_t *)"";
	} else {
		rc = found ? kvc_lmdb_errno(found) : kvc_chunk_record_parse(&v, rec, &old);
	}
	/* A file-backed record (old NULL), zeros into a missing chunk, or a
	 * chunk that outgrows the limit: a file's (nothing done here). */
	uint32_t end = call->offset + call->length > rec->length ? call->offset + call->length
	                                                          : rec->length;
	if (rc < 0 || !old || (call->zeros && found == MDB_NOTFOUND) || end > store->inline_max)
		return rc;
	rc = merge(rec, old, call->offset, call->data, call->length, &value);
	if (rc == 0) {
		v = (MDB_val){value_size(rec), value};
		rc = kvc_lmdb_errno(mdb_put(txn, store->dbi, &k, &v, 0));
	}
	free(value);
	call->done = rc == 0;
	return rc;
}

int kvc_chunk_inline_write(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                           uint32_t offset, const uint8_t *data, uint32_t length, bool zeros,
                           struct record *rec)
{
	struct write_call call = {.inode = inode, .chunk = chunk, .offset = offset,
	                          .length = length, .data = data, .zeros = zeros, .rec = rec};
	int rc = kvc_lmdb_group_run(&store->group, write_in, &call);
	/* The index at its map size (the put's or the commit's): nothing was
	 * put, and the chunk goes to a file. */
	if (rc == -ENOSPC && !atomic_flag_test_and_set(&map_full_logged))
		kvc_log_warn("index of %s at its map size: small chunks go to files (chunk %u of "
		             "inode %" PRIu64 " first; logged once)", store->path, chunk, inode);
	return rc == -ENOSPC ? 0 : rc < 0 ? rc : call.done;
}

int kvc_chunk_inline_to_file(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                             struct record *rec, const uint8_t *bytes)
{
	for (uint32_t b = 0; b < rec->block_count; b++)
		if (!block_ok(rec, bytes, rec->length, b))
			return -EIO;
	/* Whatever the file holds is not this chunk's (no record names it). */
	int fd = kvc_chunk_open_file(store, inode, chunk, O_RDWR | O_CREAT | O_TRUNC);
	int rc = fd < 0 ? fd : ftruncate(fd, rec->length) < 0 ? -errno : 0;
	for (uint32_t b = 0; b < rec->block_count && rc == 0; b++) {
		uint8_t *block = (uint8_t *)bytes + b * KVC_CHUNK_BLOCK;
		uint32_t n = kvc_chunk_block_bytes(rec->length, b);
		if (block[0] || memcmp(block, block + 1, n - 1)) /* zeros stay a hole */
			rc = kvc_chunk_file_io(fd, true, block, n, (uint64_t)b * KVC_CHUNK_BLOCK);
	}
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	rec->magic = KVC_CHUNK_RECORD_MAGIC;
	return fd;
}

int kvc_chunk_inline_shorten(MDB_cursor *cursor, const MDB_val *k, const MDB_val *v,
                             uint32_t keep_bytes)
{
	struct record rec;
	const uint8_t *old;
	uint8_t *value, *bytes;
	int rc = kvc_chunk_record_parse(v, &rec, &old);
	if (rc < 0 || !old)
		return rc < 0 ? rc : -EIO;
	if (rec.length <= keep_bytes)
		return 0;
	uint32_t cut = keep_bytes / KVC_CHUNK_BLOCK; /* the block cut short, if any */
	bool cut_ok = keep_bytes % KVC_CHUNK_BLOCK == 0 || block_ok(&rec, old, rec.length, cut);
	rec.length = keep_bytes;
	rec.block_count = kvc_chunk_blocks(keep_bytes);
	value = value_new(&rec, &bytes);
	if (!value)
		return -ENOMEM;
	memcpy(bytes, old, keep_bytes);
	/* A truncate is never refused: a bad block cut short keeps failing. */
	if (keep_bytes % KVC_CHUNK_BLOCK)
		rec.block_crc[cut] = kvc_crc32c(0, bytes + cut * KVC_CHUNK_BLOCK,
		                                keep_bytes % KVC_CHUNK_BLOCK) ^ (cut_ok ? 0 : 1);
	value_seal(&rec, value);
	MDB_val key = *k, nv = {value_size(&rec), value};
	rc = mdb_cursor_put(cursor, &key, &nv, MDB_CURRENT);
	free(value);
	return rc ? kvc_lmdb_errno(rc) : 1;
}

int kvc_chunk_inline_blocks(struct kvc_chunk_read *r, const uint8_t *bytes)
{
	r->buffer = malloc(r->aligned_length);
	if (!r->buffer)
		return -ENOMEM;
	memcpy(r->buffer, bytes + r->aligned_start, r->aligned_length);
	r->io_result = (int)r->aligned_length;
	return 0;
}
