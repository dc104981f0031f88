/* meta_client: see meta_client.h. */
#include "client/meta_client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

static int call_attr_raw(struct kvc_meta_client *client, uint16_t type, const void *body,
                         uint32_t body_len, struct kvc_attr *attr);

/* What a call waits for in before_call (meta_client.h): the files made
 * before it, all of them (the default: changes of names, syncs), only
 * those about the inode its body starts with (a file; a directory's:
 * those made or removed in it, which are the names a LOOKUP or READDIR
 * there reads; the attributes it answers for them kvc-fuse checks itself,
 * kvc_early_creates_pending), the ones CLOSE_MANY lists, or none. */
enum waits_for { WAITS_FOR_ALL, WAITS_FOR_FIRST_INO, WAITS_FOR_INO_LIST, WAITS_FOR_NONE };
static const uint8_t waits[] = {
	[KVC_MSG_LOOKUP] = WAITS_FOR_FIRST_INO,      [KVC_MSG_READDIR] = WAITS_FOR_FIRST_INO,
	[KVC_MSG_GETATTR] = WAITS_FOR_FIRST_INO,     [KVC_MSG_SETATTR] = WAITS_FOR_FIRST_INO,
	[KVC_MSG_EXTEND_SIZE] = WAITS_FOR_FIRST_INO, [KVC_MSG_OPEN] = WAITS_FOR_FIRST_INO,
	[KVC_MSG_CLOSE] = WAITS_FOR_FIRST_INO,       [KVC_MSG_READLINK] = WAITS_FOR_FIRST_INO,
	[KVC_MSG_SETXATTR] = WAITS_FOR_FIRST_INO,    [KVC_MSG_GETXATTR] = WAITS_FOR_FIRST_INO,
	[KVC_MSG_LISTXATTR] = WAITS_FOR_FIRST_INO,   [KVC_MSG_REMOVEXATTR] = WAITS_FOR_FIRST_INO,
	[KVC_MSG_CLOSE_MANY] = WAITS_FOR_INO_LIST,   [KVC_MSG_RENEW] = WAITS_FOR_NONE,
	[KVC_MSG_STATFS] = WAITS_FOR_NONE,           [KVC_MSG_INO_GRANT] = WAITS_FOR_NONE,
	[KVC_MSG_ADOPT] = WAITS_FOR_NONE,            [KVC_MSG_REMOVE_MANY] = WAITS_FOR_NONE,
	[KVC_MSG_INO_RETURN] = WAITS_FOR_NONE,       [KVC_MSG_WATCH_DIR] = WAITS_FOR_FIRST_INO,
};

static int call(struct kvc_meta_client *client, uint16_t type, const void *body,
                uint32_t body_len, void *out, uint32_t cap, uint32_t *out_len)
{
	int rc = 0;
	enum waits_for w = type < sizeof(waits) ? waits[type] : WAITS_FOR_ALL;
	const uint8_t *bytes = body;
	if (client->before_call && w == WAITS_FOR_ALL)
		rc = client->before_call(client->before_arg, NULL, 0);
	else if (client->before_call && w == WAITS_FOR_FIRST_INO && body_len >= 8)
		rc = client->before_call(client->before_arg, bytes, 1);
	else if (client->before_call && w == WAITS_FOR_INO_LIST &&
	         body_len >= sizeof(struct kvc_msg_close_many))
		rc = client->before_call(client->before_arg, bytes + sizeof(struct kvc_msg_close_many),
		                         (body_len - sizeof(struct kvc_msg_close_many)) / 8);
	if (rc == 0)
		rc = kvc_rpc_call(&client->pool, type, body, body_len, out, cap, out_len);
	return rc;
}

int kvc_meta_client_init(struct kvc_meta_client *client, const struct kvc_config *config)
{
	client->retry_ms = config->manager_count
	                 ? 2 * config->failure_timeout_ms + 4 * config->io_timeout_ms + 1000
	                 : 0;
	return kvc_rpc_pool_init(&client->pool, config->meta_address, &config->cred,
	                         config->connect_timeout_ms, config->io_timeout_ms);
}

/* call_attr again while it times out and retry_ms allows (idempotent
 * calls only). */
static int call_attr_patient(struct kvc_meta_client *client, uint16_t type, const void *body,
                             uint32_t body_len, struct kvc_attr *attr)
{
	int64_t deadline = (int64_t)kvc_clock_monotonic_ns() + (int64_t)client->retry_ms * 1000000;
	int rc = call_attr_raw(client, type, body, body_len, attr);
	while (rc == -ETIMEDOUT && (int64_t)kvc_clock_monotonic_ns() < deadline)
		rc = call_attr_raw(client, type, body, body_len, attr);
	return rc < 0 && kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

void kvc_meta_client_destroy(struct kvc_meta_client *client)
{
	kvc_rpc_pool_destroy(&client->pool);
}

/* A call whose reply is one kvc_attr (or nothing when attr is NULL);
 * transport errors as they are (call_attr makes them -EIO). */
static int call_attr_raw(struct kvc_meta_client *client, uint16_t type, const void *body,
                         uint32_t body_len, struct kvc_attr *attr)
{
	struct kvc_attr reply;
	uint32_t len = 0;
	int rc = call(client, type, body, body_len, &reply, sizeof(reply), &len);
	if (rc < 0)
		return rc;
	if (attr) {
		if (len != sizeof(reply))
			return -EIO;
		*attr = reply;
	}
	return 0;
}

static int call_attr(struct kvc_meta_client *client, uint16_t type, const void *body,
                     uint32_t body_len, struct kvc_attr *attr)
{
	int rc = call_attr_raw(client, type, body, body_len, attr);
	return rc < 0 && kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

/* Bodies of (fixed struct, name...) messages. */
struct named_body {
	uint8_t bytes[64 + 2 * (KVC_WIRE_MAX_NAME + 1)];
	uint32_t len;
};

static int append(struct named_body *b, const void *data, size_t len)
{
	if (b->len + len > sizeof(b->bytes))
		return -ENAMETOOLONG;
	if (len)
		memcpy(b->bytes + b->len, data, len);
	b->len += (uint32_t)len;
	return 0;
}

/* b = fixed, then the parts a and c (either may be empty). */
static int named_body_make(struct named_body *b, const void *fixed, size_t fixed_len,
                           const void *a, size_t a_len, const void *c, size_t c_len)
{
	b->len = 0;
	int rc = append(b, fixed, fixed_len);
	if (rc == 0)
		rc = append(b, a, a_len);
	if (rc == 0)
		rc = append(b, c, c_len);
	return rc;
}

static int name_len(const char *name, uint32_t *len)
{
	size_t n = strlen(name);
	if (n > KVC_WIRE_MAX_NAME)
		return -ENAMETOOLONG;
	*len = (uint32_t)n;
	return 0;
}

static int call_name(struct kvc_meta_client *client, uint16_t type, uint64_t parent,
                     const char *name, struct kvc_attr *attr)
{
	struct named_body b;
	struct kvc_msg_name m = {.parent = parent};
	int rc = name_len(name, &m.name_len);
	if (rc == 0)
		rc = named_body_make(&b, &m, sizeof(m), name, m.name_len, NULL, 0);
	return rc < 0 ? rc : call_attr(client, type, b.bytes, b.len, attr);
}

int kvc_meta_client_lookup(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, struct kvc_attr *attr)
{
	return call_name(client, KVC_MSG_LOOKUP, parent, name, attr);
}

int kvc_meta_client_open(struct kvc_meta_client *client, uint64_t ino,
                         const uint8_t id[KVC_WIRE_CLIENT_ID], struct kvc_attr *attr)
{
	struct kvc_msg_session m = {.ino = ino};
	memcpy(m.client, id, sizeof(m.client));
	/* Sessions are a set: an OPEN that may have landed (its connection
	 * cut before the answer) is sent once more. */
	int rc = call_attr_raw(client, KVC_MSG_OPEN, &m, sizeof(m), attr);
	if (rc < 0 && kvc_rpc_is_transport_error(rc))
		rc = call_attr_raw(client, KVC_MSG_OPEN, &m, sizeof(m), attr);
	return rc < 0 && kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

int kvc_meta_client_close(struct kvc_meta_client *client, uint64_t ino,
                          const uint8_t id[KVC_WIRE_CLIENT_ID])
{
	struct kvc_msg_session m = {.ino = ino};
	memcpy(m.client, id, sizeof(m.client));
	return call_attr(client, KVC_MSG_CLOSE, &m, sizeof(m), NULL);
}

int kvc_meta_client_close_many(struct kvc_meta_client *client, const uint64_t *inos,
                               uint32_t count, const uint8_t id[KVC_WIRE_CLIENT_ID])
{
	struct kvc_msg_close_many m = {.count = count};
	uint32_t got = 0;
	if (count == 0 || count > KVC_WIRE_MAX_CLOSES)
		return -EINVAL;
	memcpy(m.client, id, sizeof(m.client));
	size_t len = sizeof(m) + (size_t)count * sizeof(uint64_t);
	uint8_t *body = malloc(len);
	if (!body)
		return -ENOMEM;
	memcpy(body, &m, sizeof(m));
	memcpy(body + sizeof(m), inos, (size_t)count * sizeof(uint64_t));
	int rc = call(client, KVC_MSG_CLOSE_MANY, body, (uint32_t)len, NULL, 0, &got);
	free(body);
	return rc < 0 && kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

int kvc_meta_client_renew(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                          uint32_t flags)
{
	struct kvc_msg_session m = {.ino = flags};
	memcpy(m.client, id, sizeof(m.client));
	return call_attr(client, KVC_MSG_RENEW, &m, sizeof(m), NULL);
}

int kvc_meta_client_getattr(struct kvc_meta_client *client, uint64_t ino,
                            struct kvc_attr *attr)
{
	struct kvc_msg_ino m = {ino};
	return call_attr(client, KVC_MSG_GETATTR, &m, sizeof(m), attr);
}

int kvc_meta_client_getattr_unwaited(struct kvc_meta_client *client, uint64_t ino,
                                     struct kvc_attr *attr)
{
	struct kvc_msg_ino m = {ino};
	struct kvc_attr reply;
	uint32_t len = 0;
	int rc = kvc_rpc_call(&client->pool, KVC_MSG_GETATTR, &m, sizeof(m), &reply, sizeof(reply),
	                      &len);
	if (rc == 0 && len != sizeof(reply))
		rc = -EIO;
	if (rc == 0)
		*attr = reply;
	return rc;
}

int kvc_meta_client_watch_dir(struct kvc_meta_client *client, uint64_t ino)
{
	struct kvc_msg_ino m = {ino};
	return call_attr(client, KVC_MSG_WATCH_DIR, &m, sizeof(m), NULL);
}

static int call_create(struct kvc_meta_client *client, uint16_t type, uint64_t parent,
                       const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                       uint32_t flags, uint64_t rdev, struct kvc_attr *attr)
{
	struct named_body b;
	struct kvc_msg_create m = {.parent = parent, .mode = mode, .uid = uid, .gid = gid,
	                           .flags = flags, .rdev = rdev};
	int rc = name_len(name, &m.name_len);
	if (rc == 0)
		rc = named_body_make(&b, &m, sizeof(m), name, m.name_len, NULL, 0);
	return rc < 0 ? rc : call_attr(client, type, b.bytes, b.len, attr);
}

int kvc_meta_client_create(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                           bool exclusive, struct kvc_attr *attr)
{
	return call_create(client, KVC_MSG_CREATE, parent, name, mode, uid, gid,
	                   exclusive ? KVC_CREATE_EXCL : 0, 0, attr);
}

int kvc_meta_client_mkdir(struct kvc_meta_client *client, uint64_t parent,
                          const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                          struct kvc_attr *attr)
{
	return call_create(client, KVC_MSG_MKDIR, parent, name, mode, uid, gid,
	                   KVC_CREATE_PARENT_GID, 0, attr);
}

int kvc_meta_client_mknod(struct kvc_meta_client *client, uint64_t parent,
                          const char *name, uint32_t mode, uint64_t rdev, uint32_t uid,
                          uint32_t gid, struct kvc_attr *attr)
{
	return call_create(client, KVC_MSG_MKNOD, parent, name, mode, uid, gid,
	                   KVC_CREATE_PARENT_GID, rdev, attr);
}

int kvc_meta_client_create_open(struct kvc_meta_client *client, uint64_t parent,
                                const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
                                bool exclusive, const uint8_t id[KVC_WIRE_CLIENT_ID],
                                struct kvc_attr *attr, bool *created, struct kvc_attr *parent_attr)
{
	struct named_body b;
	struct kvc_msg_create m = {.parent = parent, .mode = mode, .uid = uid, .gid = gid,
	                           .flags = KVC_CREATE_OPEN | KVC_CREATE_PARENT_GID |
	                                    (exclusive ? KVC_CREATE_EXCL : 0)};
	struct {
		struct kvc_attr attr;
		struct kvc_msg_create_reply out;
		struct kvc_attr parent;
	} reply;
	uint32_t got = 0;
	int rc = name_len(name, &m.name_len);
	if (rc == 0)
		rc = named_body_make(&b, &m, sizeof(m), name, m.name_len, id, KVC_WIRE_CLIENT_ID);
	if (rc < 0)
		return rc;
	rc = call(client, KVC_MSG_CREATE, b.bytes, b.len, &reply, sizeof(reply),
	                  &got);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	if (got != sizeof(reply))
		return -EIO;
	*attr = reply.attr;
	*created = (reply.out.flags & KVC_CREATED) != 0;
	if (parent_attr)
		*parent_attr = reply.parent;
	return 0;
}

/* A call with a body of (fixed struct, up to two variable parts) that
 * may be large (symlink targets, xattr values); the reply's bytes go to
 * out (cap) and their length to *out_len. */
static int call_parts(struct kvc_meta_client *client, uint16_t type, const void *fixed,
                      uint32_t fixed_len, const void *a, uint32_t a_len, const void *b,
                      uint32_t b_len, void *out, uint32_t cap, uint32_t *out_len)
{
	uint32_t len = fixed_len + a_len + b_len;
	uint8_t *body = malloc(len);
	uint32_t got = 0;
	if (!body)
		return -ENOMEM;
	memcpy(body, fixed, fixed_len);
	if (a_len)
		memcpy(body + fixed_len, a, a_len);
	if (b_len)
		memcpy(body + fixed_len + a_len, b, b_len);
	int rc = call(client, type, body, len, out, cap, &got);
	free(body);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	if (out_len)
		*out_len = got;
	return 0;
}

int kvc_meta_client_symlink(struct kvc_meta_client *client, uint64_t parent,
                            const char *name, const char *target, uint32_t uid,
                            uint32_t gid, struct kvc_attr *attr)
{
	struct kvc_msg_symlink m = {.parent = parent, .uid = uid, .gid = gid};
	size_t target_len = strlen(target);
	uint32_t got = 0;
	int rc = name_len(name, &m.name_len);
	if (rc == 0 && target_len > KVC_WIRE_MAX_SYMLINK)
		rc = -ENAMETOOLONG;
	if (rc < 0)
		return rc;
	m.target_len = (uint32_t)target_len;
	rc = call_parts(client, KVC_MSG_SYMLINK, &m, sizeof(m), name, m.name_len, target,
	                m.target_len, attr, sizeof(*attr), &got);
	return rc == 0 && got != sizeof(*attr) ? -EIO : rc;
}

int kvc_meta_client_readlink(struct kvc_meta_client *client, uint64_t ino, char *out,
                             uint32_t cap)
{
	struct kvc_msg_ino m = {ino};
	uint32_t got = 0;
	if (cap == 0)
		return -ERANGE;
	int rc = call_parts(client, KVC_MSG_READLINK, &m, sizeof(m), NULL, 0, NULL, 0, out,
	                    cap - 1, &got);
	if (rc < 0)
		return rc == -EMSGSIZE ? -ERANGE : rc;
	out[got] = '\0';
	return (int)got;
}

int kvc_meta_client_link(struct kvc_meta_client *client, uint64_t ino, uint64_t new_parent,
                         const char *name, struct kvc_attr *attr)
{
	struct kvc_msg_link m = {.ino = ino, .new_parent = new_parent};
	uint32_t got = 0;
	int rc = name_len(name, &m.name_len);
	if (rc == 0)
		rc = call_parts(client, KVC_MSG_LINK, &m, sizeof(m), name, m.name_len, NULL, 0,
		                attr, sizeof(*attr), &got);
	return rc == 0 && got != sizeof(*attr) ? -EIO : rc;
}

int kvc_meta_client_setxattr(struct kvc_meta_client *client, uint64_t ino, const char *name,
                             const void *value, uint32_t value_len, uint32_t flags)
{
	struct kvc_msg_xattr m = {.ino = ino, .value_len = value_len, .flags = flags};
	int rc = name_len(name, &m.name_len);
	if (rc == 0 && value_len > KVC_WIRE_MAX_XATTR_VALUE)
		rc = -E2BIG;
	return rc < 0 ? rc : call_parts(client, KVC_MSG_SETXATTR, &m, sizeof(m), name,
	                                m.name_len, value, value_len, NULL, 0, NULL);
}

/* GETXATTR and LISTXATTR: the whole answer (at most 64 KiB), then what
 * the caller asked: its length, or a copy when it fits. */
static int call_xattr_read(struct kvc_meta_client *client, uint16_t type, const void *fixed,
                           uint32_t fixed_len, const char *name, uint32_t name_len_,
                           void *out, uint32_t cap)
{
	uint8_t *buf = malloc(KVC_WIRE_MAX_XATTR_VALUE);
	uint32_t got = 0;
	int rc = buf ? call_parts(client, type, fixed, fixed_len, name, name_len_, NULL, 0, buf,
	                          KVC_WIRE_MAX_XATTR_VALUE, &got) : -ENOMEM;
	if (rc == 0 && cap && got > cap)
		rc = -ERANGE;
	if (rc == 0 && cap)
		memcpy(out, buf, got);
	free(buf);
	return rc < 0 ? rc : (int)got;
}

int kvc_meta_client_getxattr(struct kvc_meta_client *client, uint64_t ino, const char *name,
                             void *out, uint32_t cap)
{
	struct kvc_msg_xattr m = {.ino = ino};
	int rc = name_len(name, &m.name_len);
	return rc < 0 ? rc : call_xattr_read(client, KVC_MSG_GETXATTR, &m, sizeof(m), name,
	                                     m.name_len, out, cap);
}

int kvc_meta_client_listxattr(struct kvc_meta_client *client, uint64_t ino, char *out,
                              uint32_t cap)
{
	struct kvc_msg_ino m = {ino};
	return call_xattr_read(client, KVC_MSG_LISTXATTR, &m, sizeof(m), NULL, 0, out, cap);
}

int kvc_meta_client_removexattr(struct kvc_meta_client *client, uint64_t ino,
                                const char *name)
{
	struct kvc_msg_xattr m = {.ino = ino};
	int rc = name_len(name, &m.name_len);
	return rc < 0 ? rc : call_parts(client, KVC_MSG_REMOVEXATTR, &m, sizeof(m), name,
	                                m.name_len, NULL, 0, NULL, 0, NULL);
}

int kvc_meta_client_unlink(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, struct kvc_attr *parent_attr)
{
	return call_name(client, KVC_MSG_UNLINK, parent, name, parent_attr);
}

int kvc_meta_client_rmdir(struct kvc_meta_client *client, uint64_t parent,
                          const char *name, struct kvc_attr *parent_attr)
{
	return call_name(client, KVC_MSG_RMDIR, parent, name, parent_attr);
}

int kvc_meta_client_rename(struct kvc_meta_client *client, uint64_t parent,
                           const char *name, uint64_t new_parent, const char *new_name,
                           uint32_t flags)
{
	struct named_body b;
	struct kvc_msg_rename m = {.parent = parent, .new_parent = new_parent, .flags = flags};
	int rc = name_len(name, &m.name_len);
	if (rc == 0)
		rc = name_len(new_name, &m.new_name_len);
	if (rc == 0)
		rc = named_body_make(&b, &m, sizeof(m), name, m.name_len, new_name,
		                     m.new_name_len);
	return rc < 0 ? rc : call_attr(client, KVC_MSG_RENAME, b.bytes, b.len, NULL);
}

int kvc_meta_client_readdir(struct kvc_meta_client *client, uint64_t ino,
                            const char *after, uint32_t max, struct kvc_meta_dirents *out)
{
	struct named_body b;
	struct kvc_msg_readdir m = {.ino = ino, .max_entries = max};
	int rc = name_len(after, &m.after_len);
	if (rc == 0)
		rc = named_body_make(&b, &m, sizeof(m), after, m.after_len, NULL, 0);
	if (rc < 0)
		return rc;
	rc = call(client, KVC_MSG_READDIR, b.bytes, b.len, out->body,
	                  sizeof(out->body), &out->body_len);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	struct kvc_msg_readdir_reply head;
	if (out->body_len < sizeof(head))
		return -EIO;
	memcpy(&head, out->body, sizeof(head));
	out->count = head.count;
	out->more = head.more != 0;
	out->cursor = sizeof(head);
	return 0;
}

int kvc_meta_client_dirent_next(struct kvc_meta_dirents *page, const char **name,
                                uint32_t *name_len_out, struct kvc_attr *attr)
{
	if (page->cursor >= page->body_len)
		return 0;
	const struct kvc_msg_dirent *d = kvc_wire_body_take(page->body, page->body_len,
	                                                    &page->cursor, sizeof(*d));
	if (!d || d->name_len == 0 || d->name_len > KVC_WIRE_MAX_NAME)
		return -EBADMSG;
	uint32_t padded = (d->name_len + 7u) & ~7u;
	const char *n = kvc_wire_body_take(page->body, page->body_len, &page->cursor, padded);
	if (!n)
		return -EBADMSG;
	*name = n;
	*name_len_out = d->name_len;
	*attr = d->attr;
	return 1;
}

int kvc_meta_client_setattr(struct kvc_meta_client *client,
                            const struct kvc_msg_setattr *request, struct kvc_attr *attr)
{
	return call_attr_patient(client, KVC_MSG_SETATTR, request, sizeof(*request), attr);
}

int kvc_meta_client_extend(struct kvc_meta_client *client, uint64_t ino, uint64_t size,
                           struct kvc_attr *attr)
{
	struct kvc_msg_extend m = {ino, size};
	return call_attr_patient(client, KVC_MSG_EXTEND_SIZE, &m, sizeof(m), attr);
}

int kvc_meta_client_statfs(struct kvc_meta_client *client,
                           struct kvc_msg_statfs_reply *reply)
{
	uint32_t len = 0;
	int rc = call(client, KVC_MSG_STATFS, NULL, 0, reply, sizeof(*reply),
	                      &len);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	return len == sizeof(*reply) ? 0 : -EIO;
}

int kvc_meta_client_sync(struct kvc_meta_client *client)
{
	return call_attr(client, KVC_MSG_META_SYNC, NULL, 0, NULL);
}

/* ---- ring keys (KEYS_*: many names of one directory per message) ---- */

int kvc_meta_client_keys(struct kvc_meta_client *client, uint16_t type,
                         const struct kvc_msg_keys *m, const struct kvc_meta_keyname *keys,
                         struct kvc_msg_key_result *out)
{
	if (m->count > KVC_WIRE_MAX_KEYS)
		return -EINVAL;
	bool publish = type == KVC_MSG_KEYS_PUBLISH, named = type != KVC_MSG_KEYS_CREATE;
	size_t cap = sizeof(*m);
	for (uint32_t i = 0; named && i < m->count; i++)
		cap += 20 + (size_t)keys[i].name_len;
	if (cap > KVC_WIRE_MAX_BODY)
		return -EINVAL;
	uint8_t *body = malloc(cap);
	if (!body)
		return -ENOMEM;
	size_t off = sizeof(*m);
	memcpy(body, m, sizeof(*m));
	for (uint32_t i = 0; named && i < m->count; i++) {
		const struct kvc_meta_keyname *k = &keys[i];
		if (publish) {
			memcpy(body + off, &k->size, 8);
			memcpy(body + off + 8, &k->temp, 8);
			off += 16;
		}
		memcpy(body + off, &k->name_len, 4);
		off += 4;
		memcpy(body + off, k->name, k->name_len);
		off += k->name_len;
	}
	uint32_t want = m->count * (uint32_t)sizeof(*out), len = 0;
	int rc = call(client, type, body, (uint32_t)off, out, want, &len);
	free(body);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	return len == want ? 0 : -EIO;
}

/* ---- early creates (fuse/early_creates.h) ---- */

int kvc_meta_client_ino_grant(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                              uint32_t count, struct kvc_msg_ino_grant_reply *out)
{
	struct kvc_msg_ino_grant m = {.count = count};
	uint32_t len = 0;
	memcpy(m.client, id, sizeof(m.client));
	int rc = call(client, KVC_MSG_INO_GRANT, &m, sizeof(m), out, sizeof(*out), &len);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	return len == sizeof(*out) && out->count == count ? 0 : -EIO;
}

int kvc_meta_client_ino_return(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                               const struct kvc_msg_ino_range ranges[2], uint64_t *reclaimed)
{
	struct kvc_msg_ino_return m = {.ranges = {ranges[0], ranges[1]}};
	struct kvc_msg_ino_return_reply out = {0};
	uint32_t len = 0;
	memcpy(m.client, id, sizeof(m.client));
	int rc = call(client, KVC_MSG_INO_RETURN, &m, sizeof(m), &out, sizeof(out), &len);
	if (rc < 0)
		return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
	*reclaimed = out.reclaimed;
	return len == sizeof(out) ? 0 : -EIO;
}

/* A message of head (head_len bytes), then count records, each a fixed
 * part of rec_size bytes that fill writes for item i (returning the
 * item's name, its length in *name_len) followed by the name's bytes;
 * the reply is count kvc_msg_key_result. Transport errors come back as
 * they are: the caller decides (fuse/early_creates.c retries). */
typedef const char *(*record_fill)(const void *items, uint32_t i, void *rec,
                                   uint32_t *name_len);

static int call_named_records(struct kvc_meta_client *client, uint16_t type, const void *head,
                              uint32_t head_len, const void *items, uint32_t count,
                              uint32_t rec_size, record_fill fill,
                              struct kvc_msg_key_result *out)
{
	uint8_t rec[128];
	uint32_t name_len;
	if (count == 0 || count > KVC_WIRE_MAX_KEYS || rec_size > sizeof(rec))
		return -EINVAL;
	size_t cap = head_len;
	for (uint32_t i = 0; i < count; i++) {
		fill(items, i, rec, &name_len);
		cap += rec_size + name_len;
	}
	if (cap > KVC_WIRE_MAX_BODY)
		return -EINVAL;
	uint8_t *body = malloc(cap);
	if (!body)
		return -ENOMEM;
	memcpy(body, head, head_len);
	size_t off = head_len;
	for (uint32_t i = 0; i < count; i++) {
		const char *name = fill(items, i, rec, &name_len);
		memcpy(body + off, rec, rec_size);
		memcpy(body + off + rec_size, name, name_len);
		off += rec_size + name_len;
	}
	uint32_t want = count * (uint32_t)sizeof(*out), len = 0;
	int rc = call(client, type, body, (uint32_t)off, out, want, &len);
	free(body);
	if (rc < 0)
		return rc;
	return len == want ? 0 : -EIO;
}

static const char *adopt_fill(const void *items, uint32_t i, void *rec, uint32_t *name_len)
{
	const struct kvc_meta_adoption *f = (const struct kvc_meta_adoption *)items + i;
	struct kvc_msg_adopt_record r = {.parent = f->parent, .attr = f->attr,
	                                 .flags = f->flags, .name_len = f->name_len};
	memcpy(rec, &r, sizeof(r));
	*name_len = f->name_len;
	return f->name;
}

int kvc_meta_client_adopt(struct kvc_meta_client *client, const uint8_t id[KVC_WIRE_CLIENT_ID],
                          const struct kvc_meta_adoption *files, uint32_t count,
                          struct kvc_msg_key_result *out)
{
	struct kvc_msg_adopt m = {.count = count};
	memcpy(m.client, id, sizeof(m.client));
	return call_named_records(client, KVC_MSG_ADOPT, &m, sizeof(m), files, count,
	                          sizeof(struct kvc_msg_adopt_record), adopt_fill, out);
}

static const char *removal_fill(const void *items, uint32_t i, void *rec, uint32_t *name_len)
{
	const struct kvc_meta_removal *n = (const struct kvc_meta_removal *)items + i;
	struct kvc_msg_remove_record r = {.parent = n->parent, .ino = n->ino,
	                                  .name_len = n->name_len};
	memcpy(rec, &r, sizeof(r));
	*name_len = n->name_len;
	return n->name;
}

int kvc_meta_client_remove_many(struct kvc_meta_client *client,
                                const struct kvc_meta_removal *names, uint32_t count,
                                struct kvc_msg_key_result *out)
{
	struct kvc_msg_remove_many m = {.count = count};
	return call_named_records(client, KVC_MSG_REMOVE_MANY, &m, sizeof(m), names, count,
	                          sizeof(struct kvc_msg_remove_record), removal_fill, out);
}
