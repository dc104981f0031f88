/*
 * hf3fs_semantics: 3FS behaviours of hf3fs_usrbio.h that its users rely
 * on, through that header only (built and run against libkvc unchanged).
 *
 *   hf3fs_semantics bigio FILE     128 MiB I/Os (one ring entry each):
 *                                  write, read back, compare
 *   hf3fs_semantics regfd FILE     hf3fs_reg_fd / hf3fs_dereg_fd / prep_io
 *                                  numbers as 3FS gives and takes them
 *   hf3fs_semantics iovloop DIR N  create and destroy N iovs; prints each
 *                                  one's id ("iov <hex>") so the caller can
 *                                  check /dev/shm kept none of them
 *
 * FILE is created on a kvcfs mount; DIR is any directory in one. Prints
 * "ok - what" or "not ok - what" per check; exits 1 on any failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hf3fs_usrbio.h>

#define BIG (128ull << 20)

static int failures;

static void check(bool ok, const char *what, long got)
{
	if (!ok)
		failures++;
	printf("%s - %s (got %ld)\n", ok ? "ok" : "not ok", what, got);
}

/* Run one prepared entry; its result. */
static int64_t run_one(struct hf3fs_ior *ior)
{
	struct hf3fs_cqe cqe;
	int rc = hf3fs_submit_ios(ior);
	if (rc == 0)
		rc = hf3fs_wait_for_ios(ior, &cqe, 1, 1, NULL);
	return rc == 1 ? cqe.result : rc < 0 ? rc : -EIO;
}

static int bigio(const char *mount, const char *file)
{
	struct hf3fs_iov iov;
	struct hf3fs_ior wior, rior;
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	int reg = fd >= 0 ? hf3fs_reg_fd(fd, 0) : EBADF;
	check(reg <= 0, "reg_fd gives a value <= 0", reg);
	if (hf3fs_iovcreate(&iov, mount, 2 * BIG, 0, -1) < 0 ||
	    hf3fs_iorcreate4(&wior, mount, 4, false, 0, 0, -1, 0) < 0 ||
	    hf3fs_iorcreate4(&rior, mount, 4, true, 0, 0, -1, 0) < 0 || reg > 0) {
		check(false, "setup", errno);
		return 1;
	}
	uint8_t *out = iov.base, *in = iov.base + BIG;
	for (size_t i = 0; i < BIG; i += 8)
		*(uint64_t *)(out + i) = i * 0x9e3779b97f4a7c15ull;
	/* 3FS's users pass what hf3fs_reg_fd returned to prep_io. */
	int slot = hf3fs_prep_io(&wior, &iov, false, out, reg, 4096, BIG, NULL);
	check(slot >= 0, "prep of a 128 MiB write, on reg_fd's value", slot);
	int64_t result = slot >= 0 ? run_one(&wior) : slot;
	check(result == (int64_t)BIG, "the write completes once, with 128 MiB", (long)result);
	struct stat st;
	check(fstat(fd, &st) == 0 && (uint64_t)st.st_size == BIG + 4096,
	      "the file grew to offset + 128 MiB", (long)st.st_size);
	memset(in, 0, BIG);
	slot = hf3fs_prep_io(&rior, &iov, true, in, fd, 4096, BIG, NULL);
	check(slot >= 0, "prep of a 128 MiB read, on the fd itself", slot);
	result = slot >= 0 ? run_one(&rior) : slot;
	check(result == (int64_t)BIG, "the read completes once, with 128 MiB", (long)result);
	check(memcmp(in, out, BIG) == 0, "the bytes read back are the bytes written", 0);
	/* Past the end of the file a read stops there, as pread does. */
	slot = hf3fs_prep_io(&rior, &iov, true, in, fd, BIG - 100, BIG, NULL);
	result = slot >= 0 ? run_one(&rior) : slot;
	check(result == 4096 + 100, "a 128 MiB read over the end returns what is there",
	      (long)result);
	check(memcmp(in, out + BIG - 4096 - 100, 4096 + 100) == 0, "and those bytes match", 0);
	hf3fs_iordestroy(&wior);
	hf3fs_iordestroy(&rior);
	hf3fs_iovdestroy(&iov);
	hf3fs_dereg_fd(fd);
	close(fd);
	return failures ? 1 : 0;
}

static int regfd(const char *mount, const char *file)
{
	struct hf3fs_iov iov;
	struct hf3fs_ior ior;
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pwrite(fd, "0123456789", 10, 0) != 10 ||
	    hf3fs_iovcreate(&iov, mount, 1 << 20, 0, -1) < 0 ||
	    hf3fs_iorcreate(&ior, mount, 8, true, 0, -1) < 0) {
		check(false, "setup", errno);
		return 1;
	}
	int reg = hf3fs_reg_fd(fd, 0);
	check(reg < 0, "reg_fd gives minus a duplicate of the fd", reg);
	check(reg < 0 && fcntl(-reg, F_GETFD) >= 0, "the duplicate is open", -reg);
	check(hf3fs_reg_fd(fd, 0) == EINVAL, "registering the same fd again: EINVAL", 0);
	check(hf3fs_reg_fd(-reg, 0) == EINVAL, "registering the duplicate: EINVAL", 0);
	check(hf3fs_reg_fd(-1, 0) == EBADF, "registering -1: EBADF", 0);
	int local = open("/proc/self/status", O_RDONLY);
	check(hf3fs_reg_fd(local, 0) == EBADF, "registering a file off the mount: EBADF", 0);
	close(local);
	int numbers[3] = {reg, fd, -reg};
	const char *names[3] = {"reg_fd's value", "the fd", "the duplicate"};
	for (int i = 0; i < 3; i++) {
		char what[96];
		int slot = hf3fs_prep_io(&ior, &iov, true, iov.base, numbers[i], 0, 10, NULL);
		int64_t result = slot >= 0 ? run_one(&ior) : slot;
		snprintf(what, sizeof(what), "prep_io on %s reads the file", names[i]);
		check(result == 10 && memcmp(iov.base, "0123456789", 10) == 0, what, (long)result);
	}
	check(hf3fs_prep_io(&ior, &iov, true, iov.base, INT_MIN, 0, 10, NULL) == -EINVAL,
	      "prep_io on INT_MIN: -EINVAL", 0);
	check(hf3fs_prep_io(&ior, &iov, true, iov.base + (1 << 20) - 4, fd, 0, 10, NULL) == -EINVAL,
	      "a buffer leaving the iov: -EINVAL (as 3FS)", 0);
	/* Closed, the fd's number still names the file until deregistered. */
	close(fd);
	int slot = hf3fs_prep_io(&ior, &iov, true, iov.base, fd, 2, 4, NULL);
	int64_t result = slot >= 0 ? run_one(&ior) : slot;
	check(result == 4 && memcmp(iov.base, "2345", 4) == 0,
	      "after close, the registered number still reads its file", (long)result);
	hf3fs_dereg_fd(fd);
	check(hf3fs_prep_io(&ior, &iov, true, iov.base, reg, 0, 10, NULL) == -EBADF,
	      "after dereg_fd, reg_fd's value is refused: -EBADF", 0);
	check(hf3fs_prep_io(&ior, &iov, true, iov.base, fd, 0, 10, NULL) == -EBADF,
	      "and the fd too", 0);
	check(fcntl(-reg, F_GETFD) < 0 && errno == EBADF, "the duplicate is closed", -reg);
	fd = open(file, O_RDONLY);
	reg = hf3fs_reg_fd(fd, 0);
	check(reg <= 0, "a file registers again after dereg_fd", reg);
	hf3fs_dereg_fd(-reg); /* either number drops both */
	check(hf3fs_prep_io(&ior, &iov, true, iov.base, fd, 0, 10, NULL) == -EBADF,
	      "dereg_fd of the duplicate drops the fd too", 0);
	hf3fs_iordestroy(&ior);
	hf3fs_iovdestroy(&iov);
	close(fd);
	return failures ? 1 : 0;
}

static int iovloop(const char *mount, int count)
{
	for (int i = 0; i < count; i++) {
		struct hf3fs_iov iov;
		char name[64];
		int rc = hf3fs_iovcreate(&iov, mount, 64 << 10, 0, -1);
		if (rc < 0) {
			check(false, "iovcreate", rc);
			return 1;
		}
		iov.base[0] = 1; /* the memory is there */
		int n = snprintf(name, sizeof(name), "/dev/shm/kvc-iov-");
		for (int b = 0; b < 16; b++)
			n += snprintf(name + n, sizeof(name) - (size_t)n, "%02x", (uint8_t)iov.id[b]);
		printf("iov %s\n", name + strlen("/dev/shm/kvc-iov-"));
		if (access(name, F_OK) != 0)
			check(false, "a live iov has its name (to be opened by id)", i);
		/* Every third one is opened by id meanwhile: the opener's
		 * destroy leaves the name to the creator. */
		if (i % 3 == 0) {
			struct hf3fs_iov opened;
			rc = hf3fs_iovopen(&opened, (uint8_t *)iov.id, mount, 64 << 10, 0, -1);
			if (rc == 0)
				hf3fs_iovdestroy(&opened);
			if (rc < 0 || access(name, F_OK) != 0)
				check(false, "an opener's destroy keeps the creator's name", rc);
		}
		hf3fs_iovdestroy(&iov);
		if (access(name, F_OK) == 0)
			check(false, "iovdestroy removes the name", i);
	}
	check(failures == 0, "iovs created and destroyed, none left in /dev/shm", count);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	char mount[256];
	if (argc < 3 || hf3fs_extract_mount_point(mount, sizeof(mount), argv[2]) < 0) {
		fprintf(stderr, "usage: hf3fs_semantics bigio|regfd FILE | iovloop DIR N\n"
		                "(FILE, DIR on a kvcfs mount)\n");
		return 2;
	}
	if (strcmp(argv[1], "bigio") == 0)
		return bigio(mount, argv[2]);
	if (strcmp(argv[1], "regfd") == 0)
		return regfd(mount, argv[2]);
	if (strcmp(argv[1], "iovloop") == 0 && argc == 4)
		return iovloop(mount, atoi(argv[3]));
	return 2;
}
