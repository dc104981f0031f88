/*
 * kvc/gpu.h: GPU-registered USRBIO buffers (part of libkvc). A pinned iov
 * is an iov whose pages are page-locked for the GPU (cudaHostRegister), so
 * the GPU copies KV pages straight out of the shared memory kvc-fuse
 * filled: no staging copy by the client. A device iov is GPU memory
 * (cudaMalloc'd here, or the caller's) shared with kvc-fuse over CUDA IPC:
 * ring reads complete into it and ring writes read from it, with the same
 * kvc_ring_prep calls as host iovs (ptr is then a device pointer). Where
 * CUDA is missing these return -ENOTSUP; nothing falls back to host memory.
 *
 * libkvc loads the CUDA runtime (libcudart) when these are first used, so
 * it runs on machines without CUDA: then every call returns -ENOTSUP (and
 * kvc_gpu_available 0). Built only when meson's `cuda` option found the
 * CUDA headers; otherwise the same functions exist and return -ENOTSUP.
 * docs/gpu.md says how kvc-fuse moves the bytes.
 */
#ifndef KVC_GPU_H
#define KVC_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kvc/usrbio.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* One copy between an iov and device memory. */
struct kvc_gpu_copy {
	uint64_t iov_offset;
	void *device;
	uint64_t length;
};

/* 1 when the CUDA runtime loaded and sees a device, else 0; the count of
 * devices it sees. */
int kvc_gpu_available(void);
int kvc_gpu_device_count(void);

/* Allocate size bytes on GPU `device` (cudaMalloc) and register them with
 * the mount as an iov; kvc_iov_destroy frees them. id_out (may be NULL)
 * receives the iov's id. -ENOTSUP, -EINVAL (size 0, no such device),
 * -ENOMEM, -EIO (a CUDA call failed: kvc_gpu_last_error), and the errors
 * of kvc_iov_create (kvc-fuse answers -ENOTSUP where it has no CUDA). */
int kvc_iov_create_device(struct kvc_iov **out, const char *mount, size_t size, int device,
                          uint8_t id_out[16]);

/* Register the caller's GPU memory device_pointer..+size (device memory of
 * GPU `device`, from cudaMalloc or a caching allocator on top of it, such
 * as PyTorch's) as an iov. The memory stays the caller's and must outlive
 * the iov. -EINVAL (not device memory of that GPU), -EFAULT (the range
 * leaves its allocation), -EIO (cudaIpcGetMemHandle refused it: memory of
 * cudaMallocAsync pools and of the VMM API cannot be shared this way). */
int kvc_iov_wrap_device(struct kvc_iov **out, void *device_pointer, const uint8_t id[16],
                        const char *mount, size_t size, int device);

/* The GPU of a device iov, or -1 for host memory. */
int kvc_iov_device(const struct kvc_iov *iov);

/* Page-lock a host iov for the GPU / undo it. -ENOTSUP (no CUDA or no
 * device), -EIO (the CUDA call failed: see kvc_gpu_last_error), -EALREADY /
 * -EINVAL (already pinned / not pinned, or a device iov). */
int kvc_iov_pin(struct kvc_iov *iov);
int kvc_iov_unpin(struct kvc_iov *iov);

/* Queue count copies on a CUDA stream (NULL: the default stream) with
 * cudaMemcpyAsync: iov -> device, or device -> iov. Returns 0 once queued
 * (synchronize the stream before using the data), -EFAULT for a range
 * outside the iov, -ENOTSUP, -EIO. */
int kvc_iov_to_device(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                      void *stream);
int kvc_iov_from_device(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                        void *stream);

/* The CUDA error text of the last failure in this thread, or why CUDA is
 * not usable here. */
const char *kvc_gpu_last_error(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
