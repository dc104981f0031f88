/*
 * dir_ops: directory listing in kvc-fuse: a handle per open directory
 * holds one page of kvc-meta's entries and continues by name, so a
 * listing stays correct while entries come and go. The kernel caches the
 * entries' names and attributes (readdirplus) as it does a lookup's:
 * kvc-meta notes them for this client when it lists them, so another
 * client's change to one reaches us as an event (meta_events.h), and the
 * page's mark and age bound what the kernel may keep.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"
#include "fuse/ops_internal.h"

#define READDIR_PAGE 512

/* A directory handle: the current page of entries and where it starts, so
 * sequential readdir continues by name and a seek back restarts. */
struct dir_handle {
	pthread_mutex_t lock;
	struct kvc_meta_dirents *page;
	off_t page_start; /* offset of the page's first entry */
	uint32_t page_count;
	bool loaded;
	struct kvc_meta_events_mark mark; /* taken before the page was asked for */
	int64_t asked_ns;                 /* when (monotonic) */
	char last_name[KVC_WIRE_MAX_NAME + 1];
};

void kvc_fuse_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_attr attr;
	int rc = kvc_meta_client_getattr(&fs->meta, ino, &attr);
	/* A directory removed while held here (ls in a removed working
	 * directory) opens, as on a local disk; reading it then fails with
	 * ENOENT, as a local disk's dead directory does (the kernel itself
	 * answers so for one removed through this client), which the C
	 * library's readdir takes for its end (known_attrs.h). */
	if (rc == -ENOENT && kvc_known_attrs_gone(fs->known, ino, &attr))
		rc = 0;
	if (rc == 0 && !S_ISDIR(attr.mode))
		rc = -ENOTDIR;
	struct dir_handle *d = rc == 0 ? calloc(1, sizeof(*d)) : NULL;
	if (rc == 0 && !d)
		rc = -ENOMEM;
	if (rc < 0) {
		kvc_fuse_reply_error(req, rc);
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
		d->mark = kvc_fuse_mark(fs);
		d->asked_ns = kvc_clock_monotonic_ns();
		int rc = kvc_meta_client_readdir(&fs->meta, ino, d->last_name,
		                                 READDIR_PAGE | KVC_READDIR_WATCH, d->page);
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

void kvc_fuse_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0;
	if (!buf) {
		kvc_fuse_reply_error(req, -ENOMEM);
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
		double age = (double)(kvc_clock_monotonic_ns() - d->asked_ns) / 1e9;
		while (rc == 0) {
			char cname[KVC_WIRE_MAX_NAME + 1];
			struct fuse_entry_param e;
			memcpy(cname, name, len);
			cname[len] = '\0';
			kvc_fuse_fill_entry_watched(fs, d->mark, ino, cname, &attr, &e);
			/* kvc-meta's note of the entry lasts the ttl from when the
			 * page was asked for, not from now. */
			e.entry_timeout = e.entry_timeout > age ? e.entry_timeout - age : 0;
			e.attr_timeout = e.attr_timeout > age ? e.attr_timeout - age : 0;
			/* Attributes an entry still waiting here may change: the
			 * kernel asks again (GETATTR waits for it). */
			if (kvc_early_creates_pending(fs->creates, attr.ino))
				e.attr_timeout = 0;
			/* Attributes the page may hold from before a change (an
			 * event, or this client's own commit or truncate since): the
			 * kernel would apply them even uncached, shrinking its view
			 * of a file; the name alone, and it looks the entry up. */
			if (e.attr_timeout == 0 || e.entry_timeout == 0)
				e.ino = 0;
			size_t need = fuse_add_direntry_plus(req, buf + used, size - used, cname, &e,
			                                     off + 1);
			if (need > size - used)
				goto full;
			used += need;
			off++;
			if (e.ino && S_ISDIR(attr.mode)) /* given to the kernel with its inode */
				kvc_dir_aliases_note(fs->aliases, attr.ino, ino, cname, len);
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
		kvc_fuse_reply_error(req, rc);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

void kvc_fuse_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dir_handle *d = (struct dir_handle *)(uintptr_t)fi->fh;
	(void)ino;
	pthread_mutex_destroy(&d->lock);
	free(d->page);
	free(d);
	fuse_reply_err(req, 0);
}

/* Directory names this kernel holds (fuse/dir_aliases.h), asked again
 * every half ttl as open files' attributes are (file_ops.c): each LOOKUP
 * notes kvc-meta's watch of the name anew before it lapses, so another
 * client's move or removal of a directory held here comes as an event,
 * which drops the old name from the kernel before a rename here can meet
 * the directory under its new one (that rename would fail with ESTALE).
 * A name that no longer names its directory is dropped here at once. The
 * size flusher's thread only, after the open files' pass: a pass stops
 * after the step (DIR_STEP lookups) that passes DIR_PASS_MS (the lease's
 * renewal waits behind it), or at kvc-meta's first failure; the next
 * second goes on from there. A name whose directory another did not
 * change costs one LOOKUP each half ttl: at most 4,096 (the table), 820
 * a second at the default 10 s ttl. A race with this client's own rename
 * of the directory (the LOOKUP answered after the rename, noted before
 * it) only forgets the name: unrenewed until its next lookup. */
#define DIR_PASS_MS 250
#define DIR_STEP 32
void kvc_fuse_watch_dir_names(struct kvc_fuse *fs)
{
	int64_t start = kvc_clock_monotonic_ns();
	if (fs->dir_watch_next == 0 &&
	    start - fs->dir_watched_ns < (int64_t)fs->config.cache_ttl_ms * 500000)
		return;
	int64_t last = fs->dir_watched_ns;
	if (fs->dir_watch_next == 0)
		fs->dir_watched_ns = start; /* a sweep begins */
	struct kvc_dir_alias step[DIR_STEP]; /* 8.5 KiB of the flusher's stack */
	uint32_t cursor = fs->dir_watch_next;
	bool away = false;
	do {
		uint32_t at = cursor;
		int n = kvc_dir_aliases_list(fs->aliases, &cursor, step, DIR_STEP);
		for (int i = 0; i < n && !away; i++) {
			struct kvc_attr attr;
			int rc = kvc_meta_client_lookup(&fs->meta, step[i].parent, step[i].name, &attr);
			atomic_fetch_add_explicit(&fs->dir_watch_lookups, 1, memory_order_relaxed);
			if (rc == -ENOENT || (rc == 0 && attr.ino != step[i].ino))
				kvc_dir_aliases_drop(fs->aliases, &step[i], rc == 0 ? attr.ino : 0);
			away = rc < 0 && rc != -ENOENT;
		}
		if (away)
			cursor = at; /* kvc-meta away: this step again, next second */
	} while (!away && cursor != 0 &&
	         kvc_clock_monotonic_ns() - start < (int64_t)DIR_PASS_MS * 1000000);
	fs->dir_watch_next = cursor;
	if (away && cursor == 0)
		fs->dir_watched_ns = last; /* not begun after all: again next second */
}
