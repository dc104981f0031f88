/*
 * etcd: the etcd v3 client of the cluster manager (kvc-mgmt). It talks to
 * etcd's JSON gRPC gateway (etcd 3.4 serves it under /v3/; /v3beta/ is an
 * alias there and /v3alpha/ is gone) over HTTP with libcurl; keys and
 * values travel base64-encoded, 64-bit numbers as decimal strings.
 *
 * Owns: the endpoint list of one handle (immutable after open) and the
 * index of the endpoint that answered last (an atomic, where every call
 * starts). Nothing else: every call builds its own curl easy handle
 * (one connection per call, closed when it returns), so calls from any
 * number of threads on one handle need no lock; kvc_etcd_close must not
 * race a call still running on the handle.
 *
 * Endpoints and time: a call tries the endpoints in order, starting at
 * the last one that answered. A connection failure, a reset, a timeout
 * or etcd's UNAVAILABLE (a member without a leader, mid-election) moves
 * it to the next one; while some member answered UNAVAILABLE it goes
 * round again after a short pause. The handle's timeout bounds the whole
 * call, all endpoints together, so no call but kvc_etcd_watch runs longer:
 * an attempt gets the time left divided by the endpoints not yet tried in
 * the round (a hung member cannot take it all), a connect timeout / the
 * number of endpoints (at least 200 ms). Choose the timeout as the number
 * of endpoints times the slowest answer a live member may take. A write that
 * timed out after it was sent may still have been applied; a retried
 * compare-and-swap then fails its compare, and the caller re-reads.
 *
 * Errors (every call): -ECONNREFUSED no endpoint accepted a connection;
 * -ETIMEDOUT the timeout ran out; -ECONNRESET a connection broke;
 * -EAGAIN the members answering had no leader until the timeout;
 * -EPROTO a body that is not what the gateway sends (bad JSON, bad
 * base64, a missing field, a body over KVC_ETCD_MAX_BODY); -ENOMEM;
 * -EINVAL a bad argument or a request etcd refused as invalid; -ENOSPC
 * etcd's space quota; -EACCES authentication needed; -EIO anything else.
 *
 * Results: a call that returns kvs fills a struct kvc_etcd_kvs the caller
 * owns and frees with kvc_etcd_kvs_free (also after an error: it is then
 * empty). Keys are strings (NUL-terminated; the length is given too),
 * values any bytes.
 */
#ifndef KVC_MGMT_ETCD_H
#define KVC_MGMT_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define KVC_ETCD_MAX_ENDPOINTS 16
/* The largest response body (or watch response) accepted. */
#define KVC_ETCD_MAX_BODY (64u << 20)

struct kvc_etcd;

struct kvc_etcd_kv {
	char *key; /* NUL-terminated */
	size_t key_len;
	uint8_t *value; /* NUL-terminated as well, for convenience */
	size_t value_len;
	int64_t create_revision;
	int64_t mod_revision;
	int64_t version;
	int64_t lease; /* 0: none */
};

struct kvc_etcd_kvs {
	struct kvc_etcd_kv *kvs; /* sorted by key */
	size_t count;
	int64_t revision; /* the response header's store revision */
};

void kvc_etcd_kvs_free(struct kvc_etcd_kvs *kvs);

/* endpoints: "http://host:port[,http://host:port...]" (http or https,
 * at most KVC_ETCD_MAX_ENDPOINTS); timeout_ms > 0 bounds each call.
 * Connects to nothing yet. -EINVAL, -ENOMEM. */
int kvc_etcd_open(const char *endpoints, int timeout_ms, struct kvc_etcd **out);
void kvc_etcd_close(struct kvc_etcd *e);

/* One key: returns 1 and fills *out, or 0 (absent; out->revision set). */
int kvc_etcd_get(struct kvc_etcd *e, const char *key, struct kvc_etcd_kvs *out);
/* Every key starting with prefix ("" = all keys), sorted; returns the count. */
int kvc_etcd_get_prefix(struct kvc_etcd *e, const char *prefix, struct kvc_etcd_kvs *out);

/* lease 0: none (-ENOENT when the lease does not exist). *revision
 * (may be NULL): the revision of the write. Returns 0. */
int kvc_etcd_put(struct kvc_etcd *e, const char *key, const void *value, size_t len,
	int64_t lease, int64_t *revision);
/* Return the number of keys deleted. */
int kvc_etcd_delete(struct kvc_etcd *e, const char *key, int64_t *revision);
int kvc_etcd_delete_prefix(struct kvc_etcd *e, const char *prefix, int64_t *revision);

/* Compare-and-swap on a key's mod_revision: expect_mod 0 means "the key
 * is absent". Returns 1 (written), 0 (the compare failed, nothing written)
 * or -errno. *revision (may be NULL): the store revision after the txn. */
int kvc_etcd_cas_put(struct kvc_etcd *e, const char *key, const void *value, size_t len,
	int64_t lease, int64_t expect_mod, int64_t *revision);
int kvc_etcd_cas_delete(struct kvc_etcd *e, const char *key, int64_t expect_mod,
	int64_t *revision);

/* Election step: put key = value with lease if the key is absent (returns
 * 1), else read it (returns 0, *current holds the key: who leads). */
int kvc_etcd_put_if_absent(struct kvc_etcd *e, const char *key, const void *value,
	size_t len, int64_t lease, struct kvc_etcd_kvs *current);

/* A general transaction: if every compare holds, run the success ops, else
 * the failure ops. */
enum kvc_etcd_cmp_target {
	KVC_ETCD_CMP_VERSION, KVC_ETCD_CMP_CREATE, KVC_ETCD_CMP_MOD,
	KVC_ETCD_CMP_VALUE, KVC_ETCD_CMP_LEASE, KVC_ETCD_CMP_TARGETS
};
enum kvc_etcd_cmp_result {
	KVC_ETCD_EQUAL, KVC_ETCD_GREATER, KVC_ETCD_LESS, KVC_ETCD_NOT_EQUAL, KVC_ETCD_RESULTS
};
struct kvc_etcd_cmp {
	const char *key;
	enum kvc_etcd_cmp_target target;
	enum kvc_etcd_cmp_result result;
	int64_t number; /* version, revision or lease; an absent key has all 0 */
	const void *value; /* KVC_ETCD_CMP_VALUE */
	size_t value_len;
};
enum kvc_etcd_op_kind { KVC_ETCD_OP_PUT, KVC_ETCD_OP_GET, KVC_ETCD_OP_DELETE, KVC_ETCD_OPS };
struct kvc_etcd_op {
	enum kvc_etcd_op_kind kind;
	const char *key;
	int prefix; /* GET and DELETE: every key under key */
	const void *value; /* PUT */
	size_t value_len;
	int64_t lease; /* PUT, 0: none */
};
struct kvc_etcd_txn {
	const struct kvc_etcd_cmp *cmp;
	size_t n_cmp;
	const struct kvc_etcd_op *success;
	size_t n_success;
	const struct kvc_etcd_op *failure;
	size_t n_failure;
};
#define KVC_ETCD_TXN_MAX_OPS 64 /* compares, success ops, failure ops each */
/* Returns 1 (the compares held), 0 (they did not) or -errno. out (may be
 * NULL): the header revision and the keys every GET of the branch that
 * ran returned, in op order. */
int kvc_etcd_txn(struct kvc_etcd *e, const struct kvc_etcd_txn *t, struct kvc_etcd_kvs *out);

/* Compact the history up to rev: watches from before it get -ERANGE. */
int kvc_etcd_compact(struct kvc_etcd *e, int64_t rev);

/* Leases. grant: ttl in seconds, *id the new lease. keepalive: one
 * refresh; *ttl (may be NULL) the seconds left; -ENOENT when the lease
 * has expired or never was. revoke: deletes the lease's keys at once;
 * -ENOENT when there is no such lease. */
int kvc_etcd_lease_grant(struct kvc_etcd *e, int64_t ttl, int64_t *id);
int kvc_etcd_lease_keepalive(struct kvc_etcd *e, int64_t id, int64_t *ttl);
int kvc_etcd_lease_revoke(struct kvc_etcd *e, int64_t id);

/*
 * Watch: stream the changes of a key (or of every key under a prefix) from
 * start_revision (0: from now on) into fn, one call per event, in
 * revision order. Blocks until:
 *   - fn returns non-zero: kvc_etcd_watch returns 0 (fn > 0) or fn's value
 *     (fn < 0);
 *   - stop_fd (an eventfd or the read end of a pipe, -1 for none) becomes
 *     readable: returns 0 within a poll round trip. The fd is only polled,
 *     never read: its owner resets it;
 *   - the revisions wanted were compacted away: returns -ERANGE with
 *     compact_revision set (the oldest revision still kept). The caller
 *     re-reads the state (kvc_etcd_get_prefix) and watches again from that
 *     read's revision + 1;
 *   - no endpoint serves the watch: the errors of the calls above. A
 *     stream that breaks (its member died) is resumed at next_revision on
 *     the next endpoint without fn noticing; the call fails once every
 *     endpoint in turn failed without a stream being set up.
 * A live stream is checked for a dead or stalled member: after the
 * handle's timeout without a byte, a probe (POST /v3/maintenance/status to
 * the same member) must answer within the timeout, else the stream is
 * given up and resumed elsewhere (-ETIMEDOUT if no other endpoint takes
 * it). A killed member is noticed at once (the connection resets); a
 * member that loses its leader ends the stream (Grpc-Metadata-Hasleader).
 * next_revision (out, also on errors): the revision to watch from to miss
 * nothing, i.e. the last revision delivered or reported + 1.
 * The event's kv (and its key and value) lives only during fn; a DELETE
 * carries the key and its mod_revision (the delete's), no value.
 */
enum kvc_etcd_event_type { KVC_ETCD_EVENT_PUT, KVC_ETCD_EVENT_DELETE, KVC_ETCD_EVENT_TYPES };
struct kvc_etcd_event {
	enum kvc_etcd_event_type type;
	struct kvc_etcd_kv kv;
};
typedef int (*kvc_etcd_watch_fn)(void *arg, const struct kvc_etcd_event *ev);
struct kvc_etcd_watch {
	const char *key;
	int prefix;
	int64_t start_revision;
	int stop_fd;
	kvc_etcd_watch_fn fn;
	void *arg;
	int64_t next_revision; /* out */
	int64_t compact_revision; /* out, with -ERANGE */
};
int kvc_etcd_watch(struct kvc_etcd *e, struct kvc_etcd_watch *w);

#endif
