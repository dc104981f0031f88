/*
 * kvc-meta: the metadata service. Owns the namespace in LMDB (directory
 * [meta] data of the cluster file), serves it over the binary protocol,
 * reclaims removed files' chunks and syncs LMDB every sync_interval_ms.
 *
 *   kvc-meta --config FILE [--verbose]
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "meta/collector.h"
#include "meta/http.h"
#include "meta/service.h"
#include "core/net.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: kvc-meta --config FILE [--verbose]\n"
	             "       kvc-meta --config FILE --fsck [--repair]\n"
	             "Serves the namespace and page pools of the cluster described by FILE;\n"
	             "--fsck checks the page pools' accounting of a stopped kvc-meta (and\n"
	             "with --repair fixes it), then exits: 0 clean, 1 problems found.\n");
}

/* Offline: check (or repair) the page pools and report. */
static int run_fsck(const struct kvc_config *config, bool repair)
{
	char dir[PATH_MAX + 8];
	struct kvc_pool_store *pools;
	snprintf(dir, sizeof(dir), "%s/pools", config->meta_data);
	int rc = kvc_pool_store_open(dir, &pools);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot open %s: %s\n", dir, strerror(-rc));
		return 2;
	}
	int64_t problems = kvc_pool_fsck(pools, repair);
	kvc_pool_store_close(pools);
	if (problems < 0) {
		fprintf(stderr, "kvc-meta: fsck failed: %s\n", strerror((int)-problems));
		return 2;
	}
	printf("page pools: %lld problem(s)%s\n", (long long)problems,
	       problems && repair ? ", repaired" : "");
	return problems ? 1 : 0;
}

struct syncer {
	struct kvc_meta_store *store;
	struct kvc_pool_store *pools;
	int interval_ms;
};

static void *sync_main(void *arg)
{
	struct syncer *s = arg;
	for (;;) {
		usleep((useconds_t)s->interval_ms * 1000);
		/* Retired keys (deleted under a lease) give their pages back once
		 * the lease ends, even in a pool that never fills. */
		kvc_pool_sweep(s->pools, kvc_pool_now_ms(s->pools));
		int rc = kvc_meta_store_sync(s->store);
		if (rc == 0)
			rc = kvc_pool_store_sync(s->pools);
		if (rc < 0)
			kvc_log_error("sync: %s", strerror(-rc));
	}
	return NULL;
}

static void stop_service(void *arg)
{
	struct kvc_meta_service *svc = arg;
	kvc_meta_store_sync(svc->store);
	if (svc->pools)
		kvc_pool_store_sync(svc->pools);
}

/* The page pools and their HTTP front (when [meta] http is set). */
static int start_pools(const struct kvc_config *config, struct kvc_meta_service *svc)
{
	char dir[PATH_MAX + 8];
	snprintf(dir, sizeof(dir), "%s/pools", config->meta_data);
	int rc = kvc_pool_store_open(dir, &svc->pools);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot open the page pools in %s: %s\n", dir,
		        rc == -EINVAL ? "not a kvcfs pool store of this format" : strerror(-rc));
		return rc;
	}
	if (config->http_address[0] == '\0')
		return 0;
	struct kvc_http_options http = {.address = config->http_address,
	                                 .max_body = config->http_max_body,
	                                 .lease_ms = config->lease_ms,
	                                 .world_size = config->world_size,
	                                 .vllm_namespace = config->vllm_namespace,
	                                 .threads = config->http_threads};
	static struct kvc_http_server *server;
	rc = kvc_http_start(&http, svc->pools, &server);
	if (rc < 0)
		fprintf(stderr, "kvc-meta: cannot serve HTTP on %s: %s\n", config->http_address,
		        strerror(-rc));
	else
		kvc_log_info("page pools over HTTP on %s", config->http_address);
	return rc;
}

int main(int argc, char **argv)
{
	static struct option options[] = {{"config", required_argument, 0, 'c'},
	                                  {"fsck", no_argument, 0, 'f'},
	                                  {"repair", no_argument, 0, 'r'},
	                                  {"verbose", no_argument, 0, 'v'},
	                                  {"help", no_argument, 0, 'h'},
	                                  {0, 0, 0, 0}};
	const char *config_path = NULL;
	enum kvc_log_level level = KVC_LOG_INFO;
	bool fsck = false, repair = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "c:frvh", options, NULL)) != -1) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'f': fsck = true; break;
		case 'r': repair = true; break;
		case 'v': level = KVC_LOG_DEBUG; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!config_path) {
		usage(stderr);
		return 2;
	}
	kvc_log_setup("kvc-meta", level);

	static struct kvc_config config;
	if (kvc_config_load_reported("kvc-meta", config_path, &config) < 0)
		return 1;
	if (config.meta_data[0] == '\0') {
		fprintf(stderr, "kvc-meta: bad config: %s: [meta] data is missing\n", config_path);
		return 1;
	}
	if (fsck)
		return run_fsck(&config, repair);
	struct kvc_layout defaults = {.chunk_size = config.chunk_size, .stripe = config.stripe,
	                              .target_count = config.target_count};
	static struct kvc_meta_service svc;
	static struct kvc_storage_client storage;
	int rc = kvc_meta_store_open(config.meta_data, &defaults, &svc.store);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot open %s: %s\n", config.meta_data,
		        rc == -EINVAL ? "not a kvcfs meta store of this format" : strerror(-rc));
		return 1;
	}
	rc = kvc_storage_client_init(&storage, &config);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: storage client: %s\n", strerror(-rc));
		return 1;
	}
	svc.storage = &storage;
	int listen_fd = kvc_net_listen(config.meta_address);
	if (listen_fd < 0) {
		fprintf(stderr, "kvc-meta: cannot listen on %s: %s\n", config.meta_address,
		        strerror(-listen_fd));
		return 1;
	}
	if (start_pools(&config, &svc) < 0)
		return 1;
	if (kvc_server_handle_signals(stop_service, &svc) < 0)
		return 1;
	rc = kvc_meta_sessions_create(config.client_timeout_ms, &svc.sessions);
	if (rc == 0)
		rc = kvc_meta_collector_start(svc.store, svc.pools, svc.sessions, &storage, 1000,
		                              &svc.collector);
	static struct syncer syncer;
	syncer = (struct syncer){svc.store, svc.pools, config.sync_interval_ms};
	pthread_t sync_thread;
	if (rc == 0 && config.sync_interval_ms > 0)
		rc = -pthread_create(&sync_thread, NULL, sync_main, &syncer);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot start threads: %s\n", strerror(-rc));
		return 1;
	}
	kvc_log_info("serving the namespace from %s on %s", config.meta_data,
	             config.meta_address);
	static struct kvc_server server;
	server = (struct kvc_server){.listen_fd = listen_fd, .token = config.token,
	                             .max_connections = 4096,
	                             .handle = kvc_meta_service_handle, .service = &svc,
	                             .name = "kvc-meta"};
	rc = kvc_server_run(&server);
	kvc_log_error("accept failed: %s", strerror(-rc));
	return 1;
}
