/* ring_service: see ring_service.h; ring layout and ordering: src/ring.h. */
#include "fuse/ring_service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "layout.h"
#include "log.h"
#include "ring.h"

#define MAX_BATCH 256
#define MAX_IO_LENGTH (64ull << 20)

struct kvc_ring_server_ring {
	struct kvc_usrbio_client *client;
	struct kvc_ring_shared *shared;
	size_t bytes;
	uint32_t entries;
	uint32_t mask;
	bool for_read;
	int io_depth;
	int timeout_ms;
	uint64_t flags;
	int doorbell;
	atomic_int refs;
	atomic_bool scheduled;
	atomic_bool dead;
	/* io_depth > 0: when fewer entries than io_depth started waiting */
	_Atomic int64_t partial_since_ns;
	struct kvc_ring_server_ring *next; /* work queue link */
	struct kvc_ring_server_ring *all_prev, *all_next; /* every live ring */
};

struct kvc_ring_service {
	struct kvc_fuse *fs;
	int epoll_fd;
	pthread_mutex_t lock; /* the work queue */
	pthread_cond_t work;
	struct kvc_ring_server_ring *head, *tail;
	pthread_mutex_t all_lock; /* the list of every live ring */
	struct kvc_ring_server_ring *all;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void ring_put(struct kvc_ring_server_ring *ring)
{
	if (atomic_fetch_sub(&ring->refs, 1) != 1)
		return;
	munmap(ring->shared, ring->bytes);
	close(ring->doorbell);
	free(ring);
}

/* Queue a ring for a worker unless it is queued or running already. */
static void schedule(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	if (atomic_load(&ring->dead) || atomic_exchange(&ring->scheduled, true))
		return;
	atomic_fetch_add(&ring->refs, 1);
	pthread_mutex_lock(&svc->lock);
	ring->next = NULL;
	if (svc->tail)
		svc->tail->next = ring;
	else
		svc->head = ring;
	svc->tail = ring;
	pthread_cond_signal(&svc->work);
	pthread_mutex_unlock(&svc->lock);
}

/* How many entries to take now (0: none yet), by the io_depth rules and
 * the room left in the completion queue. */
static uint32_t batch_size(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring,
                           uint32_t head)
{
	struct kvc_ring_shared *sh = ring->shared;
	uint32_t tail = atomic_load_explicit(&sh->sq_tail, memory_order_acquire);
	uint32_t pending = tail - head;
	uint32_t cq_used = atomic_load_explicit(&sh->cq_tail, memory_order_relaxed) -
	                   atomic_load_explicit(&sh->cq_head, memory_order_acquire);
	if (pending > ring->entries || cq_used > ring->entries) {
		kvc_log_warn("usrbio: ring of pid %d has corrupt indices; stopping it",
		             (int)ring->client->pid);
		atomic_store(&ring->dead, true);
		return 0;
	}
	uint32_t n = pending < ring->entries - cq_used ? pending : ring->entries - cq_used;
	if (ring->io_depth > 0 && n < (uint32_t)ring->io_depth) {
		if (n == 0)
			return 0;
		int64_t now = now_ns(), since = atomic_load(&ring->partial_since_ns);
		if (since == 0)
			atomic_store(&ring->partial_since_ns, since = now);
		if (ring->timeout_ms == 0 || now - since < (int64_t)ring->timeout_ms * 1000000)
			return 0; /* wait for io_depth entries, or the timeout */
	} else if (ring->io_depth > 0) {
		n = (uint32_t)ring->io_depth;
	} else if (ring->io_depth < 0 && n > (uint32_t)-ring->io_depth) {
		n = (uint32_t)-ring->io_depth;
	}
	(void)svc;
	atomic_store(&ring->partial_since_ns, 0);
	return n < MAX_BATCH ? n : MAX_BATCH;
}

struct batch {
	struct kvc_ring_sqe sqe[MAX_BATCH];
	struct kvc_storage_io io[MAX_BATCH];
	uint64_t ino[MAX_BATCH];
	int64_t result[MAX_BATCH]; /* set early for refused entries */
	int runnable[MAX_BATCH];   /* index into io of each runnable entry, or -1 */
};

/* Check one entry against the client's registrations; fill its io. */
static int prepare_entry(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring,
                         const struct kvc_ring_sqe *e, struct kvc_storage_io *io,
                         uint64_t *ino)
{
	bool read = e->op == KVC_RING_READ;
	if ((e->op != KVC_RING_READ && e->op != KVC_RING_WRITE) || read != ring->for_read)
		return -EINVAL;
	if (e->length == 0 || e->length > MAX_IO_LENGTH)
		return -EINVAL;
	if (e->file_offset > KVC_LAYOUT_MAX_FILE_SIZE ||
	    e->length > KVC_LAYOUT_MAX_FILE_SIZE - e->file_offset)
		return -EFBIG;
	struct kvc_usrbio_file file;
	void *memory;
	int rc = kvc_usrbio_resolve_iov(ring->client, e->iov_handle, e->iov_offset, e->length,
	                                &memory);
	if (rc == 0)
		rc = kvc_usrbio_resolve_file(ring->client, e->fd, &file);
	if (rc < 0)
		return rc;
	if ((read && file.access == O_WRONLY) || (!read && file.access == O_RDONLY))
		return -EACCES;
	uint64_t size;
	*io = (struct kvc_storage_io){.inode = file.ino, .offset = e->file_offset,
	                              .length = e->length, .buf = memory,
	                              .forbid_holes = (ring->flags & 2u) != 0};
	if (kvc_inode_table_get(fs->inodes, file.ino, &io->layout, &size) < 0)
		return -EBADF;
	*ino = file.ino;
	if (read) /* a read stops at the end of the file, like pread */
		io->length = e->file_offset >= size ? 0
		           : (e->length < size - e->file_offset ? e->length : size - e->file_offset);
	return 0;
}

static void post(struct kvc_ring_server_ring *ring, uint32_t slot, const struct kvc_ring_sqe *e,
                 int64_t result)
{
	struct kvc_ring_shared *sh = ring->shared;
	uint32_t tail = atomic_load_explicit(&sh->cq_tail, memory_order_relaxed);
	kvc_ring_cqes(sh, ring->entries)[tail & ring->mask] =
		(struct kvc_ring_cqe){.result = result, .userdata = e->userdata, .index = slot};
	/* Release: the completion is written before the client sees the tail. */
	atomic_store_explicit(&sh->cq_tail, tail + 1, memory_order_release);
}

/* Take, check, run and complete one batch. Returns the entries taken. */
static uint32_t run_batch(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring,
                          struct batch *b)
{
	struct kvc_ring_shared *sh = ring->shared;
	uint32_t head = atomic_load_explicit(&sh->sq_head, memory_order_relaxed);
	uint32_t n = batch_size(svc, ring, head);
	if (n == 0)
		return 0;
	/* Copy the entries out first: the client may change the ring at any
	 * time, so only the copies are checked and used. */
	for (uint32_t i = 0; i < n; i++)
		b->sqe[i] = kvc_ring_sqes(sh)[(head + i) & ring->mask];
	atomic_store_explicit(&sh->sq_head, head + n, memory_order_release);

	struct kvc_usrbio_client *client = ring->client;
	pthread_mutex_lock(&client->lock);
	client->inflight++; /* the iov memory stays mapped until we are done */
	pthread_mutex_unlock(&client->lock);
	int count = 0;
	for (uint32_t i = 0; i < n; i++) {
		int rc = prepare_entry(svc->fs, ring, &b->sqe[i], &b->io[count], &b->ino[count]);
		b->result[i] = rc;
		b->runnable[i] = rc == 0 && b->io[count].length > 0 ? count++ : -1;
	}
	if (count > 0) {
		if (ring->for_read)
			kvc_storage_client_read_batch(&svc->fs->storage, b->io, count);
		else
			kvc_storage_client_write_batch(&svc->fs->storage, b->io, count);
	}
	for (uint32_t i = 0; i < n; i++) {
		int k = b->runnable[i];
		if (k < 0) /* refused (negative) or a read at/after the end (0) */
			continue;
		struct kvc_storage_io *io = &b->io[k];
		b->result[i] = io->result < 0 ? io->result : (int64_t)io->length;
		if (!ring->for_read && io->result == 0) {
			kvc_inode_table_wrote(svc->fs->inodes, b->ino[k], io->offset + io->length);
			/* The kernel's cached pages and size of this file are stale
			 * now: FUSE reads and stat must see what the ring wrote. */
			fuse_lowlevel_notify_inval_inode(svc->fs->session, b->ino[k],
			                                 (off_t)io->offset, (off_t)io->length);
		}
	}
	pthread_mutex_lock(&client->lock);
	if (--client->inflight == 0)
		pthread_cond_broadcast(&client->idle);
	pthread_mutex_unlock(&client->lock);
	for (uint32_t i = 0; i < n; i++)
		post(ring, (head + i) & ring->mask, &b->sqe[i], b->result[i]);
	syscall(SYS_futex, &sh->cq_tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	return n;
}

static void *worker_main(void *arg)
{
	struct kvc_ring_service *svc = arg;
	struct batch *b = malloc(sizeof(*b));
	if (!b)
		return NULL;
	for (;;) {
		pthread_mutex_lock(&svc->lock);
		while (!svc->head)
			pthread_cond_wait(&svc->work, &svc->lock);
		struct kvc_ring_server_ring *ring = svc->head;
		svc->head = ring->next;
		if (!svc->head)
			svc->tail = NULL;
		pthread_mutex_unlock(&svc->lock);

		while (!atomic_load(&ring->dead) && run_batch(svc, ring, b) > 0)
			;
		atomic_store(&ring->scheduled, false);
		/* An entry submitted while we were finishing: its doorbell saw
		 * the ring still scheduled, so look again ourselves. */
		struct kvc_ring_shared *sh = ring->shared;
		if (atomic_load_explicit(&sh->sq_tail, memory_order_acquire) !=
		    atomic_load_explicit(&sh->sq_head, memory_order_relaxed) &&
		    atomic_load(&ring->partial_since_ns) == 0)
			schedule(svc, ring);
		ring_put(ring);
	}
	return NULL;
}

/* Queue the rings whose io_depth wait has passed its timeout. Returns
 * true while some ring is still waiting (the dispatcher then ticks). */
static bool schedule_expired(struct kvc_ring_service *svc)
{
	bool waiting = false;
	int64_t now = now_ns();
	pthread_mutex_lock(&svc->all_lock);
	for (struct kvc_ring_server_ring *r = svc->all; r; r = r->all_next) {
		int64_t since = atomic_load(&r->partial_since_ns);
		if (!since)
			continue;
		waiting = true;
		if (r->timeout_ms > 0 && now - since >= (int64_t)r->timeout_ms * 1000000)
			schedule(svc, r);
	}
	pthread_mutex_unlock(&svc->all_lock);
	return waiting;
}

static void *dispatcher_main(void *arg)
{
	struct kvc_ring_service *svc = arg;
	struct epoll_event events[64];
	bool waiting = false;
	for (;;) {
		/* Sleep until a doorbell rings; tick every 5 ms only while a ring
		 * waits for its io_depth timeout. */
		int n = epoll_wait(svc->epoll_fd, events, 64, waiting ? 5 : -1);
		for (int i = 0; i < n; i++) {
			struct kvc_ring_server_ring *ring = events[i].data.ptr;
			uint64_t count;
			if (read(ring->doorbell, &count, sizeof(count)) < 0 && errno != EAGAIN)
				continue;
			schedule(svc, ring);
		}
		waiting = schedule_expired(svc);
	}
	return NULL;
}

int kvc_ring_service_start(struct kvc_fuse *fs, int workers, struct kvc_ring_service **out)
{
	struct kvc_ring_service *svc = calloc(1, sizeof(*svc));
	pthread_t thread;
	if (!svc)
		return -ENOMEM;
	svc->fs = fs;
	svc->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (svc->epoll_fd < 0) {
		free(svc);
		return -errno;
	}
	pthread_mutex_init(&svc->lock, NULL);
	pthread_mutex_init(&svc->all_lock, NULL);
	pthread_cond_init(&svc->work, NULL);
	int rc = pthread_create(&thread, NULL, dispatcher_main, svc);
	for (int i = 0; rc == 0 && i < workers; i++) {
		pthread_detach(thread);
		rc = pthread_create(&thread, NULL, worker_main, svc);
	}
	if (rc)
		return -rc; /* the process exits on this error: nothing to undo */
	pthread_detach(thread);
	*out = svc;
	return 0;
}

static int map_ring(struct kvc_ring_server_ring *ring, int memory_fd)
{
	struct stat st;
	if (fstat(memory_fd, &st) < 0)
		return -errno;
	ring->bytes = kvc_ring_bytes(ring->entries);
	if ((uint64_t)st.st_size < ring->bytes)
		return -EINVAL;
	ring->shared = mmap(NULL, ring->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memory_fd, 0);
	if (ring->shared == MAP_FAILED) {
		ring->shared = NULL;
		return -errno;
	}
	struct kvc_ring_shared *sh = ring->shared;
	if (sh->magic != KVC_RING_MAGIC || sh->layout != KVC_RING_LAYOUT ||
	    sh->entries != ring->entries)
		return -EINVAL;
	/* A new ring starts empty whatever the client left in it. */
	atomic_store(&sh->sq_head, atomic_load(&sh->sq_tail));
	atomic_store(&sh->cq_tail, atomic_load(&sh->cq_head));
	return 0;
}

int kvc_ring_service_add(struct kvc_ring_service *svc, struct kvc_usrbio_client *client,
                         const struct kvc_msg_ring_register *p, int memory_fd,
                         int doorbell_fd, struct kvc_ring_server_ring **out)
{
	uint32_t e = p->entries;
	if (e == 0 || e > KVC_RING_MAX_ENTRIES || (e & (e - 1)) || p->timeout_ms < 0 ||
	    p->io_depth > (int32_t)e || p->io_depth < -(int32_t)e)
		return -EINVAL;
	struct kvc_ring_server_ring *ring = calloc(1, sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	*ring = (struct kvc_ring_server_ring){.client = client, .entries = e, .mask = e - 1,
	                                      .for_read = p->for_read != 0,
	                                      .io_depth = p->io_depth, .timeout_ms = p->timeout_ms,
	                                      .flags = p->flags, .doorbell = doorbell_fd};
	atomic_init(&ring->refs, 1);
	int rc = map_ring(ring, memory_fd);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ring};
	if (rc == 0 && epoll_ctl(svc->epoll_fd, EPOLL_CTL_ADD, doorbell_fd, &ev) < 0)
		rc = -errno;
	if (rc < 0) {
		if (ring->shared)
			munmap(ring->shared, ring->bytes);
		free(ring);
		return rc;
	}
	close(memory_fd);
	pthread_mutex_lock(&svc->all_lock);
	ring->all_next = svc->all;
	if (svc->all)
		svc->all->all_prev = ring;
	svc->all = ring;
	pthread_mutex_unlock(&svc->all_lock);
	*out = ring;
	return 0;
}

void kvc_ring_service_remove(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	atomic_store(&ring->dead, true);
	epoll_ctl(svc->epoll_fd, EPOLL_CTL_DEL, ring->doorbell, NULL);
	pthread_mutex_lock(&svc->all_lock);
	if (ring->all_prev)
		ring->all_prev->all_next = ring->all_next;
	else
		svc->all = ring->all_next;
	if (ring->all_next)
		ring->all_next->all_prev = ring->all_prev;
	pthread_mutex_unlock(&svc->all_lock);
	ring_put(ring);
}
