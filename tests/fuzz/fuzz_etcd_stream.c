/* libFuzzer harness: the etcd client's watch stream (src/mgmt/etcd_json.c)
 * on arbitrary bytes: the object splitter, cut at a point the input
 * chooses, and the watch-response decoder on every object it finds. Either
 * events reach the callback or a clear error ends the stream; never a
 * crash, an out-of-bounds read or a leak, and never more memory than the
 * object bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/etcd_internal.h"

static int on_event(void *arg, const struct kvc_etcd_event *ev)
{
	(*(size_t *)arg) += ev->kv.key_len + ev->kv.value_len;
	return 0;
}

static int on_object(void *arg, const char *obj, size_t len)
{
	struct kvc_etcd_watch_state *st = arg;
	int fn_rc = 0;

	return kvc_etcd_watch_response(st, obj, len, &fn_rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t seen = 0, cut = size ? data[0] % (size + 1) : 0;
	struct kvc_etcd_watch w = { .key = "k", .stop_fd = -1, .fn = on_event, .arg = &seen };
	struct kvc_etcd_watch_state st = { .w = &w };
	struct kvc_etcd_stream s;

	kvc_etcd_stream_init(&s, 2048);
	if (kvc_etcd_stream_feed(&s, (const char *)data, cut, on_object, &st) == 0)
		kvc_etcd_stream_feed(&s, (const char *)data + cut, size - cut, on_object, &st);
	if (s.cap > 2048)
		abort();
	kvc_etcd_stream_free(&s);
	return 0;
}
