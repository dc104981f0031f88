/* storage_target: see storage_target.h. */
#include "client/storage_target.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/storage_client_internal.h"
#include "core/clock.h"
#include "core/layout.h"

static struct kvc_rpc_pool *pool_of(struct kvc_storage_client *client, uint32_t target)
{
	if (target >= client->target_count || client->target_server[target] >= client->server_count)
		return NULL;
	return &client->pools[client->target_server[target]];
}

int kvc_storage_target_call(struct kvc_storage_client *client, uint32_t target, uint16_t type,
                            const void *body, uint32_t body_len, void *reply,
                            uint32_t reply_cap, uint32_t *reply_len)
{
	struct kvc_rpc_pool *pool = pool_of(client, target);
	if (!pool)
		return -EINVAL;
	return kvc_rpc_call(pool, type, body, body_len, reply, reply_cap, reply_len);
}

struct sync_wait {
	struct kvc_storage_client *client;
	uint32_t target;
	int64_t patience_end_ns; /* for a chain's last member serving */
};

/* With a manager, a SYNC is awaited while its target stays in the routing
 * table: a server that stops answering leaves its chains within
 * failure_timeout_ms and the SYNC goes on without it (storage_client.c
 * each_target); one still writing back gigabytes keeps heartbeating,
 * stays, and is waited for. A chain's last member serving never leaves,
 * silent or not: that one is waited for as long as a failover would take
 * (kvc_storage_client_patience_ns), as before there was any waiting. */
static bool still_serving(void *arg)
{
	const struct sync_wait *w = arg;
	int serves = kvc_storage_client_serves(w->client, w->target);
	return serves == 1 || (serves == 2 && (int64_t)kvc_clock_monotonic_ns() < w->patience_end_ns);
}

int kvc_storage_target_call_idempotent(struct kvc_storage_client *client, uint32_t target,
                                       uint16_t type, const void *body, uint32_t body_len,
                                       void *reply, uint32_t reply_cap, uint32_t *reply_len)
{
	struct kvc_rpc_pool *pool = pool_of(client, target);
	if (!pool)
		return -EINVAL;
	/* A SYNC answers once the target's writes are on its disk: after a
	 * large write that is seconds of writeback, more than io_timeout_ms
	 * (which then failed an fsync with EIO while the data was on its way).
	 * Without a manager it is awaited up to KVC_STORAGE_SYNC_WAIT_MS more;
	 * with one, as long as its target still serves (still_serving). */
	struct sync_wait w = {.client = client, .target = target};
	if (type == KVC_MSG_SYNC) /* (only a SYNC waits: no clock read for the rest) */
		w.patience_end_ns = (int64_t)kvc_clock_monotonic_ns() +
		                    kvc_storage_client_patience_ns(client);
	struct kvc_rpc_patience sync = {.wait_ms = KVC_STORAGE_SYNC_WAIT_MS,
	                                .still = client->following ? still_serving : NULL,
	                                .arg = &w};
	const struct kvc_rpc_patience *patience = type == KVC_MSG_SYNC ? &sync : NULL;
	int rc = kvc_rpc_call_waiting(pool, type, body, body_len, reply, reply_cap, reply_len,
	                              patience);
	if (rc == -ECONNRESET || rc == -EPIPE) {
		kvc_rpc_pool_drain(pool);
		rc = kvc_rpc_call_waiting(pool, type, body, body_len, reply, reply_cap, reply_len,
		                          patience);
	}
	return rc;
}

static bool before(const struct kvc_msg_chunk_entry *a, const struct kvc_msg_chunk_entry *b)
{
	return a->inode < b->inode || (a->inode == b->inode && a->chunk < b->chunk);
}

int kvc_storage_target_list(struct kvc_storage_client *client, uint32_t target,
                            uint32_t chain, uint32_t version, bool after, uint64_t inode,
                            uint32_t chunk, struct kvc_msg_chunk_entry *out, uint32_t max,
                            bool *more)
{
	if (max == 0 || max > KVC_WIRE_MAX_CHUNK_LIST)
		return -EINVAL;
	struct kvc_msg_chunk_list m = {
		.after_inode = inode, .after_chunk = chunk, .target = target, .max_entries = max,
		.flags = KVC_CHUNK_LIST_AT_VERSION | (after ? KVC_CHUNK_LIST_AFTER : 0),
		.chain = chain, .chain_version = version};
	struct kvc_msg_chunk_list_reply head;
	uint32_t cap = (uint32_t)(sizeof(head) + max * sizeof(*out)), len = 0;
	uint8_t *reply = malloc(cap);
	if (!reply)
		return -ENOMEM;
	int rc = kvc_storage_target_call(client, target, KVC_MSG_CHUNK_LIST, &m, sizeof(m), reply,
	                                 cap, &len);
	if (rc == 0 && len < sizeof(head))
		rc = -EBADMSG;
	if (rc == 0) {
		memcpy(&head, reply, sizeof(head));
		if (head.count > max || head.more > 1 || len != sizeof(head) + head.count * sizeof(*out))
			rc = -EBADMSG;
	}
	if (rc == 0) {
		memcpy(out, reply + sizeof(head), head.count * sizeof(*out));
		/* In order, and after the cursor: a merge relies on it. */
		struct kvc_msg_chunk_entry cursor = {.inode = inode, .chunk = chunk};
		for (uint32_t i = 0; i < head.count && rc == 0; i++)
			if ((i > 0 || after) && !before(i ? &out[i - 1] : &cursor, &out[i]))
				rc = -EBADMSG;
	}
	free(reply);
	if (rc < 0)
		return rc;
	*more = head.more;
	return (int)head.count;
}

/* One CHUNK_READ of one piece on fd; 1 when the frame was consumed
 * (the connection is reusable) with *status the piece's, or -errno. */
static int read_exchange(struct kvc_rpc_pool *pool, int fd, const struct kvc_msg_piece *piece,
                         void *buf, uint32_t *present, int *status)
{
	struct {
		struct kvc_msg_chunk_read head;
		struct kvc_msg_piece piece;
	} body = {{.count = 1}, *piece};
	struct kvc_msg_piece_result result;
	struct kvc_wire_header h;
	uint64_t id = kvc_rpc_next_id(pool);
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_READ, id, 0, sizeof(body), 0);
	int rc = kvc_wire_send(fd, &h, &body, NULL, 0);
	if (rc == 0)
		rc = kvc_wire_recv(fd, &h, &result, sizeof(result));
	if (rc < 0)
		return rc;
	if (h.request_id != id || h.type != KVC_MSG_CHUNK_READ)
		return -EBADMSG;
	if (h.status < 0) {
		*status = h.status;
		return h.data_len || h.body_len ? -EBADMSG : 1;
	}
	if (h.body_len != sizeof(result) || result.length > piece->length ||
	    h.data_len != result.length || (result.status < 0 && result.length))
		return -EBADMSG;
	if (result.length) {
		rc = kvc_wire_recv_exact(fd, buf, result.length);
		if (rc < 0)
			return rc;
	}
	*status = result.status;
	*present = result.length;
	return 1;
}

int kvc_storage_target_read_chunk(struct kvc_storage_client *client, uint32_t target,
                                  uint32_t chain, uint32_t version, uint64_t inode,
                                  uint32_t chunk, void *buf, uint32_t cap, uint32_t *present)
{
	struct kvc_rpc_pool *pool = pool_of(client, target);
	if (!pool || cap == 0 || cap > KVC_LAYOUT_MAX_CHUNK)
		return -EINVAL;
	struct kvc_msg_piece piece = {.inode = inode, .target = target, .chunk = chunk,
	                              .offset = 0, .length = cap, .chain = chain,
	                              .chain_version = version};
	int rc = 0, status = 0;
	uint32_t got = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused;
		int fd = kvc_rpc_pool_get(pool, &reused);
		if (fd < 0)
			return fd;
		rc = read_exchange(pool, fd, &piece, buf, &got, &status);
		kvc_rpc_pool_put(pool, fd, rc == 1);
		/* The server restarted under an idle connection: once more. */
		if (!(rc < 0 && reused && (rc == -ECONNRESET || rc == -EPIPE)))
			break;
		kvc_rpc_pool_drain(pool);
	}
	if (rc < 0)
		return rc;
	if (status == 0)
		*present = got;
	return status;
}
