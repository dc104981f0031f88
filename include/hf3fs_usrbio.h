/*
 * hf3fs_usrbio.h: 3FS's USRBIO API, implemented by libkvc on kvcfs's own
 * (include/kvc/usrbio.h), so code written against 3FS's header builds and
 * runs against kvcfs unchanged: link with -lkvc. docs/usrbio.md compares
 * every name with 3FS's.
 *
 * Return values follow 3FS: functions returning int give 0 (or a count /
 * slot) on success and -errno on failure, except three that give a
 * positive errno on failure: hf3fs_reg_fd (on success minus a duplicate
 * of the fd that libkvc keeps open and registers too: prep_io takes the
 * fd, the duplicate or that value; hf3fs_dereg_fd of either number drops
 * both and closes the duplicate; registering a registered number is
 * EINVAL), hf3fs_hardlink and hf3fs_punchhole. One I/O may be as long as
 * its iov. An iov made by hf3fs_iovcreate is named in /dev/shm (so that
 * hf3fs_iovopen finds it by id) until hf3fs_iovunlink or hf3fs_iovdestroy
 * of that iov, as in 3FS.
 *
 * Differences from 3FS: `priority` and `numa` are accepted and recorded
 * but do not change scheduling yet; HF3FS_IOR_ALLOW_READ_UNCOMMITTED is
 * accepted and has no effect (kvcfs reads are always of committed data);
 * hf3fs_punchhole punches [start[i], end[i]) (end exclusive) with
 * fallocate, at any alignment (3FS: chunk-aligned only): the ranges read
 * as zeros and their whole chunks' space is returned.
 *
 * GPU memory (3FS's newer names): hf3fs_iovcreate_device and
 * hf3fs_iovwrap_device make device iovs (kvc/gpu.h: CUDA IPC to kvc-fuse,
 * which stages through pinned memory; no GPUDirect RDMA yet). Where CUDA
 * or a GPU is missing they return -ENOTSUP and never fall back to host
 * memory. hf3fs_iovopen_device returns -ENOTSUP (share device memory by
 * wrapping it). hf3fs_iovsync returns 0: a completion already means the
 * copy to or from the GPU finished.
 */
#ifndef HF3FS_USRBIO_H
#define HF3FS_USRBIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libkvc is built with hidden visibility; these are its exports. */
#pragma GCC visibility push(default)

/* 3FS's value. A FUSE mount's statfs f_type is always FUSE's own, so
 * hf3fs_is_hf3fs asks kvc-fuse instead (an xattr of the file). */
#define HF3FS_SUPER_MAGIC 0x8f3f5fff

#define HF3FS_IOR_ALLOW_READ_UNCOMMITTED 1
#define HF3FS_IOR_FORBID_READ_HOLES 2

typedef void *hf3fs_iov_handle;
typedef void *hf3fs_ior_handle;

struct hf3fs_iov {
	uint8_t *base;
	hf3fs_iov_handle iovh;
	char id[16];
	char mount_point[256];
	size_t size;
	size_t block_size;
	int numa;
};

struct hf3fs_ior {
	struct hf3fs_iov iov;
	hf3fs_ior_handle iorh;
	char mount_point[256];
	bool for_read;
	int io_depth;
	int priority;
	int timeout;
	uint64_t flags;
};

struct hf3fs_cqe {
	int32_t index;
	int32_t reserved;
	int64_t result;
	const void *userdata;
};

bool hf3fs_is_hf3fs(int fd);
/* Returns the mount point's length + 1, or -1 when path is not inside a
 * kvcfs mount (or the buffer is too small). */
int hf3fs_extract_mount_point(char *hf3fs_mount_point, int size, const char *path);

int hf3fs_iovcreate(struct hf3fs_iov *iov, const char *hf3fs_mount_point, size_t size,
                    size_t block_size, int numa);
int hf3fs_iovopen(struct hf3fs_iov *iov, const uint8_t id[16], const char *hf3fs_mount_point,
                  size_t size, size_t block_size, int numa);
void hf3fs_iovunlink(struct hf3fs_iov *iov);
void hf3fs_iovdestroy(struct hf3fs_iov *iov);
int hf3fs_iovwrap(struct hf3fs_iov *iov, void *buf, const uint8_t id[16],
                  const char *hf3fs_mount_point, size_t size, size_t block_size, int numa);

size_t hf3fs_ior_size(int entries);
int hf3fs_iorcreate(struct hf3fs_ior *ior, const char *hf3fs_mount_point, int entries,
                    bool for_read, int io_depth, int numa);
int hf3fs_iorcreate2(struct hf3fs_ior *ior, const char *hf3fs_mount_point, int entries,
                     bool for_read, int io_depth, int priority, int numa);
int hf3fs_iorcreate3(struct hf3fs_ior *ior, const char *hf3fs_mount_point, int entries,
                     bool for_read, int io_depth, int priority, int timeout, int numa);
int hf3fs_iorcreate4(struct hf3fs_ior *ior, const char *hf3fs_mount_point, int entries,
                     bool for_read, int io_depth, int timeout, int numa, uint64_t flags);
void hf3fs_iordestroy(struct hf3fs_ior *ior);

int hf3fs_reg_fd(int fd, uint64_t flags);
void hf3fs_dereg_fd(int fd);

int hf3fs_io_entries(const struct hf3fs_ior *ior);
int hf3fs_prep_io(const struct hf3fs_ior *ior, const struct hf3fs_iov *iov, bool read,
                  void *ptr, int fd, size_t off, uint64_t len, const void *userdata);
int hf3fs_submit_ios(const struct hf3fs_ior *ior);
int hf3fs_wait_for_ios(const struct hf3fs_ior *ior, struct hf3fs_cqe *cqes, int cqec,
                       int min_results, const struct timespec *abs_timeout);

enum hf3fs_mem_type {
	HF3FS_MEM_HOST = 0,
	HF3FS_MEM_DEVICE = 1,
	HF3FS_MEM_MANAGED = 2,
};

/* block_size must be 0, as in 3FS. */
int hf3fs_iovcreate_device(struct hf3fs_iov *iov, const char *hf3fs_mount_point, size_t size,
                           size_t block_size, int device_id);
int hf3fs_iovopen_device(struct hf3fs_iov *iov, const uint8_t id[16],
                         const char *hf3fs_mount_point, size_t size, size_t block_size,
                         int device_id);
int hf3fs_iovwrap_device(struct hf3fs_iov *iov, void *device_ptr, const uint8_t id[16],
                         const char *hf3fs_mount_point, size_t size, size_t block_size,
                         int device_id);
bool hf3fs_gdr_available(void);
int hf3fs_gdr_device_count(void);
enum hf3fs_mem_type hf3fs_iov_mem_type(const struct hf3fs_iov *iov);
int hf3fs_iov_device_id(const struct hf3fs_iov *iov);
int hf3fs_iovsync(const struct hf3fs_iov *iov, int direction);

int hf3fs_hardlink(const char *target, const char *link_name);
int hf3fs_punchhole(int fd, int n, const size_t *start, const size_t *end, size_t flags);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
