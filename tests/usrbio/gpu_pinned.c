/*
 * gpu_pinned: KV pages from kvcfs into GPU memory through a pinned iov
 * (include/kvc/gpu.h), checked byte for byte, and back.
 *
 *   gpu_pinned FILE      (FILE on a kvcfs mount; created)
 *
 * Writes PAGES random pages through a write ring; reads them through a
 * read ring into a pinned iov; copies them to device memory with
 * kvc_iov_to_device; copies the device buffer back with the CUDA runtime
 * and compares. Then device -> iov (kvc_iov_from_device) -> file through a
 * ring, compared through the mount. Exit 77 (and "SKIP: ...") when there is
 * no CUDA runtime or device; 0 when every byte matched.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvc/gpu.h"
#include "kvc/usrbio.h"

#define PAGE (1u << 20)
#define PAGES 32

/* The few CUDA runtime calls the test itself needs, loaded like libkvc. */
struct cuda {
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*memcpy_)(void *, const void *, size_t, int);
	int (*sync)(void);
};

static int load_cuda(struct cuda *c)
{
	void *lib = dlopen("libcudart.so.13", RTLD_NOW);
	if (!lib)
		lib = dlopen("libcudart.so.12", RTLD_NOW);
	if (!lib)
		return -1;
	*(void **)&c->malloc_ = dlsym(lib, "cudaMalloc");
	*(void **)&c->free_ = dlsym(lib, "cudaFree");
	*(void **)&c->memcpy_ = dlsym(lib, "cudaMemcpy");
	*(void **)&c->sync = dlsym(lib, "cudaDeviceSynchronize");
	return c->malloc_ && c->free_ && c->memcpy_ && c->sync ? 0 : -1;
}

static int ring_pages(struct kvc_ring *ring, struct kvc_iov *iov, bool read, int fd)
{
	uint8_t *base = kvc_iov_base(iov);
	for (int i = 0; i < PAGES; i++)
		if (kvc_ring_prep(ring, iov, read, base + (size_t)i * PAGE, fd, (uint64_t)i * PAGE,
		                  PAGE, NULL) < 0)
			return -1;
	kvc_ring_submit(ring);
	struct kvc_completion done[PAGES];
	for (int got = 0; got < PAGES;) {
		int n = kvc_ring_wait(ring, done, PAGES, PAGES - got, NULL);
		if (n < 0)
			return -1;
		for (int k = 0; k < n; k++)
			if (done[k].result != PAGE)
				return -1;
		got += n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct cuda cuda;
	char mount[4096];
	if (argc != 2 || kvc_extract_mount_point(mount, sizeof(mount), argv[1]) < 0) {
		fprintf(stderr, "usage: gpu_pinned FILE (on a kvcfs mount)\n");
		return 2;
	}
	if (!kvc_gpu_available() || load_cuda(&cuda) < 0) {
		printf("SKIP: no CUDA runtime or no GPU on this machine\n");
		return 77;
	}
	size_t bytes = (size_t)PAGES * PAGE;
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	struct kvc_iov *iov;
	struct kvc_ring *wring, *rring;
	if (fd < 0 || kvc_fd_register(fd, 0) < 0 ||
	    kvc_iov_create(&iov, mount, bytes, 0, -1, NULL) < 0 ||
	    kvc_ring_create(&wring, mount, PAGES, false, 0, 0, 0, -1, 0) < 0 ||
	    kvc_ring_create(&rring, mount, PAGES, true, 0, 0, 0, -1, 0) < 0) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	uint8_t *base = kvc_iov_base(iov), *expect = malloc(bytes), *back = malloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		expect[i] = (uint8_t)(i * 131 + i / 4093);
	memcpy(base, expect, bytes);
	int rc = kvc_iov_pin(iov);
	printf("%s - pin the iov (%d %s)\n", rc == 0 ? "ok" : "not ok", rc, kvc_gpu_last_error());
	int failures = rc != 0;
	failures += ring_pages(wring, iov, false, fd) != 0;
	memset(base, 0, bytes);
	failures += ring_pages(rring, iov, true, fd) != 0;
	void *device = NULL;
	failures += cuda.malloc_(&device, bytes) != 0;
	struct kvc_gpu_copy copies[PAGES];
	for (int i = 0; i < PAGES; i++) /* pages land reversed on the device */
		copies[i] = (struct kvc_gpu_copy){(uint64_t)i * PAGE,
		                                  (uint8_t *)device + (size_t)(PAGES - 1 - i) * PAGE, PAGE};
	failures += kvc_iov_to_device(iov, copies, PAGES, NULL) != 0;
	failures += cuda.sync() != 0;
	failures += cuda.memcpy_(back, device, bytes, 2 /* device to host */) != 0;
	int same = 1;
	for (int i = 0; i < PAGES; i++)
		same &= memcmp(back + (size_t)(PAGES - 1 - i) * PAGE, expect + (size_t)i * PAGE, PAGE) == 0;
	printf("%s - file -> ring -> pinned iov -> GPU: every byte\n", same ? "ok" : "not ok");
	failures += !same;
	/* And back: device -> iov -> file, read through the mount. */
	memset(base, 0, bytes);
	failures += kvc_iov_from_device(iov, copies, PAGES, NULL) != 0;
	failures += cuda.sync() != 0;
	failures += ring_pages(wring, iov, false, fd) != 0;
	kvc_fd_sync(fd);
	same = pread(fd, back, bytes, 0) == (ssize_t)bytes && memcmp(back, expect, bytes) == 0;
	printf("%s - GPU -> pinned iov -> ring -> file: every byte\n", same ? "ok" : "not ok");
	failures += !same;
	failures += kvc_iov_pin(iov) != -EALREADY;
	failures += kvc_iov_unpin(iov) != 0;
	cuda.free_(device);
	kvc_ring_destroy(wring);
	kvc_ring_destroy(rring);
	kvc_iov_destroy(iov);
	kvc_fd_deregister(fd);
	close(fd);
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
