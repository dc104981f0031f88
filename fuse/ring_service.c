/* ring_service: see ring_service.h; ring layout and ordering: src/core/ring.h.
 *
 * Wake-ups: kvc-fuse's end of every ring's doorbell is in one epoll set
 * with EPOLLONESHOT, and the worker threads wait in epoll themselves, so a
 * doorbell wakes exactly one worker directly. The worker drains the
 * doorbell (a bounded amount: a client that floods it wakes workers
 * again, it cannot keep one), runs batches until the ring has none ready,
 * then re-arms it: a doorbell rung after the drain makes the re-armed fd
 * fire again, so no submission is missed. The epoll data is (slot,
 * generation) in the ring table, never a pointer: an event that arrives
 * for a ring removed meanwhile finds another generation and is dropped.
 *
 * Batches of one ring overlap (layout 2 rings; a layout-1 client, which
 * indexes completions by slot, gets one batch at a time, in order): a
 * worker that took a batch re-arms the
 * doorbell before it runs it (while fewer than svc->parallel batches of
 * that ring run), so entries submitted meanwhile go to another worker
 * instead of waiting for the batch to end (a client that keeps its depth
 * by resubmitting as entries complete would otherwise run in lock-step).
 * Taking is serialized by the ring's take_lock; the completion queue's
 * room is reserved when entries are taken (`reserved`), so overlapping
 * batches never post more completions than the queue holds. Completions
 * may come in any order (3FS's rings promise none). Only the worker that
 * finds no other batch of the ring running lingers for the next
 * submission.
 */
#include "fuse/ring_service.h"
#include "fuse/ring_internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fuse/fuse_metrics.h"
#include "fuse/ring_keys.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/ring.h"

#define MAX_RINGS 65536
/* After a batch, a worker watches its ring this long for the next
 * submission before going back to sleep in epoll: a client at depth 1
 * submits again within microseconds, and catching that saves a wake-up.
 * An idle ring costs nothing: the spin only follows real work. */
#define LINGER_NS 20000
/* Batches of one ring running at once, at most: half the CPUs, between
 * 4 and the workers (kvc_ring_service_start sets svc->parallel; 8 on the
 * 16-core GPU host, where 4 left device-iov loads at 0.41x of pinned
 * host-to-device bandwidth and 8 gave 0.72x). */
#define MIN_PARALLEL 4
/* A batch takes entries up to this many bytes of reads or writes (at
 * least one entry): what is left goes to the next worker, so a deep queue
 * of large entries runs as several batches at once and the first ones
 * complete without waiting for the last (docs/benchmarks.md "Batches of
 * one ring at once": 32 MiB batches ran lock-step again). */
#define BATCH_BYTES (8ull << 20)
/* And at most this many key puts, and other key operations: a client's
 * batch of 64 keys runs as several batches at once, each with its own
 * round trips to kvc-meta and prepared by its own worker
 * (docs/benchmarks.md "Key batches taken in parts": on the H100 host puts
 * of 64 KiB at depth 4 went from 43-46k to 60-67k keys/s in parts of 16,
 * gets gained most in parts of 32). */
#define BATCH_PUTS 16
#define BATCH_KEYS 32


struct kvc_ring_service {
	struct kvc_fuse *fs;
	int epoll_fd;
	pthread_mutex_t table_lock; /* table, generations, high */
	struct kvc_ring_server_ring *table[MAX_RINGS];
	uint32_t generations[MAX_RINGS];
	uint32_t high; /* slots in use are below this */
	pthread_mutex_t timer_lock;
	pthread_cond_t timer_wake;
	int partial; /* rings waiting on an io_depth timeout */
	int parallel; /* batches of one ring at once, at most */
};

static void ring_put(struct kvc_ring_server_ring *ring)
{
	if (atomic_fetch_sub(&ring->refs, 1) != 1)
		return;
	munmap(ring->shared, ring->bytes);
	close(ring->bell);
	close(ring->poke);
	kvc_usrbio_client_put(ring->client);
	pthread_mutex_destroy(&ring->post_lock);
	pthread_mutex_destroy(&ring->take_lock);
	free(ring);
}

static uint64_t event_key(const struct kvc_ring_server_ring *ring)
{
	return (uint64_t)ring->generation << 32 | ring->slot;
}

/* The live ring an event names, with a reference; NULL when stale. */
static struct kvc_ring_server_ring *ring_from_event(struct kvc_ring_service *svc, uint64_t key)
{
	uint32_t slot = (uint32_t)key, generation = (uint32_t)(key >> 32);
	struct kvc_ring_server_ring *ring = NULL;
	pthread_mutex_lock(&svc->table_lock);
	if (slot < MAX_RINGS && svc->table[slot] && svc->generations[slot] == generation) {
		ring = svc->table[slot];
		atomic_fetch_add(&ring->refs, 1);
	}
	pthread_mutex_unlock(&svc->table_lock);
	return ring;
}

static void set_partial(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring,
                        int64_t since)
{
	int64_t before = atomic_exchange(&ring->partial_since_ns, since);
	if ((before != 0) == (since != 0))
		return;
	pthread_mutex_lock(&svc->timer_lock);
	svc->partial += since ? 1 : -1;
	pthread_cond_signal(&svc->timer_wake);
	pthread_mutex_unlock(&svc->timer_lock);
}

/* Run the ring no more (until it is removed): no batch starts, the timer
 * forgets it, its doorbell is not re-armed. */
static void stop(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	atomic_store(&ring->dead, true);
	set_partial(svc, ring, 0);
}

/* How many entries to take now (0: none yet), by the io_depth rules and
 * the room left in the completion queue (less what batches running owe).
 * The ring's take_lock is held. */
static uint32_t batch_size(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring,
                           uint32_t head)
{
	struct kvc_ring_shared *sh = ring->shared;
	if (atomic_load(&ring->dead))
		return 0;
	uint32_t tail = atomic_load_explicit(&sh->sq_tail, memory_order_acquire);
	uint32_t pending = tail - head;
	/* The client's head before our tail: completions are posted by other
	 * threads meanwhile (entry_landed, other batches), and a tail read
	 * first could be passed by a head the client moved over newer ones,
	 * which would look like corrupt indices. Read this way, cq_used is at
	 * worst too high (less taken now), never wrapped. */
	uint32_t cq_head = atomic_load_explicit(&sh->cq_head, memory_order_acquire);
	uint32_t cq_used = atomic_load_explicit(&sh->cq_tail, memory_order_acquire) - cq_head;
	if (pending > ring->entries || cq_used > ring->entries) {
		kvc_log_warn("usrbio: ring of pid %d has corrupt indices; stopping it",
		             (int)ring->client->pid);
		stop(svc, ring);
		return 0;
	}
	uint32_t room = ring->entries - cq_used;
	room = room > ring->reserved ? room - ring->reserved : 0;
	uint32_t n = pending < room ? pending : room;
	if (ring->io_depth > 0 && n < (uint32_t)ring->io_depth) {
		if (n == 0)
			return 0;
		int64_t now = kvc_clock_monotonic_ns(), since = atomic_load(&ring->partial_since_ns);
		if (since == 0)
			set_partial(svc, ring, since = now);
		if (ring->timeout_ms == 0 || now - since < (int64_t)ring->timeout_ms * 1000000)
			return 0; /* wait for io_depth entries, or the timeout */
	} else if (ring->io_depth > 0) {
		n = (uint32_t)ring->io_depth;
	} else if (ring->io_depth < 0 && n > (uint32_t)-ring->io_depth) {
		n = (uint32_t)-ring->io_depth;
	}
	set_partial(svc, ring, 0);
	return n < MAX_BATCH ? n : MAX_BATCH;
}

static void post(struct kvc_ring_server_ring *ring, uint32_t slot, const struct kvc_ring_sqe *e,
                 int64_t result)
{
	struct kvc_ring_shared *sh = ring->shared;
	uint32_t tail = atomic_load_explicit(&sh->cq_tail, memory_order_relaxed);
	kvc_ring_cqes(sh, ring->entries)[tail & ring->mask] =
		(struct kvc_ring_cqe){.result = result, .userdata = e->userdata,
		                      .index = kvc_ring_cqe_index(e, slot)};
	/* Release: the completion is written before the client sees the tail. */
	atomic_store_explicit(&sh->cq_tail, tail + 1, memory_order_release);
}

/* n completions' room, reserved when their entries were taken, is the
 * queue's again (posted, or parked: those find room later). */
static void give_back(struct kvc_ring_server_ring *ring, uint32_t n)
{
	pthread_mutex_lock(&ring->take_lock);
	ring->reserved -= n;
	pthread_mutex_unlock(&ring->take_lock);
}

/* `posted` completions were posted: the client's futex on cq_tail wakes. */
static void wake(struct kvc_ring_server_ring *ring, uint32_t posted)
{
	kvc_fuse_metrics_ring_completed(posted);
	syscall(SYS_futex, &ring->shared->cq_tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void kvc_ring_service_landed(struct kvc_ring_server_ring *ring, uint32_t slot,
                             const struct kvc_ring_sqe *e, int64_t result)
{
	pthread_mutex_lock(&ring->post_lock);
	post(ring, slot, e, result);
	pthread_mutex_unlock(&ring->post_lock);
	give_back(ring, 1);
	wake(ring, 1);
}

/* Let another worker take the ring's next submissions while this one
 * runs its batch (the doorbell's event is one-shot). */
static void rearm(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	struct epoll_event again = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = event_key(ring)};
	epoll_ctl(svc->epoll_fd, EPOLL_CTL_MOD, ring->bell, &again);
}

/* Take, check, run and complete one batch; `overlap`: a worker's batch,
 * which lets another worker take the next entries meanwhile. Returns the
 * entries taken. */
static uint32_t run_batch(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring,
                          struct kvc_ring_batch *b, bool overlap)
{
	struct kvc_ring_shared *sh = ring->shared;
	struct kvc_usrbio_client *client = ring->client;
	/* In flight before anything else: from here on, the client's cleanup
	 * waits for this batch before it unmaps what the entries name. */
	if (!kvc_usrbio_client_enter(client)) {
		stop(svc, ring); /* the client is gone */
		return 0;
	}
	pthread_mutex_lock(&ring->take_lock);
	uint32_t head = atomic_load_explicit(&sh->sq_head, memory_order_relaxed);
	/* At most `limit` batches of the ring at once: a worker finding them
	 * all running takes nothing (one of them takes the rest when done). */
	int limit = ring->ordered || !overlap ? 1 : svc->parallel;
	int others = atomic_load(&ring->running);
	uint32_t n = others < limit ? batch_size(svc, ring, head) : 0;
	/* Copy the entries out first: the client may change the ring at any
	 * time, so only the copies are checked and used. */
	bool capped = ring->io_depth <= 0;
	uint64_t bytes = 0, cap = capped ? BATCH_BYTES : UINT64_MAX;
	uint32_t puts = 0, keys = 0;
	bool more = false;
	for (uint32_t i = 0; i < n; i++) {
		b->sqe[i] = kvc_ring_sqes(sh)[(head + i) & ring->mask];
		uint32_t op = b->sqe[i].op;
		if (op == KVC_RING_READ || op == KVC_RING_WRITE)
			bytes += b->sqe[i].length < cap ? b->sqe[i].length : cap;
		puts += op == KVC_RING_KEY_PUT;
		keys += op != KVC_RING_KEY_PUT && kvc_ring_keys_is_key_op(op);
		if (i > 0 && (bytes > cap || (capped && (puts > BATCH_PUTS || keys > BATCH_KEYS)))) {
			more = true; /* the rest: the next batch */
			n = i;
			break;
		}
	}
	atomic_store_explicit(&sh->sq_head, head + n, memory_order_release);
	ring->reserved += n;
	if (n > 0)
		atomic_fetch_add(&ring->running, 1);
	pthread_mutex_unlock(&ring->take_lock);
	if (more) { /* wake a worker for the rest (the doorbell is re-armed below) */
		uint64_t one = 1;
		send(ring->poke, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	if (n == 0) {
		kvc_usrbio_client_leave(client);
		return 0;
	}
	kvc_fuse_metrics_ring_taken(ring->for_read, n);
	if (others > 0)
		kvc_fuse_metrics_ring_overlapped();
	if (others + 1 < limit && !atomic_load(&ring->dead))
		rearm(svc, ring);

	kvc_ring_batch_execute(svc->fs, ring, b, head, n);
	kvc_usrbio_client_leave(client);
	uint32_t posted = 0, landed = 0;
	pthread_mutex_lock(&ring->post_lock);
	for (uint32_t i = 0; i < n; i++) {
		if (b->posted[i]) /* by entry_landed, room and all */
			landed++;
		else if (b->result[i] != KVC_RING_KEYS_PARKED) { /* a wait: completed later */
			post(ring, (head + i) & ring->mask, &b->sqe[i], b->result[i]);
			posted++;
		}
	}
	pthread_mutex_unlock(&ring->post_lock);
	give_back(ring, n - landed); /* the landed ones gave theirs back */
	atomic_fetch_sub(&ring->running, 1);
	wake(ring, posted);
	return n;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* Watch the ring briefly for a new submission; true when one came. */
static bool linger(struct kvc_ring_server_ring *ring)
{
	struct kvc_ring_shared *sh = ring->shared;
	uint32_t head = atomic_load_explicit(&sh->sq_head, memory_order_relaxed);
	if (atomic_load(&ring->partial_since_ns))
		return false; /* waiting for io_depth entries: the timer handles it */
	int64_t until = kvc_clock_monotonic_ns() + LINGER_NS;
	atomic_store(&sh->need_wakeup, 0); /* watching: no doorbell needed */
	do {
		if (atomic_load_explicit(&sh->sq_tail, memory_order_acquire) != head)
			goto seen;
		cpu_relax();
	} while (kvc_clock_monotonic_ns() < until);
	/* Stop watching, then look once more (see src/core/ring.h): a submission
	 * made before the client could see need_wakeup is caught here. */
	atomic_store(&sh->need_wakeup, 1);
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(&sh->sq_tail, memory_order_acquire) != head;
seen:
	atomic_store(&sh->need_wakeup, 1);
	return true;
}

/* Take what the client wrote to its doorbell, at most DRAIN bytes (a
 * flood wakes a worker again, it cannot keep one). kvc-fuse's end is its
 * own, and MSG_DONTWAIT never waits whatever the client did. Returns 0,
 * or -EPIPE when the client shut its end down (nothing more will come). */
#define DRAIN 16384
static int drain(struct kvc_ring_server_ring *ring)
{
	char sink[512];
	for (size_t taken = 0; taken < DRAIN;) {
		ssize_t n = recv(ring->bell, sink, sizeof(sink), MSG_DONTWAIT);
		if (n == 0)
			return -EPIPE;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		taken += (size_t)n;
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct kvc_ring_service *svc = arg;
	struct kvc_ring_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	for (;;) {
		struct epoll_event ev;
		if (epoll_wait(svc->epoll_fd, &ev, 1, -1) != 1)
			continue;
		struct kvc_ring_server_ring *ring = ring_from_event(svc, ev.data.u64);
		if (!ring)
			continue; /* removed meanwhile */
		if (drain(ring) < 0)
			stop(svc, ring); /* the client shut its doorbell down */
		while (!atomic_load(&ring->dead)) {
			if (run_batch(svc, ring, b, true) > 0)
				continue;
			/* Another batch of the ring running: its worker lingers. */
			if (atomic_load(&ring->running) > 0 || !linger(ring))
				break;
		}
		if (!atomic_load(&ring->dead))
			rearm(svc, ring);
		ring_put(ring);
	}
	return NULL;
}

/* Ring the doorbell of every ring whose io_depth wait passed its timeout:
 * found under the table lock (with a reference), rung after it. */
#define POKES 256
static void poke_expired(struct kvc_ring_service *svc)
{
	struct kvc_ring_server_ring *due[POKES];
	int count = 0;
	int64_t now = kvc_clock_monotonic_ns();
	pthread_mutex_lock(&svc->table_lock);
	for (uint32_t i = 0; i < svc->high && count < POKES; i++) {
		struct kvc_ring_server_ring *r = svc->table[i];
		int64_t since = r ? atomic_load(&r->partial_since_ns) : 0;
		if (since && r->timeout_ms > 0 && now - since >= (int64_t)r->timeout_ms * 1000000 &&
		    !atomic_load(&r->dead)) {
			atomic_fetch_add(&r->refs, 1);
			due[count++] = r;
		}
	}
	pthread_mutex_unlock(&svc->table_lock);
	for (int i = 0; i < count; i++) {
		uint64_t one = 1;
		/* Full (EAGAIN): it is rung already. Shut down: it is stopped. */
		send(due[i]->poke, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL);
		ring_put(due[i]);
	}
}

/* Sleeps unless some ring waits on an io_depth timeout; then ticks. */
static void *timer_main(void *arg)
{
	struct kvc_ring_service *svc = arg;
	for (;;) {
		pthread_mutex_lock(&svc->timer_lock);
		while (svc->partial == 0)
			pthread_cond_wait(&svc->timer_wake, &svc->timer_lock);
		pthread_mutex_unlock(&svc->timer_lock);
		usleep(2000);
		poke_expired(svc);
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
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	svc->parallel = cpus / 2 > MIN_PARALLEL ? (int)(cpus / 2) : MIN_PARALLEL;
	if (workers > 0 && svc->parallel > workers)
		svc->parallel = workers;
	svc->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (svc->epoll_fd < 0) {
		free(svc);
		return -errno;
	}
	pthread_mutex_init(&svc->table_lock, NULL);
	pthread_mutex_init(&svc->timer_lock, NULL);
	pthread_cond_init(&svc->timer_wake, NULL);
	int rc = 0;
	for (int i = 0; rc == 0 && i <= workers && workers > 0; i++) {
		rc = pthread_create(&thread, NULL, i == 0 ? timer_main : worker_main, svc);
		if (rc == 0)
			pthread_detach(thread);
	}
	if (rc)
		return -rc; /* the process exits on this error: nothing to undo */
	if (workers > 0) /* the daemon's service (tests run theirs by hand) */
		kvc_fuse_metrics_rings(svc);
	*out = svc;
	return 0;
}

/* Map the ring's memory (sealed: see usrbio_service.h) and check its header. */
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
	ring->ordered = sh->layout == KVC_RING_LAYOUT_ORDERED;
	if (sh->magic != KVC_RING_MAGIC ||
	    (sh->layout != KVC_RING_LAYOUT && sh->layout != KVC_RING_LAYOUT_ORDERED) ||
	    sh->entries != ring->entries)
		return -EINVAL;
	/* A new ring starts empty whatever the client left in it. */
	atomic_store(&sh->need_wakeup, 1);
	atomic_store(&sh->sq_head, atomic_load(&sh->sq_tail));
	atomic_store(&sh->cq_tail, atomic_load(&sh->cq_head));
	return 0;
}

/* Give the ring a slot of the table; -EMFILE when all are taken. */
static int table_insert(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	int rc = -EMFILE;
	pthread_mutex_lock(&svc->table_lock);
	for (uint32_t i = 0; i < MAX_RINGS; i++) {
		if (!svc->table[i]) {
			svc->table[i] = ring;
			ring->slot = i;
			ring->generation = ++svc->generations[i];
			if (i >= svc->high)
				svc->high = i + 1;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&svc->table_lock);
	return rc;
}

/* The ring's doorbell: a socket pair, ends kept in bell and poke. */
static int make_doorbell(struct kvc_ring_server_ring *ring)
{
	int ends[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ends) < 0)
		return -errno;
	ring->bell = ends[0];
	ring->poke = ends[1];
	return 0;
}

int kvc_ring_service_add(struct kvc_ring_service *svc, struct kvc_usrbio_client *client,
                         const struct kvc_msg_ring_register *p, int memory_fd,
                         struct kvc_ring_server_ring **out, int *doorbell)
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
	                                      .flags = p->flags, .bell = -1, .poke = -1};
	atomic_init(&ring->refs, 1); /* the table's */
	pthread_mutex_init(&ring->post_lock, NULL);
	pthread_mutex_init(&ring->take_lock, NULL);
	int rc = map_ring(ring, memory_fd);
	if (rc == 0)
		rc = make_doorbell(ring);
	if (rc == 0)
		rc = table_insert(svc, ring);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = event_key(ring)};
	if (rc == 0 && epoll_ctl(svc->epoll_fd, EPOLL_CTL_ADD, ring->bell, &ev) < 0) {
		rc = -errno;
		pthread_mutex_lock(&svc->table_lock);
		svc->table[ring->slot] = NULL;
		pthread_mutex_unlock(&svc->table_lock);
	}
	if (rc < 0) {
		if (ring->shared)
			munmap(ring->shared, ring->bytes);
		if (ring->bell >= 0)
			close(ring->bell), close(ring->poke);
		pthread_mutex_destroy(&ring->post_lock);
		pthread_mutex_destroy(&ring->take_lock);
		free(ring);
		return rc;
	}
	kvc_usrbio_client_get(client); /* dropped with the ring's last reference */
	*out = ring;
	*doorbell = ring->poke;
	return 0;
}

void kvc_ring_service_remove(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	atomic_store(&ring->dead, true);
	pthread_mutex_lock(&svc->table_lock);
	svc->table[ring->slot] = NULL;
	pthread_mutex_unlock(&svc->table_lock);
	epoll_ctl(svc->epoll_fd, EPOLL_CTL_DEL, ring->bell, NULL);
	set_partial(svc, ring, 0);
	ring_put(ring);
}

int kvc_ring_service_run(struct kvc_ring_service *svc, struct kvc_ring_server_ring *ring)
{
	struct kvc_ring_batch *b = calloc(1, sizeof(*b));
	int taken = 0;
	if (!b)
		return -ENOMEM;
	for (uint32_t n = 1; n > 0 && !atomic_load(&ring->dead); taken += (int)n)
		n = run_batch(svc, ring, b, false);
	kvc_ring_keys_scratch_free(b->keys);
	free(b);
	return taken;
}

void kvc_ring_service_hold(struct kvc_ring_server_ring *ring)
{
	atomic_fetch_add(&ring->refs, 1);
}

void kvc_ring_service_release(struct kvc_ring_server_ring *ring)
{
	ring_put(ring);
}

bool kvc_ring_service_dead(struct kvc_ring_server_ring *ring)
{
	return atomic_load(&ring->dead);
}

int kvc_ring_service_park(struct kvc_ring_server_ring *ring, int delta)
{
	int now = atomic_load(&ring->parked);
	do {
		if (delta > 0 && now >= (int)ring->entries)
			return -EAGAIN;
	} while (!atomic_compare_exchange_weak(&ring->parked, &now, now + delta));
	return 0;
}

int kvc_ring_service_complete(struct kvc_ring_server_ring *ring, uint32_t slot,
                              uint64_t userdata, int64_t result)
{
	struct kvc_ring_shared *sh = ring->shared;
	int rc = 0;
	pthread_mutex_lock(&ring->post_lock);
	uint32_t used = atomic_load_explicit(&sh->cq_tail, memory_order_relaxed) -
	                atomic_load_explicit(&sh->cq_head, memory_order_acquire);
	if (atomic_load(&ring->dead))
		rc = -ESHUTDOWN;
	else if (used >= ring->entries)
		rc = -EAGAIN; /* a client past its entries: try again later */
	else
		post(ring, slot, &(struct kvc_ring_sqe){.userdata = userdata}, result);
	pthread_mutex_unlock(&ring->post_lock);
	if (rc == 0)
		wake(ring, 1);
	return rc;
}

uint64_t kvc_ring_service_depth(struct kvc_ring_service *svc)
{
	uint64_t depth = 0;
	pthread_mutex_lock(&svc->table_lock);
	for (uint32_t i = 0; i < svc->high; i++) {
		/* In the table: the table's reference keeps it mapped. The
		 * indices are the client's to write: clamp to the ring's size. */
		struct kvc_ring_server_ring *ring = svc->table[i];
		if (!ring)
			continue;
		uint32_t pending =
			atomic_load_explicit(&ring->shared->sq_tail, memory_order_relaxed) -
			atomic_load_explicit(&ring->shared->sq_head, memory_order_relaxed);
		depth += pending < ring->entries ? pending : ring->entries;
	}
	pthread_mutex_unlock(&svc->table_lock);
	return depth;
}
