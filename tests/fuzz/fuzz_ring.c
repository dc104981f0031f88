/* libFuzzer harness: kvc-fuse's ring service taking entries from a ring
 * whose memory holds arbitrary bytes. Per input: the input as a key
 * descriptor (kvc_ring_keys_decode, every key op); then a client
 * registers an iov (handle 0, 1 MiB), a file twice (client fds 1000
 * read-write, 1001 read-only; FILE_SIZE bytes), a key directory (client
 * fd 1002) and one ring shaped by the input's first 4
 * bytes (entries 1-16, direction, io_depth, flags); then each round of
 * the input overwrites the ring's indices (sq_tail, sq_head, cq_tail,
 * cq_head, 16 bytes) and up to `entries` submission entries (48 bytes
 * each) and the first KEY_AREA bytes of the iov (key descriptors: key
 * entries name them), and the service runs the ring as a worker would
 * (key ops then reach kvc-meta, which cannot be reached). Entries must be
 * refused or run (storage cannot be reached: they fail with EIO), never
 * crash the service, and completions must stay inside the ring. */
#include "fuzz_usrbio.h"

#include "fuse/ring_keys.h"

#define IOV_SIZE (1u << 20)
#define KEY_AREA 2048u

static uint8_t *iov_memory;

/* The client's registrations; the ring's memory, mapped here too. */
static struct kvc_ring_server_ring *register_all(const uint8_t shape[4],
                                                 struct kvc_ring_shared **shared,
                                                 uint32_t *entries)
{
	struct kvc_msg_iov_register iov = {.size = IOV_SIZE};
	int fd = fuzz_memory(IOV_SIZE, 0, 0);
	iov_memory = mmap(NULL, IOV_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (iov_memory == MAP_FAILED ||
	    fuzz_frame(KVC_MSG_IOV_REGISTER, &iov, sizeof(iov), &fd, 1) != 0)
		abort();
	char dir[128];
	snprintf(dir, sizeof(dir), "%s", fuzz_file);
	*strrchr(dir, '/') = '\0';
	struct kvc_msg_fd_register keys = {.client_fd = 1002};
	fd = open(dir, O_PATH | O_DIRECTORY);
	if (fuzz_frame(KVC_MSG_FD_REGISTER, &keys, sizeof(keys), &fd, 1) != 0)
		abort();
	for (int i = 0; i < 2; i++) {
		struct kvc_msg_fd_register file = {.client_fd = 1000 + i};
		fd = open(fuzz_file, i ? O_RDONLY : O_RDWR);
		if (fuzz_frame(KVC_MSG_FD_REGISTER, &file, sizeof(file), &fd, 1) != 0)
			abort();
	}
	*entries = 1u << (shape[0] % 5);
	int32_t depth = (int8_t)shape[2] % (int32_t)(*entries + 1);
	struct kvc_msg_ring_register ring = {.entries = *entries, .for_read = shape[1] & 1,
	                                     .io_depth = depth, .timeout_ms = shape[1] >> 1,
	                                     .flags = shape[3] & 3};
	fd = fuzz_memory(0, *entries, 1);
	*shared = mmap(NULL, kvc_ring_bytes(*entries), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*shared == MAP_FAILED || fuzz_frame(KVC_MSG_RING_REGISTER, &ring, sizeof(ring), &fd, 1))
		abort();
	struct kvc_usrbio_client *client = fuzz_conn.service_state;
	return client->rings[0];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fuzz_conn.fd)
		fuzz_usrbio_setup();
	struct kvc_ring_key_desc desc;
	struct kvc_ring_key_seg segs[KVC_RING_KEY_MAX_SEGS];
	uint8_t raw[KVC_RING_KEY_DESC_MAX];
	size_t take = size < sizeof(raw) ? size : sizeof(raw);
	memcpy(raw, data, take);
	for (uint32_t op = KVC_RING_KEY_PUT; op <= KVC_RING_KEY_WAIT; op++)
		if (kvc_ring_keys_decode(raw, size, op, &desc, segs) == 0 &&
		    (desc.nsegs > KVC_RING_KEY_MAX_SEGS || desc.name_len == 0 ||
		     desc.name_len > KVC_RING_KEY_MAX_NAME || memchr(desc.name, '/', desc.name_len)))
			abort();
	if (size < 4)
		return 0;
	struct kvc_ring_shared *sh;
	uint32_t entries;
	struct kvc_ring_server_ring *ring = register_all(data, &sh, &entries);
	size_t at = 4;
	while (at + 16 <= size) {
		uint32_t index[4];
		memcpy(index, data + at, sizeof(index));
		at += sizeof(index);
		for (uint32_t i = 0; i < entries && at + sizeof(struct kvc_ring_sqe) <= size; i++) {
			memcpy(&kvc_ring_sqes(sh)[i], data + at, sizeof(struct kvc_ring_sqe));
			at += sizeof(struct kvc_ring_sqe);
		}
		size_t area = size - at < KEY_AREA ? size - at : KEY_AREA;
		memcpy(iov_memory, data + at, area);
		at += area;
		atomic_store(&sh->sq_tail, index[0]);
		atomic_store(&sh->sq_head, index[1]);
		atomic_store(&sh->cq_tail, index[2]);
		atomic_store(&sh->cq_head, index[3]);
		kvc_ring_service_run(fuzz_usrbio.rings, ring);
		/* kvc-fuse took no more than the completion queue could hold. */
		if (atomic_load(&sh->cq_tail) - index[2] > entries)
			abort();
	}
	munmap(sh, kvc_ring_bytes(entries));
	munmap(iov_memory, IOV_SIZE);
	fuzz_disconnect();
	return 0;
}
