/*
 * usrbio: the client side of kvcfs USRBIO (include/kvc/usrbio.h).
 *
 * State: the library keeps one process-wide table, guarded by one mutex:
 * the control connections (one per mount, opened on first use) and the
 * registered fds (fd -> mount connection, access mode). 3FS's API
 * registers fds without naming a mount, so this state cannot live in a
 * caller's handle. Everything else belongs to iov and ring handles.
 *
 * Names in /dev/shm: kvc_iov_create makes /dev/shm/kvc-iov-<id> so that
 * other processes can open the iov by id; the handle that created it
 * removes the name at kvc_iov_unlink or kvc_iov_destroy, whichever comes
 * first (as 3FS does), so nothing is left behind unless the process is
 * killed. Rings live in memfds and have no name.
 */
#include "kvc/usrbio.h"
#include "kvc/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "core/control_socket.h"
#include "client/iov_device.h"
#include "core/ring.h"
#include "core/wire.h"

struct control {
	struct control *next;
	char mount[PATH_MAX];
	int fd;
	uint64_t next_id;
	uint64_t generation; /* +1 each time kvc-fuse restarted and we reconnected */
	pthread_mutex_t lock; /* one exchange at a time */
};

struct registered_fd {
	int fd;
	int access;          /* O_ACCMODE bits; -1 while the registration is being made */
	struct control *control;
	uint64_t generation; /* of control when registered: older means kvc-fuse forgot it */
};

/* The process-wide table (see the header comment). */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct control *controls;
static struct registered_fd *fds;
static size_t fd_count, fd_capacity;

struct kvc_iov {
	void *base;
	size_t size;
	size_t block_size;
	int numa;
	uint8_t id[16];
	bool owned; /* we mapped it (create/open): unmap at destroy */
	bool named; /* we created its /dev/shm name and it is still there */
	bool pinned; /* page-locked for the GPU (src/client/gpu.c) */
	int device;  /* GPU memory of this device (src/client/gpu.c), or -1: host */
	uint32_t handle;
	struct control *control;
	uint64_t generation; /* of control when registered */
};

struct kvc_ring {
	struct kvc_ring_shared *shared;
	size_t bytes;
	uint32_t entries;      /* slots in the shared memory: a power of two */
	uint32_t mask;
	uint32_t limit;        /* entries asked for: at most this many outstanding */
	bool for_read;
	uint32_t local_tail;   /* prepared, not yet published */
	uint32_t outstanding;  /* prepared and not yet reaped */
	int doorbell;
	uint32_t handle;
	struct control *control;
	uint64_t generation; /* of control when registered */
};

/* realpath of path, or of its nearest existing ancestor plus the rest:
 * a file about to be created still names its mount. */
static int resolve(const char *path, char *real)
{
	char copy[PATH_MAX];
	if (strlen(path) >= sizeof(copy))
		return -ENAMETOOLONG;
	strcpy(copy, path);
	for (;;) {
		if (realpath(copy, real)) {
			size_t done = strlen(copy);
			if (strlen(real) + strlen(path + done) >= PATH_MAX)
				return -ENAMETOOLONG;
			strcat(real, path + done);
			return 0;
		}
		char *slash = strrchr(copy, '/');
		if (errno != ENOENT || !slash || slash == copy)
			return -errno;
		*slash = '\0';
	}
}

int kvc_extract_mount_point(char *out, size_t size, const char *path)
{
	char real[PATH_MAX], line[8192], best[PATH_MAX] = "";
	int rc = resolve(path, real);
	if (rc < 0)
		return rc;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char point[PATH_MAX], type[64];
		/* fields: id parent dev root point options [optional...] - type */
		const char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 ||
		    sscanf(dash + 3, "%63s", type) != 1 || strcmp(type, "fuse.kvc") != 0)
			continue;
		size_t n = strlen(point);
		bool inside = strncmp(real, point, n) == 0 &&
		              (real[n] == '\0' || real[n] == '/' || strcmp(point, "/") == 0);
		if (inside && n >= strlen(best))
			strcpy(best, point);
	}
	fclose(f);
	if (best[0] == '\0')
		return -ENOENT;
	if (strlen(best) + 1 > size)
		return -ENAMETOOLONG;
	strcpy(out, best);
	return (int)strlen(best);
}

int kvc_is_kvcfs(int fd)
{
	char value[32];
	return fgetxattr(fd, "user.kvc.inode", value, sizeof(value)) > 0 ? 1 : 0;
}

static int control_connect(const char *mount)
{
	struct sockaddr_un addr;
	socklen_t len;
	kvc_control_socket_address(mount, &addr, &len);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, len) < 0) {
		int rc = errno == ENOENT ? -ECONNREFUSED : -errno;
		close(fd);
		return rc;
	}
	struct kvc_msg_hello hello = {KVC_WIRE_VERSION, 0};
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_HELLO, 0, 0, sizeof(hello), 0);
	int rc = kvc_wire_send(fd, &h, &hello, NULL, 0);
	if (rc == 0)
		rc = kvc_wire_recv(fd, &h, NULL, 0);
	if (rc == 0)
		rc = h.status;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Whether kvc-fuse is gone: its end of the control connection closed. */
static bool control_lost(const struct control *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* After kvc-fuse restarted, the next registration connects again (what
 * was registered with the old one died with it). Table lock held. */
static int control_revive(struct control *c)
{
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	if (control_lost(c)) {
		int fd = control_connect(c->mount);
		if (fd < 0) {
			rc = fd;
		} else {
			close(c->fd);
			c->fd = fd;
			c->generation++;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* The control connection of the mount containing path (opened once, and
 * again after kvc-fuse restarted). */
static int control_get(const char *path, struct control **out)
{
	char mount[PATH_MAX];
	int rc = kvc_extract_mount_point(mount, sizeof(mount), path);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&table_lock);
	struct control *c = controls;
	while (c && strcmp(c->mount, mount) != 0)
		c = c->next;
	if (c) {
		rc = control_revive(c);
		if (rc < 0)
			goto out;
	} else {
		int fd = control_connect(mount);
		c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			rc = fd < 0 ? fd : -ENOMEM;
			if (fd >= 0)
				close(fd);
			goto out;
		}
		strcpy(c->mount, mount);
		c->fd = fd;
		pthread_mutex_init(&c->lock, NULL);
		c->next = controls;
		controls = c;
	}
	*out = c;
	rc = 0;
out:
	pthread_mutex_unlock(&table_lock);
	return rc;
}

/* One request (with fds) and its reply on a control connection. */
static int control_call(struct control *c, uint16_t type, const void *body, uint32_t body_len,
                        const int *pass, int pass_count, void *reply, uint32_t reply_cap)
{
	struct kvc_wire_header h;
	pthread_mutex_lock(&c->lock);
	uint64_t id = ++c->next_id;
	kvc_wire_header_init(&h, type, id, 0, body_len, 0);
	int rc = kvc_wire_send_fds(c->fd, &h, body, pass, pass_count);
	if (rc == 0)
		rc = kvc_wire_recv(c->fd, &h, reply, reply_cap);
	if (rc == 0 && (h.request_id != id || h.type != type))
		rc = -EBADMSG;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		return rc == -ECONNRESET || rc == -EPIPE ? -ECONNREFUSED : rc;
	return h.status;
}

/* Deregister a handle, unless the kvc-fuse it was registered with is gone
 * (it died with it, and the number may name a newer registration now). */
static void control_deregister(struct control *c, uint16_t type, uint64_t generation,
                               uint32_t handle)
{
	struct kvc_msg_handle m = {handle, 0};
	pthread_mutex_lock(&c->lock);
	bool current = c->generation == generation;
	pthread_mutex_unlock(&c->lock);
	if (current)
		control_call(c, type, &m, sizeof(m), NULL, 0, NULL, 0);
}

static void id_to_name(const uint8_t id[16], char *name, size_t size)
{
	char hex[33];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	snprintf(name, size, "/kvc-iov-%s", hex);
}

static int iov_register(struct kvc_iov *iov, const char *mount, int shm_fd,
                        uint64_t file_offset)
{
	int rc = control_get(mount, &iov->control);
	if (rc < 0)
		return rc;
	iov->generation = iov->control->generation;
	struct kvc_msg_iov_register m = {.size = iov->size, .block_size = iov->block_size,
	                                 .file_offset = file_offset, .numa = iov->numa};
	memcpy(m.id, iov->id, 16);
	struct kvc_msg_handle reply;
	rc = control_call(iov->control, KVC_MSG_IOV_REGISTER, &m, sizeof(m), &shm_fd, 1,
	                  &reply, sizeof(reply));
	if (rc == 0)
		iov->handle = reply.handle;
	return rc;
}

static int iov_map_named(struct kvc_iov **out, const uint8_t id[16], const char *mount,
                         size_t size, size_t block_size, int numa, bool create)
{
	char name[64];
	struct kvc_iov *iov = calloc(1, sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	if (size == 0) {
		free(iov);
		return -EINVAL;
	}
	*iov = (struct kvc_iov){.size = size, .block_size = block_size, .numa = numa,
	                        .owned = true, .named = create, .device = -1};
	memcpy(iov->id, id, 16);
	id_to_name(id, name, sizeof(name));
	int fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
	int rc = fd < 0 ? -errno : 0;
	struct stat st;
	if (rc == 0 && create && ftruncate(fd, (off_t)size) < 0)
		rc = -errno;
	if (rc == 0 && fstat(fd, &st) < 0)
		rc = -errno;
	if (rc == 0 && (uint64_t)st.st_size < size)
		rc = -EINVAL; /* opened with a size larger than the iov */
	if (rc == 0) {
		iov->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (iov->base == MAP_FAILED) {
			iov->base = NULL;
			rc = -errno;
		}
	}
	if (rc == 0)
		rc = iov_register(iov, mount, fd, 0);
	if (fd >= 0)
		close(fd);
	if (rc < 0) {
		if (create && fd >= 0)
			shm_unlink(name);
		if (iov->base)
			munmap(iov->base, size);
		free(iov);
		return rc;
	}
	*out = iov;
	return 0;
}

int kvc_iov_create(struct kvc_iov **out, const char *mount, size_t size, size_t block_size,
                   int numa, uint8_t id_out[16])
{
	uuid_t id;
	uuid_generate_random(id);
	int rc = iov_map_named(out, id, mount, size, block_size, numa, true);
	if (rc == 0 && id_out)
		memcpy(id_out, id, 16);
	return rc;
}

int kvc_iov_open(struct kvc_iov **out, const uint8_t id[16], const char *mount, size_t size,
                 size_t block_size, int numa)
{
	return iov_map_named(out, id, mount, size, block_size, numa, false);
}

/* Find the shared file behind [base, base + size) in /proc/self/maps. */
static int find_backing_file(void *base, size_t size, char *path, size_t path_size,
                             uint64_t *file_offset)
{
	char line[PATH_MAX + 256];
	uintptr_t want = (uintptr_t)base;
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	int rc = -EINVAL;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t start, end;
		unsigned long long offset;
		char perms[8];
		int name_at = 0;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %*s %*s %n", &start, &end, perms,
		           &offset, &name_at) < 4 || want < start || want >= end)
			continue;
		char *name = line + name_at;
		name[strcspn(name, "\n")] = '\0';
		/* Shared, writable, backed by a file, covering the whole range. */
		if (perms[3] == 's' && perms[1] == 'w' && name[0] == '/' &&
		    want + size <= end && strlen(name) < path_size) {
			strcpy(path, name);
			*file_offset = offset + (want - start);
			rc = 0;
		}
		break;
	}
	fclose(f);
	return rc;
}

int kvc_iov_wrap(struct kvc_iov **out, void *base, const uint8_t id[16], const char *mount,
                 size_t size, size_t block_size, int numa)
{
	char path[PATH_MAX];
	uint64_t file_offset = 0;
	if (!base || size == 0)
		return -EINVAL;
	int rc = find_backing_file(base, size, path, sizeof(path), &file_offset);
	if (rc < 0)
		return rc;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct kvc_iov *iov = calloc(1, sizeof(*iov));
	if (!iov) {
		close(fd);
		return -ENOMEM;
	}
	*iov = (struct kvc_iov){.base = base, .size = size, .block_size = block_size,
	                        .numa = numa, .owned = false, .device = -1};
	if (id)
		memcpy(iov->id, id, 16);
	rc = iov_register(iov, mount, fd, file_offset);
	close(fd);
	if (rc < 0) {
		free(iov);
		return rc;
	}
	*out = iov;
	return 0;
}

int kvc_iov_register_device(struct kvc_iov **out, const char *mount, void *base, size_t size,
                            int device, bool owned, const struct kvc_msg_iov_register_device *m)
{
	struct kvc_iov *iov = calloc(1, sizeof(*iov));
	if (!iov)
		return -ENOMEM;
	*iov = (struct kvc_iov){.base = base, .size = size, .numa = -1, .owned = owned,
	                        .device = device};
	memcpy(iov->id, m->id, 16);
	int rc = control_get(mount, &iov->control);
	struct kvc_msg_handle reply;
	if (rc == 0)
		iov->generation = iov->control->generation;
	if (rc == 0)
		rc = control_call(iov->control, KVC_MSG_IOV_REGISTER_DEVICE, m, sizeof(*m), NULL, 0,
		                  &reply, sizeof(reply));
	if (rc < 0) {
		free(iov);
		return rc;
	}
	iov->handle = reply.handle;
	*out = iov;
	return 0;
}

void *kvc_iov_base(const struct kvc_iov *iov) { return iov->base; }
int kvc_iov_device(const struct kvc_iov *iov) { return iov->device; }
int kvc_iov_pinned(const struct kvc_iov *iov) { return iov->pinned; }
void kvc_iov_set_pinned(struct kvc_iov *iov, int pinned) { iov->pinned = pinned != 0; }
size_t kvc_iov_size(const struct kvc_iov *iov) { return iov->size; }
void kvc_iov_id(const struct kvc_iov *iov, uint8_t id[16]) { memcpy(id, iov->id, 16); }

int kvc_iov_unlink(struct kvc_iov *iov)
{
	char name[64];
	if (!iov->named)
		return 0; /* opened, wrapped, GPU memory, or unlinked already */
	iov->named = false;
	id_to_name(iov->id, name, sizeof(name));
	return shm_unlink(name) < 0 ? -errno : 0;
}

void kvc_iov_destroy(struct kvc_iov *iov)
{
	if (!iov)
		return;
	if (iov->pinned)
		kvc_iov_unpin(iov); /* a registered range must not outlive its mapping */
	/* kvc-fuse answers once no ring I/O uses the memory any more. */
	control_deregister(iov->control, KVC_MSG_IOV_DEREGISTER, iov->generation, iov->handle);
	kvc_iov_unlink(iov); /* the name this handle created goes with it */
	if (iov->owned && iov->device >= 0)
		kvc_gpu_device_free(iov->base, iov->device);
	else if (iov->owned)
		munmap(iov->base, iov->size);
	free(iov);
}

/* The table index of fd, or -1. Table lock held. */
static ssize_t fd_find(int fd)
{
	for (size_t i = 0; i < fd_count; i++)
		if (fds[i].fd == fd)
			return (ssize_t)i;
	return -1;
}

/* Tell kvc-fuse an entry taken out of the table is gone, unless kvc-fuse
 * restarted since (and forgot it) or it was never registered. */
static int fd_release(const struct registered_fd *f)
{
	struct kvc_msg_fd_register m = {.client_fd = f->fd};
	pthread_mutex_lock(&f->control->lock);
	bool current = f->control->generation == f->generation;
	pthread_mutex_unlock(&f->control->lock);
	if (!current || f->access < 0)
		return 0;
	return control_call(f->control, KVC_MSG_FD_DEREGISTER, &m, sizeof(m), NULL, 0, NULL, 0);
}

/* Claim fd's entry (access -1 while kvc-fuse registers it): -EINVAL when
 * fd is registered already, -ENOMEM. An entry from before a kvc-fuse
 * restart is replaced. */
static int fd_claim(int fd, struct control *control)
{
	int rc = 0;
	pthread_mutex_lock(&table_lock);
	ssize_t i = fd_find(fd);
	if (i >= 0 && fds[i].generation == fds[i].control->generation)
		rc = -EINVAL;
	if (rc == 0 && i < 0 && fd_count == fd_capacity) {
		size_t cap = fd_capacity ? fd_capacity * 2 : 16;
		struct registered_fd *grown = realloc(fds, cap * sizeof(*fds));
		if (grown) {
			fds = grown;
			fd_capacity = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc == 0)
		fds[i >= 0 ? (size_t)i : fd_count++] = (struct registered_fd){
			.fd = fd, .access = -1, .control = control, .generation = control->generation};
	pthread_mutex_unlock(&table_lock);
	return rc;
}

int kvc_fd_register(int fd, uint64_t flags)
{
	char path[64], target[PATH_MAX];
	struct control *control;
	if (fcntl(fd, F_GETFL) < 0)
		return -EBADF;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return -EBADF;
	target[n] = '\0';
	if (!kvc_is_kvcfs(fd))
		return -EBADF;
	int rc = control_get(target, &control);
	if (rc == 0)
		rc = fd_claim(fd, control);
	if (rc < 0)
		return rc;
	struct kvc_msg_fd_register m = {.client_fd = fd, .flags = (uint32_t)flags};
	struct kvc_msg_fd_register_reply reply;
	rc = control_call(control, KVC_MSG_FD_REGISTER, &m, sizeof(m), &fd, 1, &reply,
	                  sizeof(reply));
	pthread_mutex_lock(&table_lock);
	ssize_t i = fd_find(fd);
	if (i >= 0 && rc == 0)
		fds[i].access = (int)reply.access;
	else if (i >= 0)
		fds[i] = fds[--fd_count];
	pthread_mutex_unlock(&table_lock);
	return rc;
}

int kvc_fd_deregister(int fd)
{
	struct registered_fd taken;
	pthread_mutex_lock(&table_lock);
	ssize_t i = fd_find(fd);
	if (i >= 0) {
		taken = fds[i];
		fds[i] = fds[--fd_count];
	}
	pthread_mutex_unlock(&table_lock);
	return i >= 0 ? fd_release(&taken) : -EBADF;
}

int kvc_fd_sync(int fd)
{
	/* kvc-fuse's fsync commits the size that ring writes raised. */
	return fsync(fd) < 0 ? -errno : 0;
}

/* The access mode of a registered fd, or -EBADF. */
static int fd_access(int fd, const struct control *control)
{
	int access = -EBADF;
	pthread_mutex_lock(&table_lock);
	ssize_t i = fd_find(fd);
	if (i >= 0 && fds[i].control == control && fds[i].access >= 0)
		access = fds[i].access;
	pthread_mutex_unlock(&table_lock);
	return access;
}

static uint32_t round_up_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

int kvc_ring_create(struct kvc_ring **out, const char *mount, int entries, bool for_read,
                    int io_depth, int priority, int timeout_ms, int numa, uint64_t flags)
{
	(void)numa;
	if (entries <= 0 || entries > KVC_RING_MAX_ENTRIES || timeout_ms < 0)
		return -EINVAL;
	struct kvc_ring *ring = calloc(1, sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	ring->limit = (uint32_t)entries;
	ring->entries = round_up_pow2((uint32_t)entries);
	ring->mask = ring->entries - 1;
	ring->for_read = for_read;
	ring->bytes = kvc_ring_bytes(ring->entries);
	ring->doorbell = -1;
	int memfd = memfd_create("kvc-ring", MFD_CLOEXEC);
	int rc = memfd < 0 ? -errno : 0;
	if (rc == 0 && ftruncate(memfd, (off_t)ring->bytes) < 0)
		rc = -errno;
	if (rc == 0) {
		ring->shared = mmap(NULL, ring->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		if (ring->shared == MAP_FAILED) {
			ring->shared = NULL;
			rc = -errno;
		}
	}
	if (rc == 0) {
		ring->shared->magic = KVC_RING_MAGIC;
		ring->shared->layout = KVC_RING_LAYOUT;
		ring->shared->entries = ring->entries;
		atomic_store(&ring->shared->need_wakeup, 1);
		ring->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (ring->doorbell < 0)
			rc = -errno;
	}
	if (rc == 0)
		rc = control_get(mount, &ring->control);
	if (rc == 0)
		ring->generation = ring->control->generation;
	if (rc == 0) {
		struct kvc_msg_ring_register m = {.entries = ring->entries, .for_read = for_read,
		                                  .io_depth = io_depth, .timeout_ms = timeout_ms,
		                                  .priority = priority, .flags = flags};
		int pass[2] = {memfd, ring->doorbell};
		struct kvc_msg_handle reply;
		rc = control_call(ring->control, KVC_MSG_RING_REGISTER, &m, sizeof(m), pass, 2,
		                  &reply, sizeof(reply));
		ring->handle = reply.handle;
	}
	if (memfd >= 0)
		close(memfd);
	if (rc < 0) {
		ring->control = NULL;
		kvc_ring_destroy(ring);
		return rc;
	}
	*out = ring;
	return 0;
}

void kvc_ring_destroy(struct kvc_ring *ring)
{
	if (!ring)
		return;
	if (ring->control)
		control_deregister(ring->control, KVC_MSG_RING_DEREGISTER, ring->generation,
		                   ring->handle);
	if (ring->shared)
		munmap(ring->shared, ring->bytes);
	if (ring->doorbell >= 0)
		close(ring->doorbell);
	free(ring);
}

int kvc_ring_entries(const struct kvc_ring *ring)
{
	return (int)ring->limit;
}

int kvc_ring_prep(struct kvc_ring *ring, const struct kvc_iov *iov, bool read, void *ptr,
                  int fd, uint64_t file_offset, uint64_t length, const void *userdata)
{
	/* Any length the iov holds: kvc-fuse cuts an entry into chunk pieces. */
	if (read != ring->for_read || length == 0)
		return -EINVAL;
	uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)iov->base;
	if (iov->control != ring->control || p < base || p - base > iov->size ||
	    length > iov->size - (p - base))
		return -EFAULT;
	int access = fd_access(fd, ring->control);
	if (access < 0)
		return access;
	if ((read && access == O_WRONLY) || (!read && access == O_RDONLY))
		return -EACCES;
	if (ring->outstanding == ring->limit)
		return -EAGAIN;
	uint32_t slot = ring->local_tail & ring->mask;
	kvc_ring_sqes(ring->shared)[slot] = (struct kvc_ring_sqe){
		.iov_offset = p - base, .file_offset = file_offset, .length = length,
		.userdata = (uint64_t)(uintptr_t)userdata, .fd = fd, .iov_handle = iov->handle,
		.op = read ? KVC_RING_READ : KVC_RING_WRITE};
	ring->local_tail++;
	ring->outstanding++;
	return (int)slot;
}

int kvc_ring_submit(struct kvc_ring *ring)
{
	uint32_t published = atomic_load_explicit(&ring->shared->sq_tail, memory_order_relaxed);
	uint32_t count = ring->local_tail - published;
	if (count == 0)
		return 0;
	/* Release: the entries written above are visible before the tail.
	 * The full fence orders the tail before the need_wakeup read (see
	 * src/core/ring.h): a worker watching the ring needs no doorbell. */
	atomic_store_explicit(&ring->shared->sq_tail, ring->local_tail, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&ring->shared->need_wakeup, memory_order_relaxed))
		return (int)count;
	uint64_t one = 1;
	if (write(ring->doorbell, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return (int)count;
}

static int futex_wait(_Atomic uint32_t *word, uint32_t expected, const struct timespec *abs)
{
	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_REALTIME deadline. */
	long rc = syscall(SYS_futex, word, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, expected, abs,
	                  NULL, FUTEX_BITSET_MATCH_ANY);
	return rc < 0 ? -errno : 0;
}

/* The earlier of abs (NULL: none) and one second from now: a waiter looks
 * up now and then whether kvc-fuse is still there. */
static struct timespec wait_slice(const struct timespec *abs)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	now.tv_sec += 1;
	if (abs && (abs->tv_sec < now.tv_sec ||
	            (abs->tv_sec == now.tv_sec && abs->tv_nsec < now.tv_nsec)))
		return *abs;
	return now;
}

int kvc_ring_wait(struct kvc_ring *ring, struct kvc_completion *out, int max, int min_results,
                  const struct timespec *abs_timeout)
{
	struct kvc_ring_shared *sh = ring->shared;
	struct kvc_ring_cqe *cqes = kvc_ring_cqes(sh, ring->entries);
	int got = 0;
	if (max < 0 || min_results < 0)
		return -EINVAL;
	if (min_results > max)
		min_results = max;
	/* Prepared entries are waited for as if submitted (as in 3FS, where
	 * the worker may pick them up before the submit). */
	int submitted = kvc_ring_submit(ring);
	if (submitted < 0)
		return submitted;
	for (;;) {
		uint32_t head = atomic_load_explicit(&sh->cq_head, memory_order_relaxed);
		/* Acquire: completions written before the tail are visible. */
		uint32_t tail = atomic_load_explicit(&sh->cq_tail, memory_order_acquire);
		while (head != tail && got < max) {
			const struct kvc_ring_cqe *c = &cqes[head & ring->mask];
			out[got++] = (struct kvc_completion){.index = (int32_t)c->index,
			                                     .result = c->result,
			                                     .userdata = (const void *)(uintptr_t)c->userdata};
			head++;
			ring->outstanding--;
		}
		/* Release: kvc-fuse may reuse the slots once it sees the head. */
		atomic_store_explicit(&sh->cq_head, head, memory_order_release);
		/* More than can ever come (fewer I/Os in flight): all of them.
		 * (got may exceed min_results: then nothing more is needed.) */
		if (min_results > got && (uint32_t)(min_results - got) > ring->outstanding)
			min_results = got + (int)ring->outstanding;
		if (got >= min_results)
			return got;
		struct timespec slice = wait_slice(abs_timeout);
		int rc = futex_wait(&sh->cq_tail, tail, &slice);
		if (rc == -ETIMEDOUT && control_lost(ring->control))
			return got ? got : -ECONNRESET; /* kvc-fuse died: nothing will come */
		if (rc == -ETIMEDOUT && abs_timeout && slice.tv_sec == abs_timeout->tv_sec &&
		    slice.tv_nsec == abs_timeout->tv_nsec)
			return got;
		if (rc < 0 && rc != -ETIMEDOUT && rc != -EAGAIN && rc != -EINTR)
			return got ? got : rc;
	}
}
