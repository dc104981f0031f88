/* service_place: same-host placement's messages (place.h; only on
 * kvc-storage's Unix socket; see service_internal.h). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/host_id.h"
#include "storage/service_internal.h"

/* Placement (place.h): only on the Unix socket, from a process of this
 * server's uid or root (SO_PEERCRED), which the handshake proved holds
 * the cluster secret. Returns 0 or -EACCES / -EOPNOTSUPP. */
static int place_peer(struct request *r)
{
	struct conn_state *state = r->state;
	if (state->peer == 0) {
		struct ucred cred;
		int domain = 0;
		socklen_t len = sizeof(domain);
		/* SO_PEERCRED answers on TCP too (no one's credentials): ask the
		 * socket's domain first. */
		if (!r->svc->place || getsockopt(r->conn->fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
		    domain != AF_UNIX)
			state->peer = -EOPNOTSUPP;
		else if ((len = sizeof(cred)),
		         getsockopt(r->conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
		                 len != sizeof(cred))
			state->peer = -EOPNOTSUPP;
		else if (cred.uid != 0 && cred.uid != geteuid())
			state->peer = -EACCES;
		else {
			state->peer = 1;
			state->peer_pid = cred.pid;
		}
	}
	return state->peer < 0 ? state->peer : 0;
}

int kvc_service_place_hello(struct request *r)
{
	struct kvc_msg_place_hello_reply out = {.max_pieces = KVC_WIRE_MAX_PIECES};
	int rc = place_peer(r);
	if (rc == 0)
		rc = kvc_host_id(out.host_id);
	return kvc_service_reply(r, rc, &out, sizeof(out));
}

int kvc_service_place_register(struct request *r)
{
	const struct kvc_msg_place_register *m = r->msg;
	int rc = place_peer(r);
	if (rc == 0 && (r->conn->passed_fd_count != 1 || r->conn->passed_fds[0] < 0))
		rc = -EINVAL;
	if (rc == 0) {
		int fd = r->conn->passed_fds[0];
		r->conn->passed_fds[0] = -1; /* taken */
		rc = kvc_place_register(r->svc->place, r->conn, r->state->peer_pid, fd, m);
	}
	return kvc_service_reply(r, rc, NULL, 0);
}

int kvc_service_place_unregister(struct request *r)
{
	const struct kvc_msg_place_region *m = r->msg;
	int rc = place_peer(r);
	if (rc == 0)
		rc = kvc_place_unregister(r->svc->place, r->conn, r->state->peer_pid, m->region);
	return kvc_service_reply(r, rc, NULL, 0);
}

/* PLACE_LOCAL (wire_storage.h): the target's directory and change
 * counters, for a client that reads its chunks itself. Only where what
 * the files hold is what the chain committed: the target is its chain's
 * only copy, and the table never changes (no managers: a table that
 * could change would need the client told when this server stops being
 * the chain's tail). A server without peers (tests) has single copies. */
int kvc_service_place_local(struct request *r)
{
	const struct kvc_msg_place_local *m = r->msg;
	struct kvc_storage_service *svc = r->svc;
	int rc = place_peer(r);
	struct kvc_chunk_store *store = rc == 0 ? kvc_service_store(svc, m->target) : NULL;
	if (rc == 0 && m->reserved)
		rc = -EINVAL;
	if (rc == 0 && !store)
		rc = -ENXIO;
	if (rc == 0 && svc->peers &&
	    (svc->peers->following || !kvc_storage_client_sole_copy(svc->peers, m->target)))
		rc = -EOPNOTSUPP;
	if (rc < 0)
		return kvc_service_reply(r, rc, NULL, 0);
	struct kvc_msg_place_local_reply out = {.slots = KVC_CHUNK_LOCK_SLOTS};
	int fds[2];
	rc = kvc_chunk_store_local(store, &fds[0], &fds[1]);
	return rc < 0 ? kvc_service_reply(r, rc, NULL, 0)
	              : kvc_server_reply_fds(r->conn, r->h, &out, sizeof(out), fds, 2);
}

/* A placed piece (chunk_store.h `place`): check its whole blocks in the
 * region, then copy the parts of its edge blocks there. Returns 0, -EIO
 * (a crc in the region) or -EFAULT. */
static int place_settle(struct kvc_place_region *region, uint64_t offset,
                        const struct kvc_chunk_read *p)
{
	int rc = p->checked ? 0 /* as it was read */
	                    : kvc_place_check_blocks(p->buffer + p->mid_offset, p->mid_length,
	                                             KVC_CHUNK_BLOCK, p->block_crcs + p->mid_block);
	uint32_t skip = (uint32_t)(p->offset - p->aligned_start);
	if (rc == 0 && p->head_length)
		rc = kvc_place_copy_out(region, offset, p->edge + skip, p->head_length - skip);
	if (rc == 0 && p->tail_copy)
		rc = kvc_place_copy_out(region, offset + p->tail_offset, p->edge + p->head_length,
		                        p->tail_copy);
	return rc;
}

/* A piece placed in client memory failed its crc there: the chunk's
 * copy is bad, or the client changed its memory meanwhile. Read it again
 * into a buffer of ours: -EIO there is the copy's (queued for repair, as
 * CHUNK_READ would), else its checked bytes are copied into the region
 * (*res updated). Returns 0 or -errno. */
static int place_read_again(struct request *r, const struct kvc_msg_piece *piece,
                            struct kvc_place_region *region, uint64_t offset,
                            struct kvc_msg_piece_result *res)
{
	struct kvc_chunk_read one = {.inode = piece->inode, .chunk = piece->chunk,
	                             .offset = piece->offset, .length = piece->length};
	struct kvc_chunk_store *store = kvc_service_store(r->svc, piece->target);
	kvc_chunk_store_read_batch(&store, &r->state->ring, &one, 1);
	int status = one.status;
	if (status == -EIO && r->svc->peers)
		kvc_repair_queue(r->svc, piece->target, piece->inode, piece->chunk); /* a bad copy */
	if (status == 0)
		status = kvc_place_copy_out(region, offset, one.data, one.present);
	if (status == 0)
		*res = (struct kvc_msg_piece_result){0, one.present};
	kvc_chunk_store_read_release(&one, 1);
	return status;
}

struct placing {
	struct kvc_place_region *region;
	const struct kvc_msg_piece *pieces;
	const uint64_t *offsets;
};

/* Before the runs are read: a piece alone places its whole blocks
 * straight from the chunk file into the region; a run of several is
 * placed piece by piece from an inline chunk's record (scatter), or else
 * read into a buffer of ours. */
static void place_prepare(struct conn_state *state, uint32_t runs, const void *arg)
{
	const struct placing *p = arg;
	for (uint32_t i = 0; i < runs; i++) {
		uint32_t first = state->run_first[i], end = state->run_first[i + 1];
		struct kvc_chunk_read *read = &state->reads[i];
		if (end == first + 1) {
			read->place = kvc_place_at(p->region, p->offsets[first]);
			continue;
		}
		for (uint32_t j = first; j < end; j++)
			state->scatter[j] = (struct iovec){kvc_place_at(p->region, p->offsets[j]),
			                                   p->pieces[j].length};
		read->scatter = &state->scatter[first];
		read->scatter_count = end - first;
	}
}

/* The pieces of a run of several (kvc_service_merge_pieces): placed
 * already (an inline chunk's, scatter), or read into a buffer of ours and
 * checked there, each piece's share then copied to its place in the
 * region. Returns the bytes placed. */
static uint64_t place_run(struct request *r, struct kvc_place_region *region,
                          const uint64_t *offsets, uint32_t run)
{
	struct conn_state *state = r->state;
	bool placed = state->reads[run].placed;
	uint64_t bytes = 0;
	for (uint32_t j = state->run_first[run]; j < state->run_first[run + 1]; j++) {
		struct kvc_msg_piece_result *res = &state->piece_results[j];
		int status = res->status == 0 && res->length && !placed
		                     ? kvc_place_copy_out(region, offsets[j],
		                                          state->piece_data[j].iov_base, res->length)
		                     : res->status;
		if (status < 0) {
			*res = (struct kvc_msg_piece_result){status, 0};
			if (status == -EFAULT)
				atomic_fetch_add(&r->svc->place->faults, 1);
		}
		bytes += res->length;
	}
	return bytes;
}

int kvc_service_cut_spans(struct conn_state *state, const struct kvc_msg_piece *pieces,
                          uint32_t count, const struct kvc_msg_place_span *spans,
                          uint32_t span_count)
{
	uint32_t j = 0;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t done = 0;
		if (pieces[i].length == 0)
			return -EINVAL; /* every piece has a span (the fold relies on it) */
		while (done < pieces[i].length) {
			if (j == span_count || spans[j].length == 0 || spans[j].reserved ||
			    spans[j].length > pieces[i].length - done)
				return -EINVAL;
			state->spanned[j] = pieces[i];
			state->spanned[j].offset += done;
			state->spanned[j].length = spans[j].length;
			state->span_offsets[j] = spans[j].offset;
			done += spans[j++].length;
		}
	}
	return j == span_count ? 0 : -EINVAL;
}

void kvc_service_fold_spans(struct conn_state *state, const struct kvc_msg_piece *pieces,
                            uint32_t count)
{
	struct kvc_msg_piece_result *res = state->piece_results;
	uint32_t j = 0;
	for (uint32_t i = 0; i < count; i++) {
		struct kvc_msg_piece_result out = {0, 0};
		bool short_seen = false;
		for (uint32_t done = 0; done < pieces[i].length; done += state->spanned[j++].length) {
			if (res[j].status < 0 && out.status == 0)
				out.status = res[j].status;
			if (!short_seen)
				out.length += res[j].length;
			short_seen = short_seen || res[j].length < state->spanned[j].length;
		}
		res[i] = out.status < 0 ? (struct kvc_msg_piece_result){out.status, 0} : out;
	}
}

/* As CHUNK_READ, but each piece's bytes are copied into the region
 * (crcs checked in the server's buffers first, as for a send), at its
 * spans. The pieces are cut at their spans first; a span alone in its
 * run places its whole blocks straight from the chunk file; spans that
 * continue each other (a ring key's segments) are read once, as one run,
 * and copied out span by span. */
int kvc_service_place_read(struct request *r)
{
	const struct kvc_msg_place_read *m = r->msg;
	struct conn_state *state = r->state;
	int rc = place_peer(r);
	if (rc == 0 && (m->count == 0 || m->count > KVC_WIRE_MAX_PIECES || m->spans < m->count ||
	                m->spans > KVC_WIRE_MAX_PIECES))
		rc = -EINVAL;
	const struct kvc_msg_piece *pieces =
		rc == 0 ? kvc_service_take(r, m->count * (uint32_t)sizeof(*pieces)) : NULL;
	const struct kvc_msg_place_span *spans =
		pieces ? kvc_service_take(r, m->spans * (uint32_t)sizeof(*spans)) : NULL;
	if (rc == 0 && (!spans || !kvc_service_done(r)))
		rc = -EINVAL;
	struct kvc_place_region *region =
	        rc == 0 ? kvc_place_get(r->svc->place, state->peer_pid, m->region) : NULL;
	if (rc == 0 && !region)
		rc = -ENOENT;
	if (rc == 0)
		rc = kvc_service_cut_spans(state, pieces, m->count, spans, m->spans);
	for (uint32_t j = 0; rc == 0 && j < m->spans; j++)
		if (!kvc_place_fits(region, spans[j].offset, spans[j].length))
			rc = -EINVAL;
	/* Only spans under a block make runs: a larger one keeps its whole
	 * blocks placed straight from the chunk file. */
	const uint64_t *offsets = state->span_offsets;
	struct placing placing = {region, state->spanned, offsets};
	uint64_t abandoned = state->ring.abandoned_places;
	int read = rc == 0 ? kvc_service_read_runs(r, state->spanned, m->spans,
	                                           KVC_CHUNK_BLOCK - 1, place_prepare, &placing)
	                   : rc;
	if (state->ring.abandoned_places != abandoned)
		kvc_place_keep(r->svc->place, region); /* the kernel may still write there */
	if (read < 0) {
		kvc_place_put(r->svc->place, region);
		return kvc_service_reply(r, read, NULL, 0);
	}
	uint32_t runs = (uint32_t)read;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < runs; i++) {
		uint32_t first = state->run_first[i];
		if (state->run_first[i + 1] != first + 1) {
			bytes += place_run(r, region, offsets, i);
			continue;
		}
		struct kvc_msg_piece_result *res = &state->piece_results[first];
		struct kvc_chunk_read *p = &state->reads[i];
		if (res->status != 0)
			continue;
		int status = p->placed ? place_settle(region, offsets[first], p)
		                       : kvc_place_copy_out(region, offsets[first],
		                                            state->data[i].iov_base, res->length);
		if (status == -EIO)
			status = place_read_again(r, &state->spanned[first], region, offsets[first], res);
		if (status < 0) {
			*res = (struct kvc_msg_piece_result){status, 0};
			if (status == -EFAULT)
				atomic_fetch_add(&r->svc->place->faults, 1);
		}
		bytes += res->length;
	}
	kvc_chunk_store_read_release(state->reads, (int)runs);
	kvc_place_put(r->svc->place, region);
	kvc_service_fold_spans(state, pieces, m->count);
	atomic_fetch_add(&r->svc->place->read_ops, 1);
	atomic_fetch_add(&r->svc->place->read_bytes, bytes);
	atomic_fetch_add(&r->svc->place->read_pieces, m->count);
	atomic_fetch_add(&r->svc->place->read_spans, m->spans);
	return kvc_service_reply(r, 0, state->piece_results,
	                         m->count * (uint32_t)sizeof(state->piece_results[0]));
}

/* As CHUNK_WRITE, with the bytes copied out of the region into this
 * connection's buffer first (place.h: what is stored and forwarded is
 * what was copied). */
int kvc_service_place_write(struct request *r)
{
	const struct kvc_msg_place_write *m = r->msg;
	int pos = 0;
	struct kvc_chain copy;
	const struct kvc_chain *chain = NULL;
	struct kvc_place_region *region = NULL;
	int rc = place_peer(r);
	if (rc == 0 && m->reserved)
		rc = -EINVAL;
	if (rc == 0)
		rc = kvc_service_write_check(r, &m->write, m->length, &copy, &chain, &pos);
	if (rc == 0 && !(region = kvc_place_get(r->svc->place, r->state->peer_pid, m->region)))
		rc = -ENOENT;
	if (rc == 0)
		rc = kvc_place_copy_in(region, m->region_offset, r->state->buffer, m->length);
	kvc_place_put(r->svc->place, region);
	if (rc == -EFAULT)
		atomic_fetch_add(&r->svc->place->faults, 1);
	struct kvc_msg_chunk_write_reply out = {0};
	if (rc == 0)
		rc = kvc_service_chain_write(r, &m->write,
		                             kvc_service_store(r->svc, m->write.target), chain, pos,
		                             m->length, &out);
	if (rc == 0) {
		atomic_fetch_add(&r->svc->place->write_ops, 1);
		atomic_fetch_add(&r->svc->place->write_bytes, m->length);
	}
	return kvc_service_reply(r, rc, &out, sizeof(out));
}
