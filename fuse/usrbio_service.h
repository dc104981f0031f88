/*
 * usrbio_service: kvc-fuse's side of USRBIO registration. Serves the local
 * control socket (src/core/control_socket.h): each client process has one
 * connection, and what it registers (iovs, fds, rings) belongs to that
 * connection, so a process that exits or is killed leaves nothing behind.
 *
 * Owns, per client: its iovs (kvc-fuse's own mapping of the client's
 * shared memory, or its GPU memory imported over CUDA IPC by device_io),
 * its registered files (inode and the access mode the client opened it
 * with, read from the passed fd, which is closed at once: kvc-fuse never
 * holds files of its own mount; a hold on the inode in kvc-fuse's inode
 * table keeps it usable after the client closes its fd, as in 3FS) and
 * its rings (run by ring_service). Checks: shared memory must belong to
 * the client's uid; a registered fd must be a regular file of this mount.
 *
 * Locking: a client's tables and its in-flight count are guarded by the
 * client's mutex; ring workers hold an in-flight reference while I/O uses
 * the client's memory, and deregistration waits for it to drop.
 */
#ifndef KVC_FUSE_USRBIO_SERVICE_H
#define KVC_FUSE_USRBIO_SERVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "fuse/device_io.h"
#include "fuse/operations.h"
#include "core/server.h"

#define KVC_USRBIO_MAX_IOVS 1024
#define KVC_USRBIO_MAX_RINGS 256
#define KVC_USRBIO_MAX_FILES 65536

struct kvc_ring_service;
struct kvc_ring_server_ring;

struct kvc_usrbio_iov {
	void *base;   /* NULL: free slot */
	size_t size;
	int device;   /* -1: shared host memory; else GPU memory (gpu) */
	struct kvc_device_memory gpu;
};

struct kvc_usrbio_file {
	int client_fd;
	uint64_t ino;
	int access;   /* O_RDONLY, O_WRONLY or O_RDWR */
};

struct kvc_usrbio_client {
	struct kvc_fuse *fs;
	struct kvc_device_imports *imports;
	pthread_mutex_t lock;
	pthread_cond_t idle;   /* signalled when inflight drops to 0 */
	uid_t uid;
	pid_t pid;
	uint64_t id;           /* unique among this kvc-fuse's connections */
	int inflight;          /* ring batches using this client's memory */
	struct kvc_usrbio_iov iovs[KVC_USRBIO_MAX_IOVS];
	struct kvc_usrbio_file *files;
	size_t file_count, file_capacity;
	struct kvc_ring_server_ring *rings[KVC_USRBIO_MAX_RINGS];
};

struct kvc_usrbio {
	struct kvc_fuse *fs;
	dev_t mount_dev;       /* st_dev of the mount, to recognise its files */
	struct kvc_ring_service *rings;
	struct kvc_device_imports *imports;
	atomic_uint_fast64_t next_client;
	struct kvc_server server;
};

/* Start serving the control socket of mountpoint (after it is mounted):
 * a listener thread and the ring workers. Returns 0 or -errno. */
int kvc_usrbio_start(struct kvc_usrbio *usrbio, struct kvc_fuse *fs, const char *mountpoint);

/* For ring workers: look up, under the client's lock, the iov memory and
 * the file an entry names. Return 0, -EFAULT (unknown iov or range
 * outside it) or -EBADF (fd not registered by this client). *device is
 * the GPU of a device iov's memory, or -1 for host memory. */
int kvc_usrbio_resolve_iov(struct kvc_usrbio_client *client, uint32_t handle,
                           uint64_t offset, uint64_t length, void **out, int *device);
int kvc_usrbio_resolve_file(struct kvc_usrbio_client *client, int client_fd,
                            struct kvc_usrbio_file *out);

#endif
