/* usrbio_service: see usrbio_service.h; protocol: docs/usrbio.md. */
#include "fuse/usrbio_service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/control_socket.h"
#include "core/log.h"
#include "core/ring.h"
#include "fuse/ring_service.h"
#include "fuse/usrbio_iovs.h"

#define RING_WORKERS 8

void kvc_usrbio_client_get(struct kvc_usrbio_client *c)
{
	atomic_fetch_add(&c->refs, 1);
}

void kvc_usrbio_client_put(struct kvc_usrbio_client *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	free(c->files);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->idle);
	free(c);
}

bool kvc_usrbio_client_enter(struct kvc_usrbio_client *c)
{
	/* Counted and checked under one lock: cleanup, which sets dead and
	 * then waits for inflight to drain, either sees this batch counted or
	 * this batch sees dead. */
	pthread_mutex_lock(&c->lock);
	bool alive = !c->dead;
	if (alive)
		c->inflight++;
	pthread_mutex_unlock(&c->lock);
	return alive;
}

void kvc_usrbio_client_leave(struct kvc_usrbio_client *c)
{
	pthread_mutex_lock(&c->lock);
	if (--c->inflight == 0)
		pthread_cond_broadcast(&c->idle);
	pthread_mutex_unlock(&c->lock);
}

/* The connection's client, made at its first frame; NULL when out of
 * memory or the peer is unknown. */
static struct kvc_usrbio_client *client_of(struct kvc_usrbio *u, struct kvc_server_conn *conn)
{
	if (conn->service_state)
		return conn->service_state;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return NULL;
	struct kvc_usrbio_client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->service = u;
	atomic_init(&c->refs, 1); /* the connection's */
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->pid = cred.pid;
	gid_t groups[KVC_USRBIO_MAX_GROUPS * 4];
	len = sizeof(groups);
	if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
		/* More groups than we keep: the first ones (a denial, never more). */
		size_t n = len / sizeof(gid_t);
		c->group_count = (int)(n < KVC_USRBIO_MAX_GROUPS ? n : KVC_USRBIO_MAX_GROUPS);
		memcpy(c->groups, groups, (size_t)c->group_count * sizeof(gid_t));
	}
	c->id = atomic_fetch_add(&u->next_client, 1) + 1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->idle, NULL);
	atomic_fetch_add(&u->fs->usrbio_clients, 1);
	conn->service_state = c;
	return c;
}

/* Take the passed fd a message needs; -EBADF when it is missing. */
static int take_fd(struct kvc_server_conn *conn, int index)
{
	if (index >= conn->passed_fd_count)
		return -EBADF;
	int fd = conn->passed_fds[index];
	conn->passed_fds[index] = -1;
	return fd;
}

/* What a handler answers: a body, and an fd passed along (not owned). */
struct reply {
	union {
		struct kvc_msg_handle handle;
		struct kvc_msg_fd_register_reply fd;
	} body;
	uint32_t len;
	int fd;
};

static int on_iov_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                           struct kvc_server_conn *conn, const void *body, struct reply *r)
{
	int fd = take_fd(conn, 0);
	r->len = sizeof(r->body.handle);
	return fd < 0 ? fd : kvc_usrbio_iov_register(u, c, fd, body, &r->body.handle.handle);
}

static int on_iov_register_device(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                                  struct kvc_server_conn *conn, const void *body,
                                  struct reply *r)
{
	(void)conn;
	r->len = sizeof(r->body.handle);
	return kvc_usrbio_iov_register_device(u, c, body, &r->body.handle.handle);
}

static int on_iov_deregister(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                             struct kvc_server_conn *conn, const void *body, struct reply *r)
{
	(void)u, (void)conn, (void)r;
	return kvc_usrbio_iov_deregister(c, ((const struct kvc_msg_handle *)body)->handle);
}

/* Record file under client_fd (a number registered again names the new
 * file). Returns 0 and the file it replaced (or ino 0), -EMFILE, -ENOMEM. */
static int file_insert(struct kvc_usrbio_client *c, const struct kvc_usrbio_file *file,
                       struct kvc_usrbio_file *replaced)
{
	int rc = 0;
	replaced->ino = 0;
	pthread_mutex_lock(&c->lock);
	size_t i = 0;
	while (i < c->file_count && c->files[i].client_fd != file->client_fd)
		i++;
	if (i < c->file_count) {
		*replaced = c->files[i];
	} else if (c->file_count == KVC_USRBIO_MAX_FILES) {
		rc = -EMFILE;
	} else if (c->file_count == c->file_capacity) {
		size_t cap = c->file_capacity ? c->file_capacity * 2 : 16;
		struct kvc_usrbio_file *grown = realloc(c->files, cap * sizeof(*grown));
		if (grown)
			c->files = grown, c->file_capacity = cap;
		else
			rc = -ENOMEM;
	}
	if (rc == 0) {
		if (i == c->file_count) {
			c->file_count++;
			atomic_fetch_add(&c->service->fs->usrbio_files, 1);
		}
		c->files[i] = *file;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int on_fd_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                          struct kvc_server_conn *conn, const void *body, struct reply *r)
{
	const struct kvc_msg_fd_register *m = body;
	struct kvc_usrbio_usage one = {.registrations = 1};
	struct statx stx;
	int fd = take_fd(conn, 0);
	r->len = sizeof(r->body.fd);
	if (fd < 0)
		return fd;
	int rc = 0, access = fcntl(fd, F_GETFL);
	if (m->client_fd < 0 || access < 0)
		rc = -EBADF;
	/* Cached attributes only: a file of another FUSE filesystem costs its
	 * daemon nothing and cannot make us wait. */
	else if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO, &stx) < 0)
		rc = -errno;
	else if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != u->mount_dev ||
	         (!S_ISREG(stx.stx_mode) && !S_ISDIR(stx.stx_mode)))
		rc = -EBADF; /* not a file or directory of this mount */
	/* O_PATH opens without read or write access (search permission on the
	 * directory is enough): its access mode reads as O_RDONLY, but it is
	 * no readable file, or any user could read a file closed to them. A
	 * key directory may be O_PATH: ring keys check every access anew. */
	else if ((access & O_PATH) && !S_ISDIR(stx.stx_mode))
		rc = -EBADF;
	/* Keep what the check needs, not the file: a kvc-fuse holding files
	 * of its own mount would, when killed, wait forever in the kernel for
	 * itself to answer their flush. The client's open keeps the inode
	 * (3FS's rule: registered fds stay open). */
	close(fd);
	if (rc == 0)
		rc = kvc_usrbio_limits_charge(&u->limits, c->uid, &one);
	if (rc < 0)
		return rc;
	bool dir = S_ISDIR(stx.stx_mode);
	rc = dir ? 0 : kvc_fuse_hold_inode(u->fs, stx.stx_ino);
	if (rc < 0) {
		kvc_usrbio_limits_release(&u->limits, c->uid, &one);
		return rc;
	}
	struct kvc_usrbio_file file = {m->client_fd, stx.stx_ino,
	                               dir ? O_RDONLY : access & O_ACCMODE, dir};
	struct kvc_usrbio_file dropping = {.ino = 0};
	rc = file_insert(c, &file, &dropping);
	if (rc < 0)
		dropping = file; /* held but not registered: let the hold go */
	else /* a directory answers O_DIRECTORY in its access */
		r->body.fd = (struct kvc_msg_fd_register_reply){
			.ino = file.ino, .access = (uint32_t)file.access | (dir ? O_DIRECTORY : 0)};
	if (dropping.ino) /* failed, or the number named another file: no new registration */
		kvc_usrbio_limits_release(&u->limits, c->uid, &one);
	if (dropping.ino && !dropping.dir)
		kvc_fuse_drop_inode(u->fs, dropping.ino);
	return rc;
}

static int on_fd_deregister(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                            struct kvc_server_conn *conn, const void *body, struct reply *r)
{
	int client_fd = ((const struct kvc_msg_fd_register *)body)->client_fd;
	struct kvc_usrbio_usage one = {.registrations = 1};
	uint64_t dropping = 0;
	bool dir = false;
	(void)conn, (void)r;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->file_count; i++) {
		if (c->files[i].client_fd == client_fd) {
			while (c->inflight > 0) /* no batch is using it */
				pthread_cond_wait(&c->idle, &c->lock);
			dropping = c->files[i].ino;
			dir = c->files[i].dir;
			c->files[i] = c->files[--c->file_count];
			atomic_fetch_sub(&u->fs->usrbio_files, 1);
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (!dropping)
		return -EBADF;
	if (!dir)
		kvc_fuse_drop_inode(u->fs, dropping);
	kvc_usrbio_limits_release(&u->limits, c->uid, &one);
	return 0;
}

static int on_ring_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                            struct kvc_server_conn *conn, const void *body, struct reply *r)
{
	const struct kvc_msg_ring_register *m = body;
	struct kvc_usrbio_usage one = {.rings = 1};
	struct kvc_ring_server_ring *ring = NULL;
	int memory_fd = take_fd(conn, 0);
	r->len = sizeof(r->body.handle);
	if (memory_fd < 0)
		return memory_fd;
	int rc = m->entries == 0 || m->entries > KVC_RING_MAX_ENTRIES ? -EINVAL : 0;
	if (rc == 0)
		rc = kvc_usrbio_check_memory(u, c, memory_fd, kvc_ring_bytes(m->entries), true);
	if (rc == 0)
		rc = kvc_usrbio_limits_charge(&u->limits, c->uid, &one);
	if (rc == 0) {
		rc = kvc_ring_service_add(u->rings, c, m, memory_fd, &ring, &r->fd);
		if (rc < 0)
			kvc_usrbio_limits_release(&u->limits, c->uid, &one);
	}
	close(memory_fd);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&c->lock);
	int slot = -1;
	for (int i = 0; i < KVC_USRBIO_MAX_RINGS && slot < 0; i++)
		if (!c->rings[i])
			slot = i;
	if (slot >= 0)
		c->rings[slot] = ring;
	pthread_mutex_unlock(&c->lock);
	if (slot < 0) {
		kvc_ring_service_remove(u->rings, ring);
		kvc_usrbio_limits_release(&u->limits, c->uid, &one);
		r->fd = -1;
		return -EMFILE;
	}
	r->body.handle.handle = (uint32_t)slot;
	atomic_fetch_add(&u->fs->usrbio_rings, 1);
	return 0;
}

static int ring_deregister(struct kvc_usrbio *u, struct kvc_usrbio_client *c, uint32_t handle)
{
	struct kvc_usrbio_usage one = {.rings = 1};
	if (handle >= KVC_USRBIO_MAX_RINGS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	struct kvc_ring_server_ring *ring = c->rings[handle];
	c->rings[handle] = NULL;
	pthread_mutex_unlock(&c->lock);
	if (!ring)
		return -EINVAL;
	kvc_ring_service_remove(u->rings, ring);
	atomic_fetch_sub(&u->fs->usrbio_rings, 1);
	kvc_usrbio_limits_release(&u->limits, c->uid, &one);
	return 0;
}

static int on_ring_deregister(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                              struct kvc_server_conn *conn, const void *body, struct reply *r)
{
	(void)conn, (void)r;
	return ring_deregister(u, c, ((const struct kvc_msg_handle *)body)->handle);
}

/* The control messages: a frame's body must be exactly `body` bytes and
 * carry `fds` descriptors (fewer: -EBADF; more: -EPROTO, e.g. a
 * RING_REGISTER with a doorbell of the client's, from a libkvc before
 * doorbells were kvc-fuse's). A type without a row: -EOPNOTSUPP. */
static const struct control_message {
	uint16_t type;
	uint32_t body;
	int fds;
	int (*handler)(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
	               struct kvc_server_conn *conn, const void *body, struct reply *r);
} messages[] = {
	{KVC_MSG_IOV_REGISTER, sizeof(struct kvc_msg_iov_register), 1, on_iov_register},
	{KVC_MSG_IOV_DEREGISTER, sizeof(struct kvc_msg_handle), 0, on_iov_deregister},
	{KVC_MSG_FD_REGISTER, sizeof(struct kvc_msg_fd_register), 1, on_fd_register},
	{KVC_MSG_FD_DEREGISTER, sizeof(struct kvc_msg_fd_register), 0, on_fd_deregister},
	{KVC_MSG_RING_REGISTER, sizeof(struct kvc_msg_ring_register), 1, on_ring_register},
	{KVC_MSG_RING_DEREGISTER, sizeof(struct kvc_msg_handle), 0, on_ring_deregister},
	{KVC_MSG_IOV_REGISTER_DEVICE, sizeof(struct kvc_msg_iov_register_device), 0,
	 on_iov_register_device},
};

int kvc_usrbio_handle(void *service, struct kvc_server_conn *conn,
                      const struct kvc_wire_header *h)
{
	struct kvc_usrbio *u = service;
	struct kvc_usrbio_client *c = client_of(u, conn);
	struct reply r = {.fd = -1};
	const struct control_message *m = NULL;
	int rc;
	if (!c)
		return -ENOMEM;
	if (h->data_len)
		return -EPROTO;
	for (size_t i = 0; i < sizeof(messages) / sizeof(messages[0]) && !m; i++)
		if (messages[i].type == h->type)
			m = &messages[i];
	if (!m)
		rc = -EOPNOTSUPP;
	else if (h->body_len != m->body)
		rc = -EINVAL;
	else if (conn->passed_fd_count < m->fds)
		rc = -EBADF;
	else if (conn->passed_fd_count > m->fds)
		rc = -EPROTO;
	else
		rc = m->handler(u, c, conn, conn->body, &r);
	if (rc < 0 || r.fd < 0)
		return kvc_server_reply(conn, h, rc, &r.body, r.len);
	/* A reply with an fd (a ring's doorbell): the same frame, with it. */
	struct kvc_wire_header reply;
	kvc_wire_header_init(&reply, h->type, h->request_id, 0, r.len, 0);
	return kvc_wire_send_fds(conn->fd, &reply, &r.body, &r.fd, 1);
}

/* The client went away (exit, kill, close): drop everything it had. */
void kvc_usrbio_disconnect(void *service, struct kvc_server_conn *conn)
{
	struct kvc_usrbio *u = service;
	struct kvc_usrbio_client *c = conn->service_state;
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->dead = true; /* no batch starts from now on */
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < KVC_USRBIO_MAX_RINGS; i++)
		ring_deregister(u, c, (uint32_t)i);
	kvc_usrbio_iov_drop_all(c); /* after the batches in flight */
	pthread_mutex_lock(&c->lock);
	size_t files = c->file_count;
	c->file_count = 0;
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < files; i++)
		if (!c->files[i].dir)
			kvc_fuse_drop_inode(u->fs, c->files[i].ino);
	struct kvc_usrbio_usage registered = {.registrations = files};
	kvc_usrbio_limits_release(&u->limits, c->uid, &registered);
	atomic_fetch_sub(&u->fs->usrbio_files, (int)files);
	atomic_fetch_sub(&u->fs->usrbio_clients, 1);
	conn->service_state = NULL;
	kvc_usrbio_client_put(c); /* the rings may still hold it a moment */
}

int kvc_usrbio_resolve_file(struct kvc_usrbio_client *c, int client_fd,
                            struct kvc_usrbio_file *out)
{
	int rc = -EBADF;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->file_count; i++) {
		if (c->files[i].client_fd == client_fd) {
			*out = c->files[i];
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static bool in_group(const struct kvc_usrbio_client *c, uint32_t gid)
{
	if (c->gid == gid)
		return true;
	for (int i = 0; i < c->group_count; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

int kvc_usrbio_client_may(const struct kvc_usrbio_client *c, const struct kvc_attr *attr,
                          int mask)
{
	mask &= R_OK | W_OK | X_OK;
	if (c->uid == 0) /* CAP_DAC_OVERRIDE: all but executing a file no one may */
		return !(mask & X_OK) || S_ISDIR(attr->mode) || (attr->mode & 0111) ? 0 : -EACCES;
	uint32_t bits = c->uid == attr->uid ? attr->mode >> 6
	              : in_group(c, attr->gid) ? attr->mode >> 3 : attr->mode;
	return ((int)bits & mask) == mask ? 0 : -EACCES;
}

static void *listener_main(void *arg)
{
	struct kvc_usrbio *u = arg;
	int rc = kvc_server_run(&u->server);
	kvc_log_error("usrbio: control socket accept failed: %s", strerror(-rc));
	return NULL;
}

/* Two descriptors per ring (its doorbell's ends), one per connection:
 * take all the process may have. */
static void raise_fd_limit(void)
{
	struct rlimit limit;
	if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
		limit.rlim_cur = limit.rlim_max;
		setrlimit(RLIMIT_NOFILE, &limit);
	}
}

int kvc_usrbio_init(struct kvc_usrbio *u, struct kvc_fuse *fs, int workers)
{
	const struct kvc_config *config = &fs->config;
	struct kvc_usrbio_usage max = {.iov_bytes = config->usrbio_uid_iov_mb << 20,
	                               .rings = config->usrbio_uid_rings,
	                               .registrations = config->usrbio_uid_registrations,
	                               .connections = config->usrbio_uid_connections};
	u->fs = fs;
	atomic_init(&u->next_client, 0);
	int rc = kvc_usrbio_limits_init(&u->limits, &max);
	if (rc < 0)
		return rc;
	u->imports = kvc_device_io_imports_create();
	if (!u->imports)
		return -ENOMEM;
	raise_fd_limit();
	return kvc_ring_service_start(fs, workers, &u->rings);
}

/* The control socket's peers, counted per uid at accept ([fuse]
 * usrbio_uid_connections): a user who opens connections without end runs
 * out of its own, not of everyone's. -EUSERS past it. */
static int admit_peer(void *service, int fd)
{
	struct kvc_usrbio *u = service;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	const struct kvc_usrbio_usage one = {.connections = 1};
	int rc = kvc_usrbio_limits_charge(&u->limits, cred.uid, &one);
	return rc == -EDQUOT ? -EUSERS : rc;
}

static void peer_left(void *service, int fd)
{
	struct kvc_usrbio *u = service;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	const struct kvc_usrbio_usage one = {.connections = 1};
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
		kvc_usrbio_limits_release(&u->limits, cred.uid, &one);
}

int kvc_usrbio_start(struct kvc_usrbio *u, struct kvc_fuse *fs, const char *mountpoint)
{
	char real[PATH_MAX];
	struct sockaddr_un addr;
	socklen_t len;
	pthread_t thread;
	if (!realpath(mountpoint, real))
		return -errno;
	int rc = kvc_usrbio_init(u, fs, RING_WORKERS);
	if (rc < 0)
		return rc;
	kvc_control_socket_address(real, &addr, &len);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, len) < 0 || listen(fd, 128) < 0) {
		rc = -errno;
		if (rc == -EADDRINUSE)
			kvc_log_error("usrbio: the control socket of %s is taken: another kvc-fuse, "
			              "or a process squatting its name (ss -xlp | grep kvc-usrbio)", real);
		close(fd);
		return rc;
	}
	u->server = (struct kvc_server){.listen_fd = fd, .auth = NULL,
	                                .max_connections = KVC_USRBIO_MAX_CONNECTIONS,
	                                .handle = kvc_usrbio_handle,
	                                .cleanup = kvc_usrbio_disconnect, .admit = admit_peer,
	                                .leave = peer_left, .service = u, .name = "usrbio"};
	rc = pthread_create(&thread, NULL, listener_main, u);
	if (rc)
		return -rc;
	pthread_detach(thread);
	return 0;
}
