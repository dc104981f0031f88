/*
 * usrbio_service: kvc-fuse's side of USRBIO registration. Serves the local
 * control socket (src/core/control_socket.h): each client process has one
 * connection, and what it registers (iovs, fds, rings) belongs to that
 * connection, so a process that exits or is killed leaves nothing behind.
 * Messages are dispatched through one table (type, body size, fds taken,
 * handler); a type without a row is refused.
 *
 * Owns, per client: its iovs (kvc-fuse's own mapping of the client's
 * shared memory, or its GPU memory imported over CUDA IPC by device_io),
 * its registered files (inode and the access mode the client opened it
 * with, read from the passed fd, which is closed at once: kvc-fuse never
 * holds files of its own mount; a hold on the inode in kvc-fuse's inode
 * table keeps it usable after the client closes its fd, as in 3FS) and
 * its rings (run by ring_service). Per uid: what all its clients hold,
 * within the [fuse] usrbio_uid_* limits (usrbio_limits).
 *
 * Checks (docs/usrbio.md): shared memory must be a regular file of tmpfs
 * or hugetlbfs (a memfd, /dev/shm) owned by the client's uid, never a file
 * of this mount, of a disk or of another FUSE filesystem (kvc-fuse would
 * wait on its pages); ring memory must also be a memfd sealed against
 * shrinking and growing, since kvc-fuse reads and writes it directly. Iov
 * memory is never touched by kvc-fuse itself: bytes go in and out of it by
 * the kernel (received into it, sent from it, holes read from /dev/zero),
 * which fails with EFAULT where a client shrank it, instead of a SIGBUS.
 * A registered fd must be a regular file of this mount.
 *
 * Lifetime and locking: a client is reference counted (its connection, and
 * each of its rings, through which ring workers reach it). Its mutex
 * guards its tables, `dead` and `inflight`. A ring worker enters the
 * client (inflight + 1, refused once dead) before it reads any
 * registration, and leaves after its I/O; the connection's cleanup marks
 * the client dead, stops its rings, then waits for inflight to drain
 * before it unmaps anything. Lock order: a client's mutex, then the device
 * imports' or the limits' (leaves). No lock shared between clients is held
 * across a system call on a client's object.
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
#include "fuse/usrbio_limits.h"
#include "core/server.h"

/* Per connection (a process): more is -EMFILE. */
#define KVC_USRBIO_MAX_IOVS 1024
#define KVC_USRBIO_MAX_RINGS 256
#define KVC_USRBIO_MAX_FILES 65536

struct kvc_ring_service;
struct kvc_ring_server_ring;
struct kvc_usrbio;

struct kvc_usrbio_iov {
	void *base;   /* NULL: free slot */
	size_t size;
	int device;   /* -1: shared host memory; else GPU memory (gpu) */
	/* Host memory: the client's fd, kept for same-host placement (a
	 * storage server on this host maps it: client/transport.h). */
	struct kvc_storage_region region;
	struct kvc_device_memory gpu;
};

struct kvc_usrbio_file {
	int client_fd;
	uint64_t ino;
	int access;   /* O_RDONLY, O_WRONLY or O_RDWR */
	bool dir;     /* a key directory (ring keys): no hold, no read or write */
};

#define KVC_USRBIO_MAX_GROUPS 64

struct kvc_usrbio_client {
	struct kvc_usrbio *service;
	atomic_int refs;       /* the connection's, and one per ring */
	uid_t uid;             /* of the peer (SO_PEERCRED) */
	gid_t gid;
	gid_t groups[KVC_USRBIO_MAX_GROUPS]; /* supplementary (SO_PEERGROUPS) */
	int group_count;
	pid_t pid;
	uint64_t id;           /* unique among this kvc-fuse's connections */
	pthread_mutex_t lock;  /* everything below */
	pthread_cond_t idle;   /* signalled when inflight drops to 0 */
	bool dead;             /* the connection is gone: no batch starts */
	int inflight;          /* ring batches using this client's registrations */
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
	struct kvc_usrbio_limits limits;
	atomic_uint_fast64_t next_client;
	struct kvc_server server;
};

/* Set up everything but the socket: limits from fs->config, the device
 * imports, and the ring service with `workers` threads (0: none and no
 * timer; rings then run only through kvc_ring_service_run, as the fuzz
 * harnesses do). u->mount_dev must be set. Returns 0 or -errno. */
int kvc_usrbio_init(struct kvc_usrbio *u, struct kvc_fuse *fs, int workers);

/* kvc_usrbio_init, then serve the control socket of mountpoint (after it
 * is mounted) on a listener thread. Returns 0 or -errno. */
int kvc_usrbio_start(struct kvc_usrbio *u, struct kvc_fuse *fs, const char *mountpoint);

/* The control socket's frame handler and connection cleanup (what the
 * listener's server calls; exported for the fuzz harness). */
int kvc_usrbio_handle(void *service, struct kvc_server_conn *conn,
                      const struct kvc_wire_header *h);
void kvc_usrbio_disconnect(void *service, struct kvc_server_conn *conn);

/* For ring_service: a ring holds a reference on its client; the last
 * put frees the client. */
void kvc_usrbio_client_get(struct kvc_usrbio_client *client);
void kvc_usrbio_client_put(struct kvc_usrbio_client *client);

/* For ring workers: enter before reading a client's registrations for a
 * batch (false: the client is gone, run nothing), leave after its I/O. */
bool kvc_usrbio_client_enter(struct kvc_usrbio_client *client);
void kvc_usrbio_client_leave(struct kvc_usrbio_client *client);

/* For ring workers (entered): look up, under the client's lock, the iov
 * memory and the file an entry names. Return 0, -EFAULT (unknown iov or
 * range outside it) or -EBADF (fd not registered by this client).
 * *device is the GPU of a device iov's memory, or -1 for host memory. */
int kvc_usrbio_resolve_iov(struct kvc_usrbio_client *client, uint32_t handle,
                           uint64_t offset, uint64_t length, void **out, int *device);
/* The same, with the host iov's region (client/transport.h: same-host
 * servers may place its bytes) in *region; NULL for device memory. The
 * region stays valid while the entry runs (deregistration waits). */
int kvc_usrbio_resolve_iov_region(struct kvc_usrbio_client *client, uint32_t handle,
                                  uint64_t offset, uint64_t length, void **out, int *device,
                                  const struct kvc_storage_region **region);
/* The same for n ring key segments at once (one lock): out (each
 * segment's memory and length), device and region get one element per
 * segment. 0 or -EFAULT (a segment outside its iov, or an unknown iov). */
struct kvc_ring_key_seg;
struct iovec;
int kvc_usrbio_resolve_segs(struct kvc_usrbio_client *client, const struct kvc_ring_key_seg *segs,
                            int n, struct iovec *out, int *device,
                            const struct kvc_storage_region **region);
int kvc_usrbio_resolve_file(struct kvc_usrbio_client *client, int client_fd,
                            struct kvc_usrbio_file *out);

/* Whether the client's process (its uid, gid and supplementary groups as
 * at connection) may access an inode of attr with mask (R_OK, W_OK,
 * X_OK bits), as the kernel's generic_permission decides it (owner, then
 * group, then other bits; root passes all but X_OK on a file without any
 * x bit). Returns 0 or -EACCES. The one permission check of ring keys. */
int kvc_usrbio_client_may(const struct kvc_usrbio_client *client, const struct kvc_attr *attr,
                          int mask);

#endif
