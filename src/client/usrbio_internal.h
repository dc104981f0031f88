/*
 * usrbio_internal: what libkvc's USRBIO files share (src/client/usrbio.c:
 * iovs and registered fds; usrbio_ring.c: rings; usrbio_control.c: the
 * control connections). Not exported.
 */
#ifndef KVC_USRBIO_INTERNAL_H
#define KVC_USRBIO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/usrbio_control.h"

struct kvc_iov {
	void *base;
	size_t size;
	size_t block_size;
	int numa;
	uint8_t id[16];
	bool owned; /* we mapped it (create/open): unmap at destroy */
	bool named; /* we created its /dev/shm name and it is still there */
	bool pinned; /* page-locked for the GPU (src/client/gpu.c) */
	int device;  /* GPU memory of this device (src/client/gpu.c), or -1: host */
	uint32_t handle;
	struct kvc_usrbio_control *control;
	uint64_t generation; /* of control when registered */
};

/* The access mode (O_ACCMODE bits) of fd as registered through control,
 * or -EBADF when it is not. */
int kvc_usrbio_fd_access(int fd, const struct kvc_usrbio_control *control);

#endif
