/*
 * ops_internal: what kvc-fuse's operation files share (operations.c:
 * names, attributes and the operation table; file_ops.c: open files,
 * their I/O, the open-session lease; dir_ops.c: directory listing;
 * xattr_ops.c: extended attributes). Private to kvc-fuse.
 */
#ifndef KVC_FUSE_OPS_INTERNAL_H
#define KVC_FUSE_OPS_INTERNAL_H

#include "fuse/meta_events.h"
#include "fuse/operations.h"

static inline struct kvc_fuse *kvc_fuse_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The one place -errno becomes FUSE's positive errno. */
static inline void kvc_fuse_reply_error(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? -rc : rc);
}

/* An entry (lookup, create, mkdir, ...) for attr, with this client's
 * knowledge of an open file's size applied. */
void kvc_fuse_fill_entry(struct kvc_fuse *fs, struct kvc_attr *attr,
                         struct fuse_entry_param *e);
/* The same for an answer kvc-meta gave after mark about (parent, name),
 * cached for as long as kvc-meta's events allow (meta_events.h). */
struct kvc_meta_events_mark kvc_fuse_mark(struct kvc_fuse *fs);
void kvc_fuse_fill_entry_watched(struct kvc_fuse *fs, struct kvc_meta_events_mark mark,
                                 uint64_t parent, const char *name, struct kvc_attr *attr,
                                 struct fuse_entry_param *e);
void kvc_fuse_reply_entry(fuse_req_t req, struct kvc_meta_events_mark mark, uint64_t parent,
                          const char *name, int rc, struct kvc_attr *attr);
/* The group of a new entry: a setgid directory's, else the caller's. */
uint32_t kvc_fuse_caller_gid(fuse_req_t req, const struct kvc_attr *parent);

/* file_ops.c: send ino's dirty size to kvc-meta (0 when clean). */
int kvc_fuse_commit_size(struct kvc_fuse *fs, uint64_t ino);
/* file_ops.c: this client's setattr of m->ino (chmod, utimes, truncate,
 * open(O_TRUNC)) sent to kvc-meta. A dirty size is committed first, so
 * none races it; a size change marks the inode changed here before it
 * goes (kvc_fuse_learnt below), waits for a size commit in flight
 * (another thread's, which would undo it) and is learnt from kvc-meta's
 * answer. *mark (may be NULL) is taken before anything is sent, for
 * caching the answer. */
int kvc_fuse_setattr(struct kvc_fuse *fs, const struct kvc_msg_setattr *m,
                     struct kvc_attr *attr, struct kvc_meta_events_mark *mark);
/* This client's size of ino is kvc-meta's as of now (an open, a commit,
 * a truncate answered): an answer asked for before now only raises it.
 * (A size change made here also calls kvc_meta_events_changed_here
 * before it asks kvc-meta, so that what was asked for before it, a
 * listing's page say, is not cached.) */
static inline void kvc_fuse_learnt(struct kvc_fuse *fs, uint64_t ino)
{
	kvc_inode_table_learnt(fs->inodes, ino, kvc_meta_events_tick(fs->events));
}
/* Layout and size of a file open here (kvc_inode_table_get), the size
 * asked of kvc-meta first when another client changed the file since
 * (kvc_inode_table_changed_since). Inline: the ring service (linked
 * without the operations in the fuzz harnesses) reads through it too. */
static inline int kvc_fuse_open_file(struct kvc_fuse *fs, uint64_t ino,
                                     struct kvc_layout *layout, uint64_t *size)
{
	if (kvc_inode_table_changed_since(fs->inodes, ino)) {
		struct kvc_meta_events_mark mark = kvc_meta_events_mark(fs->events);
		struct kvc_attr attr;
		if (kvc_meta_client_getattr(&fs->meta, ino, &attr) == 0)
			kvc_inode_table_patch_attr(fs->inodes, &attr, mark.seq);
	}
	return kvc_inode_table_get(fs->inodes, ino, layout, size);
}

void kvc_fuse_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                        struct fuse_file_info *fi);
void kvc_fuse_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvc_fuse_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi);
void kvc_fuse_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                       off_t off, struct fuse_file_info *fi);
void kvc_fuse_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvc_fuse_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                       struct fuse_file_info *fi);
void kvc_fuse_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                          struct fuse_file_info *fi);
void kvc_fuse_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvc_fuse_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
                           off_t length, struct fuse_file_info *fi);

/* dir_ops.c */
void kvc_fuse_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvc_fuse_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                             struct fuse_file_info *fi);
void kvc_fuse_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* xattr_ops.c */
void kvc_fuse_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void kvc_fuse_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void kvc_fuse_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                          const char *value, size_t size, int flags);
void kvc_fuse_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif
