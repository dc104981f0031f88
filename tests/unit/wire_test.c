/* Unit tests of the wire module: frames round-trip, and truncated,
 * oversized and wrong-magic frames are refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/wire.h"

static int pair[2];

static void open_pair(void)
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
}

static bool same_file(int a, int b)
{
	struct stat sa, sb;
	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
	       sa.st_dev == sb.st_dev;
}

static void close_pair(void)
{
	close(pair[0]);
	close(pair[1]);
}

TestSuite(wire, .init = open_pair, .fini = close_pair);

Test(wire, frame_with_body_and_data_round_trips)
{
	struct kvc_msg_chunk_write m = {.inode = 77, .target = 2, .chunk = 9,
	                                .chunk_size = 1 << 20, .offset = 4096};
	char data[3000];
	memset(data, 0xab, sizeof(data));
	struct iovec iov = {data, sizeof(data)};
	struct kvc_wire_header h, got;
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_WRITE, 42, 0, sizeof(m), sizeof(data));
	cr_assert_eq(kvc_wire_send(pair[0], &h, &m, &iov, 1), 0);

	struct kvc_msg_chunk_write body;
	cr_assert_eq(kvc_wire_recv(pair[1], &got, &body, sizeof(body)), 0);
	cr_assert_eq(got.type, KVC_MSG_CHUNK_WRITE);
	cr_assert_eq(got.request_id, 42);
	cr_assert_eq(got.data_len, sizeof(data));
	cr_assert_eq(body.inode, 77);
	cr_assert_eq(body.offset, 4096);
	char back[3000];
	cr_assert_eq(kvc_wire_recv_exact(pair[1], back, sizeof(back)), 0);
	cr_assert_eq(memcmp(back, data, sizeof(data)), 0);
}

Test(wire, wrong_magic_is_a_protocol_error)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_GETATTR, 1, 0, 0, 0);
	h.magic = 0xdeadbeef;
	cr_assert_eq(kvc_wire_header_check(&h), -EPROTO);
	cr_assert_eq(write(pair[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	char body[16];
	cr_assert_eq(kvc_wire_recv(pair[1], &h, body, sizeof(body)), -EPROTO);
}

Test(wire, wrong_version_is_a_protocol_error)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_GETATTR, 1, 0, 0, 0);
	h.version = KVC_WIRE_VERSION + 1;
	cr_assert_eq(kvc_wire_header_check(&h), -EPROTO);
}

Test(wire, oversized_lengths_are_refused)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_GETATTR, 1, 0, KVC_WIRE_MAX_BODY + 1, 0);
	cr_assert_eq(kvc_wire_header_check(&h), -EMSGSIZE);
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_WRITE, 1, 0, 0, (uint64_t)KVC_WIRE_MAX_DATA + 1);
	cr_assert_eq(kvc_wire_header_check(&h), -EMSGSIZE);
	/* A body larger than the receiver's buffer is refused too. */
	kvc_wire_header_init(&h, KVC_MSG_GETATTR, 1, 0, 64, 0);
	cr_assert_eq(write(pair[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	char small[8];
	cr_assert_eq(kvc_wire_recv(pair[1], &h, small, sizeof(small)), -EMSGSIZE);
}

Test(wire, truncated_frame_reports_reset)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_LOOKUP, 1, 0, 100, 0);
	cr_assert_eq(write(pair[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	cr_assert_eq(write(pair[0], "abc", 3), 3);
	close(pair[0]);
	pair[0] = -1;
	char body[128];
	cr_assert_eq(kvc_wire_recv(pair[1], &h, body, sizeof(body)), -ECONNRESET);
}

Test(wire, truncated_header_reports_reset)
{
	cr_assert_eq(write(pair[0], "KVC1", 4), 4);
	close(pair[0]);
	pair[0] = -1;
	struct kvc_wire_header h;
	cr_assert_eq(kvc_wire_recv(pair[1], &h, NULL, 0), -ECONNRESET);
}

Test(wire, body_take_checks_bounds)
{
	char body[16] = {0};
	uint32_t off = 0;
	cr_assert_not_null(kvc_wire_body_take(body, 16, &off, 8));
	cr_assert_not_null(kvc_wire_body_take(body, 16, &off, 8));
	cr_assert_null(kvc_wire_body_take(body, 16, &off, 1));
	off = 4;
	cr_assert_null(kvc_wire_body_take(body, 16, &off, UINT32_MAX));
	off = 20;
	cr_assert_null(kvc_wire_body_take(body, 16, &off, 0));
}

Test(wire, names_are_checked)
{
	char long_name[300];
	memset(long_name, 'a', sizeof(long_name));
	cr_assert_eq(kvc_wire_name_check("ok", 2), 0);
	cr_assert_eq(kvc_wire_name_check("", 0), -EINVAL);
	cr_assert_eq(kvc_wire_name_check(".", 1), -EINVAL);
	cr_assert_eq(kvc_wire_name_check("..", 2), -EINVAL);
	cr_assert_eq(kvc_wire_name_check("a/b", 3), -EINVAL);
	cr_assert_eq(kvc_wire_name_check("a\0b", 3), -EINVAL);
	cr_assert_eq(kvc_wire_name_check(long_name, 256), -ENAMETOOLONG);
	cr_assert_eq(kvc_wire_name_check(long_name, 255), 0);
}

Test(wire, discard_drains_data)
{
	char data[40000];
	memset(data, 1, sizeof(data));
	cr_assert_eq(write(pair[0], data, sizeof(data)), (ssize_t)sizeof(data));
	cr_assert_eq(write(pair[0], "Z", 1), 1);
	cr_assert_eq(kvc_wire_discard(pair[1], sizeof(data)), 0);
	char c;
	cr_assert_eq(read(pair[1], &c, 1), 1);
	cr_assert_eq(c, 'Z');
}

Test(wire, file_descriptors_travel_with_a_frame)
{
	int fds[2] = {open("/dev/null", O_RDONLY), open("/proc/self/status", O_RDONLY)};
	struct kvc_msg_handle body = {7, 0};
	struct kvc_wire_header h, got;
	kvc_wire_header_init(&h, KVC_MSG_RING_REGISTER, 3, 0, sizeof(body), 0);
	cr_assert_eq(kvc_wire_send_fds(pair[0], &h, &body, fds, 2), 0);
	int received[KVC_WIRE_MAX_FDS], count = -1;
	cr_assert_eq(kvc_wire_recv_header_fds(pair[1], &got, received, &count), 0);
	cr_assert_eq(count, 2);
	cr_assert_eq(got.type, KVC_MSG_RING_REGISTER);
	cr_assert(same_file(received[0], fds[0]));
	cr_assert(same_file(received[1], fds[1]));
	struct kvc_msg_handle back;
	cr_assert_eq(kvc_wire_recv_exact(pair[1], &back, sizeof(back)), 0);
	cr_assert_eq(back.handle, 7);
	for (int i = 0; i < 2; i++) {
		close(received[i]);
		close(fds[i]);
	}
}

Test(wire, too_many_fds_are_refused)
{
	int fds[KVC_WIRE_MAX_FDS + 1];
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_FD_REGISTER, 1, 0, 0, 0);
	for (int i = 0; i <= KVC_WIRE_MAX_FDS; i++)
		fds[i] = 0;
	cr_assert_eq(kvc_wire_send_fds(pair[0], &h, NULL, fds, KVC_WIRE_MAX_FDS + 1), -EINVAL);
}
