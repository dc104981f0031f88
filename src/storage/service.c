/* storage service: see service.h. */
#include "storage/service.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "core/chains.h"
#include "core/host_id.h"
#include "core/layout.h"
#include "core/log.h"
#include "storage/service_internal.h"

#define RING_ENTRIES 256

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
	struct kvc_storage_service *svc = service;
	if (!state)
		return;
	if (svc->place && state->peer == 1)
		kvc_place_drop_owner(svc->place, conn);
	kvc_chunk_ring_exit(&state->ring);
	free(state->buffer);
	free(state);
	conn->service_state = NULL;
}

int kvc_service_ensure_buffer(struct conn_state *state, size_t need)
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

struct kvc_chunk_store *kvc_service_store(struct kvc_storage_service *svc, uint32_t target)
{
	if (target < svc->first_target || target - svc->first_target >= svc->target_count)
		return NULL;
	return svc->stores[target - svc->first_target];
}

bool kvc_service_chunk_size_valid(uint32_t cs)
{
	return cs >= KVC_LAYOUT_MIN_CHUNK && cs <= KVC_LAYOUT_MAX_CHUNK && !(cs & (cs - 1));
}

const void *kvc_service_take(struct request *r, uint32_t len)
{
	return kvc_wire_body_take(r->conn->body, r->h->body_len, &r->off, len);
}

bool kvc_service_done(const struct request *r)
{
	return r->off == r->h->body_len;
}

int kvc_service_reply(struct request *r, int rc, const void *body, uint32_t len)
{
	return kvc_server_reply(r->conn, r->h, rc, rc < 0 ? NULL : body, rc < 0 ? 0 : len);
}

/* Answer an error to a frame whose data section is still on the socket:
 * drop the data first, so the connection stays in frame. */
int kvc_service_refuse(struct kvc_server_conn *conn, const struct kvc_wire_header *h, int status)
{
	int rc = kvc_wire_discard(conn->fd, h->data_len);
	return rc < 0 ? rc : kvc_server_reply(conn, h, status, NULL, 0);
}

/* The chain of a request for target at chain_version, or NULL with *rc:
 * -ESTALE when this server's table has another version or target is not a
 * member, or names no such chain while it follows the managers (a chain
 * added since its table: the sender or this server refreshes); -ENXIO
 * for a chain a static table does not know. A server without peers
 * (single copy, tests) takes chain == target at any version. */
const struct kvc_chain *kvc_service_chain(const struct kvc_storage_service *svc, uint32_t chain,
                                          uint32_t version, uint32_t target, struct kvc_chain *copy,
                                          int *pos, int *rc)
{
	if (!svc->peers) {
		*copy = (struct kvc_chain){.count = 1};
		*pos = 0;
		*rc = chain == target ? 0 : -ENXIO;
		return *rc ? NULL : copy;
	}
	if (!kvc_storage_client_chain(svc->peers, chain, copy)) {
		*rc = svc->peers->following ? -ESTALE : -ENXIO;
		return NULL;
	}
	*pos = kvc_chains_position(copy, target);
	*rc = copy->version != version || *pos < 0 ? -ESTALE : 0;
	return *rc ? NULL : copy;
}

/* Write here, then through the rest of the chain: the answer is the
 * tail's. The head holds the chunk in the in-flight table for the whole
 * trip (one write of a chunk in the chain at a time); a middle member
 * holds it too, so reads here ask the tail meanwhile; the tail holds it
 * while it writes, so a resync or a repair here (which hold the chunk
 * across their copy) copies the chunk before or after the write, never
 * across it. A single-copy target holds nothing. */
int kvc_service_chain_write(struct request *r, const struct kvc_msg_chunk_write *m,
                            struct kvc_chunk_store *store, const struct kvc_chain *chain, int pos,
                            uint32_t len, struct kvc_msg_chunk_write_reply *out)
{
	struct kvc_storage_service *svc = r->svc;
	bool tail = (uint32_t)pos + 1 >= chain->count;
	bool hold = chain->count > 1 ||
	            atomic_load(&svc->resync[m->target - svc->first_target].syncing);
	int status = hold ? kvc_inflight_begin(svc->inflight, m->target, m->inode, m->chunk,
	                                       svc->io_timeout_ms)
	                  : 0;
	if (status < 0)
		return status;
	/* The version once more, now inside the apply gate: a write checked
	 * before this server followed a newer table lands before a resync's
	 * drain or not at all (inflight.h). */
	struct kvc_chain now;
	int now_pos;
	unsigned ticket = svc->inflight ? kvc_inflight_apply_enter(svc->inflight, m->target) : 0;
	if (kvc_service_chain(svc, m->chain, m->chain_version, m->target, &now, &now_pos, &status))
		status = kvc_chunk_store_write(store, m->inode, m->chunk, m->chunk_size, m->offset,
		                               r->state->buffer, len, &out->version, &out->length);
	if (svc->inflight)
		kvc_inflight_apply_leave(svc->inflight, m->target, ticket);
	if (status == 0 && !tail) {
		struct kvc_msg_chunk_write next = *m;
		next.target = chain->targets[pos + 1];
		next.flags = KVC_CHUNK_FORWARDED;
		status = kvc_storage_client_forward(svc->peers, &next, r->state->buffer, len);
		if (status < 0)
			kvc_log_warn("chain %u: target %u could not pass a write of inode %llu chunk "
			             "%u on to target %u: %s", m->chain, m->target,
			             (unsigned long long)m->inode, m->chunk, next.target,
			             strerror(-status));
	}
	if (hold)
		kvc_inflight_end(svc->inflight, m->target, m->inode, m->chunk);
	return status;
}

/* Check a write of len bytes; returns 0 with its chain, or -errno. */
int kvc_service_write_check(struct request *r, const struct kvc_msg_chunk_write *m, uint64_t len,
                            struct kvc_chain *copy, const struct kvc_chain **chain, int *pos)
{
	struct kvc_chunk_store *store = kvc_service_store(r->svc, m->target);
	int status = 0;
	if (!store)
		status = -ENXIO;
	else if (!kvc_service_chunk_size_valid(m->chunk_size) || len == 0 || m->offset > m->chunk_size ||
	         len > m->chunk_size - m->offset || (m->flags & ~KVC_CHUNK_FORWARDED) ||
	         m->reserved)
		status = -EINVAL;
	else
		*chain = kvc_service_chain(r->svc, m->chain, m->chain_version, m->target, copy, pos, &status);
	/* A client writes to the head; only a member passes a write on. */
	if (status == 0 && (*pos == 0) == ((m->flags & KVC_CHUNK_FORWARDED) != 0))
		status = *pos == 0 ? -EINVAL : -ESTALE;
	/* Too few copies left: refuse rather than keep fewer than promised. */
	if (status == 0 && *pos == 0 && (*chain)->count < r->svc->min_write_replicas)
		status = -EROFS;
	if (status == 0)
		status = kvc_service_ensure_buffer(r->state, len);
	return status;
}

static int h_write(struct request *r)
{
	const struct kvc_msg_chunk_write *m = r->msg;
	const struct kvc_wire_header *h = r->h;
	int pos = 0;
	struct kvc_chain copy;
	const struct kvc_chain *chain = NULL;
	int status = kvc_service_write_check(r, m, h->data_len, &copy, &chain, &pos);
	if (status < 0)
		return kvc_service_refuse(r->conn, h, status);
	int rc = kvc_wire_recv_exact(r->conn->fd, r->state->buffer, h->data_len);
	if (rc < 0)
		return rc;
	struct kvc_msg_chunk_write_reply out = {0};
	status = kvc_service_chain_write(r, m, kvc_service_store(r->svc, m->target), chain, pos,
	                                 (uint32_t)h->data_len, &out);
	return kvc_service_reply(r, status, &out, sizeof(out));
}

/* Check a read request's pieces; returns 0 or -errno for the whole
 * request. */
int kvc_service_check_pieces(struct kvc_storage_service *svc, struct conn_state *state,
                             const struct kvc_msg_piece *pieces, uint32_t count)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < count; i++) {
		const struct kvc_msg_piece *p = &pieces[i];
		if (p->length > KVC_LAYOUT_MAX_CHUNK || p->offset > KVC_LAYOUT_MAX_CHUNK - p->length)
			return -EINVAL;
		total += p->length;
		int pos = 0, rc = 0;
		struct kvc_chain copy;
		state->tails[i] = false;
		const struct kvc_chain *chain = kvc_service_chain(svc, p->chain, p->chain_version,
		                                                  p->target, &copy, &pos, &rc);
		state->read_stores[i] = chain ? kvc_service_store(svc, p->target) : NULL;
		/* A target catching up serves no reads yet: ask another member. */
		if (rc == 0 && state->read_stores[i] &&
		    atomic_load(&svc->resync[p->target - svc->first_target].syncing))
			rc = -EAGAIN;
		state->read_status[i] = rc;
		if (chain)
			state->tails[i] = (uint32_t)pos + 1 == chain->count;
		state->reads[i] = (struct kvc_chunk_read){
			.inode = p->inode, .chunk = p->chunk, .offset = p->offset, .length = p->length};
	}
	return total > KVC_WIRE_MAX_DATA ? -EMSGSIZE : 0;
}

/* Read the checked pieces into buffers and settle each one's result
 * (state->results, state->data). Returns the bytes present. The caller
 * releases state->reads. */
uint64_t kvc_service_read_pieces(struct request *r, const struct kvc_msg_piece *pieces,
                                 uint32_t count)
{
	struct conn_state *state = r->state;
	kvc_chunk_store_read_batch(state->read_stores, &state->ring, state->reads, (int)count);
	uint64_t data_len = 0;
	for (uint32_t i = 0; i < count; i++) {
		struct kvc_chunk_read *p = &state->reads[i];
		/* After the read: a write in flight now may have put bytes the
		 * chain has not committed into what was read (CRAQ). */
		if (state->read_status[i] < 0)
			p->status = state->read_status[i];
		else if (p->status == -EIO && r->svc->peers)
			kvc_repair_queue(r->svc, pieces[i].target, p->inode, p->chunk); /* a bad copy */
		if (p->status == 0 && !state->tails[i] && r->svc->inflight &&
		    kvc_inflight_busy(r->svc->inflight, pieces[i].target, p->inode, p->chunk))
			p->status = -EAGAIN;
		uint32_t present = p->status == 0 ? p->present : 0;
		state->results[i] = (struct kvc_msg_piece_result){p->status, present};
		state->data[i] = (struct iovec){(void *)p->data, present};
		data_len += present;
	}
	return data_len;
}

uint32_t kvc_service_merge_pieces(struct conn_state *state, const struct kvc_msg_piece *pieces,
                                  uint32_t count, uint32_t max_piece)
{
	uint32_t runs = 0;
	for (uint32_t i = 0; i < count; i++) {
		const struct kvc_msg_piece *p = &pieces[i];
		struct kvc_msg_piece *last = runs ? &state->merged[runs - 1] : NULL;
		if (last && max_piece && p->length <= max_piece && pieces[i - 1].length <= max_piece &&
		    last->inode == p->inode && last->target == p->target &&
		    last->chunk == p->chunk && last->chain == p->chain &&
		    last->chain_version == p->chain_version &&
		    (uint64_t)last->offset + last->length == p->offset &&
		    (uint64_t)last->length + p->length <= KVC_LAYOUT_MAX_CHUNK) {
			last->length += p->length;
			continue;
		}
		state->run_first[runs] = i;
		state->merged[runs++] = *p;
	}
	state->run_first[runs] = count;
	return runs;
}

bool kvc_service_run_failed(const struct conn_state *state, uint32_t runs)
{
	for (uint32_t r = 0; r < runs; r++)
		if (state->run_first[r + 1] > state->run_first[r] + 1 &&
		    (state->results[r].status == -EIO || state->results[r].status == -ENOMEM))
			return true;
	return false;
}

int kvc_service_read_runs(struct request *r, const struct kvc_msg_piece *pieces, uint32_t count,
                          uint32_t max_piece,
                          void (*prepare)(struct conn_state *state, uint32_t runs,
                                          const void *arg),
                          const void *arg)
{
	struct conn_state *state = r->state;
	uint32_t runs = kvc_service_merge_pieces(state, pieces, count, max_piece);
	int rc = kvc_service_check_pieces(r->svc, state, state->merged, runs);
	if (rc < 0)
		return rc;
	atomic_fetch_add(&r->svc->pieces_merged, count - runs);
	if (prepare)
		prepare(state, runs, arg);
	kvc_service_read_pieces(r, state->merged, runs);
	if (kvc_service_run_failed(state, runs)) {
		kvc_chunk_store_read_release(state->reads, (int)runs);
		runs = kvc_service_merge_pieces(state, pieces, count, 0);
		(void)kvc_service_check_pieces(r->svc, state, state->merged, runs); /* passed above */
		if (prepare)
			prepare(state, runs, arg);
		kvc_service_read_pieces(r, state->merged, runs);
	}
	kvc_service_split_runs(state, pieces, runs);
	return (int)runs;
}

void kvc_service_split_runs(struct conn_state *state, const struct kvc_msg_piece *pieces,
                            uint32_t runs)
{
	for (uint32_t r = 0; r < runs; r++) {
		const struct kvc_msg_piece_result *run = &state->results[r];
		const uint8_t *bytes = state->data[r].iov_base;
		for (uint32_t j = state->run_first[r]; j < state->run_first[r + 1]; j++) {
			uint32_t at = pieces[j].offset - state->merged[r].offset;
			uint32_t n = run->status == 0 && run->length > at ? run->length - at : 0;
			if (n > pieces[j].length)
				n = pieces[j].length;
			state->piece_results[j] = (struct kvc_msg_piece_result){run->status, n};
			/* a piece placed straight into client memory has no bytes
			 * here (bytes NULL) */
			state->piece_data[j] = (struct iovec){bytes && n ? (void *)(bytes + at) : NULL, n};
		}
	}
}

/* The pieces are read into buffers with no chunk lock held after
 * kvc_chunk_store_read_batch: the send below blocks nobody but this
 * connection. Pieces that continue each other are read as one run; the
 * data section is the same bytes (a run's present bytes are its pieces'
 * present bytes, in order). */
static int h_read(struct request *r)
{
	const struct kvc_msg_chunk_read *m = r->msg;
	struct conn_state *state = r->state;
	if (m->count == 0 || m->count > KVC_WIRE_MAX_PIECES)
		return kvc_service_reply(r, -EINVAL, NULL, 0);
	const struct kvc_msg_piece *pieces = kvc_service_take(r, m->count * (uint32_t)sizeof(*pieces));
	if (!pieces || !kvc_service_done(r))
		return kvc_service_reply(r, -EINVAL, NULL, 0);
	int runs = kvc_service_read_runs(r, pieces, m->count, UINT32_MAX, NULL, NULL);
	if (runs < 0)
		return kvc_service_reply(r, runs, NULL, 0);
	uint64_t data_len = 0;
	for (uint32_t j = 0; j < m->count; j++)
		data_len += state->piece_data[j].iov_len;
	struct kvc_wire_header out;
	kvc_wire_header_init(&out, r->h->type, r->h->request_id, 0,
	                     m->count * (uint32_t)sizeof(state->piece_results[0]), data_len);
	int rc = kvc_server_send(r->conn, &out, state->piece_results, state->piece_data,
	                         (int)m->count);
	kvc_chunk_store_read_release(state->reads, runs);
	return rc;
}

/* A page of the target's chunks (resync.h compares two of them). A
 * resync's source is checked at the resync's chain version and drained of
 * writes taken under an older one first (wire.h, inflight.h). */
static int h_list(struct request *r)
{
	const struct kvc_msg_chunk_list *m = r->msg;
	struct kvc_chunk_store *store = kvc_service_store(r->svc, m->target);
	bool at_version = m->flags & KVC_CHUNK_LIST_AT_VERSION;
	if (!store)
		return kvc_service_reply(r, -ENXIO, NULL, 0);
	if (m->max_entries == 0 || m->max_entries > KVC_WIRE_MAX_CHUNK_LIST ||
	    (m->flags & ~(KVC_CHUNK_LIST_AFTER | KVC_CHUNK_LIST_AT_VERSION)) ||
	    (!at_version && (m->chain || m->chain_version)))
		return kvc_service_reply(r, -EINVAL, NULL, 0);
	if (at_version) {
		struct kvc_chain copy;
		int pos, rc = 0;
		if (!kvc_service_chain(r->svc, m->chain, m->chain_version, m->target, &copy, &pos, &rc))
			return kvc_service_reply(r, rc, NULL, 0);
		rc = r->svc->inflight ? kvc_inflight_apply_drain(r->svc->inflight, m->target,
		                                                 r->svc->io_timeout_ms)
		                      : 0;
		if (rc < 0)
			return kvc_service_reply(r, -EAGAIN, NULL, 0);
	}
	struct kvc_chunk_entry *found = malloc(m->max_entries * sizeof(*found));
	struct kvc_msg_chunk_list_reply head = {0};
	uint8_t *out = malloc(sizeof(head) + m->max_entries * sizeof(struct kvc_msg_chunk_entry));
	bool more = false;
	int n = found && out ? kvc_chunk_store_list(store, m->flags & KVC_CHUNK_LIST_AFTER,
	                                            m->after_inode, m->after_chunk, found,
	                                            m->max_entries, &more)
	                     : -ENOMEM;
	for (int i = 0; i < n; i++) {
		struct kvc_msg_chunk_entry e = {.inode = found[i].inode, .chunk = found[i].chunk,
		                                .length = found[i].length,
		                                .chunk_crc = found[i].chunk_crc};
		memcpy(out + sizeof(head) + (size_t)i * sizeof(e), &e, sizeof(e));
	}
	if (n >= 0) {
		head = (struct kvc_msg_chunk_list_reply){.count = (uint32_t)n, .more = more};
		memcpy(out, &head, sizeof(head));
	}
	int rc = kvc_service_reply(r, n < 0 ? n : 0, out,
	               (uint32_t)(sizeof(head) + (n > 0 ? (size_t)n : 0) *
	                                                 sizeof(struct kvc_msg_chunk_entry)));
	free(found);
	free(out);
	return rc;
}

static int h_resync(struct request *r)
{
	return kvc_service_reply(r, kvc_resync_start(r->svc, r->msg), NULL, 0);
}

static int h_resync_status(struct request *r)
{
	const struct kvc_msg_chunk_target *m = r->msg;
	struct kvc_msg_resync_status out;
	int rc = m->reserved ? -EINVAL : kvc_resync_status(r->svc, m->target, &out);
	return kvc_service_reply(r, rc, &out, sizeof(out));
}

static int h_last(struct request *r)
{
	const struct kvc_msg_chunk_last *m = r->msg;
	struct kvc_chunk_store *store = kvc_service_store(r->svc, m->target);
	struct kvc_msg_chunk_last_reply out = {0};
	int rc = store ? kvc_chunk_store_last(store, m->inode, &out.chunk, &out.length) : -ENXIO;
	out.found = rc == 1;
	return kvc_service_reply(r, rc < 0 ? rc : 0, &out, sizeof(out));
}

static int h_space(struct request *r)
{
	struct kvc_storage_service *svc = r->svc;
	struct {
		struct kvc_msg_space_reply head;
		struct kvc_msg_target_space targets[KVC_WIRE_MAX_TARGETS];
	} out = {0};
	int rc = 0;
	for (uint32_t i = 0; i < svc->target_count && rc == 0; i++) {
		struct kvc_chunk_space space;
		rc = kvc_chunk_store_space(svc->stores[i], &space);
		out.targets[i] = (struct kvc_msg_target_space){
			.target = svc->first_target + i,
			.flags = space.refusing ? KVC_SPACE_REFUSING : 0, .fsid = space.fsid,
			.total_bytes = space.total_bytes, .free_bytes = space.free_bytes,
			.chunks = space.chunks, .reserve_bytes = space.reserve_bytes,
			.refused_writes = space.refused_writes};
	}
	out.head.count = svc->target_count;
	return kvc_service_reply(r, rc, &out,
	             (uint32_t)(sizeof(out.head) + svc->target_count * sizeof(out.targets[0])));
}

static int h_sync(struct request *r)
{
	int rc = 0;
	for (uint32_t i = 0; i < r->svc->target_count && rc == 0; i++)
		rc = kvc_chunk_store_sync(r->svc->stores[i]);
	return kvc_service_reply(r, rc, NULL, 0);
}

/* The storage messages: the fixed struct each body starts with, whether
 * the body is exactly that (else the handler takes the rest and checks it
 * ends at the body's end), and whether a data section follows. A type not
 * listed is answered -EOPNOTSUPP, a body of the wrong size -EINVAL, a data
 * section the type does not take -EINVAL (the data is dropped first, so the
 * connection stays in frame). */
struct op {
	uint32_t size;
	bool exact;
	bool data;
	int (*handler)(struct request *r);
};

#define VAR(type, fn) {sizeof(type), false, false, fn}
#define EXACT(type, fn) {sizeof(type), true, false, fn}
#define WITH_DATA(type, fn) {sizeof(type), true, true, fn}
#define EMPTY(fn) {0, true, false, fn}

static const struct op ops[] = {
	[KVC_MSG_CHUNK_WRITE] = WITH_DATA(struct kvc_msg_chunk_write, h_write),
	[KVC_MSG_CHUNK_READ] = VAR(struct kvc_msg_chunk_read, h_read),
	[KVC_MSG_CHUNK_REMOVE] = EXACT(struct kvc_msg_chunk_remove, kvc_service_range_remove),
	[KVC_MSG_CHUNK_TRUNCATE] = EXACT(struct kvc_msg_chunk_truncate, kvc_service_range_truncate),
	[KVC_MSG_CHUNK_PUNCH] = EXACT(struct kvc_msg_chunk_punch, kvc_service_range_punch),
	[KVC_MSG_CHUNK_LAST] = EXACT(struct kvc_msg_chunk_last, h_last),
	[KVC_MSG_CHUNK_LIST] = EXACT(struct kvc_msg_chunk_list, h_list),
	[KVC_MSG_CHUNK_RESYNC] = EXACT(struct kvc_msg_chunk_resync, h_resync),
	[KVC_MSG_CHUNK_RESYNC_STATUS] = EXACT(struct kvc_msg_chunk_target, h_resync_status),
	[KVC_MSG_SPACE] = EMPTY(h_space),
	[KVC_MSG_SYNC] = EMPTY(h_sync),
	[KVC_MSG_PLACE_HELLO] = EMPTY(kvc_service_place_hello),
	[KVC_MSG_PLACE_REGISTER] = EXACT(struct kvc_msg_place_register, kvc_service_place_register),
	[KVC_MSG_PLACE_UNREGISTER] = EXACT(struct kvc_msg_place_region, kvc_service_place_unregister),
	[KVC_MSG_PLACE_READ] = VAR(struct kvc_msg_place_read, kvc_service_place_read),
	[KVC_MSG_PLACE_WRITE] = EXACT(struct kvc_msg_place_write, kvc_service_place_write),
	[KVC_MSG_PLACE_LOCAL] = EXACT(struct kvc_msg_place_local, kvc_service_place_local),
};

int kvc_storage_service_handle(void *service, struct kvc_server_conn *conn,
                               const struct kvc_wire_header *h)
{
	const struct op *op = h->type < sizeof(ops) / sizeof(ops[0]) ? &ops[h->type] : NULL;
	if (!op || !op->handler)
		return kvc_service_refuse(conn, h, -EOPNOTSUPP);
	if ((op->exact ? h->body_len != op->size : h->body_len < op->size) ||
	    (h->data_len && !op->data))
		return kvc_service_refuse(conn, h, -EINVAL);
	struct conn_state *state = state_of(conn);
	if (!state)
		return -ENOMEM;
	struct request r = {.svc = service, .conn = conn, .state = state, .h = h,
	                    .msg = conn->body, .off = op->size};
	return op->handler(&r);
}

bool kvc_storage_service_serves(uint16_t type)
{
	return type < sizeof(ops) / sizeof(ops[0]) && ops[type].handler;
}
