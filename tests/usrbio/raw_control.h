/*
 * raw_control: a test program's own speaker of kvc-fuse's USRBIO control
 * protocol (docs/usrbio.md), for what libkvc never sends: forged entries,
 * bad memory, hostile doorbells. Header-only; the program compiles
 * src/core/wire.c and src/core/control_socket.c itself.
 */
#ifndef KVC_TEST_RAW_CONTROL_H
#define KVC_TEST_RAW_CONTROL_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/control_socket.h"
#include "core/ring.h"
#include "core/wire.h"

struct raw {
	int sock;
	uint64_t id;
};

/* One request and its reply; fds the reply carries go to got_fds (up to
 * KVC_WIRE_MAX_FDS; NULL: closed). Returns the reply's status or -errno. */
static inline int raw_call_fds(struct raw *r, uint16_t type, const void *body, uint32_t len,
                               const int *fds, int nfds, void *reply, uint32_t cap,
                               int *got_fds, int *got_count)
{
	struct kvc_wire_header h;
	int passed[KVC_WIRE_MAX_FDS], count = 0;
	kvc_wire_header_init(&h, type, ++r->id, 0, len, 0);
	int rc = kvc_wire_send_fds(r->sock, &h, body, fds, nfds);
	if (rc == 0)
		rc = kvc_wire_recv_header_fds(r->sock, &h, passed, &count);
	if (rc == 0 && h.body_len > cap)
		rc = -EMSGSIZE;
	if (rc == 0 && h.body_len)
		rc = kvc_wire_recv_exact(r->sock, reply, h.body_len);
	for (int i = 0; i < count; i++) {
		if (got_fds && i < KVC_WIRE_MAX_FDS)
			got_fds[i] = passed[i];
		else
			close(passed[i]);
	}
	if (got_count)
		*got_count = got_fds ? count : 0;
	return rc < 0 ? rc : h.status;
}

static inline int raw_call(struct raw *r, uint16_t type, const void *body, uint32_t len,
                           const int *fds, int nfds, void *reply, uint32_t cap)
{
	return raw_call_fds(r, type, body, len, fds, nfds, reply, cap, NULL, NULL);
}

static inline int raw_connect(struct raw *r, const char *mount)
{
	struct sockaddr_un addr;
	socklen_t len;
	kvc_control_socket_address(mount, &addr, &len);
	r->id = 0;
	r->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(r->sock, (struct sockaddr *)&addr, len) < 0)
		return -errno;
	struct kvc_msg_hello hello = {KVC_WIRE_VERSION, 0};
	return raw_call(r, KVC_MSG_HELLO, &hello, sizeof(hello), NULL, 0, NULL, 0);
}

/* A memfd holding an empty ring of `entries` (sealed against shrinking
 * and growing when `sealed`), mapped at *shared. Returns the fd or -errno. */
static inline int raw_ring_memory(uint32_t entries, bool sealed, struct kvc_ring_shared **shared)
{
	int memfd = memfd_create("raw-ring", MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
	size_t bytes = kvc_ring_bytes(entries);
	if (memfd < 0 || ftruncate(memfd, (off_t)bytes) < 0)
		return -errno;
	if (sealed && fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	struct kvc_ring_shared *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (sh == MAP_FAILED)
		return -errno;
	sh->magic = KVC_RING_MAGIC;
	sh->layout = KVC_RING_LAYOUT;
	sh->entries = entries;
	*shared = sh;
	return memfd;
}

/* Register ring memory; kvc-fuse answers with the handle and the ring's
 * doorbell (*doorbell). Returns the status. */
static inline int raw_ring_register(struct raw *r, int memfd, const struct kvc_msg_ring_register *m,
                                    int *doorbell, uint32_t *handle)
{
	struct kvc_msg_handle reply = {0};
	int fds[KVC_WIRE_MAX_FDS], count = 0;
	int rc = raw_call_fds(r, KVC_MSG_RING_REGISTER, m, sizeof(*m), &memfd, 1, &reply,
	                      sizeof(reply), fds, &count);
	for (int i = 1; i < count; i++)
		close(fds[i]);
	*doorbell = count > 0 ? fds[0] : -1;
	if (rc == 0 && count != 1)
		rc = -EPROTO; /* a registered ring always comes with its doorbell */
	*handle = reply.handle;
	return rc;
}

/* Ring the doorbell the way libkvc does. */
static inline int raw_doorbell(int doorbell)
{
	uint64_t one = 1;
	return write(doorbell, &one, sizeof(one)) == (ssize_t)sizeof(one) ? 0 : -errno;
}

#endif
