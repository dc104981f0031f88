/* wire: framing, sending, receiving and checking; see wire.h. */
#include "wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

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

	struct iovec *cur = vec;
	while (count > 0) {
		struct msghdr msg = {.msg_iov = cur, .msg_iovlen = count};
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

const char *kvc_wire_type_name(uint16_t type)
{
	switch (type) {
	case KVC_MSG_HELLO: return "hello";
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
	case KVC_MSG_CHUNK_WRITE: return "chunk_write";
	case KVC_MSG_CHUNK_READ: return "chunk_read";
	case KVC_MSG_CHUNK_REMOVE: return "chunk_remove";
	case KVC_MSG_CHUNK_TRUNCATE: return "chunk_truncate";
	case KVC_MSG_CHUNK_LAST: return "chunk_last";
	case KVC_MSG_SPACE: return "space";
	case KVC_MSG_SYNC: return "sync";
	default: return "unknown";
	}
}
