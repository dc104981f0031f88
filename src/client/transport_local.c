/* transport_local: same-host reads without a message (transport_local.h). */
#include "client/transport_local.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client/storage_client_internal.h"
#include "client/transport.h"
#include "core/chunk_format.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/fsutil.h"
#include "core/config.h"
#include "core/log.h"
#include "core/mem_guard.h"
#include "core/metrics.h"

/* After a target could not be set up (or its server went), ask again
 * after this long. */
#define RETRY_NS (1000ll * 1000 * 1000)
#define CHANGES_BYTES (KVC_CHUNK_LOCK_SLOTS * sizeof(uint64_t))
/* The index's address space, as its server maps it (chunk_store.c). */
#define MAP_SIZE (1ull << 40)

/* A target's state: not asked yet; read here; not now (asked again at
 * retry_at_ns); never (its server does not offer it: replicas, managers,
 * an older server, another build's counters). */
enum { UNKNOWN, ON, OFF, NEVER };

struct local_target {
	pthread_rwlock_t use; /* read: a local read; write: set-up and tear-down (all below) */
	_Atomic int state;
	_Atomic int64_t retry_at_ns;
	uint64_t generation; /* set-ups so far: a drop names the one it found gone */
	int dir_fd;
	int pid_fd; /* the serving process (its socket's peer): readable once it exited */
	const _Atomic uint64_t *changes;
	MDB_env *env;
	MDB_dbi dbi;
};

struct kvc_local_client {
	struct local_target targets[KVC_WIRE_MAX_TARGETS];
	_Atomic uint64_t reads, bytes, misses;
};

int kvc_transport_local_init(struct kvc_storage_client *client, const struct kvc_config *config)
{
	client->local = NULL;
	if (!config->local_reads || config->transport_tcp_only)
		return 0;
	struct kvc_local_client *l = calloc(1, sizeof(*l));
	if (!l || kvc_mem_guard_init() < 0) {
		free(l);
		return -ENOMEM;
	}
	for (int i = 0; i < KVC_WIRE_MAX_TARGETS; i++) {
		pthread_rwlock_init(&l->targets[i].use, NULL);
		l->targets[i].dir_fd = l->targets[i].pid_fd = -1;
	}
	client->local = l;
	return 0;
}

/* Give a target's handles back (use held for writing). */
static void drop(struct local_target *t, int state)
{
	if (t->env)
		mdb_env_close(t->env);
	if (t->changes)
		munmap((void *)t->changes, CHANGES_BYTES);
	if (t->dir_fd >= 0)
		close(t->dir_fd);
	if (t->pid_fd >= 0)
		close(t->pid_fd);
	t->env = NULL;
	t->changes = NULL;
	t->dir_fd = t->pid_fd = -1;
	atomic_store(&t->retry_at_ns, state == NEVER ? INT64_MAX : kvc_clock_monotonic_ns() + RETRY_NS);
	atomic_store(&t->state, state);
}

void kvc_transport_local_destroy(struct kvc_storage_client *client)
{
	struct kvc_local_client *l = client->local;
	if (!l)
		return;
	for (int i = 0; i < KVC_WIRE_MAX_TARGETS; i++) {
		drop(&l->targets[i], OFF);
		pthread_rwlock_destroy(&l->targets[i].use);
	}
	free(l);
	client->local = NULL;
}

/* PLACE_LOCAL for target on an authenticated placement connection:
 * fds[0] the directory, fds[1] the change counters, fds[2] a pidfd of the
 * server process (opened while the connection shows the process alive:
 * the pid cannot have gone to another meanwhile). Returns 0 or -errno
 * (the server's, or the transport's). */
static int ask(int fd, uint32_t target, int fds[3])
{
	struct kvc_msg_place_local m = {.target = target};
	struct kvc_msg_place_local_reply out;
	struct kvc_wire_header h;
	int got[KVC_WIRE_MAX_FDS], count = 0;
	kvc_wire_header_init(&h, KVC_MSG_PLACE_LOCAL, 1, 0, sizeof(m), 0);
	int rc = kvc_wire_send(fd, &h, &m, NULL, 0);
	if (rc == 0)
		rc = kvc_wire_recv_header_fds(fd, &h, got, &count);
	if (rc == 0 && (h.type != KVC_MSG_PLACE_LOCAL || h.request_id != 1 || h.data_len))
		rc = -EBADMSG;
	if (rc == 0 && h.status < 0)
		rc = h.status;
	if (rc == 0 && (h.body_len != sizeof(out) || count != 2))
		rc = -EBADMSG;
	if (rc == 0)
		rc = kvc_wire_recv_exact(fd, &out, sizeof(out));
	if (rc == 0 && out.slots != KVC_CHUNK_LOCK_SLOTS)
		rc = -EPROTO; /* another build's counters: not ours to read */
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid <= 0))
		rc = -EPROTO;
	int pid_fd = rc == 0 ? (int)syscall(SYS_pidfd_open, cred.pid, 0) : -1;
	if (rc == 0 && pid_fd < 0)
		rc = errno == ENOSYS ? -EOPNOTSUPP : -errno; /* Linux 5.3 */
	struct pollfd up = {.fd = fd, .events = POLLIN | POLLRDHUP};
	if (rc == 0 && poll(&up, 1, 0) != 0)
		rc = -ECONNRESET; /* the server went (or spoke unasked) */
	if (rc == 0) {
		fds[0] = got[0];
		fds[1] = got[1];
		fds[2] = pid_fd;
		return 0;
	}
	if (pid_fd >= 0)
		close(pid_fd);
	for (int i = 0; i < count; i++)
		close(got[i]);
	return rc;
}

/* Read-only, the server's mapping size; the environment's databases
 * opened. 0 or -errno. */
static int open_index(struct local_target *t)
{
	char index[64];
	snprintf(index, sizeof(index), "/proc/self/fd/%d/index", t->dir_fd);
	MDB_txn *txn = NULL;
	int rc = mdb_env_create(&t->env);
	if (rc == 0)
		rc = mdb_env_set_mapsize(t->env, MAP_SIZE);
	if (rc == 0)
		rc = mdb_env_set_maxreaders(t->env, 4096);
	/* MDB_NOTLS: a read takes a reader slot for itself and gives it back
	 * (as the server's own reads do). With thread-local slots a thread
	 * exiting after a drop (mdb_env_close) would free its slot in a
	 * lock file no longer mapped; and a frozen kvc-fuse would pin index
	 * pages with every thread that ever read. */
	if (rc == 0)
		rc = mdb_env_open(t->env, index, MDB_RDONLY | MDB_NORDAHEAD | MDB_NOTLS, 0600);
	if (rc == 0)
		rc = mdb_txn_begin(t->env, NULL, MDB_RDONLY, &txn);
	if (rc == 0)
		rc = mdb_dbi_open(txn, NULL, 0, &t->dbi);
	if (txn)
		mdb_txn_abort(txn);
	return rc == 0 ? 0 : rc > 0 ? -rc : -EIO;
}

/* Set target up (use held for writing): ask its server (on a pooled
 * connection; once more on a fresh one when a reused one had gone
 * stale), open its index read-only, map its counters. Returns 0 or
 * -errno. */
static int set_up(struct kvc_storage_client *client, uint32_t server, uint32_t target,
                  struct local_target *t)
{
	int fds[3] = {-1, -1, -1}, rc = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused = false;
		int fd = kvc_transport_place_connection(client, server, &reused);
		if (fd < 0)
			return fd;
		rc = ask(fd, target, fds);
		/* The server's own answers leave the connection in frame. */
		bool healthy = rc == 0 || rc == -EOPNOTSUPP || rc == -ENXIO;
		kvc_transport_place_connection_done(client, server, fd, healthy);
		if (healthy || !reused)
			break; /* else a stale pooled connection: once more, a fresh one */
	}
	if (rc < 0)
		return rc;
	t->dir_fd = fds[0];
	t->pid_fd = fds[2];
	void *map = mmap(NULL, CHANGES_BYTES, PROT_READ, MAP_SHARED, fds[1], 0);
	close(fds[1]);
	if (map == MAP_FAILED)
		return -EPROTO;
	t->changes = map;
	rc = open_index(t);
	/* The server offered the target and this process cannot read it
	 * (no access to index/lock.mdb, another LMDB build): not a passing
	 * state, asked again never. */
	return rc < 0 ? -EPROTO : 0;
}

/* Make target ON, or leave it OFF for a while (NEVER when its server
 * does not offer it). Another thread setting it up meanwhile: false (the
 * usual way), never a wait. Returns whether it is ON. */
static bool ensure(struct kvc_storage_client *client, uint32_t server, uint32_t target,
                   struct local_target *t)
{
	int state = atomic_load(&t->state);
	if (state == NEVER ||
	    (state == OFF && kvc_clock_monotonic_ns() < atomic_load(&t->retry_at_ns)))
		return false;
	if (pthread_rwlock_trywrlock(&t->use) != 0)
		return false;
	state = atomic_load(&t->state);
	if (state == UNKNOWN ||
	    (state == OFF && kvc_clock_monotonic_ns() >= atomic_load(&t->retry_at_ns))) {
		int rc = set_up(client, server, target, t);
		if (rc == 0) {
			t->generation++;
			atomic_store(&t->state, ON);
			kvc_log_info("target %u of storage server %s: chunks read here, without "
			             "a request", target, client->server_address[server]);
		} else if (rc == -EOPNOTSUPP || rc == -ENXIO || rc == -EPROTO || rc == -EACCES) {
			drop(t, NEVER);
			kvc_log_info("target %u of storage server %s: chunks read through the "
			             "server (%s)", target, client->server_address[server],
			             strerror(-rc));
		} else {
			drop(t, OFF);
		}
	}
	bool on = atomic_load(&t->state) == ON;
	pthread_rwlock_unlock(&t->use);
	return on;
}

/* [at, at + length) of the chunk file into dst (memory of ours or a
 * caller's) from the page cache only (RWF_NOWAIT: kvc-fuse never waits
 * on a disk; what is not cached is the server's to read, with its
 * io_uring or O_DIRECT). Returns 0 or -errno (-EAGAIN: not all cached,
 * or the file ends early; -EFAULT: dst gone). */
static int pread_cached(int fd, uint8_t *dst, uint32_t length, uint32_t at)
{
	uint32_t done = 0;
	while (done < length) {
		struct iovec v = {dst + done, length - done};
		ssize_t n = preadv2(fd, &v, 1, (off_t)at + done, RWF_NOWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EOPNOTSUPP ? -EAGAIN : -errno;
		if (n == 0)
			return -EAGAIN; /* a file shorter than its record: the server's to judge */
		done += (uint32_t)n;
	}
	return 0;
}

/* Whether the page cache holds [at, at + length) of fd: 0 yes, -EAGAIN
 * no. Asked first because a RWF_NOWAIT read of pages not cached starts
 * the kernel's readahead before it gives up, which would read the data
 * from the disk twice (once more by the server) and cache it behind an
 * O_DIRECT server's back. A kernel without cachestat (before 6.5): 0, and
 * RWF_NOWAIT alone decides, as in the server. */
static int cached(int fd, uint64_t at, uint64_t length)
{
	static atomic_bool no_cachestat;
	if (atomic_load_explicit(&no_cachestat, memory_order_relaxed))
		return 0;
	int rc = kvc_fsutil_cached(fd, at, length);
	if (rc < 0) /* ENOSYS, or a sandbox's EPERM: not asked again */
		atomic_store_explicit(&no_cachestat, true, memory_order_relaxed);
	return rc == 0 ? -EAGAIN : 0;
}

/* Bytes [from, to) of a file-backed chunk (to <= rec->length) into dst:
 * its whole blocks with one pread straight into dst, checked there; the
 * partial blocks at the edges read whole into a buffer of ours, checked,
 * and their part copied. Returns 0, -EIO (a crc), -EFAULT (dst gone) or
 * -errno. */
static int read_file(int fd, const struct kvc_chunk_record *rec, uint32_t from, uint32_t to,
                     uint8_t *dst)
{
	int64_t first = from / KVC_CHUNK_BLOCK, last = (to - 1) / KVC_CHUNK_BLOCK;
	int64_t whole_first = (from + KVC_CHUNK_BLOCK - 1) / KVC_CHUNK_BLOCK, whole_last = last;
	if (last * KVC_CHUNK_BLOCK + kvc_chunk_block_bytes(rec->length, (uint32_t)last) > to)
		whole_last = last - 1;
	int rc = cached(fd, first * KVC_CHUNK_BLOCK,
	                last * KVC_CHUNK_BLOCK + kvc_chunk_block_bytes(rec->length, (uint32_t)last) -
	                        first * KVC_CHUNK_BLOCK);
	if (rc == 0 && whole_first <= whole_last) {
		uint32_t start = (uint32_t)whole_first * KVC_CHUNK_BLOCK;
		uint32_t end = (uint32_t)whole_last * KVC_CHUNK_BLOCK +
		               kvc_chunk_block_bytes(rec->length, (uint32_t)whole_last);
		uint8_t *at = dst + (start - from);
		rc = pread_cached(fd, at, end - start, start);
		for (int64_t b = whole_first; b <= whole_last && rc == 0; b++) {
			uint32_t crc;
			rc = kvc_mem_guard_crc32c(at + (b - whole_first) * KVC_CHUNK_BLOCK,
			                          kvc_chunk_block_bytes(rec->length, (uint32_t)b), &crc);
			if (rc == 0 && crc != rec->block_crc[b])
				rc = -EIO;
		}
	}
	int64_t edges[2] = {first, last};
	uint8_t buf[KVC_CHUNK_BLOCK];
	for (int e = 0; e < 2 && rc == 0; e++) {
		int64_t b = edges[e];
		if ((b >= whole_first && b <= whole_last) || (e == 1 && last == first))
			continue;
		uint32_t start = (uint32_t)b * KVC_CHUNK_BLOCK;
		uint32_t bytes = kvc_chunk_block_bytes(rec->length, (uint32_t)b);
		rc = pread_cached(fd, buf, bytes, start);
		if (rc == 0 && kvc_crc32c(0, buf, bytes) != rec->block_crc[b])
			rc = -EIO;
		uint32_t lo = start > from ? start : from;
		uint32_t hi = start + bytes < to ? start + bytes : to;
		if (rc == 0)
			rc = kvc_mem_guard_copy(dst + (lo - from), buf + (lo - start), hi - lo);
	}
	return rc;
}

/* A piece's record, and an inline chunk's bytes: what a lookup under the
 * memory guard (kvc_mem_guard_call) finds and does. The index is another
 * process's file mapped here: a disk error under it is a SIGBUS, which
 * the guard turns into a miss, not the end of kvc-fuse. */
struct lookup {
	MDB_txn *txn;
	MDB_dbi dbi;
	const struct kvc_msg_piece *piece;
	uint8_t *dst;
	bool forbid_holes;
	struct kvc_chunk_record rec;
	bool file;        /* out: a file-backed chunk, whose bytes are still to read */
	uint32_t present; /* out: the piece's bytes the chunk has (the rest a hole) */
};

static int lookup_piece(void *arg)
{
	struct lookup *l = arg;
	const struct kvc_msg_piece *p = l->piece;
	uint8_t key[12];
	kvc_chunk_key(key, p->inode, p->chunk);
	MDB_val k = {sizeof(key), key}, v;
	int found = mdb_get(l->txn, l->dbi, &k, &v);
	const uint8_t *data = NULL;
	int rc = found == MDB_NOTFOUND ? 0
	       : found == 0            ? kvc_chunk_record_parse(&v, &l->rec, &data)
	                               : -EIO;
	if (rc < 0 || found != 0) {
		l->present = 0;
		return rc;
	}
	if (l->rec.block_count != kvc_chunk_blocks(l->rec.length))
		return -EIO; /* not a record kvc-storage writes: its server judges */
	uint32_t end = p->offset + p->length;
	l->present = l->rec.length <= p->offset ? 0
	           : l->rec.length < end        ? l->rec.length - p->offset
	                                        : p->length;
	l->file = !data;
	if (!data || !l->present)
		return 0;
	/* inline: its blocks checked in the record, then copied */
	uint32_t from = p->offset, to = p->offset + l->present;
	for (uint32_t b = from / KVC_CHUNK_BLOCK; b <= (to - 1) / KVC_CHUNK_BLOCK; b++)
		if (kvc_crc32c(0, data + b * KVC_CHUNK_BLOCK, kvc_chunk_block_bytes(l->rec.length, b)) !=
		    l->rec.block_crc[b])
			return -EIO;
	memcpy(l->dst, data + from, to - from); /* the guard covers the caller's memory too */
	return 0;
}

/* Whether the process that made t's counters still runs (its pidfd is
 * readable once it exited; a poll that fails says no too). */
static bool server_alive(const struct local_target *t)
{
	struct pollfd gone = {.fd = t->pid_fd, .events = POLLIN};
	int n;
	while ((n = poll(&gone, 1, 0)) < 0 && errno == EINTR)
		;
	return n == 0;
}

/* One piece, the target ON and its use lock held for reading. Returns 1
 * done, 0 the usual way, -ESRCH the server went. */
static int read_piece(struct local_target *t, const struct kvc_msg_piece *p, uint8_t *dst,
                      bool forbid_holes)
{
	const _Atomic uint64_t *count = &t->changes[kvc_chunk_lock_slot(p->inode, p->chunk)];
	uint64_t before = atomic_load_explicit(count, memory_order_acquire);
	if (before & 1) /* a change being made, or a server that died making it */
		return server_alive(t) ? 0 : -ESRCH;
	struct lookup l = {.dbi = t->dbi, .piece = p, .dst = dst, .forbid_holes = forbid_holes};
	if (mdb_txn_begin(t->env, NULL, MDB_RDONLY, &l.txn) != 0)
		return 0;
	int rc = kvc_mem_guard_call(lookup_piece, &l);
	mdb_txn_abort(l.txn); /* inline bytes copied; a file's crcs are in l.rec */
	if (rc == 0 && l.present < p->length && forbid_holes)
		rc = -ENODATA;
	if (rc == 0 && l.present && l.file) {
		char name[64];
		kvc_chunk_file_name(p->inode, p->chunk, name, sizeof(name));
		int fd = openat(t->dir_fd, name, O_RDONLY | O_CLOEXEC);
		rc = fd < 0 ? -errno : read_file(fd, &l.rec, p->offset, p->offset + l.present, dst);
		if (fd >= 0)
			close(fd);
	}
	if (rc == 0 && l.present < p->length)
		rc = kvc_storage_zero_fill(dst + l.present, p->length - l.present);
	atomic_thread_fence(memory_order_acquire);
	if (rc < 0 || atomic_load_explicit(count, memory_order_relaxed) != before)
		return 0;
	/* The counters are the serving process's: was it there throughout? */
	return server_alive(t) ? 1 : -ESRCH;
}

bool kvc_transport_local_ready(struct kvc_storage_client *client, uint32_t server,
                               uint32_t target)
{
	struct kvc_local_client *l = client->local;
	if (!l || target >= KVC_WIRE_MAX_TARGETS)
		return false;
	struct local_target *t = &l->targets[target];
	return atomic_load(&t->state) == ON || ensure(client, server, target, t);
}

bool kvc_transport_local_read(struct kvc_storage_client *client, uint32_t server,
                              const struct kvc_msg_piece *piece, uint8_t *dst, bool forbid_holes)
{
	struct kvc_local_client *l = client->local;
	if (!l || piece->target >= KVC_WIRE_MAX_TARGETS || piece->length == 0 ||
	    piece->length > KVC_LAYOUT_MAX_CHUNK || piece->offset > KVC_LAYOUT_MAX_CHUNK - piece->length)
		return false;
	struct local_target *t = &l->targets[piece->target];
	if (atomic_load(&t->state) != ON && !ensure(client, server, piece->target, t))
		return false;
	pthread_rwlock_rdlock(&t->use);
	bool on = atomic_load(&t->state) == ON;
	uint64_t generation = t->generation;
	int rc = on ? read_piece(t, piece, dst, forbid_holes) : 0;
	pthread_rwlock_unlock(&t->use);
	if (rc == -ESRCH) {
		pthread_rwlock_wrlock(&t->use);
		if (atomic_load(&t->state) == ON && t->generation == generation) {
			kvc_log_warn("storage server %s went away: its chunks are read through it "
			             "again", client->server_address[server]);
			drop(t, OFF);
		}
		pthread_rwlock_unlock(&t->use);
	}
	if (rc == 1) {
		atomic_fetch_add_explicit(&l->reads, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&l->bytes, piece->length, memory_order_relaxed);
	} else if (on) {
		atomic_fetch_add_explicit(&l->misses, 1, memory_order_relaxed);
	}
	return rc == 1;
}

struct local_metrics {
	struct kvc_local_client *local;
	struct kvc_metrics_counter *reads, *bytes, *misses;
};

static void collect_local(void *arg)
{
	struct local_metrics *m = arg;
	kvc_metrics_counter_set(m->reads, atomic_load(&m->local->reads));
	kvc_metrics_counter_set(m->bytes, atomic_load(&m->local->bytes));
	kvc_metrics_counter_set(m->misses, atomic_load(&m->local->misses));
}

int kvc_transport_local_metrics(struct kvc_storage_client *client, struct kvc_metrics *registry,
                                const char *prefix)
{
	if (!client->local)
		return 0;
	struct local_metrics *m = calloc(1, sizeof(*m));
	char reads[96], bytes[96], misses[96];
	if (!m)
		return -ENOMEM;
	m->local = client->local;
	snprintf(reads, sizeof(reads), "%s_transport_local_reads_total", prefix);
	snprintf(bytes, sizeof(bytes), "%s_transport_local_bytes_total", prefix);
	snprintf(misses, sizeof(misses), "%s_transport_local_misses_total", prefix);
	m->reads = kvc_metrics_counter(registry, reads,
	                               "Chunk pieces read here from a same-host target's files "
	                               "(no request to its server).", NULL, 0);
	m->bytes = kvc_metrics_counter(registry, bytes, "Bytes of those pieces.", NULL, 0);
	m->misses = kvc_metrics_counter(registry, misses,
	                                "Pieces tried here that went to the server after all (a "
	                                "change meanwhile, a crc, a hole not allowed, memory gone, "
	                                "the server not offering its target).", NULL, 0);
	if (!m->reads || !m->bytes || !m->misses ||
	    kvc_metrics_collector(registry, collect_local, m) < 0) {
		free(m);
		return -ENOMEM;
	}
	return 0;
}
