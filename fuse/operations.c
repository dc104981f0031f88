/* operations: see operations.h; this file holds names, attributes and
 * the operation table (file_ops.c, dir_ops.c and xattr_ops.c the rest). */
#include "fuse/ops_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>

#include "core/clock.h"
#include "core/layout.h"
#include "core/log.h"


static void attr_to_stat(const struct kvc_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_rdev = (dev_t)a->rdev;
	st->st_size = (off_t)a->size;
	st->st_blksize = a->layout.chunk_size ? a->layout.chunk_size : 4096;
	/* Blocks as if fully allocated: chunk usage is not tracked per file. */
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_atim = (struct timespec){a->atime_ns / 1000000000, a->atime_ns % 1000000000};
	st->st_mtim = (struct timespec){a->mtime_ns / 1000000000, a->mtime_ns % 1000000000};
	st->st_ctim = (struct timespec){a->ctime_ns / 1000000000, a->ctime_ns % 1000000000};
}

/* An entry of attr, patched by what this client knows of the file's size
 * (inode_table.h; since: as kvc_inode_table_patch_attr). */
static void fill_entry(struct kvc_fuse *fs, uint64_t since, struct kvc_attr *attr,
                       struct fuse_entry_param *e)
{
	kvc_inode_table_patch_attr(fs->inodes, attr, since);
	memset(e, 0, sizeof(*e));
	e->ino = attr->ino;
	e->attr_timeout = fs->attr_timeout;
	e->entry_timeout = fs->attr_timeout;
	attr_to_stat(attr, &e->attr);
}

void kvc_fuse_fill_entry(struct kvc_fuse *fs, struct kvc_attr *attr, struct fuse_entry_param *e)
{
	fill_entry(fs, 0, attr, e);
}

struct kvc_meta_events_mark kvc_fuse_mark(struct kvc_fuse *fs)
{
	return kvc_meta_events_mark(fs->events);
}

void kvc_fuse_fill_entry_watched(struct kvc_fuse *fs, struct kvc_meta_events_mark mark,
                                 uint64_t parent, const char *name, struct kvc_attr *attr,
                                 struct fuse_entry_param *e)
{
	kvc_known_attrs_note(fs->known, attr);
	fill_entry(fs, mark.seq, attr, e);
	e->entry_timeout = kvc_meta_events_ttl(fs->events, mark, parent, name, 0);
	e->attr_timeout = kvc_meta_events_ttl(fs->events, mark, 0, NULL, attr->ino);
}

void kvc_fuse_reply_entry(fuse_req_t req, struct kvc_meta_events_mark mark, uint64_t parent,
                          const char *name, int rc, struct kvc_attr *attr)
{
	struct fuse_entry_param e;
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc);
		return;
	}
	kvc_fuse_fill_entry_watched(kvc_fuse_of(req), mark, parent, name, attr, &e);
	if (S_ISDIR(attr->mode)) /* the kernel's name of it from now on */
		kvc_dir_aliases_note(kvc_fuse_of(req)->aliases, attr->ino, parent, name,
		                     strlen(name));
	fuse_reply_entry(req, &e);
}

static void reply_attr(fuse_req_t req, struct kvc_meta_events_mark mark, int rc,
                       struct kvc_attr *attr)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct stat st;
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc);
		return;
	}
	kvc_inode_table_patch_attr(fs->inodes, attr, mark.seq);
	kvc_known_attrs_note(fs->known, attr); /* GETATTR's, SETATTR's answers */
	attr_to_stat(attr, &st);
	fuse_reply_attr(req, &st, kvc_meta_events_ttl(fs->events, mark, 0, NULL, attr->ino));
}

/* Names and attributes are cached for the events' ttl (meta_events.h):
 * kvc-meta tells us when another client changes them, a missing name
 * included (the key a prefill host writes next). */
static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	struct kvc_attr attr;
	/* A name known absent from a directory whose names are kept here. */
	double absent = kvc_dir_names_absent(fs->dir_names, parent, name);
	int rc = absent > 0 ? -ENOENT : kvc_meta_client_lookup(&fs->meta, parent, name, &attr);
	/* The answer's attributes may predate an entry about the inode still
	 * waiting here (a file made in the subdirectory found, a removal of
	 * another name of the file): enter it, ask again. */
	if (rc == 0 && kvc_early_creates_pending(fs->creates, attr.ino)) {
		rc = kvc_early_creates_settle(fs->creates, &attr.ino, 1);
		if (rc == 0)
			rc = kvc_meta_client_lookup(&fs->meta, parent, name, &attr);
	}
	if (rc == -ENOENT) {
		struct fuse_entry_param e = {
			.ino = 0, .entry_timeout = absent > 0 ? absent
			          : kvc_meta_events_ttl(fs->events, mark, parent, name, 0)};
		if (absent == 0)
			kvc_dir_names_missed(fs->dir_names, parent);
		fuse_reply_entry(req, &e);
		return;
	}
	/* What the kernel's entry names (an unlink of it may be early), unless
	 * the name changed since the request (then not known). */
	if (rc == 0)
		kvc_dir_names_named(fs->dir_names, parent, name, strlen(name),
		                    kvc_meta_events_ttl(fs->events, mark, parent, name, 0) > 0
		                    ? attr.ino : 0);
	kvc_fuse_reply_entry(req, mark, parent, name, rc, &attr);
}

/* The kernel forgets an inode whole when it evicts it (all its lookups at
 * once): a directory's noted name is no longer kept alive then. The
 * kernel also forgets a single answer it could not use, and a forget may
 * pass a newer lookup's note: the directory's name then goes unrenewed
 * until its next lookup, which is how every name was before
 * kvc_fuse_watch_dir_names. */
static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)nlookup;
	kvc_dir_aliases_forget(kvc_fuse_of(req)->aliases, ino);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_attr attr;
	struct stat st;
	(void)fi;
	/* What kvc-meta said of a file of ours, while still fresh (the kernel
	 * asks after each of our writes): no round trip. */
	double left = kvc_attr_cache_get(fs->attrs, fs->events, ino, &attr);
	if (left > 0) {
		kvc_inode_table_patch_attr(fs->inodes, &attr, 0);
		kvc_known_attrs_note(fs->known, &attr);
		attr_to_stat(&attr, &st);
		fuse_reply_attr(req, &st, left);
		return;
	}
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	int rc = kvc_meta_client_getattr(&fs->meta, ino, &attr);
	if (rc == 0 && (S_ISREG(attr.mode) || S_ISDIR(attr.mode)))
		kvc_attr_cache_put(fs->attrs, &attr, mark);
	/* A directory or special file removed while held here (fstat of an
	 * open one, stat of a removed working directory): its last
	 * attributes, nlink 0, as a local disk answers (known_attrs.h). */
	if (rc == -ENOENT && kvc_known_attrs_gone(fs->known, ino, &attr)) {
		attr_to_stat(&attr, &st);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	reply_attr(req, mark, rc, &attr);
}

static int64_t timespec_ns(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *st, int to_set,
                       struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_msg_setattr m = {.ino = ino};
	struct kvc_attr attr;
	(void)fi;
	if (to_set & FUSE_SET_ATTR_MODE)
		m.mask |= KVC_SETATTR_MODE, m.mode = st->st_mode;
	if (to_set & FUSE_SET_ATTR_UID)
		m.mask |= KVC_SETATTR_UID, m.uid = st->st_uid;
	if (to_set & FUSE_SET_ATTR_GID)
		m.mask |= KVC_SETATTR_GID, m.gid = st->st_gid;
	if (to_set & FUSE_SET_ATTR_SIZE)
		m.mask |= KVC_SETATTR_SIZE, m.size = (uint64_t)st->st_size;
	if (to_set & FUSE_SET_ATTR_ATIME)
		m.mask |= KVC_SETATTR_ATIME,
			m.atime_ns = to_set & FUSE_SET_ATTR_ATIME_NOW ? kvc_clock_wall_ns() : timespec_ns(st->st_atim);
	if (to_set & FUSE_SET_ATTR_MTIME)
		m.mask |= KVC_SETATTR_MTIME,
			m.mtime_ns = to_set & FUSE_SET_ATTR_MTIME_NOW ? kvc_clock_wall_ns() : timespec_ns(st->st_mtim);
	struct kvc_meta_events_mark mark;
	int rc = kvc_fuse_setattr(fs, &m, &attr, &mark);
	if (rc == 0 && (S_ISREG(attr.mode) || S_ISDIR(attr.mode)))
		kvc_attr_cache_put(fs->attrs, &attr, mark);
	else
		kvc_meta_events_changed_here(fs->events, ino); /* attr_cache.h */
	reply_attr(req, mark, rc, &attr);
}

uint32_t kvc_fuse_caller_gid(fuse_req_t req, const struct kvc_attr *parent)
{
	/* setgid directories hand their group down, as on local filesystems. */
	if (parent && (parent->mode & S_ISGID))
		return parent->gid;
	return fuse_req_ctx(req)->gid;
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	struct kvc_attr attr;
	uint32_t names = kvc_dir_names_begin(fs->dir_names, parent, name, strlen(name));
	/* kvc-meta hands a setgid parent's group and bit down. */
	int rc = kvc_meta_client_mkdir(&fs->meta, parent, name, mode, fuse_req_ctx(req)->uid,
	                               fuse_req_ctx(req)->gid, &attr);
	kvc_dir_names_end(fs->dir_names, names);
	kvc_meta_events_changed_here(fs->events, parent); /* attr_cache.h */
	kvc_fuse_reply_entry(req, mark, parent, name, rc, &attr);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	struct kvc_attr attr;
	uint32_t names = kvc_dir_names_begin(fs->dir_names, parent, name, strlen(name));
	int rc = kvc_meta_client_mknod(&fs->meta, parent, name, mode, (uint64_t)rdev,
	                               fuse_req_ctx(req)->uid, fuse_req_ctx(req)->gid, &attr);
	kvc_dir_names_end(fs->dir_names, names);
	kvc_meta_events_changed_here(fs->events, parent);
	kvc_fuse_reply_entry(req, mark, parent, name, rc, &attr);
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent,
                       const char *name)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	struct kvc_attr attr, dir;
	uint32_t names = kvc_dir_names_begin(fs->dir_names, parent, name, strlen(name));
	int rc = kvc_meta_client_getattr(&fs->meta, parent, &dir);
	if (rc == 0)
		rc = kvc_meta_client_symlink(&fs->meta, parent, name, target,
		                             fuse_req_ctx(req)->uid, kvc_fuse_caller_gid(req, &dir),
		                             &attr);
	kvc_dir_names_end(fs->dir_names, names);
	kvc_meta_events_changed_here(fs->events, parent);
	kvc_fuse_reply_entry(req, mark, parent, name, rc, &attr);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char target[KVC_WIRE_MAX_SYMLINK + 1];
	int rc = kvc_meta_client_readlink(&kvc_fuse_of(req)->meta, ino, target, sizeof(target));
	if (rc < 0)
		kvc_fuse_reply_error(req, rc);
	else
		fuse_reply_readlink(req, target);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent,
                    const char *new_name)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_attr attr;
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	kvc_attr_cache_forget(fs->attrs, fs->events); /* nlink */
	uint32_t names = kvc_dir_names_begin(fs->dir_names, new_parent, new_name, strlen(new_name));
	int rc = kvc_meta_client_link(&fs->meta, ino, new_parent, new_name, &attr);
	kvc_dir_names_end(fs->dir_names, names);
	kvc_meta_events_changed_here(fs->events, new_parent);
	kvc_meta_events_changed_here(fs->events, ino);
	kvc_fuse_reply_entry(req, mark, new_parent, new_name, rc, &attr);
}

/* unlink, rmdir. kvc-meta keeps a file removed while open anywhere (its
 * open sessions): unlink is just unlink, and the data stays until the last
 * close. The parent's attributes after it are kept, so the kernel's
 * permission check before the next removal in it (it drops the
 * directory's attributes now) costs no round trip (attr_cache.h). */
/* An unlink answered here (early_creates.h): the name's inode is known
 * (dir_names.h) and the parent's attributes are held; kvc-meta removes the
 * name in a batch, only while it still names that inode. -EAGAIN: ask
 * kvc-meta. */
static int remove_early(struct kvc_fuse *fs, uint64_t parent, const char *name)
{
	size_t len = strlen(name);
	struct kvc_attr dir;
	uint64_t ino = fs->creates ? kvc_dir_names_ino(fs->dir_names, parent, name, len) : 0;
	if (ino == 0 || kvc_attr_cache_get(fs->attrs, fs->events, parent, &dir) <= 0)
		return -EAGAIN;
	int rc = kvc_early_creates_remove(fs->creates, parent, name, ino);
	if (rc < 0)
		return rc;
	kvc_dir_names_named(fs->dir_names, parent, name, len, 0);
	/* The file's nlink and the parent's times change: no answer asked
	 * for before serves (attr_cache.h; the inode is known, so the other
	 * held answers stay), and the parent as it is now serves the
	 * kernel's permission check before the next removal. */
	kvc_meta_events_changed_here(fs->events, ino);
	kvc_meta_events_changed_here(fs->events, parent);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	dir.mtime_ns = dir.ctime_ns = kvc_clock_wall_ns();
	kvc_attr_cache_put(fs->attrs, &dir, mark);
	return 0;
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_attr after;
	if (!dir && remove_early(fs, parent, name) == 0) {
		kvc_fuse_reply_error(req, 0);
		return;
	}
	kvc_dir_names_named(fs->dir_names, parent, name, strlen(name), 0);
	kvc_meta_events_changed_here(fs->events, parent);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	int rc = dir ? kvc_meta_client_rmdir(&fs->meta, parent, name, &after)
	             : kvc_meta_client_unlink(&fs->meta, parent, name, &after);
	uint64_t forgot = kvc_attr_cache_forget(fs->attrs, fs->events); /* an nlink changed */
	if (rc == 0) /* the parent after our change: current as of that forget */
		kvc_attr_cache_put_own(fs->attrs, &after, mark, forgot);
	kvc_fuse_reply_error(req, rc);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, false);
}

/* Earlier versions renamed files removed while open into this directory;
 * what a crash left there goes at start (open sessions replaced it). */
void kvc_fuse_clean_orphans(struct kvc_fuse *fs)
{
	static struct kvc_meta_dirents page;
	uint64_t orphans;
	char prefix[80];
	snprintf(prefix, sizeof(prefix), "%s.", fs->host);
	struct kvc_attr root;
	if (kvc_meta_client_lookup(&fs->meta, FUSE_ROOT_ID, KVC_FUSE_ORPHANS, &root) < 0)
		return;
	orphans = root.ino;
	/* Collect first, then remove: removing while paging would skip some. */
	char (*names)[KVC_WIRE_MAX_NAME + 1] = malloc(4096 * sizeof(*names));
	int count = 0;
	char after[KVC_WIRE_MAX_NAME + 1] = "";
	int rc;
	do {
		rc = kvc_meta_client_readdir(&fs->meta, orphans, after, 512, &page);
		const char *name;
		uint32_t len;
		struct kvc_attr attr;
		while (rc == 0 && names && kvc_meta_client_dirent_next(&page, &name, &len, &attr) == 1) {
			memcpy(after, name, len);
			after[len] = '\0';
			if (count < 4096 && strncmp(after, prefix, strlen(prefix)) == 0)
				strcpy(names[count++], after);
		}
	} while (rc == 0 && page.more && count < 4096);
	for (int i = 0; i < count; i++)
		kvc_meta_client_unlink(&fs->meta, orphans, names[i], NULL);
	if (count)
		kvc_log_info("removed %d file(s) a previous run left unlinked but open", count);
	kvc_meta_client_rmdir(&fs->meta, FUSE_ROOT_ID, KVC_FUSE_ORPHANS, NULL); /* if empty */
	free(names);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, true);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t new_parent, const char *new_name, unsigned int flags)
{
	uint32_t kvc_flags = 0;
	if (flags & ~(unsigned)RENAME_NOREPLACE) {
		kvc_fuse_reply_error(req, -EINVAL); /* RENAME_EXCHANGE / WHITEOUT */
		return;
	}
	if (flags & RENAME_NOREPLACE)
		kvc_flags |= KVC_RENAME_NOREPLACE;
	struct kvc_dir_names *d = kvc_fuse_of(req)->dir_names;
	uint32_t names = kvc_dir_names_begin(d, new_parent, new_name, strlen(new_name));
	int rc = kvc_meta_client_rename(&kvc_fuse_of(req)->meta, parent, name, new_parent, new_name,
	                                kvc_flags);
	kvc_dir_names_end(d, names);
	kvc_dir_names_named(d, parent, name, strlen(name), 0); /* renamed away */
	if (rc == 0)
		kvc_dir_aliases_renamed(kvc_fuse_of(req)->aliases, parent, name, strlen(name),
		                        new_parent, new_name, strlen(new_name));
	/* ctime, a replaced file's nlink */
	kvc_attr_cache_forget(kvc_fuse_of(req)->attrs, kvc_fuse_of(req)->events);
	kvc_meta_events_changed_here(kvc_fuse_of(req)->events, parent);
	kvc_meta_events_changed_here(kvc_fuse_of(req)->events, new_parent);
	kvc_fuse_reply_error(req, rc);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_storage_space space;
	struct kvc_msg_statfs_reply names;
	struct statvfs st = {0};
	(void)ino;
	int rc = kvc_storage_client_space(&fs->storage, &space);
	if (rc == 0)
		rc = kvc_meta_client_statfs(&fs->meta, &names);
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc);
		return;
	}
	st.f_bsize = fs->config.chunk_size;
	st.f_frsize = 4096;
	st.f_blocks = space.total_bytes / st.f_frsize;
	/* df's "Avail" is what data may still take: the storage servers keep
	 * a reserve back for metadata (writes past it get ENOSPC). */
	st.f_bfree = space.free_bytes / st.f_frsize;
	st.f_bavail = space.avail_bytes / st.f_frsize;
	st.f_files = names.max_inodes;
	st.f_ffree = names.max_inodes - names.inodes;
	st.f_favail = st.f_ffree;
	st.f_namemax = KVC_WIRE_MAX_NAME;
	fuse_reply_statfs(req, &st);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct kvc_fuse *fs = userdata;
	conn->max_write = 1u << 20;
	conn->max_read = 1u << 20;
	/* The kernel keeps min(this, the mount's read_ahead_kb): main raised
	 * the latter before the loop started. */
	if (fs->config.readahead_kb > 0)
		conn->max_readahead = (unsigned)fs->config.readahead_kb * 1024u;
	conn->want |= FUSE_CAP_ASYNC_READ;
	/* Room for many readahead and direct I/O requests in flight. */
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	/* A symlink's target never changes: the kernel may keep it. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	/* Write-through: every write reaches the storage servers before the
	 * syscall returns, so a closed file is complete for every client. */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* Page cache: kept across opens while kvc-meta says the file is as we
	 * last saw it (file_ops.c), dropped by kvc-meta's change events
	 * (meta_events.h). Not dropped when a GETATTR shows a new mtime: our
	 * own close commits one after our writes filled the cache. */
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
}

const struct fuse_lowlevel_ops kvc_fuse_operations = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mkdir = op_mkdir,
	.mknod = op_mknod,
	.symlink = op_symlink,
	.readlink = op_readlink,
	.link = op_link,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.create = kvc_fuse_op_create,
	.open = kvc_fuse_op_open,
	.read = kvc_fuse_op_read,
	.write = kvc_fuse_op_write,
	.flush = kvc_fuse_op_flush,
	.fsync = kvc_fuse_op_fsync,
	.fsyncdir = kvc_fuse_op_fsyncdir,
	.release = kvc_fuse_op_release,
	.opendir = kvc_fuse_op_opendir,
	.readdirplus = kvc_fuse_op_readdirplus,
	.releasedir = kvc_fuse_op_releasedir,
	.statfs = op_statfs,
	.getxattr = kvc_fuse_op_getxattr,
	.listxattr = kvc_fuse_op_listxattr,
	.setxattr = kvc_fuse_op_setxattr,
	.removexattr = kvc_fuse_op_removexattr,
	.fallocate = kvc_fuse_op_fallocate,
};
