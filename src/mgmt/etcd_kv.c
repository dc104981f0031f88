/*
 * etcd_kv: the unary calls of the etcd client (etcd.h): range, put,
 * delete-range, txn (and the compare-and-swap and election steps built on
 * it) and the lease calls. Each builds the gateway's JSON request
 * (etcdserverpb messages in proto3 JSON: bytes base64, int64 as numbers),
 * sends it with kvc_etcd_call and decodes the answer strictly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/etcd_internal.h"

/* The end of the range of every key starting with prefix: the prefix with
 * its last byte below 0xff incremented and the rest cut; "\0" (to the end
 * of the keyspace) when there is none. */
static json_t *prefix_end(const char *prefix, size_t len)
{
	char *end = malloc(len + 1);
	json_t *j = NULL;

	if (!end)
		return NULL;
	memcpy(end, prefix, len);
	while (len && (unsigned char)end[len - 1] == 0xff)
		len--;
	if (len) {
		end[len - 1]++;
		j = kvc_etcd_b64_json(end, len);
	} else {
		j = kvc_etcd_b64_json("", 1);
	}
	free(end);
	return j;
}

/* {"key": ..., ["range_end": ...]}; the empty prefix is every key. */
json_t *kvc_etcd_key_range(const char *key, bool prefix)
{
	size_t len = strlen(key);
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (json_object_set_new(o, "key", len || !prefix ? kvc_etcd_b64_json(key, len)
							: kvc_etcd_b64_json("", 1)) ||
	    (prefix && json_object_set_new(o, "range_end", prefix_end(key, len)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *put_request(const char *key, const void *value, size_t len, int64_t lease)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (json_object_set_new(o, "key", kvc_etcd_b64_json(key, strlen(key))) ||
	    json_object_set_new(o, "value", kvc_etcd_b64_json(value, len)) ||
	    (lease && json_object_set_new(o, "lease", json_integer(lease)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int range(struct kvc_etcd *e, const char *key, bool prefix, struct kvc_etcd_kvs *out)
{
	json_t *req = kvc_etcd_key_range(key, prefix), *resp = NULL;
	struct kvc_etcd_kvs kvs = { 0 };
	int ret;

	memset(out, 0, sizeof(*out));
	if (!req)
		return -ENOMEM;
	ret = kvc_etcd_call(e, "/v3/kv/range", req, &resp);
	if (!ret)
		ret = kvc_etcd_header_revision(resp, &kvs.revision);
	if (!ret)
		ret = kvc_etcd_kvs_append(&kvs, resp);
	if (!ret && !prefix && kvs.count > 1)
		ret = -EPROTO;
	json_decref(req);
	json_decref(resp);
	if (ret) {
		kvc_etcd_kvs_free(&kvs);
		return ret;
	}
	*out = kvs;
	return (int)kvs.count;
}

int kvc_etcd_get(struct kvc_etcd *e, const char *key, struct kvc_etcd_kvs *out)
{
	return range(e, key, false, out);
}

int kvc_etcd_get_prefix(struct kvc_etcd *e, const char *prefix, struct kvc_etcd_kvs *out)
{
	return range(e, prefix, true, out);
}

int kvc_etcd_put(struct kvc_etcd *e, const char *key, const void *value, size_t len,
	int64_t lease, int64_t *revision)
{
	json_t *req = put_request(key, value, len, lease), *resp = NULL;
	int64_t rev = 0;
	int ret;

	if (!req)
		return -ENOMEM;
	ret = kvc_etcd_call(e, "/v3/kv/put", req, &resp);
	if (!ret)
		ret = kvc_etcd_header_revision(resp, &rev);
	if (!ret && revision)
		*revision = rev;
	json_decref(req);
	json_decref(resp);
	return ret;
}

static int delete_range(struct kvc_etcd *e, const char *key, bool prefix, int64_t *revision)
{
	json_t *req = kvc_etcd_key_range(key, prefix), *resp = NULL;
	int64_t rev = 0, deleted = 0;
	int ret;

	if (!req)
		return -ENOMEM;
	ret = kvc_etcd_call(e, "/v3/kv/deleterange", req, &resp);
	if (!ret)
		ret = kvc_etcd_header_revision(resp, &rev);
	if (!ret)
		ret = kvc_etcd_json_int64(resp, "deleted", &deleted);
	if (!ret && (deleted < 0 || deleted > INT32_MAX))
		ret = -EPROTO;
	if (!ret && revision)
		*revision = rev;
	json_decref(req);
	json_decref(resp);
	return ret ? ret : (int)deleted;
}

int kvc_etcd_delete(struct kvc_etcd *e, const char *key, int64_t *revision)
{
	return delete_range(e, key, false, revision);
}

int kvc_etcd_delete_prefix(struct kvc_etcd *e, const char *prefix, int64_t *revision)
{
	return delete_range(e, prefix, true, revision);
}

/* Transactions. */

static const struct {
	const char *target; /* Compare.target */
	const char *field; /* the Compare field that holds the operand */
} cmp_targets[KVC_ETCD_CMP_TARGETS] = {
	[KVC_ETCD_CMP_VERSION] = { "VERSION", "version" },
	[KVC_ETCD_CMP_CREATE] = { "CREATE", "create_revision" },
	[KVC_ETCD_CMP_MOD] = { "MOD", "mod_revision" },
	[KVC_ETCD_CMP_VALUE] = { "VALUE", "value" },
	[KVC_ETCD_CMP_LEASE] = { "LEASE", "lease" },
};

static const char *const cmp_results[KVC_ETCD_RESULTS] = {
	[KVC_ETCD_EQUAL] = "EQUAL",
	[KVC_ETCD_GREATER] = "GREATER",
	[KVC_ETCD_LESS] = "LESS",
	[KVC_ETCD_NOT_EQUAL] = "NOT_EQUAL",
};

static json_t *compare_json(const struct kvc_etcd_cmp *c)
{
	json_t *o;

	if (!c->key || (unsigned)c->target >= KVC_ETCD_CMP_TARGETS ||
	    (unsigned)c->result >= KVC_ETCD_RESULTS)
		return NULL;
	o = json_pack("{s:o, s:s, s:s}", "key", kvc_etcd_b64_json(c->key, strlen(c->key)),
		"target", cmp_targets[c->target].target, "result", cmp_results[c->result]);
	if (o && json_object_set_new(o, cmp_targets[c->target].field,
			c->target == KVC_ETCD_CMP_VALUE ? kvc_etcd_b64_json(c->value, c->value_len)
							: json_integer(c->number))) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

/* Each op kind: its RequestOp field and how its request is built. */
static json_t *op_put(const struct kvc_etcd_op *op)
{
	return put_request(op->key, op->value, op->value_len, op->lease);
}

static json_t *op_range(const struct kvc_etcd_op *op)
{
	return kvc_etcd_key_range(op->key, op->prefix);
}

static const struct {
	const char *field;
	json_t *(*build)(const struct kvc_etcd_op *op);
} op_kinds[KVC_ETCD_OPS] = {
	[KVC_ETCD_OP_PUT] = { "request_put", op_put },
	[KVC_ETCD_OP_GET] = { "request_range", op_range },
	[KVC_ETCD_OP_DELETE] = { "request_delete_range", op_range },
};

static json_t *ops_json(const struct kvc_etcd_op *ops, size_t n)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < n; i++) {
		const struct kvc_etcd_op *op = &ops[i];
		json_t *req;

		if ((unsigned)op->kind >= KVC_ETCD_OPS || !op->key ||
		    !(req = op_kinds[op->kind].build(op)) ||
		    json_array_append_new(arr, json_pack("{s:o}", op_kinds[op->kind].field, req))) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return arr;
}

static json_t *txn_json(const struct kvc_etcd_txn *t)
{
	json_t *cmp = json_array(), *o = NULL;

	for (size_t i = 0; cmp && i < t->n_cmp; i++) {
		if (json_array_append_new(cmp, compare_json(&t->cmp[i]))) {
			json_decref(cmp);
			cmp = NULL;
		}
	}
	if (cmp)
		o = json_pack("{s:o, s:o, s:o}", "compare", cmp, "success",
			ops_json(t->success, t->n_success), "failure",
			ops_json(t->failure, t->n_failure));
	return o;
}

int kvc_etcd_txn(struct kvc_etcd *e, const struct kvc_etcd_txn *t, struct kvc_etcd_kvs *out)
{
	struct kvc_etcd_kvs kvs = { 0 };
	json_t *req = NULL, *resp = NULL, *responses;
	int ret = 0, succeeded = 0;

	if (out)
		memset(out, 0, sizeof(*out));
	if (t->n_cmp > KVC_ETCD_TXN_MAX_OPS || t->n_success > KVC_ETCD_TXN_MAX_OPS ||
	    t->n_failure > KVC_ETCD_TXN_MAX_OPS)
		return -EINVAL;
	req = txn_json(t);
	if (!req)
		return -EINVAL; /* a bad enum or key; or out of memory */
	ret = kvc_etcd_call(e, "/v3/kv/txn", req, &resp);
	if (ret)
		goto out;
	succeeded = json_is_true(json_object_get(resp, "succeeded"));
	ret = kvc_etcd_header_revision(resp, &kvs.revision);
	responses = json_object_get(resp, "responses");
	if (!ret && responses && !json_is_array(responses))
		ret = -EPROTO;
	for (size_t i = 0; !ret && i < json_array_size(responses); i++) {
		const json_t *r = json_array_get(responses, i), *range;

		if (!json_is_object(r)) {
			ret = -EPROTO;
			break;
		}
		range = json_object_get(r, "response_range");
		if (range && out)
			ret = kvc_etcd_kvs_append(&kvs, range);
	}
out:
	json_decref(req);
	json_decref(resp);
	if (ret || !out)
		kvc_etcd_kvs_free(&kvs);
	else
		*out = kvs;
	return ret ? ret : succeeded;
}

static int cas(struct kvc_etcd *e, const struct kvc_etcd_op *op, int64_t expect_mod,
	int64_t *revision)
{
	struct kvc_etcd_cmp cmp = { .key = op->key, .target = KVC_ETCD_CMP_MOD,
		.result = KVC_ETCD_EQUAL, .number = expect_mod };
	struct kvc_etcd_txn t = { .cmp = &cmp, .n_cmp = 1, .success = op, .n_success = 1 };
	struct kvc_etcd_kvs kvs;
	int ret;

	if (expect_mod < 0)
		return -EINVAL;
	ret = kvc_etcd_txn(e, &t, &kvs);
	if (ret >= 0 && revision)
		*revision = kvs.revision;
	kvc_etcd_kvs_free(&kvs);
	return ret;
}

int kvc_etcd_cas_put(struct kvc_etcd *e, const char *key, const void *value, size_t len,
	int64_t lease, int64_t expect_mod, int64_t *revision)
{
	struct kvc_etcd_op op = { .kind = KVC_ETCD_OP_PUT, .key = key, .value = value,
		.value_len = len, .lease = lease };

	return cas(e, &op, expect_mod, revision);
}

int kvc_etcd_cas_delete(struct kvc_etcd *e, const char *key, int64_t expect_mod,
	int64_t *revision)
{
	struct kvc_etcd_op op = { .kind = KVC_ETCD_OP_DELETE, .key = key };

	return cas(e, &op, expect_mod, revision);
}

int kvc_etcd_put_if_absent(struct kvc_etcd *e, const char *key, const void *value,
	size_t len, int64_t lease, struct kvc_etcd_kvs *current)
{
	struct kvc_etcd_cmp cmp = { .key = key, .target = KVC_ETCD_CMP_CREATE,
		.result = KVC_ETCD_EQUAL, .number = 0 };
	struct kvc_etcd_op put = { .kind = KVC_ETCD_OP_PUT, .key = key, .value = value,
		.value_len = len, .lease = lease };
	struct kvc_etcd_op get = { .kind = KVC_ETCD_OP_GET, .key = key };
	struct kvc_etcd_txn t = { .cmp = &cmp, .n_cmp = 1, .success = &put, .n_success = 1,
		.failure = &get, .n_failure = 1 };

	return kvc_etcd_txn(e, &t, current);
}

int kvc_etcd_compact(struct kvc_etcd *e, int64_t rev)
{
	json_t *req = json_pack("{s:I}", "revision", (json_int_t)rev), *resp = NULL;
	int ret;

	if (!req)
		return -ENOMEM;
	ret = kvc_etcd_call(e, "/v3/kv/compaction", req, &resp);
	json_decref(req);
	json_decref(resp);
	return ret;
}

/* Leases. */

int kvc_etcd_lease_grant(struct kvc_etcd *e, int64_t ttl, int64_t *id)
{
	json_t *req, *resp = NULL;
	int64_t lease = 0;
	int ret;

	if (ttl <= 0)
		return -EINVAL;
	req = json_pack("{s:I}", "TTL", (json_int_t)ttl);
	if (!req)
		return -ENOMEM;
	ret = kvc_etcd_call(e, "/v3/lease/grant", req, &resp);
	if (!ret)
		ret = kvc_etcd_json_int64(resp, "ID", &lease);
	if (!ret && json_object_get(resp, "error"))
		ret = -EIO; /* LeaseGrantResponse.error: etcd refused */
	if (!ret && lease == 0)
		ret = -EPROTO;
	if (!ret)
		*id = lease;
	json_decref(req);
	json_decref(resp);
	return ret;
}

int kvc_etcd_lease_keepalive(struct kvc_etcd *e, int64_t id, int64_t *ttl)
{
	json_t *req = json_pack("{s:I}", "ID", (json_int_t)id), *resp = NULL, *res;
	int64_t left = 0;
	int ret;

	if (!req)
		return -ENOMEM;
	/* A stream of one request: the answer is {"result":{...}} or
	 * {"error":{"grpc_code":...}}. */
	ret = kvc_etcd_call(e, "/v3/lease/keepalive", req, &resp);
	if (ret)
		goto out;
	res = json_object_get(resp, "result");
	if (!json_is_object(res)) {
		const json_t *err = json_object_get(resp, "error");
		const json_t *code = json_object_get(err, "grpc_code");

		ret = json_is_integer(code) ? kvc_etcd_grpc_errno(json_integer_value(code)) : -EPROTO;
		goto out;
	}
	ret = kvc_etcd_json_int64(res, "TTL", &left);
	if (!ret && left <= 0)
		ret = -ENOENT; /* etcd answers an expired or unknown lease with no TTL */
	if (!ret && ttl)
		*ttl = left;
out:
	json_decref(req);
	json_decref(resp);
	return ret;
}

int kvc_etcd_lease_revoke(struct kvc_etcd *e, int64_t id)
{
	json_t *req = json_pack("{s:I}", "ID", (json_int_t)id), *resp = NULL;
	int ret;

	if (!req)
		return -ENOMEM;
	ret = kvc_etcd_call(e, "/v3/lease/revoke", req, &resp);
	json_decref(req);
	json_decref(resp);
	return ret;
}
