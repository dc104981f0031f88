/*
 * ring_roundtrip: moves a file's bytes through USRBIO rings (native API).
 *
 *   ring_roundtrip write FILE REFERENCE SIZE SEED RINGS
 *       fill FILE (on a kvcfs mount) with SIZE random bytes through RINGS
 *       write rings on as many threads, in I/Os of random sizes and
 *       unaligned offsets; keep a copy in the local file REFERENCE
 *   ring_roundtrip read FILE REFERENCE SEED RINGS
 *       read all of FILE through RINGS read rings in random pieces and
 *       compare with REFERENCE
 *
 * Exit 0 when every I/O completed with its full length and (read) every
 * byte matched; otherwise print what went wrong and exit 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvc/usrbio.h"

#define DEPTH 32
#define MAX_IO (5u << 20)
#define MAX_EXTRA 1000 /* next_length adds up to MAX_EXTRA - 1 bytes */
#define MAX_SKEW 4096  /* an io starts up to MAX_SKEW - 1 bytes into its slot */

struct job {
	const char *mount;
	int fd;
	uint8_t *expected; /* whole-file reference in memory */
	uint64_t start, end; /* this thread's part of the file */
	unsigned seed;
	bool read;
	int failures;
};

static uint64_t next_length(unsigned *seed, uint64_t left)
{
	static const uint64_t sizes[] = {1, 100, 4096, 65537, 1 << 20, (1 << 20) + 3, 3 << 20,
	                                 MAX_IO};
	uint64_t len = sizes[rand_r(seed) % 8]; /* two statements: the same order in every build */
	len += (uint64_t)(rand_r(seed) % MAX_EXTRA);
	return len < left ? len : left;
}

/* Run one thread's part through its own ring and iov. */
static void *run(void *arg)
{
	struct job *j = arg;
	struct kvc_iov *iov = NULL;
	struct kvc_ring *ring = NULL;
	/* The longest io at the farthest start fits its slot: a slot's io
	 * never reaches the next one's bytes (nor past the iov's end). */
	size_t slot_size = MAX_IO + MAX_EXTRA + MAX_SKEW;
	int rc = kvc_iov_create(&iov, j->mount, slot_size * DEPTH, 0, -1, NULL);
	if (rc == 0) /* no other process opens it: a killed run leaves no name behind */
		rc = kvc_iov_unlink(iov);
	if (rc == 0)
		rc = kvc_ring_create(&ring, j->mount, DEPTH, j->read, 0, 0, 0, -1, 0);
	if (rc < 0) {
		fprintf(stderr, "setup: %s\n", strerror(-rc));
		j->failures++;
		goto out;
	}
	uint8_t *base = kvc_iov_base(iov);
	uint64_t offsets[DEPTH], lengths[DEPTH];
	uint64_t pos = j->start;
	int in_flight = 0;
	bool free_slot[DEPTH];
	memset(free_slot, 1, sizeof(free_slot));
	while (pos < j->end || in_flight > 0) {
		int queued = 0;
		for (int s = 0; s < DEPTH && pos < j->end; s++) {
			if (!free_slot[s])
				continue;
			uint64_t len = next_length(&j->seed, j->end - pos);
			/* An unaligned place in the iov too. */
			uint8_t *ptr = base + (size_t)s * slot_size + (size_t)(rand_r(&j->seed) % MAX_SKEW);
			if (ptr + len > base + (size_t)(s + 1) * slot_size) {
				fprintf(stderr, "slot %d overrun: %llu bytes at %zu\n", s,
				        (unsigned long long)len, (size_t)(ptr - base));
				j->failures++;
				goto out;
			}
			if (!j->read)
				memcpy(ptr, j->expected + pos, len);
			int idx = kvc_ring_prep(ring, iov, j->read, ptr, j->fd, pos, len,
			                        (void *)(uintptr_t)(s + 1));
			if (idx < 0) {
				fprintf(stderr, "prep at %llu: %s\n", (unsigned long long)pos, strerror(-idx));
				j->failures++;
				goto out;
			}
			offsets[s] = pos;
			lengths[s] = len;
			free_slot[s] = false;
			/* remember where the bytes are for the read check */
			offsets[s] |= (uint64_t)(ptr - base - (size_t)s * slot_size) << 48;
			pos += len;
			in_flight++;
			queued++;
		}
		if (queued)
			kvc_ring_submit(ring);
		struct kvc_completion done[DEPTH];
		int got = kvc_ring_wait(ring, done, DEPTH, 1, NULL);
		if (got < 0) {
			fprintf(stderr, "wait: %s\n", strerror(-got));
			j->failures++;
			goto out;
		}
		for (int i = 0; i < got; i++) {
			int s = (int)(uintptr_t)done[i].userdata - 1;
			uint64_t off = offsets[s] & ((1ull << 48) - 1);
			size_t skew = (size_t)(offsets[s] >> 48);
			if (done[i].result != (int64_t)lengths[s]) {
				fprintf(stderr, "%s at %llu len %llu: result %lld\n", j->read ? "read" : "write",
				        (unsigned long long)off, (unsigned long long)lengths[s],
				        (long long)done[i].result);
				j->failures++;
			} else if (j->read &&
			           memcmp(base + (size_t)s * slot_size + skew, j->expected + off,
			                  lengths[s]) != 0) {
				fprintf(stderr, "read at %llu len %llu: bytes differ\n",
				        (unsigned long long)off, (unsigned long long)lengths[s]);
				j->failures++;
			}
			free_slot[s] = true;
			in_flight--;
		}
	}
out:
	kvc_ring_destroy(ring);
	kvc_iov_destroy(iov);
	return NULL;
}

static int load_or_make_reference(const char *path, bool make, uint64_t size, unsigned seed,
                                  uint8_t **out, uint64_t *size_out)
{
	if (make) {
		uint8_t *buf = malloc(size ? size : 1);
		for (uint64_t i = 0; i < size; i++) {
			seed = seed * 1103515245u + 12345u;
			buf[i] = (uint8_t)(seed >> 16);
		}
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(buf, 1, size, f) != size) {
			perror(path);
			return -1;
		}
		fclose(f);
		*out = buf;
		*size_out = size;
		return 0;
	}
	struct stat st;
	FILE *f = fopen(path, "rb");
	if (!f || fstat(fileno(f), &st) < 0) {
		perror(path);
		return -1;
	}
	*size_out = (uint64_t)st.st_size;
	*out = malloc(*size_out ? *size_out : 1);
	if (fread(*out, 1, *size_out, f) != *size_out) {
		perror(path);
		return -1;
	}
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	bool write_mode = argc == 7 && strcmp(argv[1], "write") == 0;
	bool read_mode = argc == 6 && strcmp(argv[1], "read") == 0;
	if (!write_mode && !read_mode) {
		fprintf(stderr, "usage: ring_roundtrip write FILE REFERENCE SIZE SEED RINGS\n"
		                "       ring_roundtrip read FILE REFERENCE SEED RINGS\n");
		return 2;
	}
	const char *file = argv[2], *reference = argv[3];
	uint64_t size = write_mode ? strtoull(argv[4], NULL, 0) : 0;
	unsigned seed = (unsigned)strtoul(argv[write_mode ? 5 : 4], NULL, 0);
	int rings = atoi(argv[write_mode ? 6 : 5]);
	char mount[4096];
	uint8_t *expected;
	if (rings < 1 || rings > 64 ||
	    load_or_make_reference(reference, write_mode, size, seed, &expected, &size) < 0)
		return 2;
	int fd = open(file, write_mode ? O_RDWR | O_CREAT | O_TRUNC : O_RDONLY, 0644);
	if (fd < 0) {
		perror(file);
		return 1;
	}
	int rc = kvc_extract_mount_point(mount, sizeof(mount), file);
	if (rc >= 0)
		rc = kvc_fd_register(fd, 0);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", file, strerror(-rc));
		return 1;
	}
	pthread_t threads[64];
	struct job jobs[64];
	int failures = 0;
	for (int i = 0; i < rings; i++) {
		jobs[i] = (struct job){.mount = mount, .fd = fd, .expected = expected,
		                       .start = size * (uint64_t)i / (uint64_t)rings,
		                       .end = size * (uint64_t)(i + 1) / (uint64_t)rings,
		                       .seed = seed + (unsigned)i, .read = read_mode};
		pthread_create(&threads[i], NULL, run, &jobs[i]);
	}
	for (int i = 0; i < rings; i++) {
		pthread_join(threads[i], NULL);
		failures += jobs[i].failures;
	}
	/* The size ring writes raised is exact for everyone after fsync. */
	if (write_mode && kvc_fd_sync(fd) < 0) {
		perror("fsync");
		failures++;
	}
	kvc_fd_deregister(fd);
	close(fd);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	return failures ? 1 : 0;
}
