/*
 * file_ops: kvc-fuse's open files: open (with O_TRUNC), create, read,
 * write, flush, fsync, release and fallocate, the open sessions they hold
 * in kvc-meta, and the lease that keeps those sessions (see
 * operations.h: kvc_fuse_check_lease).
 *
 * Lock order: a session lock (by inode) before the inode table's lock;
 * renew_lock before a session lock (reopen_all) and before the early
 * creates' lock (kvc_early_creates_forget_grants, a leaf); closes_lock
 * before a session lock (retry_closes). The session locks are held across
 * kvc-meta's OPEN/CLOSE on purpose: a CLOSE must never overtake a newer
 * OPEN of the same file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "fuse/ops_internal.h"
#include "fuse/read_buffer.h"
#include "fuse/fuse_metrics.h"

/* Commit a dirty size first, so a truncate or chmod never races it. The
 * size sent covers every write since the last commit (inode_table.h): a
 * file another client shrank meanwhile grows back over what we wrote
 * after, instead of hiding those bytes beyond its end. */
int kvc_fuse_commit_size(struct kvc_fuse *fs, uint64_t ino)
{
	uint64_t size;
	struct kvc_attr attr;
	if (!kvc_inode_table_take_dirty(fs->inodes, ino, &size))
		return 0;
	kvc_meta_events_changed_here(fs->events, ino); /* ops_internal.h kvc_fuse_learnt */
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	if (kvc_early_creates_fold_size(fs->creates, ino, size, &attr)) {
		/* Not in kvc-meta yet: the size goes with the file. */
		kvc_inode_table_committed(fs->inodes, ino, size);
		kvc_fuse_learnt(fs, ino);
		kvc_attr_cache_put(fs->attrs, &attr, mark);
		return 0;
	}
	int rc = kvc_meta_client_extend(&fs->meta, ino, size, &attr);
	if (rc == 0) {
		kvc_inode_table_committed(fs->inodes, ino, size);
		kvc_fuse_learnt(fs, ino);
		/* Our pages are the file as committed. */
		kvc_attr_cache_put(fs->attrs, &attr, mark);
		kvc_inode_table_saw(fs->inodes, &attr);
	}
	else {
		if (rc != -ENOENT)
			kvc_inode_table_wrote(fs->inodes, ino, size); /* to send again */
		kvc_inode_table_commit_failed(fs->inodes, ino);
	}
	return rc;
}

/* Raise the committed size of ino to at least size. */
static int extend_to(struct kvc_fuse *fs, uint64_t ino, uint64_t size)
{
	struct kvc_msg_setattr m = {.ino = ino, .mask = KVC_SETATTR_SIZE, .size = size};
	struct kvc_attr attr;
	int rc = kvc_fuse_commit_size(fs, ino);
	if (rc == 0)
		rc = kvc_meta_client_getattr(&fs->meta, ino, &attr);
	if (rc == 0 && attr.size < size)
		rc = kvc_meta_client_setattr(&fs->meta, &m, &attr);
	if (rc == 0)
		kvc_inode_table_set_size(fs->inodes, ino, attr.size);
	if (rc == 0) {
		kvc_fuse_learnt(fs, ino);
		kvc_inode_table_saw(fs->inodes, &attr);
	}
	return rc;
}

/* fallocate: punching holes returns the chunks' space (fallocate -p,
 * hf3fs_punchhole); plain allocation only sets the size, since chunks are
 * allocated when written. Other modes: EOPNOTSUPP. */
void kvc_fuse_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_layout layout;
	uint64_t size;
	(void)fi;
	int rc = offset < 0 || length <= 0 ? -EINVAL
	       : kvc_inode_table_get(fs->inodes, ino, &layout, &size);
	struct kvc_attr attr;
	if (rc == 0 && mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		rc = kvc_storage_client_punch(&fs->storage, ino, &layout, (uint64_t)offset,
		                              (uint64_t)length, size);
	/* The data changed: EXTEND_SIZE stamps mtime (so other clients'
	 * opens drop their cached pages) and kvc-meta tells those that have
	 * the file open. */
	if (rc == 0 && mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) {
		rc = kvc_meta_client_extend(&fs->meta, ino, 0, &attr);
		if (rc == 0) /* the kernel dropped the punched range itself */
			kvc_inode_table_saw(fs->inodes, &attr);
	} else if (rc == 0 && mode == 0)
		rc = (uint64_t)offset + (uint64_t)length > size
		   ? extend_to(fs, ino, (uint64_t)offset + (uint64_t)length) : 0;
	else if (rc == 0 && mode != FALLOC_FL_KEEP_SIZE)
		rc = -EOPNOTSUPP;
	kvc_attr_cache_forget(fs->attrs, fs->events); /* the size or the times changed */
	kvc_fuse_reply_error(req, rc);
}

/* The page cache of a file is kept across opens when the file is as this
 * client last saw it (attr_cache.h): another client's committed write
 * changes mtime (EXTEND_SIZE, SETATTR), so a file changed elsewhere is
 * read afresh at its next open here (close-to-open), events or not. */
static void set_open_flags(struct kvc_fuse *fs, struct fuse_file_info *fi,
                           const struct kvc_attr *attr, struct kvc_meta_events_mark mark)
{
	fi->keep_cache = !(fi->flags & O_TRUNC) && kvc_attr_cache_same(fs->attrs, attr);
	fi->direct_io = 0;
	/* A read-only open has no size to commit at close: no FLUSH for it
	 * (the kernel writes through, it has no dirty pages to send either). */
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
	kvc_attr_cache_put(fs->attrs, attr, mark);
}

/* Open a file here: an open session with kvc-meta (so a removal anywhere
 * keeps its data while it is open here), then the inode table. */
static pthread_mutex_t *session_lock(struct kvc_fuse *fs, uint64_t ino)
{
	return &fs->session_locks[ino % (sizeof(fs->session_locks) / sizeof(fs->session_locks[0]))];
}

/* A file kvc-meta made and opened for us in one CREATE: into the table
 * under its session lock, like open_inode. */
static int adopt_inode(struct kvc_fuse *fs, const struct kvc_attr *attr)
{
	pthread_mutex_lock(session_lock(fs, attr->ino));
	int rc = kvc_inode_table_open(fs->inodes, attr);
	if (rc == 0)
		kvc_fuse_learnt(fs, attr->ino);
	if (rc < 0 && !kvc_inode_table_is_open(fs->inodes, attr->ino))
		kvc_meta_client_close(&fs->meta, attr->ino, fs->client_id);
	pthread_mutex_unlock(session_lock(fs, attr->ino));
	return rc;
}

static int open_inode(struct kvc_fuse *fs, uint64_t ino, struct kvc_attr *attr)
{
	pthread_mutex_lock(session_lock(fs, ino));
	/* A CLOSE still queued here is dropped (the session is held); one on
	 * its way lands before this OPEN. */
	if (fs->closes)
		kvc_close_queue_cancel(fs->closes, ino);
	int rc = kvc_meta_client_open(&fs->meta, ino, fs->client_id, attr);
	if (rc == 0 && S_ISDIR(attr->mode))
		rc = -EISDIR;
	if (rc == 0)
		rc = kvc_inode_table_open(fs->inodes, attr);
	if (rc == 0)
		kvc_fuse_learnt(fs, attr->ino);
	if (rc < 0 && rc != -EISDIR && rc != -ENOENT && !kvc_inode_table_is_open(fs->inodes, ino))
		kvc_meta_client_close(&fs->meta, ino, fs->client_id);
	pthread_mutex_unlock(session_lock(fs, ino));
	return rc;
}

/* The last close here of a file ends its open session (a file removed
 * meanwhile goes when no client has it open): queued, and sent with
 * others (close_queue.h); sent at once when the queue is full. */
static void close_inode(struct kvc_fuse *fs, uint64_t ino)
{
	pthread_mutex_lock(session_lock(fs, ino));
	kvc_inode_table_release(fs->inodes, ino);
	int rc = kvc_inode_table_is_open(fs->inodes, ino) ? 0
	       : kvc_early_creates_fold_close(fs->creates, ino) ? 0 /* no session yet */
	       : fs->closes && kvc_close_queue_add(fs->closes, ino) == 0 ? 0
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

/* Every inode open here (not stale): a malloc'd array in *out, its count
 * or -ENOMEM. */
static int list_open(struct kvc_fuse *fs, uint64_t **out)
{
	int cap = 1024, count;
	uint64_t *inos = NULL;
	for (;;) {
		uint64_t *grown = realloc(inos, (size_t)cap * sizeof(*inos));
		if (!grown) {
			free(inos);
			return -ENOMEM;
		}
		inos = grown;
		count = kvc_inode_table_list_open(fs->inodes, inos, cap);
		if (count < cap)
			break;
		cap *= 2; /* may be more: ask again with room to spare */
	}
	*out = inos;
	return count;
}

/* kvc-meta dropped our sessions (we were silent past its timeout:
 * -ESTALE), or started since we last told it what we hold open (-EREMCHG:
 * it keeps open sessions in memory): open every file again; one that is
 * gone meanwhile turns stale, so its reads fail with ESTALE instead of
 * returning holes. Returns 0 when every file was reopened or found gone,
 * else -errno (ask again later). */
static int reopen_all(struct kvc_fuse *fs, int why)
{
	uint64_t *inos;
	int count = list_open(fs, &inos), rc = 0;
	if (count < 0)
		return count;
	if (why == -ESTALE)
		kvc_log_warn("kvc-meta had given this client up (silent too long): reopening %d "
		             "file(s)", count);
	else if (count > 0)
		kvc_log_info("kvc-meta started since this client last told it: reopening %d "
		             "file(s)", count);
	for (int i = 0; i < count; i++) {
		struct kvc_attr attr;
		pthread_mutex_lock(session_lock(fs, inos[i]));
		/* After a start (-EREMCHG), a file made here and not entered
		 * yet needs none: its entry (ADOPT) stores its session, and an
		 * OPEN would enter it early. After a drop (-ESTALE) it is
		 * reopened all the same: its grant may be gone, and the OPEN
		 * (which waits for its entry) finds out before I/O goes on. */
		int got = kvc_inode_table_is_open(fs->inodes, inos[i]) &&
		                  !(why == -EREMCHG &&
		                    kvc_early_creates_unentered(fs->creates, inos[i]))
		        ? kvc_meta_client_open(&fs->meta, inos[i], fs->client_id, &attr) : 0;
		if (got == -ENOENT) {
			kvc_inode_table_mark_stale(fs->inodes, inos[i]);
			kvc_log_warn("inode %" PRIu64 " was removed meanwhile: its I/O fails with ESTALE",
			             inos[i]);
		} else if (got < 0) {
			rc = got;
		}
		pthread_mutex_unlock(session_lock(fs, inos[i]));
		if (rc < 0)
			break; /* no REJOIN follows: this round is lost, the next renew
			        * starts over (the rest would only hold renew_lock) */
	}
	free(inos);
	return rc;
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


int kvc_fuse_setattr(struct kvc_fuse *fs, const struct kvc_msg_setattr *m,
                     struct kvc_attr *attr, struct kvc_meta_events_mark *mark)
{
	bool size = m->mask & KVC_SETATTR_SIZE;
	if (size)
		kvc_meta_events_changed_here(fs->events, m->ino);
	if (mark)
		*mark = kvc_fuse_mark(fs);
	int rc = kvc_fuse_commit_size(fs, m->ino);
	if (size)
		kvc_inode_table_wait_commits(fs->inodes, m->ino);
	if (rc == 0)
		rc = kvc_meta_client_setattr(&fs->meta, m, attr);
	if (rc == 0 && size) {
		kvc_inode_table_set_size(fs->inodes, m->ino, attr->size);
		kvc_fuse_learnt(fs, m->ino);
	}
	if (rc == 0) /* the kernel changed its pages as we did */
		kvc_inode_table_saw(fs->inodes, attr);
	return rc;
}

/* open(O_TRUNC) (libfuse asks for atomic O_TRUNC, so no separate
 * truncate comes): the size goes to 0 in kvc-meta, which first drops the
 * chunks on the storage servers, and mtime and ctime change, even for a
 * file that was empty already (as on local filesystems). */
static int truncate_on_open(struct kvc_fuse *fs, uint64_t ino, struct kvc_attr *attr)
{
	struct kvc_msg_setattr m = {.ino = ino, .mask = KVC_SETATTR_SIZE, .size = 0};
	int rc = kvc_fuse_setattr(fs, &m, attr, NULL);
	if (rc < 0)
		kvc_log_warn("inode %" PRIu64 ": open(O_TRUNC): %s", ino, strerror(-rc));
	return rc;
}

/* A create answered here (early_creates.h): the name is known to be
 * absent and nothing asks for exclusivity. -EAGAIN: ask kvc-meta. */
static int create_early(struct kvc_fuse *fs, fuse_req_t req, uint64_t parent, const char *name,
                        mode_t mode, struct fuse_file_info *fi)
{
	struct kvc_attr attr, dir;
	struct fuse_entry_param e;
	/* Only O_TRUNC: if another client made the name meanwhile, ours
	 * replaces it, which for a truncating open is what it would have
	 * done to the file anyway; an O_APPEND or plain O_CREAT open must
	 * keep that file's bytes, and O_EXCL must be decided by kvc-meta. */
	if (!fs->creates || (fi->flags & (O_EXCL | O_TRUNC)) != O_TRUNC ||
	    kvc_dir_names_absent(fs->dir_names, parent, name) <= 0)
		return -EAGAIN;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	uint32_t names = kvc_dir_names_begin(fs->dir_names, parent, name, strlen(name));
	int rc = kvc_early_creates_make(fs->creates, parent, name, mode, ctx->uid, ctx->gid, names,
	                                &attr, &dir);
	if (rc < 0) {
		kvc_dir_names_end(fs->dir_names, names);
		return rc;
	}
	/* The parent changed; what it is now serves the kernel's next
	 * permission check, as a CREATE's answer does. */
	kvc_meta_events_changed_here(fs->events, parent);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	kvc_attr_cache_put(fs->attrs, &dir, mark);
	kvc_dir_names_named(fs->dir_names, parent, name, strlen(name), attr.ino);
	rc = adopt_inode(fs, &attr);
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc); /* (the file is entered, closed) */
		return 0;
	}
	set_open_flags(fs, fi, &attr, mark);
	kvc_fuse_fill_entry_watched(fs, mark, parent, name, &attr, &e);
	if (fuse_reply_create(req, &e, fi) != 0)
		close_inode(fs, attr.ino);
	return 0;
}

void kvc_fuse_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	if (create_early(fs, req, parent, name, mode, fi) == 0)
		return;
	/* The parent changes: no answer asked for before holds (attr_cache.h). */
	kvc_meta_events_changed_here(fs->events, parent);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	struct kvc_attr attr, dir;
	struct fuse_entry_param e;
	bool created = false;
	/* Before kvc-meta makes it: it may exist from now on (dir_names.h). */
	uint32_t names = kvc_dir_names_begin(fs->dir_names, parent, name, strlen(name));
	/* One round trip: kvc-meta makes the file, decides its group and
	 * opens it for us; a file that existed is opened as open() does. */
	int rc = kvc_meta_client_create_open(&fs->meta, parent, name, mode, fuse_req_ctx(req)->uid,
	                                     fuse_req_ctx(req)->gid, (fi->flags & O_EXCL) != 0,
	                                     fs->client_id, &attr, &created, &dir);
	kvc_dir_names_end(fs->dir_names, names);
	if (rc == 0) /* for the kernel's permission check before the next create */
		kvc_attr_cache_put(fs->attrs, &dir, mark);
	if (rc == 0) /* (as lookup's: unless the name changed since) */
		kvc_dir_names_named(fs->dir_names, parent, name, strlen(name),
		                    kvc_meta_events_ttl(fs->events, mark, parent, name, 0) > 0
		                    ? attr.ino : 0);
	if (rc == 0)
		rc = created ? adopt_inode(fs, &attr) : open_inode(fs, attr.ino, &attr);
	/* An existing file (created meanwhile by another client) is opened. */
	if (rc == 0 && (fi->flags & O_TRUNC) && attr.size > 0) {
		rc = truncate_on_open(fs, attr.ino, &attr);
		if (rc < 0)
			close_inode(fs, attr.ino);
	}
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc);
		return;
	}
	set_open_flags(fs, fi, &attr, mark);
	kvc_fuse_fill_entry_watched(fs, mark, parent, name, &attr, &e);
	if (fuse_reply_create(req, &e, fi) != 0)
		close_inode(fs, attr.ino);
}

void kvc_fuse_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_meta_events_mark mark = kvc_fuse_mark(fs);
	struct kvc_attr attr;
	int rc = open_inode(fs, ino, &attr);
	if (rc == 0 && (fi->flags & O_TRUNC) && S_ISREG(attr.mode)) {
		rc = truncate_on_open(fs, ino, &attr);
		if (rc < 0)
			close_inode(fs, ino);
	}
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc);
		return;
	}
	set_open_flags(fs, fi, &attr, mark);
	if (fuse_reply_open(req, fi) != 0)
		close_inode(fs, ino);
}

void kvc_fuse_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_layout layout;
	uint64_t file_size;
	(void)fi;
	int rc = kvc_fuse_check_lease(fs);
	if (rc == 0)
		rc = kvc_fuse_open_file(fs, ino, &layout, &file_size);
	if (rc < 0 || off < 0) {
		kvc_fuse_reply_error(req, rc == -ESTALE || rc == -EIO ? rc : rc < 0 ? -EBADF : -EINVAL);
		return;
	}
	if ((uint64_t)off >= file_size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > file_size - (uint64_t)off)
		size = (size_t)(file_size - (uint64_t)off);
	/* Into this thread's shared memory: a same-host server places there. */
	struct kvc_fuse_read_buffer b;
	rc = kvc_fuse_read_buffer_get(&fs->storage, size, &b);
	if (rc == 0) {
		struct kvc_storage_io io = {.inode = ino, .layout = layout, .offset = (uint64_t)off,
		                            .length = size, .buf = b.buf, .region = b.region};
		rc = kvc_storage_client_read_batch(&fs->storage, &io, 1);
	}
	if (rc == 0) {
		fuse_reply_buf(req, b.buf, size);
		kvc_fuse_metrics_bytes(true, size);
	} else {
		kvc_fuse_reply_error(req, rc);
	}
	kvc_fuse_read_buffer_done(&fs->storage, &b);
}

void kvc_fuse_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_layout layout;
	uint64_t file_size;
	(void)fi;
	int rc = kvc_fuse_check_lease(fs);
	if (rc == 0)
		rc = kvc_inode_table_get(fs->inodes, ino, &layout, &file_size);
	if (rc == 0 && off < 0)
		rc = -EINVAL;
	/* From this thread's shared memory when placement is on: a same-host
	 * server takes the bytes from there itself (no loopback TCP); else
	 * from buf. */
	struct kvc_fuse_read_buffer b = {0};
	if (rc == 0) {
		struct kvc_storage_io io = {.inode = ino, .layout = layout, .offset = (uint64_t)off,
		                            .length = size, .buf = (void *)buf};
		if (fs->storage.place && kvc_fuse_read_buffer_region(&fs->storage, size, &b) == 0) {
			memcpy(b.buf, buf, size);
			io.buf = b.buf;
			io.region = b.region;
		}
		rc = kvc_storage_client_write_batch(&fs->storage, &io, 1);
	}
	if (b.region)
		kvc_fuse_read_buffer_done(&fs->storage, &b);
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc == -ENOENT ? -EBADF : rc);
		return;
	}
	kvc_inode_table_wrote(fs->inodes, ino, (uint64_t)off + size);
	fuse_reply_write(req, size);
	kvc_fuse_metrics_bytes(false, size);
}

void kvc_fuse_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	kvc_fuse_reply_error(req, kvc_fuse_commit_size(kvc_fuse_of(req), ino));
}

/* fsync and fdatasync: the file's bytes durable on its storage servers,
 * then its size committed to kvc-meta, then a kvc-meta checkpoint, so its
 * size, its names and the directories above them survive a machine crash
 * too (fdatasync alike: the size is needed to read the data back, and a
 * checkpoint costs the same either way). */
void kvc_fuse_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_layout layout;
	uint64_t size;
	(void)datasync, (void)fi;
	int rc = kvc_inode_table_get(fs->inodes, ino, &layout, &size);
	if (rc == 0)
		rc = kvc_storage_client_sync(&fs->storage, &layout);
	if (rc == 0)
		rc = kvc_fuse_commit_size(fs, ino);
	if (rc == 0)
		rc = kvc_meta_client_sync(&fs->meta);
	/* A file made here that kvc-meta refused when it was entered (its
	 * directory removed meanwhile) turned stale: it is not durable. */
	if (rc == 0 && kvc_inode_table_get(fs->inodes, ino, &layout, &size) == -ESTALE)
		rc = -EIO;
	kvc_fuse_reply_error(req, rc);
}

/* fsyncdir: a directory's entries live in kvc-meta only: a checkpoint
 * makes them (and every other acknowledged change) durable. */
void kvc_fuse_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                          struct fuse_file_info *fi)
{
	(void)ino, (void)datasync, (void)fi;
	kvc_fuse_reply_error(req, kvc_meta_client_sync(&kvc_fuse_of(req)->meta));
}

int kvc_fuse_hold_inode(struct kvc_fuse *fs, uint64_t ino)
{
	struct kvc_attr attr;
	return open_inode(fs, ino, &attr);
}

void kvc_fuse_drop_inode(struct kvc_fuse *fs, uint64_t ino)
{
	int rc = kvc_fuse_commit_size(fs, ino);
	if (rc < 0)
		kvc_log_warn("inode %" PRIu64 ": size not committed yet: %s", ino, strerror(-rc));
	close_inode(fs, ino);
}

void kvc_fuse_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	(void)fi;
	int rc = kvc_fuse_commit_size(fs, ino);
	if (rc < 0)
		kvc_log_warn("release of inode %" PRIu64 ": size not committed yet: %s",
		             (uint64_t)ino, strerror(-rc));
	close_inode(fs, ino);
	kvc_fuse_reply_error(req, 0);
}

/* The lease's clock: CLOCK_BOOTTIME, which also runs while the machine
 * sleeps (kvc-meta's clock runs on meanwhile). main starts the lease on
 * CLOCK_MONOTONIC, never ahead of this one: at worst one early renew. */
static int64_t lease_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One RENEW; on success the lease starts again, after reopening our files
 * when kvc-meta had given us up. renew_lock held: no one may see the lease
 * fresh again before the renewer that heard ESTALE has reopened every file
 * (marking the lost ones stale) and rejoined. kvc-meta keeps answering
 * ESTALE until we rejoin, and again if it dropped us once more while we
 * were reopening, so a lost answer or a second drop is never missed. */
static int renew_locked(struct kvc_fuse *fs)
{
	int64_t asked = lease_now_ms();
	int rc = kvc_meta_client_renew(&fs->meta, fs->client_id, 0);
	if (rc == -ESTALE) /* our grants went with our sessions */
		kvc_early_creates_forget_grants(fs->creates);
	for (int tries = 0; (rc == -ESTALE || rc == -EREMCHG) && tries < 3; tries++) {
		int why = rc;
		rc = reopen_all(fs, why);
		if (rc == 0)
			rc = kvc_meta_client_renew(&fs->meta, fs->client_id, KVC_RENEW_REJOIN);
		if (rc == -ESTALE && why != -ESTALE) /* dropped meanwhile */
			kvc_early_creates_forget_grants(fs->creates);
	}
	if (rc == 0)
		atomic_store(&fs->renewed_ms, asked);
	return rc;
}

static bool lease_fresh(struct kvc_fuse *fs, int64_t now)
{
	return now - atomic_load(&fs->renewed_ms) <= (int64_t)fs->config.client_timeout_ms * 3 / 4;
}

bool kvc_fuse_lease_fresh(struct kvc_fuse *fs)
{
	return lease_fresh(fs, lease_now_ms());
}

#define RENEW_SLOT_MS 100
int kvc_fuse_check_lease(struct kvc_fuse *fs)
{
	if (lease_fresh(fs, lease_now_ms()))
		return 0;
	/* No I/O until a renew works. Wait for one in progress; then, unless
	 * that one made the lease fresh, renew ourselves: I/O starts one at
	 * most RENEW_SLOT_MS after the last one ended (a kvc-meta that is down
	 * costs few RPCs, one that is back is seen within a slot), for
	 * io_timeout_ms, so a kvc-meta restarting stalls the I/O instead of
	 * failing it. A renew already on its way then is waited for only by its
	 * own sender (it may take io_timeout_ms itself when kvc-meta hangs):
	 * the others stop waiting for renew_lock in time. */
	int64_t give_up = lease_now_ms() + fs->config.io_timeout_ms;
	struct timespec lock_until = kvc_clock_deadline(fs->config.io_timeout_ms);
	bool locked = pthread_mutex_clocklock(&fs->renew_lock, CLOCK_MONOTONIC, &lock_until) == 0;
	while (locked) {
		int64_t now = lease_now_ms();
		if (lease_fresh(fs, now) || now >= give_up)
			break;
		int64_t slot = atomic_load(&fs->renew_tried_ms) + RENEW_SLOT_MS;
		if (now >= slot) {
			renew_locked(fs);
			atomic_store(&fs->renew_tried_ms, lease_now_ms());
			continue;
		}
		pthread_mutex_unlock(&fs->renew_lock);
		kvc_clock_sleep_ms((slot < give_up ? slot : give_up) - now);
		locked = pthread_mutex_clocklock(&fs->renew_lock, CLOCK_MONOTONIC, &lock_until) == 0;
	}
	bool fresh = lease_fresh(fs, lease_now_ms());
	if (locked)
		pthread_mutex_unlock(&fs->renew_lock);
	return fresh ? 0 : -EIO;
}

/* Files held open keep hearing of other clients' changes. kvc-meta's
 * watch of an inode lives the events' ttl (and a margin) after the answer
 * that noted it (meta/watches.h), and a file held open and left alone
 * asks nothing: its watch would lapse, and another client's rewrite would
 * leave stale pages in the kernel for the holder's reads (the page cache
 * is not dropped by a new mtime: operations.c). So every half ttl each
 * file open here has its attributes asked again, which notes the watch
 * anew before it lapses; an answer that is not what the kernel's pages
 * are of (kvc_inode_table_saw: a change the watch may have missed while
 * the stream was down, or one after an event ended the watch) is applied
 * as an event would have been. The size flusher's thread only, after a
 * renew that worked: a pass stops after WATCH_PASS_MS, or at kvc-meta's
 * first failure, and the next second goes on from there (the lease's
 * renewal never waits long behind it). */
#define WATCH_PASS_MS 1000
void kvc_fuse_watch_open_files(struct kvc_fuse *fs)
{
	int64_t start = lease_now_ms();
	if (fs->watch_next == 0 && start - fs->watched_ms < (int64_t)fs->config.cache_ttl_ms / 2)
		return;
	if (fs->watch_next == 0)
		fs->watched_ms = start; /* a sweep begins */
	uint64_t *inos = NULL;
	int count = list_open(fs, &inos), i = fs->watch_next;
	for (; i < count && lease_now_ms() - start < WATCH_PASS_MS; i++) {
		/* A file made here and not entered yet: kvc-meta does not know it
		 * (nobody else can change it, and its entry notes the watch), and
		 * asking would enter it before its time. */
		if (kvc_early_creates_unentered(fs->creates, inos[i]))
			continue;
		struct kvc_meta_events_mark mark = kvc_meta_events_mark(fs->events);
		struct kvc_attr attr;
		int rc = kvc_meta_client_getattr(&fs->meta, inos[i], &attr);
		if (rc == -ENOENT)
			continue; /* gone: its events say so */
		if (rc < 0)
			break; /* kvc-meta away: from this file on, next second */
		if (!kvc_inode_table_saw(fs->inodes, &attr))
			kvc_meta_events_inode_changed(fs->events, inos[i]);
		kvc_attr_cache_put(fs->attrs, &attr, mark);
	}
	fs->watch_next = i < count ? i : 0;
	free(inos);
}

int kvc_fuse_renew_lease(struct kvc_fuse *fs)
{
	pthread_mutex_lock(&fs->renew_lock);
	int renewed = renew_locked(fs);
	pthread_mutex_unlock(&fs->renew_lock);
	if (renewed == 0)
		retry_closes(fs);
	return renewed;
}

/* The dirty sizes, each in turn; the pass stops at the first EIO (kvc-meta
 * out of reach: each call may have waited io_timeout_ms for a connection,
 * and the rest would too), and the next pass goes on. */
void kvc_fuse_commit_sizes(struct kvc_fuse *fs)
{
	uint64_t inos[256];
	int count = kvc_inode_table_list_dirty(fs->inodes, inos, 256);
	for (int i = 0; i < count; i++) {
		int rc = kvc_fuse_commit_size(fs, inos[i]);
		if (rc < 0)
			kvc_log_warn("size of inode %" PRIu64 ": %s; will retry", inos[i], strerror(-rc));
		if (rc == -EIO) {
			if (count - i > 1)
				kvc_log_warn("%d more size(s) left for the next pass", count - i - 1);
			break;
		}
	}
}

int kvc_fuse_flush_sizes(struct kvc_fuse *fs)
{
	int renewed = kvc_fuse_renew_lease(fs);
	kvc_fuse_commit_sizes(fs);
	return renewed;
}

