/*
 * meta_store_internal: what the parts of the meta store share, private to
 * them (meta_store.c: the environment, the records, the read paths and
 * the group commit; meta_names.c: names and links; meta_opens.c: open
 * sessions;
 * meta_sizes.c: setattr, extend and pending truncations; meta_xattrs.c:
 * an inode's extra records, symlink targets and xattrs; meta_keys.c and
 * meta_adopt.c: batches of names in one transaction).
 * The tables and their formats are in meta_store.h.
 *
 * Every helper here works inside the caller's LMDB transaction and
 * returns 0 or -errno (-ENOENT for a missing record, -EIO for a corrupt
 * one); none commits.
 */
#ifndef KVC_META_STORE_INTERNAL_H
#define KVC_META_STORE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/lmdb_checkpoint.h"
#include "core/lmdb_group.h"
#include "meta/meta_store.h"
#include "meta/open_table.h"

/* The group commit of the hot writes (core/lmdb_group.h). fn runs inside
 * a write transaction shared with the calls waiting at the same time; it
 * must have no effect outside it but its arg's outputs (it may run twice).
 * kvc_meta_group_run returns its answer or the commit's. */
typedef int (*kvc_meta_group_fn)(struct kvc_meta_store *s, MDB_txn *txn, void *arg);
int kvc_meta_group_run(struct kvc_meta_store *s, kvc_meta_group_fn fn, void *arg);

struct kvc_meta_store {
	MDB_env *env;
	struct kvc_lmdb_checkpoint *checkpoint;
	MDB_dbi inodes, dirents, gc, state, opens, orphans, clients, symlinks, xattrs, dropped,
	        truncates, grants;
	struct kvc_layout default_layout;
	struct kvc_lmdb_group group;
	struct kvc_meta_open_table *mem_opens; /* plain OPENs' sessions (open_table.h) */
};

/* A directory entry's value: the child and its type. */
struct kvc_meta_dirent {
	uint64_t ino;
	uint32_t mode;
	uint32_t reserved;
};

#define KVC_META_DIRENT_KEY_MAX (8 + KVC_WIRE_MAX_NAME)

int64_t kvc_meta_now_ns(void);
void kvc_meta_be64(uint8_t *out, uint64_t v);
uint64_t kvc_meta_from_be64(const uint8_t *in);
int kvc_meta_begin(struct kvc_meta_store *s, bool write, MDB_txn **txn);

int kvc_meta_inode_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       struct kvc_inode_record *rec);
int kvc_meta_inode_put(struct kvc_meta_store *s, MDB_txn *txn,
                       const struct kvc_inode_record *rec);
/* The directory `parent`, checked to be one (-ENOTDIR). */
int kvc_meta_parent_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        struct kvc_inode_record *rec);
size_t kvc_meta_dirent_key(uint8_t *key, uint64_t parent, const char *name, uint32_t len);
int kvc_meta_dirent_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        const char *name, uint32_t len, struct kvc_meta_dirent *out);
int kvc_meta_state_get(struct kvc_meta_store *s, MDB_txn *txn, const char *name, void *out,
                       size_t size);
int kvc_meta_state_put(struct kvc_meta_store *s, MDB_txn *txn, const char *name,
                       const void *value, size_t size);

/* An inode lost one name (unlink, or a rename over it). Directories and
 * inodes with no name left go: a regular file to the gc queue, or, while
 * some client has it open, to the orphans (nlink 0, data kept); others
 * keep their remaining names with nlink - 1 and a new ctime. */
int kvc_meta_inode_unlinked(struct kvc_meta_store *s, MDB_txn *txn,
                            const struct kvc_inode_record *rec);
/* meta_names.c: remove the name (dir, name) of rec as UNLINK and RMDIR
 * do: the entry goes, rec follows kvc_meta_inode_unlinked, and dir
 * (updated in place) gets mtime and ctime now, nlink - 1 when rec is a
 * directory, and is written. Checks (rec's type, an empty directory) are
 * the caller's; the caller's rec is not updated. Returns 0 or -errno. */
int kvc_meta_name_remove(struct kvc_meta_store *s, MDB_txn *txn, struct kvc_inode_record *dir,
                         const char *name, uint32_t len, const struct kvc_inode_record *rec);

/* meta_opens.c: 1 when some client has ino open (in the store or in
 * memory), 0 when none. */
int kvc_meta_has_opens(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino);
/* The same, as the decision of a write transaction that the file goes
 * when it is 0: nobody may open it in memory until txn ends (open_table.h). */
int kvc_meta_doom_unless_open(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino);
/* meta_names.c: directory entries, and a new inode record under parent
 * (the next inode id; regular files and directories placed on the next
 * first target with the parent's layout; times now). */
int kvc_meta_dirent_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        const char *name, uint32_t len, uint64_t ino, uint32_t mode);
int kvc_meta_dirent_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        const char *name, uint32_t len);
int kvc_meta_new_inode(struct kvc_meta_store *s, MDB_txn *txn,
                       const struct kvc_inode_record *parent, uint32_t mode, uint32_t uid,
                       uint32_t gid, uint64_t rdev, struct kvc_inode_record *rec);
/* 1 when client was dropped and has not rejoined since (meta_opens.c),
 * 0 when not, -errno. */
int kvc_meta_dropped_has(struct kvc_meta_store *s, MDB_txn *txn,
                         const uint8_t client[KVC_META_CLIENT_ID]);
/* meta_opens.c, in txn: record the open session (ino, client); whether
 * it exists (1, 0 or -errno); end it (an orphan nobody has open any more
 * then goes to the gc queue); mark ino an orphan (a nameless file kept
 * while open: KVC_ORPHAN_REMOVED, a file whose last name went;
 * KVC_ORPHAN_TEMP, a ring key's temp, made nameless) or not (0); which
 * kind of orphan ino is (0: none, or -errno). */
#define KVC_ORPHAN_REMOVED 1
#define KVC_ORPHAN_TEMP 2
int kvc_meta_session_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const uint8_t client[KVC_META_CLIENT_ID]);
int kvc_meta_session_has(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const uint8_t client[KVC_META_CLIENT_ID]);
int kvc_meta_session_end(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const uint8_t client[KVC_META_CLIENT_ID]);
int kvc_meta_orphan_mark(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, uint8_t kind);
int kvc_meta_orphan_kind(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino);

/* meta_grants.c: inode numbers granted to clients (INO_GRANT). put
 * records a new grant (-ESTALE while the client is dropped and has not
 * rejoined: a grant it could not hear of would be lost; -EBUSY when it
 * holds KVC_META_MAX_GRANTS, meta_adopt.h, already); check: 0 when
 * client may enter ino (granted to it, not entered yet), else -ESTALE;
 * use marks ino entered (the grant goes with its last number). */
int kvc_meta_grant_put(struct kvc_meta_store *s, MDB_txn *txn,
                       const uint8_t client[KVC_META_CLIENT_ID], uint64_t first, uint32_t count);
int kvc_meta_grant_check(struct kvc_meta_store *s, MDB_txn *txn,
                         const uint8_t client[KVC_META_CLIENT_ID], uint64_t ino);
int kvc_meta_grant_use(struct kvc_meta_store *s, MDB_txn *txn,
                       const uint8_t client[KVC_META_CLIENT_ID], uint64_t ino);
/* ADOPT refused the record of attr->ino (per record): when the number is
 * the client's and not entered, the sender gives the file up, so it is
 * settled (its bit set) and queued in gc by attr's layout (every chain
 * when that is not a valid one). 0 or -errno. */
int kvc_meta_grant_refused(struct kvc_meta_store *s, MDB_txn *txn,
                           const uint8_t client[KVC_META_CLIENT_ID],
                           const struct kvc_attr *attr);
/* Drop every grant of client, queueing each number not entered in gc
 * (*queued: how many). Returns the grants dropped, or -errno. */
int kvc_meta_grants_reclaim(struct kvc_meta_store *s, MDB_txn *txn,
                            const uint8_t client[KVC_META_CLIENT_ID], uint64_t *queued);
/* 1 when ino is an inode, in the gc queue or an orphan; 0 when none. */
int kvc_meta_ino_known(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino);

/* meta_sizes.c: drop ino's pending cut (its inode goes). */
int kvc_meta_truncate_forget(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino);

/* meta_xattrs.c: an inode's extra records. */
int kvc_meta_symlink_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const char *target, uint32_t len);
/* Remove the symlink target and every xattr of ino (the inode is gone). */
int kvc_meta_extras_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino);

#endif
