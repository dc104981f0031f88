/*
 * ring_bad_input: bad input to USRBIO, through the native API (refused at
 * prep) and forged straight into a ring and the control socket (refused by
 * kvc-fuse, entry by entry, while good entries of the same batch succeed
 * and the daemon keeps serving).
 *
 *   ring_bad_input DIR      DIR: a directory on a kvcfs mount
 *   ring_bad_input --other-uid-iov ID DIR
 *       (run as another user) opening the iov with hex id ID must fail
 *
 * Prints "ok N - what" or "not ok N - what" per check; exits 1 on any
 * failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvc/usrbio.h"
#include "check.h"
#include "raw_control.h"

static void native_checks(const char *mount, const char *dir)
{
	char rw_path[PATH_MAX], ro_path[PATH_MAX];
	snprintf(rw_path, sizeof(rw_path), "%s/bad-rw", dir);
	snprintf(ro_path, sizeof(ro_path), "%s/bad-ro", dir);
	int rw = open(rw_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	close(open(ro_path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	int ro = open(ro_path, O_RDONLY);
	int unregistered = open(rw_path, O_RDWR);
	struct kvc_iov *iov;
	struct kvc_ring *wring, *rring;
	check(kvc_iov_create(&iov, mount, 1 << 20, 0, -1, NULL) == 0, "iov create", 0);
	check(kvc_ring_create(&wring, mount, 16, false, 0, 0, 0, -1, 0) == 0, "write ring", 0);
	check(kvc_ring_create(&rring, mount, 16, true, 0, 0, 0, -1, 0) == 0, "read ring", 0);
	check(kvc_fd_register(rw, 0) == 0, "register rw fd", 0);
	check(kvc_fd_register(ro, 0) == 0, "register ro fd", 0);
	int not_kvc = open("/proc/self/status", O_RDONLY);
	long rc = kvc_fd_register(not_kvc, 0);
	check(rc == -EBADF, "registering a file outside kvcfs: EBADF", rc);
	uint8_t *base = kvc_iov_base(iov);
	rc = kvc_ring_prep(wring, iov, false, base + (1 << 20) - 10, rw, 0, 100, NULL);
	check(rc == -EFAULT, "buffer past the iov end: EFAULT", rc);
	rc = kvc_ring_prep(wring, iov, false, base - 4096, rw, 0, 100, NULL);
	check(rc == -EFAULT, "buffer before the iov: EFAULT", rc);
	rc = kvc_ring_prep(wring, iov, false, base, unregistered, 0, 100, NULL);
	check(rc == -EBADF, "unregistered fd: EBADF", rc);
	rc = kvc_ring_prep(wring, iov, true, base, rw, 0, 100, NULL);
	check(rc == -EINVAL, "read on a write ring: EINVAL", rc);
	rc = kvc_ring_prep(wring, iov, false, base, ro, 0, 100, NULL);
	check(rc == -EACCES, "write to a read-only fd: EACCES", rc);
	rc = kvc_ring_prep(wring, iov, false, base, rw, 0, 0, NULL);
	check(rc == -EINVAL, "zero length: EINVAL", rc);
	for (int i = 0; i < 16; i++)
		kvc_ring_prep(wring, iov, false, base, rw, (uint64_t)i * 4096, 4096, NULL);
	rc = kvc_ring_prep(wring, iov, false, base, rw, 0, 4096, NULL);
	check(rc == -EAGAIN, "17th entry of a 16-entry ring: EAGAIN", rc);
	kvc_ring_submit(wring);
	struct kvc_completion done[16];
	int got = 0;
	while (got < 16) {
		int n = kvc_ring_wait(wring, done, 16, 16 - got, NULL);
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			if (done[i].result != 4096)
				failures++;
		got += n;
	}
	check(got == 16, "the full ring still completes", got);
	rc = kvc_ring_prep(rring, iov, true, base, rw, 1 << 30, 4096, NULL);
	kvc_ring_submit(rring);
	got = kvc_ring_wait(rring, done, 1, 1, NULL);
	check(got == 1 && done[0].result == 0, "read past the end: 0 bytes", got ? done[0].result : -1);
	/* Waits that could never be satisfied return instead of hanging. */
	kvc_ring_prep(rring, iov, true, base, rw, 0, 4096, NULL);
	kvc_ring_prep(rring, iov, true, base + 4096, rw, 4096, 4096, NULL);
	got = kvc_ring_wait(rring, done, 16, 16, NULL); /* no submit: waiting submits */
	check(got == 2, "waiting for 16 with 2 prepared (not submitted) gives the 2", got);
	got = kvc_ring_wait(rring, done, 16, 1, NULL);
	check(got == 0, "waiting with nothing in flight returns 0 at once", got);
	kvc_ring_destroy(wring);
	kvc_ring_destroy(rring);
	kvc_iov_destroy(iov);
	kvc_fd_deregister(rw);
	kvc_fd_deregister(ro);
	close(rw);
	close(ro);
	close(unregistered);
	close(not_kvc);
}

/* A raw ring registered on our own control connection (raw_control.h). */
static struct kvc_ring_shared *raw_ring(struct raw *r, uint32_t entries, bool for_read,
                                        int *doorbell, uint32_t *handle)
{
	struct kvc_ring_shared *sh;
	struct kvc_msg_ring_register m = {.entries = entries, .for_read = for_read};
	int memfd = raw_ring_memory(entries, true, &sh);
	int rc = memfd < 0 ? memfd : raw_ring_register(r, memfd, &m, doorbell, handle);
	if (memfd >= 0)
		close(memfd);
	return rc == 0 ? sh : NULL;
}

/* Submit count forged entries and collect count completions (5 s max). */
static int raw_run(struct kvc_ring_shared *sh, int doorbell, const struct kvc_ring_sqe *e,
                   uint32_t count, int64_t *results)
{
	uint32_t tail = atomic_load(&sh->sq_tail);
	for (uint32_t i = 0; i < count; i++)
		kvc_ring_sqes(sh)[(tail + i) & (sh->entries - 1)] = e[i];
	atomic_store(&sh->sq_tail, tail + count);
	if (raw_doorbell(doorbell) < 0)
		return -errno;
	uint32_t got = 0, head = atomic_load(&sh->cq_head);
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 5;
	while (got < count) {
		uint32_t ctail = atomic_load(&sh->cq_tail);
		while (head != ctail) {
			struct kvc_ring_cqe *c = &kvc_ring_cqes(sh, sh->entries)[head & (sh->entries - 1)];
			results[c->userdata] = c->result;
			head++;
			got++;
		}
		atomic_store(&sh->cq_head, head);
		if (got < count &&
		    syscall(SYS_futex, &sh->cq_tail, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, ctail,
		            &deadline, NULL, FUTEX_BITSET_MATCH_ANY) < 0 && errno == ETIMEDOUT)
			break;
	}
	return (int)got;
}

static void raw_checks(const char *mount, const char *dir)
{
	struct raw r = {0};
	long rc = raw_connect(&r, mount);
	check(rc == 0, "raw control connection", rc);
	int shm = memfd_create("raw-iov", 0);
	if (ftruncate(shm, 1 << 20) < 0)
		failures++;
	struct kvc_msg_iov_register iv = {.size = 1 << 20};
	struct kvc_msg_handle iov;
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), &shm, 1, &iov, sizeof(iov));
	check(rc == 0, "raw iov register", rc);
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), NULL, 0, &iov, sizeof(iov));
	check(rc == -EBADF, "iov register without its fd: EBADF", rc);
	iv.size = 2 << 20;
	struct kvc_msg_handle unused;
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), &shm, 1, &unused, sizeof(unused));
	check(rc == -EINVAL, "iov larger than its memory: EINVAL", rc);
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, 7, &shm, 1, &unused, sizeof(unused));
	check(rc == -EINVAL, "truncated register body: EINVAL", rc);
	/* A device iov whose GPU and IPC handle are made up: -ENOTSUP where
	 * kvc-fuse has no CUDA, -ENODEV (no such GPU) where it has. */
	struct kvc_msg_iov_register_device dv = {.size = 1 << 20, .pci_bus_id = "0000:ff:1f.7"};
	memset(dv.ipc_handle, 0xa5, sizeof(dv.ipc_handle));
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER_DEVICE, &dv, sizeof(dv), NULL, 0, &unused,
	              sizeof(unused));
	check(rc == -ENOTSUP || rc == -ENODEV, "made-up device iov: ENOTSUP or ENODEV", rc);
	memset(dv.pci_bus_id, 'x', sizeof(dv.pci_bus_id));
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER_DEVICE, &dv, sizeof(dv), NULL, 0, &unused,
	              sizeof(unused));
	check(rc == -ENOTSUP || rc == -EINVAL, "unterminated bus id: ENOTSUP or EINVAL", rc);
	dv.size = 0;
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER_DEVICE, &dv, sizeof(dv), NULL, 0, &unused,
	              sizeof(unused));
	check(rc == -EINVAL, "device iov of 0 bytes: EINVAL", rc);
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER_DEVICE, &dv, 100, NULL, 0, &unused, sizeof(unused));
	check(rc == -EINVAL, "truncated device register body: EINVAL", rc);
	rc = raw_call(&r, 250, NULL, 0, NULL, 0, NULL, 0);
	check(rc == -EOPNOTSUPP, "unknown control message: EOPNOTSUPP", rc);

	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/raw-rw", dir);
	int rw = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	int ro = open(path, O_RDONLY);
	struct kvc_msg_fd_register fr = {.client_fd = 1000};
	struct kvc_msg_fd_register_reply frr;
	rc = raw_call(&r, KVC_MSG_FD_REGISTER, &fr, sizeof(fr), &rw, 1, &frr, sizeof(frr));
	check(rc == 0 && frr.access == O_RDWR, "fd register reports O_RDWR", rc);
	fr.client_fd = 1001;
	rc = raw_call(&r, KVC_MSG_FD_REGISTER, &fr, sizeof(fr), &ro, 1, &frr, sizeof(frr));
	check(rc == 0 && frr.access == O_RDONLY, "fd register reports O_RDONLY", rc);
	fr.client_fd = 1002;
	rc = raw_call(&r, KVC_MSG_FD_REGISTER, &fr, sizeof(fr), &shm, 1, &frr, sizeof(frr));
	check(rc == -EBADF, "registering a non-kvcfs file: EBADF", rc);

	struct kvc_msg_ring_register bad = {.entries = 3, .for_read = 0};
	struct kvc_ring_shared *unused_sh;
	int sealed = raw_ring_memory(16, true, &unused_sh), db;
	uint32_t unused_handle;
	rc = raw_ring_register(&r, sealed, &bad, &db, &unused_handle);
	check(rc == -EINVAL, "ring of 3 entries: EINVAL", rc);
	bad.entries = 16;
	unused_sh->magic = 0;
	rc = raw_ring_register(&r, sealed, &bad, &db, &unused_handle);
	check(rc == -EINVAL, "ring memory without a ring header: EINVAL", rc);
	unused_sh->magic = KVC_RING_MAGIC;
	int fds[2] = {sealed, eventfd(0, 0)};
	rc = raw_call(&r, KVC_MSG_RING_REGISTER, &bad, sizeof(bad), fds, 2, &unused, sizeof(unused));
	check(rc == -EPROTO, "a doorbell of the client's (an old libkvc): EPROTO", rc);
	rc = raw_call(&r, KVC_MSG_RING_REGISTER, &bad, sizeof(bad), NULL, 0, &unused, sizeof(unused));
	check(rc == -EBADF, "ring register without its memory: EBADF", rc);
	close(fds[1]);
	close(sealed);

	int doorbell;
	uint32_t ring_handle;
	struct kvc_ring_shared *sh = raw_ring(&r, 16, false, &doorbell, &ring_handle);
	check(sh != NULL, "raw write ring", 0);
	if (!sh)
		return;
	struct kvc_ring_sqe good = {.iov_offset = 0, .file_offset = 0, .length = 4096,
	                            .fd = 1000, .iov_handle = iov.handle, .op = KVC_RING_WRITE};
	struct kvc_ring_sqe e[9];
	for (int i = 0; i < 9; i++)
		e[i] = good, e[i].userdata = (uint64_t)i;
	e[1].iov_offset = (1 << 20) - 100;         /* past the iov end */
	e[2].iov_handle = 999;                     /* no such iov */
	e[3].fd = 12345;                           /* not registered */
	e[4].fd = 1001;                            /* read-only */
	e[5].op = KVC_RING_READ;                   /* wrong direction */
	e[6].length = 0;                           /* empty */
	e[7].file_offset = 1ull << 62;             /* beyond the largest file */
	e[8].file_offset = 8192;                   /* good too */
	int64_t res[9];
	for (int i = 0; i < 9; i++)
		res[i] = 7777;
	int got = raw_run(sh, doorbell, e, 9, res);
	check(got == 9, "every forged entry completes", got);
	check(res[0] == 4096 && res[8] == 4096, "good entries of the batch succeed", res[0]);
	check(res[1] == -EFAULT, "iov range outside: EFAULT", res[1]);
	check(res[2] == -EFAULT, "unknown iov handle: EFAULT", res[2]);
	check(res[3] == -EBADF, "unregistered fd: EBADF", res[3]);
	check(res[4] == -EACCES, "write through a read-only fd: EACCES", res[4]);
	check(res[5] == -EINVAL, "read entry on a write ring: EINVAL", res[5]);
	check(res[6] == -EINVAL, "zero length: EINVAL", res[6]);
	check(res[7] == -EFBIG, "offset beyond 256 TiB: EFBIG", res[7]);

	/* Corrupt indices stop that ring only. */
	atomic_store(&sh->sq_tail, atomic_load(&sh->sq_head) + 100000);
	if (raw_doorbell(doorbell) < 0)
		failures++;
	int doorbell2;
	uint32_t handle2;
	struct kvc_ring_shared *sh2 = raw_ring(&r, 16, false, &doorbell2, &handle2);
	got = sh2 ? raw_run(sh2, doorbell2, &good, 1, res) : -1;
	check(got == 1 && res[0] == 4096, "a new ring works after a corrupt one", got);

	/* Shared memory owned by another uid is refused. */
	char foreign[] = "/dev/shm/kvc-test-foreign-XXXXXX";
	int other = mkstemp(foreign);
	if (ftruncate(other, 1 << 20) < 0 || fchown(other, 65534, 65534) < 0)
		failures++;
	iv.size = 1 << 20;
	rc = raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), &other, 1, &unused, sizeof(unused));
	check(getuid() != 0 || rc == -EACCES, "another uid's shared memory: EACCES", rc);
	unlink(foreign);
	close(r.sock);
	close(rw);
	close(ro);
}

static int other_uid(const char *hex, const char *mount)
{
	uint8_t id[16];
	for (int i = 0; i < 16; i++)
		sscanf(hex + 2 * i, "%2hhx", &id[i]);
	struct kvc_iov *iov;
	long rc = kvc_iov_open(&iov, id, mount, 1 << 20, 0, -1);
	check(rc == -EACCES, "another uid opening our iov: EACCES", rc);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	char mount[PATH_MAX];
	if (argc == 4 && strcmp(argv[1], "--other-uid-iov") == 0) {
		if (kvc_extract_mount_point(mount, sizeof(mount), argv[3]) < 0)
			return 2;
		return other_uid(argv[2], mount);
	}
	if (argc != 2 || kvc_extract_mount_point(mount, sizeof(mount), argv[1]) < 0) {
		fprintf(stderr, "usage: ring_bad_input DIR (on a kvcfs mount)\n");
		return 2;
	}
	native_checks(mount, argv[1]);
	raw_checks(mount, argv[1]);
	printf("%d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
