/*
 * iov_device: the hooks between libkvc's iov handles (src/client/usrbio.c) and
 * its GPU module (src/client/gpu.c), hidden inside libkvc. usrbio.c owns the iov
 * handle and the registration with kvc-fuse; gpu.c owns everything CUDA:
 * the device allocation of an iov it created, and its IPC handle.
 */
#ifndef KVC_IOV_DEVICE_H
#define KVC_IOV_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "kvc/usrbio.h"
#include "core/wire.h"

/* Register GPU memory base..base+size (device memory of GPU `device`,
 * described to kvc-fuse by m) as an iov of mount. owned: destroy frees it
 * (kvc_gpu_device_free). Returns 0 or -errno; on failure nothing is kept
 * and the memory stays the caller's. */
int kvc_iov_register_device(struct kvc_iov **out, const char *mount, void *base, size_t size,
                            int device, bool owned, const struct kvc_msg_iov_register_device *m);

/* For kvc_iov_destroy: free device memory created by kvc_iov_create_device. */
void kvc_gpu_device_free(void *base, int device);

#endif
