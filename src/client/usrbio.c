/*
 * usrbio: the client side of kvcfs USRBIO (include/kvc/usrbio.h): iovs and
 * registered fds here; rings in usrbio_ring.c; the control connections to
 * kvc-fuse (one per mount, and the check of whom they reach) in
 * usrbio_control.c.
 *
 * State: the library keeps process-wide tables: the control connections
 * (usrbio_control.c) and the registered fds (fd -> mount connection,
 * access mode; here, guarded by table_lock). 3FS's API registers fds
 * without naming a mount, so this state cannot live in a caller's handle.
 * Everything else belongs to iov and ring handles.
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "client/iov_device.h"
#include "client/usrbio_internal.h"
#include "core/wire.h"

struct registered_fd {
	int fd;
	int access;          /* O_ACCMODE bits; -1 while the registration is being made */
	struct kvc_usrbio_control *control;
	uint64_t generation; /* of control when registered: older means kvc-fuse forgot it */
};

/* The process-wide table of registered fds (see the header comment). */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct registered_fd *fds;
static size_t fd_count, fd_capacity;

int kvc_is_kvcfs(int fd)
{
	char value[32], path[64];
	if (fgetxattr(fd, "user.kvc.inode", value, sizeof(value)) > 0)
		return 1;
	if (errno != EBADF)
		return 0;
	/* An O_PATH fd (a key directory) has no xattr calls of its own. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return getxattr(path, "user.kvc.inode", value, sizeof(value)) > 0 ? 1 : 0;
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
	int rc = kvc_usrbio_control_get(mount, &iov->control);
	if (rc < 0)
		return rc;
	iov->generation = iov->control->generation;
	struct kvc_msg_iov_register m = {.size = iov->size, .block_size = iov->block_size,
	                                 .file_offset = file_offset, .numa = iov->numa};
	memcpy(m.id, iov->id, 16);
	struct kvc_msg_handle reply;
	rc = kvc_usrbio_control_call(iov->control, KVC_MSG_IOV_REGISTER, &m, sizeof(m), &shm_fd, 1,
	                             &reply, sizeof(reply), NULL);
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
	int rc = kvc_usrbio_control_get(mount, &iov->control);
	struct kvc_msg_handle reply;
	if (rc == 0)
		iov->generation = iov->control->generation;
	if (rc == 0)
		rc = kvc_usrbio_control_call(iov->control, KVC_MSG_IOV_REGISTER_DEVICE, m, sizeof(*m),
		                             NULL, 0, &reply, sizeof(reply), NULL);
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
	kvc_usrbio_control_deregister(iov->control, KVC_MSG_IOV_DEREGISTER, iov->generation, iov->handle);
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
	if (!kvc_usrbio_control_current(f->control, f->generation) || f->access < 0)
		return 0;
	return kvc_usrbio_control_call(f->control, KVC_MSG_FD_DEREGISTER, &m, sizeof(m), NULL, 0,
	                               NULL, 0, NULL);
}

/* Claim fd's entry (access -1 while kvc-fuse registers it): -EINVAL when
 * fd is registered already, -ENOMEM. An entry from before a kvc-fuse
 * restart is replaced. */
static int fd_claim(int fd, struct kvc_usrbio_control *control)
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
	struct kvc_usrbio_control *control;
	if (fcntl(fd, F_GETFL) < 0)
		return -EBADF;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return -EBADF;
	target[n] = '\0';
	if (!kvc_is_kvcfs(fd))
		return -EBADF;
	int rc = kvc_usrbio_control_get(target, &control);
	if (rc == 0)
		rc = fd_claim(fd, control);
	if (rc < 0)
		return rc;
	struct kvc_msg_fd_register m = {.client_fd = fd, .flags = (uint32_t)flags};
	struct kvc_msg_fd_register_reply reply;
	rc = kvc_usrbio_control_call(control, KVC_MSG_FD_REGISTER, &m, sizeof(m), &fd, 1, &reply,
	                             sizeof(reply), NULL);
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

int kvc_usrbio_fd_access(int fd, const struct kvc_usrbio_control *control)
{
	int access = -EBADF;
	pthread_mutex_lock(&table_lock);
	ssize_t i = fd_find(fd);
	if (i >= 0 && fds[i].control == control && fds[i].access >= 0)
		access = fds[i].access;
	pthread_mutex_unlock(&table_lock);
	return access;
}

