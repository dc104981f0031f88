/*
 * etcd_internal: what the files of the etcd client share (etcd.c the
 * handle and the HTTP calls, etcd_kv.c the KV, txn and lease calls,
 * etcd_watch.c the watch, etcd_json.c the decoding of what the gateway
 * sends). Not for other modules; the tests use the decoders.
 *
 * Everything the gateway sends is hostile until decoded here: numbers
 * are checked decimal int64 strings, base64 is decoded strictly, every
 * length is bounded (KVC_ETCD_MAX_BODY for a body or a stream object,
 * KVC_ETCD_STREAM_DEPTH for nesting), and a bad byte gives -EPROTO.
 */
#ifndef KVC_MGMT_ETCD_INTERNAL_H
#define KVC_MGMT_ETCD_INTERNAL_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "mgmt/etcd.h"

struct kvc_etcd {
	char *urls[KVC_ETCD_MAX_ENDPOINTS]; /* without a trailing '/' */
	int n_urls;
	int timeout_ms;
	atomic_int current; /* the endpoint that answered last */
};

/* POST body (a JSON object) to path ("/v3/kv/range") on the endpoints as
 * etcd.h says; *resp the decoded answer object on 0. */
int kvc_etcd_call(struct kvc_etcd *e, const char *path, json_t *body, json_t **resp);
/* A curl easy handle that POSTs body (kept by the caller) with hdrs to
 * path on endpoint idx, with the options every call sets; NULL on ENOMEM. */
CURL *kvc_etcd_easy(struct kvc_etcd *e, int idx, const char *path, const char *body,
	struct curl_slist *hdrs);
/* A curl result (CURLcode) -> -errno. */
int kvc_etcd_curl_errno(int code);
/* gRPC status code (the gateway's "code") -> -errno. */
int kvc_etcd_grpc_errno(json_int_t code);
/* A connect timeout in ms for one endpoint of e with remain_ms left. */
long kvc_etcd_connect_ms(const struct kvc_etcd *e, int64_t remain_ms);

/* {"key": key, ["range_end": the end of the prefix]} as RangeRequest,
 * DeleteRangeRequest and WatchCreateRequest take it; NULL on ENOMEM. */
json_t *kvc_etcd_key_range(const char *key, bool prefix);

/* Decoding. */
/* A base64 string of at most max decoded bytes -> malloc'd bytes plus a
 * NUL (*out, *len); an absent field (s == NULL) is empty. */
int kvc_etcd_b64_decode(const json_t *s, size_t max, uint8_t **out, size_t *len);
/* bytes -> a new JSON string in base64, NULL on ENOMEM. */
json_t *kvc_etcd_b64_json(const void *data, size_t len);
/* obj[name]: a decimal string or an integer; absent = 0. */
int kvc_etcd_json_int64(const json_t *obj, const char *name, int64_t *out);
/* A mvccpb.KeyValue object -> kv (owning its key and value). */
int kvc_etcd_kv_decode(const json_t *obj, struct kvc_etcd_kv *kv);
void kvc_etcd_kv_free(struct kvc_etcd_kv *kv);
/* Append the "kvs" array of a RangeResponse object to out. */
int kvc_etcd_kvs_append(struct kvc_etcd_kvs *out, const json_t *range_response);
/* The "header"."revision" of a response object (0 when absent). */
int kvc_etcd_header_revision(const json_t *obj, int64_t *rev);

/*
 * The watch stream: the gateway writes one JSON object per response
 * ({"result":{...}} or {"error":{...}}), separated by newlines. The
 * splitter finds each whole top-level object by its braces, whatever
 * the chunking and whitespace, and hands it to on_object; anything but
 * whitespace between objects, nesting deeper than KVC_ETCD_STREAM_DEPTH
 * or an object over max_object bytes is -EPROTO.
 */
#define KVC_ETCD_STREAM_DEPTH 32
struct kvc_etcd_stream {
	char *buf; /* the object being read */
	size_t len, cap, max_object;
	int depth;
	bool in_string, escape;
};
typedef int (*kvc_etcd_object_fn)(void *arg, const char *obj, size_t len);
void kvc_etcd_stream_init(struct kvc_etcd_stream *s, size_t max_object);
void kvc_etcd_stream_free(struct kvc_etcd_stream *s);
/* Returns 0, a non-zero value of on_object (which stops the feed) or -EPROTO. */
int kvc_etcd_stream_feed(struct kvc_etcd_stream *s, const char *data, size_t n,
	kvc_etcd_object_fn on_object, void *arg);

/* One decoded watch response. */
struct kvc_etcd_watch_state {
	struct kvc_etcd_watch *w;
	bool created; /* the watch was set up on this stream */
	int64_t progress_revision; /* header revision of the last progress report */
};
/* Decode one stream object and deliver its events to w->fn, advancing
 * w->next_revision. Returns 0 to go on, 1 when fn said stop (w's result
 * in *fn_rc), -ERANGE on compaction, -EPROTO, or the errno of an error
 * object. */
int kvc_etcd_watch_response(struct kvc_etcd_watch_state *st, const char *obj, size_t len,
	int *fn_rc);

#endif
