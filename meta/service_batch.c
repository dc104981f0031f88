/* service_batch: the meta service's messages of many files at once
 * (service_internal.h): KEYS_* (ring keys), INO_GRANT, INO_RETURN, ADOPT
 * and REMOVE_MANY (files made and removed ahead by a kvc-fuse), and
 * CLOSE_MANY. */
#include "meta/service_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "meta/collector.h"
#include "meta/meta_adopt.h"
#include "meta/meta_keys.h"
#include "meta/sessions.h"
#include "meta/watches.h"

/* KEYS_* and the watches: a published or removed key is a change others
 * hear of (a USRBIO wait on another client included); a lookup notes what
 * it answered, found or not (so such a wait hears of the key's arrival).
 * Temp names (KEYS_CREATE) concern nobody. */
static void keys_watch(struct kvc_meta_request *r, const struct kvc_msg_keys *m,
                       const uint8_t *records, uint32_t len,
                       const struct kvc_msg_key_result *out)
{
	uint16_t type = r->h->type;
	struct kvc_meta_key_record *recs;
	if (!r->svc->watches || type == KVC_MSG_KEYS_CREATE || m->count == 0 ||
	    !(recs = calloc(m->count, sizeof(*recs))))
		return;
	if (kvc_meta_keys_parse(type, m, records, len, recs) == 0) {
		for (uint32_t i = 0; i < m->count; i++) {
			const struct kvc_meta_key_record *k = &recs[i];
			if (type == KVC_MSG_KEYS_LOOKUP && (out[i].rc == 0 || out[i].rc == -ENOENT))
				kvc_meta_req_note_name(r, m->parent, k->name, k->name_len);
			else if (type == KVC_MSG_KEYS_PUBLISH && out[i].rc == 0)
				kvc_meta_req_made(r, m->parent, k->name, k->name_len, out[i].attr.ino);
			else if (type == KVC_MSG_KEYS_REMOVE && out[i].rc == 0)
				kvc_meta_req_removed(r, m->parent, k->name, k->name_len, out[i].attr.ino);
		}
	}
	free(recs);
}

/* KEYS_*: meta_keys.c parses the records and runs them in one transaction. */
int kvc_meta_service_keys(struct kvc_meta_request *r)
{
	const struct kvc_msg_keys *m = r->msg;
	uint32_t len = r->h->body_len - r->off;
	const uint8_t *records = kvc_meta_req_take(r, len);
	if (!records || m->count > KVC_WIRE_MAX_KEYS)
		return kvc_meta_req_bad(r);
	struct kvc_msg_key_result *out = calloc(m->count ? m->count : 1, sizeof(*out));
	int rc = out ? kvc_meta_keys_run(r->svc->store, r->h->type, m, records, len, out) : -ENOMEM;
	if (rc == 0 && r->h->type != KVC_MSG_KEYS_LOOKUP && r->h->type != KVC_MSG_KEYS_CREATE &&
	    r->svc->collector)
		kvc_meta_collector_wake(r->svc->collector);
	if (rc == 0)
		keys_watch(r, m, records, len, out);
	rc = kvc_meta_req_reply(r, rc, out, m->count * (uint32_t)sizeof(*out));
	free(out);
	return rc;
}

/* INO_GRANT: numbers for files a kvc-fuse makes ahead (meta_adopt.h). */
int kvc_meta_service_ino_grant(struct kvc_meta_request *r)
{
	const struct kvc_msg_ino_grant *m = r->msg;
	struct kvc_msg_ino_grant_reply out = {0};
	int rc = m->reserved ? -EINVAL
	                     : kvc_meta_adopt_grant(r->svc->store, m->client, m->count, &out);
	if (rc == 0 && r->svc->sessions) /* a client holding grants is swept if silent */
		kvc_meta_sessions_touch(r->svc->sessions, m->client, kvc_meta_sessions_now_ms());
	/* Durable before it is used: a machine crash going back to an older
	 * checkpoint would give these numbers out again to other files. */
	if (rc == 0)
		rc = kvc_meta_store_sync(r->svc->store);
	return kvc_meta_req_reply(r, rc, &out, sizeof(out));
}

/* INO_RETURN: the numbers the client made files with and never entered
 * go to the collector. */
int kvc_meta_service_ino_return(struct kvc_meta_request *r)
{
	const struct kvc_msg_ino_return *m = r->msg;
	struct kvc_msg_ino_return_reply out = {0};
	int rc = kvc_meta_store_grants_return(r->svc->store, m->client, m->ranges, 2,
	                                      &out.reclaimed);
	if (rc == 0 && out.reclaimed > 0 && r->svc->collector)
		kvc_meta_collector_wake(r->svc->collector);
	return kvc_meta_req_reply(r, rc, &out, sizeof(out));
}

/* ADOPT: the files entered are news to other clients (and the maker's
 * kernel caches them, as a CREATE's); a replaced file may be free now,
 * and a refused one's chunks are queued (meta_grants.c). */
static void adopt_watch(struct kvc_meta_request *r, const struct kvc_meta_adopt_record *recs,
                        const struct kvc_msg_key_result *out, const uint64_t *replaced)
{
	const struct kvc_msg_adopt *m = r->msg;
	bool wake = false;
	for (uint32_t i = 0; i < m->count; i++) {
		wake |= out[i].rc < 0 && out[i].rc != -ESTALE;
		if (out[i].rc < 0)
			continue;
		kvc_meta_req_made(r, recs[i].rec.parent, recs[i].name, recs[i].rec.name_len,
		                  out[i].attr.ino);
		kvc_meta_req_changed_inode(r, replaced[i]);
		wake |= replaced[i] != 0;
	}
	if (wake && r->svc->collector)
		kvc_meta_collector_wake(r->svc->collector);
}

int kvc_meta_service_adopt(struct kvc_meta_request *r)
{
	const struct kvc_msg_adopt *m = r->msg;
	struct kvc_meta_service *svc = r->svc;
	uint32_t len = r->h->body_len - r->off;
	const uint8_t *records = kvc_meta_req_take(r, len);
	if (!records || m->count < 1 || m->count > KVC_WIRE_MAX_KEYS || m->reserved)
		return kvc_meta_req_bad(r);
	struct kvc_meta_adopt_record *recs = calloc(m->count, sizeof(*recs));
	struct kvc_msg_key_result *out = calloc(m->count, sizeof(*out));
	uint64_t *replaced = calloc(m->count, sizeof(*replaced));
	int rc = recs && out && replaced ? kvc_meta_adopt_parse(m, records, len, recs) : -ENOMEM;
	if (rc == 0 && svc->sessions)
		kvc_meta_sessions_touch(svc->sessions, m->client, kvc_meta_sessions_now_ms());
	if (rc == 0)
		rc = kvc_meta_adopt_run(svc->store, m, recs, out, replaced);
	if (rc == 0)
		adopt_watch(r, recs, out, replaced);
	rc = kvc_meta_req_reply(r, rc, out, m->count * (uint32_t)sizeof(*out));
	free(replaced);
	free(out);
	free(recs);
	return rc;
}

/* REMOVE_MANY: removals a kvc-fuse answered itself (meta_adopt.h); each is
 * news to others as an UNLINK's, and its inode may be free now. */
int kvc_meta_service_remove_many(struct kvc_meta_request *r)
{
	const struct kvc_msg_remove_many *m = r->msg;
	uint32_t len = r->h->body_len - r->off;
	const uint8_t *records = kvc_meta_req_take(r, len);
	bool wake = false;
	if (!records || m->count < 1 || m->count > KVC_WIRE_MAX_KEYS || m->reserved)
		return kvc_meta_req_bad(r);
	struct kvc_meta_remove_record *recs = calloc(m->count, sizeof(*recs));
	struct kvc_msg_key_result *out = calloc(m->count, sizeof(*out));
	int rc = recs && out ? kvc_meta_remove_many_parse(m, records, len, recs) : -ENOMEM;
	if (rc == 0)
		rc = kvc_meta_remove_many_run(r->svc->store, m, recs, out);
	for (uint32_t i = 0; rc == 0 && i < m->count; i++) {
		const struct kvc_meta_remove_record *k = &recs[i];
		if (out[i].rc == 0) {
			kvc_meta_req_removed(r, k->rec.parent, k->name, k->rec.name_len, k->rec.ino);
			/* The sender keeps the parent's attributes as after its
			 * removals, as UNLINK's answer: it hears of their change. */
			kvc_meta_req_note_inode(r, k->rec.parent);
		}
		wake |= out[i].rc == 0;
	}
	if (wake && r->svc->collector)
		kvc_meta_collector_wake(r->svc->collector);
	rc = kvc_meta_req_reply(r, rc, out, m->count * (uint32_t)sizeof(*out));
	free(out);
	free(recs);
	return rc;
}

/* CLOSE_MANY: the closes a kvc-fuse gathered, one transaction. */
int kvc_meta_service_close_many(struct kvc_meta_request *r)
{
	const struct kvc_msg_close_many *m = r->msg;
	struct kvc_meta_service *svc = r->svc;
	const void *inos = m->count >= 1 && m->count <= KVC_WIRE_MAX_CLOSES
	                 ? kvc_meta_req_take(r, m->count * (uint32_t)sizeof(uint64_t)) : NULL;
	if (!inos || !kvc_meta_req_done(r))
		return kvc_meta_req_bad(r);
	uint64_t *copy = malloc((size_t)m->count * sizeof(uint64_t));
	if (!copy)
		return kvc_meta_req_reply(r, -ENOMEM, NULL, 0);
	memcpy(copy, inos, (size_t)m->count * sizeof(uint64_t)); /* the body is unaligned */
	if (svc->sessions)
		kvc_meta_sessions_touch(svc->sessions, m->client, kvc_meta_sessions_now_ms());
	int rc = kvc_meta_store_close_sessions(svc->store, copy, m->count, m->client);
	free(copy);
	if (rc == 0 && svc->collector)
		kvc_meta_collector_wake(svc->collector); /* orphans may be free now */
	return kvc_meta_req_reply(r, rc, NULL, 0);
}
