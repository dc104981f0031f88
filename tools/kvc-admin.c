/*
 * kvc-admin: the administrator's command line.
 *
 *   kvc-admin [--config FILE] [--json] status
 *       every daemon of the cluster: address, health, capacity
 *   kvc-admin [--config FILE] [--json] stat PATH-IN-NAMESPACE
 *       an inode's attributes and layout, straight from kvc-meta
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "layout.h"
#include "meta_client.h"
#include "storage_client.h"

struct admin {
	struct kvc_config config;
	struct kvc_meta_client meta;
	struct kvc_storage_client storage;
	bool json;
};

static int cmd_status(struct admin *a)
{
	struct kvc_msg_statfs_reply names;
	int failures = 0;
	int rc = kvc_meta_client_statfs(&a->meta, &names);
	failures += rc < 0;
	if (a->json)
		printf("{\"meta\":{\"address\":\"%s\",\"up\":%s,\"inodes\":%" PRIu64 "},\"storage\":[",
		       a->config.meta_address, rc == 0 ? "true" : "false", rc == 0 ? names.inodes : 0);
	else
		printf("%-8s %-10s %-22s %-6s %s\n%-8s %-10s %-22s %-6s %s\n", "ROLE", "NAME", "ADDRESS",
		       "HEALTH", "DETAIL", "meta", "meta", a->config.meta_address,
		       rc == 0 ? "up" : "DOWN",
		       rc == 0 ? "namespace served" : strerror(-rc));
	if (!a->json && rc == 0)
		printf("%52s inodes: %" PRIu64 "\n", "", names.inodes);
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
	if (a->json)
		printf("],\"healthy\":%s}\n", failures ? "false" : "true");
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

static void usage(FILE *out)
{
	fprintf(out, "usage: kvc-admin [--config FILE] [--json] COMMAND\n"
	             "commands:\n"
	             "  status       every daemon: address, health, capacity\n"
	             "  stat PATH    attributes and layout of PATH (inside the namespace)\n"
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
	char err[512];
	if (kvc_config_load(config_path, &a.config, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvc-admin: bad config: %s\n", err);
		return 1;
	}
	if (kvc_meta_client_init(&a.meta, &a.config) < 0 ||
	    kvc_storage_client_init(&a.storage, &a.config) < 0) {
		fprintf(stderr, "kvc-admin: cannot set up clients\n");
		return 1;
	}
	const char *cmd = argv[optind];
	if (strcmp(cmd, "status") == 0)
		return cmd_status(&a);
	if (strcmp(cmd, "stat") == 0 && optind + 1 < argc)
		return cmd_stat(&a, argv[optind + 1]);
	usage(stderr);
	return 2;
}
