/* chunk_inline: chunks kept in their index record (chunk_store.h, "Inline
 * chunks", has the format and the rules; chunk_store_internal.h the
 * contracts).
 *
 * LMDB keeps values past a page in overflow pages, which a put replaces
 * as a run, so a rewrite costs the record's size whatever it changes (the
 * reason for a modest limit). A new chunk's value is built in the space
 * the put reserves (MDB_RESERVE: the bytes are copied once); an existing
 * chunk's is built whole in a buffer of its own, then put (write_in says
 * why). The crcs of the blocks that start inside a write are computed
 * over its bytes before its transaction, outside the group commit's
 * serialized section, and used where the write gives a block all of its
 * bytes (so the caller's data must not change during the call). Bytes a
 * change keeps are checked against their block crc first: a bad block is
 * never given a good crc. */
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
static size_t value_size(const struct kvc_chunk_record *rec)
{
	return KVC_CHUNK_RECORD_HEADER + rec->block_count * 4u + rec->length;
}

/* Block b of `bytes` (a chunk of `length` bytes) against its crc in rec. */
static bool block_ok(const struct kvc_chunk_record *rec, const uint8_t *bytes, uint32_t length, uint32_t b)
{
	uint32_t start = b * KVC_CHUNK_BLOCK;
	return kvc_crc32c(0, bytes + start, kvc_chunk_block_bytes(length, b)) == rec->block_crc[b];
}

/* A new value for rec (its header and crcs as they are now, then room for
 * rec->length bytes, returned in *bytes). NULL when out of memory. */
static uint8_t *value_new(const struct kvc_chunk_record *rec, uint8_t **bytes)
{
	uint8_t *value = malloc(value_size(rec));
	if (!value)
		return NULL;
	*bytes = value + KVC_CHUNK_RECORD_HEADER + rec->block_count * 4u;
	return value;
}

/* Seal rec (version, chunk crc) and copy its header and crcs into value. */
static void value_seal(struct kvc_chunk_record *rec, uint8_t *value)
{
	rec->magic = KVC_CHUNK_RECORD_INLINE_MAGIC;
	rec->version++;
	rec->chunk_crc = kvc_chunk_record_crc(rec);
	memcpy(value, rec, KVC_CHUNK_RECORD_HEADER + rec->block_count * 4u);
}

/* Blocks an inline chunk may have (the last one may be short). */
#define INLINE_BLOCKS ((KVC_CHUNK_INLINE_LIMIT + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK)

/* One inline write, as a call of the index's group commit (lmdb_group.h):
 * everything happens in txn. The group may run it again (a batch rerun
 * nested after a failure): its inputs are only read there, its outputs
 * are set afresh each run. */
struct write_call {
	/* in: the write (data: the caller's, for the whole call) */
	uint64_t inode;
	uint32_t chunk, offset, length;
	const uint8_t *data;
	bool zeros;
	/* in: the crcs of blocks first_crc .. first_crc + crcs - 1, those
	 * that start inside the write, each over the write's bytes from the
	 * block's start to the block's end or the write's, whichever comes
	 * first (write_crcs, before the transaction) */
	uint32_t first_crc, crcs;
	uint32_t crc[INLINE_BLOCKS];
	/* out */
	struct kvc_chunk_record *rec; /* the caller's */
	bool done;          /* put inline; false: the chunk is a file's */
};

/* The call's crcs: what the blocks they cover hold after the write comes
 * from its bytes alone, whatever the chunk held (whether a block ends
 * where the write does depends on the chunk's length: call_crc). A write
 * ending past KVC_CHUNK_INLINE_LIMIT, which never stays inline, gets none
 * (so there are INLINE_BLOCKS at most); one that goes to a file after all
 * had its crcs computed for nothing (the file path computes its own). */
static void write_crcs(struct write_call *call)
{
	uint32_t end = call->offset + call->length;
	call->first_crc = (call->offset + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK;
	call->crcs = 0;
	for (uint32_t b = call->first_crc; end <= KVC_CHUNK_INLINE_LIMIT &&
	                                   b * KVC_CHUNK_BLOCK < end; b++) {
		const uint8_t *from = call->data + (b * KVC_CHUNK_BLOCK - call->offset);
		call->crc[call->crcs++] = kvc_crc32c(0, from, kvc_chunk_block_bytes(end, b));
	}
}

/* Block b's crc in a chunk of new_length bytes after the call, when the
 * call has it: the write gives the block all of its bytes. */
static bool call_crc(const struct write_call *call, uint32_t b, uint32_t new_length,
                     uint32_t *crc)
{
	uint32_t end = call->offset + call->length;
	if (b < call->first_crc || b - call->first_crc >= call->crcs ||
	    kvc_chunk_block_bytes(new_length, b) != kvc_chunk_block_bytes(end, b))
		return false;
	*crc = call->crc[b - call->first_crc];
	return true;
}

/* The first block the call changes in a chunk of old_length bytes (one
 * that ends before its offset gets zeros up to it). */
static uint32_t first_changed(const struct write_call *call, uint32_t old_length)
{
	return (call->offset < old_length ? call->offset : old_length) / KVC_CHUNK_BLOCK;
}

/* Make rec (the chunk's record, old: its bytes) the header of the record
 * after the call (length, block count; its crcs are merge_fill's). Returns
 * 0, or -EIO when a block the write only partly covers fails its crc. */
static int merge_check(struct kvc_chunk_record *rec, const uint8_t *old, const struct write_call *call)
{
	uint32_t old_length = rec->length, end = call->offset + call->length;
	uint32_t new_length = end > old_length ? end : old_length;
	uint32_t last = (end - 1) / KVC_CHUNK_BLOCK;
	for (uint32_t b = first_changed(call, old_length); b <= last && b < rec->block_count; b++) {
		uint32_t start = b * KVC_CHUNK_BLOCK;
		uint32_t block_end = start + kvc_chunk_block_bytes(new_length, b);
		if ((start < call->offset || block_end > end) && !block_ok(rec, old, old_length, b))
			return -EIO;
	}
	rec->length = new_length;
	rec->block_count = kvc_chunk_blocks(new_length);
	return 0;
}

/* Fill value (value_size(rec) bytes, rec from merge_check) with the new
 * record: the old bytes the write keeps (old_length of them at old, which
 * value must not overlap), zeros from the old end up to the write, the
 * write's bytes; the crcs of the blocks it changed (the call's where it
 * has them, computed here otherwise), then the sealed header. */
static void merge_fill(struct kvc_chunk_record *rec, uint8_t *value, const uint8_t *old,
                       uint32_t old_length, const struct write_call *call)
{
	uint8_t *bytes = value + KVC_CHUNK_RECORD_HEADER + rec->block_count * 4u;
	uint32_t end = call->offset + call->length;
	uint32_t head = call->offset < old_length ? call->offset : old_length;
	memcpy(bytes, old, head);
	memset(bytes + head, 0, call->offset - head);
	memcpy(bytes + call->offset, call->data, call->length);
	if (old_length > end)
		memcpy(bytes + end, old + end, old_length - end);
	for (uint32_t b = first_changed(call, old_length); b <= (end - 1) / KVC_CHUNK_BLOCK; b++)
		if (!call_crc(call, b, rec->length, &rec->block_crc[b]))
			rec->block_crc[b] = kvc_crc32c(0, bytes + b * KVC_CHUNK_BLOCK,
			                               kvc_chunk_block_bytes(rec->length, b));
	value_seal(rec, value);
}

static int write_in(void *owner, MDB_txn *txn, void *arg)
{
	struct kvc_chunk_store *store = owner;
	struct write_call *call = arg;
	struct kvc_chunk_record *rec = call->rec;
	uint8_t key[12];
	uint8_t *value = NULL; /* ours, for an existing chunk's new value */
	const uint8_t *old = NULL;
	call->done = false;
	kvc_chunk_key(key, call->inode, call->chunk);
	MDB_val k = {sizeof(key), key}, v;
	int found = mdb_get(txn, store->dbi, &k, &v);
	int rc = 0;
	if (found == MDB_NOTFOUND) { /* a new chunk: empty and inline */
		*rec = (struct kvc_chunk_record){.magic = KVC_CHUNK_RECORD_INLINE_MAGIC};
		old = (const uint8_t *)"";
	} else {
		rc = found ? kvc_lmdb_errno(found) : kvc_chunk_record_parse(&v, rec, &old);
	}
	/* A file-backed record (old NULL), zeros into a missing chunk, or a
	 * chunk that outgrows the limit: a file's (nothing done here). */
	uint32_t old_length = rec->length;
	uint32_t end = call->offset + call->length > old_length ? call->offset + call->length
	                                                         : old_length;
	if (rc < 0 || !old || (call->zeros && found == MDB_NOTFOUND) || end > store->inline_max)
		return rc;
	rc = merge_check(rec, old, call);
	if (rc == 0 && found == MDB_NOTFOUND) {
		/* A new chunk: its value is built in the space the put reserves
		 * in LMDB's pages, before any other change of txn can move it. */
		v = (MDB_val){value_size(rec), NULL};
		rc = kvc_lmdb_errno(mdb_put(txn, store->dbi, &k, &v, MDB_RESERVE));
		if (rc == 0)
			merge_fill(rec, v.mv_data, old, old_length, call);
	} else if (rc == 0) {
		/* An existing chunk: old points into LMDB's pages, which the put
		 * frees and may reuse at once, or rewrites in place (an overflow
		 * run or a leaf page this transaction already wrote), so a value
		 * reserved there could overlap the bytes it is built from. It is
		 * built in a buffer of its own, then copied by the put. */
		value = malloc(value_size(rec));
		rc = value ? 0 : -ENOMEM;
		if (rc == 0) {
			merge_fill(rec, value, old, old_length, call);
			v = (MDB_val){value_size(rec), value};
			rc = kvc_lmdb_errno(mdb_put(txn, store->dbi, &k, &v, 0));
		}
	}
	free(value);
	call->done = rc == 0;
	return rc;
}

int kvc_chunk_inline_write(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                           uint32_t offset, const uint8_t *data, uint32_t length, bool zeros,
                           struct kvc_chunk_record *rec)
{
	struct write_call call = {.inode = inode, .chunk = chunk, .offset = offset,
	                          .length = length, .data = data, .zeros = zeros, .rec = rec};
	write_crcs(&call); /* outside the group's transaction */
	int rc = kvc_lmdb_group_run(&store->group, write_in, &call);
	/* The index at its map size (the put's or the commit's): nothing was
	 * put, and the chunk goes to a file. */
	if (rc == -ENOSPC && !atomic_flag_test_and_set(&map_full_logged))
		kvc_log_warn("index of %s at its map size: small chunks go to files (chunk %u of "
		             "inode %" PRIu64 " first; logged once)", store->path, chunk, inode);
	return rc == -ENOSPC ? 0 : rc < 0 ? rc : call.done;
}

int kvc_chunk_inline_to_file(struct kvc_chunk_store *store, uint64_t inode, uint32_t chunk,
                             struct kvc_chunk_record *rec, const uint8_t *bytes)
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
	struct kvc_chunk_record rec;
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
