/*
 * dir_aliases: the name under which kvc-fuse last gave the kernel each
 * directory, so that the kernel drops an old name of a directory another
 * client moved.
 *
 * Why: a directory inode has one dentry in the kernel. The kernel keeps a
 * dentry past its entry timeout (it only looks again at the next use),
 * and kvc-meta's watch of the name lapses a ttl and a margin after this
 * client last asked (meta/watches.h): a directory another client moved
 * after that leaves its old name in this client's dcache, unannounced.
 * When a lookup inside a rename across directories then meets the
 * directory under its new name, the kernel cannot move the old dentry
 * while the rename holds the filesystem's rename lock, and the rename
 * fails with ESTALE (VFS __d_unalias), again at every retry.
 *
 * So every entry given to the kernel for a directory (LOOKUP and MKDIR
 * answers, READDIRPLUS entries sent with their inode) is noted here, and
 * this client's own renames move what was noted (the kernel moves its
 * dentry without asking); one that names a directory under another
 * (parent, name) than the last one noted queues the old name to be dropped
 * (fuse_lowlevel_notify_inval_entry) by this module's thread: never from
 * the request itself, whose parent may be locked by the very rename
 * waiting for the answer. That rename may still fail once (the kernel's
 * own retry comes at once, often before the drop); the caller's next try
 * finds the old name gone. Not when the old dentry is pinned (a process's
 * working directory inside it, a file open under it): the kernel only
 * unhashes it then, and renames meeting the directory fail until a
 * lookup of its new name outside a rename moves the dentry. A drop is
 * what a removal of the old name would do: a mount under it is detached.
 *
 * Mostly, though, the old name goes before any rename meets it: the
 * names noted here are asked of kvc-meta again every half ttl
 * (kvc_fuse_watch_dir_names, from kvc_dir_aliases_list), which keeps
 * their watches alive, so another client's move comes as an event and
 * the event drops the old name; a name found no longer naming its
 * directory is dropped then (kvc_dir_aliases_drop). A directory the
 * kernel forgot (FORGET) is no longer noted (kvc_dir_aliases_forget).
 *
 * The table is direct-mapped (a slot taken by another directory only
 * forgets a name: as without this module), the queue bounded (a full one
 * drops the oldest name: the same). Thread-safe: one mutex, a leaf (no
 * call into the kernel or kvc-meta under it).
 */
#ifndef KVC_FUSE_DIR_ALIASES_H
#define KVC_FUSE_DIR_ALIASES_H

#include <stddef.h>
#include <stdint.h>

#include "core/wire.h"

struct fuse_session;
struct kvc_dir_aliases;

/* *session is read by the thread at each drop (NULL: not mounted yet,
 * nothing dropped). Returns 0 or -errno. */
int kvc_dir_aliases_start(struct fuse_session *const *session, struct kvc_dir_aliases **out);
/* Stops the thread (drops not made yet are forgotten) and frees. */
void kvc_dir_aliases_stop(struct kvc_dir_aliases *aliases);

/* kvc-fuse answers the kernel that directory ino is name in parent. */
void kvc_dir_aliases_note(struct kvc_dir_aliases *aliases, uint64_t ino, uint64_t parent,
                          const char *name, size_t len);

/* This client renamed (parent, name) to (new_parent, new_name): the
 * kernel moved its dentry itself (no entry answered), so a directory
 * noted under the old name is under the new one now. */
void kvc_dir_aliases_renamed(struct kvc_dir_aliases *aliases, uint64_t parent, const char *name,
                             size_t len, uint64_t new_parent, const char *new_name,
                             size_t new_len);

/* The kernel forgot directory ino (FORGET): its name is not noted any
 * more (a slot holding another inode is left). */
void kvc_dir_aliases_forget(struct kvc_dir_aliases *aliases, uint64_t ino);

/* A noted directory, copied out. */
struct kvc_dir_alias {
	uint64_t ino, parent;
	uint16_t len;
	char name[KVC_WIRE_MAX_NAME + 1];
};

/* Copy out up to max noted directories from slot *cursor on, and move
 * *cursor past them (0: the table's end was reached). Returns the count.
 * What keeps the names' watches in kvc-meta alive (kvc_fuse_watch_dir_names
 * asks each name again every half ttl, so another client's move of a
 * directory this kernel holds comes as an event, which drops the old name
 * before any rename meets it). */
int kvc_dir_aliases_list(struct kvc_dir_aliases *aliases, uint32_t *cursor,
                         struct kvc_dir_alias *out, int max);

/* alias (as listed) no longer names its directory in kvc-meta, which
 * names now_ino there (0: nothing): alias is forgotten here, and its
 * name queued to be dropped from the kernel, unless now_ino is noted
 * under that very name (given to the kernel so: that entry is right).
 * Nothing when a newer name of the directory was noted since listed. */
void kvc_dir_aliases_drop(struct kvc_dir_aliases *aliases, const struct kvc_dir_alias *alias,
                          uint64_t now_ino);

/* Old names queued and dropped since start (tests, metrics). */
uint64_t kvc_dir_aliases_dropped(struct kvc_dir_aliases *aliases);

#endif
