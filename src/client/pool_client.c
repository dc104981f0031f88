/* pool_client: the page pool API of include/kvc/meta.h over the binary
 * protocol (message bodies: src/core/wire.h). */
#include "kvc/meta.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/pool_client.h"
#include "core/config.h"
#include "core/net.h"
#include "core/rpc.h"

struct kvc_meta {
	struct kvc_rpc_pool pool;
};

int kvc_meta_open_cred(struct kvc_meta **out, const char *address,
                       const struct kvc_auth_cred *cred)
{
	struct kvc_meta *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	int rc = kvc_rpc_pool_init(&m->pool, address, cred, 2000, 10000);
	if (rc < 0) {
		free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int kvc_meta_open(struct kvc_meta **out, const char *address, const char *pool_secret)
{
	struct kvc_auth_cred cred = {.role = KVC_AUTH_NONE};
	size_t length = pool_secret ? strlen(pool_secret) : 0;
	if (length && pool_secret[length - 1] == '\n')
		length--; /* the file's text as read */
	if (length) {
		if (length < KVC_AUTH_MIN_KEY || length > KVC_AUTH_MAX_KEY)
			return -EINVAL;
		cred.role = KVC_AUTH_POOL;
		cred.key.length = (uint32_t)length;
		memcpy(cred.key.bytes, pool_secret, length);
	}
	return kvc_meta_open_cred(out, address, &cred);
}

int kvc_meta_open_config(struct kvc_meta **out, const char *config_path)
{
	struct kvc_config *config = malloc(sizeof(*config));
	char err[512];
	if (!config)
		return -ENOMEM;
	int rc = kvc_config_load(config_path, config, err, sizeof(err));
	/* The pool secret is what a pool client needs; a process that holds
	 * only the cluster secret (root tools) proves that instead. */
	if (rc == 0) {
		rc = kvc_config_load_secret(config, KVC_AUTH_POOL, err, sizeof(err));
		if (rc < 0 && kvc_config_load_secret(config, KVC_AUTH_CLUSTER, err, sizeof(err)) == 0)
			rc = 0;
	}
	if (rc == 0)
		rc = kvc_meta_open_cred(out, config->meta_address, &config->cred);
	free(config);
	return rc;
}

void kvc_meta_close(struct kvc_meta *m)
{
	if (!m)
		return;
	kvc_rpc_pool_destroy(&m->pool);
	free(m);
}

/* One pool request's body: the head, the namespace, the keys, then a and
 * b (i64 arrays). Returns its length, or -errno; *out is malloc'd. */
static int encode(const char *ns, struct kvc_msg_pool head, const struct kvc_meta_key *keys,
                  const int64_t *a, uint32_t a_count, const int64_t *b, uint32_t b_count,
                  uint8_t **out)
{
	size_t ns_len = ns ? strlen(ns) : 0;
	if (ns_len > 64 || head.count > KVC_META_MAX_BATCH)
		return -EINVAL;
	head.ns_len = (uint32_t)ns_len;
	/* Exactly the request's size: a fresh 1 MiB buffer per call costs an
	 * mmap and its page faults every time. */
	uint64_t need = sizeof(head) + ns_len + ((uint64_t)a_count + b_count) * 8u;
	for (uint32_t i = 0; keys && i < head.count; i++)
		need += 4 + (uint64_t)keys[i].length;
	if (need > KVC_WIRE_MAX_BODY)
		return -EMSGSIZE;
	uint8_t *body = malloc(need);
	if (!body)
		return -ENOMEM;
	uint32_t off = sizeof(head);
	memcpy(body, &head, sizeof(head));
	memcpy(body + off, ns, ns_len);
	off += (uint32_t)ns_len;
	_Static_assert(sizeof(struct kvc_meta_key) == sizeof(struct kvc_wire_key), "");
	int rc = keys ? kvc_wire_keys_encode(body, (uint32_t)need, &off,
	                                     (const struct kvc_wire_key *)keys, head.count)
	              : 0;
	if (rc == 0) {
		if (a_count)
			memcpy(body + off, a, a_count * 8u);
		if (b_count)
			memcpy(body + off + a_count * 8u, b, b_count * 8u);
		off += (a_count + b_count) * 8u;
		*out = body;
		return (int)off;
	}
	free(body);
	return rc;
}

/* Transport errors the caller sees as such; the rest as -EIO. */
static int transport(int rc)
{
	return kvc_rpc_is_transport_error(rc) && rc != -ECONNREFUSED && rc != -ETIMEDOUT ? -EIO
	                                                                                   : rc;
}

/* Build and send one pool request; the reply body lands in reply. */
static int call(struct kvc_meta *m, uint16_t type, const char *ns, struct kvc_msg_pool head,
                const struct kvc_meta_key *keys, const int64_t *a, uint32_t a_count,
                const int64_t *b, uint32_t b_count, void *reply, uint32_t reply_cap,
                uint32_t *reply_len)
{
	uint8_t *body = NULL;
	int len = encode(ns, head, keys, a, a_count, b, b_count, &body);
	int rc = len < 0 ? len
	                 : transport(kvc_rpc_call(&m->pool, type, body, (uint32_t)len, reply,
	                                          reply_cap, reply_len));
	free(body);
	return rc;
}

static struct kvc_msg_pool head_of(uint32_t rank, uint32_t count, uint32_t value)
{
	return (struct kvc_msg_pool){.rank = rank, .count = count, .value = value};
}

int kvc_meta_pool_init(struct kvc_meta *m, const char *ns, uint32_t rank, uint32_t num_pages,
                       uint32_t world_size)
{
	struct kvc_msg_pool h = head_of(rank, 0, num_pages);
	h.world_size = world_size;
	return call(m, KVC_MSG_POOL_INIT, ns, h, NULL, NULL, 0, NULL, 0, NULL, 0, NULL);
}

int kvc_meta_pool_set_world(struct kvc_meta *m, const char *ns, uint32_t world_size)
{
	return call(m, KVC_MSG_POOL_WORLD, ns, head_of(0, 0, world_size), NULL, NULL, 0, NULL, 0,
	            NULL, 0, NULL);
}

int kvc_meta_allocate(struct kvc_meta *m, const char *ns, uint32_t rank,
                      const struct kvc_meta_key *keys, uint32_t count, int64_t *pages,
                      bool *already)
{
	struct kvc_msg_pool_allocation *out = calloc(count ? count : 1, sizeof(*out));
	uint32_t len = 0;
	if (!out)
		return -ENOMEM;
	int rc = call(m, KVC_MSG_POOL_ALLOCATE, ns, head_of(rank, count, 0), keys, NULL, 0, NULL,
	              0, out, count * (uint32_t)sizeof(*out), &len);
	if (rc == 0 && len != count * sizeof(*out))
		rc = -EIO;
	for (uint32_t i = 0; rc == 0 && i < count; i++) {
		pages[i] = out[i].page;
		if (already)
			already[i] = out[i].already != 0;
	}
	free(out);
	return rc;
}

int kvc_meta_confirm(struct kvc_meta *m, const char *ns, uint32_t rank,
                     const struct kvc_meta_key *keys, const int64_t *pages, uint32_t count,
                     const int64_t *release, uint32_t release_count, int *statuses)
{
	int32_t *out = calloc(count ? count : 1, 4);
	uint32_t len = 0;
	if (!out || release_count > KVC_META_MAX_BATCH) {
		free(out);
		return out ? -EINVAL : -ENOMEM;
	}
	int rc = call(m, KVC_MSG_POOL_CONFIRM, ns, head_of(rank, count, release_count), keys,
	              pages, count, release, release_count, out, count * 4u, &len);
	if (rc == 0 && len != count * 4u)
		rc = -EIO;
	for (uint32_t i = 0; rc == 0 && statuses && i < count; i++)
		statuses[i] = out[i];
	free(out);
	return rc;
}

int kvc_meta_exists(struct kvc_meta *m, const char *ns, const struct kvc_meta_key *keys,
                    uint32_t count, bool *found)
{
	uint8_t *out = calloc(count ? count : 1, 1);
	uint32_t len = 0;
	if (!out)
		return -ENOMEM;
	int rc = call(m, KVC_MSG_POOL_EXISTS, ns, head_of(0, count, 0), keys, NULL, 0, NULL, 0,
	              out, count, &len);
	if (rc == 0 && len != count)
		rc = -EIO;
	for (uint32_t i = 0; rc == 0 && i < count; i++)
		found[i] = out[i] != 0;
	free(out);
	return rc;
}

int kvc_meta_wait(struct kvc_meta *m, const char *ns, const struct kvc_meta_key *keys,
                  uint32_t count, uint32_t timeout_ms, bool *complete)
{
	if (timeout_ms > KVC_META_MAX_WAIT_MS || count > KVC_META_MAX_WAIT_KEYS)
		return -EINVAL;
	uint8_t *body = NULL, *out = calloc(count ? count : 1, 1);
	uint32_t len = 0;
	int size = out ? encode(ns, head_of(0, count, timeout_ms), keys, NULL, 0, NULL, 0, &body)
	               : -ENOMEM;
	struct kvc_rpc_patience patience = {.wait_ms = (int)timeout_ms};
	int rc = size < 0 ? size
	                  : transport(kvc_rpc_call_waiting(&m->pool, KVC_MSG_POOL_WAIT, body,
	                                                   (uint32_t)size, out, count, &len,
	                                                   &patience));
	if (rc == 0 && len != count)
		rc = -EIO;
	int done = 0;
	for (uint32_t i = 0; rc == 0 && i < count; i++) {
		complete[i] = out[i] != 0;
		done += out[i] != 0;
	}
	free(body);
	free(out);
	return rc < 0 ? rc : done;
}

int kvc_meta_lease_locations(struct kvc_meta *m, const char *ns, uint32_t rank,
                             const struct kvc_meta_key *keys, uint32_t count, uint32_t lease_ms,
                             int64_t *pages, uint32_t *leases)
{
	uint32_t len = 0;
	if (count > KVC_META_MAX_BATCH)
		return -EINVAL;
	uint8_t *out = malloc(count ? count * 12u : 12u);
	int rc = out ? call(m, KVC_MSG_POOL_LOCATIONS, ns, head_of(rank, count, lease_ms), keys,
	                    NULL, 0, NULL, 0, out, count * 12u, &len)
	             : -ENOMEM;
	if (rc == 0 && len != count * 12u)
		rc = -EIO;
	if (rc == 0) {
		memcpy(pages, out, count * 8u);
		if (leases)
			memcpy(leases, out + count * 8u, count * 4u);
	}
	free(out);
	return rc;
}

int kvc_meta_locations(struct kvc_meta *m, const char *ns, uint32_t rank,
                       const struct kvc_meta_key *keys, uint32_t count, uint32_t lease_ms,
                       int64_t *pages)
{
	return kvc_meta_lease_locations(m, ns, rank, keys, count, lease_ms, pages, NULL);
}

int kvc_meta_leases_release(struct kvc_meta *m, const char *ns,
                            const struct kvc_meta_key *keys, const uint32_t *leases,
                            uint32_t count, bool *held)
{
	if (count > KVC_META_MAX_BATCH)
		return -EINVAL;
	uint8_t *out = calloc(count ? count : 1, 1);
	int64_t *numbers = malloc(count ? count * 8u : 8u); /* sent as i64, as CONFIRM's pages */
	uint32_t len = 0;
	int rc = !leases && count ? -EINVAL : out && numbers ? 0 : -ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < count; i++)
		numbers[i] = leases[i];
	if (rc == 0)
		rc = call(m, KVC_MSG_POOL_RELEASE_LEASES, ns, head_of(0, count, 0), keys, numbers,
		          count, NULL, 0, out, count, &len);
	if (rc == 0 && len != count)
		rc = -EIO;
	int still = 0;
	for (uint32_t i = 0; rc == 0 && i < count; i++) {
		if (held)
			held[i] = out[i] != 0;
		still += out[i] != 0;
	}
	free(numbers);
	free(out);
	return rc < 0 ? rc : still;
}

int kvc_meta_release_leases(struct kvc_meta *m, const char *ns,
                            const struct kvc_meta_key *keys, uint32_t count)
{
	if (count > KVC_META_MAX_BATCH)
		return -EINVAL;
	uint32_t *none = calloc(count ? count : 1, sizeof(*none)); /* number 0: nothing */
	int rc = none ? kvc_meta_leases_release(m, ns, keys, none, count, NULL) : -ENOMEM;
	free(none);
	return rc < 0 ? rc : 0;
}

int kvc_meta_delete(struct kvc_meta *m, const char *ns, const struct kvc_meta_key *keys,
                    uint32_t count)
{
	struct kvc_msg_count_reply out = {0};
	uint32_t len = 0;
	int rc = call(m, KVC_MSG_POOL_DELETE, ns, head_of(0, count, 0), keys, NULL, 0, NULL, 0,
	              &out, sizeof(out), &len);
	return rc < 0 ? rc : (int)out.count;
}

int kvc_meta_clear(struct kvc_meta *m, const char *ns)
{
	/* kvc-meta clears a bounded number of keys per request and says
	 * whether keys remain. */
	struct kvc_msg_count_reply left = {1};
	int rc = 0;
	while (rc == 0 && left.count) {
		uint32_t len = 0;
		left.count = 0;
		rc = call(m, KVC_MSG_POOL_CLEAR, ns, head_of(0, 0, 0), NULL, NULL, 0, NULL, 0, &left,
		          sizeof(left), &len);
	}
	return rc;
}

int kvc_meta_pool_stats(struct kvc_meta *m, const char *ns, uint32_t rank,
                        struct kvc_meta_pool_stats *out)
{
	struct kvc_msg_pool_stats st;
	uint32_t len = 0;
	int rc = call(m, KVC_MSG_POOL_STATS, ns, head_of(rank, 0, 0), NULL, NULL, 0, NULL, 0, &st,
	              sizeof(st), &len);
	if (rc == 0 && len != sizeof(st))
		rc = -EIO;
	if (rc == 0)
		*out = (struct kvc_meta_pool_stats){st.world_size, st.ranks, st.num_pages,
		                                    st.free_pages, st.keys, st.complete_keys,
		                                    st.leased_keys, st.retired_keys, st.evictions};
	return rc;
}

int kvc_meta_pool_list(struct kvc_meta *m, struct kvc_meta_pool_entry *out, int max)
{
	uint8_t *reply = malloc(KVC_WIRE_MAX_BODY);
	uint32_t len = 0;
	if (!reply)
		return -ENOMEM;
	int rc = call(m, KVC_MSG_POOL_LIST, "", head_of(0, 0, 0), NULL, NULL, 0, NULL, 0, reply,
	              KVC_WIRE_MAX_BODY, &len);
	uint64_t count = 0;
	if (rc == 0 && len >= 8)
		memcpy(&count, reply, 8);
	if (rc == 0 && (len < 8 || len != 8 + count * sizeof(*out)))
		rc = -EIO;
	_Static_assert(sizeof(struct kvc_meta_pool_entry) == sizeof(struct kvc_msg_pool_entry), "");
	int n = rc == 0 ? ((int)count < max ? (int)count : max) : 0;
	if (n > 0)
		memcpy(out, reply + 8, (size_t)n * sizeof(*out));
	free(reply);
	return rc < 0 ? rc : n;
}

int kvc_meta_pool_bind(struct kvc_meta *m, const char *ns, uint32_t rank, const char *path,
                       uint64_t page_size)
{
	if (path && (strlen(path) > KVC_META_MAX_PATH || page_size == 0 || page_size > INT64_MAX))
		return -EINVAL;
	struct kvc_meta_key key = {path, path ? (uint32_t)strlen(path) : 0};
	int64_t size = (int64_t)page_size;
	return call(m, KVC_MSG_POOL_BIND, ns, head_of(rank, path ? 1 : 0, 0), path ? &key : NULL,
	            path ? &size : NULL, path ? 1 : 0, NULL, 0, NULL, 0, NULL);
}

int kvc_meta_pool_binding(struct kvc_meta *m, const char *ns, uint32_t rank,
                          struct kvc_meta_pool_binding *out)
{
	uint8_t reply[sizeof(struct kvc_msg_pool_binding) + KVC_META_MAX_PATH];
	struct kvc_msg_pool_binding w;
	uint32_t len = 0;
	int rc = call(m, KVC_MSG_POOL_BINDING, ns, head_of(rank, 0, 0), NULL, NULL, 0, NULL, 0,
	              reply, sizeof(reply), &len);
	if (rc == 0 && len < sizeof(w))
		rc = -EIO;
	if (rc == 0)
		memcpy(&w, reply, sizeof(w));
	if (rc == 0 && (w.path_length > KVC_META_MAX_PATH || len != sizeof(w) + w.path_length))
		rc = -EIO;
	if (rc == 0) {
		*out = (struct kvc_meta_pool_binding){w.inode, w.page_size, w.punch_pending, ""};
		memcpy(out->path, reply + sizeof(w), w.path_length);
		out->path[w.path_length] = '\0';
	}
	return rc;
}

int64_t kvc_meta_pool_fsck(struct kvc_meta *m, bool repair)
{
	int64_t problems = 0;
	uint32_t len = 0;
	int rc = call(m, KVC_MSG_POOL_FSCK, "", head_of(0, 0, repair ? 1 : 0), NULL, NULL, 0, NULL,
	              0, &problems, sizeof(problems), &len);
	return rc < 0 ? rc : problems;
}

int kvc_meta_keys(struct kvc_meta *m, const char *ns, const struct kvc_meta_key *after,
                  uint32_t max, struct kvc_meta_key_info *out, bool *more)
{
	if (max == 0 || max > 1024)
		return -EINVAL;
	size_t cap = 8 + (size_t)max * (sizeof(struct kvc_msg_pool_key_info) + KVC_META_MAX_KEY);
	uint8_t *reply = malloc(cap);
	uint32_t len = 0;
	if (!reply)
		return -ENOMEM;
	int rc = call(m, KVC_MSG_POOL_KEYS, ns, head_of(0, after ? 1 : 0, max), after, NULL, 0,
	              NULL, 0, reply, (uint32_t)cap, &len);
	uint32_t head[2] = {0, 0};
	if (rc == 0 && len >= 8)
		memcpy(head, reply, 8);
	if (rc == 0 && (len < 8 || head[0] > max))
		rc = -EIO;
	uint32_t off = 8;
	for (uint32_t i = 0; rc == 0 && i < head[0]; i++) {
		struct kvc_msg_pool_key_info w;
		if (off + sizeof(w) > len) {
			rc = -EIO;
			break;
		}
		memcpy(&w, reply + off, sizeof(w));
		off += sizeof(w);
		if (w.length > KVC_META_MAX_KEY || off + w.length > len) {
			rc = -EIO;
			break;
		}
		memcpy(out[i].bytes, reply + off, w.length);
		out[i].length = w.length;
		out[i].world = w.world;
		out[i].confirmed = w.confirmed;
		out[i].complete = w.complete != 0;
		out[i].lease_until_ms = w.lease_until_ms;
		off += w.length;
	}
	if (rc == 0)
		*more = head[1] != 0;
	free(reply);
	return rc < 0 ? rc : (int)head[0];
}
