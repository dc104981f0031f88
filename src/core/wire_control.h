/*
 * wire_control: USRBIO control messages on kvc-fuse's local socket (iov,
 * fd and ring registration; the fds ride along as SCM_RIGHTS). Part of
 * core/wire.h; include that, not this. docs/usrbio.md describes them.
 */
#ifndef KVC_WIRE_CONTROL_H
#define KVC_WIRE_CONTROL_H

#ifndef KVC_WIRE_H
#error "include core/wire.h"
#endif

/* IOV_REGISTER: one fd (the shared memory), mapped from file_offset. */
struct kvc_msg_iov_register {
	uint64_t size;
	uint64_t block_size;
	uint64_t file_offset;
	int32_t numa;
	uint32_t reserved;
	uint8_t id[16];
};
_Static_assert(sizeof(struct kvc_msg_iov_register) == 48, "");
/* IOV_REGISTER_DEVICE: no fd. GPU memory shared over CUDA IPC: the iov
 * is bytes offset..offset+size of the allocation ipc_handle names, on the
 * GPU pci_bus_id names (device numbers differ between processes). The
 * server checks the range against the allocation it imports. */
#define KVC_WIRE_IPC_HANDLE_SIZE 64
struct kvc_msg_iov_register_device {
	uint64_t size;
	uint64_t offset;
	uint8_t id[16];
	char pci_bus_id[32]; /* NUL-terminated, e.g. "0000:1b:00.0" */
	uint8_t ipc_handle[KVC_WIRE_IPC_HANDLE_SIZE];
};
_Static_assert(sizeof(struct kvc_msg_iov_register_device) == 128, "");
/* reply of IOV_REGISTER(_DEVICE) and RING_REGISTER; body of both
 * DEREGISTERs */
struct kvc_msg_handle {
	uint32_t handle;
	uint32_t reserved;
};

/* FD_REGISTER: one fd (a dup of the client's open file); client_fd is the
 * number the client's ring entries will use. FD_DEREGISTER: no fd. */
struct kvc_msg_fd_register {
	int32_t client_fd;
	uint32_t flags;
};
struct kvc_msg_fd_register_reply {
	uint64_t ino;
	uint32_t access; /* O_RDONLY, O_WRONLY or O_RDWR */
	uint32_t reserved;
};

/* RING_REGISTER: one fd, the ring's shared memory (a sealed memfd); the
 * reply carries the ring's doorbell, made by kvc-fuse. The layout of the
 * shared memory is src/core/ring.h's. */
struct kvc_msg_ring_register {
	uint32_t entries;
	uint32_t for_read;
	int32_t io_depth;
	int32_t timeout_ms;
	int32_t priority;
	uint32_t reserved;
	uint64_t flags;
};
_Static_assert(sizeof(struct kvc_msg_ring_register) == 32, "");

#endif
