/*
 * etcd_json: decoding what etcd's JSON gateway sends (see
 * etcd_internal.h): base64 (libsodium's strict decoder), int64 numbers
 * (decimal strings), mvccpb.KeyValue objects, the watch stream's object
 * splitter and the watch responses. Every input is hostile: each length is
 * checked before use and a bad one is -EPROTO.
 */
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/etcd_internal.h"

int kvc_etcd_b64_decode(const json_t *s, size_t max, uint8_t **out, size_t *len)
{
	const char *text = "";
	size_t text_len = 0, bin_len = 0, cap;
	uint8_t *bin;
	int ret = 0;

	if (s) {
		if (!json_is_string(s))
			return -EPROTO;
		text = json_string_value(s);
		text_len = json_string_length(s);
	}
	if (text_len % 4 != 0 || text_len / 4 > max / 3 + 1)
		return -EPROTO;
	cap = text_len / 4 * 3;
	bin = malloc(cap + 1);
	if (!bin)
		return -ENOMEM;
	if (text_len && sodium_base642bin(bin, cap, text, text_len, NULL, &bin_len, NULL,
			sodium_base64_VARIANT_ORIGINAL) != 0) {
		ret = -EPROTO;
		goto out;
	}
	if (bin_len > max) {
		ret = -EPROTO;
		goto out;
	}
	bin[bin_len] = 0;
	*out = bin;
	*len = bin_len;
	bin = NULL;
out:
	free(bin);
	return ret;
}

json_t *kvc_etcd_b64_json(const void *data, size_t len)
{
	size_t cap;
	char *text;
	json_t *s;

	if (len > KVC_ETCD_MAX_BODY)
		return NULL;
	cap = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	text = malloc(cap);
	if (!text)
		return NULL;
	sodium_bin2base64(text, cap, data, len, sodium_base64_VARIANT_ORIGINAL);
	s = json_string(text);
	free(text);
	return s;
}

int kvc_etcd_json_int64(const json_t *obj, const char *name, int64_t *out)
{
	const json_t *v = json_object_get(obj, name);
	const char *s;
	char *end;
	long long n;

	if (!v) {
		*out = 0;
		return 0;
	}
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -EPROTO;
	s = json_string_value(v);
	if (json_string_length(v) == 0 || json_string_length(v) > 20 ||
	    strlen(s) != json_string_length(v) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
		return -EPROTO;
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno || *end)
		return -EPROTO;
	*out = n;
	return 0;
}

void kvc_etcd_kv_free(struct kvc_etcd_kv *kv)
{
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

int kvc_etcd_kv_decode(const json_t *obj, struct kvc_etcd_kv *kv)
{
	struct kvc_etcd_kv k = { 0 };
	uint8_t *key = NULL;
	int ret;

	if (!json_is_object(obj) || !json_object_get(obj, "key"))
		return -EPROTO;
	ret = kvc_etcd_json_int64(obj, "create_revision", &k.create_revision);
	if (!ret)
		ret = kvc_etcd_json_int64(obj, "mod_revision", &k.mod_revision);
	if (!ret)
		ret = kvc_etcd_json_int64(obj, "version", &k.version);
	if (!ret)
		ret = kvc_etcd_json_int64(obj, "lease", &k.lease);
	if (!ret && (k.create_revision < 0 || k.mod_revision < 0 || k.version < 0))
		ret = -EPROTO;
	if (!ret)
		ret = kvc_etcd_b64_decode(json_object_get(obj, "key"), KVC_ETCD_MAX_BODY, &key,
			&k.key_len);
	if (!ret)
		ret = kvc_etcd_b64_decode(json_object_get(obj, "value"), KVC_ETCD_MAX_BODY,
			&k.value, &k.value_len);
	if (ret) {
		free(key);
		return ret;
	}
	k.key = (char *)key;
	*kv = k;
	return 0;
}

void kvc_etcd_kvs_free(struct kvc_etcd_kvs *kvs)
{
	if (!kvs)
		return;
	for (size_t i = 0; i < kvs->count; i++)
		kvc_etcd_kv_free(&kvs->kvs[i]);
	free(kvs->kvs);
	memset(kvs, 0, sizeof(*kvs));
}

int kvc_etcd_kvs_append(struct kvc_etcd_kvs *out, const json_t *range_response)
{
	const json_t *arr = json_object_get(range_response, "kvs");
	struct kvc_etcd_kv *grown;
	size_t n, i;
	int ret = 0;

	if (!arr)
		return 0;
	if (!json_is_array(arr))
		return -EPROTO;
	n = json_array_size(arr);
	if (n == 0)
		return 0;
	if (n > KVC_ETCD_MAX_BODY / 8 || out->count > INT_MAX - n)
		return -EPROTO;
	grown = realloc(out->kvs, (out->count + n) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	out->kvs = grown;
	for (i = 0; i < n && !ret; i++) {
		ret = kvc_etcd_kv_decode(json_array_get(arr, i), &out->kvs[out->count]);
		if (!ret)
			out->count++;
	}
	return ret;
}

int kvc_etcd_header_revision(const json_t *obj, int64_t *rev)
{
	const json_t *h = json_object_get(obj, "header");

	if (!h) {
		*rev = 0;
		return 0;
	}
	if (!json_is_object(h))
		return -EPROTO;
	return kvc_etcd_json_int64(h, "revision", rev);
}

/* The watch stream's splitter. */

void kvc_etcd_stream_init(struct kvc_etcd_stream *s, size_t max_object)
{
	memset(s, 0, sizeof(*s));
	s->max_object = max_object;
}

void kvc_etcd_stream_free(struct kvc_etcd_stream *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

static int stream_push(struct kvc_etcd_stream *s, char c)
{
	if (s->len >= s->max_object)
		return -EPROTO;
	if (s->len == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4096;
		char *buf;

		if (cap > s->max_object)
			cap = s->max_object;
		buf = realloc(s->buf, cap);
		if (!buf)
			return -ENOMEM;
		s->buf = buf;
		s->cap = cap;
	}
	s->buf[s->len++] = c;
	return 0;
}

int kvc_etcd_stream_feed(struct kvc_etcd_stream *s, const char *data, size_t n,
	kvc_etcd_object_fn on_object, void *arg)
{
	int ret = 0;

	for (size_t i = 0; i < n && !ret; i++) {
		char c = data[i];

		if (s->len == 0) {
			if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
				continue;
			if (c != '{')
				return -EPROTO;
		}
		ret = stream_push(s, c);
		if (ret)
			break;
		if (s->in_string) {
			if (s->escape)
				s->escape = false;
			else if (c == '\\')
				s->escape = true;
			else if (c == '"')
				s->in_string = false;
			continue;
		}
		if (c == '"') {
			s->in_string = true;
		} else if (c == '{' || c == '[') {
			if (++s->depth > KVC_ETCD_STREAM_DEPTH)
				return -EPROTO;
		} else if (c == '}' || c == ']') {
			if (--s->depth == 0) {
				ret = on_object(arg, s->buf, s->len);
				s->len = 0;
			}
		}
	}
	return ret;
}

/* Watch responses. */

static const char *const event_names[KVC_ETCD_EVENT_TYPES] = {
	[KVC_ETCD_EVENT_PUT] = "PUT",
	[KVC_ETCD_EVENT_DELETE] = "DELETE",
};

static int event_type(const json_t *ev, enum kvc_etcd_event_type *type)
{
	const json_t *t = json_object_get(ev, "type");

	if (!t) { /* proto3 JSON leaves the zero value out: PUT */
		*type = KVC_ETCD_EVENT_PUT;
		return 0;
	}
	if (!json_is_string(t))
		return -EPROTO;
	for (int i = 0; i < KVC_ETCD_EVENT_TYPES; i++) {
		if (strcmp(json_string_value(t), event_names[i]) == 0) {
			*type = (enum kvc_etcd_event_type)i;
			return 0;
		}
	}
	return -EPROTO;
}

/* Deliver the events of one response; events older than floor were
 * delivered before a resume and are skipped. */
static int deliver_events(struct kvc_etcd_watch *w, const json_t *events, int *fn_rc)
{
	int64_t floor = w->next_revision;
	size_t i;
	int ret = 0;

	if (!json_is_array(events))
		return -EPROTO;
	for (i = 0; i < json_array_size(events) && !ret; i++) {
		const json_t *ev = json_array_get(events, i);
		struct kvc_etcd_event e = { 0 };
		int rc;

		if (!json_is_object(ev))
			return -EPROTO;
		ret = event_type(ev, &e.type);
		if (!ret)
			ret = kvc_etcd_kv_decode(json_object_get(ev, "kv"), &e.kv);
		if (ret)
			break;
		if (e.kv.mod_revision >= floor) {
			rc = w->fn(w->arg, &e);
			if (e.kv.mod_revision + 1 > w->next_revision)
				w->next_revision = e.kv.mod_revision + 1;
			if (rc) {
				*fn_rc = rc < 0 ? rc : 0;
				ret = 1;
			}
		}
		kvc_etcd_kv_free(&e.kv);
	}
	return ret;
}

int kvc_etcd_watch_response(struct kvc_etcd_watch_state *st, const char *obj, size_t len,
	int *fn_rc)
{
	struct kvc_etcd_watch *w = st->w;
	json_t *root, *res, *events;
	int64_t rev = 0, compact = 0;
	int ret = 0;

	root = json_loadb(obj, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(root)) {
		ret = -EPROTO;
		goto out;
	}
	res = json_object_get(root, "error");
	if (res) {
		/* The gateway's stream error {"error":{"grpc_code":14,...}}, or
		 * the answer of a refused request {"error":"...","code":3}. */
		const json_t *code = json_is_object(res) ? json_object_get(res, "grpc_code")
							 : json_object_get(root, "code");

		ret = json_is_integer(code) ? kvc_etcd_grpc_errno(json_integer_value(code)) : -EPROTO;
		goto out;
	}
	res = json_object_get(root, "result");
	if (!json_is_object(res)) {
		ret = -EPROTO;
		goto out;
	}
	ret = kvc_etcd_header_revision(res, &rev);
	if (!ret)
		ret = kvc_etcd_json_int64(res, "compact_revision", &compact);
	if (ret)
		goto out;
	if (json_is_true(json_object_get(res, "canceled"))) {
		if (compact > 0)
			w->compact_revision = compact;
		ret = compact > 0 ? -ERANGE : -ECANCELED;
		goto out;
	}
	events = json_object_get(res, "events");
	if (events) {
		ret = deliver_events(w, events, fn_rc);
		goto out;
	}
	if (json_is_true(json_object_get(res, "created"))) {
		st->created = true;
		/* A watch from "now" starts after the revision of its creation. */
		if (w->next_revision == 0 && rev > 0)
			w->next_revision = rev + 1;
		goto out;
	}
	/* A progress report: every event up to rev was sent. */
	st->progress_revision = rev;
	if (rev + 1 > w->next_revision)
		w->next_revision = rev + 1;
out:
	json_decref(root);
	return ret;
}
