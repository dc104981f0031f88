/*
 * meta_store: the kvcfs namespace in LMDB: directories, files, their
 * attributes and layouts, and the queue of removed files whose chunks the
 * collector must reclaim. Every mutation is one LMDB write transaction,
 * committed before the function returns, so a reply never runs ahead of
 * the database; operations that touch several records (rename, unlink)
 * are atomic.
 *
 * On disk (LMDB environment in the meta data directory, named databases;
 * integers in keys big-endian for ordering, values little-endian):
 *
 *   inodes   key ino (u64 BE)
 *            value struct kvc_inode_record (below, 96 bytes; records
 *            written before device numbers existed are its first 88
 *            bytes and read with rdev 0)
 *   dirents  key parent ino (u64 BE) + name bytes (1..255, no NUL)
 *            value child ino (u64 LE), child mode (u32 LE), 0 (u32)
 *   gc       key ino (u64 BE)
 *            value struct kvc_layout (16 bytes): a removed file whose
 *            chunks are still on the storage servers
 *   opens    key ino (u64 BE) + client id (16 bytes), value 1 byte: the
 *            client (a kvc-fuse) has the file open
 *   clients  key client id + ino (u64 BE), value 1 byte: the same
 *            sessions by client (listing clients, dropping one)
 *   orphans  key ino (u64 BE), value 1 byte: a file removed while open
 *            somewhere; its inode record stays (nlink 0) and it goes to gc
 *            when the last client closes it or is declared gone
 *            (opens, clients and orphans came after the first release
 *            without a format change: older stores get them empty)
 *   dropped  key client id (16 bytes), value struct kvc_meta_dropped (16
 *            bytes): a client whose sessions kvc-meta dropped (it was
 *            silent past the timeout) and that has not rejoined since; its
 *            RENEW gets ESTALE until it has opened its files again (came
 *            after the first release without a format change)
 *   truncates key ino (u64 BE), value u64 size: a shrinking setattr
 *            committed this size and the chunks beyond it are still to be
 *            cut on the storage servers; until then the file does not
 *            grow (meta_sizes.c; came without a format change)
 *   grants   key client id (16 bytes) + first ino (u64 BE), value the
 *            count, the numbers entered, a bit per number: inode numbers
 *            a client may still enter (meta_grants.c; came without a
 *            format change)
 *   symlinks key ino (u64 BE), value the target (1..4095 bytes, no NUL)
 *   xattrs   key ino (u64 BE) + name ("user." ..., up to 255 bytes),
 *            value the attribute's bytes (0..65536)
 *            (symlinks and xattrs came without a format change too)
 *   state    "format"      u32 KVC_META_FORMAT
 *            "next_ino"    u64: the next inode id to give out; every id
 *                          below it was given out once, to an inode made
 *                          here or in a grant (meta_adopt.h), so some
 *                          never have an inode
 *            "next_target" u32: round-robin start for the next file
 *   After a reboot (the newest checkpoint another boot's) "next_ino" jumps
 *   by KVC_META_INO_REBOOT_GAP before anything else, made durable at
 *   once: a machine crash takes the store back to its last checkpoint,
 *   and numbers given out after it (to files whose chunks may be on the
 *   storage servers, in grants a surviving client still holds) must not
 *   be given out again, or a new file would read a lost one's bytes.
 *
 * Inode 1 is the root directory. Directory nlink is 2 + subdirectories;
 * any other inode's nlink is its number of names (hard links). Regular
 * files and directories have a layout (a directory's is what its new
 * files inherit, first_chain aside); symlinks, fifos, sockets and
 * devices have none (zero), devices have rdev, a symlink's size is its
 * target's length.
 *
 * The code: meta_store.c (environment, records, reads), meta_names.c
 * (names and links), meta_opens.c (open sessions), meta_sizes.c
 * (setattr, extend, pending truncations), meta_xattrs.c (symlink
 * targets, xattrs), meta_keys.c and meta_adopt.c (batches of names: ring
 * keys, files made ahead by a kvc-fuse); their shared helpers in
 * meta_store_internal.h.
 *
 * Durability: the environment runs with MDB_NOSYNC, so a process crash
 * (kill -9) loses no committed transaction, and every kvc_meta_store_sync
 * is a checkpoint (core/lmdb_checkpoint.h): everything committed before it
 * is durable, and a machine crash goes back to the last checkpoint, never
 * to a corrupt file. kvc-meta takes one every sync_interval_ms and for
 * every fsync; the file `checkpoint` beside the data file records it.
 *
 * Thread-safe: LMDB serializes write transactions; reads run in parallel.
 */
#ifndef KVC_META_STORE_H
#define KVC_META_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

#define KVC_META_FORMAT 1
#define KVC_META_ROOT 1
/* More numbers than one sync interval can give out (meta_store.h above). */
#define KVC_META_INO_REBOOT_GAP ((uint64_t)1 << 32)
#define KVC_META_CLIENT_ID 16

struct kvc_meta_store;

struct kvc_inode_record {
	uint32_t magic; /* KVC_INODE_MAGIC */
	uint32_t reserved;
	uint64_t parent; /* directories: their parent, for cycle checks */
	struct kvc_attr attr;
};
_Static_assert(sizeof(struct kvc_inode_record) == 96, "");
#define KVC_INODE_MAGIC 0x444f4e49u /* "INOD" */
#define KVC_INODE_RECORD_V1_SIZE 88 /* before rdev */
#define KVC_META_MAX_LINKS 65000u   /* names of one file; subdirectories of one directory */
#define KVC_META_MAX_XATTR_BYTES (1u << 20) /* values of one inode's xattrs */

/* Called by readdir for each entry; return non-zero to stop early. */
typedef int (*kvc_meta_dirent_fn)(void *arg, const char *name, uint32_t name_len,
                                  const struct kvc_attr *attr);

/* Open (creating with a root directory when new) the store in dir.
 * default_layout: chunk_size and stripe for the root; chain_count: the
 * cluster's chain table size now. Returns 0, -EINVAL (another format),
 * or -errno. */
int kvc_meta_store_open(const char *dir, const struct kvc_layout *default_layout,
                        struct kvc_meta_store **out);
void kvc_meta_store_close(struct kvc_meta_store *store);
/* The routing table grew to count chains: new files stripe over them
 * (a smaller count is ignored: chains are never taken away). */
void kvc_meta_store_set_chain_count(struct kvc_meta_store *store, uint32_t count);
/* A checkpoint: every transaction committed before the call is durable
 * when it returns 0 (-EIO otherwise). Concurrent callers share one. */
int kvc_meta_store_sync(struct kvc_meta_store *store);

/* Each returns 0 or -errno: -ENOENT (no such entry or inode), -ENOTDIR
 * (parent is not a directory), -EEXIST, -EISDIR, -ENOTEMPTY, -EINVAL
 * (bad name, rename into own subtree), -ENAMETOOLONG, -ENOSPC (database
 * full), -EIO (corrupt record). */
int kvc_meta_store_lookup(struct kvc_meta_store *store, uint64_t parent,
                          const char *name, uint32_t name_len, struct kvc_attr *attr);
int kvc_meta_store_getattr(struct kvc_meta_store *store, uint64_t ino,
                           struct kvc_attr *attr);
/* Create a regular file (mode's type bits are forced to S_IFREG). Without
 * `exclusive`, an existing regular file is returned as is. */
int kvc_meta_store_create(struct kvc_meta_store *store, uint64_t parent,
                          const char *name, uint32_t name_len, uint32_t mode,
                          uint32_t uid, uint32_t gid, bool exclusive,
                          struct kvc_attr *attr);
/* create, and when it makes the file and client is not NULL, the open
 * session (client, ino) in the same transaction; *created (may be NULL)
 * says whether it made the file (an existing one is returned unopened);
 * *parent_attr (may be NULL) gets the parent's attributes after it. */
int kvc_meta_store_create_open(struct kvc_meta_store *store, uint64_t parent,
                               const char *name, uint32_t name_len, uint32_t mode,
                               uint32_t uid, uint32_t gid, bool exclusive,
                               const uint8_t *client, struct kvc_attr *attr, bool *created,
                               struct kvc_attr *parent_attr);
int kvc_meta_store_mkdir(struct kvc_meta_store *store, uint64_t parent,
                         const char *name, uint32_t name_len, uint32_t mode,
                         uint32_t uid, uint32_t gid, struct kvc_attr *attr);
/* mknod(2): a regular file (type 0 or S_IFREG), fifo, socket, or
 * character or block device (rdev); -EINVAL for another type. */
int kvc_meta_store_mknod(struct kvc_meta_store *store, uint64_t parent, const char *name,
                         uint32_t name_len, uint32_t mode, uint64_t rdev, uint32_t uid,
                         uint32_t gid, struct kvc_attr *attr);
/* A symlink to target (1..KVC_WIRE_MAX_SYMLINK bytes, else -EINVAL or
 * -ENAMETOOLONG). */
int kvc_meta_store_symlink(struct kvc_meta_store *store, uint64_t parent, const char *name,
                           uint32_t name_len, const char *target, uint32_t target_len,
                           uint32_t uid, uint32_t gid, struct kvc_attr *attr);
/* The target of symlink ino into out: its length, -EINVAL (not a
 * symlink), -ERANGE (over cap). */
int kvc_meta_store_readlink(struct kvc_meta_store *store, uint64_t ino, char *out,
                            uint32_t cap);
/* A new name for ino: -EPERM (a directory), -EMLINK (KVC_META_MAX_LINKS
 * names), -EEXIST, -ENOENT (ino has no name left). */
int kvc_meta_store_link(struct kvc_meta_store *store, uint64_t ino, uint64_t new_parent,
                        const char *name, uint32_t name_len, struct kvc_attr *attr);
/* Remove one name; the inode goes with its last (see meta_names.c).
 * remove_name: a directory's (rmdir) or another's (unlink), with
 * *parent_attr set to the parent's attributes after it and *removed to
 * the inode the name had (either may be NULL). */
int kvc_meta_store_remove_name(struct kvc_meta_store *store, uint64_t parent,
                               const char *name, uint32_t name_len, bool dir,
                               struct kvc_attr *parent_attr, uint64_t *removed);
int kvc_meta_store_unlink(struct kvc_meta_store *store, uint64_t parent,
                          const char *name, uint32_t name_len);
int kvc_meta_store_rmdir(struct kvc_meta_store *store, uint64_t parent,
                         const char *name, uint32_t name_len);
int kvc_meta_store_rename(struct kvc_meta_store *store, uint64_t parent,
                          const char *name, uint32_t name_len, uint64_t new_parent,
                          const char *new_name, uint32_t new_name_len, uint32_t flags);
/* List entries of directory ino after the name `after` (after_len 0: from
 * the start), at most max. Returns the count; *more tells if more remain. */
int kvc_meta_store_readdir(struct kvc_meta_store *store, uint64_t ino,
                           const char *after, uint32_t after_len, uint32_t max,
                           kvc_meta_dirent_fn fn, void *arg, bool *more);
/* setattr: a smaller size also records the cut of the chunks beyond it
 * (truncates). A larger size (setattr or extend) while a cut is pending:
 * -EAGAIN: finish the cut (kvc_meta_collector_truncate), then ask again. */
int kvc_meta_store_setattr(struct kvc_meta_store *store,
                           const struct kvc_msg_setattr *request, struct kvc_attr *attr);
/* A commit of written data: size = max(size, new_size), mtime = now
 * (also when the size stays: an overwrite in place). */
int kvc_meta_store_extend(struct kvc_meta_store *store, uint64_t ino, uint64_t size,
                          struct kvc_attr *attr);
/* Pending cuts: 1 and the size ino's chunks must be cut to, 0 when none,
 * -errno. done: the chunks beyond size are cut: drop the record if it
 * still names size (a deeper cut recorded since stays). list: up to max
 * inodes with a pending cut. */
int kvc_meta_store_truncate_pending(struct kvc_meta_store *store, uint64_t ino,
                                    uint64_t *size);
int kvc_meta_store_truncate_done(struct kvc_meta_store *store, uint64_t ino, uint64_t size);
int kvc_meta_store_truncates_list(struct kvc_meta_store *store, uint64_t *inos, int max);
int kvc_meta_store_count_inodes(struct kvc_meta_store *store, uint64_t *inodes);

/* user.* extended attributes of regular files and directories (see
 * meta_xattrs.c for the rules). set: flags KVC_XATTR_CREATE (-EEXIST) or
 * KVC_XATTR_REPLACE (-ENODATA); -EOPNOTSUPP (another namespace), -EPERM
 * (another file type), -E2BIG, -ENOSPC (the inode's limits). get: the
 * value's length (copied to out unless out is NULL), -ENODATA, -ERANGE
 * (over cap). list: the length of the names, each NUL-terminated (copied
 * unless out is NULL), -ERANGE. remove: -ENODATA. */
int kvc_meta_store_setxattr(struct kvc_meta_store *store, uint64_t ino, const char *name,
                            uint32_t name_len, const void *value, uint32_t value_len,
                            uint32_t flags);
int kvc_meta_store_getxattr(struct kvc_meta_store *store, uint64_t ino, const char *name,
                            uint32_t name_len, void *out, uint32_t cap);
int kvc_meta_store_listxattr(struct kvc_meta_store *store, uint64_t ino, char *out,
                             uint32_t cap);
int kvc_meta_store_removexattr(struct kvc_meta_store *store, uint64_t ino, const char *name,
                               uint32_t name_len);

/* Table sizes, for statfs and kvc-admin status. */
struct kvc_meta_counts {
	uint64_t inodes;        /* files and directories, orphans included */
	uint64_t open_sessions; /* (file, client) pairs open */
	uint64_t orphans;       /* removed while open somewhere: kept until closed */
	uint64_t gc_pending;    /* removed files whose chunks are still to reclaim */
	uint64_t grants;        /* inode-number grants clients hold */
};
int kvc_meta_store_counts(struct kvc_meta_store *store, struct kvc_meta_counts *out);

/* The collector's queue: up to max removed files (ino, layout), in inode
 * order from the first; _after: from the first inode above `after` (the
 * collector goes on past entries that keep failing). */
int kvc_meta_store_gc_list(struct kvc_meta_store *store, uint64_t *inos,
                           struct kvc_layout *layouts, int max);
int kvc_meta_store_gc_list_after(struct kvc_meta_store *store, uint64_t after, uint64_t *inos,
                                 struct kvc_layout *layouts, int max);
int kvc_meta_store_gc_done(struct kvc_meta_store *store, uint64_t ino);

/* Open sessions. A client (one kvc-fuse, by a random 16-byte id) records
 * that it has a file open; removing the file's last name then keeps it as
 * an orphan until every client closed it or was dropped (its sessions
 * gone, as when it stopped renewing). open_session returns the attributes
 * (-ENOENT when the inode is gone); directories get no session. */
int kvc_meta_store_open_session(struct kvc_meta_store *store, uint64_t ino,
                                const uint8_t client[KVC_META_CLIENT_ID], struct kvc_attr *attr);
int kvc_meta_store_close_session(struct kvc_meta_store *store, uint64_t ino,
                                 const uint8_t client[KVC_META_CLIENT_ID]);
/* close_session of count files in one transaction (all or none). */
int kvc_meta_store_close_sessions(struct kvc_meta_store *store, const uint64_t *inos,
                                  uint32_t count, const uint8_t client[KVC_META_CLIENT_ID]);
/* Drop every session and every grant of client (the numbers it never
 * entered are reclaimed: *reclaimed, may be NULL); returns the sessions
 * and grants dropped. A client that had any is recorded as dropped in the
 * same transaction (its record's drops counted up), so it hears of it
 * however long it stays away and whatever restarts in between. */
int kvc_meta_store_drop_client(struct kvc_meta_store *store,
                               const uint8_t client[KVC_META_CLIENT_ID], uint64_t *reclaimed);
/* A client stops making files ahead (INO_RETURN): the runs in ranges
 * (n of them; count 0: none) it never used leave its grants, and each
 * other number it holds and never entered is reclaimed (*reclaimed). */
int kvc_meta_store_grants_return(struct kvc_meta_store *store,
                                 const uint8_t client[KVC_META_CLIENT_ID],
                                 const struct kvc_msg_ino_range *ranges, uint32_t n,
                                 uint64_t *reclaimed);

/* A dropped client's record (table `dropped`). */
struct kvc_meta_dropped {
	int64_t dropped_ns; /* wall clock of the last drop, for administrators */
	uint32_t drops;     /* times dropped since it last rejoined: names the drop */
	uint32_t files;     /* sessions and grants the last drop ended */
};
_Static_assert(sizeof(struct kvc_meta_dropped) == 16, "");

/* 1 and the record when client was dropped and has not rejoined, 0 when
 * not, or -errno. */
int kvc_meta_store_client_dropped(struct kvc_meta_store *store,
                                  const uint8_t client[KVC_META_CLIENT_ID],
                                  struct kvc_meta_dropped *out);
/* The client has opened its files again after hearing of the drop named
 * `drops`: forget the record. 0 (also when there is none), -ESTALE when
 * the record names another drop (dropped again since it heard). */
int kvc_meta_store_client_rejoin(struct kvc_meta_store *store,
                                 const uint8_t client[KVC_META_CLIENT_ID], uint32_t drops);
/* The distinct clients holding sessions or grants (up to max). */
int kvc_meta_store_session_clients(struct kvc_meta_store *store,
                                   uint8_t (*out)[KVC_META_CLIENT_ID], int max);

/* A plain open_session is kept in memory (meta/open_table.h): after a
 * start, the sessions of the process before are not known until the
 * clients open their files again. Until hold_ms from now every file counts
 * as open (nothing removed is reclaimed); kvc-meta holds for its clients'
 * timeout and a margin. holding_opens: whether the hold is still on. */
void kvc_meta_store_hold_opens(struct kvc_meta_store *store, uint64_t hold_ms);
bool kvc_meta_store_holding_opens(struct kvc_meta_store *store);
/* Once the hold is over: every orphan nobody has open goes to gc (the
 * files removed while held, or whose clients never came back). Returns
 * how many, -EAGAIN while holding, or -errno. */
int kvc_meta_store_settle_orphans(struct kvc_meta_store *store);

#endif
