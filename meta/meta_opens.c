/*
 * meta_opens: open sessions in the meta store. A client (one kvc-fuse, by
 * a random 16-byte id) records that it has a regular file open, in two
 * tables that always change together: `opens` (ino, client) and `clients`
 * (client, ino). A file whose last name goes while some client has it
 * open is an orphan (nlink 0, data kept) until the last close or until
 * its clients are dropped; then it goes to the gc queue.
 *
 * Dropping a client records it in `dropped`, in the transaction that ends
 * its sessions: the record is how kvc-meta tells it (RENEW answers ESTALE,
 * see sessions.h) after any restart and however many other clients were
 * dropped since. It goes when the client rejoins, naming the drop it
 * heard of (its record's drops), so a client dropped again meanwhile is
 * told again.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/lmdb_txn.h"
#include "core/log.h"
#include "meta/meta_store_internal.h"

/* Whether some client has ino open in the store (an `opens` entry with
 * its prefix). */
static int stored_opens(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_cursor *cur;
	MDB_val k = {8, key}, v;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->opens, &cur));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	bool open = got == 0 && k.mv_size == 8 + KVC_META_CLIENT_ID &&
	            memcmp(k.mv_data, key, 8) == 0;
	mdb_cursor_close(cur);
	return got != 0 && got != MDB_NOTFOUND ? kvc_lmdb_errno(got) : open;
}

int kvc_meta_has_opens(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	int open = stored_opens(s, txn, ino);
	return open != 0 ? open : kvc_meta_open_table_has(s->mem_opens, ino);
}

int kvc_meta_doom_unless_open(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	int open = stored_opens(s, txn, ino);
	return open != 0 ? open : kvc_meta_open_table_doom(s->mem_opens, ino, mdb_txn_id(txn));
}

/* ---- open sessions: files kept while clients have them open ---- */

static MDB_val open_key(uint8_t *key, uint64_t ino, const uint8_t client[KVC_META_CLIENT_ID])
{
	kvc_meta_be64(key, ino);
	memcpy(key + 8, client, KVC_META_CLIENT_ID);
	return (MDB_val){8 + KVC_META_CLIENT_ID, key};
}

/* The same pair, client first: the `clients` index. */
static MDB_val client_key(uint8_t *key, const uint8_t client[KVC_META_CLIENT_ID], uint64_t ino)
{
	memcpy(key, client, KVC_META_CLIENT_ID);
	kvc_meta_be64(key + KVC_META_CLIENT_ID, ino);
	return (MDB_val){KVC_META_CLIENT_ID + 8, key};
}

/* Record or end the session (ino, client) in both tables. */
int kvc_meta_session_put(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       const uint8_t client[KVC_META_CLIENT_ID])
{
	uint8_t a[8 + KVC_META_CLIENT_ID], b[KVC_META_CLIENT_ID + 8];
	MDB_val ka = open_key(a, ino, client), kb = client_key(b, client, ino), one = {1, "\1"};
	int rc = kvc_lmdb_errno(mdb_put(txn, s->opens, &ka, &one, 0));
	return rc < 0 ? rc : kvc_lmdb_errno(mdb_put(txn, s->clients, &kb, &one, 0));
}

static int session_del(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       const uint8_t client[KVC_META_CLIENT_ID])
{
	uint8_t a[8 + KVC_META_CLIENT_ID], b[KVC_META_CLIENT_ID + 8];
	MDB_val ka = open_key(a, ino, client), kb = client_key(b, client, ino);
	int rc = mdb_del(txn, s->opens, &ka, NULL);
	if (rc == 0 || rc == MDB_NOTFOUND)
		rc = mdb_del(txn, s->clients, &kb, NULL);
	return rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
}

/* 1 when the store holds the session (ino, client), 0 when not, -errno. */
static int stored_session(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                          const uint8_t client[KVC_META_CLIENT_ID])
{
	uint8_t a[8 + KVC_META_CLIENT_ID];
	MDB_val ka = open_key(a, ino, client), v;
	int rc = mdb_get(txn, s->opens, &ka, &v);
	return rc == 0 ? 1 : rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
}

int kvc_meta_session_has(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const uint8_t client[KVC_META_CLIENT_ID])
{
	int rc = stored_session(s, txn, ino, client);
	return rc != 0 ? rc : kvc_meta_open_table_has_client(s->mem_opens, ino, client);
}

int kvc_meta_orphan_mark(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino, uint8_t kind)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, mark = {1, &kind};
	int rc = kind ? mdb_put(txn, s->orphans, &k, &mark, 0) : mdb_del(txn, s->orphans, &k, NULL);
	return rc == MDB_NOTFOUND ? 0 : kvc_lmdb_errno(rc);
}

int kvc_meta_orphan_kind(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	int rc = mdb_get(txn, s->orphans, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0;
	return rc ? kvc_lmdb_errno(rc) : v.mv_size == 1 ? *(const uint8_t *)v.mv_data : 1;
}

/* After a close: an orphan nobody has open any more goes to the gc queue. */
static int settle_orphan(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	struct kvc_inode_record rec;
	int open = kvc_meta_has_opens(s, txn, ino);
	if (open != 0)
		return open < 0 ? open : 0;
	int rc = mdb_get(txn, s->orphans, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0;
	rc = kvc_lmdb_errno(rc);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_del(txn, s->orphans, &k, NULL));
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, ino, &rec);
	return rc == 0 ? kvc_meta_inode_unlinked(s, txn, &rec) : (rc == -ENOENT ? 0 : rc);
}

struct settle_call {
	const uint64_t *inos;
	int count;
};

static int settle_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	struct settle_call *call = arg;
	int rc = 0;
	for (int i = 0; i < call->count && rc == 0; i++)
		rc = settle_orphan(s, txn, call->inos[i]);
	return rc;
}

/* Each of inos that is an orphan nobody has open goes to gc. If this
 * fails, the collector's periodic pass (settle_orphans) gets them. */
static int settle_files(struct kvc_meta_store *s, const uint64_t *inos, int count)
{
	struct settle_call call = {inos, count};
	return kvc_meta_group_run(s, settle_in, &call);
}

/* A plain OPEN records its session in memory (open_table.h): a read
 * transaction, no write. The session goes in first, so a removal deciding
 * after it sees it (the file becomes an orphan); one that decided before
 * left a doomed mark, and a snapshot older than the removing transaction
 * cannot tell whether it commits: a write transaction, which begins once
 * that one ended, reads the outcome. */
int kvc_meta_store_open_session(struct kvc_meta_store *s, uint64_t ino,
                                const uint8_t client[KVC_META_CLIENT_ID], struct kvc_attr *attr)
{
	uint64_t doomed;
	struct kvc_inode_record rec;
	MDB_txn *txn;
	int added = kvc_meta_open_table_add(s->mem_opens, ino, client, &doomed);
	if (added < 0)
		return added;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc == 0 && doomed && mdb_txn_id(txn) < doomed) {
		mdb_txn_abort(txn);
		rc = kvc_meta_begin(s, true, &txn);
	}
	if (rc == 0) {
		if (doomed)
			kvc_meta_open_table_undoom(s->mem_opens, ino, doomed);
		rc = kvc_meta_inode_get(s, txn, ino, &rec);
		mdb_txn_abort(txn);
	}
	/* No session for a directory, none made by a failed open (one the
	 * client had before stays); a removal that kept the file for this one
	 * meanwhile is settled. */
	if ((rc < 0 || !S_ISREG(rec.attr.mode)) && added &&
	    kvc_meta_open_table_remove(s->mem_opens, ino, client)) {
		int settled = settle_files(s, &ino, 1);
		rc = rc < 0 ? rc : settled;
	}
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

struct close_call {
	const uint64_t *inos;
	uint32_t count;
	const uint8_t *client;
};

static int close_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	struct close_call *call = arg;
	int rc = 0;
	for (uint32_t i = 0; i < call->count && rc == 0; i++)
		rc = kvc_meta_session_end(s, txn, call->inos[i], call->client);
	return rc;
}

int kvc_meta_session_end(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                         const uint8_t client[KVC_META_CLIENT_ID])
{
	int rc = session_del(s, txn, ino, client);
	return rc == 0 ? settle_orphan(s, txn, ino) : rc;
}

int kvc_meta_store_close_session(struct kvc_meta_store *s, uint64_t ino,
                                 const uint8_t client[KVC_META_CLIENT_ID])
{
	return kvc_meta_store_close_sessions(s, &ino, 1, client);
}

/* Whether ending client's sessions of inos needs a write: one is in the
 * store, or one of the files is an orphan (its last close settles it). */
static int close_needs_store(struct kvc_meta_store *s, const uint64_t *inos, uint32_t count,
                             const uint8_t client[KVC_META_CLIENT_ID])
{
	MDB_txn *txn = NULL;
	int rc = kvc_meta_begin(s, false, &txn);
	for (uint32_t i = 0; i < count && rc == 0; i++) {
		rc = stored_session(s, txn, inos[i], client);
		if (rc == 0)
			rc = kvc_meta_orphan_kind(s, txn, inos[i]) != 0;
	}
	if (txn)
		mdb_txn_abort(txn);
	return rc;
}

int kvc_meta_store_close_sessions(struct kvc_meta_store *s, const uint64_t *inos,
                                  uint32_t count, const uint8_t client[KVC_META_CLIENT_ID])
{
	int settle = 0;
	for (uint32_t i = 0; i < count; i++)
		settle |= kvc_meta_open_table_remove(s->mem_opens, inos[i], client);
	/* An orphan made while we held it is seen here even if its removal
	 * has not committed yet (settle); the write waits for that commit. */
	int rc = settle ? 1 : close_needs_store(s, inos, count, client);
	if (rc <= 0)
		return rc;
	struct close_call call = {inos, count, client};
	return kvc_meta_group_run(s, close_in, &call);
}

/* The client's record in `dropped`: 0, -ENOENT, -EIO. */
static int dropped_get(struct kvc_meta_store *s, MDB_txn *txn,
                       const uint8_t client[KVC_META_CLIENT_ID], struct kvc_meta_dropped *out)
{
	MDB_val k = {KVC_META_CLIENT_ID, (void *)client}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->dropped, &k, &v));
	if (rc == 0 && v.mv_size != sizeof(*out))
		rc = -EIO;
	if (rc == 0)
		memcpy(out, v.mv_data, sizeof(*out));
	return rc;
}

/* Record that client lost `files` sessions and grants now. */
static int dropped_put(struct kvc_meta_store *s, MDB_txn *txn,
                       const uint8_t client[KVC_META_CLIENT_ID], uint32_t files)
{
	struct kvc_meta_dropped d = {0};
	int rc = dropped_get(s, txn, client, &d);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	d.dropped_ns = kvc_meta_now_ns();
	d.drops++;
	d.files = files;
	MDB_val k = {KVC_META_CLIENT_ID, (void *)client}, v = {sizeof(d), &d};
	return kvc_lmdb_errno(mdb_put(txn, s->dropped, &k, &v, 0));
}

int kvc_meta_dropped_has(struct kvc_meta_store *s, MDB_txn *txn,
                         const uint8_t client[KVC_META_CLIENT_ID])
{
	struct kvc_meta_dropped d;
	int rc = dropped_get(s, txn, client, &d);
	return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

int kvc_meta_store_client_dropped(struct kvc_meta_store *s,
                                  const uint8_t client[KVC_META_CLIENT_ID],
                                  struct kvc_meta_dropped *out)
{
	MDB_txn *txn;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = dropped_get(s, txn, client, out);
	mdb_txn_abort(txn);
	return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

int kvc_meta_store_client_rejoin(struct kvc_meta_store *s,
                                 const uint8_t client[KVC_META_CLIENT_ID], uint32_t drops)
{
	MDB_txn *txn;
	struct kvc_meta_dropped d;
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = dropped_get(s, txn, client, &d);
	if (rc == 0 && d.drops != drops) {
		rc = -ESTALE;
	} else if (rc == 0) {
		MDB_val k = {KVC_META_CLIENT_ID, (void *)client};
		rc = kvc_lmdb_errno(mdb_del(txn, s->dropped, &k, NULL));
	} else if (rc == -ENOENT) {
		rc = 0;
	}
	return kvc_lmdb_finish(txn, rc);
}

int kvc_meta_store_drop_client(struct kvc_meta_store *s, const uint8_t client[KVC_META_CLIENT_ID],
                               uint64_t *reclaimed)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	uint64_t queued = 0;
	int dropped = 0;
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	/* The client's sessions, one by one from the start of its range in
	 * the index (each step changes the tables: look again each time). */
	for (;;) {
		uint8_t start[KVC_META_CLIENT_ID + 8];
		MDB_val k = client_key(start, client, 0), v;
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->clients, &cur));
		if (rc < 0)
			break;
		int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		bool mine = got == 0 && k.mv_size == sizeof(start) &&
		            memcmp(k.mv_data, client, KVC_META_CLIENT_ID) == 0;
		uint64_t ino = mine ? kvc_meta_from_be64((const uint8_t *)k.mv_data + KVC_META_CLIENT_ID) : 0;
		mdb_cursor_close(cur);
		if (got != 0 && got != MDB_NOTFOUND)
			rc = kvc_lmdb_errno(got);
		if (!mine || rc < 0)
			break;
		rc = session_del(s, txn, ino, client);
		if (rc == 0)
			rc = settle_orphan(s, txn, ino);
		if (rc < 0)
			break;
		dropped++;
	}
	/* Its sessions held in memory are counted in the drop's record here
	 * and end once that is committed (below): a failed transaction leaves
	 * them, so no file goes before the client can be told. */
	int held_count = kvc_meta_open_table_count_client(s->mem_opens, client);
	if (rc == 0)
		dropped += held_count;
	/* And its grants: the files it made and never entered are lost with
	 * it (fuse/early_creates.h), their chunks reclaimed. */
	int grants = rc == 0 ? kvc_meta_grants_reclaim(s, txn, client, &queued) : 0;
	if (grants < 0)
		rc = grants;
	else
		dropped += grants;
	if (rc == 0 && dropped > 0)
		rc = dropped_put(s, txn, client, (uint32_t)dropped);
	rc = kvc_lmdb_finish(txn, rc);
	uint64_t *held = NULL;
	int ended = rc == 0 ? kvc_meta_open_table_drop_client(s->mem_opens, client, &held) : 0;
	if (ended > 0 && settle_files(s, held, ended) < 0)
		kvc_log_warn("settling the files of a dropped client: will retry");
	free(held);
	if (reclaimed)
		*reclaimed = rc < 0 ? 0 : queued;
	return rc < 0 ? rc : dropped;
}

static int id_cmp(const void *a, const void *b)
{
	return memcmp(a, b, KVC_META_CLIENT_ID);
}

/* Add to out[0 .. count) the distinct clients (up to max in all) that
 * key table: keys of a client id and a u64, client first (`clients`,
 * `grants`), each once and not among out[0 .. sorted) (ascending: an
 * earlier call's). Returns the new count or -errno. */
static int distinct_clients(MDB_txn *txn, MDB_dbi table, uint8_t (*out)[KVC_META_CLIENT_ID],
                            int sorted, int count, int max)
{
	MDB_cursor *cur;
	MDB_val k, v;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, table, &cur));
	if (rc < 0)
		return rc;
	int got = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	while (got == 0 && count < max && k.mv_size == KVC_META_CLIENT_ID + 8) {
		if (!bsearch(k.mv_data, out, (size_t)sorted, KVC_META_CLIENT_ID, id_cmp))
			memcpy(out[count++], k.mv_data, KVC_META_CLIENT_ID);
		/* Jump past this client's keys: the largest key it can have. */
		uint8_t next[KVC_META_CLIENT_ID + 8];
		memcpy(next, k.mv_data, KVC_META_CLIENT_ID);
		memset(next + KVC_META_CLIENT_ID, 0xff, 8);
		k = (MDB_val){sizeof(next), next};
		got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (got == 0 && memcmp(k.mv_data, next, sizeof(next)) == 0)
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	return got != 0 && got != MDB_NOTFOUND ? kvc_lmdb_errno(got) : count;
}

int kvc_meta_store_session_clients(struct kvc_meta_store *s, uint8_t (*out)[KVC_META_CLIENT_ID],
                                   int max)
{
	MDB_txn *txn;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = distinct_clients(txn, s->clients, out, 0, 0, max); /* in key order */
	if (rc >= 0) /* and those holding grants only */
		rc = distinct_clients(txn, s->grants, out, rc, rc, max);
	mdb_txn_abort(txn);
	if (rc >= 0) /* and those holding sessions in memory only */
		rc = kvc_meta_open_table_clients(s->mem_opens, out, rc, max);
	return rc;
}

void kvc_meta_store_hold_opens(struct kvc_meta_store *s, uint64_t hold_ms)
{
	kvc_meta_open_table_hold(s->mem_opens, hold_ms);
}

bool kvc_meta_store_holding_opens(struct kvc_meta_store *s)
{
	return kvc_meta_open_table_holding(s->mem_opens);
}

/* Up to max orphans after `after`, in key order: their count or -errno. */
static int orphans_after(struct kvc_meta_store *s, MDB_txn *txn, uint64_t after, uint64_t *inos,
                         int max)
{
	MDB_cursor *cur;
	int count = 0;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->orphans, &cur));
	if (rc < 0)
		return rc;
	uint8_t start[8];
	kvc_meta_be64(start, after + 1);
	MDB_val k = {sizeof(start), start}, v;
	int got = after == UINT64_MAX ? MDB_NOTFOUND : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (got == 0 && count < max) {
		if (k.mv_size == 8)
			inos[count++] = kvc_meta_from_be64(k.mv_data);
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	return got != 0 && got != MDB_NOTFOUND ? kvc_lmdb_errno(got) : count;
}

int kvc_meta_store_settle_orphans(struct kvc_meta_store *s)
{
	enum { BATCH = 256 };
	uint64_t inos[BATCH], after = 0;
	int settled = 0, rc = 0;
	if (kvc_meta_open_table_holding(s->mem_opens))
		return -EAGAIN;
	for (int count = BATCH; count == BATCH && rc >= 0;) {
		MDB_txn *txn;
		rc = kvc_meta_begin(s, true, &txn);
		if (rc < 0)
			break;
		count = rc = orphans_after(s, txn, after, inos, BATCH);
		int done = 0;
		for (int i = 0; i < count && rc >= 0; i++) {
			int open = kvc_meta_has_opens(s, txn, inos[i]);
			rc = open != 0 ? (open < 0 ? open : 0) : settle_orphan(s, txn, inos[i]);
			done += open == 0;
		}
		rc = kvc_lmdb_finish(txn, rc < 0 ? rc : 0);
		if (rc == 0)
			settled += done;
		if (count > 0)
			after = inos[count - 1];
	}
	return rc < 0 ? rc : settled;
}
