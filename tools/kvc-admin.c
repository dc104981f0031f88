/*
 * kvc-admin: the administrator's command line (the commands table below,
 * docs/operations.md). Every command prints a human table, or JSON with
 * --json, and exits non-zero with a clear message on failure: 1 when the
 * cluster said no, 2 for a wrong use. `kvc-admin [COMMAND] --help` prints
 * the usage of all commands, of a group (pool, key) or of one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cli.h"
#include "core/config.h"
#include "kvc/meta.h"
#include "core/layout.h"
#include "client/meta_client.h"
#include "client/pool_client.h"
#include "client/storage_client.h"
#include "admin_chains.h"
#include "admin_resync.h"

struct admin {
	struct kvc_config config;
	struct kvc_meta_client meta;
	struct kvc_storage_client storage;
	struct kvc_meta *pools;
	bool json;
	const struct kvc_cli *cli; /* of the command being run */
	char **args;               /* its operands */
	int nargs;
	bool repair;               /* fsck --repair */
	const char *resync_target, *resync_from; /* resync --target, --from */
	struct admin_resync resync;
};

static int report_error(const char *what, int rc)
{
	fprintf(stderr, "kvc-admin: %s: %s\n", what, strerror(-rc));
	return 1;
}

/* s (len bytes) as the inside of a JSON string: quotes, backslashes and
 * control bytes escaped (names, keys and paths are bytes a client
 * chose). Bytes >= 0x80 pass as they are. Returns out. */
static const char *json_escape(char *out, size_t cap, const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 7 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			out[n++] = '\\';
			out[n++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
		} else {
			out[n++] = (char)c;
		}
	}
	out[n] = '\0';
	return out;
}

/* An escaped copy that lives until the end of the enclosing block. */
#define JSON_STR(s) json_escape((char[6 * 4096 + 8]){0}, 6 * 4096 + 8, (s), strlen(s))
#define JSON_STRN(s, n) json_escape((char[6 * 4096 + 8]){0}, 6 * 4096 + 8, (s), (n))

/* bytes as "1.5 GiB", "96.0 MiB", "512 KiB", in a buffer that lives until
 * the end of the enclosing block. */
static const char *human_size(char *out, size_t cap, uint64_t bytes)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)bytes / 1024;
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(out, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
	return out;
}
#define HUMAN(bytes) human_size((char[32]){0}, 32, (bytes))

/* The space lines of status: a target's, or kvc-meta's volume. */
static void print_space(const char *what, uint64_t free_bytes, uint64_t total_bytes,
                        uint64_t reserve_bytes, bool refusing, uint64_t refused,
                        const char *refusing_what)
{
	printf("%52s %s %s free of %s, %s kept back for metadata", "", what, HUMAN(free_bytes),
	       HUMAN(total_bytes), HUMAN(reserve_bytes));
	if (refusing)
		printf("; FULL: refusing %s", refusing_what);
	if (refused)
		printf("; %" PRIu64 " refused so far", refused);
	printf("\n");
}

static int cmd_status(struct admin *a)
{
	static struct kvc_chains routing;
	kvc_storage_client_chains(&a->storage, &routing);
	struct kvc_msg_statfs_reply names = {0};
	int failures = 0;
	int rc = kvc_meta_client_statfs(&a->meta, &names);
	bool meta_refusing = names.flags & KVC_SPACE_REFUSING;
	failures += rc < 0;
	if (a->json)
		printf("{\"meta\":{\"address\":\"%s\",\"up\":%s,\"inodes\":%" PRIu64
		       ",\"open_sessions\":%" PRIu64 ",\"removed_but_open\":%" PRIu64
		       ",\"reclaim_pending\":%" PRIu64 ",\"grants\":%" PRIu32
		       ",\"volume_total_bytes\":%" PRIu64
		       ",\"volume_free_bytes\":%" PRIu64 ",\"reserve_bytes\":%" PRIu64
		       ",\"refusing\":%s,\"refused\":%" PRIu64 ",\"watch_entries\":%" PRIu64
		       ",\"watch_events\":%" PRIu64 "},\"storage\":[",
		       JSON_STR(a->config.meta_address), rc == 0 ? "true" : "false", names.inodes,
		       names.open_sessions, names.orphans, names.gc_pending, names.grants,
		       names.volume_total_bytes, names.volume_free_bytes, names.reserve_bytes,
		       meta_refusing ? "true" : "false",
		       names.refused, names.watch_entries, names.watch_events);
	else
		printf("%-8s %-10s %-22s %-6s %s\n%-8s %-10s %-22s %-6s %s\n", "ROLE", "NAME", "ADDRESS",
		       "HEALTH", "DETAIL", "meta", "meta", a->config.meta_address,
		       rc == 0 ? "up" : "DOWN",
		       rc == 0 ? "namespace served" : strerror(-rc));
	if (!a->json && rc == 0)
		printf("%52s inodes: %" PRIu64 "; files open: %" PRIu64 " (file, client) pairs\n"
		       "%52s removed but still open: %" PRIu64 "; removed, chunks to reclaim: %" PRIu64
		       "\n%52s cached by clients, watched for changes: %" PRIu64 " names and inodes; "
		       "change events sent: %" PRIu64 "\n%52s inode-number grants held by clients "
		       "(files made ahead): %" PRIu32 "\n", "", names.inodes, names.open_sessions, "",
		       names.orphans, names.gc_pending, "", names.watch_entries, names.watch_events, "",
		       names.grants);
	if (!a->json && rc == 0)
		print_space("data volume:", names.volume_free_bytes, names.volume_total_bytes,
		            names.reserve_bytes, meta_refusing, names.refused, "new names");
	for (uint32_t s = 0; s < routing.server_count; s++) {
		struct kvc_msg_target_space t[KVC_WIRE_MAX_TARGETS];
		int count = kvc_storage_client_server_space(&a->storage, s, t, KVC_WIRE_MAX_TARGETS);
		const struct kvc_chains_server *srv = &routing.servers[s];
		failures += count < 0;
		/* How this host's clients move chunk bytes to it (docs/architecture.md
		 * "Transports"): what a kvc-fuse here would choose. */
		const char *transport = count >= 0 ? kvc_transport_for(&a->storage, s) : "tcp";
		if (a->json) {
			printf("%s{\"name\":\"%s\",\"address\":\"%s\",\"up\":%s,\"transport\":\"%s\","
			       "\"targets\":[", s ? "," : "", JSON_STR(srv->name), JSON_STR(srv->address),
			       count >= 0 ? "true" : "false", transport);
			for (int i = 0; i < count; i++)
				printf("%s{\"id\":%u,\"state\":\"%s\",\"total_bytes\":%" PRIu64
				       ",\"free_bytes\":%" PRIu64 ",\"reserve_bytes\":%" PRIu64
				       ",\"refusing\":%s,\"refused_writes\":%" PRIu64 ",\"chunks\":%" PRIu64
				       "}",
				       i ? "," : "", t[i].target, admin_target_state(&routing, t[i].target),
				       t[i].total_bytes, t[i].free_bytes, t[i].reserve_bytes,
				       t[i].flags & KVC_SPACE_REFUSING ? "true" : "false",
				       t[i].refused_writes, t[i].chunks);
			printf("]}");
			continue;
		}
		printf("%-8s %-10s %-22s %-6s %s%s\n", "storage", srv->name, srv->address,
		       count >= 0 ? "up" : "DOWN", count >= 0 ? "transport from this host: " : "",
		       count >= 0 ? (strcmp(transport, "place") == 0 ? "same-host placement" : "tcp")
		                  : strerror(-count));
		for (int i = 0; i < count; i++) {
			char what[64];
			if (a->config.replicas > 1)
				snprintf(what, sizeof(what), "target %u (%s): %" PRIu64 " chunks,",
				         t[i].target, admin_target_state(&routing, t[i].target), t[i].chunks);
			else
				snprintf(what, sizeof(what), "target %u: %" PRIu64 " chunks,", t[i].target,
				         t[i].chunks);
			print_space(what, t[i].free_bytes, t[i].total_bytes, t[i].reserve_bytes,
			            t[i].flags & KVC_SPACE_REFUSING, t[i].refused_writes, "writes");
		}
	}
	if (a->json)
		printf("],");
	admin_chains_print(&routing, a->json, a->config.replicas, a->config.manager_count > 0);
	if (a->config.manager_count) {
		if (a->json)
			printf(",");
		failures += admin_hosts_print(&a->config, a->json) < 0;
	}
	struct kvc_meta_pool_entry pools[256];
	int npools = kvc_meta_pool_list(a->pools, pools, 256);
	if (a->json) {
		printf(",\"pools\":[");
		for (int i = 0; i < npools; i++)
			printf("%s{\"namespace\":\"%s\",\"rank\":%u,\"pages\":%u,\"free\":%u}",
			       i ? "," : "", JSON_STR(pools[i].ns), pools[i].rank, pools[i].num_pages,
			       pools[i].free_pages);
		printf("],\"healthy\":%s}\n", failures ? "false" : "true");
	} else if (npools > 0) {
		printf("\n%-8s %-20s %5s %10s %10s\n", "POOLS", "NAMESPACE", "RANK", "PAGES", "FREE");
		for (int i = 0; i < npools; i++)
			printf("%-8s %-20s %5u %10u %10u\n", "", pools[i].ns, pools[i].rank,
			       pools[i].num_pages, pools[i].free_pages);
	}
	return failures ? 1 : 0;
}

static int resolve(struct admin *a, const char *path, struct kvc_attr *attr)
{
	char copy[4096];
	if (strlen(path) >= sizeof(copy))
		return -ENAMETOOLONG;
	strcpy(copy, path);
	int rc = kvc_meta_client_getattr(&a->meta, 1, attr);
	for (char *save, *part = strtok_r(copy, "/", &save); part && rc == 0;
	     part = strtok_r(NULL, "/", &save))
		rc = kvc_meta_client_lookup(&a->meta, attr->ino, part, attr);
	return rc;
}

static int cmd_stat(struct admin *a)
{
	const char *path = a->args[0];
	struct kvc_attr attr;
	int rc = resolve(a, path, &attr);
	if (rc < 0) {
		fprintf(stderr, "kvc-admin: %s: %s\n", path, strerror(-rc));
		return 1;
	}
	const struct kvc_layout *l = &attr.layout;
	if (a->json)
		printf("{\"inode\":%" PRIu64 ",\"size\":%" PRIu64 ",\"mode\":\"%o\",\"uid\":%u,"
		       "\"gid\":%u,\"nlink\":%u,\"chunk_size\":%u,\"stripe\":%u,\"first_target\":%u,"
		       "\"target_count\":%u}\n",
		       attr.ino, attr.size, attr.mode, attr.uid, attr.gid, attr.nlink, l->chunk_size,
		       l->stripe, l->first_chain, l->chain_count);
	else
		printf("inode %" PRIu64 "\nsize %" PRIu64 "\nmode %o\nowner %u:%u\nnlink %u\n"
		       "layout chunk_size=%u stripe=%u first_target=%u of %u targets\n",
		       attr.ino, attr.size, attr.mode, attr.uid, attr.gid, attr.nlink, l->chunk_size,
		       l->stripe, l->first_chain, l->chain_count);
	return 0;
}

static int cmd_pool_list(struct admin *a)
{
	struct kvc_meta_pool_entry entries[1024];
	int n = kvc_meta_pool_list(a->pools, entries, 1024);
	if (n < 0)
		return report_error("pool list", n);
	if (a->json)
		printf("[");
	else
		printf("%-20s %5s %10s %10s %10s\n", "NAMESPACE", "RANK", "PAGES", "FREE", "USED");
	for (int i = 0; i < n; i++) {
		const struct kvc_meta_pool_entry *e = &entries[i];
		if (a->json)
			printf("%s{\"namespace\":\"%s\",\"rank\":%u,\"pages\":%u,\"free\":%u}",
			       i ? "," : "", JSON_STR(e->ns), e->rank, e->num_pages, e->free_pages);
		else
			printf("%-20s %5u %10u %10u %10u\n", e->ns, e->rank, e->num_pages, e->free_pages,
			       e->num_pages - e->free_pages);
	}
	if (a->json)
		printf("]\n");
	return 0;
}

/* A RANK or N operand: 0 and the number in *out, or 2 (reported). The
 * callers read *out after a 0, so 2 is returned here, where the compiler
 * sees it, not through kvc_cli_fail(). */
static int parse_number(struct admin *a, const char *what, const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end != '\0' || *s == '-' || v > UINT32_MAX) {
		kvc_cli_fail(a->cli, "%s must be a number, not '%s'", what, s);
		return 2;
	}
	*out = (uint32_t)v;
	return 0;
}

static int cmd_pool_show(struct admin *a)
{
	const char *ns = a->args[0];
	uint32_t rank = 0;
	if (a->nargs > 1 && parse_number(a, "RANK", a->args[1], &rank))
		return 2;
	struct kvc_meta_pool_stats st;
	int rc = kvc_meta_pool_stats(a->pools, ns, rank, &st);
	if (rc == -ENOENT) {
		fprintf(stderr, "kvc-admin: no page pool in namespace '%s'\n", ns);
		return 1;
	}
	if (rc < 0)
		return report_error(ns, rc);
	struct kvc_meta_pool_binding b;
	int bound = kvc_meta_pool_binding(a->pools, ns, rank, &b);
	if (bound < 0 && bound != -ENOENT)
		return report_error(ns, bound);
	if (a->json) {
		printf("{\"namespace\":\"%s\",\"rank\":%u,\"world_size\":%u,\"ranks\":%u,"
		       "\"pages\":%llu,\"free\":%llu,\"keys\":%llu,\"complete\":%llu,"
		       "\"leased\":%llu,\"retired\":%llu,\"evictions\":%llu",
		       JSON_STR(ns), rank, st.world_size, st.ranks, (unsigned long long)st.num_pages,
		       (unsigned long long)st.free_pages, (unsigned long long)st.keys,
		       (unsigned long long)st.complete_keys, (unsigned long long)st.leased_keys,
		       (unsigned long long)st.retired_keys, (unsigned long long)st.evictions);
		if (bound == 0)
			printf(",\"file\":\"%s\",\"page_size\":%llu,\"punch_pending\":%llu", JSON_STR(b.path),
			       (unsigned long long)b.page_size, (unsigned long long)b.punch_pending);
		printf("}\n");
		return 0;
	}
	printf("namespace    %s\nworld size   %u%s\ninitialized  %u rank(s)\n", ns, st.world_size,
	       st.world_size ? "" : " (not set: inferred from initialized ranks)", st.ranks);
	printf("rank %-7u %llu pages, %llu free, %llu used\n", rank,
	       (unsigned long long)st.num_pages, (unsigned long long)st.free_pages,
	       (unsigned long long)(st.num_pages - st.free_pages));
	printf("keys         %llu (%llu complete, %llu leased now, %llu retired)\n"
	       "evictions    %llu\n",
	       (unsigned long long)st.keys, (unsigned long long)st.complete_keys,
	       (unsigned long long)st.leased_keys, (unsigned long long)st.retired_keys,
	       (unsigned long long)st.evictions);
	if (bound == 0)
		printf("file         %s (inode %llu), pages of %llu bytes; %llu freed page(s) "
		       "still to punch\n", b.path, (unsigned long long)b.inode,
		       (unsigned long long)b.page_size, (unsigned long long)b.punch_pending);
	else
		printf("file         not bound (kvc-admin pool bind)\n");
	return 0;
}

/* "2097152", "2M", "8MiB", "1G": bytes, or 0 when not a size. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	if (shift)
		end++;
	if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
		return 0;
	return end == s || v > (UINT64_MAX >> shift) ? 0 : (uint64_t)v << shift;
}

static int cmd_pool_bind(struct admin *a)
{
	const char *ns = a->args[0], *path = a->args[2];
	uint32_t rank;
	if (parse_number(a, "RANK", a->args[1], &rank))
		return 2;
	uint64_t page_size = parse_size(a->args[3]);
	if (page_size == 0)
		return kvc_cli_fail(a->cli, "PAGE_SIZE must be a size (e.g. 2M), not '%s'",
		                    a->args[3]);
	int rc = kvc_meta_pool_bind(a->pools, ns, rank, path, page_size);
	if (rc == -ENOENT)
		fprintf(stderr, "kvc-admin: pool bind: no pool %s/%u or no file %s in the namespace\n",
		        ns, rank, path);
	else if (rc < 0)
		return report_error("pool bind", rc);
	return rc < 0 ? 1 : 0;
}

static int cmd_pool_unbind(struct admin *a)
{
	uint32_t rank;
	if (parse_number(a, "RANK", a->args[1], &rank))
		return 2;
	int rc = kvc_meta_pool_bind(a->pools, a->args[0], rank, NULL, 0);
	return rc < 0 ? report_error("pool unbind", rc) : 0;
}

static int cmd_pool_world(struct admin *a)
{
	uint32_t world;
	if (parse_number(a, "N", a->args[1], &world))
		return 2;
	int rc = kvc_meta_pool_set_world(a->pools, a->args[0], world);
	return rc < 0 ? report_error("pool world", rc) : 0;
}

/* The keys of a `key stat|delete|evict NS KEY...` command. Returns 0 (keys
 * filled) or 2 (reported; as in parse_number). */
static int key_operands(struct admin *a, struct kvc_meta_key *keys)
{
	int count = a->nargs - 1;
	if (count < 1 || count > KVC_META_MAX_BATCH) {
		kvc_cli_fail(a->cli, "give 1 to %d keys", KVC_META_MAX_BATCH);
		return 2;
	}
	for (int i = 0; i < count; i++)
		keys[i] = (struct kvc_meta_key){a->args[1 + i], (uint32_t)strlen(a->args[1 + i])};
	return 0;
}

static int cmd_key_delete(struct admin *a)
{
	struct kvc_meta_key keys[KVC_META_MAX_BATCH];
	if (key_operands(a, keys))
		return 2;
	int rc = kvc_meta_delete(a->pools, a->args[0], keys, (uint32_t)(a->nargs - 1));
	if (rc < 0)
		return report_error("key delete", rc);
	printf(a->json ? "{\"deleted\":%d}\n" : "%d key(s) deleted\n", rc);
	return 0;
}

static int cmd_key_stat(struct admin *a)
{
	struct kvc_meta_key keys[KVC_META_MAX_BATCH];
	bool found[KVC_META_MAX_BATCH];
	int count = a->nargs - 1;
	char **names = a->args + 1;
	if (key_operands(a, keys))
		return 2;
	int rc = kvc_meta_exists(a->pools, a->args[0], keys, (uint32_t)count, found);
	if (rc < 0)
		return report_error("key stat", rc);
	for (int i = 0; i < count; i++)
		printf(a->json ? "{\"key\":\"%s\",\"complete\":%s}\n" : "%-40s %s\n",
		       a->json ? JSON_STR(names[i]) : names[i],
		       found[i] ? (a->json ? "true" : "complete") : (a->json ? "false" : "absent"));
	return 0;
}

static int cmd_key_ls(struct admin *a)
{
	const char *ns = a->args[0];
	static struct kvc_meta_key_info keys[1024];
	struct kvc_meta_key after = {0};
	char last[KVC_META_MAX_KEY];
	bool more = true, first = true;
	if (!a->json)
		printf("%-40s %-9s %-7s %s\n", "KEY", "STATE", "RANKS", "LEASED UNTIL (ms)");
	else
		printf("[");
	while (more) {
		int n = kvc_meta_keys(a->pools, ns, after.length ? &after : NULL, 1024, keys, &more);
		if (n < 0)
			return report_error("key ls", n);
		for (int i = 0; i < n; i++) {
			const struct kvc_meta_key_info *k = &keys[i];
			if (a->json)
				printf("%s{\"key\":\"%.*s\",\"complete\":%s,\"confirmed\":%u,"
				       "\"world\":%u,\"lease_until_ms\":%llu}",
				       first ? "" : ",", (int)k->length, k->bytes,
				       k->complete ? "true" : "false", k->confirmed, k->world,
				       (unsigned long long)k->lease_until_ms);
			else
				printf("%-40.*s %-9s %u/%-5u %llu\n", (int)k->length, k->bytes,
				       k->complete ? "complete" : "partial", k->confirmed, k->world,
				       (unsigned long long)k->lease_until_ms);
			first = false;
		}
		if (n > 0) {
			memcpy(last, keys[n - 1].bytes, keys[n - 1].length);
			after = (struct kvc_meta_key){last, keys[n - 1].length};
		}
	}
	if (a->json)
		printf("]\n");
	return 0;
}

static int cmd_clear(struct admin *a)
{
	int rc = kvc_meta_clear(a->pools, a->args[0]);
	return rc < 0 ? report_error("clear", rc) : 0;
}

static int cmd_fsck(struct admin *a)
{
	int64_t problems = kvc_meta_pool_fsck(a->pools, a->repair);
	if (problems < 0)
		return report_error("fsck", (int)problems);
	printf(a->json ? "{\"problems\":%lld,\"repaired\":%s}\n" : "page pools: %lld problem(s)%s\n",
	       (long long)problems,
	       a->json ? (a->repair ? "true" : "false") : (problems && a->repair ? ", repaired" : ""));
	return problems && !a->repair ? 1 : 0;
}

static int cmd_ls(struct admin *a)
{
	const char *path = a->nargs ? a->args[0] : "/";
	struct kvc_attr attr;
	static struct kvc_meta_dirents page;
	int rc = resolve(a, path, &attr);
	char after[KVC_WIRE_MAX_NAME + 1] = "";
	if (rc < 0)
		return report_error(path, rc);
	do {
		rc = kvc_meta_client_readdir(&a->meta, attr.ino, after, 512, &page);
		const char *name;
		uint32_t len;
		struct kvc_attr child;
		while (rc == 0 && kvc_meta_client_dirent_next(&page, &name, &len, &child) == 1) {
			const char *shown = a->json ? JSON_STRN(name, len) : name;
			printf(a->json ? "{\"name\":\"%.*s\",\"inode\":%llu,\"size\":%llu,\"mode\":\"%o\"}\n"
			               : "%.*s\t%llu\t%llu\t%o\n",
			       a->json ? (int)strlen(shown) : (int)len, shown, (unsigned long long)child.ino,
			       (unsigned long long)child.size, child.mode);
			memcpy(after, name, len);
			after[len] = '\0';
		}
	} while (rc == 0 && page.more);
	return rc < 0 ? report_error(path, rc) : 0;
}

static int cmd_resync(struct admin *a)
{
	struct admin_resync *o = &a->resync;
	o->json = a->json;
	if (!a->resync_target)
		return kvc_cli_fail(a->cli, "--target T is required");
	if (!o->status_only && !a->resync_from)
		return kvc_cli_fail(a->cli, "--from P is required (or --status)");
	if (parse_number(a, "--target", a->resync_target, &o->target) ||
	    (a->resync_from && parse_number(a, "--from", a->resync_from, &o->source)))
		return 2;
	if (!o->status_only && o->source == o->target)
		return kvc_cli_fail(a->cli, "--from must name another target than --target");
	return admin_resync_run(&a->storage, o);
}

static int drain_command(struct admin *a, bool drain)
{
	uint32_t target;
	if (parse_number(a, "TARGET", a->args[0], &target))
		return 2;
	return admin_drain_run(&a->storage, &a->config, target, drain, a->json);
}

static int cmd_drain(struct admin *a)
{
	return drain_command(a, true);
}

static int cmd_undrain(struct admin *a)
{
	return drain_command(a, false);
}

static int cmd_add_host(struct admin *a)
{
	return admin_add_host_run(&a->storage, &a->config, a->args[0], a->json);
}

/* One row per command: adding a command is adding a row. */
static const struct command {
	const char *name;     /* one word, or a group's word and a verb */
	const char *operands; /* as usage shows them */
	int min, max;         /* operand count; max -1: any */
	int (*run)(struct admin *a);
	const char *heading;  /* in usage, before this row */
	const char *help;     /* '\n' continues the text on the next line */
} commands[] = {
	{"status", "", 0, 0, cmd_status, "cluster", "every daemon: address, health, capacity"},
	{"ls", "[PATH]", 0, 1, cmd_ls, "namespace",
	 "entries of a directory (PATH inside the\nnamespace; \"\" or / is the root, the default)"},
	{"stat", "PATH", 1, 1, cmd_stat, NULL, "attributes and layout of PATH"},
	{"layout", "PATH", 1, 1, cmd_stat, NULL, "the same as stat"},
	{"pool list", "", 0, 0, cmd_pool_list, "page pools", "every pool: pages, free, used"},
	{"pool show", "NS [RANK]", 1, 2, cmd_pool_show, NULL,
	 "world, pages, keys, leases, evictions"},
	{"pool world", "NS N", 2, 2, cmd_pool_world, NULL, "set the namespace's TP world size"},
	{"pool bind", "NS RANK PATH PAGE_SIZE", 4, 4, cmd_pool_bind, NULL,
	 "the pool's pages live in file PATH (of the\nnamespace): freed pages are punched out of it"},
	{"pool unbind", "NS RANK", 2, 2, cmd_pool_unbind, NULL, "stop punching"},
	{"rank show", "NS RANK", 2, 2, cmd_pool_show, NULL, "one rank's pool"},
	{"key ls", "NS", 1, 1, cmd_key_ls, NULL, "every key: state, ranks confirmed, lease"},
	{"key stat", "NS KEY...", 2, -1, cmd_key_stat, NULL, "whether keys are complete"},
	{"key delete", "NS KEY...", 2, -1, cmd_key_delete, NULL,
	 "delete keys (leased ones retire)"},
	{"key evict", "NS KEY...", 2, -1, cmd_key_delete, NULL, "the same as delete"},
	{"clear", "NS", 1, 1, cmd_clear, NULL, "delete every key of a namespace"},
	{"fsck", "[--repair]", 0, 0, cmd_fsck, NULL, "cross-check page accounting (and fix it)"},
	{"drain", "TARGET", 1, 1, cmd_drain, "chains",
	 "take TARGET out of its chain and keep it\nout (needs managers); waits until it is"},
	{"undrain", "TARGET", 1, 1, cmd_undrain, NULL,
	 "let a drained TARGET back in: it catches\nup, then serves; waits until it does"},
	{"add-host", "NAME", 1, 1, cmd_add_host, NULL,
	 "admit the pending host NAME (its kvc-storage\nruns with --join): its targets get ids and\nmake new chains; waits until the table has it"},
	{"resync", "--target T --from P [--no-wait] [--status]", 0, 0, cmd_resync, NULL,
	 "make target T hold what target P of its\nchain holds; prints progress until done\n"
	 "(--no-wait: start it only; --status: show\nT's last resync, start nothing)"},
};
#define COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct option common_options[] = {{"config", required_argument, 0, 'c'},
                                               {"json", no_argument, 0, 'j'},
                                               {0, 0, 0, 0}};
static const struct option fsck_options[] = {{"config", required_argument, 0, 'c'},
                                             {"json", no_argument, 0, 'j'},
                                             {"repair", no_argument, 0, 'r'},
                                             {0, 0, 0, 0}};

static const struct option resync_options[] = {{"config", required_argument, 0, 'c'},
                                              {"json", no_argument, 0, 'j'},
                                              {"target", required_argument, 0, 't'},
                                              {"from", required_argument, 0, 'f'},
                                              {"status", no_argument, 0, 's'},
                                              {"no-wait", no_argument, 0, 'n'},
                                              {0, 0, 0, 0}};

/* Whether command c's name starts with word (its group or its name). */
static bool in_group(const struct command *c, const char *word)
{
	size_t n = strlen(word);
	return strncmp(c->name, word, n) == 0 && (c->name[n] == ' ' || c->name[n] == '\0');
}

/* One command's lines of usage. */
static void print_command(FILE *out, const struct command *c)
{
	char synopsis[64];
	snprintf(synopsis, sizeof(synopsis), "%s%s%s", c->name, *c->operands ? " " : "",
	         c->operands);
	if (strlen(synopsis) <= 25)
		fprintf(out, "  %-26s", synopsis);
	else
		fprintf(out, "  %s\n%28s", synopsis, "");
	for (const char *h = c->help;;) {
		const char *nl = strchr(h, '\n');
		fprintf(out, "%.*s", nl ? (int)(nl - h) : (int)strlen(h), h);
		if (!nl)
			break;
		fprintf(out, "\n%28s", "");
		h = nl + 1;
	}
	fputc('\n', out);
}

/* The --help text: of every command (word NULL), of a group (word "pool")
 * or of one command (one set). Owned by the caller; NULL without memory. */
static char *make_usage(const char *word, const struct command *one)
{
	char *text = NULL;
	size_t size = 0;
	FILE *out = open_memstream(&text, &size);
	if (!out)
		return NULL;
	if (one)
		fprintf(out, "usage: kvc-admin %s%s%s [--config FILE] [--json]\n", one->name,
		        *one->operands ? " " : "", one->operands);
	else if (word)
		fprintf(out, "usage: kvc-admin %s VERB ... [--config FILE] [--json]\n", word);
	else
		fprintf(out, "usage: kvc-admin [--config FILE] [--json] COMMAND ...\n");
	for (size_t i = 0; i < COMMANDS; i++) {
		const struct command *c = &commands[i];
		if ((one && c != one) || (word && !in_group(c, word)))
			continue;
		if (c->heading && !word && !one)
			fprintf(out, "%s:\n", c->heading);
		print_command(out, c);
	}
	fprintf(out, "FILE defaults to $KVC_CONFIG, then /var/lib/kvc/cluster.conf; --json\n"
	             "prints JSON. 'kvc-admin COMMAND --help' describes one command.\n");
	fclose(out);
	return text;
}

/* The command named by argv[0] (and argv[1]), or NULL. *words: how many
 * words its name took. */
static const struct command *find_command(int argc, char **argv, int *words)
{
	for (size_t i = 0; i < COMMANDS; i++) {
		const struct command *c = &commands[i];
		const char *space = strchr(c->name, ' ');
		if (!space && strcmp(c->name, argv[0]) == 0) {
			*words = 1;
			return c;
		}
		if (space && argc >= 2 && in_group(c, argv[0]) && strcmp(space + 1, argv[1]) == 0) {
			*words = 2;
			return c;
		}
	}
	return NULL;
}

/* Whether word names a group of commands (pool, rank, key). */
static bool is_group(const char *word)
{
	for (size_t i = 0; i < COMMANDS; i++)
		if (strchr(commands[i].name, ' ') && in_group(&commands[i], word))
			return true;
	return false;
}

/* A group's word without a known verb after it (argv[0] the group): the
 * group's usage on --help, else what is wrong. Returns the exit status. */
static int group_only(int argc, char **argv)
{
	char name[64];
	snprintf(name, sizeof(name), "kvc-admin %s", argv[0]);
	char *usage = make_usage(argv[0], NULL);
	struct kvc_cli cli = {name, usage ? usage : "", "c:j", common_options, 1};
	int opt;
	optind = 0;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0)
		;
	int status = opt != KVC_CLI_END ? kvc_cli_status(opt)
	             : optind < argc   ? kvc_cli_fail(&cli, "unknown command '%s %s'", argv[0],
	                                              argv[optind])
	                               : kvc_cli_fail(&cli, "which one? (--help lists them)");
	free(usage);
	return status;
}

/* Options and operands of command c (argv[0] the last word of its name)
 * into a. Returns KVC_CLI_END when the command is to run, else
 * KVC_CLI_HELP (usage printed) or KVC_CLI_BAD (reported). */
static int parse_command(struct admin *a, const struct command *c, int argc, char **argv,
                         const char **config_path)
{
	static char name[64];
	static struct kvc_cli cli; /* a->cli: the command's errors name it */
	bool fsck = c->run == cmd_fsck, resync = c->run == cmd_resync;
	char *usage = make_usage(NULL, c);
	snprintf(name, sizeof(name), "kvc-admin %s", c->name);
	cli = (struct kvc_cli){name, usage ? usage : "",
	                       fsck ? "c:jr" : resync ? "c:jt:f:sn" : "c:j",
	                       fsck ? fsck_options : resync ? resync_options : common_options, 0};
	a->cli = &cli;
	int opt;
	optind = 0;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': *config_path = optarg; break;
		case 'j': a->json = true; break;
		case 'r': a->repair = true; break;
		case 't': a->resync_target = optarg; break;
		case 'f': a->resync_from = optarg; break;
		case 's': a->resync.status_only = true; break;
		case 'n': a->resync.no_wait = true; break;
		}
	}
	free(usage);
	cli.usage = ""; /* freed; what follows only reports errors */
	a->args = argv + optind;
	a->nargs = argc - optind;
	if (opt != KVC_CLI_END)
		return opt;
	if (c->max == 0 && a->nargs > 0) {
		kvc_cli_fail(&cli, "takes no operand, not '%s'", a->args[0]);
		return KVC_CLI_BAD;
	}
	if (a->nargs < c->min || (c->max >= 0 && a->nargs > c->max)) {
		kvc_cli_fail(&cli, "operands: %s", c->operands);
		return KVC_CLI_BAD;
	}
	return KVC_CLI_END;
}

int main(int argc, char **argv)
{
	static struct admin a;
	const char *config_path = getenv("KVC_CONFIG");
	char *usage = make_usage(NULL, NULL);
	struct kvc_cli cli = {"kvc-admin", usage ? usage : "", "c:j", common_options, 1};
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'j': a.json = true; break;
		}
	}
	free(usage);
	cli.usage = "";
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (optind >= argc)
		return kvc_cli_fail(&cli, "a COMMAND is required");
	int first = optind, words = 0;
	const struct command *c = find_command(argc - first, argv + first, &words);
	if (!c && is_group(argv[first]))
		return group_only(argc - first, argv + first);
	if (!c)
		return kvc_cli_fail(&cli, "unknown command '%s'", argv[first]);
	first += words - 1;
	opt = parse_command(&a, c, argc - first, argv + first, &config_path);
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (!config_path)
		config_path = "/var/lib/kvc/cluster.conf";
	if (kvc_config_load_reported("kvc-admin", config_path, &a.config) < 0)
		return 1;
	/* The cluster secret opens every command; a user who may read only
	 * the pool secret gets the page-pool commands (not pool bind). */
	char err[512];
	if (kvc_config_load_secret(&a.config, KVC_AUTH_CLUSTER, err, sizeof(err)) < 0 &&
	    kvc_config_load_secret(&a.config, KVC_AUTH_POOL, err, sizeof(err)) < 0 &&
	    kvc_config_load_secret_reported("kvc-admin", &a.config, KVC_AUTH_CLUSTER) < 0)
		return 1;
	if (kvc_meta_client_init(&a.meta, &a.config) < 0 ||
	    kvc_storage_client_init(&a.storage, &a.config) < 0 ||
	    kvc_meta_open_cred(&a.pools, a.config.meta_address, &a.config.cred) < 0) {
		fprintf(stderr, "kvc-admin: cannot set up clients\n");
		return 1;
	}
	if (a.config.manager_count && kvc_storage_client_refresh(&a.storage) < 0)
		fprintf(stderr, "kvc-admin: no manager answered: the cluster file's chains\n");
	return c->run(&a);
}
