/* storage service: see service.h. */
#include "storage/service.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/log.h"

#define RING_ENTRIES 256

struct conn_state {
	struct kvc_chunk_ring ring;
	uint8_t *buffer; /* write data */
	size_t buffer_size;
	struct kvc_chunk_read reads[KVC_WIRE_MAX_PIECES];
	struct kvc_chunk_store *read_stores[KVC_WIRE_MAX_PIECES];
	struct kvc_msg_piece_result results[KVC_WIRE_MAX_PIECES];
	struct iovec data[KVC_WIRE_MAX_PIECES];
};

static struct conn_state *state_of(struct kvc_server_conn *conn)
{
	if (conn->service_state)
		return conn->service_state;
	struct conn_state *state = calloc(1, sizeof(*state));
	if (!state)
		return NULL;
	if (kvc_chunk_ring_init(&state->ring, RING_ENTRIES) < 0) {
		free(state);
		return NULL;
	}
	conn->service_state = state;
	return state;
}

void kvc_storage_service_cleanup(void *service, struct kvc_server_conn *conn)
{
	struct conn_state *state = conn->service_state;
	(void)service;
	if (!state)
		return;
	kvc_chunk_ring_exit(&state->ring);
	free(state->buffer);
	free(state);
	conn->service_state = NULL;
}

static int ensure_buffer(struct conn_state *state, size_t need)
{
	if (need <= state->buffer_size)
		return 0;
	uint8_t *grown = realloc(state->buffer, need);
	if (!grown)
		return -ENOMEM;
	state->buffer = grown;
	state->buffer_size = need;
	return 0;
}

static struct kvc_chunk_store *store_of(struct kvc_storage_service *svc, uint32_t target)
{
	if (target < svc->first_target || target - svc->first_target >= svc->target_count)
		return NULL;
	return svc->stores[target - svc->first_target];
}

static bool chunk_size_valid(uint32_t cs)
{
	return cs >= KVC_LAYOUT_MIN_CHUNK && cs <= KVC_LAYOUT_MAX_CHUNK && !(cs & (cs - 1));
}

static int handle_write(struct kvc_storage_service *svc, struct kvc_server_conn *conn,
                        struct conn_state *state, const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_chunk_write *m = kvc_wire_body_take(conn->body, h->body_len, &off,
	                                                         sizeof(*m));
	int status = 0;
	struct kvc_chunk_store *store = m ? store_of(svc, m->target) : NULL;
	if (!m)
		status = -EINVAL;
	else if (!store)
		status = -ENXIO;
	else if (!chunk_size_valid(m->chunk_size) || h->data_len == 0 ||
	         m->offset > m->chunk_size || h->data_len > m->chunk_size - m->offset)
		status = -EINVAL;
	if (status == 0)
		status = ensure_buffer(state, h->data_len);
	if (status < 0) {
		/* Drain the refused data so the connection stays in frame. */
		int rc = kvc_wire_discard(conn->fd, h->data_len);
		return rc < 0 ? rc : kvc_server_reply(conn, h, status, NULL, 0);
	}
	int rc = kvc_wire_recv_exact(conn->fd, state->buffer, h->data_len);
	if (rc < 0)
		return rc;
	struct kvc_msg_chunk_write_reply reply = {0};
	status = kvc_chunk_store_write(store, m->inode, m->chunk, m->chunk_size,
	                               m->offset, state->buffer, (uint32_t)h->data_len,
	                               &reply.version, &reply.length);
	return kvc_server_reply(conn, h, status, &reply, sizeof(reply));
}

/* Check a read request's pieces; returns 0 or -errno for the whole
 * request. */
static int check_pieces(struct kvc_storage_service *svc, struct conn_state *state,
                        const struct kvc_msg_piece *pieces, uint32_t count)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < count; i++) {
		const struct kvc_msg_piece *p = &pieces[i];
		if (p->length > KVC_LAYOUT_MAX_CHUNK || p->offset > KVC_LAYOUT_MAX_CHUNK - p->length)
			return -EINVAL;
		total += p->length;
		state->read_stores[i] = store_of(svc, p->target);
		state->reads[i] = (struct kvc_chunk_read){
			.inode = p->inode, .chunk = p->chunk, .offset = p->offset, .length = p->length};
	}
	return total > KVC_WIRE_MAX_DATA ? -EMSGSIZE : 0;
}

static int handle_read(struct kvc_storage_service *svc, struct kvc_server_conn *conn,
                       struct conn_state *state, const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	const struct kvc_msg_chunk_read *m = kvc_wire_body_take(conn->body, h->body_len, &off,
	                                                        sizeof(*m));
	if (!m || m->count == 0 || m->count > KVC_WIRE_MAX_PIECES)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	const struct kvc_msg_piece *pieces = kvc_wire_body_take(
		conn->body, h->body_len, &off, m->count * (uint32_t)sizeof(*pieces));
	if (!pieces)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	int rc = check_pieces(svc, state, pieces, m->count);
	if (rc < 0)
		return kvc_server_reply(conn, h, rc, NULL, 0);
	kvc_chunk_store_read_batch(state->read_stores, &state->ring, state->reads, (int)m->count);
	uint64_t data_len = 0;
	for (uint32_t i = 0; i < m->count; i++) {
		struct kvc_chunk_read *r = &state->reads[i];
		uint32_t present = r->status == 0 ? r->present : 0;
		state->results[i] = (struct kvc_msg_piece_result){r->status, present};
		state->data[i] = (struct iovec){(void *)r->data, present};
		data_len += present;
	}
	struct kvc_wire_header reply;
	kvc_wire_header_init(&reply, h->type, h->request_id, 0,
	                     m->count * (uint32_t)sizeof(state->results[0]), data_len);
	rc = kvc_wire_send(conn->fd, &reply, state->results, state->data, (int)m->count);
	kvc_chunk_store_read_release(state->reads, (int)m->count);
	return rc;
}

static int handle_small(struct kvc_storage_service *svc, struct kvc_server_conn *conn,
                        const struct kvc_wire_header *h)
{
	uint32_t off = 0;
	union {
		struct kvc_msg_count_reply count;
		struct kvc_msg_chunk_last_reply last;
	} reply;
	uint32_t reply_len = 0;
	int64_t rc = -EINVAL;

	if (h->type == KVC_MSG_CHUNK_REMOVE) {
		const struct kvc_msg_chunk_remove *m =
			kvc_wire_body_take(conn->body, h->body_len, &off, sizeof(*m));
		struct kvc_chunk_store *store = m ? store_of(svc, m->target) : NULL;
		rc = !m ? -EINVAL : !store ? -ENXIO : kvc_chunk_store_remove(store, m->inode);
		reply.count.count = rc > 0 ? (uint64_t)rc : 0;
		reply_len = sizeof(reply.count);
	} else if (h->type == KVC_MSG_CHUNK_TRUNCATE) {
		const struct kvc_msg_chunk_truncate *m =
			kvc_wire_body_take(conn->body, h->body_len, &off, sizeof(*m));
		struct kvc_chunk_store *store = m ? store_of(svc, m->target) : NULL;
		if (m && store && chunk_size_valid(m->chunk_size) &&
		    m->size <= KVC_LAYOUT_MAX_FILE_SIZE)
			rc = kvc_chunk_store_truncate(store, m->inode, m->size,
			                              m->chunk_size);
		else if (m && !store)
			rc = -ENXIO;
		reply.count.count = rc > 0 ? (uint64_t)rc : 0;
		reply_len = sizeof(reply.count);
	} else if (h->type == KVC_MSG_CHUNK_PUNCH) {
		const struct kvc_msg_chunk_punch *m =
			kvc_wire_body_take(conn->body, h->body_len, &off, sizeof(*m));
		struct kvc_chunk_store *store = m ? store_of(svc, m->target) : NULL;
		rc = !m ? -EINVAL : !store ? -ENXIO
		     : kvc_chunk_store_punch(store, m->inode, m->first_chunk, m->count);
		reply.count.count = rc > 0 ? (uint64_t)rc : 0;
		reply_len = sizeof(reply.count);
	} else if (h->type == KVC_MSG_CHUNK_LAST) {
		const struct kvc_msg_chunk_last *m =
			kvc_wire_body_take(conn->body, h->body_len, &off, sizeof(*m));
		struct kvc_chunk_store *store = m ? store_of(svc, m->target) : NULL;
		memset(&reply.last, 0, sizeof(reply.last));
		rc = !m ? -EINVAL : !store ? -ENXIO
		     : kvc_chunk_store_last(store, m->inode, &reply.last.chunk, &reply.last.length);
		reply.last.found = rc == 1;
		reply_len = sizeof(reply.last);
	}
	return kvc_server_reply(conn, h, rc < 0 ? (int)rc : 0, &reply, reply_len);
}

static int handle_space(struct kvc_storage_service *svc, struct kvc_server_conn *conn,
                        const struct kvc_wire_header *h)
{
	struct {
		struct kvc_msg_space_reply head;
		struct kvc_msg_target_space targets[KVC_WIRE_MAX_TARGETS];
	} reply = {0};
	int rc = 0;
	for (uint32_t i = 0; i < svc->target_count && rc == 0; i++) {
		struct kvc_chunk_space space;
		rc = kvc_chunk_store_space(svc->stores[i], &space);
		reply.targets[i] = (struct kvc_msg_target_space){
			.target = svc->first_target + i, .fsid = space.fsid,
			.total_bytes = space.total_bytes, .free_bytes = space.free_bytes,
			.chunks = space.chunks};
	}
	reply.head.count = svc->target_count;
	return kvc_server_reply(conn, h, rc, &reply,
	                        (uint32_t)(sizeof(reply.head) +
	                                   svc->target_count * sizeof(reply.targets[0])));
}

static int handle_sync(struct kvc_storage_service *svc, struct kvc_server_conn *conn,
                       const struct kvc_wire_header *h)
{
	int rc = 0;
	for (uint32_t i = 0; i < svc->target_count && rc == 0; i++)
		rc = kvc_chunk_store_sync(svc->stores[i]);
	return kvc_server_reply(conn, h, rc, NULL, 0);
}

int kvc_storage_service_handle(void *service, struct kvc_server_conn *conn,
                               const struct kvc_wire_header *h)
{
	struct kvc_storage_service *svc = service;
	struct conn_state *state = state_of(conn);
	if (!state)
		return -ENOMEM;
	/* Only writes carry data; anything else with data is out of frame. */
	if (h->data_len && h->type != KVC_MSG_CHUNK_WRITE)
		return -EPROTO;
	switch (h->type) {
	case KVC_MSG_CHUNK_WRITE:
		return handle_write(svc, conn, state, h);
	case KVC_MSG_CHUNK_READ:
		return handle_read(svc, conn, state, h);
	case KVC_MSG_CHUNK_REMOVE:
	case KVC_MSG_CHUNK_TRUNCATE:
	case KVC_MSG_CHUNK_PUNCH:
	case KVC_MSG_CHUNK_LAST:
		return handle_small(svc, conn, h);
	case KVC_MSG_SPACE:
		return handle_space(svc, conn, h);
	case KVC_MSG_SYNC:
		return handle_sync(svc, conn, h);
	default:
		return kvc_server_reply(conn, h, -EOPNOTSUPP, NULL, 0);
	}
}
