/*
 * operations: kvc-fuse's libfuse low-level operations. FUSE node ids are
 * kvc-meta inode ids (the root is 1 = FUSE_ROOT_ID on both sides), so no
 * id translation table exists and forget has nothing to release.
 *
 * Errors: every helper returns 0 or -errno; each operation converts to
 * FUSE's positive errno in exactly one place (reply_error). Transport
 * failures reach the caller as EIO.
 */
#ifndef KVC_FUSE_OPERATIONS_H
#define KVC_FUSE_OPERATIONS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/config.h"
#include "fuse/attr_cache.h"
#include "fuse/close_queue.h"
#include "fuse/dir_names.h"
#include "fuse/early_creates.h"
#include "fuse/inode_table.h"
#include "fuse/dir_aliases.h"
#include "fuse/known_attrs.h"
#include "fuse/meta_events.h"
#include "client/meta_client.h"
#include "client/storage_client.h"

/* The daemon's state, owned by main; every operation reaches it through
 * fuse_req_userdata. */
struct kvc_fuse {
	struct kvc_config config;
	struct kvc_meta_client meta;
	struct kvc_storage_client storage;
	struct kvc_inode_table *inodes;
	double attr_timeout; /* of entries from directory listings */
	struct kvc_meta_events *events; /* kvc-meta's change events (meta_events.h) */
	struct fuse_session *session; /* set once mounted; for invalidations */
	/* USRBIO registrations now, shown by the root's user.kvc.usrbio */
	atomic_int usrbio_clients, usrbio_iovs, usrbio_rings, usrbio_files;
	/* Files unlinked while open here wait in /.kvc-orphans as
	 * "<host>.<inode>" until their last close. */
	char host[64];
	/* This kvc-fuse's id for kvc-meta's open sessions (random at start). */
	uint8_t client_id[KVC_WIRE_CLIENT_ID];
	/* Open and last close of one file, with their OPEN/CLOSE to kvc-meta,
	 * run one at a time (striped by inode): a CLOSE never lands after a
	 * newer OPEN of the same file. */
	pthread_mutex_t session_locks[64];
	/* The open-session lease: the last time kvc-meta took our RENEW, and
	 * the last time I/O tried one itself (monotonic ms). */
	_Atomic int64_t renewed_ms, renew_tried_ms;
	/* The size flusher (fuse/main.c): stopped and joined before the
	 * state it uses goes; its passes over open files' watches
	 * (kvc_fuse_watch_open_files, that thread only): when the last sweep
	 * began, and where an unfinished one goes on. */
	pthread_t flusher;
	pthread_mutex_t flusher_lock;
	pthread_cond_t flusher_wake;
	bool flusher_stop; /* flusher_lock */
	int64_t watched_ms;
	int watch_next;
	/* its passes over directory names held by the kernel
	 * (kvc_fuse_watch_dir_names): when the last began (monotonic), and
	 * the dir_aliases slot an unfinished one goes on from */
	int64_t dir_watched_ns;
	uint32_t dir_watch_next;
	_Atomic uint64_t dir_watch_lookups; /* LOOKUPs those passes sent (metrics) */
	pthread_mutex_t renew_lock; /* one RENEW (and its reopening) at a time */
	/* CLOSEs kvc-meta did not take (it was down): retried every second,
	 * or a removed file would be kept for as long as we live. */
	pthread_mutex_t closes_lock;
	struct kvc_close_queue *closes; /* CLOSEs off the release path */
	/* What kvc-meta last said of our open files (attr_cache.h). */
	struct kvc_attr_cache *attrs;
	/* Last attributes of directories and special files (known_attrs.h). */
	struct kvc_known_attrs *known;
	/* The name each directory was last given to the kernel under
	 * (dir_aliases.h); NULL: not kept. */
	struct kvc_dir_aliases *aliases;
	struct kvc_dir_names *dir_names; /* names of busy directories (dir_names.h) */
	struct kvc_early_creates *creates; /* files made ahead of kvc-meta */
	uint64_t pending_closes[256];
	int pending_close_count;
};

#define KVC_FUSE_ORPHANS ".kvc-orphans"


/* Remove what a run of an earlier version on this host left in the orphan
 * directory (files removed while open now stay in kvc-meta, not there).
 * Call before mounting. */
void kvc_fuse_clean_orphans(struct kvc_fuse *fs);

extern const struct fuse_lowlevel_ops kvc_fuse_operations;

/* For USRBIO: hold an inode open inside kvc-fuse (a registered file keeps
 * working after the client closes its fd, as in 3FS), and drop the hold,
 * doing what a last close does (size committed, open session ended). */
int kvc_fuse_hold_inode(struct kvc_fuse *fs, uint64_t ino);
void kvc_fuse_drop_inode(struct kvc_fuse *fs, uint64_t ino);

/* Before file I/O: 0 while this client's open sessions are surely held
 * (kvc-meta heard from us within 3/4 of [meta] client_timeout_ms), else
 * RENEWs until one works (I/O sends one at most every 100 ms) and -EIO
 * when none did within io_timeout_ms: past its timeout kvc-meta may have
 * given our files away, and reading them could return holes where their
 * bytes were. So a kvc-meta restart stalls I/O for as long as it is away
 * (up to io_timeout_ms) instead of failing it. */
int kvc_fuse_check_lease(struct kvc_fuse *fs);
/* Whether the lease is fresh now (no renew: for callers that must not
 * wait, e.g. early creates). */
bool kvc_fuse_lease_fresh(struct kvc_fuse *fs);

/* Renew this client's open sessions (the lease), and after a renew that
 * worked send the CLOSEs kvc-meta missed. Returns the renew's 0 or
 * -errno. */
int kvc_fuse_renew_lease(struct kvc_fuse *fs);
/* Send every dirty file size to kvc-meta. */
void kvc_fuse_commit_sizes(struct kvc_fuse *fs);
/* Both (the background pass each second, and the last one at unmount).
 * Returns the renew's 0 or -errno. */
int kvc_fuse_flush_sizes(struct kvc_fuse *fs);
/* Keep kvc-meta watching the files open here (file_ops.c): the size
 * flusher's thread only, after a renew that worked. */
void kvc_fuse_watch_open_files(struct kvc_fuse *fs);
/* Keep kvc-meta watching the directory names the kernel holds (dir_ops.c,
 * fuse/dir_aliases.h): the same thread, after the open files. */
void kvc_fuse_watch_dir_names(struct kvc_fuse *fs);

#endif
