/* meta service: see service.h. */
#include "meta/service.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "meta/pool_service.h"
#include "meta/service_internal.h"
#include "meta/watches.h"

const void *kvc_meta_req_take(struct kvc_meta_request *r, uint32_t len)
{
	return kvc_wire_body_take(r->conn->body, r->h->body_len, &r->off, len);
}

bool kvc_meta_req_done(const struct kvc_meta_request *r)
{
	return r->off == r->h->body_len;
}

int kvc_meta_req_reply(struct kvc_meta_request *r, int rc, const void *body, uint32_t len)
{
	return kvc_server_reply(r->conn, r->h, rc, rc < 0 ? NULL : body, rc < 0 ? 0 : len);
}

static int reply_attr(struct kvc_meta_request *r, int rc, const struct kvc_attr *attr)
{
	return kvc_meta_req_reply(r, rc, attr, attr ? sizeof(*attr) : 0);
}

int kvc_meta_req_bad(struct kvc_meta_request *r)
{
	return kvc_meta_req_reply(r, -EINVAL, NULL, 0);
}

/* Watches (watches.h): the client this connection acts for (CLIENT_HELLO)
 * is told about what others change of what it was answered. */
static struct kvc_meta_watcher *watcher(const struct kvc_meta_request *r)
{
	return r->svc->watches ? r->conn->service_state : NULL;
}

void kvc_meta_req_note_name(struct kvc_meta_request *r, uint64_t parent, const char *name,
                            uint32_t len)
{
	if (watcher(r))
		kvc_meta_watches_note_since(r->svc->watches, watcher(r), r->since, KVC_WATCH_NAME,
		                            parent, name, len);
}

void kvc_meta_req_note_inode(struct kvc_meta_request *r, uint64_t ino)
{
	if (watcher(r))
		kvc_meta_watches_note_since(r->svc->watches, watcher(r), r->since, KVC_WATCH_INODE,
		                            ino, NULL, 0);
}

static void changed_name(struct kvc_meta_request *r, uint64_t parent, const char *name,
                         uint32_t len)
{
	if (r->svc->watches)
		kvc_meta_watches_changed(r->svc->watches, watcher(r), KVC_WATCH_NAME, parent, name,
		                         len);
}

void kvc_meta_req_changed_inode(struct kvc_meta_request *r, uint64_t ino)
{
	if (r->svc->watches && ino)
		kvc_meta_watches_changed(r->svc->watches, watcher(r), KVC_WATCH_INODE, ino, NULL, 0);
}

/* A new name made (create, mkdir, mknod, symlink, link): others that
 * cached its absence or the parent's attributes are told; the maker's
 * kernel caches both, so it watches them. */
void kvc_meta_req_made(struct kvc_meta_request *r, uint64_t parent, const char *name,
                       uint32_t len, uint64_t ino)
{
	changed_name(r, parent, name, len);
	kvc_meta_req_changed_inode(r, parent);
	kvc_meta_req_note_name(r, parent, name, len);
	kvc_meta_req_note_inode(r, ino);
	kvc_meta_req_note_inode(r, parent); /* CREATE answers its attributes after */
}

/* The inode a name has now, 0 when none (for the events of a removal). */
static uint64_t ino_of(struct kvc_meta_request *r, uint64_t parent, const char *name, uint32_t len)
{
	struct kvc_attr attr;
	return r->svc->watches && kvc_meta_store_lookup(r->svc->store, parent, name, len,
	                                                &attr) == 0 ? attr.ino : 0;
}

/* A name removed (unlink, rmdir) or replaced (rename): its old inode and
 * its parent changed too. */
void kvc_meta_req_removed(struct kvc_meta_request *r, uint64_t parent, const char *name,
                          uint32_t len, uint64_t ino)
{
	changed_name(r, parent, name, len);
	kvc_meta_req_changed_inode(r, parent);
	kvc_meta_req_changed_inode(r, ino);
}

/* (parent, name) messages. */
static const char *name_of(struct kvc_meta_request *r)
{
	const struct kvc_msg_name *m = r->msg;
	const char *name = kvc_meta_req_take(r, m->name_len);
	return name && kvc_meta_req_done(r) ? name : NULL;
}

static int h_lookup(struct kvc_meta_request *r)
{
	const struct kvc_msg_name *m = r->msg;
	const char *name = name_of(r);
	struct kvc_attr attr;
	if (!name)
		return kvc_meta_req_bad(r);
	int rc = kvc_meta_store_lookup(r->svc->store, m->parent, name, m->name_len, &attr);
	if (rc == 0 || rc == -ENOENT)
		kvc_meta_req_note_name(r, m->parent, name, m->name_len);
	if (rc == 0)
		kvc_meta_req_note_inode(r, attr.ino);
	return reply_attr(r, rc, &attr);
}

/* UNLINK, RMDIR: the reply is the parent's attributes after it. */
static int h_remove(struct kvc_meta_request *r)
{
	const struct kvc_msg_name *m = r->msg;
	const char *name = name_of(r);
	struct kvc_attr dir;
	uint64_t ino = 0;
	if (!name)
		return kvc_meta_req_bad(r);
	int rc = kvc_meta_store_remove_name(r->svc->store, m->parent, name, m->name_len,
	                                    r->h->type == KVC_MSG_RMDIR, &dir, &ino);
	if (rc == 0) {
		kvc_meta_req_removed(r, m->parent, name, m->name_len, ino);
		kvc_meta_req_note_inode(r, m->parent); /* the answer: its attributes after */
	}
	if (rc == 0 && r->h->type == KVC_MSG_UNLINK && r->svc->collector)
		kvc_meta_collector_wake(r->svc->collector);
	return reply_attr(r, rc, &dir);
}

/* CREATE, MKDIR, MKNOD. KVC_CREATE_PARENT_GID: a setgid parent hands
 * down its group (and to directories its setgid bit), decided here from
 * the parent's attributes, so the client needs no GETATTR first.
 * KVC_CREATE_OPEN (CREATE): the client id follows the name; a file this
 * CREATE makes is opened for it in the same transaction, and the reply
 * says whether it made the file. */
static int h_create(struct kvc_meta_request *r)
{
	const struct kvc_msg_create *m = r->msg;
	const char *name = kvc_meta_req_take(r, m->name_len);
	const uint8_t *client = name && (m->flags & KVC_CREATE_OPEN)
	                      ? kvc_meta_req_take(r, KVC_WIRE_CLIENT_ID) : NULL;
	struct kvc_attr attr, dir, after = {0};
	struct kvc_meta_store *store = r->svc->store;
	uint32_t flags = KVC_CREATE_PARENT_GID |
	                 (r->h->type == KVC_MSG_CREATE ? KVC_CREATE_EXCL | KVC_CREATE_OPEN : 0);
	uint32_t mode = m->mode, gid = m->gid;
	bool created = true;
	int rc = 0;
	if (!name || !kvc_meta_req_done(r) || (m->flags & ~flags) ||
	    ((m->flags & KVC_CREATE_OPEN) && !client))
		return kvc_meta_req_bad(r);
	if (m->flags & KVC_CREATE_PARENT_GID) {
		rc = kvc_meta_store_getattr(store, m->parent, &dir);
		if (rc == 0 && (dir.mode & S_ISGID)) {
			gid = dir.gid;
			if (r->h->type == KVC_MSG_MKDIR)
				mode |= S_ISGID;
		}
	}
	if (rc == 0 && r->h->type == KVC_MSG_MKDIR)
		rc = kvc_meta_store_mkdir(store, m->parent, name, m->name_len, mode, m->uid, gid,
		                          &attr);
	else if (rc == 0 && r->h->type == KVC_MSG_MKNOD)
		rc = kvc_meta_store_mknod(store, m->parent, name, m->name_len, mode, m->rdev,
		                          m->uid, gid, &attr);
	else if (rc == 0)
		rc = kvc_meta_store_create_open(store, m->parent, name, m->name_len, mode, m->uid, gid,
		                                m->flags & KVC_CREATE_EXCL, client, &attr, &created,
		                                &after);
	if (rc == 0 && created)
		kvc_meta_req_made(r, m->parent, name, m->name_len, attr.ino);
	else if (rc == 0)
		kvc_meta_req_note_inode(r, attr.ino);
	if (rc < 0 || !(m->flags & KVC_CREATE_OPEN))
		return reply_attr(r, rc, &attr);
	struct {
		struct kvc_attr attr;
		struct kvc_msg_create_reply out;
		struct kvc_attr parent;
	} body = {attr, {.flags = created ? KVC_CREATED : 0}, after};
	return kvc_meta_req_reply(r, 0, &body, sizeof(body));
}

static int h_symlink(struct kvc_meta_request *r)
{
	const struct kvc_msg_symlink *m = r->msg;
	const char *name = kvc_meta_req_take(r, m->name_len);
	const char *target = name ? kvc_meta_req_take(r, m->target_len) : NULL;
	struct kvc_attr attr;
	if (!target || !kvc_meta_req_done(r))
		return kvc_meta_req_bad(r);
	int rc = kvc_meta_store_symlink(r->svc->store, m->parent, name, m->name_len, target,
	                                m->target_len, m->uid, m->gid, &attr);
	if (rc == 0)
		kvc_meta_req_made(r, m->parent, name, m->name_len, attr.ino);
	return reply_attr(r, rc, &attr);
}

static int h_link(struct kvc_meta_request *r)
{
	const struct kvc_msg_link *m = r->msg;
	const char *name = kvc_meta_req_take(r, m->name_len);
	struct kvc_attr attr;
	if (!name || !kvc_meta_req_done(r))
		return kvc_meta_req_bad(r);
	int rc = kvc_meta_store_link(r->svc->store, m->ino, m->new_parent, name, m->name_len,
	                             &attr);
	if (rc == 0) {
		kvc_meta_req_changed_inode(r, m->ino); /* nlink */
		kvc_meta_req_made(r, m->new_parent, name, m->name_len, m->ino);
	}
	return reply_attr(r, rc, &attr);
}

static int h_readlink(struct kvc_meta_request *r)
{
	const struct kvc_msg_ino *m = r->msg;
	char target[KVC_WIRE_MAX_SYMLINK];
	int rc = kvc_meta_store_readlink(r->svc->store, m->ino, target, sizeof(target));
	return kvc_meta_req_reply(r, rc < 0 ? rc : 0, target, rc < 0 ? 0 : (uint32_t)rc);
}

static int h_rename(struct kvc_meta_request *r)
{
	const struct kvc_msg_rename *m = r->msg;
	const char *name = kvc_meta_req_take(r, m->name_len);
	const char *new_name = name ? kvc_meta_req_take(r, m->new_name_len) : NULL;
	if (!new_name || !kvc_meta_req_done(r))
		return kvc_meta_req_bad(r);
	uint64_t moved = ino_of(r, m->parent, name, m->name_len);
	uint64_t replaced = ino_of(r, m->new_parent, new_name, m->new_name_len);
	int rc = kvc_meta_store_rename(r->svc->store, m->parent, name, m->name_len, m->new_parent,
	                               new_name, m->new_name_len, m->flags);
	if (rc == 0) {
		kvc_meta_req_removed(r, m->parent, name, m->name_len, moved);
		kvc_meta_req_removed(r, m->new_parent, new_name, m->new_name_len, replaced);
	}
	if (rc == 0 && r->svc->collector)
		kvc_meta_collector_wake(r->svc->collector);
	return reply_attr(r, rc, NULL);
}

struct readdir_out {
	struct kvc_meta_request *r; /* notes the entries for its client; NULL: none */
	uint64_t parent;
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
	/* A client that caches each entry's name and attributes (readdirplus,
	 * KVC_READDIR_WATCH) as it does a lookup's is told of their changes
	 * the same way. */
	if (out->r) {
		kvc_meta_req_note_name(out->r, out->parent, name, name_len);
		kvc_meta_req_note_inode(out->r, attr->ino);
	}
	return 0;
}

static int h_readdir(struct kvc_meta_request *r)
{
	const struct kvc_msg_readdir *m = r->msg;
	const char *after = kvc_meta_req_take(r, m->after_len);
	if (!after || !kvc_meta_req_done(r) || m->after_len > KVC_WIRE_MAX_NAME)
		return kvc_meta_req_bad(r);
	uint32_t max = m->max_entries & ~KVC_READDIR_WATCH;
	if (max == 0 || max > KVC_WIRE_MAX_DIRENTS)
		max = KVC_WIRE_MAX_DIRENTS;
	struct readdir_out out = {.r = (m->max_entries & KVC_READDIR_WATCH) ? r : NULL,
	                          .parent = m->ino, .cap = KVC_WIRE_MAX_BODY};
	out.buf = malloc(out.cap);
	if (!out.buf)
		return kvc_meta_req_reply(r, -ENOMEM, NULL, 0);
	out.len = sizeof(struct kvc_msg_readdir_reply);
	bool more = false;
	int rc = kvc_meta_store_readdir(r->svc->store, m->ino, after, m->after_len, max,
	                                add_dirent, &out, &more);
	/* Stopped early on a full page: there is more after the last entry. */
	if (rc >= 0 && (uint32_t)rc > out.count)
		more = true;
	struct kvc_msg_readdir_reply head = {.count = out.count, .more = more};
	memcpy(out.buf, &head, sizeof(head));
	rc = kvc_meta_req_reply(r, rc < 0 ? rc : 0, out.buf, out.len);
	free(out.buf);
	return rc;
}

/* A size change (setattr, extend): growing while a shrink's chunks are
 * still to cut answers -EAGAIN from the store: cut them first, once. A
 * shrink commits its size (and records its cut) first, then the chunks
 * are cut here before the answer; if a storage server fails, the size
 * stands, the file cannot grow, and the collector retries the cut. */
static int h_setattr(struct kvc_meta_request *r)
{
	const struct kvc_msg_setattr *m = r->msg;
	struct kvc_meta_service *svc = r->svc;
	struct kvc_attr attr;
	int rc = kvc_meta_store_setattr(svc->store, m, &attr);
	if (rc == -EAGAIN) {
		rc = kvc_meta_collector_truncate(svc->collector, m->ino);
		if (rc == 0)
			rc = kvc_meta_store_setattr(svc->store, m, &attr);
	} else if (rc == 0 && (m->mask & KVC_SETATTR_SIZE)) {
		int cut = kvc_meta_collector_truncate(svc->collector, m->ino);
		if (cut < 0)
			kvc_log_warn("inode %" PRIu64 ": cutting its chunks to %" PRIu64 ": %s; "
			             "the collector retries", m->ino, m->size, strerror(-cut));
	}
	if (rc == 0) {
		kvc_meta_req_changed_inode(r, m->ino);
		kvc_meta_req_note_inode(r, m->ino);
	}
	return reply_attr(r, rc == -EAGAIN ? -EIO : rc, &attr);
}

static int h_getattr(struct kvc_meta_request *r)
{
	const struct kvc_msg_ino *m = r->msg;
	struct kvc_attr attr;
	int rc = kvc_meta_store_getattr(r->svc->store, m->ino, &attr);
	if (rc == 0)
		kvc_meta_req_note_inode(r, m->ino);
	return reply_attr(r, rc, &attr);
}

static int h_extend(struct kvc_meta_request *r)
{
	const struct kvc_msg_extend *m = r->msg;
	struct kvc_attr attr;
	int rc = kvc_meta_store_extend(r->svc->store, m->ino, m->size, &attr);
	if (rc == -EAGAIN) {
		rc = kvc_meta_collector_truncate(r->svc->collector, m->ino);
		if (rc == 0)
			rc = kvc_meta_store_extend(r->svc->store, m->ino, m->size, &attr);
		else
			kvc_log_warn("inode %" PRIu64 ": growing it needs the cut of its chunks first, "
			             "which failed: %s", m->ino, strerror(-rc));
	}
	if (rc == 0) {
		kvc_meta_req_changed_inode(r, m->ino);
		kvc_meta_req_note_inode(r, m->ino); /* the committer caches this answer (attr_cache.h) */
	}
	return reply_attr(r, rc == -EAGAIN ? -EIO : rc, &attr);
}

static int h_statfs(struct kvc_meta_request *r)
{
	struct kvc_msg_statfs_reply out = {.max_inodes = 1ull << 40};
	struct kvc_meta_counts counts;
	struct kvc_reserve_state space;
	int rc = kvc_meta_store_counts(r->svc->store, &counts);
	if (rc == 0) {
		out.inodes = counts.inodes;
		out.open_sessions = counts.open_sessions;
		out.orphans = counts.orphans;
		if (r->svc->watches) {
			struct kvc_meta_watch_stats w;
			kvc_meta_watches_stats(r->svc->watches, &w);
			out.watch_entries = w.entries;
			out.watch_events = w.events;
		}
		out.gc_pending = counts.gc_pending;
		out.grants = counts.grants > UINT32_MAX ? UINT32_MAX : (uint32_t)counts.grants;
	}
	if (rc == 0 && r->svc->space && kvc_reserve_state(r->svc->space, &space) == 0) {
		out.volume_total_bytes = space.total_bytes;
		out.volume_free_bytes = space.free_bytes;
		out.reserve_bytes = space.reserve_bytes;
		out.refused = space.refused;
		out.flags = space.refusing ? KVC_SPACE_REFUSING : 0;
	}
	return kvc_meta_req_reply(r, rc, &out, sizeof(out));
}

/* META_SYNC: a checkpoint of both stores (namespace first: fsync waits
 * on it). */
static int h_sync(struct kvc_meta_request *r)
{
	int rc = kvc_meta_store_sync(r->svc->store);
	if (rc == 0 && r->svc->pools)
		rc = kvc_pool_store_sync(r->svc->pools);
	return kvc_meta_req_reply(r, rc, NULL, 0);
}

/* OPEN, CLOSE, RENEW: every one is also a sign of life of the client. */
static int h_session(struct kvc_meta_request *r)
{
	const struct kvc_msg_session *m = r->msg;
	struct kvc_meta_service *svc = r->svc;
	struct kvc_attr attr;
	_Static_assert(KVC_WIRE_CLIENT_ID == KVC_META_CLIENT_ID, "");
	if (r->h->type == KVC_MSG_RENEW && m->ino > UINT32_MAX)
		return kvc_meta_req_bad(r);
	if (r->h->type == KVC_MSG_RENEW) /* ino: the flags */
		return kvc_meta_req_reply(r, svc->sessions ? kvc_meta_sessions_renew(
			svc->sessions, svc->store, m->client, (uint32_t)m->ino,
			kvc_meta_sessions_now_ms()) : 0, NULL, 0);
	if (svc->sessions)
		kvc_meta_sessions_touch(svc->sessions, m->client, kvc_meta_sessions_now_ms());
	if (r->h->type == KVC_MSG_OPEN) {
		/* kvc-fuse serves GETATTR from this answer (fuse/attr_cache.h). */
		int rc = kvc_meta_store_open_session(svc->store, m->ino, m->client, &attr);
		if (rc == 0)
			kvc_meta_req_note_inode(r, m->ino);
		return reply_attr(r, rc, &attr);
	}
	int rc = kvc_meta_store_close_session(svc->store, m->ino, m->client);
	if (rc == 0 && svc->collector)
		kvc_meta_collector_wake(svc->collector); /* an orphan may be free now */
	return kvc_meta_req_reply(r, rc, NULL, 0);
}

/* SETXATTR, GETXATTR, REMOVEXATTR: the name, then SETXATTR's value. */
static int h_xattr(struct kvc_meta_request *r)
{
	const struct kvc_msg_xattr *m = r->msg;
	struct kvc_meta_store *store = r->svc->store;
	const char *name = kvc_meta_req_take(r, m->name_len);
	uint32_t value_len = r->h->type == KVC_MSG_SETXATTR ? m->value_len : 0;
	const char *value = name ? kvc_meta_req_take(r, value_len) : NULL;
	if (!value || !kvc_meta_req_done(r))
		return kvc_meta_req_bad(r);
	if (r->h->type == KVC_MSG_SETXATTR || r->h->type == KVC_MSG_REMOVEXATTR) {
		int rc = r->h->type == KVC_MSG_SETXATTR
		       ? kvc_meta_store_setxattr(store, m->ino, name, m->name_len, value, value_len,
		                                 m->flags)
		       : kvc_meta_store_removexattr(store, m->ino, name, m->name_len);
		if (rc == 0)
			kvc_meta_req_changed_inode(r, m->ino); /* ctime */
		return kvc_meta_req_reply(r, rc, NULL, 0);
	}
	char *out = malloc(KVC_WIRE_MAX_XATTR_VALUE);
	int rc = out ? kvc_meta_store_getxattr(store, m->ino, name, m->name_len, out,
	                                       KVC_WIRE_MAX_XATTR_VALUE) : -ENOMEM;
	rc = kvc_meta_req_reply(r, rc < 0 ? rc : 0, out, rc < 0 ? 0 : (uint32_t)rc);
	free(out);
	return rc;
}

static int h_listxattr(struct kvc_meta_request *r)
{
	const struct kvc_msg_ino *m = r->msg;
	char *out = malloc(KVC_WIRE_MAX_XATTR_VALUE);
	int rc = out ? kvc_meta_store_listxattr(r->svc->store, m->ino, out,
	                                        KVC_WIRE_MAX_XATTR_VALUE) : -ENOMEM;
	rc = kvc_meta_req_reply(r, rc < 0 ? rc : 0, out, rc < 0 ? 0 : (uint32_t)rc);
	free(out);
	return rc;
}

/* CLIENT_HELLO: this connection acts for a client (once). WATCH: the
 * connection becomes the client's event stream and stays in this handler
 * until it ends; then the connection is closed. */
static int h_client_hello(struct kvc_meta_request *r)
{
	const struct kvc_msg_client_hello *m = r->msg;
	struct kvc_meta_watcher *c;
	if (r->conn->service_state)
		return kvc_meta_req_bad(r);
	int rc = r->svc->watches ? kvc_meta_watches_bind(r->svc->watches, m->client, m->ttl_ms, &c)
	                         : 0;
	if (rc == 0 && r->svc->watches)
		r->conn->service_state = c;
	return kvc_meta_req_reply(r, rc, NULL, 0);
}

static int h_watch(struct kvc_meta_request *r)
{
	const struct kvc_msg_client_hello *m = r->msg;
	struct kvc_meta_watcher *c;
	if (!r->svc->watches)
		return kvc_meta_req_reply(r, -EOPNOTSUPP, NULL, 0);
	int rc = kvc_meta_watches_bind(r->svc->watches, m->client, m->ttl_ms, &c);
	if (rc < 0)
		return kvc_meta_req_reply(r, rc, NULL, 0);
	rc = kvc_meta_req_reply(r, 0, NULL, 0);
	if (rc == 0)
		rc = kvc_meta_watches_stream(r->svc->watches, c, r->conn->fd);
	kvc_meta_watches_unbind(r->svc->watches, c);
	return rc < 0 ? rc : -ECONNRESET; /* the stream is over: close it */
}

/* WATCH_DIR: the client keeps the names of a directory (wire.h). */
static int h_watch_dir(struct kvc_meta_request *r)
{
	const struct kvc_msg_ino *m = r->msg;
	struct kvc_attr attr;
	int rc = !r->svc->watches ? -EOPNOTSUPP : !watcher(r) ? -EINVAL : 0;
	if (rc == 0)
		rc = kvc_meta_store_getattr(r->svc->store, m->ino, &attr);
	if (rc == 0 && !S_ISDIR(attr.mode))
		rc = -ENOTDIR;
	if (rc == 0)
		kvc_meta_watches_note_since(r->svc->watches, watcher(r), r->since, KVC_WATCH_DIR,
		                            m->ino, NULL, 0);
	return kvc_meta_req_reply(r, rc, NULL, 0);
}

void kvc_meta_service_conn_cleanup(void *service, struct kvc_server_conn *conn)
{
	struct kvc_meta_service *svc = service;
	if (svc->watches && conn->service_state)
		kvc_meta_watches_unbind(svc->watches, conn->service_state);
	conn->service_state = NULL;
}

/* The namespace's messages: the fixed struct each body starts with, and
 * whether the body is exactly that (else the handler takes the rest and
 * checks it ends at the body's end). A type not listed is refused. */
struct op {
	uint32_t size;
	bool exact;
	int (*handler)(struct kvc_meta_request *r);
};

#define VAR(type, fn) {sizeof(type), false, fn}
#define EXACT(type, fn) {sizeof(type), true, fn}

static const struct op ops[] = {
	[KVC_MSG_LOOKUP] = VAR(struct kvc_msg_name, h_lookup),
	[KVC_MSG_UNLINK] = VAR(struct kvc_msg_name, h_remove),
	[KVC_MSG_RMDIR] = VAR(struct kvc_msg_name, h_remove),
	[KVC_MSG_CREATE] = VAR(struct kvc_msg_create, h_create),
	[KVC_MSG_MKDIR] = VAR(struct kvc_msg_create, h_create),
	[KVC_MSG_MKNOD] = VAR(struct kvc_msg_create, h_create),
	[KVC_MSG_SYMLINK] = VAR(struct kvc_msg_symlink, h_symlink),
	[KVC_MSG_LINK] = VAR(struct kvc_msg_link, h_link),
	[KVC_MSG_RENAME] = VAR(struct kvc_msg_rename, h_rename),
	[KVC_MSG_READDIR] = VAR(struct kvc_msg_readdir, h_readdir),
	[KVC_MSG_SETXATTR] = VAR(struct kvc_msg_xattr, h_xattr),
	[KVC_MSG_GETXATTR] = VAR(struct kvc_msg_xattr, h_xattr),
	[KVC_MSG_REMOVEXATTR] = VAR(struct kvc_msg_xattr, h_xattr),
	[KVC_MSG_GETATTR] = EXACT(struct kvc_msg_ino, h_getattr),
	[KVC_MSG_READLINK] = EXACT(struct kvc_msg_ino, h_readlink),
	[KVC_MSG_LISTXATTR] = EXACT(struct kvc_msg_ino, h_listxattr),
	[KVC_MSG_SETATTR] = EXACT(struct kvc_msg_setattr, h_setattr),
	[KVC_MSG_EXTEND_SIZE] = EXACT(struct kvc_msg_extend, h_extend),
	[KVC_MSG_OPEN] = EXACT(struct kvc_msg_session, h_session),
	[KVC_MSG_CLOSE] = EXACT(struct kvc_msg_session, h_session),
	[KVC_MSG_RENEW] = EXACT(struct kvc_msg_session, h_session),
	[KVC_MSG_STATFS] = {0, true, h_statfs},
	[KVC_MSG_META_SYNC] = {0, true, h_sync},
	[KVC_MSG_CLIENT_HELLO] = EXACT(struct kvc_msg_client_hello, h_client_hello),
	[KVC_MSG_WATCH] = EXACT(struct kvc_msg_client_hello, h_watch),
	[KVC_MSG_CLOSE_MANY] = VAR(struct kvc_msg_close_many, kvc_meta_service_close_many),
	[KVC_MSG_WATCH_DIR] = EXACT(struct kvc_msg_ino, h_watch_dir),
	[KVC_MSG_INO_GRANT] = EXACT(struct kvc_msg_ino_grant, kvc_meta_service_ino_grant),
	[KVC_MSG_INO_RETURN] = EXACT(struct kvc_msg_ino_return, kvc_meta_service_ino_return),
	[KVC_MSG_ADOPT] = VAR(struct kvc_msg_adopt, kvc_meta_service_adopt),
	[KVC_MSG_REMOVE_MANY] = VAR(struct kvc_msg_remove_many, kvc_meta_service_remove_many),
	[KVC_MSG_KEYS_LOOKUP] = VAR(struct kvc_msg_keys, kvc_meta_service_keys),
	[KVC_MSG_KEYS_CREATE] = VAR(struct kvc_msg_keys, kvc_meta_service_keys),
	[KVC_MSG_KEYS_PUBLISH] = VAR(struct kvc_msg_keys, kvc_meta_service_keys),
	[KVC_MSG_KEYS_REMOVE] = VAR(struct kvc_msg_keys, kvc_meta_service_keys),
};

/* The messages that grow kvc-meta's databases (a name, an inode, an
 * xattr, a pool or a key more): refused with -ENOSPC while the data's
 * volume is below its reserve, which is left to what removes and shrinks
 * (UNLINK, RMDIR, RENAME, SETATTR, CLOSE, REMOVEXATTR, POOL_DELETE,
 * POOL_CLEAR, ...), so deleting always works on a full disk. */
static const bool grows[] = {
	[KVC_MSG_CREATE] = true,     [KVC_MSG_MKDIR] = true,
	[KVC_MSG_MKNOD] = true,      [KVC_MSG_SYMLINK] = true,
	[KVC_MSG_LINK] = true,       [KVC_MSG_SETXATTR] = true,
	[KVC_MSG_POOL_INIT] = true,  [KVC_MSG_POOL_ALLOCATE] = true,
	[KVC_MSG_KEYS_CREATE] = true, [KVC_MSG_INO_GRANT] = true,
	/* (not ADOPT: its files exist already, written by a client that got
	 * its numbers before the reserve was reached; not REMOVE_MANY) */
};

static bool over_reserve(const struct kvc_meta_service *svc, uint16_t type)
{
	return type < sizeof(grows) / sizeof(grows[0]) && grows[type] && svc->space &&
	       kvc_reserve_admit(svc->space, 0) < 0;
}

/* What a connection of the pool secret may send: the page-pool messages,
 * except POOL_BIND, which names a file of the namespace whose pages the
 * collector will punch (that takes the cluster secret, like the namespace). */
static bool pool_role_may_send(uint16_t type)
{
	return type >= KVC_MSG_POOL_INIT && type <= KVC_MSG_POOL_WAIT &&
	       type != KVC_MSG_POOL_BIND;
}

int kvc_meta_service_handle(void *service, struct kvc_server_conn *conn,
                            const struct kvc_wire_header *h)
{
	struct kvc_meta_service *svc = service;
	if (h->data_len)
		return -EPROTO; /* no namespace message carries bulk data */
	if (conn->role == KVC_AUTH_POOL && !pool_role_may_send(h->type))
		return kvc_server_reply(conn, h, -EACCES, NULL, 0);
	if (over_reserve(svc, h->type))
		return kvc_server_reply(conn, h, -ENOSPC, NULL, 0);
	if (h->type >= KVC_MSG_POOL_INIT && h->type <= KVC_MSG_POOL_WAIT)
		return kvc_pool_service_handle(svc->pools, svc->store, conn, h);
	const struct op *op = h->type < sizeof(ops) / sizeof(ops[0]) ? &ops[h->type] : NULL;
	if (!op || !op->handler)
		return kvc_server_reply(conn, h, -EOPNOTSUPP, NULL, 0);
	if (op->exact ? h->body_len != op->size : h->body_len < op->size)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	struct kvc_meta_request r = {.svc = svc, .conn = conn, .h = h, .msg = conn->body, .off = op->size};
	/* Before any read: what changes after it is what notes must catch. */
	if (svc->watches && conn->service_state)
		r.since = kvc_meta_watches_begin(svc->watches);
	return op->handler(&r);
}

bool kvc_meta_service_serves(uint16_t type)
{
	if (type >= KVC_MSG_POOL_INIT && type <= KVC_MSG_POOL_WAIT)
		return kvc_pool_service_serves(type);
	return type < sizeof(ops) / sizeof(ops[0]) && ops[type].handler;
}
