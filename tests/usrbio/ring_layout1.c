/*
 * ring_layout1: a client of ring layout 1 (a libkvc from before entries
 * carried tags, src/core/ring.h), speaking the control protocol itself.
 * Its completions are indexed by slot, so kvc-fuse must run its batches
 * one at a time and complete them in order. Several submissions are
 * queued without waiting (each one rung at once, as that libkvc did),
 * twice around the ring, rounds of large reads followed by rounds of
 * small ones (which would complete first if batches overlapped); every
 * completion must carry its entry's slot, come in submission order, and
 * have read its bytes.
 *
 *   ring_layout1 DIR    DIR: a directory on a kvcfs mount
 *
 * Prints "ok N - what" or "not ok N - what" per check; exits 1 on any
 * failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvc/usrbio.h"
#include "check.h"
#include "raw_control.h"

#define ENTRIES 16u
#define BLOCK (1u << 20) /* each entry's share of the file and the iov */
#define SMALL 4096u        /* odd rounds read this much of it: they end first */
#define BLOCKS 40u /* read in rounds of ROUND, more than twice the ring */
#define ROUND 5u

/* Entry e's read: all of its share in even rounds, SMALL in odd ones. */
static uint32_t length(uint32_t e)
{
	return (e / ROUND) % 2 ? SMALL : BLOCK;
}

/* Wait (10 s at most) until `count` completions past cq_head are there. */
static bool wait_completions(struct kvc_ring_shared *sh, uint32_t count)
{
	for (int i = 0; i < 10000; i++) {
		uint32_t ready = atomic_load(&sh->cq_tail) - atomic_load(&sh->cq_head);
		if (ready >= count)
			return true;
		usleep(1000);
	}
	return false;
}

int main(int argc, char **argv)
{
	char mount[PATH_MAX], path[PATH_MAX];
	struct raw r;
	if (argc != 2 || kvc_extract_mount_point(mount, sizeof(mount), argv[1]) < 0) {
		fprintf(stderr, "usage: ring_layout1 DIR (a directory on a kvcfs mount)\n");
		return 2;
	}
	/* The file: block b holds the byte b + 1. */
	snprintf(path, sizeof(path), "%s/layout1-file", argv[1]);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	static uint8_t block[BLOCK];
	for (uint32_t b = 0; b < BLOCKS && fd >= 0; b++) {
		memset(block, (int)(b + 1), BLOCK);
		if (pwrite(fd, block, BLOCK, (off_t)b * BLOCK) != BLOCK)
			failures++;
	}
	long rc = fd < 0 ? -errno : raw_connect(&r, mount);
	check(rc == 0, "file and control connection", rc);
	if (rc < 0) {
		unlink(path);
		return 1;
	}
	struct kvc_msg_fd_register fr = {.client_fd = 1000};
	struct kvc_msg_fd_register_reply frr;
	rc = raw_call(&r, KVC_MSG_FD_REGISTER, &fr, sizeof(fr), &fd, 1, &frr, sizeof(frr));
	int shm = memfd_create("layout1-iov", MFD_CLOEXEC);
	size_t iov_bytes = (size_t)BLOCKS * BLOCK;
	uint8_t *iov_mem = MAP_FAILED;
	if (shm >= 0 && ftruncate(shm, (off_t)iov_bytes) == 0)
		iov_mem = mmap(NULL, iov_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
	struct kvc_msg_iov_register iv = {.size = iov_bytes};
	struct kvc_msg_handle iov = {0};
	if (rc == 0)
		rc = iov_mem == MAP_FAILED ? -ENOMEM
		   : raw_call(&r, KVC_MSG_IOV_REGISTER, &iv, sizeof(iv), &shm, 1, &iov, sizeof(iov));
	check(rc == 0, "registered file and iov", rc);

	struct kvc_ring_shared *sh = NULL;
	int memfd = raw_ring_memory(ENTRIES, true, &sh);
	if (memfd >= 0)
		sh->layout = KVC_RING_LAYOUT_ORDERED;
	struct kvc_msg_ring_register m = {.entries = ENTRIES, .for_read = 1};
	int doorbell = -1;
	uint32_t handle;
	if (rc == 0)
		rc = memfd < 0 ? memfd : raw_ring_register(&r, memfd, &m, &doorbell, &handle);
	check(rc == 0, "a layout-1 ring", rc);
	if (rc < 0) {
		unlink(path);
		return 1;
	}

	/* Rounds of ROUND reads, each rung at once, up to ENTRIES - ROUND
	 * outstanding (the ring's rule); reaped in order as they come. */
	uint32_t submitted = 0, reaped = 0, bad_index = 0, bad_order = 0, bad_result = 0;
	while (reaped < BLOCKS) {
		while (submitted < BLOCKS && submitted - reaped + ROUND <= ENTRIES) {
			uint32_t tail = atomic_load(&sh->sq_tail), i = 0;
			for (; i < ROUND && submitted < BLOCKS; i++, submitted++)
				kvc_ring_sqes(sh)[(tail + i) & (ENTRIES - 1)] = (struct kvc_ring_sqe){
					.iov_offset = (uint64_t)submitted * BLOCK,
					.file_offset = (uint64_t)submitted * BLOCK, .length = length(submitted),
					.userdata = submitted, .fd = 1000, .iov_handle = iov.handle,
					.op = KVC_RING_READ}; /* tag 0: layout 1 */
			atomic_store(&sh->sq_tail, tail + i);
			raw_doorbell(doorbell);
			usleep(500); /* taken before the next round comes */
		}
		if (!wait_completions(sh, 1))
			break;
		uint32_t head = atomic_load(&sh->cq_head), tail = atomic_load(&sh->cq_tail);
		for (; head != tail; head++, reaped++) {
			const struct kvc_ring_cqe *c = &kvc_ring_cqes(sh, ENTRIES)[head & (ENTRIES - 1)];
			bad_index += c->index != (reaped & (ENTRIES - 1)); /* its slot */
			bad_order += c->userdata != reaped;
			bad_result += c->result != (int64_t)length(reaped);
		}
		atomic_store(&sh->cq_head, head);
	}
	check(reaped == BLOCKS, "every entry completed", reaped);
	check(bad_index == 0, "each completion indexed by its entry's slot", bad_index);
	check(bad_order == 0, "completions in submission order", bad_order);
	check(bad_result == 0, "each read whole", bad_result);
	uint32_t bad_bytes = 0;
	for (uint32_t b = 0; b < BLOCKS; b++)
		for (uint32_t i = 0; i < length(b); i++)
			bad_bytes += iov_mem[(size_t)b * BLOCK + i] != (uint8_t)(b + 1);
	check(bad_bytes == 0, "every block's bytes", bad_bytes);
	close(doorbell);
	close(memfd);
	close(r.sock);
	close(shm);
	close(fd);
	unlink(path);
	printf("%d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
