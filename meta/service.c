/* meta service: see service.h. */
#include "meta/service.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "meta/pool_service.h"

/* Take a fixed message struct from the body, or fail the request. */
#define TAKE(conn, h, off, type) \
	((const type *)kvc_wire_body_take((conn)->body, (h)->body_len, (off), sizeof(type)))

static int reply_attr(struct kvc_server_conn *conn, const struct kvc_wire_header *h, int rc,
                      const struct kvc_attr *attr)
{
	return kvc_server_reply(conn, h, rc, attr, attr ? sizeof(*attr) : 0);
}

static int handle_name_op(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                          const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_name *m = TAKE(conn, h, &off, struct kvc_msg_name);
	const char *name = m ? kvc_wire_body_take(conn->body, h->body_len, &off, m->name_len)
	                     : NULL;
	struct kvc_attr attr;
	if (!name || off != h->body_len)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	switch (h->type) {
	case KVC_MSG_LOOKUP:
		return reply_attr(conn, h,
		                  kvc_meta_store_lookup(svc->store, m->parent, name, m->name_len,
		                                        &attr), &attr);
	case KVC_MSG_UNLINK: {
		int rc = kvc_meta_store_unlink(svc->store, m->parent, name, m->name_len);
		if (rc == 0)
			kvc_meta_collector_wake(svc->collector);
		return reply_attr(conn, h, rc, NULL);
	}
	default:
		return reply_attr(conn, h,
		                  kvc_meta_store_rmdir(svc->store, m->parent, name, m->name_len),
		                  NULL);
	}
}

static int handle_create(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                         const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_create *m = TAKE(conn, h, &off, struct kvc_msg_create);
	const char *name = m ? kvc_wire_body_take(conn->body, h->body_len, &off, m->name_len)
	                     : NULL;
	struct kvc_attr attr;
	int rc;
	if (!name || off != h->body_len || (m->flags & ~KVC_CREATE_EXCL))
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	if (h->type == KVC_MSG_MKDIR)
		rc = kvc_meta_store_mkdir(svc->store, m->parent, name, m->name_len, m->mode,
		                          m->uid, m->gid, &attr);
	else
		rc = kvc_meta_store_create(svc->store, m->parent, name, m->name_len, m->mode,
		                           m->uid, m->gid, m->flags & KVC_CREATE_EXCL, &attr);
	return reply_attr(conn, h, rc, &attr);
}

static int handle_rename(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                         const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_rename *m = TAKE(conn, h, &off, struct kvc_msg_rename);
	const char *name = m ? kvc_wire_body_take(conn->body, h->body_len, &off, m->name_len)
	                     : NULL;
	const char *new_name =
		name ? kvc_wire_body_take(conn->body, h->body_len, &off, m->new_name_len) : NULL;
	if (!new_name || off != h->body_len)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	int rc = kvc_meta_store_rename(svc->store, m->parent, name, m->name_len, m->new_parent,
	                               new_name, m->new_name_len, m->flags);
	if (rc == 0)
		kvc_meta_collector_wake(svc->collector);
	return reply_attr(conn, h, rc, NULL);
}

struct readdir_out {
	uint8_t *buf;
	uint32_t len;
	uint32_t cap;
	uint32_t count;
};

static int add_dirent(void *arg, const char *name, uint32_t name_len,
                      const struct kvc_attr *attr)
{
	struct readdir_out *out = arg;
	uint32_t padded = (name_len + 7u) & ~7u;
	struct kvc_msg_dirent d = {.attr = *attr, .name_len = name_len};
	if (out->len + sizeof(d) + padded > out->cap)
		return 1; /* page full: stop; the client asks again after this */
	memcpy(out->buf + out->len, &d, sizeof(d));
	memset(out->buf + out->len + sizeof(d), 0, padded);
	memcpy(out->buf + out->len + sizeof(d), name, name_len);
	out->len += (uint32_t)sizeof(d) + padded;
	out->count++;
	return 0;
}

static int handle_readdir(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                          const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_readdir *m = TAKE(conn, h, &off, struct kvc_msg_readdir);
	const char *after = m ? kvc_wire_body_take(conn->body, h->body_len, &off, m->after_len)
	                      : NULL;
	if (!after || off != h->body_len || m->after_len > KVC_WIRE_MAX_NAME)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	uint32_t max = m->max_entries == 0 || m->max_entries > KVC_WIRE_MAX_DIRENTS
	                       ? KVC_WIRE_MAX_DIRENTS : m->max_entries;
	struct readdir_out out = {.cap = KVC_WIRE_MAX_BODY};
	out.buf = malloc(out.cap);
	if (!out.buf)
		return kvc_server_reply(conn, h, -ENOMEM, NULL, 0);
	out.len = sizeof(struct kvc_msg_readdir_reply);
	bool more = false;
	int rc = kvc_meta_store_readdir(svc->store, m->ino, after, m->after_len, max,
	                                add_dirent, &out, &more);
	/* Stopped early on a full page: there is more after the last entry. */
	if (rc >= 0 && (uint32_t)rc > out.count)
		more = true;
	struct kvc_msg_readdir_reply head = {.count = out.count, .more = more};
	memcpy(out.buf, &head, sizeof(head));
	rc = kvc_server_reply(conn, h, rc < 0 ? rc : 0, out.buf, out.len);
	free(out.buf);
	return rc;
}

static int handle_setattr(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                          const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_setattr *m = TAKE(conn, h, &off, struct kvc_msg_setattr);
	struct kvc_attr attr;
	if (!m || off != h->body_len)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	int rc = 0;
	if (m->mask & KVC_SETATTR_SIZE) {
		rc = kvc_meta_store_getattr(svc->store, m->ino, &attr);
		/* Drop the cut-off bytes before the size says they are gone. */
		if (rc == 0 && S_ISREG(attr.mode) && m->size < attr.size)
			rc = kvc_storage_client_truncate(svc->storage, m->ino, &attr.layout, m->size);
	}
	if (rc == 0)
		rc = kvc_meta_store_setattr(svc->store, m, &attr);
	return reply_attr(conn, h, rc, &attr);
}

/* OPEN, CLOSE, RENEW: every one is also a sign of life of the client. */
static int handle_session(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                          const struct kvc_wire_header *h)
{
	struct kvc_attr attr;
	const struct kvc_msg_session *m = h->body_len == sizeof(*m) ? (const void *)conn->body : NULL;
	_Static_assert(KVC_WIRE_CLIENT_ID == KVC_META_CLIENT_ID, "");
	if (!m)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	if (h->type == KVC_MSG_RENEW)
		return kvc_server_reply(conn, h, svc->sessions ? kvc_meta_sessions_renew(
			svc->sessions, m->client, kvc_meta_sessions_now_ms()) : 0, NULL, 0);
	if (svc->sessions)
		kvc_meta_sessions_touch(svc->sessions, m->client, kvc_meta_sessions_now_ms());
	if (h->type == KVC_MSG_OPEN)
		return reply_attr(conn, h, kvc_meta_store_open_session(svc->store, m->ino, m->client,
		                                                       &attr), &attr);
	int rc = h->type == KVC_MSG_CLOSE
	       ? kvc_meta_store_close_session(svc->store, m->ino, m->client) : 0;
	if (rc == 0 && h->type == KVC_MSG_CLOSE && svc->collector)
		kvc_meta_collector_wake(svc->collector); /* an orphan may be free now */
	return kvc_server_reply(conn, h, rc, NULL, 0);
}

static int handle_simple(struct kvc_meta_service *svc, struct kvc_server_conn *conn,
                         const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	struct kvc_attr attr;
	if (h->type == KVC_MSG_GETATTR) {
		const struct kvc_msg_ino *m = TAKE(conn, h, &off, struct kvc_msg_ino);
		if (!m || off != h->body_len)
			return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
		return reply_attr(conn, h, kvc_meta_store_getattr(svc->store, m->ino, &attr), &attr);
	}
	if (h->type == KVC_MSG_OPEN || h->type == KVC_MSG_CLOSE || h->type == KVC_MSG_RENEW)
		return handle_session(svc, conn, h);
	if (h->type == KVC_MSG_EXTEND_SIZE) {
		const struct kvc_msg_extend *m = TAKE(conn, h, &off, struct kvc_msg_extend);
		if (!m || off != h->body_len)
			return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
		return reply_attr(conn, h, kvc_meta_store_extend(svc->store, m->ino, m->size, &attr),
		                  &attr);
	}
	struct kvc_msg_statfs_reply reply = {.max_inodes = 1ull << 40};
	struct kvc_meta_counts counts;
	int rc = kvc_meta_store_counts(svc->store, &counts);
	if (rc == 0) {
		reply.inodes = counts.inodes;
		reply.open_sessions = counts.open_sessions;
		reply.orphans = counts.orphans;
		reply.gc_pending = counts.gc_pending;
	}
	return kvc_server_reply(conn, h, rc, &reply, sizeof(reply));
}

int kvc_meta_service_handle(void *service, struct kvc_server_conn *conn,
                            const struct kvc_wire_header *h)
{
	struct kvc_meta_service *svc = service;
	if (h->data_len)
		return -EPROTO; /* no namespace message carries bulk data */
	if (h->type >= KVC_MSG_POOL_INIT && h->type <= KVC_MSG_POOL_BINDING)
		return kvc_pool_service_handle(svc->pools, svc->store, conn, h);
	switch (h->type) {
	case KVC_MSG_LOOKUP:
	case KVC_MSG_UNLINK:
	case KVC_MSG_RMDIR:
		return handle_name_op(svc, conn, h);
	case KVC_MSG_CREATE:
	case KVC_MSG_MKDIR:
		return handle_create(svc, conn, h);
	case KVC_MSG_RENAME:
		return handle_rename(svc, conn, h);
	case KVC_MSG_READDIR:
		return handle_readdir(svc, conn, h);
	case KVC_MSG_SETATTR:
		return handle_setattr(svc, conn, h);
	case KVC_MSG_GETATTR:
	case KVC_MSG_EXTEND_SIZE:
	case KVC_MSG_STATFS:
	case KVC_MSG_OPEN:
	case KVC_MSG_CLOSE:
	case KVC_MSG_RENEW:
		return handle_simple(svc, conn, h);
	default:
		return kvc_server_reply(conn, h, -EOPNOTSUPP, NULL, 0);
	}
}
