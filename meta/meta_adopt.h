/*
 * meta_adopt: the namespace side of creates made ahead (KVC_MSG_INO_GRANT
 * and KVC_MSG_ADOPT, src/core/wire.h; kvc-fuse's side is
 * fuse/early_creates.h). A kvc-fuse reserves inode numbers (a grant),
 * answers the kernel's CREATE with one of them, writes the file's chunks,
 * and later enters many such files into the store with one message, in
 * one LMDB transaction (the group commit, meta_store_internal.h). The
 * removals it answered itself go the same way (KVC_MSG_REMOVE_MANY).
 *
 * Invariants:
 * - state "next_ino" is above every inode number given out, to an inode
 *   made here (kvc_meta_new_inode) or granted: a grant moves it up by its
 *   count in one transaction, so grants never overlap each other or the
 *   numbers kvc-meta takes itself, and a number is never given out twice.
 * - Grants belong to a client (meta_grants.c): an adopted record's ino
 *   was granted to the ADOPT's client and not entered before (-ESTALE
 *   else: another client's number, one entered already, or one of grants
 *   reclaimed when the client returned them or was declared gone), is at
 *   least 2, has no inode record, and is in neither the gc queue nor the
 *   orphans: a client can enter no number that is in use, was in use, or
 *   whose chunks are still to reclaim.
 * - An adopted file is a regular file (mode S_IFREG | 0..0777), nlink 1,
 *   rdev 0, with the size, times, owner and layout sent; its layout is a
 *   valid one (kvc_layout_check), of any chunk size and over as many
 *   chains as the sender's routing table has (newer than ours, maybe).
 * - A REMOVE_MANY record (the removals a kvc-fuse answered itself) takes
 *   (parent, name) away only while that name names inode `ino` and it is
 *   no directory, as UNLINK would (kvc_meta_name_remove): a name that went
 *   or names another inode now (a change ordered after the removal) is
 *   left as it is.
 * - Records are parsed and bounds-checked before the transaction starts.
 *   A per-record failure (-EINVAL, -ENAMETOOLONG, -ENOENT, -ENOTDIR,
 *   -EEXIST, -ESTALE, and REMOVE_MANY's -EISDIR) changes nothing for that record,
 *   and the others go on; any other failure (-EIO, -ENOSPC, -ENOMEM)
 *   aborts the whole transaction and answers the message.
 */
#ifndef KVC_META_ADOPT_H
#define KVC_META_ADOPT_H

#include <stdint.h>

#include "core/wire.h"
#include "meta/meta_store.h"

/* One parsed ADOPT record: its fixed part copied out (records follow
 * names, so they are unaligned in the body), its name borrowed from the
 * body (rec.name_len bytes, not checked yet). */
struct kvc_meta_adopt_record {
	struct kvc_msg_adopt_record rec;
	const char *name;
};

/* INO_GRANT: reserve count (1 .. KVC_WIRE_MAX_GRANT) inode numbers for
 * client in one transaction; out gets the first, the count and the chain
 * count new files are placed over now. Returns 0, -EINVAL (count),
 * -ESTALE (the client was dropped and has not rejoined), -EBUSY (it holds
 * KVC_META_MAX_GRANTS grants: what a return or a drop reclaims in one
 * transaction stays bounded), -ENOSPC (numbers or database exhausted),
 * -EIO. */
#define KVC_META_MAX_GRANTS 16
int kvc_meta_adopt_grant(struct kvc_meta_store *store, const uint8_t client[KVC_WIRE_CLIENT_ID],
                         uint32_t count, struct kvc_msg_ino_grant_reply *out);

/* Parse the m->count (1 .. KVC_WIRE_MAX_KEYS) records of an ADOPT body
 * (in, len bytes after kvc_msg_adopt) into recs (m->count entries).
 * Returns 0, or -EINVAL unless every record and name lies in the body and
 * the last name ends exactly at its end (a name_len of 0 or
 * KVC_WIRE_MAX_NAME + 1 parses: the record then fails alone). */
int kvc_meta_adopt_parse(const struct kvc_msg_adopt *m, const uint8_t *in, uint32_t len,
                         struct kvc_meta_adopt_record *recs);

/* Enter the m->count parsed records in one transaction. out (m->count
 * entries) gets each record's rc and the attributes entered; replaced (may
 * be NULL; m->count entries) gets the inode whose name a record replaced,
 * 0 when none. Returns 0 (each record's result in out), -EINVAL (count),
 * or the whole transaction's -errno (-EIO, -ENOSPC, -ENOMEM). */
int kvc_meta_adopt_run(struct kvc_meta_store *store, const struct kvc_msg_adopt *m,
                       const struct kvc_meta_adopt_record *recs,
                       struct kvc_msg_key_result *out, uint64_t *replaced);

/* One parsed REMOVE_MANY record: its fixed part copied out, its name
 * borrowed from the body (rec.name_len bytes, not checked yet). */
struct kvc_meta_remove_record {
	struct kvc_msg_remove_record rec;
	const char *name;
};

/* Parse the m->count (1 .. KVC_WIRE_MAX_KEYS) records of a REMOVE_MANY
 * body (in, len bytes after kvc_msg_remove_many) into recs (m->count
 * entries). Returns 0, or -EINVAL when m->reserved is not 0 or unless
 * every record and name lies in the body and the last name ends exactly
 * at its end (a name_len of 0 or KVC_WIRE_MAX_NAME + 1, or a record's
 * reserved word not 0, parses: the record then fails alone). */
int kvc_meta_remove_many_parse(const struct kvc_msg_remove_many *m, const uint8_t *in,
                               uint32_t len, struct kvc_meta_remove_record *recs);

/* Remove the m->count parsed records' names in one transaction. out
 * (m->count entries) gets each record's rc (0, -EINVAL, -ENAMETOOLONG,
 * -ENOENT: no such parent or name, or the name names another inode,
 * -ENOTDIR: the parent is none, -EISDIR) and, for a removal, the inode's
 * attributes after it (nlink lowered; 0 when it went: to the gc queue, or
 * an orphan while open). Returns 0 (each record's result in out), -EINVAL
 * (count), or the whole transaction's -errno (-EIO, -ENOSPC, -ENOMEM). */
int kvc_meta_remove_many_run(struct kvc_meta_store *store, const struct kvc_msg_remove_many *m,
                             const struct kvc_meta_remove_record *recs,
                             struct kvc_msg_key_result *out);

#endif
