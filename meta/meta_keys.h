/*
 * meta_keys: the namespace side of USRBIO ring keys (KVC_MSG_KEYS_*,
 * src/core/wire.h): many names of one directory looked up, created,
 * published (size set and named) or removed in one LMDB transaction,
 * each with its own result. Keys are regular files like any other: FUSE
 * sees them, and they go through the gc queue and the orphans like files
 * removed through the mount. A put's temp is made nameless, an orphan its
 * kvc-fuse has open, so a kvc-fuse that dies mid-put leaves nothing
 * behind: its sessions are dropped, and its temps reclaimed with them.
 *
 * Invariants: records are parsed and checked (count, lengths, body end)
 * before the transaction starts; a per-name failure (-ENOENT, -EEXIST,
 * -EISDIR, -EINVAL, -ENAMETOOLONG) changes nothing for that name and
 * nothing else; any other failure aborts the whole transaction and
 * answers the message.
 */
#ifndef KVC_META_KEYS_H
#define KVC_META_KEYS_H

#include <stdint.h>

#include "core/wire.h"
#include "meta/meta_store.h"

/* One parsed record: borrowed from the message body. */
struct kvc_meta_key_record {
	const char *name;
	uint32_t name_len;
	uint64_t temp; /* PUBLISH: the temp's inode */
	uint64_t size; /* PUBLISH */
};

/* Parse the m->count records of a KEYS_* message (type) into recs; -EINVAL
 * unless they end exactly at the body's end (names are not checked). */
int kvc_meta_keys_parse(uint16_t type, const struct kvc_msg_keys *m, const uint8_t *in,
                        uint32_t len, struct kvc_meta_key_record *recs);

/* Run one KEYS_* message (type) with its header m and the records that
 * follow it (len bytes); out holds m->count results. Returns 0 (each
 * name's result in out), -EINVAL (malformed records or count), or the
 * whole transaction's -errno. */
int kvc_meta_keys_run(struct kvc_meta_store *s, uint16_t type, const struct kvc_msg_keys *m,
                      const uint8_t *records, uint32_t len, struct kvc_msg_key_result *out);

#endif
