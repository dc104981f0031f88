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
 * Bodies are packed structs (fuse_kernel.h style), one header per family of
 * messages, included below: wire_meta.h (namespace, ring keys), wire_storage.h
 * (chunks, placement, resync, space), wire_mgmt.h (routing table, manager),
 * wire_control.h (USRBIO control), wire_pool.h (page pools). Sizes are fixed
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
 *      Later, with the version unchanged: META_SYNC (54), and RENEW's ino
 *      carries flags (KVC_RENEW_REJOIN).
 *   3  connections authenticate: HELLO carries a role and a client nonce
 *      instead of a token; new AUTH (HMAC-SHA256 proofs both ways). The
 *      page-pool secret opens a connection for page-pool messages only.
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
 *   16 PLACE_READ's pieces name their places as spans (a piece may go to
 *      several places: a ring key's segments, one piece a chunk instead
 *      of one a segment); its word after `count` is the span count.
 *   17 a page pool's read lease is shared by its readers and named:
 *      POOL_LOCATIONS replies with each key's lease number (u32) after
 *      the pages; POOL_RELEASE_LEASES carries them back (as i64) and
 *      replies whether each lease was still held (u8).
 *   18 ring keys' temps are nameless files their kvc-fuse has open:
 *      kvc_msg_keys carries the client (48 bytes, was 32), KEYS_CREATE
 *      has no records and KEYS_PUBLISH names its temp by inode.
 *   19 kvc-meta keeps a plain OPEN's session in memory: RENEW answers
 *      -EREMCHG to a client that has not opened its files again (and
 *      renewed with KVC_RENEW_REJOIN) since kvc-meta started.
 *   20 PLACE_LOCAL (84): a same-host client asks for a target's
 *      directory and change counters (two fds) and reads that target's
 *      chunks itself, checking their crcs (src/client/transport_local.c).
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
#define KVC_WIRE_VERSION 20
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
	KVC_MSG_PLACE_LOCAL = 84,
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

/* The messages' bodies, by the daemon that serves them. */
#include "core/wire_meta.h"
#include "core/wire_storage.h"
#include "core/wire_mgmt.h"
#include "core/wire_control.h"
#include "core/wire_pool.h"

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
