/* storage_client: see storage_client.h. */
#include "storage_client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

/* Largest range one request round handles; bigger calls loop. */
#define SLICE (16u << 20)
#define MAX_SLICE_PIECES (SLICE / KVC_LAYOUT_MIN_CHUNK + 1)
/* Pieces written in parallel in one wave. */
#define WRITE_WAVE 32

int kvc_storage_client_init(struct kvc_storage_client *client,
                            const struct kvc_config *config)
{
	memset(client, 0, sizeof(*client));
	client->server_count = config->server_count;
	client->target_count = config->target_count;
	for (uint32_t t = 0; t < config->target_count; t++)
		client->target_server[t] = config->targets[t].server;
	for (uint32_t i = 0; i < config->server_count; i++) {
		strcpy(client->server_address[i], config->servers[i].address);
		int rc = kvc_rpc_pool_init(&client->pools[i], config->servers[i].address,
		                           config->token, config->connect_timeout_ms,
		                           config->io_timeout_ms);
		if (rc < 0) {
			client->server_count = i;
			kvc_storage_client_destroy(client);
			return rc;
		}
	}
	return 0;
}

void kvc_storage_client_destroy(struct kvc_storage_client *client)
{
	for (uint32_t i = 0; i < client->server_count; i++)
		kvc_rpc_pool_destroy(&client->pools[i]);
	client->server_count = 0;
}

/* Map transport failures to -EIO; keep what a server answered. */
static int client_error(int rc)
{
	return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

static bool retryable(int rc, bool reused)
{
	return reused && (rc == -ECONNRESET || rc == -EPIPE);
}

struct read_request {
	int fd;
	bool reused;
	uint64_t id;
	uint32_t count;
	int rc;
	struct kvc_msg_chunk_read head;
	struct kvc_msg_piece pieces[MAX_SLICE_PIECES];
	uint32_t piece_index[MAX_SLICE_PIECES]; /* into the slice's pieces */
};

static int read_send(struct kvc_storage_client *client, uint32_t server,
                     struct read_request *req, uint64_t inode)
{
	struct kvc_rpc_pool *pool = &client->pools[server];
	(void)inode;
	req->fd = kvc_rpc_pool_get(pool, &req->reused);
	if (req->fd < 0)
		return req->fd;
	req->head = (struct kvc_msg_chunk_read){.count = req->count};
	req->id = kvc_rpc_next_id(pool);
	/* head and pieces are adjacent in the struct: one body. */
	_Static_assert(offsetof(struct read_request, pieces) ==
	                       offsetof(struct read_request, head) + sizeof(req->head), "");
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_READ, req->id, 0,
	                     (uint32_t)(sizeof(req->head) + req->count * sizeof(req->pieces[0])),
	                     0);
	return kvc_wire_send(req->fd, &h, &req->head, NULL, 0);
}

static int read_receive(struct read_request *req, const struct kvc_layout_piece *pieces,
                        uint8_t *buf)
{
	struct kvc_msg_piece_result results[MAX_SLICE_PIECES];
	struct kvc_wire_header h;
	int rc = kvc_wire_recv(req->fd, &h, results, sizeof(results));
	if (rc < 0)
		return rc;
	if (h.request_id != req->id || h.type != KVC_MSG_CHUNK_READ)
		return -EBADMSG;
	if (h.status < 0)
		return h.status == -EINVAL || h.status == -EMSGSIZE ? h.status : -EIO;
	if (h.body_len != req->count * sizeof(results[0]))
		return -EBADMSG;
	uint64_t expected = 0;
	for (uint32_t i = 0; i < req->count; i++) {
		if (results[i].length > req->pieces[i].length)
			return -EBADMSG;
		expected += results[i].length;
	}
	if (expected != h.data_len)
		return -EBADMSG;
	int status = 0;
	for (uint32_t i = 0; i < req->count; i++) {
		const struct kvc_layout_piece *p = &pieces[req->piece_index[i]];
		uint8_t *dst = buf + p->buffer_offset;
		if (results[i].length) {
			rc = kvc_wire_recv_exact(req->fd, dst, results[i].length);
			if (rc < 0)
				return rc;
		}
		memset(dst + results[i].length, 0, p->length - results[i].length);
		if (results[i].status < 0)
			status = -EIO;
	}
	return status == 0 ? 1 : status; /* 1: frame fully consumed, data ok */
}

static int read_slice(struct kvc_storage_client *client, uint64_t inode,
                      const struct kvc_layout *layout, uint64_t offset, uint32_t length,
                      uint8_t *buf, struct read_request *reqs)
{
	struct kvc_layout_piece pieces[MAX_SLICE_PIECES];
	int count = kvc_layout_split(layout, offset, length, pieces, MAX_SLICE_PIECES);
	if (count < 0)
		return count;
	uint32_t servers = client->server_count;
	for (uint32_t s = 0; s < servers; s++)
		reqs[s].count = 0, reqs[s].fd = -1, reqs[s].rc = 0;
	for (int i = 0; i < count; i++) {
		if (pieces[i].target >= client->target_count)
			return -EIO;
		struct read_request *r = &reqs[client->target_server[pieces[i].target]];
		r->pieces[r->count] = (struct kvc_msg_piece){
			.inode = inode, .target = pieces[i].target, .chunk = pieces[i].chunk,
			.offset = pieces[i].chunk_offset, .length = pieces[i].length};
		r->piece_index[r->count++] = (uint32_t)i;
	}
	for (uint32_t s = 0; s < servers; s++)
		if (reqs[s].count)
			reqs[s].rc = read_send(client, s, &reqs[s], inode);
	int result = 0;
	for (uint32_t s = 0; s < servers; s++) {
		struct read_request *r = &reqs[s];
		if (!r->count)
			continue;
		if (r->rc == 0)
			r->rc = read_receive(r, pieces, buf);
		if (r->fd >= 0)
			kvc_rpc_pool_put(&client->pools[s], r->fd, r->rc == 1 || r->rc == -EIO);
		if (r->rc < 0 && retryable(r->rc, r->reused)) {
			/* The server restarted under an idle connection: once more. */
			kvc_rpc_pool_drain(&client->pools[s]);
			r->rc = read_send(client, s, r, inode);
			if (r->rc == 0)
				r->rc = read_receive(r, pieces, buf);
			if (r->fd >= 0)
				kvc_rpc_pool_put(&client->pools[s], r->fd, r->rc == 1);
		}
		if (r->rc < 0 && result == 0)
			result = client_error(r->rc);
	}
	return result;
}

int kvc_storage_client_read(struct kvc_storage_client *client, uint64_t inode,
                            const struct kvc_layout *layout, uint64_t offset,
                            uint64_t length, void *buf)
{
	if (kvc_layout_check(layout) < 0 || layout->target_count > client->target_count)
		return -EINVAL;
	if (offset > KVC_LAYOUT_MAX_FILE_SIZE || length > KVC_LAYOUT_MAX_FILE_SIZE - offset)
		return -EFBIG;
	struct read_request *reqs = malloc(client->server_count * sizeof(*reqs));
	if (!reqs)
		return -ENOMEM;
	int rc = 0;
	for (uint64_t done = 0; done < length && rc == 0;) {
		uint32_t step = length - done < SLICE ? (uint32_t)(length - done) : SLICE;
		rc = read_slice(client, inode, layout, offset + done, step, (uint8_t *)buf + done,
		                reqs);
		done += step;
	}
	free(reqs);
	return rc;
}

struct write_piece {
	int fd;
	bool reused;
	uint32_t server;
	uint32_t length;
	uint64_t id;
	int rc;
	struct kvc_msg_chunk_write msg;
	const void *data;
};

static int write_send(struct kvc_storage_client *client, struct write_piece *w)
{
	struct kvc_rpc_pool *pool = &client->pools[w->server];
	w->fd = kvc_rpc_pool_get(pool, &w->reused);
	if (w->fd < 0)
		return w->fd;
	w->id = kvc_rpc_next_id(pool);
	struct kvc_wire_header h;
	struct iovec data = {(void *)w->data, w->length};
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_WRITE, w->id, 0, sizeof(w->msg), w->length);
	return kvc_wire_send(w->fd, &h, &w->msg, &data, 1);
}

static int write_receive(struct write_piece *w)
{
	struct kvc_msg_chunk_write_reply reply;
	struct kvc_wire_header h;
	int rc = kvc_wire_recv(w->fd, &h, &reply, sizeof(reply));
	if (rc < 0)
		return rc;
	if (h.request_id != w->id || h.type != KVC_MSG_CHUNK_WRITE || h.data_len)
		return -EBADMSG;
	return h.status < 0 ? h.status : 1; /* 1: answered, connection reusable */
}

/* Send a wave of pieces, then collect every answer. */
static int write_wave(struct kvc_storage_client *client, struct write_piece *wave, int count)
{
	int result = 0;
	for (int i = 0; i < count; i++)
		wave[i].rc = write_send(client, &wave[i]);
	for (int i = 0; i < count; i++) {
		struct write_piece *w = &wave[i];
		if (w->rc == 0)
			w->rc = write_receive(w);
		if (w->fd >= 0)
			kvc_rpc_pool_put(&client->pools[w->server], w->fd,
			                 w->rc == 1 || (w->rc < 0 && !kvc_rpc_is_transport_error(w->rc)));
		if (w->rc < 0 && retryable(w->rc, w->reused)) {
			kvc_rpc_pool_drain(&client->pools[w->server]);
			w->rc = write_send(client, w);
			if (w->rc == 0)
				w->rc = write_receive(w);
			if (w->fd >= 0)
				kvc_rpc_pool_put(&client->pools[w->server], w->fd, w->rc == 1);
		}
		if (w->rc < 0 && result == 0)
			result = client_error(w->rc);
	}
	return result;
}

int kvc_storage_client_write(struct kvc_storage_client *client, uint64_t inode,
                             const struct kvc_layout *layout, uint64_t offset,
                             uint64_t length, const void *buf)
{
	struct kvc_layout_piece pieces[WRITE_WAVE];
	struct write_piece wave[WRITE_WAVE];
	if (kvc_layout_check(layout) < 0 || layout->target_count > client->target_count)
		return -EINVAL;
	if (offset > KVC_LAYOUT_MAX_FILE_SIZE || length > KVC_LAYOUT_MAX_FILE_SIZE - offset)
		return -EFBIG;
	int rc = 0;
	uint64_t wave_bytes = (uint64_t)WRITE_WAVE * layout->chunk_size;
	for (uint64_t done = 0; done < length && rc == 0;) {
		/* Whole chunks from here fit: at most WRITE_WAVE + 1 pieces, so
		 * stop one chunk short to stay within WRITE_WAVE. */
		uint64_t step = length - done;
		if (step > wave_bytes - layout->chunk_size)
			step = wave_bytes - layout->chunk_size;
		int count = kvc_layout_split(layout, offset + done, step, pieces, WRITE_WAVE);
		if (count < 0)
			return count;
		for (int i = 0; i < count; i++) {
			wave[i] = (struct write_piece){
				.fd = -1, .server = client->target_server[pieces[i].target],
				.length = pieces[i].length,
				.data = (const uint8_t *)buf + done + pieces[i].buffer_offset,
				.msg = {.inode = inode, .target = pieces[i].target,
				        .chunk = pieces[i].chunk, .chunk_size = layout->chunk_size,
				        .offset = pieces[i].chunk_offset}};
		}
		rc = write_wave(client, wave, count);
		done += step;
	}
	return rc;
}

/* Send one small request to the server of every target in the layout. */
static int each_target(struct kvc_storage_client *client, const struct kvc_layout *layout,
                       uint16_t type, void (*fill)(void *body, uint32_t target, void *arg),
                       uint32_t body_len, void *arg)
{
	uint32_t targets[KVC_WIRE_MAX_TARGETS];
	if (kvc_layout_check(layout) < 0 || layout->target_count > client->target_count)
		return -EINVAL;
	int count = kvc_layout_targets(layout, targets, KVC_WIRE_MAX_TARGETS);
	int result = 0;
	for (int i = 0; i < count; i++) {
		uint8_t body[64], reply[64];
		fill(body, targets[i], arg);
		uint32_t reply_len;
		int rc = kvc_rpc_call(&client->pools[client->target_server[targets[i]]], type, body,
		                      body_len, reply, sizeof(reply), &reply_len);
		if (rc < 0 && result == 0)
			result = client_error(rc);
	}
	return result;
}

struct inode_size {
	uint64_t inode;
	uint64_t size;
	uint32_t chunk_size;
};

static void fill_remove(void *body, uint32_t target, void *arg)
{
	const struct inode_size *a = arg;
	struct kvc_msg_chunk_remove m = {.inode = a->inode, .target = target};
	memcpy(body, &m, sizeof(m));
}

static void fill_truncate(void *body, uint32_t target, void *arg)
{
	const struct inode_size *a = arg;
	struct kvc_msg_chunk_truncate m = {.inode = a->inode, .size = a->size,
	                                   .target = target, .chunk_size = a->chunk_size};
	memcpy(body, &m, sizeof(m));
}

static void fill_nothing(void *body, uint32_t target, void *arg)
{
	(void)body, (void)target, (void)arg;
}

int kvc_storage_client_remove(struct kvc_storage_client *client, uint64_t inode,
                              const struct kvc_layout *layout)
{
	struct inode_size a = {.inode = inode};
	return each_target(client, layout, KVC_MSG_CHUNK_REMOVE, fill_remove,
	                   sizeof(struct kvc_msg_chunk_remove), &a);
}

int kvc_storage_client_truncate(struct kvc_storage_client *client, uint64_t inode,
                                const struct kvc_layout *layout, uint64_t size)
{
	struct inode_size a = {.inode = inode, .size = size, .chunk_size = layout->chunk_size};
	return each_target(client, layout, KVC_MSG_CHUNK_TRUNCATE, fill_truncate,
	                   sizeof(struct kvc_msg_chunk_truncate), &a);
}

int kvc_storage_client_sync(struct kvc_storage_client *client,
                            const struct kvc_layout *layout)
{
	return each_target(client, layout, KVC_MSG_SYNC, fill_nothing, 0, NULL);
}

int kvc_storage_client_server_space(struct kvc_storage_client *client, uint32_t server,
                                    struct kvc_msg_target_space *out, int max)
{
	struct {
		struct kvc_msg_space_reply head;
		struct kvc_msg_target_space targets[KVC_WIRE_MAX_TARGETS];
	} reply;
	uint32_t len = 0;
	if (server >= client->server_count)
		return -EINVAL;
	int rc = kvc_rpc_call(&client->pools[server], KVC_MSG_SPACE, NULL, 0, &reply,
	                      sizeof(reply), &len);
	if (rc < 0)
		return rc;
	if (len < sizeof(reply.head) || reply.head.count > KVC_WIRE_MAX_TARGETS ||
	    len != sizeof(reply.head) + reply.head.count * sizeof(reply.targets[0]))
		return -EBADMSG;
	int count = (int)reply.head.count < max ? (int)reply.head.count : max;
	memcpy(out, reply.targets, (size_t)count * sizeof(out[0]));
	return count;
}

/* True when two "host:port" addresses name the same host. */
static bool same_host(const char *a, const char *b)
{
	const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
	size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
	return la == lb && memcmp(a, b, la) == 0;
}

int kvc_storage_client_space(struct kvc_storage_client *client,
                             struct kvc_storage_space *space)
{
	/* Filesystems already counted: (server, fsid). Targets of one host on
	 * one disk (the embedded cluster) count once. */
	uint32_t seen_server[KVC_WIRE_MAX_TARGETS];
	uint64_t seen_fsid[KVC_WIRE_MAX_TARGETS];
	int seen = 0;
	memset(space, 0, sizeof(*space));
	for (uint32_t s = 0; s < client->server_count; s++) {
		struct kvc_msg_target_space targets[KVC_WIRE_MAX_TARGETS];
		int count = kvc_storage_client_server_space(client, s, targets, KVC_WIRE_MAX_TARGETS);
		if (count < 0) {
			for (uint32_t t = 0; t < client->target_count; t++)
				space->targets_down += client->target_server[t] == s;
			continue;
		}
		space->targets_up += (uint32_t)count;
		for (int i = 0; i < count; i++) {
			space->chunks += targets[i].chunks;
			bool counted = false;
			for (int j = 0; j < seen && !counted; j++)
				counted = seen_fsid[j] == targets[i].fsid &&
				          same_host(client->server_address[seen_server[j]],
				                    client->server_address[s]);
			if (counted || seen == KVC_WIRE_MAX_TARGETS)
				continue;
			seen_server[seen] = s;
			seen_fsid[seen++] = targets[i].fsid;
			space->total_bytes += targets[i].total_bytes;
			space->free_bytes += targets[i].free_bytes;
		}
	}
	return space->targets_up ? 0 : -EIO;
}
