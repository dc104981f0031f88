/* wire: framing, sending, receiving and checking; see wire.h. */
#include "core/wire.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void kvc_wire_header_init(struct kvc_wire_header *h, uint16_t type,
                          uint64_t request_id, int32_t status,
                          uint32_t body_len, uint64_t data_len)
{
	h->magic = KVC_WIRE_MAGIC;
	h->version = KVC_WIRE_VERSION;
	h->type = type;
	h->request_id = request_id;
	h->status = status;
	h->body_len = body_len;
	h->data_len = data_len;
}

int kvc_wire_header_check(const struct kvc_wire_header *h)
{
	if (h->magic != KVC_WIRE_MAGIC || h->version != KVC_WIRE_VERSION)
		return -EPROTO;
	if (h->body_len > KVC_WIRE_MAX_BODY || h->data_len > KVC_WIRE_MAX_DATA)
		return -EMSGSIZE;
	return 0;
}

/* Map a failed send/recv to the errno the callers document. */
static int io_error(void)
{
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return -ETIMEDOUT;
	return -errno;
}

static int send_vectors(int fd, struct iovec *vec, int count);

int kvc_wire_send(int fd, const struct kvc_wire_header *h, const void *body,
                  const struct iovec *data, int data_count)
{
	struct iovec vec[2 + KVC_WIRE_MAX_PIECES];
	int count = 0;

	if (data_count < 0 || data_count > KVC_WIRE_MAX_PIECES)
		return -EINVAL;
	vec[count++] = (struct iovec){(void *)h, sizeof(*h)};
	if (h->body_len)
		vec[count++] = (struct iovec){(void *)body, h->body_len};
	for (int i = 0; i < data_count; i++)
		if (data[i].iov_len)
			vec[count++] = data[i];
	return send_vectors(fd, vec, count);
}

int kvc_wire_send_parts(int fd, const struct kvc_wire_header *h, const struct iovec *parts,
                        int part_count)
{
	struct iovec vec[1 + KVC_WIRE_MAX_PIECES];
	uint64_t total = 0;
	int count = 0;
	if (part_count < 0 || part_count > KVC_WIRE_MAX_PIECES)
		return -EINVAL;
	vec[count++] = (struct iovec){(void *)h, sizeof(*h)};
	for (int i = 0; i < part_count; i++) {
		total += parts[i].iov_len;
		if (parts[i].iov_len)
			vec[count++] = parts[i];
	}
	if (total != h->body_len + h->data_len)
		return -EINVAL;
	return send_vectors(fd, vec, count);
}

static int send_vectors(int fd, struct iovec *vec, int count)
{
	struct iovec *cur = vec;
	while (count > 0) {
		/* At most IOV_MAX vectors a call: a reply of 1,024 pieces has
		 * more, with its header and body. */
		struct msghdr msg = {.msg_iov = cur,
		                     .msg_iovlen = (size_t)(count < IOV_MAX ? count : IOV_MAX)};
		ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (sent < 0) {
			if (errno == EINTR)
				continue;
			return io_error();
		}
		/* Advance past what the kernel took; partial iovecs resume. */
		while (count > 0 && (size_t)sent >= cur->iov_len) {
			sent -= (ssize_t)cur->iov_len;
			cur++;
			count--;
		}
		if (count > 0) {
			cur->iov_base = (char *)cur->iov_base + sent;
			cur->iov_len -= (size_t)sent;
		}
	}
	return 0;
}

int kvc_wire_send_fds(int fd, const struct kvc_wire_header *h, const void *body,
                      const int *fds, int fd_count)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * KVC_WIRE_MAX_FDS)];
	} control;
	struct iovec vec[2] = {{(void *)h, sizeof(*h)}, {(void *)body, h->body_len}};
	struct msghdr msg = {.msg_iov = vec, .msg_iovlen = h->body_len ? 2 : 1};
	if (fd_count < 0 || fd_count > KVC_WIRE_MAX_FDS)
		return -EINVAL;
	if (fd_count > 0) {
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)fd_count);
		struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)fd_count);
		memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * (size_t)fd_count);
	}
	/* Local control frames are small: one sendmsg carries them whole, and
	 * the fds travel with its first byte. */
	ssize_t sent;
	do
		sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (sent < 0)
		return io_error();
	size_t total = sizeof(*h) + h->body_len;
	if ((size_t)sent < sizeof(*h))
		return -EMSGSIZE; /* never for a local socket of sane size */
	if ((size_t)sent < total) {
		const char *rest = (const char *)body + ((size_t)sent - sizeof(*h));
		size_t left = total - (size_t)sent;
		while (left) {
			ssize_t n = send(fd, rest, left, MSG_NOSIGNAL);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return io_error();
			rest += n;
			left -= (size_t)n;
		}
	}
	return 0;
}

int kvc_wire_recv_header_fds(int fd, struct kvc_wire_header *h, int *fds, int *fd_count)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * KVC_WIRE_MAX_FDS)];
	} control;
	struct iovec vec = {h, sizeof(*h)};
	struct msghdr msg = {.msg_iov = &vec, .msg_iovlen = 1, .msg_control = control.buf,
	                     .msg_controllen = sizeof(control.buf)};
	*fd_count = 0;
	ssize_t got;
	do
		got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	if (got == 0)
		return -ECONNRESET;
	if (got < 0)
		return io_error();
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < n; i++) {
			int passed;
			memcpy(&passed, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof(int));
			if (*fd_count < KVC_WIRE_MAX_FDS)
				fds[(*fd_count)++] = passed;
			else
				close(passed); /* more than a frame may carry: refuse them */
		}
	}
	int rc = 0;
	if ((size_t)got < sizeof(*h))
		rc = kvc_wire_recv_exact(fd, (char *)h + got, sizeof(*h) - (size_t)got);
	if (rc == 0)
		rc = kvc_wire_header_check(h);
	if (rc < 0) {
		for (int i = 0; i < *fd_count; i++)
			close(fds[i]);
		*fd_count = 0;
	}
	return rc;
}

int kvc_wire_recv_exact(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len > 0) {
		ssize_t got = recv(fd, p, len, MSG_WAITALL);
		if (got == 0)
			return -ECONNRESET;
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return io_error();
		}
		p += got;
		len -= (size_t)got;
	}
	return 0;
}

int kvc_wire_discard(int fd, uint64_t len)
{
	char sink[16384];
	while (len > 0) {
		size_t step = len < sizeof(sink) ? (size_t)len : sizeof(sink);
		int rc = kvc_wire_recv_exact(fd, sink, step);
		if (rc < 0)
			return rc;
		len -= step;
	}
	return 0;
}

int kvc_wire_recv(int fd, struct kvc_wire_header *h, void *body_buf,
                  size_t body_cap)
{
	int rc = kvc_wire_recv_exact(fd, h, sizeof(*h));
	if (rc < 0)
		return rc;
	rc = kvc_wire_header_check(h);
	if (rc < 0)
		return rc;
	if (h->body_len > body_cap)
		return -EMSGSIZE;
	if (h->body_len)
		rc = kvc_wire_recv_exact(fd, body_buf, h->body_len);
	return rc;
}

const void *kvc_wire_body_take(const void *body, uint32_t body_len,
                               uint32_t *offset, uint32_t len)
{
	if (*offset > body_len || len > body_len - *offset)
		return NULL;
	const void *p = (const char *)body + *offset;
	*offset += len;
	return p;
}

int kvc_wire_keys_encode(uint8_t *buf, uint32_t cap, uint32_t *offset,
                         const struct kvc_wire_key *keys, uint32_t count)
{
	uint32_t off = *offset;
	for (uint32_t i = 0; i < count; i++) {
		if (off > cap || cap - off < 4 || cap - off - 4 < keys[i].length)
			return -EMSGSIZE;
		memcpy(buf + off, &keys[i].length, 4);
		memcpy(buf + off + 4, keys[i].bytes, keys[i].length);
		off += 4 + keys[i].length;
	}
	*offset = off;
	return 0;
}

int kvc_wire_keys_decode(const void *body, uint32_t body_len, uint32_t *offset,
                         struct kvc_wire_key *keys, uint32_t count, uint32_t max_length)
{
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *len = kvc_wire_body_take(body, body_len, offset, 4);
		uint32_t n;
		if (!len)
			return -EINVAL;
		memcpy(&n, len, 4);
		if (n == 0 || n > max_length)
			return -EINVAL;
		const char *bytes = kvc_wire_body_take(body, body_len, offset, n);
		if (!bytes)
			return -EINVAL;
		keys[i] = (struct kvc_wire_key){bytes, n};
	}
	return 0;
}

int kvc_wire_name_check(const char *name, uint32_t len)
{
	if (len == 0)
		return -EINVAL;
	if (len > KVC_WIRE_MAX_NAME)
		return -ENAMETOOLONG;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return -EINVAL;
	if ((len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return -EINVAL;
	return 0;
}

uint64_t kvc_wire_watch_hash(uint32_t kind, uint64_t id, const char *name, uint32_t name_len)
{
	uint32_t len = kind == KVC_WATCH_NAME ? name_len : 0;
	uint64_t h = 1469598103934665603ull ^ kind; /* FNV-1a */
	for (int i = 0; i < 8; i++)
		h = (h ^ ((id >> (8 * i)) & 0xff)) * 1099511628211ull;
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

const char *kvc_wire_type_name(uint16_t type)
{
	switch (type) {
	case KVC_MSG_HELLO: return "hello";
	case KVC_MSG_AUTH: return "auth";
	case KVC_MSG_LOOKUP: return "lookup";
	case KVC_MSG_GETATTR: return "getattr";
	case KVC_MSG_CREATE: return "create";
	case KVC_MSG_MKDIR: return "mkdir";
	case KVC_MSG_UNLINK: return "unlink";
	case KVC_MSG_RMDIR: return "rmdir";
	case KVC_MSG_RENAME: return "rename";
	case KVC_MSG_READDIR: return "readdir";
	case KVC_MSG_SETATTR: return "setattr";
	case KVC_MSG_EXTEND_SIZE: return "extend_size";
	case KVC_MSG_STATFS: return "statfs";
	case KVC_MSG_POOL_INIT: return "pool_init";
	case KVC_MSG_POOL_WORLD: return "pool_world";
	case KVC_MSG_POOL_ALLOCATE: return "pool_allocate";
	case KVC_MSG_POOL_CONFIRM: return "pool_confirm";
	case KVC_MSG_POOL_EXISTS: return "pool_exists";
	case KVC_MSG_POOL_LOCATIONS: return "pool_locations";
	case KVC_MSG_POOL_RELEASE_LEASES: return "pool_release_leases";
	case KVC_MSG_POOL_DELETE: return "pool_delete";
	case KVC_MSG_POOL_CLEAR: return "pool_clear";
	case KVC_MSG_POOL_STATS: return "pool_stats";
	case KVC_MSG_POOL_LIST: return "pool_list";
	case KVC_MSG_POOL_FSCK: return "pool_fsck";
	case KVC_MSG_POOL_KEYS: return "pool_keys";
	case KVC_MSG_CHUNK_WRITE: return "chunk_write";
	case KVC_MSG_CHUNK_READ: return "chunk_read";
	case KVC_MSG_CHUNK_REMOVE: return "chunk_remove";
	case KVC_MSG_CHUNK_TRUNCATE: return "chunk_truncate";
	case KVC_MSG_CHUNK_LAST: return "chunk_last";
	case KVC_MSG_SPACE: return "space";
	case KVC_MSG_SYNC: return "sync";
	case KVC_MSG_OPEN: return "open";
	case KVC_MSG_CLOSE: return "close";
	case KVC_MSG_RENEW: return "renew";
	case KVC_MSG_MKNOD: return "mknod";
	case KVC_MSG_SYMLINK: return "symlink";
	case KVC_MSG_LINK: return "link";
	case KVC_MSG_READLINK: return "readlink";
	case KVC_MSG_SETXATTR: return "setxattr";
	case KVC_MSG_GETXATTR: return "getxattr";
	case KVC_MSG_LISTXATTR: return "listxattr";
	case KVC_MSG_REMOVEXATTR: return "removexattr";
	case KVC_MSG_META_SYNC: return "meta_sync";
	case KVC_MSG_CLIENT_HELLO: return "client_hello";
	case KVC_MSG_WATCH: return "watch";
	case KVC_MSG_WATCH_EVENTS: return "watch_events";
	case KVC_MSG_CLOSE_MANY: return "close_many";
	case KVC_MSG_WATCH_DIR: return "watch_dir";
	case KVC_MSG_INO_GRANT: return "ino_grant";
	case KVC_MSG_INO_RETURN: return "ino_return";
	case KVC_MSG_ADOPT: return "adopt";
	case KVC_MSG_REMOVE_MANY: return "remove_many";
	case KVC_MSG_KEYS_LOOKUP: return "keys_lookup";
	case KVC_MSG_KEYS_CREATE: return "keys_create";
	case KVC_MSG_KEYS_PUBLISH: return "keys_publish";
	case KVC_MSG_KEYS_REMOVE: return "keys_remove";
	case KVC_MSG_POOL_BIND: return "pool_bind";
	case KVC_MSG_POOL_BINDING: return "pool_binding";
	case KVC_MSG_POOL_WAIT: return "pool_wait";
	case KVC_MSG_CHUNK_PUNCH: return "chunk_punch";
	case KVC_MSG_MGMT_HEARTBEAT: return "mgmt_heartbeat";
	case KVC_MSG_MGMT_ROUTING: return "mgmt_routing";
	case KVC_MSG_MGMT_DRAIN: return "mgmt_drain";
	case KVC_MSG_CHUNK_LIST: return "chunk_list";
	case KVC_MSG_CHUNK_RESYNC: return "chunk_resync";
	case KVC_MSG_CHUNK_RESYNC_STATUS: return "chunk_resync_status";
	case KVC_MSG_PLACE_HELLO: return "place_hello";
	case KVC_MSG_PLACE_REGISTER: return "place_register";
	case KVC_MSG_PLACE_UNREGISTER: return "place_unregister";
	case KVC_MSG_PLACE_READ: return "place_read";
	case KVC_MSG_PLACE_WRITE: return "place_write";
	case KVC_MSG_PLACE_LOCAL: return "place_local";
	case KVC_MSG_IOV_REGISTER: return "iov_register";
	case KVC_MSG_IOV_DEREGISTER: return "iov_deregister";
	case KVC_MSG_FD_REGISTER: return "fd_register";
	case KVC_MSG_FD_DEREGISTER: return "fd_deregister";
	case KVC_MSG_RING_REGISTER: return "ring_register";
	case KVC_MSG_RING_DEREGISTER: return "ring_deregister";
	case KVC_MSG_IOV_REGISTER_DEVICE: return "iov_register_device";
	default: return "unknown";
	}
}
