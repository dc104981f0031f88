/*
 * device_io: ring I/O between files and GPU memory that client processes
 * shared with kvc-fuse over CUDA IPC (device iovs, docs/gpu.md). The one
 * place that knows how bytes reach device memory: the storage client
 * receives into pinned staging memory and asynchronous copies move each
 * piece to the device (writes: the reverse). A GPUDirect RDMA transport
 * would replace the staging here and nowhere else.
 *
 * Owns: CUDA's side of the imported device memory (the table of imports,
 * keyed by owner, is fuse/device_imports.c's), and per ring worker a stager: pinned staging memory in
 * two halves and, per GPU, a CUDA stream and an event per half. The
 * network fills one half while the other half's copies run; an io's result
 * is set only after its copies finished.
 */
#ifndef KVC_FUSE_DEVICE_IO_H
#define KVC_FUSE_DEVICE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/storage_client.h"
#include "core/wire.h"
#include "fuse/device_imports.h"

struct kvc_device_stager;

struct kvc_device_memory {
	void *address;   /* the iov's first byte, in kvc-fuse's address space */
	uint64_t size;
	int device;      /* kvc-fuse's number of the GPU */
	void *allocation; /* the imported allocation it lies in */
	struct kvc_device_owner owner; /* who imported it */
};

/* The table of imported allocations, with CUDA's import calls (built
 * without CUDA: a table that imports nothing); NULL when out of memory. */
struct kvc_device_imports *kvc_device_io_imports_create(void);

/* Import, for owner, the device memory a client described: -ENOTSUP (no
 * CUDA or no GPU here), -ENODEV (no GPU with that PCI bus id), -EINVAL (a
 * bad message or handle), -EACCES (another process's import), -EFAULT
 * (the range leaves the allocation). */
int kvc_device_import(struct kvc_device_imports *imports, const struct kvc_device_owner *owner,
                      const struct kvc_msg_iov_register_device *m,
                      struct kvc_device_memory *out);
void kvc_device_release(struct kvc_device_imports *imports, struct kvc_device_memory *memory);

/* Run count (<= KVC_DEVICE_MAX_IOS) ios whose buf are device addresses
 * (devices[i]: the GPU of ios[i]) as reads or writes, and set each io's
 * result. *stager is created on first use with staging_bytes of pinned
 * memory and kept by the caller (one per thread). */
#define KVC_DEVICE_MAX_IOS 4096 /* a batch of ring keys of 64 segments */
void kvc_device_io_run(struct kvc_device_stager **stager, size_t staging_bytes,
                       struct kvc_storage_client *storage, struct kvc_storage_io *ios,
                       const int *devices, int count, bool read);

#endif
