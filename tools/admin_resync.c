/* admin_resync: see admin_resync.h. */
#include "admin_resync.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "client/storage_target.h"

static const char *const state_names[] = {"idle", "running", "done", "failed"};

static const char *state_name(uint32_t state)
{
	return state < sizeof(state_names) / sizeof(state_names[0]) ? state_names[state] : "?";
}

static int fail(const char *what, uint32_t target, int rc)
{
	const char *why = rc == -EBUSY    ? "a resync of it is already running"
	                  : rc == -ESTALE ? "the chain's version or members are not what this "
	                                    "server holds (stale chain table?)"
	                  : rc == -ENXIO  ? "its server does not serve that target or chain"
	                                  : strerror(-rc);
	fprintf(stderr, "kvc-admin resync: %s target %u: %s\n", what, target, why);
	return 1;
}

static int status_of(struct kvc_storage_client *storage, uint32_t target,
                     struct kvc_msg_resync_status *out)
{
	struct kvc_msg_chunk_target m = {.target = target};
	uint32_t len = 0;
	int rc = kvc_storage_target_call(storage, target, KVC_MSG_CHUNK_RESYNC_STATUS, &m,
	                                 sizeof(m), out, sizeof(*out), &len);
	return rc == 0 && len != sizeof(*out) ? -EBADMSG : rc;
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static void print_json(uint32_t target, const struct kvc_msg_resync_status *s)
{
	double secs = (double)s->elapsed_ms / 1000.0;
	printf("{\"target\":%u,\"source\":%u,\"chain\":%u,\"chain_version\":%u,\"state\":\"%s\","
	       "\"result\":%d,\"error\":\"%s\",\"passes\":%u,\"compared\":%" PRIu64
	       ",\"copied\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"bytes\":%" PRIu64
	       ",\"retries\":%" PRIu64 ",\"elapsed_ms\":%" PRIu64 ",\"mib_per_s\":%.1f,"
	       "\"chunks_per_s\":%.1f}\n",
	       target, s->source, s->chain, s->chain_version, state_name(s->state), s->result,
	       s->result < 0 ? strerror(-s->result) : "", s->passes, s->compared, s->copied,
	       s->dropped, s->bytes, s->retries, s->elapsed_ms,
	       secs > 0 ? mib(s->bytes) / secs : 0.0,
	       secs > 0 ? (double)(s->copied + s->dropped) / secs : 0.0);
}

static void print_progress(uint32_t target, const struct kvc_msg_resync_status *s)
{
	printf("target %u <- %u: %s, pass %u: %" PRIu64 " compared, %" PRIu64 " copied (%.1f MiB), "
	       "%" PRIu64 " dropped, %.1f s\n", target, s->source, state_name(s->state),
	       s->passes + (s->state == 1), s->compared, s->copied, mib(s->bytes), s->dropped,
	       (double)s->elapsed_ms / 1000.0);
	fflush(stdout);
}

static void print_summary(uint32_t target, const struct kvc_msg_resync_status *s)
{
	double secs = (double)s->elapsed_ms / 1000.0;
	if (s->state == 3)
		printf("resync of target %u from target %u FAILED: %s\n", target, s->source,
		       strerror(-s->result));
	else
		printf("resync of target %u from target %u (chain %u version %u): %s\n", target,
		       s->source, s->chain, s->chain_version, state_name(s->state));
	printf("  %" PRIu64 " chunks compared in %u pass(es), %" PRIu64 " copied (%.1f MiB), %"
	       PRIu64 " dropped, %" PRIu64 " retried; %.2f s", s->compared, s->passes, s->copied,
	       mib(s->bytes), s->dropped, s->retries, secs);
	if (secs > 0)
		printf(", %.1f MiB/s, %.0f chunks/s", mib(s->bytes) / secs,
		       (double)(s->copied + s->dropped) / secs);
	printf("\n");
}

int admin_resync_run(struct kvc_storage_client *storage, const struct admin_resync *o)
{
	struct kvc_msg_resync_status s;
	if (o->target >= storage->target_count || (!o->status_only &&
	                                           o->source >= storage->target_count)) {
		fprintf(stderr, "kvc-admin resync: the cluster has targets 0 to %u only\n",
		        storage->target_count - 1);
		return 1;
	}
	if (!o->status_only) {
		const struct kvc_chains *table = &storage->chains;
		uint32_t c = 0;
		while (c < table->count && kvc_chains_position(&table->chains[c], o->target) < 0)
			c++;
		if (c == table->count) {
			fprintf(stderr, "kvc-admin resync: target %u is in no chain\n", o->target);
			return 1;
		}
		struct kvc_msg_chunk_resync m = {.target = o->target, .source = o->source, .chain = c,
		                                 .chain_version = table->chains[c].version};
		uint32_t len = 0;
		int rc = kvc_storage_target_call(storage, o->target, KVC_MSG_CHUNK_RESYNC, &m,
		                                 sizeof(m), NULL, 0, &len);
		if (rc < 0)
			return fail("cannot resync", o->target, rc);
	}
	bool follow = !o->status_only && !o->no_wait;
	for (;;) {
		int rc = status_of(storage, o->target, &s);
		if (rc < 0)
			return fail("cannot ask about", o->target, rc);
		if (!follow || s.state != 1)
			break;
		if (!o->json)
			print_progress(o->target, &s);
		struct timespec ts = {0, 500 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (o->json)
		print_json(o->target, &s);
	else
		print_summary(o->target, &s);
	return s.state == 3 ? 1 : 0;
}
