/*
 * meta_client: typed calls to kvc-meta's namespace RPCs over a connection
 * pool. Each returns the server's answer (0 or -errno such as -ENOENT,
 * -EEXIST, -ENOTEMPTY) or -EIO when kvc-meta cannot be reached within the
 * cluster's timeouts. Thread-safe.
 */
#ifndef KVC_META_CLIENT_H
#define KVC_META_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/rpc.h"

struct kvc_meta_client {
	struct kvc_rpc_pool pool;
	/* SETATTR and EXTEND_SIZE may cut chunks on the storage servers inside
	 * kvc-meta, which with managers waits out a failed server (up to twice
	 * failure_timeout_ms): those two idempotent calls are sent again after
	 * a timeout for this long (0: never; clusters without managers). */
	int retry_ms;
	/* Run before a call (NULL: none): a kvc-fuse that makes files ahead of
	 * kvc-meta enters them first, so no call overtakes a create it depends
	 * on (fuse/early_creates.h). inos: the count (unaligned, little-endian)
	 * inode numbers of the only files the call concerns (GETATTR, SETATTR,
	 * EXTEND_SIZE, OPEN, CLOSE, CLOSE_MANY, xattrs, READLINK; LOOKUP and
	 * READDIR: their directory, whose files those are), or NULL and 0 for
	 * every call that changes names (all files made before it); RENEW,
	 * STATFS, INO_GRANT, INO_RETURN, ADOPT and REMOVE_MANY run without it. Its -errno fails
	 * the call. Set before the client is shared. */
	int (*before_call)(void *arg, const void *inos, uint32_t count);
	void *before_arg;
};

/* A page of directory entries as kvc-meta sent it; walk it with
 * kvc_meta_client_dirent_next. */
struct kvc_meta_dirents {
	uint32_t count;
	bool more;
	uint32_t body_len;
	uint32_t cursor;
	uint8_t body[KVC_WIRE_MAX_BODY];
};

int kvc_meta_client_init(struct kvc_meta_client *client, const struct kvc_config *config);
void kvc_meta_client_destroy(struct kvc_meta_client *client);

int kvc_meta_client_lookup(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, struct kvc_attr *attr);
/* Open sessions of client `id` (one per kvc-fuse): while a file is open
 * somewhere, removing its last name keeps its data (docs/architecture.md).
 * open returns the attributes, and is sent once more after a transport
 * error (sessions are a set: a second OPEN that lands is harmless);
 * renew says the client is alive (every second; one silent for [meta]
 * client_timeout_ms loses its sessions). */
int kvc_meta_client_open(struct kvc_meta_client *client, uint64_t ino,
                         const uint8_t id[KVC_WIRE_CLIENT_ID], struct kvc_attr *attr);
int kvc_meta_client_close(struct kvc_meta_client *client, uint64_t ino,
                          const uint8_t id[KVC_WIRE_CLIENT_ID]);
/* CLOSE of count (1 .. KVC_WIRE_MAX_CLOSES) files in one transaction. */
int kvc_meta_client_close_many(struct kvc_meta_client *client, const uint64_t *inos,
                               uint32_t count, const uint8_t id[KVC_WIRE_CLIENT_ID]);
/* renew: flags 0, or KVC_RENEW_REJOIN after reopening every file when a
 * renew answered -ESTALE (kvc-meta had dropped our sessions; it answers
 * -ESTALE again if it dropped them once more meanwhile). */
int kvc_meta_client_renew(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                          uint32_t flags);
int kvc_meta_client_getattr(struct kvc_meta_client *client, uint64_t ino,
                            struct kvc_attr *attr);
/* GETATTR that bypasses before_call (kvc-fuse's early-create sender asks
 * it about a file of its own ADOPT, which it cannot wait for); transport
 * errors as they are. */
int kvc_meta_client_getattr_unwaited(struct kvc_meta_client *client, uint64_t ino,
                                     struct kvc_attr *attr);
int kvc_meta_client_create(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                           bool exclusive, struct kvc_attr *attr);
/* CREATE that also opens, in kvc-meta's same transaction, a file it makes
 * (the session of client `id`, as kvc_meta_client_open); *created says
 * whether it did; an existing file (exclusive false) comes back unopened.
 * The group is gid unless the parent is setgid (then the parent's), here
 * and in mkdir (which also hands the setgid bit down) and mknod.
 * *parent_attr (may be NULL) gets the parent's attributes after it. */
int kvc_meta_client_create_open(struct kvc_meta_client *client, uint64_t parent,
                                const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                                bool exclusive, const uint8_t id[KVC_WIRE_CLIENT_ID],
                                struct kvc_attr *attr, bool *created,
                                struct kvc_attr *parent_attr);
int kvc_meta_client_mkdir(struct kvc_meta_client *client, uint64_t parent,
                          const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                          struct kvc_attr *attr);
/* mknod(2): mode carries the type (regular, fifo, socket, device). */
int kvc_meta_client_mknod(struct kvc_meta_client *client, uint64_t parent,
                          const char *name, uint32_t mode, uint64_t rdev, uint32_t uid,
                          uint32_t gid, struct kvc_attr *attr);
int kvc_meta_client_symlink(struct kvc_meta_client *client, uint64_t parent,
                            const char *name, const char *target, uint32_t uid,
                            uint32_t gid, struct kvc_attr *attr);
/* The target of symlink ino, NUL-terminated in out (cap bytes): its
 * length or -errno. */
int kvc_meta_client_readlink(struct kvc_meta_client *client, uint64_t ino, char *out,
                             uint32_t cap);
int kvc_meta_client_link(struct kvc_meta_client *client, uint64_t ino, uint64_t new_parent,
                         const char *name, struct kvc_attr *attr);
/* Extended attributes. get and list return the length kvc-meta has
 * (copied when it fits cap; -ERANGE when it does not); flags of set are
 * KVC_XATTR_CREATE / KVC_XATTR_REPLACE. */
int kvc_meta_client_setxattr(struct kvc_meta_client *client, uint64_t ino, const char *name,
                             const void *value, uint32_t value_len, uint32_t flags);
int kvc_meta_client_getxattr(struct kvc_meta_client *client, uint64_t ino, const char *name,
                             void *out, uint32_t cap);
int kvc_meta_client_listxattr(struct kvc_meta_client *client, uint64_t ino, char *out,
                              uint32_t cap);
int kvc_meta_client_removexattr(struct kvc_meta_client *client, uint64_t ino,
                                const char *name);
/* unlink, rmdir: *parent_attr (may be NULL) gets the parent's attributes
 * after the removal. */
int kvc_meta_client_unlink(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, struct kvc_attr *parent_attr);
int kvc_meta_client_rmdir(struct kvc_meta_client *client, uint64_t parent,
                          const char *name, struct kvc_attr *parent_attr);
int kvc_meta_client_rename(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, uint64_t new_parent, const char *new_name,
                           uint32_t flags);
/* Fetch up to max entries of ino after name `after` ("" for the start);
 * max | KVC_READDIR_WATCH: this client caches them (core/wire_meta.h). */
int kvc_meta_client_readdir(struct kvc_meta_client *client, uint64_t ino,
                            const char *after, uint32_t max, struct kvc_meta_dirents *out);
/* The next entry of a page: 1 and (name, name_len, attr), 0 at the end,
 * -EBADMSG for a malformed page. */
int kvc_meta_client_dirent_next(struct kvc_meta_dirents *page, const char **name,
                                uint32_t *name_len, struct kvc_attr *attr);
int kvc_meta_client_setattr(struct kvc_meta_client *client,
                            const struct kvc_msg_setattr *request, struct kvc_attr *attr);
/* WATCH_DIR: be told of every change of a name in directory ino for the
 * client's ttl (its connections said CLIENT_HELLO). 0, -ENOTDIR, -ENOENT,
 * -EOPNOTSUPP (a kvc-meta without watches), -EIO. */
int kvc_meta_client_watch_dir(struct kvc_meta_client *client, uint64_t ino);
int kvc_meta_client_extend(struct kvc_meta_client *client, uint64_t ino, uint64_t size,
                           struct kvc_attr *attr);
int kvc_meta_client_statfs(struct kvc_meta_client *client,
                           struct kvc_msg_statfs_reply *reply);
/* Everything kvc-meta acknowledged before is durable when this returns 0
 * (META_SYNC: a checkpoint of the namespace and the page pools). */
int kvc_meta_client_sync(struct kvc_meta_client *client);


/* Ring keys: one KEYS_* message (type) for m->count names of directory
 * m->parent (PUBLISH: each with its temp name and size). out gets each
 * name's result. Returns 0 (see out), -EINVAL, -EIO, or the server's
 * whole-message -errno. */
struct kvc_meta_keyname {
	const char *name; /* none for CREATE */
	uint32_t name_len;
	uint64_t temp;    /* PUBLISH: the temp's inode */
	uint64_t size;    /* PUBLISH */
};
int kvc_meta_client_keys(struct kvc_meta_client *client, uint16_t type,
                         const struct kvc_msg_keys *m, const struct kvc_meta_keyname *keys,
                         struct kvc_msg_key_result *out);

/* Early creates (fuse/early_creates.h): reserve count inode numbers for
 * client id (INO_GRANT), give them back when done (INO_RETURN: ranges
 * never used; *reclaimed: the others never entered), and enter count
 * files made with them in one transaction (ADOPT; out gets each one's
 * result; transport errors come back as they are, not as -EIO, so a
 * caller can pass a timeout on). All bypass before_call. */
int kvc_meta_client_ino_grant(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                              uint32_t count, struct kvc_msg_ino_grant_reply *out);
int kvc_meta_client_ino_return(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                               const struct kvc_msg_ino_range ranges[2], uint64_t *reclaimed);
struct kvc_meta_adoption {
	uint64_t parent;
	struct kvc_attr attr;
	uint32_t flags; /* KVC_ADOPT_OPEN */
	uint32_t name_len;
	const char *name;
};
int kvc_meta_client_adopt(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                          const struct kvc_meta_adoption *files, uint32_t count,
                          struct kvc_msg_key_result *out);
/* REMOVE_MANY: remove count names (1 .. KVC_WIRE_MAX_KEYS), each only while
 * it names the given inode, in one transaction; out gets each result.
 * Bypasses before_call; transport errors as they are. */
struct kvc_meta_removal {
	uint64_t parent, ino;
	uint32_t name_len;
	const char *name;
};
int kvc_meta_client_remove_many(struct kvc_meta_client *client,
                                const struct kvc_meta_removal *names, uint32_t count,
                                struct kvc_msg_key_result *out);

#endif
