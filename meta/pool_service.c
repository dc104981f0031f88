/* pool_service: see pool_service.h. */
#include "meta/pool_service.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct request {
	const struct kvc_msg_pool *m;
	char ns[KVC_POOL_MAX_NAMESPACE + 1];
	struct kvc_pool_key *keys;
	uint32_t offset; /* past the keys */
	uint64_t now;
};

/* Decode the header, namespace and keys of a pool request. */
static int decode(struct kvc_server_conn *conn, const struct kvc_wire_header *h,
                  struct request *r)
{
	uint32_t off = 0;
	r->m = kvc_wire_body_take(conn->body, h->body_len, &off, sizeof(*r->m));
	if (!r->m || r->m->count > KVC_POOL_MAX_BATCH || r->m->ns_len > KVC_POOL_MAX_NAMESPACE)
		return -EINVAL;
	const char *ns = kvc_wire_body_take(conn->body, h->body_len, &off, r->m->ns_len);
	if (!ns || memchr(ns, '\0', r->m->ns_len))
		return -EINVAL;
	memcpy(r->ns, ns, r->m->ns_len);
	r->ns[r->m->ns_len] = '\0';
	r->now = r->m->now_ms; /* 0: the pool clock, read by the caller */
	r->keys = calloc(r->m->count ? r->m->count : 1, sizeof(*r->keys));
	struct kvc_wire_key *wire = calloc(r->m->count ? r->m->count : 1, sizeof(*wire));
	int rc = r->keys && wire ? 0 : -ENOMEM;
	if (rc == 0)
		rc = kvc_wire_keys_decode(conn->body, h->body_len, &off, wire, r->m->count,
		                          KVC_POOL_MAX_KEY);
	for (uint32_t i = 0; rc == 0 && i < r->m->count; i++)
		r->keys[i] = (struct kvc_pool_key){wire[i].bytes, wire[i].length};
	free(wire);
	r->offset = off;
	return rc;
}

/* The i64 array of count entries after the keys (CONFIRM's pages). */
static const int64_t *take_pages(struct kvc_server_conn *conn, const struct kvc_wire_header *h,
                                 uint32_t *offset, uint32_t count, int64_t **copy)
{
	const void *raw = kvc_wire_body_take(conn->body, h->body_len, offset, count * 8u);
	*copy = raw ? malloc(count ? count * 8u : 8u) : NULL;
	if (*copy)
		memcpy(*copy, raw, count * 8u);
	return *copy;
}

static int confirm(struct kvc_pool_store *pools, struct kvc_server_conn *conn,
                   const struct kvc_wire_header *h, struct request *r, void **reply,
                   uint32_t *len)
{
	int64_t *pages = NULL, *release = NULL;
	uint32_t releases = r->m->value;
	int rc = releases > KVC_POOL_MAX_BATCH ? -EINVAL : 0;
	if (rc == 0 && (!take_pages(conn, h, &r->offset, r->m->count, &pages) ||
	                !take_pages(conn, h, &r->offset, releases, &release)))
		rc = -EINVAL;
	int32_t *statuses = malloc(r->m->count ? r->m->count * 4u : 4u);
	if (rc == 0 && !statuses)
		rc = -ENOMEM;
	if (rc == 0)
		rc = kvc_pool_confirm(pools, r->ns, r->m->rank, r->keys, pages, r->m->count, release,
		                      releases, r->now, statuses);
	free(pages);
	free(release);
	*reply = statuses;
	*len = r->m->count * 4u;
	return rc;
}

struct list_out {
	struct kvc_msg_pool_entry *entries;
	uint32_t count, cap;
};

static int list_one(void *arg, const char *ns, uint32_t rank, uint32_t num_pages,
                    uint32_t free_pages)
{
	struct list_out *l = arg;
	if (l->count == l->cap)
		return 1;
	struct kvc_msg_pool_entry *e = &l->entries[l->count++];
	memset(e, 0, sizeof(*e));
	strncpy(e->ns, ns, sizeof(e->ns) - 1);
	e->rank = rank;
	e->num_pages = num_pages;
	e->free_pages = free_pages;
	return 0;
}

/* The inode of an absolute path in the namespace; must be a regular file. */
static int resolve(struct kvc_meta_store *namespace, const char *path, struct kvc_attr *attr)
{
	uint64_t ino = 1; /* the root */
	if (path[0] != '/')
		return -EINVAL;
	int rc = kvc_meta_store_getattr(namespace, ino, attr);
	for (const char *at = path; rc == 0 && *at;) {
		while (*at == '/')
			at++;
		size_t n = strcspn(at, "/");
		if (n == 0)
			break;
		rc = kvc_meta_store_lookup(namespace, ino, at, (uint32_t)n, attr);
		ino = attr->ino;
		at += n;
	}
	if (rc == 0 && !S_ISREG(attr->mode))
		rc = S_ISDIR(attr->mode) ? -EISDIR : -EINVAL;
	return rc;
}

static int bind(struct kvc_pool_store *pools, struct kvc_meta_store *namespace,
                struct kvc_server_conn *conn, const struct kvc_wire_header *h,
                struct request *r)
{
	if (r->m->count == 0)
		return kvc_pool_bind(pools, r->ns, r->m->rank, NULL);
	int64_t *page_size = NULL;
	struct kvc_pool_binding b = {0};
	struct kvc_attr attr;
	int rc = r->m->count != 1 || r->keys[0].length > KVC_POOL_MAX_PATH ? -EINVAL : 0;
	if (rc == 0 && !take_pages(conn, h, &r->offset, 1, &page_size))
		rc = -EINVAL;
	if (rc == 0) {
		memcpy(b.path, r->keys[0].bytes, r->keys[0].length);
		b.page_size = *page_size > 0 ? (uint64_t)*page_size : 0;
		rc = memchr(b.path, '\0', r->keys[0].length) ? -EINVAL
		   : resolve(namespace, b.path, &attr);
	}
	if (rc == 0) {
		b.inode = attr.ino;
		rc = kvc_pool_bind(pools, r->ns, r->m->rank, &b);
	}
	free(page_size);
	return rc;
}

static int binding(struct kvc_pool_store *pools, struct request *r, void **reply, uint32_t *len)
{
	struct kvc_pool_binding b;
	int rc = kvc_pool_binding_get(pools, r->ns, r->m->rank, &b);
	struct kvc_msg_pool_binding w = {b.inode, b.page_size, b.punch_pending,
	                                 (uint32_t)strlen(b.path), 0};
	uint8_t *out = rc == 0 ? malloc(sizeof(w) + w.path_length) : NULL;
	if (rc == 0 && !out)
		rc = -ENOMEM;
	if (rc == 0) {
		memcpy(out, &w, sizeof(w));
		memcpy(out + sizeof(w), b.path, w.path_length);
		*reply = out;
		*len = (uint32_t)sizeof(w) + w.path_length;
	}
	return rc;
}

/* One decoded request and its answer (*reply malloc'd, *len bytes). */
struct call {
	struct kvc_pool_store *pools;
	struct kvc_meta_store *namespace;
	struct kvc_server_conn *conn;
	const struct kvc_wire_header *h;
	struct request *r;
	void **reply;
	uint32_t *len;
};

static int p_init(struct call *c)
{
	const struct kvc_msg_pool *m = c->r->m;
	return kvc_pool_init(c->pools, c->r->ns, m->rank, m->value, m->world_size);
}

static int p_world(struct call *c)
{
	return kvc_pool_set_world(c->pools, c->r->ns, c->r->m->value);
}

static int p_allocate(struct call *c)
{
	uint32_t n = c->r->m->count;
	struct kvc_pool_allocation *a = calloc(n ? n : 1, sizeof(*a));
	struct kvc_msg_pool_allocation *out = calloc(n ? n : 1, sizeof(*out));
	int rc = a && out ? kvc_pool_allocate(c->pools, c->r->ns, c->r->m->rank, c->r->keys, n,
	                                      c->r->now, a)
	                  : -ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		out[i] = (struct kvc_msg_pool_allocation){a[i].page, a[i].already, 0};
	free(a);
	*c->reply = out;
	*c->len = n * (uint32_t)sizeof(*out);
	return rc;
}

static int p_confirm(struct call *c)
{
	return confirm(c->pools, c->conn, c->h, c->r, c->reply, c->len);
}

static int p_exists(struct call *c)
{
	uint32_t n = c->r->m->count;
	bool *found = calloc(n ? n : 1, sizeof(*found));
	uint8_t *out = calloc(n ? n : 1, 1);
	int rc = found && out ? kvc_pool_exists(c->pools, c->r->ns, c->r->keys, n, found)
	                      : -ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		out[i] = found[i];
	free(found);
	*c->reply = out;
	*c->len = n;
	return rc;
}

/* Blocks this connection's thread until the keys are complete or the
 * timeout (bounded: KVC_POOL_MAX_WAIT_MS, KVC_POOL_MAX_WAITS at once),
 * holding no lock; the peer closing its socket ends it early. The reply
 * is EXISTS': a flag per key, status 0 also at the timeout. */
static int p_wait(struct call *c)
{
	uint32_t n = c->r->m->count;
	bool *complete = calloc(n ? n : 1, sizeof(*complete));
	uint8_t *out = calloc(n ? n : 1, 1);
	struct pollfd hangup = {.fd = c->conn->fd, .events = POLLRDHUP};
	int rc = complete && out ? kvc_pool_wait(c->pools, c->r->ns, c->r->keys, n, c->r->m->value,
	                                         &hangup, 1, complete)
	                         : -ENOMEM;
	if (rc == -ETIMEDOUT)
		rc = 0; /* the flags say which keys are missing */
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		out[i] = complete[i];
	free(complete);
	*c->reply = out;
	*c->len = n;
	return rc;
}

/* Reply: the pages (i64 each), then the leases' numbers (u32 each). */
static int p_locations(struct call *c)
{
	const struct kvc_msg_pool *m = c->r->m;
	uint8_t *out = calloc(m->count ? m->count : 1, 12);
	*c->reply = out;
	*c->len = m->count * 12u;
	int64_t *pages = out ? malloc(m->count ? m->count * 8u : 8u) : NULL;
	uint32_t *leases = pages ? malloc(m->count ? m->count * 4u : 4u) : NULL;
	int rc = leases ? kvc_pool_locations(c->pools, c->r->ns, m->rank, c->r->keys, m->count,
	                                     c->r->now, m->value, pages, leases)
	                : -ENOMEM;
	if (rc == 0) {
		memcpy(out, pages, m->count * 8u);
		memcpy(out + m->count * 8u, leases, m->count * 4u);
	}
	free(pages);
	free(leases);
	return rc;
}

/* Body tail: the leases' numbers (i64 each, as CONFIRM's pages). Reply:
 * a byte per key, 1 when its lease was still held. */
static int p_release_leases(struct call *c)
{
	const struct kvc_msg_pool *m = c->r->m;
	int64_t *numbers = NULL;
	uint32_t *leases = malloc(m->count ? m->count * 4u : 4u);
	bool *held = calloc(m->count ? m->count : 1, sizeof(bool));
	uint8_t *out = calloc(m->count ? m->count : 1, 1);
	*c->reply = out;
	*c->len = m->count;
	int rc = leases && held && out ? 0 : -ENOMEM;
	if (rc == 0 && !take_pages(c->conn, c->h, &c->r->offset, m->count, &numbers))
		rc = -ENOMEM; /* the length was checked before (release_tail) */
	for (uint32_t i = 0; rc == 0 && i < m->count; i++)
		leases[i] = numbers[i] > 0 && numbers[i] <= UINT32_MAX ? (uint32_t)numbers[i] : 0;
	if (rc == 0)
		rc = kvc_pool_release_leases(c->pools, c->r->ns, c->r->keys, leases, m->count,
		                             c->r->now, held);
	for (uint32_t i = 0; rc >= 0 && i < m->count; i++)
		out[i] = held[i];
	free(numbers);
	free(leases);
	free(held);
	return rc < 0 ? rc : 0;
}

static int p_delete(struct call *c)
{
	struct kvc_msg_count_reply *out = calloc(1, sizeof(*out));
	int rc = out ? kvc_pool_delete(c->pools, c->r->ns, c->r->keys, c->r->m->count, c->r->now)
	             : -ENOMEM;
	if (rc >= 0)
		out->count = (uint64_t)rc;
	*c->reply = out;
	*c->len = sizeof(*out);
	return rc < 0 ? rc : 0;
}

/* One bounded step per request: the client repeats while keys remain, so
 * no request holds the writer for long. */
static int p_clear(struct call *c)
{
	struct kvc_msg_count_reply *out = calloc(1, sizeof(*out));
	bool left = false;
	int rc = out ? kvc_pool_clear_some(c->pools, c->r->ns, c->r->now, 4096, &left) : -ENOMEM;
	if (out)
		out->count = left;
	*c->reply = out;
	*c->len = sizeof(*out);
	return rc;
}

static int p_stats(struct call *c)
{
	struct kvc_pool_stats st;
	struct kvc_msg_pool_stats *out = calloc(1, sizeof(*out));
	int rc = out ? kvc_pool_stats(c->pools, c->r->ns, c->r->m->rank, c->r->now, &st)
	             : -ENOMEM;
	if (rc == 0)
		*out = (struct kvc_msg_pool_stats){st.world_size, st.ranks, st.num_pages,
		                                   st.free_pages, st.keys, st.complete_keys,
		                                   st.leased_keys, st.retired_keys, st.evictions};
	*c->reply = out;
	*c->len = sizeof(*out);
	return rc;
}

/* Fits one reply body: (1 MiB - 8) / 80 pools. */
static int p_list(struct call *c)
{
	struct list_out l = {.cap = (KVC_WIRE_MAX_BODY - 8) / sizeof(struct kvc_msg_pool_entry)};
	uint8_t *out = malloc(8 + (size_t)l.cap * sizeof(*l.entries));
	if (!out)
		return -ENOMEM;
	l.entries = (struct kvc_msg_pool_entry *)(out + 8);
	int rc = kvc_pool_list(c->pools, list_one, &l);
	uint64_t count = l.count;
	memcpy(out, &count, 8);
	*c->reply = out;
	*c->len = 8 + l.count * (uint32_t)sizeof(*l.entries);
	return rc;
}

static int p_keys(struct call *c)
{
	const struct kvc_msg_pool *m = c->r->m;
	uint32_t n = m->count;
	uint32_t max = m->value == 0 || m->value > 1024 ? 1024 : m->value;
	struct kvc_pool_key none = {"", 0};
	struct kvc_pool_key_info *infos = calloc(max, sizeof(*infos));
	uint8_t *out = malloc(8 + (size_t)max * (sizeof(struct kvc_msg_pool_key_info) +
	                                         KVC_POOL_MAX_KEY));
	bool more = false;
	int count = infos && out && n <= 1
	                    ? kvc_pool_keys(c->pools, c->r->ns, n ? &c->r->keys[0] : &none, max,
	                                    infos, &more)
	                    : (n > 1 ? -EINVAL : -ENOMEM);
	uint32_t off = 8;
	for (int i = 0; i < count; i++) {
		struct kvc_msg_pool_key_info w = {infos[i].length, infos[i].world, infos[i].confirmed,
		                                  infos[i].complete, infos[i].lease_until};
		memcpy(out + off, &w, sizeof(w));
		memcpy(out + off + sizeof(w), infos[i].bytes, infos[i].length);
		off += (uint32_t)sizeof(w) + infos[i].length;
	}
	if (count >= 0) {
		uint32_t head[2] = {(uint32_t)count, more};
		memcpy(out, head, 8);
	}
	free(infos);
	*c->reply = out;
	*c->len = count >= 0 ? off : 0;
	return count < 0 ? count : 0;
}

static int p_fsck(struct call *c)
{
	int64_t *out = calloc(1, 8);
	int64_t problems = out ? kvc_pool_fsck(c->pools, c->r->m->value == 1) : -ENOMEM;
	if (problems >= 0)
		*out = problems;
	*c->reply = out;
	*c->len = 8;
	return problems < 0 ? (int)problems : 0;
}

static int p_bind(struct call *c)
{
	return bind(c->pools, c->namespace, c->conn, c->h, c->r);
}

static int p_binding(struct call *c)
{
	return binding(c->pools, c->r, c->reply, c->len);
}

/* What follows the keys: CONFIRM's pages (count) and releases (value),
 * RELEASE_LEASES' lease numbers, BIND's page size (with its one key). Counts are within
 * KVC_POOL_MAX_BATCH once decoded; a release count is checked here. */
static uint64_t confirm_tail(const struct request *r)
{
	return ((uint64_t)r->m->count + r->m->value) * 8u;
}

static uint64_t release_tail(const struct request *r)
{
	return (uint64_t)r->m->count * 8u;
}

static uint64_t bind_tail(const struct request *r)
{
	return r->m->count ? 8u : 0u;
}

/* The page-pool messages. Every body is kvc_msg_pool, the namespace and
 * the keys (decode), then `tail` bytes (none when NULL), and ends there:
 * a body of another length is -EINVAL before anything runs. A type
 * without a row is -EOPNOTSUPP. */
static const struct {
	uint64_t (*tail)(const struct request *r);
	int (*handler)(struct call *c);
} ops[] = {
	[KVC_MSG_POOL_INIT] = {NULL, p_init},
	[KVC_MSG_POOL_WORLD] = {NULL, p_world},
	[KVC_MSG_POOL_ALLOCATE] = {NULL, p_allocate},
	[KVC_MSG_POOL_CONFIRM] = {confirm_tail, p_confirm},
	[KVC_MSG_POOL_EXISTS] = {NULL, p_exists},
	[KVC_MSG_POOL_LOCATIONS] = {NULL, p_locations},
	[KVC_MSG_POOL_RELEASE_LEASES] = {release_tail, p_release_leases},
	[KVC_MSG_POOL_DELETE] = {NULL, p_delete},
	[KVC_MSG_POOL_CLEAR] = {NULL, p_clear},
	[KVC_MSG_POOL_STATS] = {NULL, p_stats},
	[KVC_MSG_POOL_LIST] = {NULL, p_list},
	[KVC_MSG_POOL_FSCK] = {NULL, p_fsck},
	[KVC_MSG_POOL_KEYS] = {NULL, p_keys},
	[KVC_MSG_POOL_BIND] = {bind_tail, p_bind},
	[KVC_MSG_POOL_BINDING] = {NULL, p_binding},
	[KVC_MSG_POOL_WAIT] = {NULL, p_wait},
};

bool kvc_pool_service_serves(uint16_t type)
{
	return type < sizeof(ops) / sizeof(ops[0]) && ops[type].handler;
}

static int run(struct call *c)
{
	uint16_t type = c->h->type;
	*c->reply = NULL;
	*c->len = 0;
	if (type >= sizeof(ops) / sizeof(ops[0]) || !ops[type].handler)
		return -EOPNOTSUPP;
	uint64_t tail = ops[type].tail ? ops[type].tail(c->r) : 0;
	if ((uint64_t)c->r->offset + tail != c->h->body_len)
		return -EINVAL;
	return ops[type].handler(c);
}

int kvc_pool_service_handle(struct kvc_pool_store *pools, struct kvc_meta_store *namespace,
                            struct kvc_server_conn *conn, const struct kvc_wire_header *h)
{
	struct request r = {0};
	void *reply = NULL;
	uint32_t len = 0;
	int rc = decode(conn, h, &r);
	if (rc == 0 && r.now == 0)
		r.now = kvc_pool_now_ms(pools);
	struct call c = {pools, namespace, conn, h, &r, &reply, &len};
	if (rc == 0)
		rc = run(&c);
	rc = kvc_server_reply(conn, h, rc, reply, len);
	free(reply);
	free(r.keys);
	return rc;
}
