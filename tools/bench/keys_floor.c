/*
 * bench keys --floor: a null FUSE filesystem for the file-per-key phases.
 *
 * kvc-bench forks a child that mounts this filesystem on a fresh temporary
 * directory with what of kvc-fuse's settings the timed phases meet: its
 * mount options (default_permissions, max_read; not allow_other), loop
 * settings (cloned /dev/fuse fds, 16 idle and at most 64 workers), init
 * flags (async reads, write-through) and open flags (the page cache kept,
 * no FLUSH after a read-only open), with kvc-fuse's 10 s entry and
 * attribute timeouts (its cache_ttl_ms while kvc-meta's change events are
 * up). It differs where the phases do not look: plain READDIR (kvc-fuse:
 * READDIRPLUS), misses answered ENOENT (kvc-fuse caches them), the page
 * cache kept at every open (kvc-fuse: while the file is as it last saw
 * it). It keeps names and sizes in memory under one mutex, no bytes (a
 * READ returns zeros: the phases read from the page cache the writes
 * filled, and check lengths and sizes only), and answers every request
 * at once, so the kernel sends it the round trips it sends kvc-fuse for
 * the same calls (a create:
 * LOOKUP, CREATE, GETXATTR of security.capability, WRITE, FLUSH, RELEASE,
 * and the parent's GETATTR for the next create's permission check), and
 * its rate is what those round trips cost on this machine with a daemon
 * that does no work: the kernel's share of a FUSE filesystem's per-key
 * cost.
 *
 * Owns: the child process and its mount point from bench_keys_floor_mount
 * until bench_keys_floor_unmount. Nodes are never reused: an unlinked
 * node keeps its number, so a FORGET needs no work.
 * Lock order: the one mutex `nullfs.lock` (names, attributes, the node
 * table), never held across a reply.
 */
#define FUSE_USE_VERSION 312
#include "keys.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

#define FLOOR_BUCKETS (1u << 16)
#define FLOOR_TIMEOUT 10.0 /* seconds: kvc-fuse's default cache_ttl_ms */
#define FLOOR_MAX_READ (1u << 20) /* max_read below */

struct floor_node {
	fuse_ino_t parent;
	char *name; /* NULL once unlinked (and for the root) */
	struct stat st;
	uint64_t children; /* directories: names in it */
	struct floor_node *next; /* in its name's bucket */
};

static struct {
	pthread_mutex_t lock;
	struct floor_node **nodes; /* nodes[ino - 1] */
	size_t count, cap;
	struct floor_node *buckets[FLOOR_BUCKETS];
} nullfs = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint32_t name_hash(fuse_ino_t parent, const char *name)
{
	uint64_t h = 1469598103934665603ull ^ parent;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return (uint32_t)(h ^ (h >> 32)) & (FLOOR_BUCKETS - 1);
}

static struct floor_node *node_at(fuse_ino_t ino)
{
	return ino >= 1 && ino <= nullfs.count ? nullfs.nodes[ino - 1] : NULL;
}

static struct floor_node *name_find(fuse_ino_t parent, const char *name)
{
	for (struct floor_node *n = nullfs.buckets[name_hash(parent, name)]; n; n = n->next)
		if (n->parent == parent && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

static void stamp(struct stat *st)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	st->st_mtim = st->st_ctim = now;
}

/* A new node named name in parent; NULL when out of memory. */
static struct floor_node *node_add(fuse_ino_t parent, const char *name, mode_t mode,
                                   const struct fuse_ctx *ctx)
{
	if (nullfs.count == nullfs.cap) {
		size_t cap = nullfs.cap ? nullfs.cap * 2 : 1024;
		struct floor_node **nodes = realloc(nullfs.nodes, cap * sizeof(*nodes));
		if (!nodes)
			return NULL;
		nullfs.nodes = nodes, nullfs.cap = cap;
	}
	struct floor_node *n = calloc(1, sizeof(*n));
	if (!n || (name && !(n->name = strdup(name)))) {
		free(n);
		return NULL;
	}
	nullfs.nodes[nullfs.count++] = n;
	n->parent = parent;
	n->st.st_ino = nullfs.count;
	n->st.st_mode = mode;
	n->st.st_nlink = S_ISDIR(mode) ? 2 : 1;
	n->st.st_uid = ctx ? ctx->uid : getuid();
	n->st.st_gid = ctx ? ctx->gid : getgid();
	n->st.st_blksize = 4096;
	stamp(&n->st);
	n->st.st_atim = n->st.st_mtim;
	if (name) {
		uint32_t b = name_hash(parent, name);
		n->next = nullfs.buckets[b], nullfs.buckets[b] = n;
		struct floor_node *dir = node_at(parent);
		dir->children++;
		stamp(&dir->st);
	}
	return n;
}

static void name_drop(struct floor_node *n)
{
	struct floor_node **at = &nullfs.buckets[name_hash(n->parent, n->name)];
	while (*at != n)
		at = &(*at)->next;
	*at = n->next;
	struct floor_node *dir = node_at(n->parent);
	dir->children--;
	stamp(&dir->st);
	free(n->name), n->name = NULL;
	n->st.st_nlink = 0;
}

static void entry_of(const struct floor_node *n, struct fuse_entry_param *e)
{
	*e = (struct fuse_entry_param){.ino = n->st.st_ino, .attr = n->st,
	                               .attr_timeout = FLOOR_TIMEOUT,
	                               .entry_timeout = FLOOR_TIMEOUT};
}

static void floor_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = 1u << 20;
	conn->max_read = 1u << 20;
	conn->want |= FUSE_CAP_ASYNC_READ;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->want &= ~(unsigned)(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO |
	                          FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA);
}

static void floor_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = name_find(parent, name);
	if (n)
		entry_of(n, &e);
	pthread_mutex_unlock(&nullfs.lock);
	if (n)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, ENOENT);
}

static void floor_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = node_at(ino);
	if (n)
		st = n->st;
	pthread_mutex_unlock(&nullfs.lock);
	if (n)
		fuse_reply_attr(req, &st, FLOOR_TIMEOUT);
	else
		fuse_reply_err(req, ENOENT);
}

static void floor_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                          struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	int rc = 0;
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = node_at(ino);
	if (!n)
		rc = -ENOENT;
	if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE))
		n->st.st_size = attr->st_size;
	if (rc == 0 && (to_set & FUSE_SET_ATTR_MODE))
		n->st.st_mode = (n->st.st_mode & S_IFMT) | (attr->st_mode & 07777);
	if (rc == 0 && (to_set & FUSE_SET_ATTR_UID))
		n->st.st_uid = attr->st_uid;
	if (rc == 0 && (to_set & FUSE_SET_ATTR_GID))
		n->st.st_gid = attr->st_gid;
	if (rc == 0 && (to_set & FUSE_SET_ATTR_MTIME))
		n->st.st_mtim = attr->st_mtim;
	if (rc == 0) {
		clock_gettime(CLOCK_REALTIME, &n->st.st_ctim);
		st = n->st;
	}
	pthread_mutex_unlock(&nullfs.lock);
	if (rc == 0)
		fuse_reply_attr(req, &st, FLOOR_TIMEOUT);
	else
		fuse_reply_err(req, -rc);
}

/* mkdir and create: a new name in parent, or its errno. */
static int name_make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     struct fuse_entry_param *e)
{
	int rc = 0;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *dir = node_at(parent);
	if (!dir || !S_ISDIR(dir->st.st_mode))
		rc = ENOENT;
	else if (name_find(parent, name))
		rc = EEXIST;
	struct floor_node *n = rc ? NULL : node_add(parent, name, mode & ~ctx->umask, ctx);
	if (rc == 0 && !n)
		rc = ENOMEM;
	if (n)
		entry_of(n, e);
	pthread_mutex_unlock(&nullfs.lock);
	return rc;
}

static void floor_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fuse_entry_param e;
	int rc = name_make(req, parent, name, S_IFDIR | (mode & 07777), &e);
	if (rc == 0)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, rc);
}

static void floor_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                         struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	int rc = name_make(req, parent, name, S_IFREG | (mode & 07777), &e);
	if (rc == 0)
		fuse_reply_create(req, &e, fi);
	else
		fuse_reply_err(req, rc);
}

/* unlink and rmdir: 0 or the errno. */
static int name_remove(fuse_ino_t parent, const char *name, bool dir)
{
	int rc = 0;
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = name_find(parent, name);
	if (!n)
		rc = ENOENT;
	else if (dir && !S_ISDIR(n->st.st_mode))
		rc = ENOTDIR;
	else if (!dir && S_ISDIR(n->st.st_mode))
		rc = EISDIR;
	else if (dir && n->children)
		rc = ENOTEMPTY;
	if (rc == 0)
		name_drop(n);
	pthread_mutex_unlock(&nullfs.lock);
	return rc;
}

static void floor_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, name_remove(parent, name, false));
}

static void floor_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, name_remove(parent, name, true));
}

static void floor_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fi->keep_cache = 1; /* one writer, through this mount: the cache is right */
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY; /* as kvc-fuse */
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = node_at(ino);
	if (n && (fi->flags & O_TRUNC))
		n->st.st_size = 0;
	pthread_mutex_unlock(&nullfs.lock);
	if (n)
		fuse_reply_open(req, fi);
	else
		fuse_reply_err(req, ENOENT);
}

static void floor_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	static const char zeros[FLOOR_MAX_READ];
	(void)fi;
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = node_at(ino);
	off_t end = n ? n->st.st_size : 0;
	pthread_mutex_unlock(&nullfs.lock);
	size_t have = off < end ? (size_t)(end - off) : 0;
	size_t len = have < size ? have : size;
	fuse_reply_buf(req, zeros, len < sizeof(zeros) ? len : sizeof(zeros));
}

static void floor_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                        off_t off, struct fuse_file_info *fi)
{
	(void)buf, (void)fi;
	pthread_mutex_lock(&nullfs.lock);
	struct floor_node *n = node_at(ino);
	if (n) {
		if ((size_t)off + size > (size_t)n->st.st_size)
			n->st.st_size = (off_t)((size_t)off + size);
		n->st.st_blocks = (n->st.st_size + 511) / 512;
		stamp(&n->st);
	}
	pthread_mutex_unlock(&nullfs.lock);
	if (n)
		fuse_reply_write(req, size);
	else
		fuse_reply_err(req, ENOENT);
}

static void floor_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, 0);
}

static void floor_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fuse_reply_open(req, fi);
}

static void floor_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi)
{
	(void)datasync;
	floor_ok(req, ino, fi);
}

static void floor_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	(void)ino, (void)name, (void)size;
	fuse_reply_err(req, ENODATA); /* as kvc-fuse answers a file without it */
}

/* Names in ino from node number off on: what rm -rf needs. */
static void floor_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          struct fuse_file_info *fi)
{
	(void)fi;
	char *buf = malloc(size);
	size_t used = 0;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&nullfs.lock);
	for (size_t i = (size_t)off; i < nullfs.count; i++) {
		struct floor_node *n = nullfs.nodes[i];
		if (!n->name || n->parent != ino)
			continue;
		size_t len = fuse_add_direntry(req, buf + used, size - used, n->name, &n->st,
		                               (off_t)i + 1);
		if (len > size - used)
			break;
		used += len;
	}
	pthread_mutex_unlock(&nullfs.lock);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static const struct fuse_lowlevel_ops floor_ops = {
	.init = floor_init,
	.lookup = floor_lookup,
	.getattr = floor_getattr,
	.setattr = floor_setattr,
	.mkdir = floor_mkdir,
	.unlink = floor_unlink,
	.rmdir = floor_rmdir,
	.create = floor_create,
	.open = floor_open,
	.read = floor_read,
	.write = floor_write,
	.flush = floor_ok,
	.release = floor_ok,
	.fsync = floor_fsync,
	.opendir = floor_opendir,
	.readdir = floor_readdir,
	.releasedir = floor_ok,
	.getxattr = floor_getxattr,
};

/* The child: mount at point, say so on `ready`, serve until SIGTERM. */
static int floor_serve(const char *point, int ready)
{
	char *argv[] = {"kvc-bench-floor", "-o",
	                "default_permissions,fsname=kvc-floor,subtype=kvc-floor,max_read=1048576",
	                NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	int rc = 1;
	if (!node_add(0, NULL, S_IFDIR | 0755, NULL))
		return 1;
	struct fuse_session *se = fuse_session_new(&args, &floor_ops, sizeof(floor_ops), NULL);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se) != 0)
		goto destroy;
	if (fuse_session_mount(se, point) != 0)
		goto handlers;
	if (write(ready, "m", 1) == 1) {
		close(ready);
		struct fuse_loop_config *loop = fuse_loop_cfg_create();
		fuse_loop_cfg_set_max_threads(loop, 64);
		fuse_loop_cfg_set_idle_threads(loop, 16);
		fuse_loop_cfg_set_clone_fd(loop, 1);
		rc = fuse_session_loop_mt(se, loop) ? 1 : 0;
		fuse_loop_cfg_destroy(loop);
	}
	fuse_session_unmount(se);
handlers:
	fuse_remove_signal_handlers(se);
destroy:
	fuse_session_destroy(se);
	return rc;
}

int bench_keys_floor_mount(char *point, size_t len, pid_t *child)
{
	int pipefd[2];
	int rc = 0;
	char ready = 0;
	snprintf(point, len, "%s/kvc-bench-floor-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR")
	                                                                     : "/tmp");
	if (!mkdtemp(point))
		return -errno;
	if (pipe2(pipefd, O_CLOEXEC) != 0) {
		rc = -errno;
		goto remove;
	}
	fflush(NULL);
	pid_t parent = getpid();
	*child = fork();
	if (*child < 0)
		rc = -errno;
	if (*child == 0) {
		/* Killed with kvc-bench: it unmounts on the way out. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(1);
		close(pipefd[0]);
		_exit(floor_serve(point, pipefd[1]));
	}
	close(pipefd[1]);
	if (rc == 0 && read(pipefd[0], &ready, 1) != 1)
		rc = -EIO; /* the child could not mount: libfuse said why */
	close(pipefd[0]);
	if (rc < 0 && *child > 0)
		waitpid(*child, NULL, 0);
remove:
	if (rc < 0)
		rmdir(point);
	return rc;
}

int bench_keys_floor_unmount(const char *point, pid_t child)
{
	int status = 0, rc = 0;
	kill(child, SIGTERM);
	/* Half a minute for the child to unmount itself; then the mount goes
	 * lazily (root) and the child is killed. */
	pid_t got = waitpid(child, &status, WNOHANG);
	for (int i = 0; i < 300 && got != child; i++) {
		kvc_clock_sleep_ms(100);
		got = waitpid(child, &status, WNOHANG);
	}
	if (got != child) {
		umount2(point, MNT_DETACH);
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		rc = -ETIMEDOUT;
	}
	if (rmdir(point) != 0 && rc == 0)
		rc = -errno; /* still mounted: EBUSY */
	return rc;
}
