/* service_range: remove, truncate and punch, down the chain (see
 * service_internal.h and range_apply's comment). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "client/storage_target.h"
#include "core/layout.h"
#include "core/log.h"
#include "storage/service_internal.h"

/* Replies of the range operations: how many chunks they changed. */
static int reply_count(struct request *r, int64_t rc)
{
	struct kvc_msg_count_reply out = {.count = rc > 0 ? (uint64_t)rc : 0};
	return kvc_service_reply(r, rc < 0 ? (int)rc : 0, &out, sizeof(out));
}

/* A range operation (remove, truncate, punch) of one inode on target,
 * chained as a write is (wire.h): checked against its chain and version
 * (a request delayed across a membership change must not land after the
 * target caught up) and against its place in the chain (a client sends it
 * to the head, only a member passes it on); applied here inside the
 * target's apply gate (inflight.h), then passed to the next member; the
 * answer is the tail's. Like chain_write, every member of a chain of
 * several (and a syncing tail) holds the chunks it changes (span) in the
 * in-flight table until the rest of the chain answered, so the chain
 * applies a chunk's writes and range operations in one order, and a
 * resync or a repair here copies a chunk before or after it, never across
 * it (resync.h). Fewer members than min_write_replicas do not refuse it:
 * dropping bytes never keeps fewer copies than promised. A server without
 * peers just applies it. Replies with the count or -errno. */
/* What a range operation changes: inode's chunks first..last. */
struct chunk_span {
	uint64_t inode;
	uint32_t first, last;
};

static int range_apply(struct request *r, uint32_t target, uint32_t chain_id, uint32_t version,
                       uint32_t flags, bool valid,
                       int64_t (*apply)(struct kvc_chunk_store *store, const void *msg),
                       void (*pass_on)(void *body, const void *msg, uint32_t next),
                       uint32_t body_len, struct chunk_span span)
{
	uint64_t inode = span.inode;
	struct kvc_storage_service *svc = r->svc;
	struct kvc_chunk_store *store = kvc_service_store(svc, target);
	struct kvc_chain copy;
	const struct kvc_chain *chain = NULL;
	int pos = 0, rc = store ? 0 : -ENXIO;
	if (rc == 0 && (!valid || (flags & ~KVC_CHUNK_FORWARDED)))
		rc = -EINVAL;
	if (rc == 0)
		chain = kvc_service_chain(svc, chain_id, version, target, &copy, &pos, &rc);
	if (rc == 0 && (pos == 0) == ((flags & KVC_CHUNK_FORWARDED) != 0))
		rc = pos == 0 ? -EINVAL : -ESTALE;
	struct kvc_inflight_hold *hold = NULL;
	if (rc == 0 && svc->inflight &&
	    (chain->count > 1 || atomic_load(&svc->resync[target - svc->first_target].syncing)))
		rc = kvc_inflight_begin_range(svc->inflight, target, inode, span.first, span.last,
		                              svc->io_timeout_ms, &hold);
	int64_t n = rc;
	if (rc == 0) {
		unsigned ticket = svc->inflight ? kvc_inflight_apply_enter(svc->inflight, target) : 0;
		struct kvc_chain now;
		int now_pos;
		if (kvc_service_chain(svc, chain_id, version, target, &now, &now_pos, &rc))
			n = apply(store, r->msg);
		else
			n = rc;
		if (svc->inflight)
			kvc_inflight_apply_leave(svc->inflight, target, ticket);
	}
	if (n >= 0 && chain && (uint32_t)pos + 1 < chain->count) {
		uint8_t body[64], reply[64];
		uint32_t next = chain->targets[pos + 1], reply_len = 0;
		pass_on(body, r->msg, next);
		int status = kvc_storage_target_call_idempotent(svc->peers, next, r->h->type, body,
		                                                body_len, reply, sizeof(reply),
		                                                &reply_len);
		if (status < 0) {
			kvc_log_warn("chain %u: target %u could not pass a %s of inode %llu on to "
			             "target %u: %s", chain_id, target, kvc_wire_type_name(r->h->type),
			             (unsigned long long)inode, next, strerror(-status));
			n = kvc_rpc_is_transport_error(status) ? -EIO : status;
		}
	}
	if (hold)
		kvc_inflight_end_range(svc->inflight, hold);
	return reply_count(r, n);
}

static int64_t apply_remove(struct kvc_chunk_store *store, const void *msg)
{
	const struct kvc_msg_chunk_remove *m = msg;
	return kvc_chunk_store_remove(store, m->inode);
}

static int64_t apply_truncate(struct kvc_chunk_store *store, const void *msg)
{
	const struct kvc_msg_chunk_truncate *m = msg;
	return kvc_chunk_store_truncate(store, m->inode, m->size, m->chunk_size);
}

static int64_t apply_punch(struct kvc_chunk_store *store, const void *msg)
{
	const struct kvc_msg_chunk_punch *m = msg;
	return kvc_chunk_store_punch(store, m->inode, m->first_chunk, m->count);
}

static void pass_remove(void *body, const void *msg, uint32_t next)
{
	struct kvc_msg_chunk_remove m = *(const struct kvc_msg_chunk_remove *)msg;
	m.target = next;
	m.flags = KVC_CHUNK_FORWARDED;
	memcpy(body, &m, sizeof(m));
}

static void pass_truncate(void *body, const void *msg, uint32_t next)
{
	struct kvc_msg_chunk_truncate m = *(const struct kvc_msg_chunk_truncate *)msg;
	m.target = next;
	m.flags = KVC_CHUNK_FORWARDED;
	memcpy(body, &m, sizeof(m));
}

static void pass_punch(void *body, const void *msg, uint32_t next)
{
	struct kvc_msg_chunk_punch m = *(const struct kvc_msg_chunk_punch *)msg;
	m.target = next;
	m.flags = KVC_CHUNK_FORWARDED;
	memcpy(body, &m, sizeof(m));
}

int kvc_service_range_remove(struct request *r)
{
	const struct kvc_msg_chunk_remove *m = r->msg;
	struct chunk_span all = {m->inode, 0, UINT32_MAX};
	return range_apply(r, m->target, m->chain, m->chain_version, m->flags, true, apply_remove,
	                   pass_remove, sizeof(*m), all);
}

int kvc_service_range_truncate(struct request *r)
{
	const struct kvc_msg_chunk_truncate *m = r->msg;
	bool valid = kvc_service_chunk_size_valid(m->chunk_size) && m->size <= KVC_LAYOUT_MAX_FILE_SIZE &&
	             m->reserved == 0;
	/* the chunk the size falls in (cut) and every one after (dropped) */
	uint64_t from = valid ? m->size / m->chunk_size : 0;
	struct chunk_span tail = {m->inode, from > UINT32_MAX ? UINT32_MAX : (uint32_t)from,
	                          UINT32_MAX};
	return range_apply(r, m->target, m->chain, m->chain_version, m->flags, valid,
	                   apply_truncate, pass_truncate, sizeof(*m), tail);
}

int kvc_service_range_punch(struct request *r)
{
	const struct kvc_msg_chunk_punch *m = r->msg;
	bool valid = m->count > 0 && m->count - 1 <= UINT32_MAX - m->first_chunk;
	struct chunk_span span = {m->inode, m->first_chunk,
	                          valid ? m->first_chunk + (m->count - 1) : m->first_chunk};
	return range_apply(r, m->target, m->chain, m->chain_version, m->flags, valid, apply_punch,
	                   pass_punch, sizeof(*m), span);
}
