/* operations: see operations.h. */
#include "fuse/operations.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>

#include "core/layout.h"
#include "core/log.h"

#define XATTR_LAYOUT "user.kvc.layout"
#define XATTR_INODE "user.kvc.inode"
#define XATTR_USRBIO "user.kvc.usrbio"
#define READDIR_PAGE 512

static struct kvc_fuse *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void reply_error(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? -rc : rc);
}

static void attr_to_stat(const struct kvc_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = a->layout.chunk_size ? a->layout.chunk_size : 4096;
	/* Blocks as if fully allocated: chunk usage is not tracked per file. */
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_atim = (struct timespec){a->atime_ns / 1000000000, a->atime_ns % 1000000000};
	st->st_mtim = (struct timespec){a->mtime_ns / 1000000000, a->mtime_ns % 1000000000};
	st->st_ctim = (struct timespec){a->ctime_ns / 1000000000, a->ctime_ns % 1000000000};
}

static void fill_entry(struct kvc_fuse *fs, struct kvc_attr *attr, struct fuse_entry_param *e)
{
	kvc_inode_table_patch_attr(fs->inodes, attr);
	memset(e, 0, sizeof(*e));
	e->ino = attr->ino;
	e->attr_timeout = fs->attr_timeout;
	e->entry_timeout = fs->attr_timeout;
	attr_to_stat(attr, &e->attr);
}

static void reply_entry(fuse_req_t req, int rc, struct kvc_attr *attr)
{
	struct fuse_entry_param e;
	if (rc < 0) {
		reply_error(req, rc);
		return;
	}
	fill_entry(fs_of(req), attr, &e);
	fuse_reply_entry(req, &e);
}

static void reply_attr(fuse_req_t req, int rc, struct kvc_attr *attr)
{
	struct stat st;
	if (rc < 0) {
		reply_error(req, rc);
		return;
	}
	kvc_inode_table_patch_attr(fs_of(req)->inodes, attr);
	attr_to_stat(attr, &st);
	fuse_reply_attr(req, &st, fs_of(req)->attr_timeout);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvc_attr attr;
	int rc = kvc_meta_client_lookup(&fs_of(req)->meta, parent, name, &attr);
	if (rc == -ENOENT) {
		/* A negative entry the kernel may cache briefly. */
		struct fuse_entry_param e = {.ino = 0, .entry_timeout = fs_of(req)->attr_timeout};
		fuse_reply_entry(req, &e);
		return;
	}
	reply_entry(req, rc, &attr);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino, (void)nlookup;
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_attr attr;
	(void)fi;
	reply_attr(req, kvc_meta_client_getattr(&fs_of(req)->meta, ino, &attr), &attr);
}

static int64_t timespec_ns(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return timespec_ns(ts);
}

/* Commit a dirty size first, so a truncate or chmod never races it. */
static int commit_size(struct kvc_fuse *fs, uint64_t ino)
{
	uint64_t size;
	struct kvc_attr attr;
	if (!kvc_inode_table_take_dirty(fs->inodes, ino, &size))
		return 0;
	int rc = kvc_meta_client_extend(&fs->meta, ino, size, &attr);
	if (rc == 0)
		kvc_inode_table_committed(fs->inodes, ino, size);
	return rc;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *st, int to_set,
                       struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
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
			m.atime_ns = to_set & FUSE_SET_ATTR_ATIME_NOW ? now_ns() : timespec_ns(st->st_atim);
	if (to_set & FUSE_SET_ATTR_MTIME)
		m.mask |= KVC_SETATTR_MTIME,
			m.mtime_ns = to_set & FUSE_SET_ATTR_MTIME_NOW ? now_ns() : timespec_ns(st->st_mtim);
	int rc = commit_size(fs, ino);
	if (rc == 0)
		rc = kvc_meta_client_setattr(&fs->meta, &m, &attr);
	if (rc == 0 && (m.mask & KVC_SETATTR_SIZE))
		kvc_inode_table_set_size(fs->inodes, ino, attr.size);
	reply_attr(req, rc, &attr);
}

/* Raise the committed size of ino to at least size. */
static int extend_to(struct kvc_fuse *fs, uint64_t ino, uint64_t size)
{
	struct kvc_msg_setattr m = {.ino = ino, .mask = KVC_SETATTR_SIZE, .size = size};
	struct kvc_attr attr;
	int rc = commit_size(fs, ino);
	if (rc == 0)
		rc = kvc_meta_client_getattr(&fs->meta, ino, &attr);
	if (rc == 0 && attr.size < size)
		rc = kvc_meta_client_setattr(&fs->meta, &m, &attr);
	if (rc == 0)
		kvc_inode_table_set_size(fs->inodes, ino, attr.size);
	return rc;
}

/* fallocate: punching holes returns the chunks' space (fallocate -p,
 * hf3fs_punchhole); plain allocation only sets the size, since chunks are
 * allocated when written. Other modes: EOPNOTSUPP. */
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_layout layout;
	uint64_t size;
	(void)fi;
	int rc = offset < 0 || length <= 0 ? -EINVAL
	       : kvc_inode_table_get(fs->inodes, ino, &layout, &size);
	if (rc == 0 && mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		rc = kvc_storage_client_punch(&fs->storage, ino, &layout, (uint64_t)offset,
		                              (uint64_t)length, size);
	else if (rc == 0 && mode == 0)
		rc = (uint64_t)offset + (uint64_t)length > size
		   ? extend_to(fs, ino, (uint64_t)offset + (uint64_t)length) : 0;
	else if (rc == 0 && mode != FALLOC_FL_KEEP_SIZE)
		rc = -EOPNOTSUPP;
	reply_error(req, rc);
}

static uint32_t caller_gid(fuse_req_t req, struct kvc_attr *parent)
{
	/* setgid directories hand their group down, as on local filesystems. */
	if (parent && (parent->mode & S_ISGID))
		return parent->gid;
	return fuse_req_ctx(req)->gid;
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_attr attr, dir;
	int rc = kvc_meta_client_getattr(&fs->meta, parent, &dir);
	if (rc == 0)
		rc = kvc_meta_client_mkdir(&fs->meta, parent, name, mode, fuse_req_ctx(req)->uid,
		                           caller_gid(req, &dir), &attr);
	reply_entry(req, rc, &attr);
}

/* kvc-meta keeps a file removed while open anywhere (its open sessions):
 * unlink is just unlink, and the data stays until the last close. */
static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_error(req, kvc_meta_client_unlink(&fs_of(req)->meta, parent, name));
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
		kvc_meta_client_unlink(&fs->meta, orphans, names[i]);
	if (count)
		kvc_log_info("removed %d file(s) a previous run left unlinked but open", count);
	kvc_meta_client_rmdir(&fs->meta, FUSE_ROOT_ID, KVC_FUSE_ORPHANS); /* fails while not empty */
	free(names);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	reply_error(req, kvc_meta_client_rmdir(&fs_of(req)->meta, parent, name));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t new_parent, const char *new_name, unsigned int flags)
{
	uint32_t kvc_flags = 0;
	if (flags & ~(unsigned)RENAME_NOREPLACE) {
		reply_error(req, -EINVAL); /* RENAME_EXCHANGE / WHITEOUT */
		return;
	}
	if (flags & RENAME_NOREPLACE)
		kvc_flags |= KVC_RENAME_NOREPLACE;
	reply_error(req, kvc_meta_client_rename(&fs_of(req)->meta, parent, name, new_parent,
	                                        new_name, kvc_flags));
}

static void set_open_flags(struct fuse_file_info *fi)
{
	/* Mutable files: no page cache kept across opens, so every open sees
	 * what other clients wrote and closed. */
	fi->keep_cache = 0;
	fi->direct_io = 0;
}

/* Open a file here: an open session with kvc-meta (so a removal anywhere
 * keeps its data while it is open here), then the inode table. */
static pthread_mutex_t *session_lock(struct kvc_fuse *fs, uint64_t ino)
{
	return &fs->session_locks[ino % (sizeof(fs->session_locks) / sizeof(fs->session_locks[0]))];
}

static int open_inode(struct kvc_fuse *fs, uint64_t ino, struct kvc_attr *attr)
{
	pthread_mutex_lock(session_lock(fs, ino));
	int rc = kvc_meta_client_open(&fs->meta, ino, fs->client_id, attr);
	if (rc == 0 && S_ISDIR(attr->mode))
		rc = -EISDIR;
	if (rc == 0)
		rc = kvc_inode_table_open(fs->inodes, attr);
	if (rc < 0 && rc != -EISDIR && rc != -ENOENT && !kvc_inode_table_is_open(fs->inodes, ino))
		kvc_meta_client_close(&fs->meta, ino, fs->client_id);
	pthread_mutex_unlock(session_lock(fs, ino));
	return rc;
}

/* The last close here of a file ends its open session (a file removed
 * meanwhile goes when no client has it open). */
static void close_inode(struct kvc_fuse *fs, uint64_t ino)
{
	pthread_mutex_lock(session_lock(fs, ino));
	kvc_inode_table_release(fs->inodes, ino);
	int rc = kvc_inode_table_is_open(fs->inodes, ino) ? 0
	       : kvc_meta_client_close(&fs->meta, ino, fs->client_id);
	pthread_mutex_unlock(session_lock(fs, ino));
	if (rc < 0 && rc != -ENOENT) {
		kvc_log_warn("close of inode %" PRIu64 ": %s; will retry", ino, strerror(-rc));
		pthread_mutex_lock(&fs->closes_lock);
		if (fs->pending_close_count < (int)(sizeof(fs->pending_closes) / 8))
			fs->pending_closes[fs->pending_close_count++] = ino;
		pthread_mutex_unlock(&fs->closes_lock); /* beyond: kept until we exit */
	}
}

/* kvc-meta dropped our sessions (we were silent past its timeout): open
 * every file again; one that is gone meanwhile turns stale, so its reads
 * fail with ESTALE instead of returning holes. */
static void reopen_all(struct kvc_fuse *fs)
{
	uint64_t inos[1024];
	int count = kvc_inode_table_list_open(fs->inodes, inos, 1024);
	kvc_log_warn("kvc-meta had given this client up (silent too long): reopening %d file(s)",
	             count);
	for (int i = 0; i < count; i++) {
		struct kvc_attr attr;
		pthread_mutex_lock(session_lock(fs, inos[i]));
		int rc = kvc_inode_table_is_open(fs->inodes, inos[i])
		       ? kvc_meta_client_open(&fs->meta, inos[i], fs->client_id, &attr) : 0;
		if (rc == -ENOENT) {
			kvc_inode_table_mark_stale(fs->inodes, inos[i]);
			kvc_log_warn("inode %" PRIu64 " was removed meanwhile: its I/O fails with ESTALE",
			             inos[i]);
		}
		pthread_mutex_unlock(session_lock(fs, inos[i]));
	}
}

/* Retry the CLOSEs kvc-meta missed (files reopened since need none). */
static void retry_closes(struct kvc_fuse *fs)
{
	pthread_mutex_lock(&fs->closes_lock);
	for (int i = 0; i < fs->pending_close_count;) {
		uint64_t ino = fs->pending_closes[i];
		pthread_mutex_lock(session_lock(fs, ino));
		int rc = kvc_inode_table_is_open(fs->inodes, ino) ? 0
		       : kvc_meta_client_close(&fs->meta, ino, fs->client_id);
		pthread_mutex_unlock(session_lock(fs, ino));
		if (rc < 0 && rc != -ENOENT) {
			i++;
			continue;
		}
		fs->pending_closes[i] = fs->pending_closes[--fs->pending_close_count];
	}
	pthread_mutex_unlock(&fs->closes_lock);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_attr attr, dir;
	struct fuse_entry_param e;
	int rc = kvc_meta_client_getattr(&fs->meta, parent, &dir);
	if (rc == 0)
		rc = kvc_meta_client_create(&fs->meta, parent, name, mode, fuse_req_ctx(req)->uid,
		                            caller_gid(req, &dir), (fi->flags & O_EXCL) != 0, &attr);
	if (rc == 0)
		rc = open_inode(fs, attr.ino, &attr);
	if (rc < 0) {
		reply_error(req, rc);
		return;
	}
	set_open_flags(fi);
	fill_entry(fs, &attr, &e);
	if (fuse_reply_create(req, &e, fi) != 0)
		close_inode(fs, attr.ino);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_attr attr;
	int rc = open_inode(fs, ino, &attr);
	if (rc < 0) {
		reply_error(req, rc);
		return;
	}
	set_open_flags(fi);
	if (fuse_reply_open(req, fi) != 0)
		close_inode(fs, ino);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_layout layout;
	uint64_t file_size;
	(void)fi;
	int rc = kvc_fuse_check_lease(fs);
	if (rc == 0)
		rc = kvc_inode_table_get(fs->inodes, ino, &layout, &file_size);
	if (rc < 0 || off < 0) {
		reply_error(req, rc == -ESTALE || rc == -EIO ? rc : rc < 0 ? -EBADF : -EINVAL);
		return;
	}
	if ((uint64_t)off >= file_size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > file_size - (uint64_t)off)
		size = (size_t)(file_size - (uint64_t)off);
	void *buf = malloc(size);
	rc = buf ? kvc_storage_client_read(&fs->storage, ino, &layout, (uint64_t)off, size, buf)
	         : -ENOMEM;
	if (rc == 0)
		fuse_reply_buf(req, buf, size);
	else
		reply_error(req, rc);
	free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_layout layout;
	uint64_t file_size;
	(void)fi;
	int rc = kvc_fuse_check_lease(fs);
	if (rc == 0)
		rc = kvc_inode_table_get(fs->inodes, ino, &layout, &file_size);
	if (rc == 0 && off < 0)
		rc = -EINVAL;
	if (rc == 0)
		rc = kvc_storage_client_write(&fs->storage, ino, &layout, (uint64_t)off, size, buf);
	if (rc < 0) {
		reply_error(req, rc == -ENOENT ? -EBADF : rc);
		return;
	}
	kvc_inode_table_wrote(fs->inodes, ino, (uint64_t)off + size);
	fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	reply_error(req, commit_size(fs_of(req), ino));
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_layout layout;
	uint64_t size;
	(void)datasync, (void)fi;
	int rc = kvc_inode_table_get(fs->inodes, ino, &layout, &size);
	if (rc == 0)
		rc = kvc_storage_client_sync(&fs->storage, &layout);
	if (rc == 0)
		rc = commit_size(fs, ino);
	reply_error(req, rc);
}

int kvc_fuse_hold_inode(struct kvc_fuse *fs, uint64_t ino)
{
	struct kvc_attr attr;
	return open_inode(fs, ino, &attr);
}

void kvc_fuse_drop_inode(struct kvc_fuse *fs, uint64_t ino)
{
	int rc = commit_size(fs, ino);
	if (rc < 0)
		kvc_log_warn("inode %" PRIu64 ": size not committed yet: %s", ino, strerror(-rc));
	close_inode(fs, ino);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	(void)fi;
	int rc = commit_size(fs, ino);
	if (rc < 0)
		kvc_log_warn("release of inode %" PRIu64 ": size not committed yet: %s",
		             (uint64_t)ino, strerror(-rc));
	close_inode(fs, ino);
	reply_error(req, 0);
}

/* A directory handle: the current page of entries and where it starts, so
 * sequential readdir continues by name and a seek back restarts. */
struct dir_handle {
	pthread_mutex_t lock;
	struct kvc_meta_dirents *page;
	off_t page_start; /* offset of the page's first entry */
	uint32_t page_count;
	bool loaded;
	char last_name[KVC_WIRE_MAX_NAME + 1];
};

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_attr attr;
	int rc = kvc_meta_client_getattr(&fs_of(req)->meta, ino, &attr);
	if (rc == 0 && !S_ISDIR(attr.mode))
		rc = -ENOTDIR;
	struct dir_handle *d = rc == 0 ? calloc(1, sizeof(*d)) : NULL;
	if (rc == 0 && !d)
		rc = -ENOMEM;
	if (rc < 0) {
		reply_error(req, rc);
		return;
	}
	pthread_mutex_init(&d->lock, NULL);
	fi->fh = (uint64_t)(uintptr_t)d;
	if (fuse_reply_open(req, fi) != 0) {
		pthread_mutex_destroy(&d->lock);
		free(d);
	}
}

/* Load the page that holds entry offset `off` (0-based index). */
static int load_page(struct kvc_fuse *fs, fuse_ino_t ino, struct dir_handle *d, off_t off)
{
	if (!d->page) {
		d->page = malloc(sizeof(*d->page));
		if (!d->page)
			return -ENOMEM;
	}
	if (!d->loaded || off < d->page_start) {
		d->page_start = 0;
		d->last_name[0] = '\0';
		d->loaded = false;
	}
	for (;;) {
		if (d->loaded && off < d->page_start + (off_t)d->page_count)
			return 0;
		if (d->loaded && !d->page->more)
			return 0; /* off is past the end */
		off_t next_start = d->loaded ? d->page_start + d->page_count : 0;
		int rc = kvc_meta_client_readdir(&fs->meta, ino, d->last_name, READDIR_PAGE, d->page);
		if (rc < 0)
			return rc;
		d->loaded = true;
		d->page_start = next_start;
		d->page_count = d->page->count;
		/* Remember the last name to continue after it. */
		const char *name;
		uint32_t len;
		struct kvc_attr attr;
		while ((rc = kvc_meta_client_dirent_next(d->page, &name, &len, &attr)) == 1) {
			memcpy(d->last_name, name, len);
			d->last_name[len] = '\0';
		}
		if (rc < 0)
			return rc;
		if (d->page_count == 0)
			return 0;
	}
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = fs_of(req);
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0;
	if (!buf) {
		reply_error(req, -ENOMEM);
		return;
	}
	pthread_mutex_lock(&d->lock);
	int rc = 0;
	while (rc == 0) {
		rc = load_page(fs, ino, d, off);
		if (rc < 0 || off >= d->page_start + (off_t)d->page_count)
			break;
		d->page->cursor = sizeof(struct kvc_msg_readdir_reply);
		const char *name;
		uint32_t len;
		struct kvc_attr attr;
		for (off_t i = d->page_start; rc == 0 && i <= off; i++)
			rc = kvc_meta_client_dirent_next(d->page, &name, &len, &attr) == 1 ? 0 : -EIO;
		while (rc == 0) {
			char cname[KVC_WIRE_MAX_NAME + 1];
			struct fuse_entry_param e;
			memcpy(cname, name, len);
			cname[len] = '\0';
			fill_entry(fs, &attr, &e);
			size_t need = fuse_add_direntry_plus(req, buf + used, size - used, cname, &e,
			                                     off + 1);
			if (need > size - used)
				goto full;
			used += need;
			off++;
			int more = kvc_meta_client_dirent_next(d->page, &name, &len, &attr);
			if (more <= 0) {
				rc = more < 0 ? -EIO : 0;
				break;
			}
		}
	}
full:
	pthread_mutex_unlock(&d->lock);
	if (rc < 0 && used == 0)
		reply_error(req, rc);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	(void)ino;
	pthread_mutex_destroy(&d->lock);
	free(d->page);
	free(d);
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct kvc_fuse *fs = fs_of(req);
	struct kvc_storage_space space;
	struct kvc_msg_statfs_reply names;
	struct statvfs st = {0};
	(void)ino;
	int rc = kvc_storage_client_space(&fs->storage, &space);
	if (rc == 0)
		rc = kvc_meta_client_statfs(&fs->meta, &names);
	if (rc < 0) {
		reply_error(req, rc);
		return;
	}
	st.f_bsize = fs->config.chunk_size;
	st.f_frsize = 4096;
	st.f_blocks = space.total_bytes / st.f_frsize;
	st.f_bfree = space.free_bytes / st.f_frsize;
	st.f_bavail = st.f_bfree;
	st.f_files = names.max_inodes;
	st.f_ffree = names.max_inodes - names.inodes;
	st.f_favail = st.f_ffree;
	st.f_namemax = KVC_WIRE_MAX_NAME;
	fuse_reply_statfs(req, &st);
}

static int format_xattr(struct kvc_fuse *fs, const struct kvc_attr *attr, const char *name,
                        char *out, size_t cap)
{
	if (strcmp(name, XATTR_INODE) == 0)
		return snprintf(out, cap, "%" PRIu64, attr->ino);
	if (strcmp(name, XATTR_USRBIO) == 0 && attr->ino == FUSE_ROOT_ID)
		return snprintf(out, cap, "clients=%d iovs=%d rings=%d files=%d",
		                atomic_load(&fs->usrbio_clients), atomic_load(&fs->usrbio_iovs),
		                atomic_load(&fs->usrbio_rings), atomic_load(&fs->usrbio_files));
	if (strcmp(name, XATTR_LAYOUT) != 0)
		return -ENODATA;
	uint32_t targets[KVC_WIRE_MAX_TARGETS];
	int count = kvc_layout_targets(&attr->layout, targets, KVC_WIRE_MAX_TARGETS);
	int n = snprintf(out, cap, "chunk_size=%u stripe=%u targets=", attr->layout.chunk_size,
	                 attr->layout.stripe);
	for (int i = 0; i < count && n > 0 && (size_t)n < cap; i++)
		n += snprintf(out + n, cap - (size_t)n, "%s%u", i ? "," : "", targets[i]);
	return n;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct kvc_attr attr;
	char value[1024];
	int rc = kvc_meta_client_getattr(&fs_of(req)->meta, ino, &attr);
	if (rc == 0)
		rc = format_xattr(fs_of(req), &attr, name, value, sizeof(value));
	if (rc < 0)
		reply_error(req, rc);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)rc);
	else if ((size_t)rc > size)
		reply_error(req, -ERANGE);
	else
		fuse_reply_buf(req, value, (size_t)rc);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	/* The root also shows the live USRBIO registrations. */
	static const char names[] = XATTR_LAYOUT "\0" XATTR_INODE;
	static const char root_names[] = XATTR_LAYOUT "\0" XATTR_INODE "\0" XATTR_USRBIO;
	const char *list = ino == FUSE_ROOT_ID ? root_names : names;
	size_t length = ino == FUSE_ROOT_ID ? sizeof(root_names) : sizeof(names);
	if (size == 0)
		fuse_reply_xattr(req, length);
	else if (size < length)
		reply_error(req, -ERANGE);
	else
		fuse_reply_buf(req, list, length);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
	(void)ino, (void)value, (void)size, (void)flags;
	/* The layout xattrs are read-only; no other xattrs are stored. */
	bool ours = strcmp(name, XATTR_LAYOUT) == 0 || strcmp(name, XATTR_INODE) == 0 ||
	            strcmp(name, XATTR_USRBIO) == 0;
	reply_error(req, ours ? -EPERM : -ENOTSUP);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	bool ours = strcmp(name, XATTR_LAYOUT) == 0 || strcmp(name, XATTR_INODE) == 0 ||
	            strcmp(name, XATTR_USRBIO) == 0;
	reply_error(req, ours ? -EPERM : -ENODATA);
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
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	/* Write-through: every write reaches the storage servers before the
	 * syscall returns, so a closed file is complete for every client. */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

static int64_t monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One RENEW; on success the lease starts again (after reopening our files
 * when kvc-meta had given us up). */
/* One RENEW; on success the lease starts again, after reopening our
 * files when kvc-meta had given us up. renew_lock held: kvc-meta says
 * ESTALE only once, so no one may see the lease fresh again before the
 * renewer that heard it has marked the lost files stale. */
static int renew_locked(struct kvc_fuse *fs)
{
	int64_t asked = monotonic_ms();
	int rc = kvc_meta_client_renew(&fs->meta, fs->client_id);
	if (rc == -ESTALE)
		reopen_all(fs);
	if (rc == 0 || rc == -ESTALE) {
		atomic_store(&fs->renewed_ms, asked);
		rc = 0;
	}
	return rc;
}

static bool lease_fresh(struct kvc_fuse *fs, int64_t now)
{
	return now - atomic_load(&fs->renewed_ms) <= (int64_t)fs->config.client_timeout_ms * 3 / 4;
}

int kvc_fuse_check_lease(struct kvc_fuse *fs)
{
	if (lease_fresh(fs, monotonic_ms()))
		return 0;
	/* Wait for a renew in progress; then, unless that one made the lease
	 * fresh, renew ourselves (I/O tries at most every 100 ms, so a kvc-meta
	 * that is down costs few RPCs, and one that is back is seen at once). */
	pthread_mutex_lock(&fs->renew_lock);
	int64_t now = monotonic_ms();
	if (!lease_fresh(fs, now) && now - atomic_load(&fs->renew_tried_ms) >= 100) {
		atomic_store(&fs->renew_tried_ms, now);
		renew_locked(fs);
	}
	bool fresh = lease_fresh(fs, monotonic_ms());
	pthread_mutex_unlock(&fs->renew_lock);
	return fresh ? 0 : -EIO;
}

void kvc_fuse_flush_sizes(struct kvc_fuse *fs)
{
	/* Also the sign of life that keeps this client's open sessions. */
	pthread_mutex_lock(&fs->renew_lock);
	int renewed = renew_locked(fs);
	pthread_mutex_unlock(&fs->renew_lock);
	if (renewed == 0)
		retry_closes(fs);
	uint64_t inos[256];
	int count = kvc_inode_table_list_dirty(fs->inodes, inos, 256);
	for (int i = 0; i < count; i++) {
		int rc = commit_size(fs, inos[i]);
		if (rc < 0)
			kvc_log_warn("size of inode %" PRIu64 ": %s; will retry", inos[i], strerror(-rc));
	}
}

const struct fuse_lowlevel_ops kvc_fuse_operations = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.create = op_create,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.fsync = op_fsync,
	.release = op_release,
	.opendir = op_opendir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
	.fallocate = op_fallocate,
};
