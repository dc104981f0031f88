/*
 * kvc/usrbio.h: kvcfs's user-space bulk I/O (USRBIO). Inference engines
 * move KV pages through shared memory without the kernel's FUSE path:
 *
 *   iov   a shared-memory buffer registered with a mount; kvc-fuse maps the
 *         same memory and receives/sends file bytes straight into/from it.
 *   ring  submission and completion queues in shared memory, for reads or
 *         for writes; kvc-fuse's ring workers run the I/O.
 *   fd    a file of the mount, registered so ring entries may name it.
 *
 * A process registers through kvc-fuse's local control socket; everything
 * it registered is dropped when it exits or is killed (docs/usrbio.md).
 * Registrations are per process: an iov, ring or fd registered by one
 * process cannot be used by another, and kvc-fuse refuses shared memory
 * owned by another uid.
 *
 * All functions return 0 (or a count / index) on success and -errno on
 * failure. Not thread-safe per ring (like 3FS): one thread prepares and
 * submits on a ring at a time; different rings are independent.
 */
#ifndef KVC_USRBIO_H
#define KVC_USRBIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libkvc is built with hidden visibility; these are its exports. */
#pragma GCC visibility push(default)

#define KVC_RING_FORBID_READ_HOLES 2u
#define KVC_RING_ALLOW_READ_UNCOMMITTED 1u

struct kvc_iov;
struct kvc_ring;

struct kvc_completion {
	int32_t index;        /* the index kvc_ring_prep returned */
	int64_t result;       /* bytes transferred, or -errno */
	const void *userdata; /* as given to kvc_ring_prep */
};

/* Create a new shared-memory iov of size bytes on the mount (any path in
 * it) and register it. id_out (may be NULL) receives its 16-byte id, by
 * which another process of the same uid may open it while the name
 * /dev/shm/kvc-iov-<id> exists: this handle removes it at kvc_iov_unlink
 * or kvc_iov_destroy (a killed process leaves it behind). Errors: -EINVAL,
 * -ENOENT (not a kvcfs mount), -ECONNREFUSED (kvc-fuse not serving),
 * -ENOMEM, -EACCES (also: the mount's control socket is served by a
 * process neither root nor the mount's owner; nothing was sent to it),
 * -EDQUOT (the uid's USRBIO limits: docs/usrbio.md), -EMFILE. Every
 * registration below may fail with these last three too. */
int kvc_iov_create(struct kvc_iov **out, const char *mount, size_t size,
                   size_t block_size, int numa, uint8_t id_out[16]);

/* Open and register an existing iov by id (created by kvc_iov_create).
 * Errors as create, and -ENOENT (no such iov), -EACCES (another uid's). */
int kvc_iov_open(struct kvc_iov **out, const uint8_t id[16], const char *mount,
                 size_t size, size_t block_size, int numa);

/* Register memory the caller already maps from a shared file of tmpfs or
 * hugetlbfs (POSIX shm, /dev/shm, a tmpfs file): base..base+size must lie
 * in one shared file mapping. -EINVAL for private or anonymous memory, or
 * a file elsewhere (a disk, a kvcfs mount). */
int kvc_iov_wrap(struct kvc_iov **out, void *base, const uint8_t id[16],
                 const char *mount, size_t size, size_t block_size, int numa);

void *kvc_iov_base(const struct kvc_iov *iov);
/* Whether the iov is page-locked for the GPU (kvc/gpu.h); for libkvc. */
int kvc_iov_pinned(const struct kvc_iov *iov);
void kvc_iov_set_pinned(struct kvc_iov *iov, int pinned);
size_t kvc_iov_size(const struct kvc_iov *iov);
void kvc_iov_id(const struct kvc_iov *iov, uint8_t id[16]);

/* Remove the name of an iov this handle created (kvc_iov_open by id no
 * longer finds it; mappings stay valid). An iov opened by id, wrapped or
 * of GPU memory has no name of ours: 0, nothing done. */
int kvc_iov_unlink(struct kvc_iov *iov);

/* Deregister and unmap (memory from kvc_iov_wrap stays the caller's), and
 * remove the name if this handle created it. Waits for the ring I/O that
 * still uses it. Safe on NULL. */
void kvc_iov_destroy(struct kvc_iov *iov);

/* Create and register a ring of `entries` slots (1..4096: at most that
 * many I/Os outstanding; its shared memory, a sealed memfd, holds the
 * next power of two) for reads or writes; -EPROTO from a kvc-fuse older
 * than this libkvc. io_depth: > 0 run exactly that many
 * per batch (waiting up to timeout_ms for them, 0 = no limit), 0 run all
 * pending entries at once, < 0 at most -io_depth per batch. flags:
 * KVC_RING_FORBID_READ_HOLES (reading a hole fails with -ENODATA). */
int kvc_ring_create(struct kvc_ring **out, const char *mount, int entries, bool for_read,
                    int io_depth, int priority, int timeout_ms, int numa, uint64_t flags);
void kvc_ring_destroy(struct kvc_ring *ring);
int kvc_ring_entries(const struct kvc_ring *ring);

/* Queue one I/O: `length` bytes at `file_offset` of registered fd into
 * (read) or from (write) iov memory at ptr. Any length the iov holds:
 * kvc-fuse cuts it into chunk pieces and completes the entry once, with
 * the total. Returns the entry's index (no other outstanding entry has
 * it; completions come in any order, each with its entry's index), or
 * -EINVAL (direction differs from the ring's, zero length),
 * -EFAULT (ptr..ptr+length outside the iov), -EBADF (fd not registered),
 * -EACCES (fd not open for that direction), -EAGAIN (ring full: wait for
 * completions first). Takes effect at kvc_ring_submit. */
int kvc_ring_prep(struct kvc_ring *ring, const struct kvc_iov *iov, bool read, void *ptr,
                  int fd, uint64_t file_offset, uint64_t length, const void *userdata);

/* Keys (docs/usrbio.md "Keys"): put, get, exists, remove and wait of a
 * key, a regular file named `name` (one path component: 1..255 bytes, no
 * '/', not "." or "..") in the key directory dir_fd, a directory of the
 * mount registered with kvc_fd_register (O_RDONLY or O_PATH). kvc-fuse
 * creates, sizes and publishes a put key itself: it becomes visible
 * complete, never partly written. On rings of either direction.
 *
 *   PUT    gather the segments in order into a new key (nsegs 0: an
 *          empty key); -EEXIST when the key exists, unless flags has
 *          KVC_KEY_REPLACE. Result: the key's size.
 *   GET    scatter the key into the segments in order; -EMSGSIZE unless
 *          their lengths add up to the key's size (nothing is copied).
 *   EXISTS the key's size, or -ENOENT.
 *   REMOVE remove it: its size, or -ENOENT.
 *   WAIT   complete with the key's size once it exists (published), or
 *          -ETIMEDOUT after timeout_ms (0: the longest, an hour). It
 *          holds its index but no kvc-fuse worker; a removed key is waited
 *          for again.
 *
 * A segment is `length` bytes at `offset` of a registered iov, host or
 * GPU (kvc/gpu.h); up to KVC_KEY_MAX_SEGS per key, not overlapping.
 * Errors arrive in the completion: -ENOENT, -EEXIST, -EMSGSIZE, -EACCES
 * (the process's uid and groups may not: x on the key directory, w too
 * for put and remove, r on the key for get; -EPERM: sticky directory),
 * -EFAULT (a segment outside its iov), -EINVAL (overlapping or empty
 * segments, a bad name or flags), -E2BIG (over KVC_KEY_MAX_SEGS segments),
 * -ENAMETOOLONG, -ENOTDIR (dir_fd no registered directory), -EDQUOT (too
 * many waits parked), -EIO. The entries of one submission run together,
 * in no order among them. kvc_ring_prep_key returns the index, or -EAGAIN
 * (ring full), -EBADF (dir_fd not registered), -EINVAL (bad op, or over
 * KVC_KEY_MAX_DESC_SEGS segments, or a name over 256 bytes: they would
 * not fit the descriptor), -EFAULT (an iov of another mount), -ENOMEM. */
enum kvc_key_op {
	KVC_KEY_PUT = 3,
	KVC_KEY_GET = 4,
	KVC_KEY_EXISTS = 5,
	KVC_KEY_REMOVE = 6,
	KVC_KEY_WAIT = 7,
};
#define KVC_KEY_REPLACE 1u
#define KVC_KEY_MAX_SEGS 64
#define KVC_KEY_MAX_DESC_SEGS 159 /* what libkvc passes on: kvc-fuse checks the rest */

struct kvc_key_seg {
	const struct kvc_iov *iov;
	size_t offset;
	size_t length;
};

int kvc_ring_prep_key(struct kvc_ring *ring, int op, int dir_fd, const char *name,
                      const struct kvc_key_seg *segs, int nsegs, uint32_t flags,
                      uint32_t timeout_ms, const void *userdata);

/* Hand every prepared entry to kvc-fuse. Returns the count submitted. */
int kvc_ring_submit(struct kvc_ring *ring);

/* Collect up to max completions, waiting until at least min_results are
 * there or abs_timeout (CLOCK_REALTIME; NULL = no limit) passes. Entries
 * prepared and not submitted are submitted first; with fewer I/Os in
 * flight than min_results it waits for those only (never forever). Returns
 * the count (possibly fewer than min_results at the timeout), or -errno:
 * -ECONNRESET when kvc-fuse went away with I/O in flight (noticed within
 * a second). */
int kvc_ring_wait(struct kvc_ring *ring, struct kvc_completion *out, int max,
                  int min_results, const struct timespec *abs_timeout);

/* Register fd (open on a kvcfs mount) for ring I/O: -EBADF (not a
 * regular file of a kvcfs mount), -EINVAL (the number is registered
 * already: as in 3FS, a registered number stays registered after close
 * until kvc_fd_deregister), -ECONNREFUSED, -ENOMEM. Deregister: 0, -EBADF
 * (not registered). */
int kvc_fd_register(int fd, uint64_t flags);
int kvc_fd_deregister(int fd);

/* 1 when fd is a file or directory of a kvcfs mount, else 0. */
int kvc_is_kvcfs(int fd);

/* Copy the kvcfs mount point that contains path into out. Returns its
 * length, -ENOENT (not inside a kvcfs mount), -ENAMETOOLONG. */
int kvc_extract_mount_point(char *out, size_t size, const char *path);

/* Make the file's size (as extended by ring writes) and data durable and
 * visible to every client now. */
int kvc_fd_sync(int fd);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
