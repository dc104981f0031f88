/*
 * hostile_client: a client that attacks kvc-fuse through what it owns (its
 * shared memory, its doorbells), to show that it hurts only itself
 * (docs/usrbio.md, "What a client may and may not do"). The test around
 * it checks that kvc-fuse lives on and serves other clients.
 *
 *   hostile_client shrink DIR     ring and iov memory shrunk under kvc-fuse
 *   hostile_client on-mount DIR   ring and iov memory that is a kvcfs file
 *   hostile_client doorbell DIR   doorbells filled, made blocking, closed
 *                                 and shut down; then prints "ready" and
 *                                 keeps them so until a line on stdin
 *   hostile_client churn DIR RINGS  RINGS threads each running tiny reads
 *                                 on a ring of its own, forever (the test
 *                                 kills it at a random moment)
 *
 * DIR: a directory on a kvcfs mount. Prints "ok N - what" or "not ok N -
 * what" per check; exits 1 on any failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvc/usrbio.h"
#include "check.h"
#include "raw_control.h"

#define MIB (1u << 20)

/* A file of `data` bytes of 0xab followed by a hole up to `size`. */
static int make_file(const char *dir, const char *name, size_t data, size_t size)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	char *bytes = malloc(data ? data : 1);
	memset(bytes, 0xab, data);
	if (fd < 0 || write(fd, bytes, data) != (ssize_t)data || ftruncate(fd, (off_t)size) < 0)
		failures++;
	free(bytes);
	return fd;
}

/* Run one entry on a ring of the native API: its result. */
/* The result of the one entry prepared on ring (rc: the prep's), waited
 * for at most 30 s. */
static int64_t wait_one(struct kvc_ring *ring, int rc)
{
	struct kvc_completion done;
	struct timespec deadline;
	if (rc < 0)
		return rc;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 30;
	rc = kvc_ring_wait(ring, &done, 1, 1, &deadline);
	return rc == 1 ? done.result : rc < 0 ? rc : -ETIMEDOUT;
}

static int64_t ring_one(struct kvc_ring *ring, struct kvc_iov *iov, bool read, void *ptr, int fd,
                        uint64_t offset, uint64_t length)
{
	return wait_one(ring, kvc_ring_prep(ring, iov, read, ptr, fd, offset, length, NULL));
}

/* One key entry of two 32 KiB segments of iov at base, waited for. */
static int64_t key_one(struct kvc_ring *ring, struct kvc_iov *iov, int op, int dir_fd,
                       const char *name, size_t base)
{
	struct kvc_key_seg segs[2] = {{iov, base, 32 << 10}, {iov, base + (64 << 10), 32 << 10}};
	return wait_one(ring, kvc_ring_prep_key(ring, op, dir_fd, name, segs, 2, 0, 0, NULL));
}

static void shrink(const char *mount, const char *dir)
{
	struct raw r;
	long rc = raw_connect(&r, mount);
	check(rc == 0, "control connection", rc);

	/* Ring memory kvc-fuse could be made to fault on is refused. */
	struct kvc_ring_shared *sh;
	struct kvc_msg_ring_register m = {.entries = 16, .for_read = 1};
	int doorbell, memfd = raw_ring_memory(16, false, &sh);
	uint32_t handle;
	rc = raw_ring_register(&r, memfd, &m, &doorbell, &handle);
	check(rc == -EPERM, "ring memory not sealed against shrinking: EPERM", rc);
	if (rc == 0) {
		/* Taken: shrink it under kvc-fuse and wake a worker on it. */
		atomic_store(&sh->sq_tail, 1);
		if (ftruncate(memfd, 0) < 0 || raw_doorbell(doorbell) < 0)
			failures++;
		usleep(200000);
	}
	close(memfd);

	memfd = raw_ring_memory(16, true, &sh);
	rc = raw_ring_register(&r, memfd, &m, &doorbell, &handle);
	check(rc == 0, "sealed ring memory is taken", rc);
	rc = ftruncate(memfd, 0) < 0 ? -errno : 0;
	check(rc == -EPERM, "sealed ring memory cannot shrink", rc);
	close(memfd);
	close(r.sock);

	/* An iov shrunk after registration: every I/O into or out of it fails
	 * for this client only. */
	int fd = make_file(dir, "shrunk", MIB, 4 * MIB);
	struct kvc_iov *iov;
	struct kvc_ring *rring, *wring;
	uint8_t id[16];
	char name[64];
	rc = kvc_iov_create(&iov, mount, 4 * MIB, 0, -1, id);
	check(rc == 0, "iov", rc);
	if (rc < 0)
		return;
	snprintf(name, sizeof(name), "/kvc-iov-");
	for (int i = 0; i < 16; i++)
		snprintf(name + 9 + 2 * i, 3, "%02x", id[i]);
	int shm = shm_open(name, O_RDWR, 0);
	kvc_iov_unlink(iov);
	rc = kvc_fd_register(fd, 0);
	if (rc == 0)
		rc = kvc_ring_create(&rring, mount, 8, true, 0, 0, 0, -1, 0);
	if (rc == 0)
		rc = kvc_ring_create(&wring, mount, 8, false, 0, 0, 0, -1, 0);
	check(rc == 0, "rings and fd", rc);
	if (rc < 0)
		return;
	uint8_t *base = kvc_iov_base(iov);
	int key_dir = open(dir, O_PATH | O_DIRECTORY);
	rc = key_dir >= 0 ? kvc_fd_register(key_dir, 0) : -errno;
	check(rc == 0, "a key directory", rc);
	memset(base, 'a', 32 << 10);
	memset(base + (64 << 10), 'b', 32 << 10);
	rc = key_one(wring, iov, KVC_KEY_PUT, key_dir, "k", 0);
	check(rc == 64 << 10, "a key of two segments put before it shrinks", rc);
	rc = ring_one(rring, iov, true, base, fd, 0, MIB);
	check(rc == MIB, "a read into the iov before it shrinks", rc);
	rc = shm >= 0 && ftruncate(shm, 0) == 0 ? 0 : -errno;
	check(rc == 0, "the client shrinks its iov to 0 bytes", rc);
	rc = ring_one(rring, iov, true, base, fd, 0, MIB);
	check(rc < 0 && rc != -ETIMEDOUT && rc != -ECONNRESET, "reading data into it fails", rc);
	rc = ring_one(rring, iov, true, base + MIB, fd, 2 * MIB, MIB);
	check(rc < 0 && rc != -ETIMEDOUT && rc != -ECONNRESET, "reading a hole into it fails", rc);
	rc = ring_one(wring, iov, false, base, fd, 0, 64 << 10);
	check(rc < 0 && rc != -ETIMEDOUT && rc != -ECONNRESET, "writing from it fails", rc);
	/* Keys of several segments: a get placed segment by segment fails as
	 * a read does (-EFAULT, or -EIO once a connection was dropped
	 * mid-frame), a put gathered by kvc-fuse's guarded copies is
	 * -EFAULT; kvc-fuse stays up. */
	rc = key_one(wring, iov, KVC_KEY_GET, key_dir, "k", 0);
	check(rc < 0 && rc != -ETIMEDOUT && rc != -ECONNRESET, "a key got into shrunk memory fails",
	      rc);
	rc = key_one(wring, iov, KVC_KEY_PUT, key_dir, "k2", 0);
	check(rc == -EFAULT, "a key put from shrunk memory: EFAULT", rc);
	/* The memory grows back: the same iov works again. */
	rc = ftruncate(shm, 4 * MIB) == 0 ? 0 : -errno;
	if (rc == 0)
		rc = ring_one(rring, iov, true, base + MIB, fd, 2 * MIB, MIB);
	check(rc == MIB, "after growing back, the iov serves again", rc);
	memset(base, 0, 128 << 10);
	rc = key_one(wring, iov, KVC_KEY_GET, key_dir, "k", 0);
	check(rc == 64 << 10 && base[0] == 'a' && base[(64 << 10) + 100] == 'b',
	      "after growing back, a key scatters into it again", rc);
	kvc_ring_destroy(rring);
	kvc_ring_destroy(wring);
	kvc_iov_destroy(iov);
	kvc_fd_deregister(fd);
	kvc_fd_deregister(key_dir);
	close(key_dir);
	close(shm);
	close(fd);
}

static void on_mount(const char *mount, const char *dir)
{
	struct raw r;
	long rc = raw_connect(&r, mount);
	check(rc == 0, "control connection", rc);
	int fd = make_file(dir, "memory-on-mount", 0, MIB);
	struct kvc_msg_iov_register iv = {.size = MIB};
	struct kvc_msg_handle reply;
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), &fd, 1, &reply, sizeof(reply));
	check(rc == -EINVAL, "iov memory that is a file of the mount: EINVAL", rc);

	struct kvc_ring_shared header = {.magic = KVC_RING_MAGIC, .layout = KVC_RING_LAYOUT,
	                                 .entries = 16};
	if (pwrite(fd, &header, sizeof(header), 0) != (ssize_t)sizeof(header))
		failures++;
	struct kvc_msg_ring_register m = {.entries = 16, .for_read = 1};
	int doorbell;
	uint32_t handle;
	rc = raw_ring_register(&r, fd, &m, &doorbell, &handle);
	check(rc == -EINVAL, "ring memory that is a file of the mount: EINVAL", rc);
	close(fd);
	close(r.sock);
}

/* A raw ring of 16 entries with its own iov and file; *sh its memory. */
struct hostile_ring {
	struct kvc_ring_shared *sh;
	int doorbell;
};

static int hostile_ring(struct raw *r, int32_t io_depth, int32_t timeout_ms,
                        struct hostile_ring *out)
{
	struct kvc_msg_ring_register m = {.entries = 16, .for_read = 1, .io_depth = io_depth,
	                                  .timeout_ms = timeout_ms};
	uint32_t handle;
	int memfd = raw_ring_memory(16, true, &out->sh);
	int rc = memfd < 0 ? memfd : raw_ring_register(r, memfd, &m, &out->doorbell, &handle);
	if (memfd >= 0)
		close(memfd);
	return rc;
}

/* Queue count reads of 4 KiB (iov handle, fd 1000) without ringing. */
static void queue_reads(struct kvc_ring_shared *sh, uint32_t iov, uint32_t count)
{
	uint32_t tail = atomic_load(&sh->sq_tail);
	for (uint32_t i = 0; i < count; i++)
		kvc_ring_sqes(sh)[(tail + i) & 15] = (struct kvc_ring_sqe){
			.length = 4096, .iov_offset = 4096 * i, .fd = 1000, .iov_handle = iov,
			.op = KVC_RING_READ, .userdata = i};
	atomic_store(&sh->sq_tail, tail + count);
}

/* Write to the doorbell until it takes no more, then make it blocking. */
static int fill_and_block(int doorbell)
{
	uint64_t one = 1;
	int flags = fcntl(doorbell, F_GETFL);
	if (flags < 0 || fcntl(doorbell, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	while (write(doorbell, &one, sizeof(one)) == (ssize_t)sizeof(one))
		;
	if (errno != EAGAIN)
		return -errno;
	return fcntl(doorbell, F_SETFL, flags & ~O_NONBLOCK) < 0 ? -errno : 0;
}

static void doorbell(const char *mount, const char *dir)
{
	struct raw r;
	long rc = raw_connect(&r, mount);
	check(rc == 0, "control connection", rc);
	int fd = make_file(dir, "doorbell-file", 64 << 10, 64 << 10);
	struct kvc_msg_fd_register fr = {.client_fd = 1000};
	struct kvc_msg_fd_register_reply frr;
	rc = raw_call(&r, KVC_MSG_FD_REGISTER, &fr, sizeof(fr), &fd, 1, &frr, sizeof(frr));
	int shm = memfd_create("hostile-iov", MFD_CLOEXEC);
	if (ftruncate(shm, MIB) < 0)
		failures++;
	struct kvc_msg_iov_register iv = {.size = MIB};
	struct kvc_msg_handle iov;
	if (rc == 0)
		rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), &shm, 1, &iov, sizeof(iov));
	check(rc == 0, "file and iov", rc);

	/* A ring waiting on its io_depth timeout, then stopped by kvc-fuse
	 * (corrupt indices) with its doorbell full and blocking: the timer
	 * comes to it while nothing drains its doorbell. */
	struct hostile_ring timed, closed, shut;
	rc = hostile_ring(&r, 4, 1000, &timed);
	check(rc == 0, "io_depth ring", rc);
	if (rc < 0)
		return;
	queue_reads(timed.sh, iov.handle, 1);
	raw_doorbell(timed.doorbell);
	usleep(200000);
	atomic_store(&timed.sh->sq_tail, atomic_load(&timed.sh->sq_head) + 100000);
	raw_doorbell(timed.doorbell);
	usleep(200000);
	rc = fill_and_block(timed.doorbell);
	check(rc == 0, "its doorbell full and blocking", rc);

	/* A ring whose doorbell is closed right after it rang. */
	rc = hostile_ring(&r, 0, 0, &closed);
	check(rc == 0, "second ring", rc);
	queue_reads(closed.sh, iov.handle, 8);
	raw_doorbell(closed.doorbell);
	close(closed.doorbell);

	/* A ring whose doorbell is full, blocking and shut down. */
	rc = hostile_ring(&r, 0, 0, &shut);
	check(rc == 0, "third ring", rc);
	rc = fill_and_block(shut.doorbell);
	check(rc == 0, "third doorbell full and blocking", rc);
	queue_reads(shut.sh, iov.handle, 4);
	shutdown(shut.doorbell, SHUT_RDWR);

	usleep(1500000); /* the first ring's timeout passes */
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		failures++;
	close(r.sock);
	close(fd);
	close(shm);
}

struct churner {
	const char *mount;
	int fd;
	struct kvc_iov *iov;
	int index;
};

static void *churn_thread(void *arg)
{
	struct churner *c = arg;
	struct kvc_ring *ring;
	if (kvc_ring_create(&ring, c->mount, 4, true, 0, 0, 0, -1, 0) < 0)
		return NULL;
	uint8_t *base = (uint8_t *)kvc_iov_base(c->iov) + c->index * 4 * 4096;
	struct kvc_completion done[4];
	for (unsigned n = 0;; n++) {
		for (int i = 0; i < 4; i++)
			kvc_ring_prep(ring, c->iov, true, base + i * 4096, c->fd, (n * 4 + i) % 60000, 1,
			              NULL);
		if (kvc_ring_wait(ring, done, 4, 4, NULL) < 0)
			return NULL;
	}
}

/* Many rings running tiny batches, so that kvc-fuse starts batches for
 * this client all the time: killing it lands in the middle of one. */
static void churn(const char *mount, const char *dir, int rings)
{
	static struct churner c[64];
	pthread_t threads[64];
	struct kvc_iov *iov;
	int fd = make_file(dir, "churn", 64 << 10, 64 << 10);
	if (rings > 64 || kvc_fd_register(fd, 0) < 0 ||
	    kvc_iov_create(&iov, mount, 64 * 4 * 4096, 0, -1, NULL) < 0)
		exit(1);
	kvc_iov_unlink(iov); /* killed at any moment from now on: leave no name */
	printf("churning\n");
	fflush(stdout);
	for (int i = 0; i < rings; i++) {
		c[i] = (struct churner){mount, fd, iov, i};
		pthread_create(&threads[i], NULL, churn_thread, &c[i]);
	}
	for (int i = 0; i < rings; i++)
		pthread_join(threads[i], NULL);
}

int main(int argc, char **argv)
{
	char mount[PATH_MAX];
	if (argc == 4 && strcmp(argv[1], "churn") == 0 &&
	    kvc_extract_mount_point(mount, sizeof(mount), argv[2]) >= 0) {
		churn(mount, argv[2], atoi(argv[3]));
		return 1; /* it runs until killed */
	}
	if (argc != 3 || kvc_extract_mount_point(mount, sizeof(mount), argv[2]) < 0) {
		fprintf(stderr, "usage: hostile_client shrink|on-mount|doorbell DIR (on a kvcfs mount)\n");
		return 2;
	}
	if (strcmp(argv[1], "shrink") == 0)
		shrink(mount, argv[2]);
	else if (strcmp(argv[1], "on-mount") == 0)
		on_mount(mount, argv[2]);
	else if (strcmp(argv[1], "doorbell") == 0)
		doorbell(mount, argv[2]);
	else
		return 2;
	printf("%d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
