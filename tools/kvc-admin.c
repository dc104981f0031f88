/*
 * kvc-admin: the administrator's command line (see usage() and
 * docs/operations.md). Every command prints a human table, or JSON with
 * --json, and exits non-zero with a clear message on failure.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/config.h"
#include "kvc/meta.h"
#include "core/layout.h"
#include "client/meta_client.h"
#include "client/storage_client.h"

struct admin {
	struct kvc_config config;
	struct kvc_meta_client meta;
	struct kvc_storage_client storage;
	struct kvc_meta *pools;
	bool json;
};

static int report_error(const char *what, int rc)
{
	fprintf(stderr, "kvc-admin: %s: %s\n", what, strerror(-rc));
	return 1;
}

static int cmd_status(struct admin *a)
{
	struct kvc_msg_statfs_reply names = {0};
	int failures = 0;
	int rc = kvc_meta_client_statfs(&a->meta, &names);
	failures += rc < 0;
	if (a->json)
		printf("{\"meta\":{\"address\":\"%s\",\"up\":%s,\"inodes\":%" PRIu64
		       ",\"open_sessions\":%" PRIu64 ",\"removed_but_open\":%" PRIu64
		       ",\"reclaim_pending\":%" PRIu64 "},\"storage\":[",
		       a->config.meta_address, rc == 0 ? "true" : "false", names.inodes,
		       names.open_sessions, names.orphans, names.gc_pending);
	else
		printf("%-8s %-10s %-22s %-6s %s\n%-8s %-10s %-22s %-6s %s\n", "ROLE", "NAME", "ADDRESS",
		       "HEALTH", "DETAIL", "meta", "meta", a->config.meta_address,
		       rc == 0 ? "up" : "DOWN",
		       rc == 0 ? "namespace served" : strerror(-rc));
	if (!a->json && rc == 0)
		printf("%52s inodes: %" PRIu64 "; files open: %" PRIu64 " (file, client) pairs\n"
		       "%52s removed but still open: %" PRIu64 "; removed, chunks to reclaim: %" PRIu64
		       "\n", "", names.inodes, names.open_sessions, "", names.orphans, names.gc_pending);
	for (uint32_t s = 0; s < a->config.server_count; s++) {
		struct kvc_msg_target_space t[KVC_WIRE_MAX_TARGETS];
		int count = kvc_storage_client_server_space(&a->storage, s, t, KVC_WIRE_MAX_TARGETS);
		const struct kvc_config_server *srv = &a->config.servers[s];
		failures += count < 0;
		if (a->json) {
			printf("%s{\"name\":\"%s\",\"address\":\"%s\",\"up\":%s,\"targets\":[", s ? "," : "",
			       srv->name, srv->address, count >= 0 ? "true" : "false");
			for (int i = 0; i < count; i++)
				printf("%s{\"id\":%u,\"total_bytes\":%" PRIu64 ",\"free_bytes\":%" PRIu64
				       ",\"chunks\":%" PRIu64 "}",
				       i ? "," : "", t[i].target, t[i].total_bytes, t[i].free_bytes,
				       t[i].chunks);
			printf("]}");
			continue;
		}
		printf("%-8s %-10s %-22s %-6s %s\n", "storage", srv->name, srv->address,
		       count >= 0 ? "up" : "DOWN",
		       count >= 0 ? "" : strerror(-count));
		for (int i = 0; i < count; i++)
			printf("%52s target %u: %" PRIu64 " chunks, %.1f GiB free of %.1f GiB\n", "",
			       t[i].target, t[i].chunks, t[i].free_bytes / 1073741824.0,
			       t[i].total_bytes / 1073741824.0);
	}
	struct kvc_meta_pool_entry pools[256];
	int npools = kvc_meta_pool_list(a->pools, pools, 256);
	if (a->json) {
		printf("],\"pools\":[");
		for (int i = 0; i < npools; i++)
			printf("%s{\"namespace\":\"%s\",\"rank\":%u,\"pages\":%u,\"free\":%u}",
			       i ? "," : "", pools[i].ns, pools[i].rank, pools[i].num_pages,
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

static int cmd_stat(struct admin *a, const char *path)
{
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
		       l->stripe, l->first_target, l->target_count);
	else
		printf("inode %" PRIu64 "\nsize %" PRIu64 "\nmode %o\nowner %u:%u\nnlink %u\n"
		       "layout chunk_size=%u stripe=%u first_target=%u of %u targets\n",
		       attr.ino, attr.size, attr.mode, attr.uid, attr.gid, attr.nlink, l->chunk_size,
		       l->stripe, l->first_target, l->target_count);
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
			       i ? "," : "", e->ns, e->rank, e->num_pages, e->free_pages);
		else
			printf("%-20s %5u %10u %10u %10u\n", e->ns, e->rank, e->num_pages, e->free_pages,
			       e->num_pages - e->free_pages);
	}
	if (a->json)
		printf("]\n");
	return 0;
}

static int cmd_pool_show(struct admin *a, const char *ns, uint32_t rank)
{
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
		       ns, rank, st.world_size, st.ranks, (unsigned long long)st.num_pages,
		       (unsigned long long)st.free_pages, (unsigned long long)st.keys,
		       (unsigned long long)st.complete_keys, (unsigned long long)st.leased_keys,
		       (unsigned long long)st.retired_keys, (unsigned long long)st.evictions);
		if (bound == 0)
			printf(",\"file\":\"%s\",\"page_size\":%llu,\"punch_pending\":%llu", b.path,
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

static int cmd_pool_bind(struct admin *a, int argc, char **argv)
{
	const char *ns = argv[2];
	uint32_t rank = (uint32_t)atoi(argv[3]);
	if (strcmp(argv[1], "unbind") == 0) {
		int rc = kvc_meta_pool_bind(a->pools, ns, rank, NULL, 0);
		return rc < 0 ? report_error("pool unbind", rc) : 0;
	}
	uint64_t page_size = argc == 6 ? parse_size(argv[5]) : 0;
	if (page_size == 0) {
		fprintf(stderr, "kvc-admin: pool bind NS RANK PATH PAGE_SIZE (e.g. 2M)\n");
		return 2;
	}
	int rc = kvc_meta_pool_bind(a->pools, ns, rank, argv[4], page_size);
	if (rc == -ENOENT)
		fprintf(stderr, "kvc-admin: pool bind: no pool %s/%u or no file %s in the namespace\n",
		        ns, rank, argv[4]);
	else if (rc < 0)
		return report_error("pool bind", rc);
	return rc < 0 ? 1 : 0;
}

static int cmd_keys(struct admin *a, const char *verb, const char *ns, int count, char **names)
{
	struct kvc_meta_key keys[KVC_META_MAX_BATCH];
	bool found[KVC_META_MAX_BATCH];
	if (count <= 0 || count > KVC_META_MAX_BATCH) {
		fprintf(stderr, "kvc-admin: give 1 to %d keys\n", KVC_META_MAX_BATCH);
		return 2;
	}
	for (int i = 0; i < count; i++)
		keys[i] = (struct kvc_meta_key){names[i], (uint32_t)strlen(names[i])};
	if (strcmp(verb, "delete") == 0 || strcmp(verb, "evict") == 0) {
		int rc = kvc_meta_delete(a->pools, ns, keys, (uint32_t)count);
		if (rc < 0)
			return report_error("key delete", rc);
		printf(a->json ? "{\"deleted\":%d}\n" : "%d key(s) deleted\n", rc);
		return 0;
	}
	int rc = kvc_meta_exists(a->pools, ns, keys, (uint32_t)count, found);
	if (rc < 0)
		return report_error("key stat", rc);
	for (int i = 0; i < count; i++)
		printf(a->json ? "{\"key\":\"%s\",\"complete\":%s}\n" : "%-40s %s\n", names[i],
		       found[i] ? (a->json ? "true" : "complete") : (a->json ? "false" : "absent"));
	return 0;
}

static int cmd_key_ls(struct admin *a, const char *ns)
{
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

static int cmd_pools(struct admin *a, int argc, char **argv)
{
	const char *cmd = argv[0];
	if (strcmp(cmd, "pool") == 0 && argc >= 2 && strcmp(argv[1], "list") == 0)
		return cmd_pool_list(a);
	if (strcmp(cmd, "pool") == 0 && argc >= 3 && strcmp(argv[1], "show") == 0)
		return cmd_pool_show(a, argv[2], argc >= 4 ? (uint32_t)atoi(argv[3]) : 0);
	if (strcmp(cmd, "rank") == 0 && argc >= 4 && strcmp(argv[1], "show") == 0)
		return cmd_pool_show(a, argv[2], (uint32_t)atoi(argv[3]));
	if (strcmp(cmd, "pool") == 0 && ((argc >= 5 && strcmp(argv[1], "bind") == 0) ||
	                                 (argc == 4 && strcmp(argv[1], "unbind") == 0)))
		return cmd_pool_bind(a, argc, argv);
	if (strcmp(cmd, "pool") == 0 && argc == 4 && strcmp(argv[1], "world") == 0) {
		int rc = kvc_meta_pool_set_world(a->pools, argv[2], (uint32_t)atoi(argv[3]));
		return rc < 0 ? report_error("pool world", rc) : 0;
	}
	if (strcmp(cmd, "key") == 0 && argc == 3 && strcmp(argv[1], "ls") == 0)
		return cmd_key_ls(a, argv[2]);
	if (strcmp(cmd, "key") == 0 && argc >= 4)
		return cmd_keys(a, argv[1], argv[2], argc - 3, argv + 3);
	if (strcmp(cmd, "clear") == 0 && argc == 2) {
		int rc = kvc_meta_clear(a->pools, argv[1]);
		return rc < 0 ? report_error("clear", rc) : 0;
	}
	if (strcmp(cmd, "fsck") == 0) {
		bool repair = argc >= 2 && strcmp(argv[1], "--repair") == 0;
		int64_t problems = kvc_meta_pool_fsck(a->pools, repair);
		if (problems < 0)
			return report_error("fsck", (int)problems);
		printf(a->json ? "{\"problems\":%lld,\"repaired\":%s}\n"
		               : "page pools: %lld problem(s)%s\n",
		       (long long)problems,
		       a->json ? (repair ? "true" : "false") : (problems && repair ? ", repaired" : ""));
		return problems && !repair ? 1 : 0;
	}
	return -1;
}

static int cmd_ls(struct admin *a, const char *path)
{
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
			printf(a->json ? "{\"name\":\"%.*s\",\"inode\":%llu,\"size\":%llu,\"mode\":\"%o\"}\n"
			               : "%.*s\t%llu\t%llu\t%o\n",
			       (int)len, name, (unsigned long long)child.ino,
			       (unsigned long long)child.size, child.mode);
			memcpy(after, name, len);
			after[len] = '\0';
		}
	} while (rc == 0 && page.more);
	return rc < 0 ? report_error(path, rc) : 0;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: kvc-admin [--config FILE] [--json] COMMAND\n"
	             "cluster:\n"
	             "  status                    every daemon: address, health, capacity\n"
	             "namespace:\n"
	             "  ls PATH | stat PATH       entries / attributes and layout (PATH inside\n"
	             "  layout PATH               the namespace; \"\" or / is the root)\n"
	             "page pools:\n"
	             "  pool list                 every pool: pages, free, used\n"
	             "  pool show NS [RANK]       world, pages, keys, leases, evictions\n"
	             "  pool world NS N           set the namespace's TP world size\n"
	             "  pool bind NS RANK PATH PAGE_SIZE\n"
	             "                            the pool's pages live in file PATH (of the\n"
	             "                            namespace): freed pages are punched out of it\n"
	             "  pool unbind NS RANK       stop punching\n"
	             "  rank show NS RANK         one rank's pool\n"
	             "  key ls NS                 every key: state, ranks confirmed, lease\n"
	             "  key stat NS KEY...        whether keys are complete\n"
	             "  key delete NS KEY...      delete keys (leased ones retire)\n"
	             "  key evict NS KEY...       the same as delete\n"
	             "  clear NS                  delete every key of a namespace\n"
	             "  fsck [--repair]           cross-check page accounting\n"
	             "FILE defaults to $KVC_CONFIG, then /var/lib/kvc/cluster.conf.\n");
}

int main(int argc, char **argv)
{
	static struct option options[] = {{"config", required_argument, 0, 'c'},
	                                  {"json", no_argument, 0, 'j'},
	                                  {"help", no_argument, 0, 'h'},
	                                  {0, 0, 0, 0}};
	static struct admin a;
	const char *config_path = getenv("KVC_CONFIG");
	int opt;
	while ((opt = getopt_long(argc, argv, "c:jh", options, NULL)) != -1) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'j': a.json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (!config_path)
		config_path = "/var/lib/kvc/cluster.conf";
	if (kvc_config_load_reported("kvc-admin", config_path, &a.config) < 0)
		return 1;
	if (kvc_meta_client_init(&a.meta, &a.config) < 0 ||
	    kvc_storage_client_init(&a.storage, &a.config) < 0 ||
	    kvc_meta_open(&a.pools, a.config.meta_address, a.config.token) < 0) {
		fprintf(stderr, "kvc-admin: cannot set up clients\n");
		return 1;
	}
	const char *cmd = argv[optind];
	if (strcmp(cmd, "status") == 0)
		return cmd_status(&a);
	if ((strcmp(cmd, "stat") == 0 || strcmp(cmd, "layout") == 0) && optind + 1 < argc)
		return cmd_stat(&a, argv[optind + 1]);
	if (strcmp(cmd, "ls") == 0)
		return cmd_ls(&a, optind + 1 < argc ? argv[optind + 1] : "/");
	int rc = cmd_pools(&a, argc - optind, argv + optind);
	if (rc >= 0)
		return rc;
	usage(stderr);
	return 2;
}
