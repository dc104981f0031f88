/*
 * gpu_device: device iovs (include/kvc/gpu.h): GPU memory shared with
 * kvc-fuse over CUDA IPC, filled by ring reads and drained by ring writes.
 *
 *   gpu_device FILE      (FILE on a kvcfs mount; FILE.2 is made too)
 *
 * 1. Random bytes written to FILE through a host iov and a write ring.
 * 2. Read into a device iov (kvc_iov_create_device): a 40 MiB unaligned
 *    read, then 1 MiB pages landing reversed (with the default 128 MiB of
 *    staging, one page straddles the two staging halves; with less, the
 *    big read is split too); copied back with the CUDA runtime and
 *    compared byte for byte.
 * 3. One batch mixing host and device entries.
 * 4. Two iovs wrapping parts of one cudaMalloc allocation (offsets inside
 *    it), written to FILE.2 through a ring and read back through the mount.
 * 5. Bad calls: a range outside the device iov (-EFAULT), wrapping host
 *    memory (-EINVAL), a GPU that does not exist (-EINVAL).
 * 6. A child process registers a device iov, submits reads and is killed:
 *    kvc-fuse drops its registrations and serves the next round trip.
 * 7. With two GPUs: one batch reading into iovs on both.
 * Exit 77 ("SKIP: ...") without a CUDA runtime or GPU; 0 when all passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/cuda_api.h"
#include "kvc/gpu.h"
#include "kvc/usrbio.h"

#if defined(KVC_HAVE_CUDA)

#define MIB (1u << 20)
#define PAGES 64
#define BIG (40u * MIB + 4093) /* not a whole number of pages */
#define FILE_BYTES ((size_t)PAGES * MIB + BIG + 8192)

static int failures;

static void check(int ok, const char *what, long got)
{
	printf("%s - %s", ok ? "ok" : "not ok", what);
	if (!ok)
		printf(" (got %ld: %s)", got, kvc_gpu_last_error());
	printf("\n");
	failures += !ok;
}

/* Prepare count ios, submit and wait; 0 when each moved its full length. */
struct io {
	void *ptr;
	uint64_t offset, length;
	const struct kvc_iov *iov;
};

static int run(struct kvc_ring *ring, bool read, int fd, const struct io *ios, int count)
{
	for (int i = 0; i < count; i++)
		if (kvc_ring_prep(ring, ios[i].iov, read, ios[i].ptr, fd, ios[i].offset,
		                  ios[i].length, (void *)(intptr_t)i) < 0)
			return -1;
	kvc_ring_submit(ring);
	struct kvc_completion done[PAGES + 8];
	int bad = 0;
	for (int got = 0; got < count;) {
		int n = kvc_ring_wait(ring, done, count - got, count - got, NULL);
		if (n < 0)
			return -1;
		for (int k = 0; k < n; k++) {
			int i = (int)(intptr_t)done[k].userdata;
			if (done[k].result != (int64_t)ios[i].length) {
				printf("# io %d: result %lld\n", i, (long long)done[k].result);
				bad++;
			}
		}
		got += n;
	}
	return bad ? -1 : 0;
}

static uint8_t *device_bytes(const struct kvc_cuda *cuda, const void *device, size_t length)
{
	uint8_t *host = malloc(length);
	if (host && cuda->memcpy(host, device, length, cudaMemcpyDeviceToHost) != cudaSuccess) {
		free(host);
		return NULL;
	}
	return host;
}

static void reads_into_device(const char *mount, int fd, const uint8_t *expect,
                              struct kvc_ring *rring, struct kvc_iov *host)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	struct kvc_iov *dev;
	size_t size = (size_t)PAGES * MIB + BIG + 4096;
	int rc = kvc_iov_create_device(&dev, mount, size, 0, NULL);
	check(rc == 0 && kvc_iov_device(dev) == 0, "create a device iov on GPU 0", rc);
	if (rc < 0)
		return;
	uint8_t *d = kvc_iov_base(dev);
	cuda->memset(d, 0xee, size);
	struct io ios[PAGES + 1];
	ios[0] = (struct io){d + (size_t)PAGES * MIB + 5, (uint64_t)PAGES * MIB + 3, BIG, dev};
	for (int i = 0; i < PAGES; i++) /* page i lands at slot PAGES-1-i */
		ios[i + 1] = (struct io){d + (size_t)(PAGES - 1 - i) * MIB, (uint64_t)i * MIB, MIB, dev};
	check(run(rring, true, fd, ios, PAGES + 1) == 0, "65 ring reads into GPU memory complete",
	      0);
	uint8_t *back = device_bytes(cuda, d, size);
	int same = back != NULL;
	for (int i = 0; same && i < PAGES; i++)
		same = memcmp(back + (size_t)(PAGES - 1 - i) * MIB, expect + (size_t)i * MIB, MIB) == 0;
	check(same, "every 1 MiB page is on the GPU, reversed", 0);
	check(back && memcmp(back + (size_t)PAGES * MIB + 5, expect + (size_t)PAGES * MIB + 3,
	                     BIG) == 0, "the 40 MiB unaligned read is exact", 0);
	check(back && back[(size_t)PAGES * MIB + 4] == 0xee &&
	      back[(size_t)PAGES * MIB + 5 + BIG] == 0xee, "bytes around it untouched", 0);
	free(back);

	/* One batch of host and device entries. */
	cuda->memset(d, 0, 4 * MIB);
	uint8_t *h = kvc_iov_base(host);
	memset(h, 0, 4 * MIB);
	struct io mixed[4] = {{d, 0, MIB, dev}, {h, MIB, MIB, host}, {d + MIB, 2 * MIB, MIB, dev},
	                      {h + MIB, 3 * MIB, MIB, host}};
	check(run(rring, true, fd, mixed, 4) == 0, "a batch mixing host and device iovs", 0);
	back = device_bytes(cuda, d, 2 * MIB);
	check(back && memcmp(back, expect, MIB) == 0 && memcmp(back + MIB, expect + 2 * MIB, MIB) == 0 &&
	      memcmp(h, expect + MIB, MIB) == 0 && memcmp(h + MIB, expect + 3 * MIB, MIB) == 0,
	      "each entry of the mixed batch landed where it should", 0);
	free(back);
	rc = kvc_ring_prep(rring, dev, true, d + size - 4096, fd, 0, 8192, NULL);
	check(rc == -EFAULT, "a range past the device iov: EFAULT", rc);
	kvc_iov_destroy(dev);
}

/* With two GPUs or more: one batch reading into device iovs on GPU 0 and
 * GPU 1 (each GPU has its own stream in kvc-fuse), then writing back. */
static void two_gpus(const char *mount, int fd, const uint8_t *expect, struct kvc_ring *rring)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	struct kvc_iov *dev[2] = {NULL, NULL};
	size_t size = 16 * MIB;
	int rc = 0, current = -1;
	cuda->set_device(0);
	for (int g = 0; g < 2 && rc == 0; g++)
		rc = kvc_iov_create_device(&dev[g], mount, size, g, NULL);
	check(rc == 0 && kvc_iov_device(dev[1]) == 1, "device iovs on GPU 0 and GPU 1", rc);
	cuda->get_device(&current);
	check(current == 0, "making one on GPU 1 left the caller's current GPU alone", current);
	if (rc < 0)
		return;
	struct io ios[32];
	for (int i = 0; i < 32; i++) { /* alternate GPUs, 1 MiB each */
		uint8_t *base = kvc_iov_base(dev[i % 2]);
		ios[i] = (struct io){base + (size_t)(i / 2) * MIB, (uint64_t)i * MIB, MIB, dev[i % 2]};
	}
	check(run(rring, true, fd, ios, 32) == 0, "one batch into both GPUs", 0);
	int same = 1;
	for (int g = 0; g < 2 && same; g++) {
		uint8_t *back = device_bytes(cuda, kvc_iov_base(dev[g]), size);
		for (int j = 0; back && same && j < 16; j++)
			same = memcmp(back + (size_t)j * MIB, expect + (size_t)(2 * j + g) * MIB, MIB) == 0;
		same &= back != NULL;
		free(back);
	}
	check(same, "each GPU holds its pages", 0);
	kvc_iov_destroy(dev[0]);
	kvc_iov_destroy(dev[1]);
}

static void writes_from_device(const char *mount, const char *path, const uint8_t *expect)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	char second[4096];
	snprintf(second, sizeof(second), "%s.2", path);
	int fd = open(second, O_RDWR | O_CREAT | O_TRUNC, 0644);
	struct kvc_ring *wring;
	void *memory = NULL;
	size_t one = 16 * MIB, two = 32 * MIB;
	if (fd < 0 || kvc_fd_register(fd, 0) < 0 ||
	    kvc_ring_create(&wring, mount, 16, false, 0, 0, 0, -1, 0) < 0 ||
	    cuda->malloc(&memory, 80 * MIB) != cudaSuccess) {
		check(0, "set up the wrap test", 0);
		return;
	}
	uint8_t *m = memory;
	cuda->memcpy(m, expect, 80 * MIB, cudaMemcpyHostToDevice);
	struct kvc_iov *a, *b;
	int rc = kvc_iov_wrap_device(&a, m + MIB + 7, NULL, mount, one, 0);
	check(rc == 0, "wrap 16 MiB at 1 MiB + 7 of a cudaMalloc allocation", rc);
	int rc2 = kvc_iov_wrap_device(&b, m + 40 * MIB, NULL, mount, two, 0);
	check(rc2 == 0, "wrap 32 MiB at 40 MiB of the same allocation", rc2);
	if (rc == 0 && rc2 == 0) {
		struct io ios[2] = {{m + MIB + 7, 0, one, a}, {m + 40 * MIB, one, two, b}};
		check(run(wring, false, fd, ios, 2) == 0, "ring writes from both wrapped iovs", 0);
		kvc_fd_sync(fd);
		uint8_t *back = malloc(one + two);
		int same = pread(fd, back, one + two, 0) == (ssize_t)(one + two) &&
		           memcmp(back, expect + MIB + 7, one) == 0 &&
		           memcmp(back + one, expect + 40 * MIB, two) == 0;
		check(same, "the file holds the GPU bytes (read through the mount)", 0);
		free(back);
		kvc_iov_destroy(a);
		kvc_iov_destroy(b);
	}
	rc = kvc_iov_wrap_device(&a, m + 79 * MIB, NULL, mount, 2 * MIB, 0);
	check(rc == -EFAULT, "wrapping past the allocation's end: EFAULT", rc);
	uint8_t *host_memory = malloc(MIB);
	rc = kvc_iov_wrap_device(&a, host_memory, NULL, mount, MIB, 0);
	check(rc == -EINVAL, "wrapping host memory as device memory: EINVAL", rc);
	free(host_memory);
	rc = kvc_iov_create_device(&a, mount, MIB, 99, NULL);
	check(rc == -EINVAL, "a GPU that does not exist: EINVAL", rc);
	cuda->free(memory);
	kvc_ring_destroy(wring);
	kvc_fd_deregister(fd);
	close(fd);
}

/* The child of step 6: register, submit, and die with I/O in flight. */
static int child(const char *mount, const char *path)
{
	int fd = open(path, O_RDONLY);
	struct kvc_iov *dev;
	struct kvc_ring *ring;
	if (fd < 0 || kvc_fd_register(fd, 0) < 0 ||
	    kvc_iov_create_device(&dev, mount, (size_t)PAGES * MIB, 0, NULL) < 0 ||
	    kvc_ring_create(&ring, mount, PAGES, true, 0, 0, 0, -1, 0) < 0)
		return 1;
	uint8_t *d = kvc_iov_base(dev);
	for (int i = 0; i < PAGES; i++)
		kvc_ring_prep(ring, dev, true, d + (size_t)i * MIB, fd, (uint64_t)i * MIB, MIB, NULL);
	kvc_ring_submit(ring);
	raise(SIGKILL);
	return 1;
}

static long usrbio_iovs(const char *mount)
{
	char value[256] = "";
	if (getxattr(mount, "user.kvc.usrbio", value, sizeof(value) - 1) < 0)
		return -1;
	const char *at = strstr(value, "iovs");
	long n = -1;
	if (at)
		sscanf(at, "iovs%*[ =:]%ld", &n);
	return n;
}

static void killed_client(const char *mount, const char *path)
{
	const char *self = "/proc/self/exe"; /* argv[0] may have come from PATH */
	long before = usrbio_iovs(mount);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, "--child", path, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
	      "a client with a device iov and reads in flight is killed", status);
	long after = -1;
	for (int i = 0; i < 100 && (after = usrbio_iovs(mount)) != before; i++)
		usleep(50000);
	check(after == before, "kvc-fuse dropped its device iov", after);
}

int main(int argc, char **argv)
{
	char mount[4096];
	if (argc == 3 && strcmp(argv[1], "--child") == 0 &&
	    kvc_extract_mount_point(mount, sizeof(mount), argv[2]) >= 0)
		return child(mount, argv[2]);
	if (argc != 2 || kvc_extract_mount_point(mount, sizeof(mount), argv[1]) < 0) {
		fprintf(stderr, "usage: gpu_device FILE (on a kvcfs mount)\n");
		return 2;
	}
	if (!kvc_gpu_available() || !kvc_cuda_get()) {
		printf("SKIP: no GPU here (%s)\n", kvc_gpu_last_error());
		return 77;
	}
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	struct kvc_iov *host;
	struct kvc_ring *wring, *rring;
	if (fd < 0 || kvc_fd_register(fd, 0) < 0 ||
	    kvc_iov_create(&host, mount, FILE_BYTES, 0, -1, NULL) < 0 ||
	    kvc_ring_create(&wring, mount, PAGES + 8, false, 0, 0, 0, -1, 0) < 0 ||
	    kvc_ring_create(&rring, mount, PAGES + 8, true, 0, 0, 0, -1, 0) < 0) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	uint8_t *expect = malloc(FILE_BYTES), *h = kvc_iov_base(host);
	srandom(7);
	for (size_t i = 0; i < FILE_BYTES; i += 4) {
		long r = random();
		memcpy(expect + i, &r, FILE_BYTES - i < 4 ? FILE_BYTES - i : 4);
	}
	memcpy(h, expect, FILE_BYTES);
	struct io whole[3] = {{h, 0, 32 * MIB, host}, {h + 32 * MIB, 32 * MIB, 32 * MIB, host},
	                      {h + 64 * MIB, 64 * MIB, FILE_BYTES - 64 * MIB, host}};
	check(run(wring, false, fd, whole, 3) == 0, "random bytes written through a ring", 0);
	reads_into_device(mount, fd, expect, rring, host);
	writes_from_device(mount, argv[1], expect);
	if (kvc_gpu_device_count() >= 2)
		two_gpus(mount, fd, expect, rring);
	else
		printf("# one GPU: the two-GPU batch is not run\n");
	killed_client(mount, argv[1]);
	memset(h, 0, MIB);
	struct io again = {h, 5 * MIB, MIB, host};
	check(run(rring, true, fd, &again, 1) == 0 && memcmp(h, expect + 5 * MIB, MIB) == 0,
	      "kvc-fuse serves the next round trip", 0);
	kvc_ring_destroy(wring);
	kvc_ring_destroy(rring);
	kvc_iov_destroy(host);
	kvc_fd_deregister(fd);
	close(fd);
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}

#else

int main(void)
{
	printf("SKIP: built without CUDA (meson option cuda)\n");
	return 77;
}

#endif
