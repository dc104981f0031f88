/*
 * wire: the one wire-protocol module of kvcfs. Every RPC between kvc-fuse,
 * kvc-meta, kvc-storage and the tools is framed, sent, received and checked
 * here; no other module encodes or decodes bytes from the network.
 *
 * Frame layout (all integers little-endian, asserted at compile time):
 *
 *   offset size field
 *   0      4    magic        KVC_WIRE_MAGIC ("KVC1")
 *   4      2    version      KVC_WIRE_VERSION
 *   6      2    type         enum kvc_wire_type
 *   8      8    request_id   echoed in the reply
 *   16     4    status       0 or -errno (replies only)
 *   20     4    body_len     <= KVC_WIRE_MAX_BODY: the fixed message struct
 *                            and its variable part (names, piece arrays)
 *   24     8    data_len     <= KVC_WIRE_MAX_DATA: bulk bytes after the body,
 *                            so a receiver can read them straight into the
 *                            destination buffer
 *
 * Bodies are the packed structs below (fuse_kernel.h style): sizes are fixed
 * and asserted, variable parts follow the struct and their lengths are
 * checked against body_len and the limits before use. A frame that fails a
 * check is a protocol error: the receiver closes that connection only.
 *
 * Every connection starts with the handshake: HELLO (version, role, client
 * nonce), answered with the server's nonce, then AUTH (the client's proof
 * of the role's secret), answered with the server's proof (src/core/auth.h
 * computes them). The server answers -EPROTO for another version and
 * -EACCES for anything else it refuses, then closes. See docs/protocol.md
 * for every message.
 *
 * USRBIO control messages (types 96..) travel on kvc-fuse's local Unix
 * socket with the same framing; the file descriptors they register ride
 * along as SCM_RIGHTS ancillary data of the frame (see docs/usrbio.md).
 *
 * Version changelog:
 *   1  first version (namespace, chunk I/O, space, sync, USRBIO control).
 *   2  every POSIX object type and user xattrs: kvc_attr carries rdev (80
 *      bytes), kvc_msg_create carries rdev (40 bytes); new MKNOD, SYMLINK,
 *      LINK, READLINK, SETXATTR, GETXATTR, LISTXATTR, REMOVEXATTR.
 *   3  connections authenticate: HELLO carries a role and a client nonce
 *      instead of a token; new AUTH (HMAC-SHA256 proofs both ways). The
 *      page-pool secret opens a connection for page-pool messages only.
 *      Also: META_SYNC (54), and RENEW's ino carries flags (KVC_RENEW_REJOIN).
 *   4  full disks: SPACE's target records carry flags (refusing), the
 *      reserve and the refused writes (56 bytes); STATFS's reply carries
 *      kvc-meta's volume, reserve and refusals (80 bytes).
 *   5  keys at speed: CLIENT_HELLO (a connection acts for one kvc-fuse),
 *      WATCH and WATCH_EVENTS (kvc-meta tells a client which cached names
 *      and inodes another client changed); CREATE takes KVC_CREATE_OPEN
 *      (the open session in the same transaction; the reply carries
 *      kvc_msg_create_reply after the attributes) and
 *      KVC_CREATE_PARENT_GID (a setgid parent's group, decided in kvc-meta);
 *      STATFS's reply carries the watch counters (96 bytes); CLOSE_MANY
 *      ends many open sessions of one client in one transaction.
 *      Also POOL_WAIT (47): wait until keys are complete on every rank, with a
 *      timeout (the decode side's handoff); replies as POOL_EXISTS.
 *      Also ring keys: KEYS_LOOKUP, KEYS_CREATE, KEYS_PUBLISH,
 *      KEYS_REMOVE (80..83): many names of one directory per message.
 *   6  chains: layouts name chains (first_chain, chain_count); CHUNK_WRITE
 *      (40 bytes) and CHUNK_READ's pieces (32 bytes) carry the chain and
 *      the chain version the sender routed by (-ESTALE: refresh); a
 *      CHUNK_WRITE goes to the chain's head, which forwards it to the
 *      next member (KVC_CHUNK_FORWARDED) and answers once the tail did;
 *      a read piece of a chunk with a write in flight at that replica
 *      gets -EAGAIN (ask the tail). MGMT_HEARTBEAT (112) and
 *      MGMT_ROUTING (113): storage servers' heartbeats to the leading
 *      kvc-mgmt and everyone's routing table (chains, versions, members
 *      catching up); MGMT_DRAIN (114) takes a target out of its chain.
 *      CHUNK_REMOVE (24 bytes), CHUNK_TRUNCATE and CHUNK_PUNCH (32 bytes)
 *      carry the chain and chain version too.
 *      gets -EAGAIN (ask the tail).
 *      Also resync (a target catching up with another member of its
 *      chain): CHUNK_LIST (72) pages through a target's chunks with their
 *      length and chunk_crc; CHUNK_RESYNC (73) starts a catch-up of a
 *      local target from another member on a thread of its own;
 *      CHUNK_RESYNC_STATUS (74) tells its progress and result.
 *   7  hosts come from the manager: MGMT_ROUTING's reply carries the
 *      storage servers (kvc_wire_server: name, address, their targets'
 *      first id and count) after the chains (server_count in the head's
 *      former reserved word), so clients need no [storage] sections.
 *      New MGMT_REGISTER (115: a new host asks to join, pending until
 *      admitted), MGMT_ADD_HOST (116: kvc-admin admits it) and
 *      MGMT_HOSTS (117: admitted and pending hosts, heartbeat ages, spare
 *      targets).
 *   8  same-host placement (a storage server on kvc-fuse's host moves
 *      chunk bytes straight between its chunks and the client's
 *      registered shared memory; src/client/transport.h): PLACE_HELLO
 *      (75, host identity), PLACE_REGISTER (76, memory passed as an fd),
 *      PLACE_UNREGISTER (77), PLACE_READ (78) and PLACE_WRITE (79) on
 *      kvc-storage's abstract Unix socket "kvc-place:<address>".
 *   9..11: docs/protocol.md's changelog.
 *   12 range operations come down the chain: CHUNK_REMOVE/PUNCH's last
 *      word and CHUNK_TRUNCATE's new one (40 bytes, was 32) are flags
 *      (KVC_CHUNK_FORWARDED); clients send them to each chain's head.
 *   13 creates made ahead: INO_GRANT (60) reserves inode numbers for a
 *      kvc-fuse, ADOPT (61) enters files it made with them (names,
 *      inodes, sizes, open sessions) in one transaction.
 *   14 REMOVE_MANY (62) removes many names, each only while it names a
 *      given inode.
 *   15 grants belong to a client: INO_GRANT carries the client's id (24
 *      bytes, was 8), ADOPT enters only numbers granted to its sender, and
 *      INO_RETURN (63) gives a client's grants back when it stops.
 */
#ifndef KVC_WIRE_H
#define KVC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "kvcfs wire structs are little-endian in memory");

#define KVC_WIRE_MAGIC 0x3143564bu /* "KVC1" */
#define KVC_WIRE_VERSION 15
#define KVC_WIRE_MAX_BODY (1u << 20)
#define KVC_WIRE_MAX_DATA (64u << 20)
#define KVC_WIRE_MAX_NAME 255
#define KVC_WIRE_MAX_PIECES 1024
#define KVC_WIRE_MAX_DIRENTS 1024
#define KVC_WIRE_MAX_TARGETS 64
#define KVC_WIRE_MAX_REPLICAS 8 /* members of a chain */
#define KVC_WIRE_MAX_SERVERS 32 /* storage servers (hosts) of a routing table */
#define KVC_WIRE_HOST_NAME 64   /* a storage server's name, NUL included */
#define KVC_WIRE_HOST_ADDRESS 128 /* its host:port, NUL included */
#define KVC_WIRE_MAX_SYMLINK 4095      /* target bytes (PATH_MAX - 1) */
#define KVC_WIRE_MAX_XATTR_VALUE 65536 /* XATTR_SIZE_MAX */

enum kvc_wire_type {
	KVC_MSG_HELLO = 1,
	KVC_MSG_AUTH = 2,
	/* namespace (kvc-meta) */
	KVC_MSG_LOOKUP = 16,
	KVC_MSG_GETATTR = 17,
	KVC_MSG_CREATE = 18,
	KVC_MSG_MKDIR = 19,
	KVC_MSG_UNLINK = 20,
	KVC_MSG_RMDIR = 21,
	KVC_MSG_RENAME = 22,
	KVC_MSG_READDIR = 23,
	KVC_MSG_SETATTR = 24,
	KVC_MSG_EXTEND_SIZE = 25,
	KVC_MSG_STATFS = 26,
	KVC_MSG_OPEN = 27,
	KVC_MSG_CLOSE = 28,
	KVC_MSG_RENEW = 29,
	KVC_MSG_MKNOD = 30,
	KVC_MSG_SYMLINK = 31,
	/* page pools (kvc-meta) */
	KVC_MSG_POOL_INIT = 32,
	KVC_MSG_POOL_WORLD = 33,
	KVC_MSG_POOL_ALLOCATE = 34,
	KVC_MSG_POOL_CONFIRM = 35,
	KVC_MSG_POOL_EXISTS = 36,
	KVC_MSG_POOL_LOCATIONS = 37,
	KVC_MSG_POOL_RELEASE_LEASES = 38,
	KVC_MSG_POOL_DELETE = 39,
	KVC_MSG_POOL_CLEAR = 40,
	KVC_MSG_POOL_STATS = 41,
	KVC_MSG_POOL_LIST = 42,
	KVC_MSG_POOL_FSCK = 43,
	KVC_MSG_POOL_KEYS = 44,
	KVC_MSG_POOL_BIND = 45,
	KVC_MSG_POOL_BINDING = 46,
	KVC_MSG_POOL_WAIT = 47,
	/* namespace, continued (kvc-meta) */
	KVC_MSG_LINK = 48,
	KVC_MSG_READLINK = 49,
	KVC_MSG_SETXATTR = 50,
	KVC_MSG_GETXATTR = 51,
	KVC_MSG_LISTXATTR = 52,
	KVC_MSG_REMOVEXATTR = 53,
	KVC_MSG_META_SYNC = 54,
	KVC_MSG_CLIENT_HELLO = 55,
	KVC_MSG_WATCH = 56,
	KVC_MSG_WATCH_EVENTS = 57,
	KVC_MSG_CLOSE_MANY = 58,
	KVC_MSG_WATCH_DIR = 59,
	KVC_MSG_INO_GRANT = 60,
	KVC_MSG_ADOPT = 61,
	KVC_MSG_REMOVE_MANY = 62,
	KVC_MSG_INO_RETURN = 63,
	/* Ring keys (80..87): fuse/ring_keys.c's batched namespace work. */
	KVC_MSG_KEYS_LOOKUP = 80,
	KVC_MSG_KEYS_CREATE = 81,
	KVC_MSG_KEYS_PUBLISH = 82,
	KVC_MSG_KEYS_REMOVE = 83,
	/* chunks (kvc-storage) */
	KVC_MSG_CHUNK_WRITE = 64,
	KVC_MSG_CHUNK_READ = 65,
	KVC_MSG_CHUNK_REMOVE = 66,
	KVC_MSG_CHUNK_TRUNCATE = 67,
	KVC_MSG_CHUNK_LAST = 68,
	KVC_MSG_SPACE = 69,
	KVC_MSG_SYNC = 70,
	KVC_MSG_CHUNK_PUNCH = 71,
	/* the cluster manager (kvc-mgmt) */
	KVC_MSG_MGMT_HEARTBEAT = 112,
	KVC_MSG_MGMT_ROUTING = 113,
	KVC_MSG_MGMT_DRAIN = 114,
	KVC_MSG_MGMT_REGISTER = 115,
	KVC_MSG_MGMT_ADD_HOST = 116,
	KVC_MSG_MGMT_HOSTS = 117,
	KVC_MSG_CHUNK_LIST = 72,
	KVC_MSG_CHUNK_RESYNC = 73,
	KVC_MSG_CHUNK_RESYNC_STATUS = 74,
	/* same-host placement (kvc-storage's local Unix socket) */
	KVC_MSG_PLACE_HELLO = 75,
	KVC_MSG_PLACE_REGISTER = 76,
	KVC_MSG_PLACE_UNREGISTER = 77,
	KVC_MSG_PLACE_READ = 78,
	KVC_MSG_PLACE_WRITE = 79,
	/* USRBIO control (kvc-fuse's local socket) */
	KVC_MSG_IOV_REGISTER = 96,
	KVC_MSG_IOV_DEREGISTER = 97,
	KVC_MSG_FD_REGISTER = 98,
	KVC_MSG_FD_DEREGISTER = 99,
	KVC_MSG_RING_REGISTER = 100,
	KVC_MSG_RING_DEREGISTER = 101,
	KVC_MSG_IOV_REGISTER_DEVICE = 102,
};

/* Most file descriptors one frame may carry. */
#define KVC_WIRE_MAX_FDS 4

struct kvc_wire_header {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t request_id;
	int32_t status;
	uint32_t body_len;
	uint64_t data_len;
};
_Static_assert(sizeof(struct kvc_wire_header) == 32, "header is 32 bytes");

/* HELLO: the client's version and role (enum kvc_auth_role), then, for
 * any role but none, a kvc_msg_auth_nonce. Reply: the server's
 * kvc_msg_auth_nonce (empty for role none). */
struct kvc_msg_hello {
	uint32_t version;
	uint32_t role;
};
_Static_assert(sizeof(struct kvc_msg_hello) == 8, "");
#define KVC_WIRE_NONCE 32
struct kvc_msg_auth_nonce {
	uint8_t nonce[KVC_WIRE_NONCE];
};
/* AUTH: the client's proof; reply: the server's (src/core/auth.h). */
#define KVC_WIRE_PROOF 32
struct kvc_msg_auth_proof {
	uint8_t mac[KVC_WIRE_PROOF];
};

/* A file's placement: chunk i lives on chain
 * (first_chain + i % stripe) % chain_count (core/chains.h; with one
 * replica, chain i is target i). */
struct kvc_layout {
	uint32_t chunk_size;
	uint32_t stripe;
	uint32_t first_chain;
	uint32_t chain_count;
};
_Static_assert(sizeof(struct kvc_layout) == 16, "");

struct kvc_attr {
	uint64_t ino;
	uint64_t size;
	int64_t atime_ns;
	int64_t mtime_ns;
	int64_t ctime_ns;
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint32_t nlink;
	struct kvc_layout layout; /* regular files and directories; else zero */
	uint64_t rdev;            /* character and block devices: dev_t */
};
_Static_assert(sizeof(struct kvc_attr) == 80, "");

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
	uint32_t max_entries;
	uint32_t after_len;
};
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
 *   LOOKUP, CREATE, REMOVE: u32 name_len, name bytes
 *   PUBLISH: u64 size, u32 temp_len, u32 name_len, temp bytes, name bytes
 * CREATE makes regular files (mode, uid, gid of the header) exclusively;
 * PUBLISH sets the temp file's size and renames it to name (without
 * KVC_KEYS_REPLACE: -EEXIST when name exists, and the temp is removed);
 * REMOVE unlinks regular files (-EISDIR for a directory).
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
};
_Static_assert(sizeof(struct kvc_msg_keys) == 32, "");

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

/* CHUNK_WRITE: data_len bytes follow; offset + data_len <= chunk_size.
 * target is the member of `chain` (at chain_version) the frame is for: the
 * head from a client, the next member when forwarded. */
#define KVC_CHUNK_FORWARDED 1u /* flags: from the previous member */
struct kvc_msg_chunk_write {
	uint64_t inode;
	uint32_t target;
	uint32_t chunk;
	uint32_t chunk_size;
	uint32_t offset;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_write) == 40, "");
/* reply: */
struct kvc_msg_chunk_write_reply {
	uint64_t version;
	uint32_t length; /* chunk length after the write */
	uint32_t reserved;
};

/* CHUNK_READ: kvc_msg_chunk_read then count pieces. The reply body is
 * count kvc_msg_piece_result; the data is the concatenation of each
 * piece's `length` bytes in order. Bytes past `length` up to the asked
 * length are a hole: the reader fills them with zeros. */
struct kvc_msg_chunk_read {
	uint32_t count;
	uint32_t reserved;
};
struct kvc_msg_piece {
	uint64_t inode;
	uint32_t target; /* a member of chain: the replica asked */
	uint32_t chunk;
	uint32_t offset;
	uint32_t length;
	uint32_t chain;
	uint32_t chain_version;
};
_Static_assert(sizeof(struct kvc_msg_piece) == 32, "");
struct kvc_msg_piece_result {
	int32_t status; /* 0 or -errno (-EIO: crc mismatch; -EAGAIN: a write
	                   is in flight at this replica, ask the tail;
	                   -ESTALE: not a member of that chain version) */
	uint32_t length; /* bytes present in the data section */
};

/* Same-host placement (kvc-storage's local Unix socket, see
 * src/client/transport.h). PLACE_HELLO: empty; reply
 * kvc_msg_place_hello_reply (the server's host identity: the client
 * places only when it equals its own). */
#define KVC_PLACE_HOST_ID 32
struct kvc_msg_place_hello_reply {
	uint8_t host_id[KVC_PLACE_HOST_ID]; /* sha256(machine-id, boot id) */
	uint32_t max_pieces;                /* KVC_WIRE_MAX_PIECES */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_place_hello_reply) == 40, "");

/* PLACE_REGISTER: one fd rides along (shared memory of tmpfs or
 * hugetlbfs); the region is its bytes [file_offset, file_offset + size),
 * known as `region` to the registering process (its SO_PEERCRED pid) for
 * as long as the registering connection stays open. Reply empty.
 * PLACE_UNREGISTER: kvc_msg_place_region; reply empty. */
struct kvc_msg_place_register {
	uint64_t region;
	uint64_t size;
	uint64_t file_offset;
};
_Static_assert(sizeof(struct kvc_msg_place_register) == 24, "");
struct kvc_msg_place_region {
	uint64_t region;
};
_Static_assert(sizeof(struct kvc_msg_place_region) == 8, "");

/* PLACE_READ: kvc_msg_place_read, count pieces (as CHUNK_READ's), then
 * count u64 region offsets: piece i's bytes go to [offset_i, offset_i +
 * piece length) of the region. Reply: count kvc_msg_piece_result, no data
 * section (the bytes are in the region; past `length` a hole, which the
 * reader fills with zeros). A piece whose region bytes are gone (the
 * memory shrank) is -EFAULT. */
struct kvc_msg_place_read {
	uint64_t region;
	uint32_t count;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_place_read) == 16, "");

/* PLACE_WRITE: a CHUNK_WRITE whose `length` bytes are taken from
 * [region_offset, region_offset + length) of the region instead of a
 * data section. Reply: kvc_msg_chunk_write_reply. */
struct kvc_msg_place_write {
	struct kvc_msg_chunk_write write;
	uint64_t region;
	uint64_t region_offset;
	uint32_t length;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_place_write) == 64, "");

/* CHUNK_REMOVE: all chunks of inode on target, a member of chain at
 * chain_version (range operations carry them as writes do: a request
 * delayed across a membership change is -ESTALE, never applied late).
 * Range operations come down the chain as writes do (wire version 12): a
 * client sends them to the head, each member applies and passes them on
 * with KVC_CHUNK_FORWARDED in flags, the answer is the tail's.
 * Reply: removed count. */
struct kvc_msg_chunk_remove {
	uint64_t inode;
	uint32_t target;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* KVC_CHUNK_FORWARDED or 0 */
};
_Static_assert(sizeof(struct kvc_msg_chunk_remove) == 24, "");
struct kvc_msg_count_reply {
	uint64_t count;
};

/* CHUNK_TRUNCATE: drop bytes at or beyond size of inode on target. */
struct kvc_msg_chunk_truncate {
	uint64_t inode;
	uint64_t size;
	uint32_t target;
	uint32_t chunk_size;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* KVC_CHUNK_FORWARDED or 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_truncate) == 40, "");

/* CHUNK_PUNCH: drop chunks first_chunk .. first_chunk + count - 1 of
 * inode on target (they read as holes). Reply: kvc_msg_count_reply. */
struct kvc_msg_chunk_punch {
	uint64_t inode;
	uint32_t target;
	uint32_t first_chunk;
	uint32_t count;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* KVC_CHUNK_FORWARDED or 0 */
};
_Static_assert(sizeof(struct kvc_msg_chunk_punch) == 32, "");

/* CHUNK_LAST: highest chunk of inode on target. */
struct kvc_msg_chunk_last {
	uint64_t inode;
	uint32_t target;
	uint32_t reserved;
};
struct kvc_msg_chunk_last_reply {
	uint32_t found;
	uint32_t chunk;
	uint32_t length;
	uint32_t reserved;
};

/* CHUNK_LIST: up to max_entries (1 .. KVC_WIRE_MAX_CHUNK_LIST) chunks of
 * target in (inode, chunk) order, starting after (after_inode,
 * after_chunk) when flags has KVC_CHUNK_LIST_AFTER, else from the first.
 * With KVC_CHUNK_LIST_AT_VERSION (a resync's source), target must be a
 * member of chain at chain_version in the server's table (else -ESTALE),
 * and the page is read only after every write and range operation the
 * target took under an older table is done (storage/inflight.h: drain);
 * without it, chain and chain_version must be 0.
 * Reply: kvc_msg_chunk_list_reply then count kvc_msg_chunk_entry; `more`
 * is 1 when chunks remain after the last one (ask again after it). */
#define KVC_WIRE_MAX_CHUNK_LIST 16384
#define KVC_CHUNK_LIST_AFTER 1u
#define KVC_CHUNK_LIST_AT_VERSION 2u
struct kvc_msg_chunk_list {
	uint64_t after_inode;
	uint32_t after_chunk;
	uint32_t target;
	uint32_t max_entries;
	uint32_t flags;
	uint32_t chain;
	uint32_t chain_version;
};
_Static_assert(sizeof(struct kvc_msg_chunk_list) == 32, "");
struct kvc_msg_chunk_list_reply {
	uint32_t count;
	uint32_t more;
};
_Static_assert(sizeof(struct kvc_msg_chunk_list_reply) == 8, "");
struct kvc_msg_chunk_entry {
	uint64_t inode;
	uint32_t chunk;
	uint32_t length;    /* bytes of the chunk */
	uint32_t chunk_crc; /* crc32c of its block crcs (docs/on-disk.md) */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_entry) == 24, "");
_Static_assert(sizeof(struct kvc_msg_chunk_list_reply) +
                       KVC_WIRE_MAX_CHUNK_LIST * sizeof(struct kvc_msg_chunk_entry) <=
                       KVC_WIRE_MAX_BODY, "a whole page fits a body");

/* CHUNK_RESYNC: make local `target` hold exactly what `source` (another
 * member of `chain`, at chain_version) holds, on a thread of the server's
 * own; the reply (empty) comes at once: 0 started, -EBUSY one runs for
 * target, -ENXIO target not here or chain unknown, -ESTALE either is not
 * a member of that chain version, -EINVAL source == target or flags.
 * CHUNK_RESYNC_STATUS: kvc_msg_chunk_target; reply kvc_msg_resync_status
 * of the last resync of target (state IDLE when none ran). */
struct kvc_msg_chunk_resync {
	uint32_t target;
	uint32_t source;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t flags; /* 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_resync) == 24, "");
struct kvc_msg_chunk_target {
	uint32_t target;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_chunk_target) == 8, "");
#define KVC_RESYNC_IDLE 0u    /* none since the server started */
#define KVC_RESYNC_RUNNING 1u
#define KVC_RESYNC_DONE 2u    /* result 0 */
#define KVC_RESYNC_FAILED 3u  /* result -errno */
struct kvc_msg_resync_status {
	uint32_t state;
	int32_t result;
	uint32_t source;
	uint32_t chain;
	uint32_t chain_version;
	uint32_t passes;        /* whole comparisons made */
	uint64_t compared;      /* chunks compared (both listings) */
	uint64_t copied;        /* chunks set to the source's bytes */
	uint64_t dropped;       /* chunks the source lacks, dropped here */
	uint64_t bytes;         /* bytes copied */
	uint64_t retries;       /* copies retried (a write in flight at the source) */
	uint64_t elapsed_ms;    /* since it started (to its end when over) */
};
_Static_assert(sizeof(struct kvc_msg_resync_status) == 72, "");

/* SPACE reply: count records, one per target the server serves. */
struct kvc_msg_space_reply {
	uint32_t count;
	uint32_t reserved;
};
struct kvc_msg_target_space {
	uint32_t target;
	uint32_t flags; /* KVC_SPACE_REFUSING */
	uint64_t fsid;  /* filesystem id, to count shared disks once */
	uint64_t total_bytes;
	uint64_t free_bytes;     /* the filesystem's, reserve included */
	uint64_t chunks;
	uint64_t reserve_bytes;  /* kept back from chunk data for metadata */
	uint64_t refused_writes; /* refused for the reserve since the server started */
};
_Static_assert(sizeof(struct kvc_msg_target_space) == 56, "");

/* A chain of the routing table (core/chains.h): version, members head
 * first, and which members are catching up (a bit per position: they take
 * writes but serve no reads yet). */
struct kvc_wire_chain {
	uint32_t version;
	uint32_t count;
	uint32_t targets[KVC_WIRE_MAX_REPLICAS];
	uint32_t syncing;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_wire_chain) == 48, "");

/* MGMT_HEARTBEAT: a storage server (its index in the routing table) is
 * alive and knows routing version routing_version; then synced_count
 * kvc_msg_mgmt_synced: its targets that finished catching up with their
 * chain at chain_version. Only the leading manager answers (others:
 * -EAGAIN, ask the next). Reply: kvc_msg_mgmt_routing_reply with no chains. */
#define KVC_WIRE_MAX_SYNCED 64
struct kvc_msg_mgmt_heartbeat {
	uint32_t server;
	uint32_t synced_count;
	uint64_t routing_version;
};
struct kvc_msg_mgmt_synced {
	uint32_t target;
	uint32_t chain_version;
};
/* MGMT_ROUTING: the routing table when its version is not known_version,
 * waiting up to wait_ms (<= KVC_WIRE_MAX_ROUTING_WAIT_MS) for a change.
 * Reply: kvc_msg_mgmt_routing_reply, then chain_count kvc_wire_chain,
 * then server_count kvc_wire_server (both counts 0 when the table is
 * still known_version). The leading manager answers; others -EAGAIN. */
#define KVC_WIRE_MAX_ROUTING_WAIT_MS 10000
struct kvc_msg_mgmt_routing {
	uint64_t known_version;
	uint32_t wait_ms;
	uint32_t reserved;
};
struct kvc_msg_mgmt_routing_reply {
	uint64_t version;
	uint32_t chain_count;
	uint32_t server_count; /* kvc_wire_server records after the chains */
};
_Static_assert(sizeof(struct kvc_msg_mgmt_routing_reply) == 16, "");

/* A storage server of the routing table: index = its position in the
 * table; its targets are ids first_target .. first_target + target_count
 * - 1 (server i's start where server i - 1's end: ids are dense). name
 * and address are NUL-terminated. */
struct kvc_wire_server {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t first_target;
	uint32_t target_count;
};
_Static_assert(sizeof(struct kvc_wire_server) == 200, "");

/* MGMT_REGISTER: every storage server of a cluster with managers names
 * itself at start, before it opens its targets, and learns its index and
 * target ids from the leader (the table, not its file, says which ids
 * its disks hold); a joining one (kvc-storage --join, flags
 * KVC_MGMT_REGISTER_JOIN) again every heartbeat_ms until admitted. The
 * leader answers kvc_msg_mgmt_register_reply: admitted 1 with its index
 * and target ids, or admitted 0 (JOIN: pending, listed for kvc-admin
 * add-host). -ENOENT: not a member and no JOIN; -EEXIST: an admitted
 * server of that name has another address or target count; -EINVAL: a
 * bad name, address, count or flag. */
#define KVC_MGMT_REGISTER_JOIN 1u
struct kvc_msg_mgmt_register {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t target_count;
	uint32_t flags;
};
_Static_assert(sizeof(struct kvc_msg_mgmt_register) == 200, "");
struct kvc_msg_mgmt_register_reply {
	uint32_t admitted;
	uint32_t server;
	uint32_t first_target;
	uint32_t target_count;
};

/* MGMT_ADD_HOST: admit the pending host `name` (kvc-admin add-host). Reply:
 * kvc_msg_mgmt_register_reply (admitted 1: the index and ids it gets; the
 * leader's next monitor pass stores it). -ENOENT: no pending host of that
 * name; -EEXIST: already admitted; -ENOSPC: past KVC_WIRE_MAX_SERVERS or
 * KVC_WIRE_MAX_TARGETS. */
struct kvc_msg_mgmt_add_host {
	char name[KVC_WIRE_HOST_NAME];
};

/* MGMT_HOSTS: every host the leader knows (empty body). Reply: the head,
 * then count kvc_wire_host. spare: a bit per target in no chain yet (too
 * few hosts with spare targets to make one of `replicas`). */
struct kvc_msg_mgmt_hosts_reply {
	uint32_t count;
	uint32_t reserved;
	uint64_t spare;
};
struct kvc_wire_host {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t admitted;     /* 1: in the table; 0: pending */
	uint32_t server;       /* its index (admitted) */
	uint32_t first_target; /* admitted */
	uint32_t target_count;
	int64_t heartbeat_age_ms; /* -1: none heard while this manager leads */
};
_Static_assert(sizeof(struct kvc_wire_host) == 216, "");

/* MGMT_DRAIN: take target out of its chain and keep it out (drain 1), or
 * let it back in, catching up (drain 0). The leader answers at once
 * (kvc_msg_mgmt_routing_reply, no chains: the version before the change,
 * which its next monitor pass makes); -EBUSY when the target is its
 * chain's last member serving reads. */
struct kvc_msg_mgmt_drain {
	uint32_t target;
	uint32_t drain;
};

/* IOV_REGISTER: one fd (the shared memory), mapped from file_offset. */
struct kvc_msg_iov_register {
	uint64_t size;
	uint64_t block_size;
	uint64_t file_offset;
	int32_t numa;
	uint32_t reserved;
	uint8_t id[16];
};
_Static_assert(sizeof(struct kvc_msg_iov_register) == 48, "");
/* IOV_REGISTER_DEVICE: no fd. GPU memory shared over CUDA IPC: the iov
 * is bytes offset..offset+size of the allocation ipc_handle names, on the
 * GPU pci_bus_id names (device numbers differ between processes). The
 * server checks the range against the allocation it imports. */
#define KVC_WIRE_IPC_HANDLE_SIZE 64
struct kvc_msg_iov_register_device {
	uint64_t size;
	uint64_t offset;
	uint8_t id[16];
	char pci_bus_id[32]; /* NUL-terminated, e.g. "0000:1b:00.0" */
	uint8_t ipc_handle[KVC_WIRE_IPC_HANDLE_SIZE];
};
_Static_assert(sizeof(struct kvc_msg_iov_register_device) == 128, "");
/* reply of IOV_REGISTER(_DEVICE) and RING_REGISTER; body of both
 * DEREGISTERs */
struct kvc_msg_handle {
	uint32_t handle;
	uint32_t reserved;
};

/* FD_REGISTER: one fd (a dup of the client's open file); client_fd is the
 * number the client's ring entries will use. FD_DEREGISTER: no fd. */
struct kvc_msg_fd_register {
	int32_t client_fd;
	uint32_t flags;
};
struct kvc_msg_fd_register_reply {
	uint64_t ino;
	uint32_t access; /* O_RDONLY, O_WRONLY or O_RDWR */
	uint32_t reserved;
};

/* RING_REGISTER: one fd, the ring's shared memory (a sealed memfd); the
 * reply carries the ring's doorbell, made by kvc-fuse. The layout of the
 * shared memory is src/core/ring.h's. */
struct kvc_msg_ring_register {
	uint32_t entries;
	uint32_t for_read;
	int32_t io_depth;
	int32_t timeout_ms;
	int32_t priority;
	uint32_t reserved;
	uint64_t flags;
};
_Static_assert(sizeof(struct kvc_msg_ring_register) == 32, "");

/* Page pool messages. Every body starts with kvc_msg_pool, then the
 * namespace (ns_len bytes), then a key list where the message has keys:
 * count entries of (u32 length, bytes), unpadded (kvc_wire_keys_*).
 * POOL_CONFIRM adds count i64 pages, then release_count i64 pages, after
 * its keys. Replies:
 *   ALLOCATE   count kvc_msg_pool_allocation
 *   CONFIRM    count i32 statuses (0 or -ESTALE)
 *   EXISTS     count u8 (1: complete)
 *   LOCATIONS  count i64 pages (-1: not complete)
 *   DELETE     u64 deleted;  FSCK: i64 problems
 *   CLEAR      u64: 1 when keys remain (each request clears a bounded
 *              number; the client repeats)
 *   STATS      kvc_msg_pool_stats
 *   LIST       count kvc_msg_pool_entry (kvc_msg_count_reply first)
 *   KEYS       (request: count 0 or 1 key to start after, value = max)
 *              u32 count, u32 more, then count kvc_msg_pool_key_info
 *              each followed by its key bytes
 *   WAIT       (request: keys as EXISTS', value = timeout_ms, at most
 *              600000) count u8 (1: complete), sent when all are
 *              complete or at the timeout (status 0 either way: the 0
 *              flags name the keys still missing); -ECANCELED when the
 *              namespace was cleared meanwhile, -EBUSY when too many
 *              waits are in progress, -ENOENT for a namespace without
 *              pools */
struct kvc_msg_pool {
	uint32_t rank;
	uint32_t count;         /* keys */
	uint32_t ns_len;
	uint32_t value;         /* INIT: num_pages; WORLD: world size;
	                           LOCATIONS: lease_ms; CONFIRM: release_count;
	                           FSCK: 1 to repair; WAIT: timeout_ms */
	uint32_t world_size;    /* INIT */
	uint32_t reserved;
	uint64_t now_ms;        /* 0: the server's clock */
};
_Static_assert(sizeof(struct kvc_msg_pool) == 32, "");

struct kvc_msg_pool_allocation {
	int64_t page;
	uint32_t already;
	uint32_t reserved;
};

struct kvc_msg_pool_stats {
	uint32_t world_size;
	uint32_t ranks;
	uint64_t num_pages;
	uint64_t free_pages;
	uint64_t keys;
	uint64_t complete_keys;
	uint64_t leased_keys;
	uint64_t retired_keys;
	uint64_t evictions;
};
_Static_assert(sizeof(struct kvc_msg_pool_stats) == 64, "");

struct kvc_msg_pool_entry {
	char ns[64];
	uint32_t rank;
	uint32_t num_pages;
	uint32_t free_pages;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_pool_entry) == 80, "");

/* POOL_BIND: count 1 (the path of the file in the namespace, as the one
 * key) then one i64 page size; count 0 unbinds. POOL_BINDING's reply:
 * this, then path_length bytes. */
struct kvc_msg_pool_binding {
	uint64_t inode;
	uint64_t page_size;
	uint64_t punch_pending;
	uint32_t path_length;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_msg_pool_binding) == 32, "");

struct kvc_msg_pool_key_info {
	uint32_t length;
	uint32_t world;
	uint32_t confirmed;
	uint32_t complete;
	uint64_t lease_until_ms;
};
_Static_assert(sizeof(struct kvc_msg_pool_key_info) == 24, "");

/* A key list entry as decoded: points into the received body. */
struct kvc_wire_key {
	const char *bytes;
	uint32_t length;
};

/* Append count keys to buf (capacity cap) at *offset. -EMSGSIZE when
 * they do not fit. */
int kvc_wire_keys_encode(uint8_t *buf, uint32_t cap, uint32_t *offset,
                         const struct kvc_wire_key *keys, uint32_t count);

/* Decode count keys from a received body at *offset, each at most
 * max_length bytes. -EINVAL for a truncated or oversized list. */
int kvc_wire_keys_decode(const void *body, uint32_t body_len, uint32_t *offset,
                         struct kvc_wire_key *keys, uint32_t count, uint32_t max_length);

/* The frame being built or received. body points into a caller's buffer. */
struct kvc_wire_frame {
	struct kvc_wire_header header;
	void *body;
};

/* Fill a header for a request or reply. */
void kvc_wire_header_init(struct kvc_wire_header *h, uint16_t type,
                          uint64_t request_id, int32_t status,
                          uint32_t body_len, uint64_t data_len);

/* Check a received header against magic, version and limits.
 * Returns 0 or -EPROTO (bad magic/version), -EMSGSIZE (over a limit). */
int kvc_wire_header_check(const struct kvc_wire_header *h);

/* Send header, body and data iovecs in one sendmsg loop.
 * Returns 0, -ETIMEDOUT, -EPIPE or another -errno from send. */
int kvc_wire_send(int fd, const struct kvc_wire_header *h, const void *body,
                  const struct iovec *data, int data_count);

/* Receive and check a header, then the body into body_buf (capacity
 * body_cap). The data section is left on the socket for the caller.
 * Returns 0, -ECONNRESET (peer closed), -ETIMEDOUT, -EPROTO, -EMSGSIZE. */
int kvc_wire_recv(int fd, struct kvc_wire_header *h, void *body_buf,
                  size_t body_cap);

/* As kvc_wire_send, with fds passed as SCM_RIGHTS (Unix sockets only). */
/* Send a frame whose body and data are the parts, in order (their
 * lengths must add up to body_len + data_len). Returns as kvc_wire_send. */
int kvc_wire_send_parts(int fd, const struct kvc_wire_header *h, const struct iovec *parts,
                        int part_count);

int kvc_wire_send_fds(int fd, const struct kvc_wire_header *h, const void *body,
                      const int *fds, int fd_count);

/* Receive a header like the first step of kvc_wire_recv, collecting up to
 * KVC_WIRE_MAX_FDS passed fds into fds (*fd_count set; the caller owns
 * them). Returns 0 or -errno as kvc_wire_recv. */
int kvc_wire_recv_header_fds(int fd, struct kvc_wire_header *h, int *fds, int *fd_count);

/* Receive exactly len bytes (data sections). 0 or -errno as above. */
int kvc_wire_recv_exact(int fd, void *buf, size_t len);

/* Read and drop len bytes, for a data section the receiver refuses. */
int kvc_wire_discard(int fd, uint64_t len);

/* Borrow `len` bytes at *offset of a received body, advancing *offset.
 * Returns NULL when the body is too short: the message is malformed. */
const void *kvc_wire_body_take(const void *body, uint32_t body_len,
                               uint32_t *offset, uint32_t len);

/* Validate a name from the wire: 1..255 bytes, no '/', no NUL, not "." or
 * "..". Returns 0 or -EINVAL / -ENAMETOOLONG. */
int kvc_wire_name_check(const char *name, uint32_t len);

/* The hash of a watched object (WATCH_EVENTS' kind and id, and for
 * KVC_WATCH_NAME its name; an inode's name is ignored): kvc-meta's watch
 * table and kvc-fuse's recent events key objects by it. */
uint64_t kvc_wire_watch_hash(uint32_t kind, uint64_t id, const char *name, uint32_t name_len);

/* A short name for a message type, for logs. */
const char *kvc_wire_type_name(uint16_t type);

#endif
