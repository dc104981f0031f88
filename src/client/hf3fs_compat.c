/* hf3fs_compat: 3FS's USRBIO names on the native API; see hf3fs_usrbio.h
 * (and docs/usrbio.md for the name-by-name comparison with 3FS).
 *
 * State: the fd pairs of hf3fs_reg_fd (below), guarded by pairs_lock;
 * everything else is in the caller's structs and libkvc's own table. */
#include "hf3fs_usrbio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvc/gpu.h"
#include "kvc/usrbio.h"
#include "core/ring.h"

bool hf3fs_is_hf3fs(int fd)
{
	return kvc_is_kvcfs(fd) == 1;
}

/* As 3FS: the length + 1 even when out is too small (then untouched). */
int hf3fs_extract_mount_point(char *out, int size, const char *path)
{
	char mount[PATH_MAX];
	int length = kvc_extract_mount_point(mount, sizeof(mount), path);
	if (length < 0)
		return -1;
	if (length < size)
		memcpy(out, mount, (size_t)length + 1);
	return length + 1;
}

/* A mount point that does not fit the structs is -EINVAL, as in 3FS. */
static int copy_mount(char dst[256], const char *mount)
{
	if (strlen(mount) >= 256)
		return -EINVAL;
	strcpy(dst, mount);
	return 0;
}

static void fill_iov(struct hf3fs_iov *iov, struct kvc_iov *native, const char *mount,
                     size_t block_size, int numa)
{
	iov->base = kvc_iov_base(native);
	iov->iovh = native;
	kvc_iov_id(native, (uint8_t *)iov->id);
	copy_mount(iov->mount_point, mount);
	iov->size = kvc_iov_size(native);
	iov->block_size = block_size;
	iov->numa = numa;
}

int hf3fs_iovcreate(struct hf3fs_iov *iov, const char *mount, size_t size, size_t block_size,
                    int numa)
{
	struct kvc_iov *native;
	int rc = strlen(mount) < 256 ? kvc_iov_create(&native, mount, size, block_size, numa, NULL)
	                             : -EINVAL;
	if (rc == 0)
		fill_iov(iov, native, mount, block_size, numa);
	return rc;
}

int hf3fs_iovopen(struct hf3fs_iov *iov, const uint8_t id[16], const char *mount, size_t size,
                  size_t block_size, int numa)
{
	struct kvc_iov *native;
	int rc = strlen(mount) < 256 ? kvc_iov_open(&native, id, mount, size, block_size, numa)
	                             : -EINVAL;
	if (rc == 0)
		fill_iov(iov, native, mount, block_size, numa);
	return rc;
}

int hf3fs_iovwrap(struct hf3fs_iov *iov, void *buf, const uint8_t id[16], const char *mount,
                  size_t size, size_t block_size, int numa)
{
	struct kvc_iov *native;
	int rc = strlen(mount) < 256
	                 ? kvc_iov_wrap(&native, buf, id, mount, size, block_size, numa)
	                 : -EINVAL;
	if (rc == 0)
		fill_iov(iov, native, mount, block_size, numa);
	return rc;
}

/* Device iovs: CUDA is checked before the mount, so a machine without it
 * says -ENOTSUP whatever the arguments. 3FS requires block_size 0. */
int hf3fs_iovcreate_device(struct hf3fs_iov *iov, const char *mount, size_t size,
                           size_t block_size, int device_id)
{
	struct kvc_iov *native;
	if (!kvc_gpu_available())
		return -ENOTSUP;
	if (block_size != 0)
		return -EINVAL;
	int rc = strlen(mount) < 256 ? kvc_iov_create_device(&native, mount, size, device_id, NULL)
	                             : -EINVAL;
	if (rc == 0)
		fill_iov(iov, native, mount, 0, -1);
	return rc;
}

int hf3fs_iovwrap_device(struct hf3fs_iov *iov, void *device_ptr, const uint8_t id[16],
                         const char *mount, size_t size, size_t block_size, int device_id)
{
	struct kvc_iov *native;
	if (!kvc_gpu_available())
		return -ENOTSUP;
	if (block_size != 0)
		return -EINVAL;
	int rc = strlen(mount) < 256
	                 ? kvc_iov_wrap_device(&native, device_ptr, id, mount, size, device_id)
	                 : -EINVAL;
	if (rc == 0)
		fill_iov(iov, native, mount, 0, -1);
	return rc;
}

int hf3fs_iovopen_device(struct hf3fs_iov *iov, const uint8_t id[16], const char *mount,
                         size_t size, size_t block_size, int device_id)
{
	(void)iov, (void)id, (void)mount, (void)size, (void)block_size, (void)device_id;
	return -ENOTSUP; /* a device iov is shared by wrapping the memory, not by id */
}

bool hf3fs_gdr_available(void)
{
	return kvc_gpu_available() == 1;
}

int hf3fs_gdr_device_count(void)
{
	return kvc_gpu_device_count();
}

enum hf3fs_mem_type hf3fs_iov_mem_type(const struct hf3fs_iov *iov)
{
	return iov && iov->iovh && kvc_iov_device(iov->iovh) >= 0 ? HF3FS_MEM_DEVICE
	                                                          : HF3FS_MEM_HOST;
}

int hf3fs_iov_device_id(const struct hf3fs_iov *iov)
{
	return iov && iov->iovh ? kvc_iov_device(iov->iovh) : -1;
}

int hf3fs_iovsync(const struct hf3fs_iov *iov, int direction)
{
	(void)direction; /* a ring completion already means the GPU copy finished */
	return iov && iov->iovh ? 0 : -EINVAL;
}

void hf3fs_iovunlink(struct hf3fs_iov *iov)
{
	if (iov && iov->iovh)
		kvc_iov_unlink(iov->iovh);
}

void hf3fs_iovdestroy(struct hf3fs_iov *iov)
{
	if (!iov)
		return;
	kvc_iov_destroy(iov->iovh);
	iov->iovh = NULL;
	iov->base = NULL;
}

size_t hf3fs_ior_size(int entries)
{
	uint32_t e = 1;
	while (e < (uint32_t)(entries > 0 ? entries : 1))
		e <<= 1;
	return kvc_ring_bytes(e);
}

int hf3fs_iorcreate4(struct hf3fs_ior *ior, const char *mount, int entries, bool for_read,
                     int io_depth, int timeout, int numa, uint64_t flags)
{
	struct kvc_ring *ring;
	memset(ior, 0, sizeof(*ior));
	int rc = copy_mount(ior->mount_point, mount);
	if (rc == 0)
		rc = kvc_ring_create(&ring, mount, entries, for_read, io_depth, 0, timeout, numa, flags);
	if (rc < 0)
		return rc;
	ior->iorh = ring;
	ior->for_read = for_read;
	ior->io_depth = io_depth;
	ior->timeout = timeout;
	ior->flags = flags;
	copy_mount(ior->iov.mount_point, mount);
	ior->iov.numa = numa;
	return 0;
}

int hf3fs_iorcreate3(struct hf3fs_ior *ior, const char *mount, int entries, bool for_read,
                     int io_depth, int priority, int timeout, int numa)
{
	int rc = hf3fs_iorcreate4(ior, mount, entries, for_read, io_depth, timeout, numa, 0);
	if (rc == 0)
		ior->priority = priority;
	return rc;
}

int hf3fs_iorcreate2(struct hf3fs_ior *ior, const char *mount, int entries, bool for_read,
                     int io_depth, int priority, int numa)
{
	return hf3fs_iorcreate3(ior, mount, entries, for_read, io_depth, priority, 0, numa);
}

int hf3fs_iorcreate(struct hf3fs_ior *ior, const char *mount, int entries, bool for_read,
                    int io_depth, int numa)
{
	return hf3fs_iorcreate3(ior, mount, entries, for_read, io_depth, 0, 0, numa);
}

void hf3fs_iordestroy(struct hf3fs_ior *ior)
{
	if (!ior)
		return;
	kvc_ring_destroy(ior->iorh);
	ior->iorh = NULL;
}

/* 3FS's registration keeps a duplicate of the fd open and registers both
 * numbers: it returns minus the duplicate, and prep_io takes the fd, the
 * duplicate or minus the duplicate. The duplicate keeps its number taken,
 * so it names the file until hf3fs_dereg_fd even when the caller closes
 * its fd. The pairs: */
struct dup_pair {
	int fd, dup;
};
static pthread_mutex_t pairs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dup_pair *pairs;
static size_t pair_count, pair_capacity;

/* Take out the pair that has fd as either number; false when none. */
static bool pair_take(int fd, struct dup_pair *out)
{
	bool found = false;
	pthread_mutex_lock(&pairs_lock);
	for (size_t i = 0; i < pair_count && !found; i++) {
		if (pairs[i].fd == fd || pairs[i].dup == fd) {
			*out = pairs[i];
			pairs[i] = pairs[--pair_count];
			found = true;
		}
	}
	pthread_mutex_unlock(&pairs_lock);
	return found;
}

static int pair_add(int fd, int dup)
{
	int rc = 0;
	pthread_mutex_lock(&pairs_lock);
	if (pair_count == pair_capacity) {
		size_t cap = pair_capacity ? pair_capacity * 2 : 16;
		struct dup_pair *grown = realloc(pairs, cap * sizeof(*pairs));
		if (grown) {
			pairs = grown;
			pair_capacity = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc == 0)
		pairs[pair_count++] = (struct dup_pair){fd, dup};
	pthread_mutex_unlock(&pairs_lock);
	return rc;
}

/* Deregister the numbers of a pair other than keep, and close the
 * duplicate unless it is keep. */
static void pair_release(const struct dup_pair *p, int keep)
{
	if (p->fd != keep)
		kvc_fd_deregister(p->fd);
	if (p->dup != keep) {
		kvc_fd_deregister(p->dup);
		close(p->dup);
	}
}

/* As 3FS: minus the duplicate on success, a positive errno on failure
 * (EBADF: not a file of a kvcfs mount; EINVAL: registered already). */
int hf3fs_reg_fd(int fd, uint64_t flags)
{
	struct dup_pair stale;
	int rc = kvc_fd_register(fd, flags);
	if (rc < 0)
		return -rc;
	/* fd's registration was from before a kvc-fuse restart (or undone by
	 * kvc_fd_deregister): the rest of its old pair goes. */
	if (pair_take(fd, &stale))
		pair_release(&stale, fd);
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	rc = dup < 0 ? -errno : kvc_fd_register(dup, flags);
	bool dup_registered = rc == 0;
	if (rc == 0)
		rc = pair_add(fd, dup);
	if (rc < 0) {
		if (dup_registered)
			kvc_fd_deregister(dup);
		if (dup >= 0)
			close(dup);
		kvc_fd_deregister(fd);
		return -rc;
	}
	return -dup;
}

/* Either number of a pair deregisters both (3FS leaves the fd registered
 * when given the duplicate). */
void hf3fs_dereg_fd(int fd)
{
	struct dup_pair p;
	if (pair_take(fd, &p))
		pair_release(&p, -1);
	else
		kvc_fd_deregister(fd);
}

int hf3fs_io_entries(const struct hf3fs_ior *ior)
{
	return ior && ior->iorh ? kvc_ring_entries(ior->iorh) : -EINVAL;
}

int hf3fs_prep_io(const struct hf3fs_ior *ior, const struct hf3fs_iov *iov, bool read, void *ptr,
                  int fd, size_t off, uint64_t len, const void *userdata)
{
	if (!ior || !ior->iorh || !iov || !iov->iovh || !ptr || fd == INT_MIN)
		return -EINVAL;
	int rc = kvc_ring_prep(ior->iorh, iov->iovh, read, ptr, fd < 0 ? -fd : fd, off, len,
	                       userdata);
	return rc == -EFAULT ? -EINVAL : rc; /* 3FS: a buffer outside the iov is -EINVAL */
}

int hf3fs_submit_ios(const struct hf3fs_ior *ior)
{
	if (!ior || !ior->iorh)
		return -EINVAL;
	int rc = kvc_ring_submit(ior->iorh);
	return rc < 0 ? rc : 0;
}

int hf3fs_wait_for_ios(const struct hf3fs_ior *ior, struct hf3fs_cqe *cqes, int cqec,
                       int min_results, const struct timespec *abs_timeout)
{
	struct kvc_completion done[256];
	int total = 0;
	if (!ior || !ior->iorh || cqec <= 0)
		return -EINVAL;
	if (min_results < 0)
		min_results = 0; /* as 3FS: nothing to wait for */
	/* In steps of 256 completions; only the first step waits. */
	do {
		int want = cqec - total < 256 ? cqec - total : 256;
		int need = min_results - total > 0 ? min_results - total : 0;
		if (need > want)
			need = want;
		int got = kvc_ring_wait(ior->iorh, done, want, need, abs_timeout);
		if (got < 0)
			return total ? total : got;
		for (int i = 0; i < got; i++)
			cqes[total + i] = (struct hf3fs_cqe){.index = done[i].index,
			                                     .result = done[i].result,
			                                     .userdata = done[i].userdata};
		total += got;
		if (got < want)
			break;
	} while (total < cqec);
	return total;
}

/* As 3FS: link the file that target opens (symlinks followed) as
 * link_name; 0 or a positive errno. 3FS hands the open file to its FUSE
 * daemon by ioctl; here link(2) does it, given the open file through
 * /proc/self/fd. */
int hf3fs_hardlink(const char *target, const char *link_name)
{
	char opened[64];
	int fd = open(target, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	snprintf(opened, sizeof(opened), "/proc/self/fd/%d", fd);
	int rc = linkat(AT_FDCWD, opened, AT_FDCWD, link_name, AT_SYMLINK_FOLLOW) < 0 ? errno : 0;
	close(fd);
	return rc;
}

/* Each [start[i], end[i]) reads as zeros after, and its whole chunks'
 * space is returned (kvc-fuse's fallocate punch). 0 or a positive errno,
 * as 3FS. */
int hf3fs_punchhole(int fd, int n, const size_t *start, const size_t *end, size_t flags)
{
	(void)flags;
	if (n < 0 || (n > 0 && (!start || !end)))
		return EINVAL;
	for (int i = 0; i < n; i++) {
		if (end[i] < start[i] || end[i] > (size_t)INT64_MAX)
			return EINVAL;
		if (end[i] > start[i] && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		                                   (off_t)start[i], (off_t)(end[i] - start[i])) < 0)
			return errno;
	}
	return 0;
}
