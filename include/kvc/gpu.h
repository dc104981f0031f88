/*
 * kvc/gpu.h: GPU-registered USRBIO buffers (part of libkvc). A pinned iov
 * is an iov whose pages are page-locked for the GPU (cudaHostRegister), so
 * the GPU copies KV pages straight out of the shared memory kvc-fuse
 * filled: no staging copy by the client.
 *
 * libkvc loads the CUDA runtime (libcudart) when these are first used, so
 * it runs on machines without CUDA: then every call returns -ENOTSUP (and
 * kvc_gpu_available 0). Built only when meson's `cuda` option found the
 * CUDA headers; otherwise the same functions exist and return -ENOTSUP.
 * Not yet: device-memory iovs filled by kvc-fuse over CUDA IPC.
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

/* 1 when the CUDA runtime loaded and sees a device, else 0. */
int kvc_gpu_available(void);

/* Page-lock an iov for the GPU / undo it. -ENOTSUP (no CUDA or no device),
 * -EIO (the CUDA call failed: see kvc_gpu_last_error), -EALREADY / -EINVAL
 * (already pinned / not pinned). */
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

/* The CUDA error text of the last failure in this thread (or ""). */
const char *kvc_gpu_last_error(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
