/*
 * usrbio_ring: libkvc's USRBIO rings (include/kvc/usrbio.h; the layout and
 * its memory ordering are src/core/ring.h's). A ring's memory is a memfd
 * sealed against shrinking and growing (kvc-fuse refuses any other, since
 * it reads and writes the memory directly); its doorbell is kvc-fuse's,
 * handed over at registration (the client's end of a socket pair: ringing
 * is writing 8 bytes to it). A ring handle belongs to one thread at a time
 * (as in 3FS); different rings are independent.
 */
#include "kvc/usrbio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client/usrbio_internal.h"
#include "core/ring.h"
#include "core/wire.h"

struct kvc_ring {
	struct kvc_ring_shared *shared;
	size_t bytes;
	uint32_t entries;      /* slots in the shared memory: a power of two */
	uint32_t mask;
	uint32_t limit;        /* entries asked for: at most this many outstanding */
	bool for_read;
	uint32_t local_tail;   /* prepared, not yet published */
	uint32_t outstanding;  /* prepared and not yet reaped */
	/* Indices of entries (what prep returns, the completion's index, the
	 * key descriptor's place): unique among outstanding entries, since
	 * kvc-fuse completes entries in any order. A stack of free ones. */
	uint32_t *free_index;
	uint32_t free_count;
	uint8_t *index_used; /* per index: outstanding */
	int doorbell;          /* kvc-fuse's, from the registration */
	uint32_t handle;
	struct kvc_usrbio_control *control;
	uint64_t generation; /* of control when registered */
	char *mount;             /* for the key descriptors' iov */
	struct kvc_iov *descs;   /* key descriptors: DESC_SLOT bytes per slot */
};

/* An index's key descriptor: reused only once its entry's completion was
 * reaped (kvc-fuse copies it before that entry completes). */
#define DESC_SLOT 4096u
_Static_assert(sizeof(struct kvc_ring_key_desc) +
               KVC_KEY_MAX_DESC_SEGS * sizeof(struct kvc_ring_key_seg) <= DESC_SLOT, "");

static uint32_t round_up_pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

int kvc_ring_create(struct kvc_ring **out, const char *mount, int entries, bool for_read,
                    int io_depth, int priority, int timeout_ms, int numa, uint64_t flags)
{
	(void)numa;
	if (entries <= 0 || entries > KVC_RING_MAX_ENTRIES || timeout_ms < 0)
		return -EINVAL;
	struct kvc_ring *ring = calloc(1, sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	ring->limit = (uint32_t)entries;
	ring->free_index = malloc((size_t)entries * sizeof(*ring->free_index));
	ring->index_used = calloc((size_t)entries, 1);
	if (!ring->free_index || !ring->index_used) {
		free(ring->free_index);
		free(ring->index_used);
		free(ring);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ring->limit; i++) /* index 0 is taken first */
		ring->free_index[ring->free_count++] = ring->limit - 1 - i;
	ring->entries = round_up_pow2((uint32_t)entries);
	ring->mask = ring->entries - 1;
	ring->for_read = for_read;
	ring->bytes = kvc_ring_bytes(ring->entries);
	ring->doorbell = -1;
	ring->mount = strdup(mount);
	int memfd = memfd_create("kvc-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc = memfd < 0 ? -errno : ring->mount ? 0 : -ENOMEM;
	if (rc == 0 && ftruncate(memfd, (off_t)ring->bytes) < 0)
		rc = -errno;
	/* Its size is fixed for good: kvc-fuse can never fault on it. */
	if (rc == 0 && fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		rc = -errno;
	if (rc == 0) {
		ring->shared = mmap(NULL, ring->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		if (ring->shared == MAP_FAILED) {
			ring->shared = NULL;
			rc = -errno;
		}
	}
	if (rc == 0) {
		ring->shared->magic = KVC_RING_MAGIC;
		ring->shared->layout = KVC_RING_LAYOUT;
		ring->shared->entries = ring->entries;
		atomic_store(&ring->shared->need_wakeup, 1);
	}
	if (rc == 0)
		rc = kvc_usrbio_control_get(mount, &ring->control);
	if (rc == 0)
		ring->generation = ring->control->generation;
	if (rc == 0) {
		struct kvc_msg_ring_register m = {.entries = ring->entries, .for_read = for_read,
		                                  .io_depth = io_depth, .timeout_ms = timeout_ms,
		                                  .priority = priority, .flags = flags};
		struct kvc_msg_handle reply;
		rc = kvc_usrbio_control_call(ring->control, KVC_MSG_RING_REGISTER, &m, sizeof(m),
		                             &memfd, 1, &reply, sizeof(reply), &ring->doorbell);
		ring->handle = reply.handle;
		if (rc == 0 && ring->doorbell < 0)
			rc = -EPROTO; /* a kvc-fuse from before its doorbells */
	}
	if (memfd >= 0)
		close(memfd);
	if (rc < 0) {
		ring->control = NULL;
		kvc_ring_destroy(ring);
		return rc;
	}
	*out = ring;
	return 0;
}

void kvc_ring_destroy(struct kvc_ring *ring)
{
	if (!ring)
		return;
	if (ring->control)
		kvc_usrbio_control_deregister(ring->control, KVC_MSG_RING_DEREGISTER, ring->generation,
		                              ring->handle);
	if (ring->shared)
		munmap(ring->shared, ring->bytes);
	if (ring->doorbell >= 0)
		close(ring->doorbell);
	kvc_iov_destroy(ring->descs);
	free(ring->mount);
	free(ring->free_index);
	free(ring->index_used);
	free(ring);
}

/* Whether every index is outstanding (prep: -EAGAIN). */
static bool ring_full(const struct kvc_ring *ring)
{
	return ring->outstanding == ring->limit || ring->free_count == 0;
}

/* An index for a new entry; -EAGAIN when every one is outstanding. */
static int take_index(struct kvc_ring *ring)
{
	if (ring_full(ring))
		return -EAGAIN;
	uint32_t index = ring->free_index[--ring->free_count];
	ring->index_used[index] = 1;
	return (int)index;
}

/* A reaped completion's index is free again (one kvc-fuse never sent, or
 * sent twice, is ignored). */
static void give_index(struct kvc_ring *ring, uint32_t index)
{
	if (index < ring->limit && ring->index_used[index]) {
		ring->index_used[index] = 0;
		ring->free_index[ring->free_count++] = index;
	}
}

int kvc_ring_entries(const struct kvc_ring *ring)
{
	return (int)ring->limit;
}

int kvc_ring_prep(struct kvc_ring *ring, const struct kvc_iov *iov, bool read, void *ptr,
                  int fd, uint64_t file_offset, uint64_t length, const void *userdata)
{
	/* Any length the iov holds: kvc-fuse cuts an entry into chunk pieces. */
	if (read != ring->for_read || length == 0)
		return -EINVAL;
	uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)iov->base;
	if (iov->control != ring->control || p < base || p - base > iov->size ||
	    length > iov->size - (p - base))
		return -EFAULT;
	int access = kvc_usrbio_fd_access(fd, ring->control);
	if (access < 0)
		return access;
	if ((read && access == O_WRONLY) || (!read && access == O_RDONLY))
		return -EACCES;
	int index = take_index(ring);
	if (index < 0)
		return index;
	uint32_t slot = ring->local_tail & ring->mask;
	kvc_ring_sqes(ring->shared)[slot] = (struct kvc_ring_sqe){
		.iov_offset = p - base, .file_offset = file_offset, .length = length,
		.userdata = (uint64_t)(uintptr_t)userdata, .fd = fd, .iov_handle = iov->handle,
		.op = read ? KVC_RING_READ : KVC_RING_WRITE, .tag = (uint32_t)index + 1};
	ring->local_tail++;
	ring->outstanding++;
	return index;
}

int kvc_ring_prep_key(struct kvc_ring *ring, int op, int dir_fd, const char *name,
                      const struct kvc_key_seg *segs, int nsegs, uint32_t flags,
                      uint32_t timeout_ms, const void *userdata)
{
	size_t len = name ? strlen(name) : 0;
	if (op < KVC_KEY_PUT || op > KVC_KEY_WAIT || nsegs < 0 || nsegs > KVC_KEY_MAX_DESC_SEGS ||
	    len > KVC_RING_KEY_MAX_NAME + 1 || (nsegs && !segs))
		return -EINVAL;
	if (kvc_usrbio_fd_access(dir_fd, ring->control) < 0)
		return -EBADF;
	for (int i = 0; i < nsegs; i++)
		if (!segs[i].iov || segs[i].iov->control != ring->control)
			return -EFAULT;
	if (ring_full(ring))
		return -EAGAIN;
	if (!ring->descs) { /* the first key entry: the descriptors' iov */
		int rc = kvc_iov_create(&ring->descs, ring->mount, (size_t)ring->entries * DESC_SLOT,
		                        0, -1, NULL);
		if (rc == 0)
			kvc_iov_unlink(ring->descs); /* ours alone: no name needed */
		if (rc < 0) {
			ring->descs = NULL;
			return rc;
		}
	}
	uint32_t index = (uint32_t)take_index(ring); /* there is one: checked above */
	uint32_t slot = ring->local_tail & ring->mask;
	char *at = (char *)ring->descs->base + (size_t)index * DESC_SLOT;
	struct kvc_ring_key_desc d = {.name_len = (uint16_t)len, .nsegs = (uint16_t)nsegs,
	                              .flags = flags, .timeout_ms = timeout_ms};
	memcpy(d.name, name, len);
	memcpy(at, &d, sizeof(d));
	struct kvc_ring_key_seg *out = (struct kvc_ring_key_seg *)(at + sizeof(d));
	for (int i = 0; i < nsegs; i++)
		out[i] = (struct kvc_ring_key_seg){.iov_handle = segs[i].iov->handle,
		                                   .offset = segs[i].offset,
		                                   .length = segs[i].length};
	kvc_ring_sqes(ring->shared)[slot] = (struct kvc_ring_sqe){
		.iov_offset = (size_t)index * DESC_SLOT,
		.length = sizeof(d) + (size_t)nsegs * sizeof(struct kvc_ring_key_seg),
		.userdata = (uint64_t)(uintptr_t)userdata, .fd = dir_fd,
		.iov_handle = ring->descs->handle, .op = (uint32_t)op, .tag = index + 1};
	ring->local_tail++;
	ring->outstanding++;
	return (int)index;
}

int kvc_ring_submit(struct kvc_ring *ring)
{
	uint32_t published = atomic_load_explicit(&ring->shared->sq_tail, memory_order_relaxed);
	uint32_t count = ring->local_tail - published;
	if (count == 0)
		return 0;
	/* Release: the entries written above are visible before the tail.
	 * The full fence orders the tail before the need_wakeup read (see
	 * src/core/ring.h): a worker watching the ring needs no doorbell. */
	atomic_store_explicit(&ring->shared->sq_tail, ring->local_tail, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&ring->shared->need_wakeup, memory_order_relaxed))
		return (int)count;
	/* Never waits (a full doorbell is rung already), never raises SIGPIPE
	 * (kvc-fuse gone: ECONNRESET, as kvc_ring_wait says). */
	uint64_t one = 1;
	if (send(ring->doorbell, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
	    errno != EAGAIN)
		return errno == EPIPE ? -ECONNRESET : -errno;
	return (int)count;
}

static int futex_wait(_Atomic uint32_t *word, uint32_t expected, const struct timespec *abs)
{
	/* FUTEX_WAIT_BITSET takes an absolute CLOCK_REALTIME deadline. */
	long rc = syscall(SYS_futex, word, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, expected, abs,
	                  NULL, FUTEX_BITSET_MATCH_ANY);
	return rc < 0 ? -errno : 0;
}

/* The earlier of abs (NULL: none) and one second from now: a waiter looks
 * up now and then whether kvc-fuse is still there. */
static struct timespec wait_slice(const struct timespec *abs)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	now.tv_sec += 1;
	if (abs && (abs->tv_sec < now.tv_sec ||
	            (abs->tv_sec == now.tv_sec && abs->tv_nsec < now.tv_nsec)))
		return *abs;
	return now;
}

int kvc_ring_wait(struct kvc_ring *ring, struct kvc_completion *out, int max, int min_results,
                  const struct timespec *abs_timeout)
{
	struct kvc_ring_shared *sh = ring->shared;
	struct kvc_ring_cqe *cqes = kvc_ring_cqes(sh, ring->entries);
	int got = 0;
	if (max < 0 || min_results < 0)
		return -EINVAL;
	if (min_results > max)
		min_results = max;
	/* Prepared entries are waited for as if submitted (as in 3FS, where
	 * the worker may pick them up before the submit). */
	int submitted = kvc_ring_submit(ring);
	if (submitted < 0)
		return submitted;
	for (;;) {
		uint32_t head = atomic_load_explicit(&sh->cq_head, memory_order_relaxed);
		/* Acquire: completions written before the tail are visible. */
		uint32_t tail = atomic_load_explicit(&sh->cq_tail, memory_order_acquire);
		while (head != tail && got < max) {
			const struct kvc_ring_cqe *c = &cqes[head & ring->mask];
			out[got++] = (struct kvc_completion){.index = (int32_t)c->index,
			                                     .result = c->result,
			                                     .userdata = (const void *)(uintptr_t)c->userdata};
			head++;
			ring->outstanding--;
			give_index(ring, c->index);
		}
		/* Release: kvc-fuse may reuse the slots once it sees the head. */
		atomic_store_explicit(&sh->cq_head, head, memory_order_release);
		/* More than can ever come (fewer I/Os in flight): all of them.
		 * (got may exceed min_results: then nothing more is needed.) */
		if (min_results > got && (uint32_t)(min_results - got) > ring->outstanding)
			min_results = got + (int)ring->outstanding;
		if (got >= min_results)
			return got;
		struct timespec slice = wait_slice(abs_timeout);
		int rc = futex_wait(&sh->cq_tail, tail, &slice);
		if (rc == -ETIMEDOUT && kvc_usrbio_control_lost(ring->control))
			return got ? got : -ECONNRESET; /* kvc-fuse died: nothing will come */
		if (rc == -ETIMEDOUT && abs_timeout && slice.tv_sec == abs_timeout->tv_sec &&
		    slice.tv_nsec == abs_timeout->tv_nsec)
			return got;
		if (rc < 0 && rc != -ETIMEDOUT && rc != -EAGAIN && rc != -EINTR)
			return got ? got : rc;
	}
}
