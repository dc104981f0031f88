/*
 * hf3fs_compat: a program written only against 3FS's hf3fs_usrbio.h, the
 * way the vLLM/SGLang hf3fs connectors use it, built and run against
 * libkvc unchanged.
 *
 *   hf3fs_compat FILE   (FILE on a kvcfs mount; created)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hf3fs_usrbio.h>

#define PAGE (256 << 10)
#define PAGES 64
#define BATCH 8

static int failures;

#define CHECK(cond, what) do { \
	if (cond) printf("ok - %s\n", what); \
	else { printf("not ok - %s (errno %d)\n", what, errno); failures++; } \
} while (0)

static int run_batches(struct hf3fs_ior *ior, struct hf3fs_iov *iov, bool read, int fd,
                       int first_page, int count)
{
	for (int b = 0; b < count; b += BATCH) {
		int n = count - b < BATCH ? count - b : BATCH;
		for (int i = 0; i < n; i++) {
			int page = first_page + b + i;
			int rc = hf3fs_prep_io(ior, iov, read, iov->base + (size_t)(b + i) * PAGE, fd,
			                       (size_t)page * PAGE, PAGE, (void *)(intptr_t)page);
			if (rc < 0)
				return rc;
		}
		hf3fs_submit_ios(ior);
		struct hf3fs_cqe cqes[BATCH];
		int got = 0;
		while (got < n) {
			int r = hf3fs_wait_for_ios(ior, cqes, BATCH, n - got, NULL);
			if (r < 0)
				return r;
			for (int i = 0; i < r; i++)
				if (cqes[i].result != PAGE)
					return cqes[i].result < 0 ? (int)cqes[i].result : -EIO;
			got += r;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	char mount[256];
	if (argc != 2) {
		fprintf(stderr, "usage: hf3fs_compat FILE\n");
		return 2;
	}
	int len = hf3fs_extract_mount_point(mount, sizeof(mount), argv[1]);
	CHECK(len == (int)strlen(mount) + 1, "extract_mount_point gives length + 1");
	char tiny[2] = "x";
	CHECK(hf3fs_extract_mount_point(tiny, sizeof(tiny), argv[1]) == len && tiny[0] == 'x',
	      "a buffer too small: the length + 1 all the same, buffer untouched");
	CHECK(hf3fs_extract_mount_point(mount, sizeof(mount), "/proc") == -1,
	      "extract_mount_point outside kvcfs gives -1");
	hf3fs_extract_mount_point(mount, sizeof(mount), argv[1]);
	int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)PAGES * PAGE * 2) == 0, "open and ftruncate the pool");
	CHECK(hf3fs_is_hf3fs(fd), "is_hf3fs");
	CHECK(!hf3fs_is_hf3fs(0) || isatty(0) == 0, "stdin is not hf3fs");
	CHECK(hf3fs_reg_fd(fd, 0) <= 0, "reg_fd gives a value <= 0");
	CHECK(hf3fs_reg_fd(-1, 0) > 0, "reg_fd of a bad fd gives a positive errno");

	struct hf3fs_iov iov;
	CHECK(hf3fs_iovcreate(&iov, mount, (size_t)PAGES * PAGE, 0, -1) == 0, "iovcreate");
	struct hf3fs_ior wior, rior, hior;
	CHECK(hf3fs_iorcreate4(&wior, mount, BATCH, false, 0, 0, -1, 0) == 0, "iorcreate4 write");
	CHECK(hf3fs_iorcreate3(&rior, mount, BATCH, true, 0, 0, 0, -1) == 0, "iorcreate3 read");
	if (failures) {
		printf("setup failed: stopping\n");
		return 1;
	}
	CHECK(hf3fs_io_entries(&wior) == BATCH, "io_entries");
	CHECK(hf3fs_ior_size(BATCH) > 0, "ior_size");
	CHECK(HF3FS_SUPER_MAGIC == 0x8f3f5fff, "HF3FS_SUPER_MAGIC is 3FS's");
	/* As in 3FS, a ring holds exactly the entries asked for. */
	struct hf3fs_ior odd;
	CHECK(hf3fs_iorcreate(&odd, mount, 5, true, 0, -1) == 0 && hf3fs_io_entries(&odd) == 5,
	      "a ring of 5 entries has 5");
	int preps = 0;
	while (preps < 6 && hf3fs_prep_io(&odd, &iov, true, iov.base, fd, 0, 1, NULL) >= 0)
		preps++;
	CHECK(preps == 5, "5 preps fit, the 6th is refused (-EAGAIN)");
	hf3fs_iordestroy(&odd);
	for (size_t i = 0; i < (size_t)PAGES * PAGE; i++)
		iov.base[i] = (uint8_t)(i * 13 + i / PAGE);
	uint8_t *expect = malloc((size_t)PAGES * PAGE);
	memcpy(expect, iov.base, (size_t)PAGES * PAGE);
	CHECK(run_batches(&wior, &iov, false, fd, 3, PAGES) == 0, "write pages in batches of 8");
	memset(iov.base, 0, (size_t)PAGES * PAGE);
	CHECK(run_batches(&rior, &iov, true, fd, 3, PAGES) == 0, "read them back");
	CHECK(memcmp(iov.base, expect, (size_t)PAGES * PAGE) == 0, "bytes match");
	CHECK(hf3fs_prep_io(&wior, &iov, false, iov.base, fd, 0, PAGE, NULL) >= 0 &&
	      hf3fs_submit_ios(&wior) == 0, "a write on the write ring");
	struct hf3fs_cqe c;
	CHECK(hf3fs_wait_for_ios(&wior, &c, 1, 1, NULL) == 1 && c.result == PAGE, "completes");

	/* A ring that forbids holes fails reading a never-written page. */
	CHECK(hf3fs_iorcreate4(&hior, mount, 4, true, 0, 0, -1, HF3FS_IOR_FORBID_READ_HOLES) == 0,
	      "iorcreate4 forbid holes");
	hf3fs_prep_io(&hior, &iov, true, iov.base, fd, (size_t)(PAGES + 10) * PAGE, PAGE, NULL);
	hf3fs_submit_ios(&hior);
	CHECK(hf3fs_wait_for_ios(&hior, &c, 1, 1, NULL) == 1 && c.result == -ENODATA,
	      "reading a hole: -ENODATA");
	hf3fs_prep_io(&rior, &iov, true, iov.base, fd, (size_t)(PAGES + 10) * PAGE, PAGE, NULL);
	hf3fs_submit_ios(&rior);
	CHECK(hf3fs_wait_for_ios(&rior, &c, 1, 1, NULL) == 1 && c.result == PAGE &&
	      iov.base[0] == 0 && iov.base[PAGE - 1] == 0, "a plain ring reads the hole as zeros");

	/* Open the same iov by id (as another client object would). */
	struct hf3fs_iov again;
	CHECK(hf3fs_iovopen(&again, (uint8_t *)iov.id, mount, (size_t)PAGES * PAGE, 0, -1) == 0,
	      "iovopen by id");
	again.base[5] = 0x5a;
	CHECK(iov.base[5] == 0x5a, "both map the same memory");
	hf3fs_iovdestroy(&again);
	hf3fs_iovunlink(&iov);
	CHECK(hf3fs_iovopen(&again, (uint8_t *)iov.id, mount, (size_t)PAGES * PAGE, 0, -1) == -ENOENT,
	      "after iovunlink the id is gone");
	/* The pages written above start at file page 3; the second range
	 * covers a whole 1 MiB chunk (pages 16-19) and one byte more. */
	size_t from[2] = {3 * PAGE + PAGE / 2, 16 * PAGE}, to[2] = {5 * PAGE, 20 * PAGE + 1};
	CHECK(hf3fs_punchhole(fd, 2, from, to, 0) == 0, "punchhole of two ranges");
	uint8_t *back = malloc(21 * PAGE);
	int same = pread(fd, back, 21 * PAGE, 3 * PAGE) == 21 * PAGE;
	for (size_t i = 0; same && i < 21 * PAGE; i++) {
		size_t at = i + 3 * PAGE;
		bool punched = (at >= from[0] && at < to[0]) || (at >= from[1] && at < to[1]);
		same = back[i] == (punched ? 0 : expect[i]);
	}
	CHECK(same, "punched ranges read as zeros, the rest is intact");
	free(back);
	CHECK(hf3fs_punchhole(fd, 1, to, from, 0) == EINVAL,
	      "punchhole with end < start: EINVAL (positive, as 3FS)");

	/* 3FS's GPU names: a host iov says so; without a GPU, device iovs are
	 * refused with -ENOTSUP, never made of host memory. */
	CHECK(hf3fs_iov_mem_type(&iov) == HF3FS_MEM_HOST && hf3fs_iov_device_id(&iov) == -1,
	      "a host iov is HF3FS_MEM_HOST with device id -1");
	CHECK(hf3fs_iovsync(&iov, 0) == 0, "iovsync");
	struct hf3fs_iov dev;
	int rc = hf3fs_iovcreate_device(&dev, mount, PAGE, 0, 0);
	if (!hf3fs_gdr_available()) {
		CHECK(hf3fs_gdr_device_count() == 0, "no GPU: gdr_device_count 0");
		CHECK(rc == -ENOTSUP, "no GPU: iovcreate_device -ENOTSUP");
		CHECK(hf3fs_iovwrap_device(&dev, (void *)4096, NULL, mount, PAGE, 0, 0) == -ENOTSUP,
		      "no GPU: iovwrap_device -ENOTSUP");
	} else {
		CHECK(rc == 0 && hf3fs_iov_mem_type(&dev) == HF3FS_MEM_DEVICE &&
		      hf3fs_iov_device_id(&dev) == 0, "iovcreate_device gives a device iov of GPU 0");
		if (rc == 0)
			hf3fs_iovdestroy(&dev);
		CHECK(hf3fs_iovcreate_device(&dev, mount, PAGE, 4096, 0) == -EINVAL,
		      "iovcreate_device with a block size: -EINVAL (as 3FS)");
	}
	CHECK(hf3fs_iovopen_device(&dev, (uint8_t *)iov.id, mount, PAGE, 0, 0) == -ENOTSUP,
	      "iovopen_device: -ENOTSUP");
	hf3fs_iordestroy(&wior);
	hf3fs_iordestroy(&rior);
	hf3fs_iordestroy(&hior);
	hf3fs_iovdestroy(&iov);
	hf3fs_dereg_fd(fd);
	close(fd);
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
