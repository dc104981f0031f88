/* usrbio_iovs: see usrbio_iovs.h and usrbio_service.h. */
#include "fuse/usrbio_iovs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/ring.h"

#define MAX_IOV_SIZE (1ull << 40)
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

int kvc_usrbio_check_memory(struct kvc_usrbio *u, struct kvc_usrbio_client *c, int fd,
                            uint64_t need, bool ring)
{
	struct statx stx;
	struct statfs fs;
	/* Cached attributes only: nothing is asked of a FUSE daemon (this
	 * one, for a file of the mount, or a stranger's). */
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
	          STATX_TYPE | STATX_MODE | STATX_UID | STATX_SIZE, &stx) < 0)
		return -errno;
	if (makedev(stx.stx_dev_major, stx.stx_dev_minor) == u->mount_dev || !S_ISREG(stx.stx_mode))
		return -EINVAL;
	if (stx.stx_uid != c->uid)
		return -EACCES; /* shared memory of another user */
	if (stx.stx_size < need)
		return -EINVAL;
	/* Memory, not a file whose pages kvc-fuse would wait for (a disk, a
	 * network or FUSE filesystem); rings on tmpfs only, where a page that
	 * a client punched out comes back as zeros. */
	if (fstatfs(fd, &fs) < 0)
		return -errno;
	if (fs.f_type != TMPFS_MAGIC && (ring || fs.f_type != HUGETLBFS_MAGIC))
		return -EINVAL;
	int seals = ring ? fcntl(fd, F_GET_SEALS) : 0;
	if (ring && (seals < 0 || (seals & RING_SEALS) != RING_SEALS))
		return -EPERM; /* it could shrink under kvc-fuse */
	return 0;
}

/* A free iov slot of the client, or -1. Client lock held. */
static int free_slot(struct kvc_usrbio_client *c)
{
	for (int i = 0; i < KVC_USRBIO_MAX_IOVS; i++)
		if (!c->iovs[i].base)
			return i;
	return -1;
}

static void unmap_host(void *base, size_t size)
{
	uintptr_t skew = (uintptr_t)base & 4095u;
	munmap((char *)base - skew, size + skew);
}

int kvc_usrbio_iov_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c, int memory_fd,
                            const struct kvc_msg_iov_register *m, uint32_t *handle)
{
	struct kvc_usrbio_usage charge = {.iov_bytes = m->size, .registrations = 1};
	bool charged = false;
	void *map = MAP_FAILED;
	int rc = 0;
	if (m->size == 0 || m->size > MAX_IOV_SIZE || m->file_offset > MAX_IOV_SIZE)
		rc = -EINVAL;
	if (rc == 0)
		rc = kvc_usrbio_check_memory(u, c, memory_fd, m->file_offset + m->size, false);
	if (rc == 0)
		rc = kvc_usrbio_limits_charge(&u->limits, c->uid, &charge);
	charged = rc == 0;
	/* mmap wants a page-aligned offset: map from the page below. */
	uint64_t skew = m->file_offset & 4095u;
	if (rc == 0) {
		map = mmap(NULL, m->size + skew, PROT_READ | PROT_WRITE, MAP_SHARED, memory_fd,
		           (off_t)(m->file_offset - skew));
		if (map == MAP_FAILED)
			rc = -errno;
	}
	if (rc == 0) {
		pthread_mutex_lock(&c->lock);
		int slot = free_slot(c);
		if (slot >= 0) {
			c->iovs[slot] = (struct kvc_usrbio_iov){
				.base = (char *)map + skew, .size = m->size, .device = -1,
				.region = {.id = kvc_transport_region_id(), .fd = memory_fd,
				           .file_offset = m->file_offset, .size = m->size,
				           .base = (uint8_t *)map + skew}};
			memory_fd = -1; /* kept in the region */
			*handle = (uint32_t)slot;
		}
		pthread_mutex_unlock(&c->lock);
		rc = slot >= 0 ? 0 : -EMFILE;
	}
	if (rc == 0)
		atomic_fetch_add(&u->fs->usrbio_iovs, 1);
	if (rc < 0 && map != MAP_FAILED)
		munmap(map, m->size + skew);
	if (rc < 0 && charged)
		kvc_usrbio_limits_release(&u->limits, c->uid, &charge);
	if (memory_fd >= 0)
		close(memory_fd);
	return rc;
}

int kvc_usrbio_iov_register_device(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                                   const struct kvc_msg_iov_register_device *m,
                                   uint32_t *handle)
{
	struct kvc_usrbio_usage charge = {.iov_bytes = m->size, .registrations = 1};
	struct kvc_device_owner owner = {.uid = c->uid, .client = c->id};
	struct kvc_device_memory memory;
	if (m->size == 0 || m->size > MAX_IOV_SIZE || m->offset > MAX_IOV_SIZE)
		return -EINVAL;
	int rc = kvc_usrbio_limits_charge(&u->limits, c->uid, &charge);
	if (rc < 0)
		return rc;
	rc = kvc_device_import(u->imports, &owner, m, &memory);
	if (rc == 0) {
		pthread_mutex_lock(&c->lock);
		int slot = free_slot(c);
		if (slot >= 0) {
			c->iovs[slot] = (struct kvc_usrbio_iov){.base = memory.address,
			                                        .size = memory.size,
			                                        .device = memory.device, .gpu = memory};
			*handle = (uint32_t)slot;
		}
		pthread_mutex_unlock(&c->lock);
		if (slot < 0)
			kvc_device_release(u->imports, &memory);
		rc = slot >= 0 ? 0 : -EMFILE;
	}
	if (rc == 0)
		atomic_fetch_add(&u->fs->usrbio_iovs, 1);
	else
		kvc_usrbio_limits_release(&u->limits, c->uid, &charge);
	return rc;
}

/* Unmap one iov (a copy of its slot, already freed) and give back its
 * charge. No lock held (unregistering it from same-host servers is an
 * exchange with them); no batch uses it any more. */
static void release_iov(struct kvc_usrbio_client *c, struct kvc_usrbio_iov *iov)
{
	struct kvc_usrbio *u = c->service;
	struct kvc_usrbio_usage charge = {.iov_bytes = iov->size, .registrations = 1};
	if (iov->device >= 0) {
		kvc_device_release(u->imports, &iov->gpu);
	} else {
		/* Servers stop using it before it goes. */
		kvc_transport_forget_region(&u->fs->storage, &iov->region);
		close(iov->region.fd);
		unmap_host(iov->base, iov->size);
	}
	atomic_fetch_sub(&u->fs->usrbio_iovs, 1);
	kvc_usrbio_limits_release(&u->limits, c->uid, &charge);
}

/* Wait until no ring batch uses the client's memory. Client lock held. */
static void wait_idle(struct kvc_usrbio_client *c)
{
	while (c->inflight > 0)
		pthread_cond_wait(&c->idle, &c->lock);
}

int kvc_usrbio_iov_deregister(struct kvc_usrbio_client *c, uint32_t handle)
{
	struct kvc_usrbio_iov gone;
	if (handle >= KVC_USRBIO_MAX_IOVS)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int rc = c->iovs[handle].base ? 0 : -EINVAL;
	if (rc == 0) {
		wait_idle(c);
		gone = c->iovs[handle];
		c->iovs[handle].base = NULL; /* no new batch resolves it */
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		release_iov(c, &gone);
	return rc;
}

void kvc_usrbio_iov_drop_all(struct kvc_usrbio_client *c)
{
	for (int i = 0; i < KVC_USRBIO_MAX_IOVS; i++) {
		struct kvc_usrbio_iov gone;
		pthread_mutex_lock(&c->lock);
		wait_idle(c);
		bool found = c->iovs[i].base != NULL;
		if (found) {
			gone = c->iovs[i];
			c->iovs[i].base = NULL;
		}
		pthread_mutex_unlock(&c->lock);
		if (found)
			release_iov(c, &gone);
	}
}

int kvc_usrbio_resolve_iov(struct kvc_usrbio_client *c, uint32_t handle, uint64_t offset,
                           uint64_t length, void **out, int *device)
{
	const struct kvc_storage_region *region;
	return kvc_usrbio_resolve_iov_region(c, handle, offset, length, out, device, &region);
}

/* One range of an iov; the caller holds c->lock. */
static int resolve_locked(struct kvc_usrbio_client *c, uint32_t handle, uint64_t offset,
                          uint64_t length, void **out, int *device,
                          const struct kvc_storage_region **region)
{
	const struct kvc_usrbio_iov *iov = handle < KVC_USRBIO_MAX_IOVS ? &c->iovs[handle] : NULL;
	if (!iov || !iov->base || offset > iov->size || length > iov->size - offset)
		return -EFAULT;
	*out = (char *)iov->base + offset;
	*device = iov->device;
	*region = iov->device < 0 ? &iov->region : NULL;
	return 0;
}

int kvc_usrbio_resolve_iov_region(struct kvc_usrbio_client *c, uint32_t handle,
                                  uint64_t offset, uint64_t length, void **out, int *device,
                                  const struct kvc_storage_region **region)
{
	pthread_mutex_lock(&c->lock);
	int rc = resolve_locked(c, handle, offset, length, out, device, region);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int kvc_usrbio_resolve_segs(struct kvc_usrbio_client *c, const struct kvc_ring_key_seg *segs,
                            int n, struct iovec *out, int *device,
                            const struct kvc_storage_region **region)
{
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < n && rc == 0; i++) {
		out[i].iov_len = segs[i].length;
		rc = resolve_locked(c, segs[i].iov_handle, segs[i].offset, segs[i].length,
		                    &out[i].iov_base, &device[i], &region[i]);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}
