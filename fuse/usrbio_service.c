/* usrbio_service: see usrbio_service.h; protocol: docs/usrbio.md. */
#include "fuse/usrbio_service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/control_socket.h"
#include "fuse/ring_service.h"
#include "core/log.h"

#define RING_WORKERS 8
#define MAX_IOV_SIZE (1ull << 40)

static struct kvc_usrbio_client *client_of(void *conn_service, struct kvc_server_conn *conn)
{
	if (conn->service_state)
		return conn->service_state;
	struct kvc_usrbio_client *c = calloc(1, sizeof(*c));
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (!c)
		return NULL;
	if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		free(c);
		return NULL;
	}
	c->uid = cred.uid;
	c->pid = cred.pid;
	c->id = atomic_fetch_add(&((struct kvc_usrbio *)conn_service)->next_client, 1) + 1;
	c->fs = ((struct kvc_usrbio *)conn_service)->fs;
	c->imports = ((struct kvc_usrbio *)conn_service)->imports;
	atomic_fetch_add(&c->fs->usrbio_clients, 1);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->idle, NULL);
	conn->service_state = c;
	return c;
}

/* Wait until no ring batch uses the client's memory. Lock held. */
static void wait_idle(struct kvc_usrbio_client *c)
{
	while (c->inflight > 0)
		pthread_cond_wait(&c->idle, &c->lock);
}

/* Take the one passed fd a message needs; -EBADF when it is missing. */
static int take_fd(struct kvc_server_conn *conn, int index)
{
	if (index >= conn->passed_fd_count)
		return -EBADF;
	int fd = conn->passed_fds[index];
	conn->passed_fds[index] = -1;
	return fd;
}

static int iov_register(struct kvc_usrbio_client *c, struct kvc_server_conn *conn,
                        const struct kvc_msg_iov_register *m, struct kvc_msg_handle *reply)
{
	struct stat st;
	int fd = take_fd(conn, 0);
	if (fd < 0)
		return fd;
	int rc = 0;
	if (m->size == 0 || m->size > MAX_IOV_SIZE || m->file_offset > MAX_IOV_SIZE)
		rc = -EINVAL;
	else if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (!S_ISREG(st.st_mode))
		rc = -EINVAL;
	else if (st.st_uid != c->uid)
		rc = -EACCES; /* shared memory of another user */
	else if ((uint64_t)st.st_size < m->file_offset + m->size)
		rc = -EINVAL;
	int slot = -1;
	for (int i = 0; rc == 0 && i < KVC_USRBIO_MAX_IOVS && slot < 0; i++)
		if (!c->iovs[i].base)
			slot = i;
	if (rc == 0 && slot < 0)
		rc = -EMFILE;
	if (rc == 0) {
		/* mmap wants a page-aligned offset: map from the page below. */
		uint64_t skew = m->file_offset & 4095u;
		void *map = mmap(NULL, m->size + skew, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		                 (off_t)(m->file_offset - skew));
		if (map == MAP_FAILED) {
			rc = -errno;
		} else {
			pthread_mutex_lock(&c->lock);
			c->iovs[slot] = (struct kvc_usrbio_iov){.base = (char *)map + skew,
			                                        .size = m->size, .device = -1};
			pthread_mutex_unlock(&c->lock);
			atomic_fetch_add(&c->fs->usrbio_iovs, 1);
			reply->handle = (uint32_t)slot;
		}
	}
	close(fd);
	return rc;
}

/* Register GPU memory the client shared over CUDA IPC (no fd). */
static int iov_register_device(struct kvc_usrbio_client *c,
                               const struct kvc_msg_iov_register_device *m,
                               struct kvc_msg_handle *reply)
{
	struct kvc_device_memory memory;
	struct kvc_device_owner owner = {.uid = c->uid, .client = c->id};
	if (m->size == 0 || m->size > MAX_IOV_SIZE || m->offset > MAX_IOV_SIZE)
		return -EINVAL;
	int rc = kvc_device_import(c->imports, &owner, m, &memory);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&c->lock);
	int slot = -1;
	for (int i = 0; i < KVC_USRBIO_MAX_IOVS && slot < 0; i++)
		if (!c->iovs[i].base)
			slot = i;
	if (slot >= 0)
		c->iovs[slot] = (struct kvc_usrbio_iov){.base = memory.address, .size = memory.size,
		                                        .device = memory.device, .gpu = memory};
	pthread_mutex_unlock(&c->lock);
	if (slot < 0) {
		kvc_device_release(c->imports, &memory);
		return -EMFILE;
	}
	atomic_fetch_add(&c->fs->usrbio_iovs, 1);
	reply->handle = (uint32_t)slot;
	return 0;
}

static void unmap_client_iov(struct kvc_usrbio_client *c, struct kvc_usrbio_iov *iov)
{
	if (iov->device >= 0) {
		kvc_device_release(c->imports, &iov->gpu);
	} else {
		uintptr_t base = (uintptr_t)iov->base;
		uintptr_t skew = base & 4095u;
		munmap((void *)(base - skew), iov->size + skew);
	}
	iov->base = NULL;
	atomic_fetch_sub(&c->fs->usrbio_iovs, 1);
}

static int iov_deregister(struct kvc_usrbio_client *c, uint32_t handle)
{
	if (handle >= KVC_USRBIO_MAX_IOVS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int rc = c->iovs[handle].base ? 0 : -EINVAL;
	if (rc == 0) {
		wait_idle(c);
		unmap_client_iov(c, &c->iovs[handle]);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int fd_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                       struct kvc_server_conn *conn, const struct kvc_msg_fd_register *m,
                       struct kvc_msg_fd_register_reply *reply)
{
	struct stat st;
	int fd = take_fd(conn, 0);
	if (fd < 0)
		return fd;
	int rc = 0, access = fcntl(fd, F_GETFL);
	if (m->client_fd < 0 || access < 0)
		rc = -EBADF;
	else if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (st.st_dev != u->mount_dev || !S_ISREG(st.st_mode))
		rc = -EBADF; /* not a file of this mount */
	/* Keep what the check needs, not the file: a kvc-fuse holding files
	 * of its own mount would, when killed, wait forever in the kernel for
	 * itself to answer their flush. The client's open keeps the inode
	 * (3FS's rule: registered fds stay open). */
	close(fd);
	if (rc == 0)
		rc = kvc_fuse_hold_inode(u->fs, st.st_ino);
	if (rc < 0)
		return rc;
	struct kvc_usrbio_file file = {m->client_fd, st.st_ino, access & O_ACCMODE};
	uint64_t dropping = 0;
	pthread_mutex_lock(&c->lock);
	size_t i = 0;
	while (i < c->file_count && c->files[i].client_fd != m->client_fd)
		i++;
	if (i < c->file_count) {
		dropping = c->files[i].ino; /* the number now names another file */
	} else if (c->file_count == KVC_USRBIO_MAX_FILES) {
		rc = -EMFILE;
	} else if (c->file_count == c->file_capacity) {
		size_t cap = c->file_capacity ? c->file_capacity * 2 : 16;
		struct kvc_usrbio_file *grown = realloc(c->files, cap * sizeof(*grown));
		if (!grown)
			rc = -ENOMEM;
		else
			c->files = grown, c->file_capacity = cap;
	}
	if (rc == 0) {
		if (i == c->file_count) {
			c->file_count++;
			atomic_fetch_add(&c->fs->usrbio_files, 1);
		}
		c->files[i] = file;
		*reply = (struct kvc_msg_fd_register_reply){.ino = file.ino, .access = (uint32_t)file.access};
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		dropping = file.ino; /* not registered: let our hold go */
	if (dropping)
		kvc_fuse_drop_inode(c->fs, dropping);
	return rc;
}

static int fd_deregister(struct kvc_usrbio_client *c, int client_fd)
{
	int rc = -EBADF;
	uint64_t dropping = 0;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->file_count; i++) {
		if (c->files[i].client_fd == client_fd) {
			wait_idle(c);
			dropping = c->files[i].ino;
			c->files[i] = c->files[--c->file_count];
			atomic_fetch_sub(&c->fs->usrbio_files, 1);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (dropping)
		kvc_fuse_drop_inode(c->fs, dropping);
	return rc;
}

static int ring_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                         struct kvc_server_conn *conn, const struct kvc_msg_ring_register *m,
                         struct kvc_msg_handle *reply)
{
	int memory_fd = take_fd(conn, 0), doorbell_fd = take_fd(conn, 1);
	int rc = memory_fd < 0 || doorbell_fd < 0 ? -EBADF : 0;
	int slot = -1;
	pthread_mutex_lock(&c->lock);
	for (int i = 0; rc == 0 && i < KVC_USRBIO_MAX_RINGS && slot < 0; i++)
		if (!c->rings[i])
			slot = i;
	if (rc == 0 && slot < 0)
		rc = -EMFILE;
	if (rc == 0)
		rc = kvc_ring_service_add(u->rings, c, m, memory_fd, doorbell_fd, &c->rings[slot]);
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		if (memory_fd >= 0)
			close(memory_fd);
		if (doorbell_fd >= 0)
			close(doorbell_fd);
		return rc;
	}
	reply->handle = (uint32_t)slot;
	atomic_fetch_add(&c->fs->usrbio_rings, 1);
	return 0;
}

static int ring_deregister(struct kvc_usrbio *u, struct kvc_usrbio_client *c, uint32_t handle)
{
	if (handle >= KVC_USRBIO_MAX_RINGS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	struct kvc_ring_server_ring *ring = c->rings[handle];
	c->rings[handle] = NULL;
	pthread_mutex_unlock(&c->lock);
	if (!ring)
		return -EINVAL;
	kvc_ring_service_remove(u->rings, ring);
	atomic_fetch_sub(&c->fs->usrbio_rings, 1);
	return 0;
}

#define BODY(conn, h, type) \
	((h)->body_len == sizeof(type) ? (const type *)(conn)->body : NULL)

static int handle(void *service, struct kvc_server_conn *conn, const struct kvc_wire_header *h)
{
	struct kvc_usrbio *u = service;
	struct kvc_usrbio_client *c = client_of(service, conn);
	union {
		struct kvc_msg_handle handle;
		struct kvc_msg_fd_register_reply fd;
	} reply;
	uint32_t reply_len = 0;
	int rc = -EINVAL;
	if (!c)
		return -ENOMEM;
	if (h->data_len)
		return -EPROTO;
	switch (h->type) {
	case KVC_MSG_IOV_REGISTER: {
		const struct kvc_msg_iov_register *m = BODY(conn, h, struct kvc_msg_iov_register);
		rc = m ? iov_register(c, conn, m, &reply.handle) : -EINVAL;
		reply_len = sizeof(reply.handle);
		break;
	}
	case KVC_MSG_IOV_REGISTER_DEVICE: {
		const struct kvc_msg_iov_register_device *m =
			BODY(conn, h, struct kvc_msg_iov_register_device);
		rc = m ? iov_register_device(c, m, &reply.handle) : -EINVAL;
		reply_len = sizeof(reply.handle);
		break;
	}
	case KVC_MSG_IOV_DEREGISTER: {
		const struct kvc_msg_handle *m = BODY(conn, h, struct kvc_msg_handle);
		rc = m ? iov_deregister(c, m->handle) : -EINVAL;
		break;
	}
	case KVC_MSG_FD_REGISTER: {
		const struct kvc_msg_fd_register *m = BODY(conn, h, struct kvc_msg_fd_register);
		rc = m ? fd_register(u, c, conn, m, &reply.fd) : -EINVAL;
		reply_len = sizeof(reply.fd);
		break;
	}
	case KVC_MSG_FD_DEREGISTER: {
		const struct kvc_msg_fd_register *m = BODY(conn, h, struct kvc_msg_fd_register);
		rc = m ? fd_deregister(c, m->client_fd) : -EINVAL;
		break;
	}
	case KVC_MSG_RING_REGISTER: {
		const struct kvc_msg_ring_register *m = BODY(conn, h, struct kvc_msg_ring_register);
		rc = m ? ring_register(u, c, conn, m, &reply.handle) : -EINVAL;
		reply_len = sizeof(reply.handle);
		break;
	}
	case KVC_MSG_RING_DEREGISTER: {
		const struct kvc_msg_handle *m = BODY(conn, h, struct kvc_msg_handle);
		rc = m ? ring_deregister(u, c, m->handle) : -EINVAL;
		break;
	}
	default:
		rc = -EOPNOTSUPP;
	}
	return kvc_server_reply(conn, h, rc, &reply, reply_len);
}

/* The client went away (exit, kill, close): drop everything it had. */
static void cleanup(void *service, struct kvc_server_conn *conn)
{
	struct kvc_usrbio *u = service;
	struct kvc_usrbio_client *c = conn->service_state;
	if (!c)
		return;
	for (int i = 0; i < KVC_USRBIO_MAX_RINGS; i++)
		ring_deregister(u, c, (uint32_t)i);
	pthread_mutex_lock(&c->lock);
	wait_idle(c);
	for (int i = 0; i < KVC_USRBIO_MAX_IOVS; i++)
		if (c->iovs[i].base)
			unmap_client_iov(c, &c->iovs[i]);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < c->file_count; i++)
		kvc_fuse_drop_inode(c->fs, c->files[i].ino);
	atomic_fetch_sub(&c->fs->usrbio_files, (int)c->file_count);
	atomic_fetch_sub(&c->fs->usrbio_clients, 1);
	free(c->files);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->idle);
	free(c);
	conn->service_state = NULL;
}

int kvc_usrbio_resolve_iov(struct kvc_usrbio_client *c, uint32_t handle, uint64_t offset,
                           uint64_t length, void **out, int *device)
{
	int rc = -EFAULT;
	if (handle >= KVC_USRBIO_MAX_IOVS)
		return rc;
	pthread_mutex_lock(&c->lock);
	const struct kvc_usrbio_iov *iov = &c->iovs[handle];
	if (iov->base && offset <= iov->size && length <= iov->size - offset) {
		*out = (char *)iov->base + offset;
		*device = iov->device;
		rc = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
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

static void *listener_main(void *arg)
{
	struct kvc_usrbio *u = arg;
	int rc = kvc_server_run(&u->server);
	kvc_log_error("usrbio: control socket accept failed: %s", strerror(-rc));
	return NULL;
}

int kvc_usrbio_start(struct kvc_usrbio *u, struct kvc_fuse *fs, const char *mountpoint)
{
	char real[PATH_MAX];
	struct sockaddr_un addr;
	socklen_t len;
	pthread_t thread;
	if (!realpath(mountpoint, real))
		return -errno;
	u->fs = fs;
	u->imports = kvc_device_io_imports_create();
	if (!u->imports)
		return -ENOMEM;
	int rc = kvc_ring_service_start(fs, RING_WORKERS, &u->rings);
	if (rc < 0)
		return rc;
	kvc_control_socket_address(real, &addr, &len);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, len) < 0 || listen(fd, 128) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	u->server = (struct kvc_server){.listen_fd = fd, .token = "", .max_connections = 4096,
	                                .handle = handle, .cleanup = cleanup, .service = u,
	                                .name = "usrbio"};
	rc = pthread_create(&thread, NULL, listener_main, u);
	if (rc)
		return -rc;
	pthread_detach(thread);
	return 0;
}
