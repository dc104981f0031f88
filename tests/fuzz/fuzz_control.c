/* libFuzzer harness: kvc-fuse's USRBIO control handler (types 96-102 and
 * types it does not know) fed a sequence of frames with arbitrary bodies
 * and arbitrary descriptors passed along: shared memory sealed or not
 * (ring-shaped or not), a file of "the mount", an eventfd, /dev/null, a
 * pipe. Input: repeated (u8 type, u8 fds, u16 body_len, body bytes); the
 * fds byte: bits 0-1 how many (0-3), then 2 bits per fd for its kind
 * (0: sealed ring memory, 1: unsealed memory, 2: the file, 3: the next
 * fd byte's pick among eventfd, /dev/null, a pipe, a directory). Every
 * frame must be answered or refused without a crash or a leak; the
 * connection then closes, and all its registrations must go. */
#include "fuzz_usrbio.h"

static int make_fd(int kind, const struct kvc_msg_ring_register *ring, uint8_t extra)
{
	uint32_t entries = ring && ring->entries && ring->entries <= KVC_RING_MAX_ENTRIES &&
	                   !(ring->entries & (ring->entries - 1)) ? ring->entries : 16;
	int pipe_fds[2];
	switch (kind) {
	case 0:
		return fuzz_memory(0, entries, 1);
	case 1:
		return fuzz_memory(1 << 20, extra & 1 ? entries : 0, 0);
	case 2:
		return open(fuzz_file, extra & 1 ? O_RDONLY : O_RDWR);
	}
	switch (extra % 4) {
	case 0:
		return eventfd(0, EFD_CLOEXEC);
	case 1:
		return open("/dev/null", O_RDWR | O_CLOEXEC);
	case 2:
		if (pipe(pipe_fds) != 0)
			abort();
		close(pipe_fds[1]);
		return pipe_fds[0];
	}
	return open(fuzz_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint16_t types[] = {
		KVC_MSG_IOV_REGISTER, KVC_MSG_IOV_DEREGISTER, KVC_MSG_FD_REGISTER,
		KVC_MSG_FD_DEREGISTER, KVC_MSG_RING_REGISTER, KVC_MSG_RING_DEREGISTER,
		KVC_MSG_IOV_REGISTER_DEVICE, 0, 1, 95, 103, 250};
	if (!fuzz_conn.fd)
		fuzz_usrbio_setup();
	size_t at = 0;
	while (at + 4 <= size) {
		uint8_t pick = data[at], fd_bits = data[at + 1];
		uint16_t len;
		memcpy(&len, data + at + 2, 2);
		at += 4;
		if (len > size - at)
			len = (uint16_t)(size - at);
		const uint8_t *body = data + at;
		at += len;
		uint16_t type = types[pick % (sizeof(types) / sizeof(types[0]))];
		struct kvc_msg_ring_register ring;
		const struct kvc_msg_ring_register *shape = NULL;
		if (type == KVC_MSG_RING_REGISTER && len >= sizeof(ring)) {
			memcpy(&ring, body, sizeof(ring));
			shape = &ring;
		}
		int fds[3], count = fd_bits & 3;
		for (int i = 0; i < count; i++)
			fds[i] = make_fd((fd_bits >> (2 + 2 * i)) & 3, shape, pick >> 4);
		if (fuzz_frame(type, body, len, fds, count) < 0)
			fuzz_disconnect(); /* a protocol error: the server closes the connection */
	}
	fuzz_disconnect();
	if (atomic_load(&fuzz_fs.usrbio_iovs) || atomic_load(&fuzz_fs.usrbio_rings) ||
	    atomic_load(&fuzz_fs.usrbio_files) || atomic_load(&fuzz_fs.usrbio_clients))
		abort(); /* a registration outlived its connection */
	struct kvc_usrbio_usage used;
	kvc_usrbio_limits_usage(&fuzz_usrbio.limits, getuid(), &used);
	if (used.iov_bytes || used.rings || used.registrations)
		abort(); /* a charge was not given back */
	return 0;
}
