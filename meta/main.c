/*
 * kvc-meta: the metadata service. Owns the namespace in LMDB (directory
 * [meta] data of the cluster file), serves it over the binary protocol,
 * reclaims removed files' chunks and syncs LMDB every sync_interval_ms.
 *
 *   kvc-meta --config FILE [--verbose]
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/chains.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "core/metrics.h"
#include "meta/collector.h"
#include "meta/http.h"
#include "meta/service.h"
#include "core/net.h"

static const char usage[] =
	"usage: kvc-meta --config FILE [--verbose]\n"
	"       kvc-meta --config FILE --fsck [--repair]\n"
	"Serves the namespace and page pools of the cluster described by FILE;\n"
	"--fsck checks the page pools' accounting of a stopped kvc-meta (and\n"
	"with --repair fixes it), then exits: 0 clean, 1 problems found.\n"
	"  -c, --config FILE   the cluster file\n"
	"  -f, --fsck          check the page pools and exit\n"
	"  -r, --repair        with --fsck: fix what it finds\n"
	"  -v, --verbose       log debug records too\n"
	"  -h, --help          this text\n";

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
	if (svc->watches)
		kvc_meta_watches_stop(svc->watches);
	kvc_meta_store_sync(svc->store);
	if (svc->pools)
		kvc_pool_store_sync(svc->pools);
}

/* The page pools and their HTTP front (when [meta] http is set), whose
 * GET /metrics also renders `metrics`. */
static int start_pools(const struct kvc_config *config, struct kvc_meta_service *svc,
                       struct kvc_metrics *metrics)
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
	static struct kvc_auth_key token;
	char err[PATH_MAX + 128];
	if (config->http_token_file[0]) {
		rc = kvc_auth_key_load(config->http_token_file, true, &token, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "kvc-meta: cannot use the HTTP token: %s\n", err);
			return rc;
		}
	}
	struct kvc_http_options http = {.address = config->http_address,
	                                 .max_body = config->http_max_body,
	                                 .lease_ms = config->lease_ms,
	                                 .world_size = config->world_size,
	                                 .vllm_namespace = config->vllm_namespace,
	                                 .threads = config->http_threads,
	                                 .token = token.length ? (const char *)token.bytes : NULL,
	                                 .token_length = token.length,
	                                 .destructive = config->http_destructive,
	                                 .space = svc->space,
	                                 .metrics = metrics};
	static struct kvc_http_server *server;
	rc = kvc_http_start(&http, svc->pools, &server);
	if (rc < 0)
		fprintf(stderr, "kvc-meta: cannot serve HTTP on %s: %s\n", config->http_address,
		        strerror(-rc));
	else
		kvc_log_info("page pools over HTTP on %s", config->http_address);
	return rc;
}

/* The chains new files stripe over: the routing table's count. Waits up
 * to WAIT_CHAINS_MS for a table with chains (a cluster file that names
 * no storage servers: the managers' table). Returns 0 when none came. */
#define WAIT_CHAINS_MS 60000
static uint32_t wait_chains(struct kvc_storage_client *storage)
{
	static struct kvc_chains t;
	int64_t deadline = (int64_t)kvc_clock_monotonic_ns() + WAIT_CHAINS_MS * 1000000ll;
	kvc_storage_client_chains(storage, &t);
	while (t.count == 0 && (int64_t)kvc_clock_monotonic_ns() < deadline) {
		kvc_storage_client_wait_routing(storage, t.version, 1000);
		kvc_storage_client_chains(storage, &t);
	}
	return t.count;
}

/* New files stripe over the table's chains as it grows (kvc-admin
 * add-host); a file keeps the chains it was made with. */
struct chain_follow {
	struct kvc_storage_client *storage;
	struct kvc_meta_store *store;
};

static void *follow_chains(void *arg)
{
	struct chain_follow *f = arg;
	static struct kvc_chains t;
	for (;;) {
		kvc_storage_client_chains(f->storage, &t);
		kvc_meta_store_set_chain_count(f->store, t.count);
		kvc_storage_client_wait_routing(f->storage, t.version, 10000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {{"config", required_argument, 0, 'c'},
	                                        {"fsck", no_argument, 0, 'f'},
	                                        {"repair", no_argument, 0, 'r'},
	                                        {"verbose", no_argument, 0, 'v'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-meta", usage, "c:frv", options, 0};
	const char *config_path = NULL;
	enum kvc_log_level level = KVC_LOG_INFO;
	bool fsck = false, repair = false;
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'f': fsck = true; break;
		case 'r': repair = true; break;
		case 'v': level = KVC_LOG_DEBUG; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (!config_path)
		return kvc_cli_fail(&cli, "--config FILE is required");
	if (repair && !fsck)
		return kvc_cli_fail(&cli, "--repair goes with --fsck");
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	kvc_log_setup("kvc-meta", level);
	kvc_server_tune_memory(4u << 20, 16u << 20); /* its request buffers */

	static struct kvc_config config;
	if (kvc_config_load_reported("kvc-meta", config_path, &config) < 0)
		return 1;
	if (config.meta_data[0] == '\0') {
		fprintf(stderr, "kvc-meta: bad config: %s: [meta] data is missing\n", config_path);
		return 1;
	}
	if (fsck)
		return run_fsck(&config, repair);
	/* The cluster secret opens everything (and is what kvc-meta proves to
	 * the storage servers); the pool secret, when the file names one,
	 * opens the page-pool messages only (meta/service.c). */
	static struct kvc_auth_keys keys;
	if (config.pool_secret_file[0]) {
		if (kvc_config_load_secret_reported("kvc-meta", &config, KVC_AUTH_POOL) < 0)
			return 1;
		keys.keys[KVC_AUTH_POOL] = config.cred.key;
	}
	if (kvc_config_load_secret_reported("kvc-meta", &config, KVC_AUTH_CLUSTER) < 0)
		return 1;
	keys.keys[KVC_AUTH_CLUSTER] = config.cred.key;
	static struct kvc_meta_service svc;
	static struct kvc_storage_client storage;
	int rc = kvc_storage_client_init(&storage, &config);
	if (rc == 0)
		rc = kvc_storage_client_follow(&storage); /* the managers' chain table */
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: storage client: %s\n", strerror(-rc));
		return 1;
	}
	uint32_t chains = wait_chains(&storage);
	if (chains == 0) {
		fprintf(stderr, "kvc-meta: no chains: the cluster file names no storage servers and "
		                "no manager answered with a table that has some\n");
		return 1;
	}
	struct kvc_layout defaults = {.chunk_size = config.chunk_size,
	                              .stripe = config.stripe && config.stripe < chains
	                                        ? config.stripe : chains,
	                              .chain_count = chains};
	rc = kvc_meta_store_open(config.meta_data, &defaults, &svc.store);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot open %s: %s\n", config.meta_data,
		        rc == -EINVAL ? "not a kvcfs meta store of this format" : strerror(-rc));
		return 1;
	}
	/* Open sessions live in memory: the last process's are not known until
	 * each client has opened its files again, which it does at its first
	 * RENEW (answered -EREMCHG): a client silent longer than the timeout
	 * finds its lease run out first (meta/open_table.h). */
	kvc_meta_store_hold_opens(svc.store, (uint64_t)config.client_timeout_ms + 2000);
	pthread_t chain_thread;
	static struct chain_follow follow;
	follow = (struct chain_follow){&storage, svc.store};
	rc = -pthread_create(&chain_thread, NULL, follow_chains, &follow);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot start a thread: %s\n", strerror(-rc));
		return 1;
	}
	pthread_detach(chain_thread);
	svc.storage = &storage;
	/* Room on the data's volume for deletes: namespace growth stops first. */
	static struct kvc_reserve space;
	int data_fd = open(config.meta_data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	rc = data_fd < 0 ? -errno : kvc_reserve_init(&space, data_fd, config.meta_reserve_bytes,
	                                             KVC_RESERVE_META, NULL);
	if (rc < 0) {
		fprintf(stderr, "kvc-meta: cannot look at the volume of %s: %s\n", config.meta_data,
		        strerror(-rc));
		return 1;
	}
	svc.space = &space;
	kvc_log_info("volume of %s: %llu MiB free of %llu MiB, %llu MiB kept back for deletes",
	             config.meta_data, (unsigned long long)(space.free_bytes >> 20),
	             (unsigned long long)(space.total_bytes >> 20),
	             (unsigned long long)(space.reserve_bytes >> 20));
	int listen_fd = kvc_net_listen(config.meta_address);
	if (listen_fd < 0) {
		fprintf(stderr, "kvc-meta: cannot listen on %s: %s\n", config.meta_address,
		        strerror(-listen_fd));
		return 1;
	}
	/* Rendered by GET /metrics of the HTTP front: none without one. */
	struct kvc_metrics *metrics = config.http_address[0] ? kvc_metrics_create() : NULL;
	if (start_pools(&config, &svc, metrics) < 0)
		return 1;
	if (kvc_server_handle_signals(stop_service, &svc) < 0)
		return 1;
	rc = kvc_meta_sessions_create(config.client_timeout_ms, &svc.sessions);
	if (rc == 0)
		rc = kvc_meta_watches_create(config.meta_watch_entries, config.cache_ttl_ms,
		                             &svc.watches);
	if (rc == 0)
		rc = kvc_meta_collector_start(svc.store, svc.pools, svc.sessions, &storage, 1000,
		                              &svc.collector);
	if (rc == 0)
		kvc_meta_collector_set_watches(svc.collector, svc.watches);
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
	server = (struct kvc_server){.listen_fd = listen_fd, .auth = &keys,
	                             .handle = kvc_meta_service_handle, .service = &svc,
	                             .cleanup = kvc_meta_service_conn_cleanup,
	                             .name = "kvc-meta"};
	kvc_server_configure(&server, &config);
	/* Per-message counts and latency (GET /metrics on the HTTP front). */
	if (metrics && kvc_server_metrics_register(&server, metrics, "kvc_meta",
	                                           kvc_meta_service_serves) < 0)
		kvc_log_warn("no per-message metrics: out of memory");
	rc = kvc_server_run(&server);
	kvc_log_error("accept failed: %s", strerror(-rc));
	return 1;
}
