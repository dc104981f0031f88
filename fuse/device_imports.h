/*
 * device_imports: the GPU allocations kvc-fuse imported over CUDA IPC for
 * device iovs (docs/gpu.md), and whose they are. CUDA maps an allocation
 * once per process, so one import serves every device iov its owner
 * registers in it (reference counted); the key is the owner, the GPU and
 * the IPC handle. An owner is a uid and one control connection (one
 * client process): a handle that another owner has imported is refused
 * (-EACCES), never shared, so a process that learns another's handle does
 * not get its GPU memory through kvc-fuse.
 *
 * The CUDA calls come in as an ops table (fuse/device_io.c gives CUDA's),
 * so this logic builds and is tested without CUDA or a GPU.
 * Thread-safe: one mutex guards the table; ops->open and ops->close run
 * under it (they act on kvc-fuse's own CUDA context, not on a client's
 * object, and must not call back into the table).
 */
#ifndef KVC_FUSE_DEVICE_IMPORTS_H
#define KVC_FUSE_DEVICE_IMPORTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/wire.h"

struct kvc_device_owner {
	uid_t uid;
	uint64_t client; /* the registering connection: unique for the process's life */
};

struct kvc_device_import_ops {
	/* Import the allocation handle names on device: its base in kvc-fuse
	 * and its real size. Returns 0 or -errno. */
	int (*open)(void *ctx, int device, const uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE],
	            void **allocation, size_t *size);
	void (*close)(void *ctx, int device, void *allocation);
	void *ctx;
};

struct kvc_device_imports;

/* An empty table using ops (copied); NULL when out of memory. */
struct kvc_device_imports *kvc_device_imports_create(const struct kvc_device_import_ops *ops);
/* Close what is still imported and free the table. */
void kvc_device_imports_destroy(struct kvc_device_imports *imports);

/* The allocation (device, handle) names, imported for owner: found (one
 * more user) or opened now. Returns 0, -EACCES (another owner imported
 * it), -ENOMEM, or ops->open's error. */
int kvc_device_imports_acquire(struct kvc_device_imports *imports,
                               const struct kvc_device_owner *owner, int device,
                               const uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE],
                               void **allocation, size_t *size);

/* One user fewer of an allocation owner acquired; the last one closes
 * it. Returns 0, or -ENOENT (owner holds no such allocation). */
int kvc_device_imports_release(struct kvc_device_imports *imports,
                               const struct kvc_device_owner *owner, void *allocation);

/* Allocations imported now (for tests and the registrations xattr). */
int kvc_device_imports_count(struct kvc_device_imports *imports);

#endif
