/*
 * meta_grants: the inode numbers granted to clients (INO_GRANT) for files
 * they make ahead of kvc-meta (meta_adopt.h), in the table `grants`:
 *
 *   key   client id (16 bytes) + first number (u64 BE)
 *   value struct grant_head (count, entered), then one bit per number
 *         (LSB first): set once the number's file was entered (ADOPT)
 *
 * Invariants: a client's grants never overlap (numbers come from
 * next_ino, once); a number is entered at most once (its bit); a grant
 * whose every number was entered is deleted in the transaction that
 * enters the last one. So what a grant holds is exactly the numbers its
 * client may still enter. A record ADOPT refuses (its directory went, a
 * bad name: the sender gives the file up) is settled at once: its bit
 * set, the number queued in `gc` by the record's own layout. When the
 * client returns its grants or is declared gone, each number not entered
 * is reclaimed: queued in `gc`
 * with a layout over every chain (its file, if the client made one, was
 * placed by the client over chains kvc-meta never saw), so the collector
 * removes whatever chunks were written for it. A number not entered is
 * never an inode, a gc entry or an orphan; reclaiming checks that anyway
 * and skips it if so.
 *
 * Came without a format change: older stores get the table empty, and
 * numbers an older kvc-meta granted are not entered any more (-ESTALE).
 */
#include <errno.h>
#include <string.h>

#include "core/layout.h"
#include "core/lmdb_txn.h"
#include "meta/meta_adopt.h"
#include "meta/meta_store_internal.h"

struct grant_head {
	uint32_t count;   /* numbers, from the key's first */
	uint32_t entered; /* bits set */
};

/* One grant as read (bits of count numbers). */
struct grant {
	uint64_t first;
	struct grant_head head;
	uint8_t bits[KVC_WIRE_MAX_GRANT / 8];
};

#define KEY_LEN (KVC_META_CLIENT_ID + 8)

static MDB_val grant_key(uint8_t *buf, const uint8_t *client, uint64_t first)
{
	memcpy(buf, client, KVC_META_CLIENT_ID);
	kvc_meta_be64(buf + KVC_META_CLIENT_ID, first);
	return (MDB_val){KEY_LEN, buf};
}

static uint32_t bits_len(uint32_t count)
{
	return (count + 7) / 8;
}

static bool bit(const struct grant *g, uint64_t ino)
{
	uint64_t i = ino - g->first;
	return g->bits[i / 8] & (1u << (i % 8));
}

/* Decode a record of client's (k, v) into g: 0, 1 when it is another
 * client's (or not a grant key), -EIO when malformed. */
static int decode(const uint8_t *client, MDB_val k, MDB_val v, struct grant *g)
{
	if (k.mv_size != KEY_LEN || memcmp(k.mv_data, client, KVC_META_CLIENT_ID) != 0)
		return 1;
	if (v.mv_size < sizeof(g->head))
		return -EIO;
	memcpy(&g->head, v.mv_data, sizeof(g->head));
	uint32_t n = g->head.count;
	if (n == 0 || n > KVC_WIRE_MAX_GRANT || v.mv_size != sizeof(g->head) + bits_len(n))
		return -EIO;
	g->first = kvc_meta_from_be64((const uint8_t *)k.mv_data + KVC_META_CLIENT_ID);
	memcpy(g->bits, (const uint8_t *)v.mv_data + sizeof(g->head), bits_len(n));
	return 0;
}

/* client's grant holding ino: 0 with it in g, -ESTALE when none. */
static int grant_find(struct kvc_meta_store *s, MDB_txn *txn, const uint8_t *client,
                      uint64_t ino, struct grant *g)
{
	uint8_t buf[KEY_LEN];
	MDB_val k = grant_key(buf, client, ino), v;
	MDB_cursor *cur;
	int rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->grants, &cur));
	if (rc < 0)
		return rc;
	/* The last key at or before (client, ino). */
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	if (got == 0 && !(k.mv_size == KEY_LEN && memcmp(k.mv_data, buf, KEY_LEN) == 0))
		got = mdb_cursor_get(cur, &k, &v, MDB_PREV);
	else if (got == MDB_NOTFOUND)
		got = mdb_cursor_get(cur, &k, &v, MDB_LAST);
	if (got == 0) {
		rc = decode(client, k, v, g);
		if (rc == 0 && (ino < g->first || ino - g->first >= g->head.count))
			rc = 1;
	} else {
		rc = got == MDB_NOTFOUND ? 1 : kvc_lmdb_errno(got);
	}
	mdb_cursor_close(cur);
	return rc == 1 ? -ESTALE : rc;
}

/* Write g back, or delete it once every number was entered (or none is
 * left). */
static int grant_store(struct kvc_meta_store *s, MDB_txn *txn, const uint8_t *client,
                       const struct grant *g)
{
	uint8_t buf[KEY_LEN], value[sizeof(g->head) + sizeof(g->bits)];
	MDB_val k = grant_key(buf, client, g->first);
	MDB_val v = {sizeof(g->head) + bits_len(g->head.count), value};
	memcpy(value, &g->head, sizeof(g->head));
	memcpy(value + sizeof(g->head), g->bits, bits_len(g->head.count));
	return kvc_lmdb_errno(g->head.entered >= g->head.count ? mdb_del(txn, s->grants, &k, NULL)
	                                                       : mdb_put(txn, s->grants, &k, &v, 0));
}

/* How many grants client holds (up to KVC_META_MAX_GRANTS), or -errno. */
static int grants_held(struct kvc_meta_store *s, MDB_txn *txn, const uint8_t *client)
{
	uint8_t buf[KEY_LEN];
	MDB_val k = grant_key(buf, client, 0), v;
	MDB_cursor *cur;
	int held = kvc_lmdb_errno(mdb_cursor_open(txn, s->grants, &cur));
	if (held < 0)
		return held;
	int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (got == 0 && held < KVC_META_MAX_GRANTS && k.mv_size == KEY_LEN &&
	       memcmp(k.mv_data, client, KVC_META_CLIENT_ID) == 0) {
		held++;
		got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	return got != 0 && got != MDB_NOTFOUND ? kvc_lmdb_errno(got) : held;
}

int kvc_meta_grant_put(struct kvc_meta_store *s, MDB_txn *txn,
                       const uint8_t client[KVC_META_CLIENT_ID], uint64_t first, uint32_t count)
{
	struct grant g = {.first = first, .head = {.count = count}};
	int rc = count == 0 || count > KVC_WIRE_MAX_GRANT ? -EINVAL : 0;
	if (rc == 0) {
		int dropped = kvc_meta_dropped_has(s, txn, client);
		rc = dropped > 0 ? -ESTALE : dropped;
	}
	if (rc == 0) {
		int held = grants_held(s, txn, client);
		rc = held >= KVC_META_MAX_GRANTS ? -EBUSY : held < 0 ? held : 0;
	}
	if (rc == 0)
		rc = grant_store(s, txn, client, &g);
	return rc;
}

int kvc_meta_grant_check(struct kvc_meta_store *s, MDB_txn *txn,
                         const uint8_t client[KVC_META_CLIENT_ID], uint64_t ino)
{
	struct grant g = {0};
	int rc = grant_find(s, txn, client, ino, &g);
	return rc == 0 && bit(&g, ino) ? -ESTALE : rc;
}

/* Number ino of g is done with (entered, or given up): its bit set, g
 * written back (deleted once every number is). */
static int settle(struct kvc_meta_store *s, MDB_txn *txn, const uint8_t *client,
                  struct grant *g, uint64_t ino)
{
	uint64_t i = ino - g->first;
	g->bits[i / 8] |= (uint8_t)(1u << (i % 8));
	g->head.entered++;
	return grant_store(s, txn, client, g);
}

int kvc_meta_grant_use(struct kvc_meta_store *s, MDB_txn *txn,
                       const uint8_t client[KVC_META_CLIENT_ID], uint64_t ino)
{
	struct grant g = {0};
	int rc = grant_find(s, txn, client, ino, &g);
	if (rc == 0 && bit(&g, ino))
		rc = -ESTALE;
	return rc == 0 ? settle(s, txn, client, &g, ino) : rc;
}

int kvc_meta_ino_known(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_dbi tables[3] = {s->inodes, s->gc, s->orphans};
	for (int i = 0; i < 3; i++) {
		MDB_val k = {8, key}, v;
		int got = mdb_get(txn, tables[i], &k, &v);
		if (got != MDB_NOTFOUND)
			return got == 0 ? 1 : kvc_lmdb_errno(got);
	}
	return 0;
}

/* The layout that reaches every chain kvc-meta places over now: what a
 * number's chunks are removed by when its file's own layout is unknown. */
static struct kvc_layout every_chain(struct kvc_meta_store *s)
{
	struct kvc_layout all = s->default_layout;
	all.chain_count = __atomic_load_n(&s->default_layout.chain_count, __ATOMIC_RELAXED);
	all.stripe = all.chain_count;
	all.first_chain = 0;
	return all;
}

/* Queue number ino, never entered, for the collector with layout: 1 when
 * queued, 0 when it is known otherwise (never, by the invariant), or
 * -errno. */
static int queue(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                 const struct kvc_layout *layout)
{
	int rc = kvc_meta_ino_known(s, txn, ino);
	if (rc == 0) {
		uint8_t key[8];
		kvc_meta_be64(key, ino);
		MDB_val k = {8, key}, v = {sizeof(*layout), (void *)layout};
		rc = kvc_lmdb_errno(mdb_put(txn, s->gc, &k, &v, 0));
		rc = rc < 0 ? rc : 1;
	} else if (rc > 0) {
		rc = 0;
	}
	return rc;
}

/* Queue each number of g not entered in gc (layout over every chain);
 * count them in *queued. */
static int reclaim_one(struct kvc_meta_store *s, MDB_txn *txn, const struct grant *g,
                       uint64_t *queued)
{
	struct kvc_layout all = every_chain(s);
	int rc = 0;
	for (uint64_t ino = g->first; rc >= 0 && ino < g->first + g->head.count; ino++) {
		rc = bit(g, ino) ? 0 : queue(s, txn, ino, &all);
		*queued += rc > 0;
	}
	return rc < 0 ? rc : 0;
}

int kvc_meta_grant_refused(struct kvc_meta_store *s, MDB_txn *txn,
                           const uint8_t client[KVC_META_CLIENT_ID],
                           const struct kvc_attr *attr)
{
	struct grant g = {0};
	int rc = grant_find(s, txn, client, attr->ino, &g);
	/* Not this client's to give up (-ESTALE), or settled already: 0. */
	if (rc == 0 && !bit(&g, attr->ino)) {
		struct kvc_layout layout =
			kvc_layout_check(&attr->layout) == 0 ? attr->layout : every_chain(s);
		rc = queue(s, txn, attr->ino, &layout);
		if (rc >= 0)
			rc = settle(s, txn, client, &g, attr->ino);
	}
	return rc == -ESTALE ? 0 : rc;
}

int kvc_meta_grants_reclaim(struct kvc_meta_store *s, MDB_txn *txn,
                            const uint8_t client[KVC_META_CLIENT_ID], uint64_t *queued)
{
	int grants = 0, rc = 0;
	*queued = 0;
	/* One grant at a time from the start of the client's range: each
	 * step deletes it (look again each time). */
	while (rc == 0) {
		uint8_t buf[KEY_LEN];
		MDB_val k = grant_key(buf, client, 0), v;
		MDB_cursor *cur;
		struct grant g = {0};
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->grants, &cur));
		if (rc < 0)
			break;
		int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		rc = got == 0 ? decode(client, k, v, &g) : got == MDB_NOTFOUND ? 1 : kvc_lmdb_errno(got);
		mdb_cursor_close(cur);
		if (rc == 0)
			rc = reclaim_one(s, txn, &g, queued);
		if (rc == 0) {
			k = grant_key(buf, client, g.first);
			rc = kvc_lmdb_errno(mdb_del(txn, s->grants, &k, NULL));
			grants++;
		}
	}
	return rc < 0 ? rc : grants;
}

/* Drop the run [first, first + count), which must end one of client's
 * grants and hold no entered number; a run in no grant of the client's
 * (reclaimed already: it was dropped before it heard) is nothing to do. */
static int trim(struct kvc_meta_store *s, MDB_txn *txn, const uint8_t *client, uint64_t first,
                uint32_t count)
{
	struct grant g = {0};
	int rc = grant_find(s, txn, client, first, &g);
	uint64_t end = rc == 0 ? g.first + g.head.count : 0;
	if (rc == 0 && (count > end - first || first + count != end))
		rc = -EINVAL;
	for (uint64_t ino = first; rc == 0 && ino < end; ino++)
		rc = bit(&g, ino) ? -EINVAL : 0;
	if (rc == 0) {
		g.head.count -= count; /* none of them entered: the rest's bits stay */
		rc = grant_store(s, txn, client, &g); /* (deleted when none is left) */
	}
	return rc == -ESTALE ? 0 : rc;
}

int kvc_meta_store_grants_return(struct kvc_meta_store *s,
                                 const uint8_t client[KVC_META_CLIENT_ID],
                                 const struct kvc_msg_ino_range *ranges, uint32_t n,
                                 uint64_t *reclaimed)
{
	MDB_txn *txn = NULL;
	*reclaimed = 0;
	for (uint32_t i = 0; i < n; i++)
		if (ranges[i].reserved || ranges[i].count > KVC_WIRE_MAX_GRANT)
			return -EINVAL;
	int rc = kvc_meta_begin(s, true, &txn);
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		if (ranges[i].count > 0)
			rc = trim(s, txn, client, ranges[i].first, ranges[i].count);
	if (rc == 0)
		rc = kvc_meta_grants_reclaim(s, txn, client, reclaimed);
	if (rc > 0)
		rc = 0;
	if (txn)
		rc = kvc_lmdb_finish(txn, rc);
	return rc;
}
