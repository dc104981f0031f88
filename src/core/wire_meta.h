/*
 * wire_meta: the bodies of kvc-meta's namespace messages (LOOKUP ..
 * INO_RETURN, the ring keys' KEYS_*, STATFS): what each request carries
 * after its fixed struct and what its reply holds. Part of core/wire.h,
 * which includes it after the common structs (kvc_layout, kvc_attr);
 * include that, not this. docs/protocol.md describes every message.
 */
#ifndef KVC_WIRE_META_H
#define KVC_WIRE_META_H

#ifndef KVC_WIRE_H
#error "include core/wire.h"
#endif

/* LOOKUP, UNLINK, RMDIR: (parent, name). Reply to LOOKUP: kvc_attr; to
 * UNLINK and RMDIR: the parent's kvc_attr after the removal. */
struct kvc_msg_name {
	uint64_t parent;
	uint32_t name_len;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_name) == 16, "");

/* GETATTR: ino. Reply: kvc_attr. */
struct kvc_msg_ino {
	uint64_t ino;
};

/* OPEN (reply kvc_attr) and CLOSE (empty) of a file by a client: while
 * any client has it open, removing its last name keeps its data. RENEW:
 * the client is alive; its `ino` carries flags instead: 0, or
 * KVC_RENEW_REJOIN once a client told ESTALE (its sessions were dropped)
 * has opened its files again. */
#define KVC_WIRE_CLIENT_ID 16
struct kvc_msg_session {
	uint64_t ino;
	uint8_t client[KVC_WIRE_CLIENT_ID];
};
#define KVC_RENEW_REJOIN 1u

/* CREATE, MKDIR, MKNOD: followed by the name. Reply: kvc_attr. CREATE
 * makes a regular file (mode's type bits ignored), MKDIR a directory,
 * MKNOD the type mode names (regular, fifo, socket, character or block
 * device with rdev). */
struct kvc_msg_create {
	uint64_t parent;
	uint32_t name_len;
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint32_t flags; /* KVC_CREATE_EXCL (CREATE only) */
	uint32_t reserved;
	uint64_t rdev; /* MKNOD of a device */
};
_Static_assert(sizeof(struct kvc_msg_create) == 40, "");
#define KVC_CREATE_EXCL 1u
/* CREATE only: the client (KVC_WIRE_CLIENT_ID bytes after the name) opens
 * the file in the same transaction (an open session, as OPEN), but only a
 * file this CREATE made; the reply is kvc_attr then kvc_msg_create_reply,
 * whose flags say whether it did (KVC_CREATED: then the session is open;
 * otherwise the file existed and the client opens it with OPEN), then the
 * parent's kvc_attr after the create. */
#define KVC_CREATE_OPEN 2u
/* CREATE, MKDIR, MKNOD: gid is the caller's; kvc-meta puts the parent's
 * group instead when the parent is setgid (and, for MKDIR, the setgid
 * bit), as local filesystems do, in the same transaction. */
#define KVC_CREATE_PARENT_GID 4u
struct kvc_msg_create_reply {
	uint32_t flags; /* KVC_CREATED */
	uint32_t reserved;
};
#define KVC_CREATED 1u

/* CLOSE_MANY: CLOSE of count (1 .. KVC_WIRE_MAX_CLOSES) files of one
 * client in one transaction; followed by count u64 inode numbers. Reply:
 * empty (a file without a session of the client is no error). */
#define KVC_WIRE_MAX_CLOSES 1024
struct kvc_msg_close_many {
	uint8_t client[KVC_WIRE_CLIENT_ID];
	uint32_t count;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_close_many) == 24, "");

/* INO_GRANT: reserve count (1 .. KVC_WIRE_MAX_GRANT) inode numbers for
 * client (a kvc-fuse), which makes files with them itself and enters them
 * with ADOPT (fuse/early_creates.h). The numbers are never given out
 * again, used or not; only that client may enter them, and those it has
 * not entered when it returns its grants (INO_RETURN) or is declared gone
 * (sessions.h) are reclaimed: any chunks written for them are removed.
 * Reply: kvc_msg_ino_grant_reply: the first number, the count, and the
 * chain count new files are placed over now. */
#define KVC_WIRE_MAX_GRANT 4096
struct kvc_msg_ino_grant {
	uint8_t client[KVC_WIRE_CLIENT_ID];
	uint32_t count;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_ino_grant) == 24, "");

struct kvc_msg_ino_grant_reply {
	uint64_t first;
	uint32_t count;
	uint32_t chain_count;
};
_Static_assert(sizeof(struct kvc_msg_ino_grant_reply) == 16, "");

/* INO_RETURN: client is done with its grants (it stops). ranges name up
 * to two runs of numbers it never gave to a file (count 0: none), each
 * the end of one of its grants; they are dropped. Every other number of
 * its grants not entered (a file it made but never entered: lost) is
 * reclaimed, and its grants go. Reply: kvc_msg_ino_return_reply. */
struct kvc_msg_ino_range {
	uint64_t first;
	uint32_t count;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_ino_range) == 16, "");

struct kvc_msg_ino_return {
	uint8_t client[KVC_WIRE_CLIENT_ID];
	struct kvc_msg_ino_range ranges[2];
};
_Static_assert(sizeof(struct kvc_msg_ino_return) == 48, "");

struct kvc_msg_ino_return_reply {
	uint64_t reclaimed; /* numbers whose chunks the collector removes */
};
_Static_assert(sizeof(struct kvc_msg_ino_return_reply) == 8, "");

/* ADOPT: count (1 .. KVC_WIRE_MAX_KEYS) regular files a kvc-fuse made with
 * granted numbers, entered in one transaction: kvc_msg_adopt, then count
 * records, each a kvc_msg_adopt_record and name_len name bytes. A record
 * enters inode `ino` (a number granted to `client` and not entered yet:
 * else -ESTALE, as for a client whose grants were reclaimed) with attr's
 * mode (S_IFREG, no set-id bits), uid, gid, size, times and layout, links
 * it as (parent, name), touches the parent, and with KVC_ADOPT_OPEN opens
 * it for `client`. A name that exists already
 * is replaced when it is a regular file (the older file goes as an unlink
 * or rename over it would take it: gc, or an orphan while open), else
 * -EEXIST. Reply: count kvc_msg_key_result in order (rc 0 or -errno per
 * record, the attributes entered); a failure of the whole transaction
 * answers the message. */
#define KVC_ADOPT_OPEN 1u
struct kvc_msg_adopt {
	uint8_t client[KVC_WIRE_CLIENT_ID];
	uint32_t count;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_adopt) == 24, "");

struct kvc_msg_adopt_record {
	uint64_t parent;
	struct kvc_attr attr; /* nlink and rdev ignored */
	uint32_t flags;       /* KVC_ADOPT_OPEN */
	uint32_t name_len;
};
_Static_assert(sizeof(struct kvc_msg_adopt_record) == 96, "");

/* REMOVE_MANY: count (1 .. KVC_WIRE_MAX_KEYS) removals a kvc-fuse already
 * answered (fuse/early_creates.h), in one transaction: kvc_msg_remove_many,
 * then count records, each a kvc_msg_remove_record and name_len name bytes.
 * A record removes (parent, name) as UNLINK does (the inode goes to the
 * collector, or stays an orphan while open somewhere) only while that name
 * names inode `ino` and is not a directory: else -ENOENT (gone, or another
 * inode now: a removal ordered before that client's change), -EISDIR.
 * Reply: count kvc_msg_key_result in order (rc 0 or -errno per record; the
 * removed inode's attributes after, nlink lowered); a failure of the whole
 * transaction answers the message. */
struct kvc_msg_remove_many {
	uint32_t count;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_remove_many) == 8, "");

struct kvc_msg_remove_record {
	uint64_t parent;
	uint64_t ino;
	uint32_t name_len;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_remove_record) == 24, "");

/* CLIENT_HELLO: the connection acts for the kvc-fuse client `client`
 * (sent once, right after the handshake): kvc-meta remembers the names and
 * inodes this connection's LOOKUP, GETATTR, CREATE, MKDIR, MKNOD, SYMLINK,
 * LINK and SETATTR answered, for ttl_ms plus a margin, and tells the
 * client's WATCH stream when another client changes them. Reply: empty. */
struct kvc_msg_client_hello {
	uint8_t client[KVC_WIRE_CLIENT_ID];
	uint32_t ttl_ms; /* how long the client caches what it is told */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_client_hello) == 24, "");

/* WATCH: the connection becomes client's event stream (one per client; a
 * new one replaces the old). Reply: empty; then kvc-meta sends
 * WATCH_EVENTS frames (request_id 0, status 0) on it for as long as it
 * stays open; the client sends nothing more. Each frame's body is
 * kvc_msg_watch_events then count records of kvc_msg_watch_event, each
 * followed by its name (name_len bytes, kind NAME only) padded to 8. */
struct kvc_msg_watch_events {
	uint32_t count;
	uint32_t flags; /* KVC_WATCH_LOST: events were dropped before these */
};
#define KVC_WATCH_LOST 1u
struct kvc_msg_watch_event {
	uint64_t id;       /* NAME: the parent directory; INODE: the inode */
	uint32_t kind;     /* KVC_WATCH_NAME or KVC_WATCH_INODE */
	uint32_t name_len; /* NAME: 1 .. KVC_WIRE_MAX_NAME; INODE: 0 */
};
_Static_assert(sizeof(struct kvc_msg_watch_event) == 16, "");
#define KVC_WATCH_NAME 1u
#define KVC_WATCH_INODE 2u
/* An event of kind DIR (id: the directory, no name): a change of some name
 * in it may have been missed; forget what is known of its names. */
#define KVC_WATCH_DIR 3u
/* WATCH_DIR: kvc_msg_ino (a directory), on a connection that sent
 * CLIENT_HELLO. The client is told of every change of every name in it
 * (a NAME event each) for its ttl, however many: it keeps the set of the
 * directory's names itself (fuse/dir_names.h). Reply: empty. */

/* SYMLINK: followed by the name, then target_len bytes of target (1 ..
 * KVC_WIRE_MAX_SYMLINK, no NUL). Reply: kvc_attr. READLINK: kvc_msg_ino;
 * reply: the target bytes. */
struct kvc_msg_symlink {
	uint64_t parent;
	uint32_t name_len;
	uint32_t target_len;
	uint32_t uid;
	uint32_t gid;
};
_Static_assert(sizeof(struct kvc_msg_symlink) == 24, "");

/* LINK: a new name (new_parent, name) for the non-directory ino; followed
 * by the name. Reply: kvc_attr (nlink raised). */
struct kvc_msg_link {
	uint64_t ino;
	uint64_t new_parent;
	uint32_t name_len;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_link) == 24, "");

/* SETXATTR, GETXATTR, REMOVEXATTR: followed by the name (user.*, 1 ..
 * KVC_WIRE_MAX_NAME bytes), then for SETXATTR value_len bytes of value
 * (<= KVC_WIRE_MAX_XATTR_VALUE). GETXATTR's reply: the value. LISTXATTR:
 * kvc_msg_ino; reply: the names, each followed by a NUL. */
struct kvc_msg_xattr {
	uint64_t ino;
	uint32_t name_len;
	uint32_t value_len;
	uint32_t flags; /* SETXATTR: KVC_XATTR_CREATE or KVC_XATTR_REPLACE */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_xattr) == 24, "");
#define KVC_XATTR_CREATE 1u  /* fail with EEXIST when it exists */
#define KVC_XATTR_REPLACE 2u /* fail with ENODATA when it does not */

/* RENAME: followed by name then new_name. */
struct kvc_msg_rename {
	uint64_t parent;
	uint64_t new_parent;
	uint32_t name_len;
	uint32_t new_name_len;
	uint32_t flags; /* KVC_RENAME_NOREPLACE */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_rename) == 32, "");
#define KVC_RENAME_NOREPLACE 1u

/* READDIR: entries after the name `after` (empty: from the start).
 * Reply: kvc_msg_readdir_reply, then count records of
 * (kvc_attr, uint32 name_len, name bytes, padded to 8). */
struct kvc_msg_readdir {
	uint64_t ino;
	uint32_t max_entries; /* may carry KVC_READDIR_WATCH */
	uint32_t after_len;
};
/* max_entries flag: the client caches the entries it is given
 * (readdirplus): kvc-meta notes each one's name and inode for it, as a
 * LOOKUP's, so it hears of their changes. Without it (a client's own
 * name lists, tools) nothing is noted. A kvc-meta before it reads the
 * flagged count as over the limit: a full page, no notes. */
#define KVC_READDIR_WATCH 0x80000000u
struct kvc_msg_readdir_reply {
	uint32_t count;
	uint32_t more; /* 1 when entries remain after the last one */
};
struct kvc_msg_dirent {
	struct kvc_attr attr;
	uint32_t name_len;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_dirent) == 88, "");

/* SETATTR: fields chosen by mask. Reply: kvc_attr. */
struct kvc_msg_setattr {
	uint64_t ino;
	uint32_t mask;
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint64_t size;
	int64_t atime_ns;
	int64_t mtime_ns;
};
_Static_assert(sizeof(struct kvc_msg_setattr) == 48, "");
#define KVC_SETATTR_MODE 1u
#define KVC_SETATTR_UID 2u
#define KVC_SETATTR_GID 4u
#define KVC_SETATTR_SIZE 8u
#define KVC_SETATTR_ATIME 16u
#define KVC_SETATTR_MTIME 32u
#define KVC_SETATTR_ALL 63u

/* EXTEND_SIZE: size = max(size, given); mtime updated. Reply: kvc_attr. */
struct kvc_msg_extend {
	uint64_t ino;
	uint64_t size;
};

/* KEYS_*: many names under one directory in one message and one LMDB
 * transaction (the batched namespace work of USRBIO ring keys). Body:
 * kvc_msg_keys, then `count` (<= KVC_WIRE_MAX_KEYS) records:
 *   LOOKUP, REMOVE: u32 name_len, name bytes
 *   CREATE: none (count temps are made)
 *   PUBLISH: u64 size, u64 temp (the temp's inode), u32 name_len, name
 * CREATE makes nameless regular files (mode, uid, gid of the header) that
 * `client` has open: orphans, reclaimed as any file removed while open
 * when the client closes them (CLOSE_MANY) or is dropped (-ESTALE while
 * it is dropped and has not rejoined). PUBLISH sets a temp's size and
 * gives it its name, ending client's session (without KVC_KEYS_REPLACE:
 * -EEXIST when the name exists, and the temp is closed and reclaimed); a
 * temp that is not a nameless file `client` has open is -ESTALE. REMOVE
 * unlinks regular files (-EISDIR for a directory).
 * Reply: `count` kvc_msg_key_result in order (rc 0 or -errno per name,
 * attr of the file found, made or published). A failure of the whole
 * transaction (-EIO, -ENOSPC, -ENOTDIR for parent) answers the message. */
#define KVC_WIRE_MAX_KEYS 1024
#define KVC_KEYS_REPLACE 1u
struct kvc_msg_keys {
	uint64_t parent;
	uint32_t count;
	uint32_t flags;
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint32_t reserved;
	uint8_t client[KVC_WIRE_CLIENT_ID]; /* CREATE, PUBLISH: whose temps */
};
_Static_assert(sizeof(struct kvc_msg_keys) == 48, "");

struct kvc_msg_key_result {
	int32_t rc;
	uint32_t reserved;
	struct kvc_attr attr;
};
_Static_assert(sizeof(struct kvc_msg_key_result) == 88, "");

/* META_SYNC: empty body, empty reply: when it answers 0, everything
 * kvc-meta acknowledged before (namespace and page pools) is durable
 * (a checkpoint, docs/on-disk.md). fsync and fsyncdir send it. */

/* Space flags of SPACE's target records and STATFS's reply. */
#define KVC_SPACE_REFUSING 1u /* at the reserve: new data (storage) or
                                 namespace growth (kvc-meta) gets -ENOSPC */

/* STATFS reply: the namespace, and kvc-meta's own volume (the filesystem
 * of [meta] data; the data's space comes from the storage servers). */
struct kvc_msg_statfs_reply {
	uint64_t inodes;
	uint64_t max_inodes;
	uint64_t open_sessions; /* (file, client) pairs open */
	uint64_t orphans;       /* files removed while open somewhere */
	uint64_t gc_pending;    /* removed files whose chunks are still to reclaim */
	uint64_t volume_total_bytes;
	uint64_t volume_free_bytes;
	uint64_t reserve_bytes; /* below it, namespace growth gets -ENOSPC */
	uint64_t refused;       /* growth refused for the reserve since start */
	uint32_t flags;         /* KVC_SPACE_REFUSING */
	uint32_t grants;        /* inode-number grants clients hold (meta_grants.c;
	                         * 0 from a kvc-meta before wire version 15) */
	uint64_t watch_entries; /* cached names and inodes tracked (watches.h) */
	uint64_t watch_events;  /* change events sent to clients since start */
};
_Static_assert(sizeof(struct kvc_msg_statfs_reply) == 96, "");

#endif
