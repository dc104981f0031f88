/*
 * kvc-storage: a storage server. Serves the targets of one [storage NAME]
 * section of the cluster file over the binary protocol.
 *
 *   kvc-storage --config FILE --name NAME [--join] [--verbose]
 *
 * --join: a host added to a running cluster (docs/operations.md "Add a
 * host"): its cluster file names the managers and its own section; it
 * registers with the managers and waits until kvc-admin add-host admits
 * it, which gives its targets their ids; then it serves.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/net.h"
#include "core/server.h"
#include "storage/heartbeat.h"
#include "storage/service.h"
#include "storage/storage_metrics.h"

static const char usage[] =
	"usage: kvc-storage --config FILE --name NAME [--join] [--verbose]\n"
	"Serves the targets of section [storage NAME] of the cluster file FILE.\n"
	"  -c, --config FILE   the cluster file\n"
	"  -n, --name NAME     which [storage NAME] section this server is\n"
	"  -j, --join          a new host: register with the managers, wait for\n"
	"                      'kvc-admin add-host NAME', take the target ids they give\n"
	"  -v, --verbose       log debug records too\n"
	"  -h, --help          this text\n";

static void stop_service(void *arg)
{
	struct kvc_storage_service *svc = arg;
	for (uint32_t i = 0; i < svc->target_count; i++)
		kvc_chunk_store_sync(svc->stores[i]);
}

/* How many freed pages a checkpoint may keep from reuse in a target's
 * index: a quarter of its reserve (deletes on a full target grow the index
 * from there), at most KVC_CHUNK_CHECKPOINT_GROWTH; 64 MiB without one. */
static size_t growth_bound(struct kvc_chunk_store *store)
{
	struct kvc_chunk_space space = {0};
	size_t bound = kvc_chunk_store_space(store, &space) == 0 ? space.reserve_bytes / 4 : 0;
	return bound == 0                             ? (64u << 20)
	       : bound > KVC_CHUNK_CHECKPOINT_GROWTH ? KVC_CHUNK_CHECKPOINT_GROWTH
	                                              : bound;
}

/* The targets' index checkpoints (chunk_store.h "Crashes"), looked at
 * every second: every KVC_CHUNK_CHECKPOINT_MS, and at once when the pages
 * freed since the last pass its bound. */
static void *checkpoint_main(void *arg)
{
	struct kvc_storage_service *svc = arg;
	int64_t last[KVC_WIRE_MAX_TARGETS], logged[KVC_WIRE_MAX_TARGETS];
	size_t bound[KVC_WIRE_MAX_TARGETS];
	for (uint32_t i = 0; i < svc->target_count; i++) {
		last[i] = kvc_clock_monotonic_ns();
		logged[i] = 0;
		bound[i] = growth_bound(svc->stores[i]);
	}
	for (;;) {
		sleep(1);
		for (uint32_t i = 0; i < svc->target_count; i++) {
			int64_t now = kvc_clock_monotonic_ns();
			if (now - last[i] < (int64_t)KVC_CHUNK_CHECKPOINT_MS * 1000000 &&
			    kvc_chunk_store_index_held(svc->stores[i]) <= bound[i])
				continue;
			int rc = kvc_chunk_store_checkpoint(svc->stores[i]);
			if (rc < 0 && now - logged[i] >= 60ll * 1000000000) { /* once a minute */
				kvc_log_error("target %u: index checkpoint: %s", svc->first_target + i,
				              strerror(-rc));
				logged[i] = now;
			}
			last[i] = now;
		}
	}
	return NULL;
}

static void *place_main(void *arg)
{
	struct kvc_server *server = arg;
	int rc = kvc_server_run(server);
	kvc_log_error("placement socket: accept failed: %s", strerror(-rc));
	return NULL;
}

/* Same-host placement (place.h): the same service on the abstract Unix
 * socket "kvc-place:<address>", its server made here (*out) and served on
 * a thread of its own by serve_placement, after its metrics are counted. */
static int start_placement(struct kvc_storage_service *svc, const struct kvc_auth_keys *keys,
                           const struct kvc_config *config, const char *address,
                           struct kvc_server **out)
{
	static struct kvc_place_table table;
	static struct kvc_server server;
	char name[KVC_NET_ADDRESS_MAX + 16];
	snprintf(name, sizeof(name), "@kvc-place:%s", address);
	int rc = kvc_place_init(&table);
	int fd = rc == 0 ? kvc_net_listen(name) : rc;
	if (fd < 0)
		return fd;
	svc->place = &table;
	server = (struct kvc_server){.listen_fd = fd, .auth = keys,
	                             .handle = kvc_storage_service_handle,
	                             .cleanup = kvc_storage_service_cleanup,
	                             .service = svc, .name = "kvc-storage placement"};
	kvc_server_configure(&server, config);
	kvc_log_info("placement on unix socket %s", name);
	*out = &server;
	return 0;
}

static int serve_placement(struct kvc_server *server)
{
	pthread_t thread;
	int rc = -pthread_create(&thread, NULL, place_main, server);
	if (rc == 0)
		pthread_detach(thread);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {{"config", required_argument, 0, 'c'},
	                                        {"name", required_argument, 0, 'n'},
	                                        {"verbose", no_argument, 0, 'v'},
	                                        {"join", no_argument, 0, 'j'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-storage", usage, "c:n:vj", options, 0};
	const char *config_path = NULL, *name = NULL;
	bool join = false;
	enum kvc_log_level level = KVC_LOG_INFO;
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'n': name = optarg; break;
		case 'v': level = KVC_LOG_DEBUG; break;
		case 'j': join = true; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (!config_path || !name)
		return kvc_cli_fail(&cli, "--config FILE and --name NAME are required");
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	kvc_log_setup("kvc-storage", level);
	/* Chunk reads take a buffer per piece (up to a chunk, 16 MiB): on the
	 * heap, not a fresh mmap each. */
	kvc_server_tune_memory(64u << 20, 256u << 20);

	static struct kvc_config config;
	if (kvc_config_load_reported("kvc-storage", config_path, &config) < 0 ||
	    kvc_config_load_secret_reported("kvc-storage", &config, KVC_AUTH_CLUSTER) < 0)
		return 1;
	/* Only the cluster's own daemons and root tools reach the chunks. */
	static struct kvc_auth_keys keys;
	keys.keys[KVC_AUTH_CLUSTER] = config.cred.key;
	const struct kvc_config_server *me = kvc_config_server_find(&config, name);
	if (!me) {
		fprintf(stderr, "kvc-storage: %s has no [storage %s] section\n", config_path, name);
		return 1;
	}
	static struct kvc_storage_service svc;
	static struct kvc_storage_client peers;
	/* The other servers, to pass chain writes on (core/chains.h): with
	 * managers, from their table only. */
	static struct kvc_config peer_config;
	peer_config = config;
	uint32_t server_index = (uint32_t)(me - config.servers);
	svc.first_target = me->first_target;
	if (join && config.manager_count == 0) {
		fprintf(stderr, "kvc-storage: cannot join: the cluster file names no managers "
		                "([mgmt NAME])\n");
		return 1;
	}
	if (config.manager_count) { /* the table says which ids these disks hold */
		struct kvc_msg_mgmt_register_reply admitted;
		int jrc = kvc_heartbeat_register(&config, me, join, &admitted);
		if (jrc < 0) {
			fprintf(stderr, "kvc-storage: cannot %s: %s\n", join ? "join" : "start",
			        jrc == -ENOENT ? "the managers' table names no host of that name "
			                         "(a new host starts with --join)"
			        : jrc == -EEXIST ? "the managers have a host of that name with another "
			                           "address or target count"
			                         : strerror(-jrc));
			return 1;
		}
		if (!join && (admitted.server != server_index ||
		              admitted.first_target != me->first_target))
			kvc_log_info("the managers' table has %s as server %u, targets %u..: "
			             "the cluster file's order differs, the table wins",
			             name, admitted.server, admitted.first_target);
		kvc_log_info("member: server %u, targets %u..%u", admitted.server,
		             admitted.first_target, admitted.first_target + me->target_count - 1);
		server_index = admitted.server;
		svc.first_target = admitted.first_target;
		/* The peers, too, come from the table (the file may name only
		 * this host, or name the others in another order). */
		peer_config.server_count = 0;
		peer_config.target_count = 0;
	}
	svc.target_count = me->target_count;
	svc.io_timeout_ms = config.io_timeout_ms;
	svc.min_write_replicas = config.min_write_replicas;
	int rc = kvc_storage_client_init(&peers, &peer_config);
	if (rc == 0)
		rc = kvc_inflight_create(&svc.inflight);
	if (rc == 0)
		rc = kvc_storage_client_follow(&peers); /* the managers' table, when there are */
	if (rc < 0) {
		fprintf(stderr, "kvc-storage: cannot set up the chain table: %s\n", strerror(-rc));
		return 1;
	}
	/* With managers the peers start empty: serve once the table is here
	 * (the leader just answered; requests before it would find no chain). */
	if (config.manager_count && kvc_storage_client_wait_routing(&peers, 0, 1000) == 0) {
		kvc_log_info("waiting for the managers' routing table");
		while (kvc_storage_client_wait_routing(&peers, 0, 1000) == 0)
			;
	}
	svc.peers = &peers;
	for (uint32_t i = 0; i < me->target_count; i++) {
		const char *path = config.targets[me->first_target + i].path;
		rc = kvc_chunk_store_open(path, &svc.stores[i]);
		if (rc < 0) {
			fprintf(stderr, "kvc-storage: cannot open target %s: %s\n", path,
			        rc == -EINVAL ? "not a kvcfs target of this format" : strerror(-rc));
			return 1;
		}
		/* Room for the LMDB databases of the volume to commit deletes. */
		rc = kvc_chunk_store_set_reserve(svc.stores[i], config.storage_reserve_bytes, NULL);
		if (rc < 0) {
			fprintf(stderr, "kvc-storage: cannot look at the filesystem of %s: %s\n", path,
			        strerror(-rc));
			return 1;
		}
		/* Small chunks in the index (config.c bounds the key to the store's limit). */
		int64_t inline_bytes = config.storage_inline_bytes;
		if (inline_bytes >= 0 && kvc_chunk_store_set_inline(svc.stores[i],
		                                                    (uint32_t)inline_bytes) < 0) {
			fprintf(stderr, "kvc-storage: storage_inline_kb is above 256\n");
			return 1;
		}
		kvc_chunk_store_set_direct(svc.stores[i], config.storage_direct_reads);
		struct kvc_chunk_space space;
		if (kvc_chunk_store_space(svc.stores[i], &space) == 0)
			kvc_log_info("target %s: %llu MiB free of %llu MiB, %llu MiB kept back for "
			             "metadata", path, (unsigned long long)(space.free_bytes >> 20),
			             (unsigned long long)(space.total_bytes >> 20),
			             (unsigned long long)(space.reserve_bytes >> 20));
	}
	kvc_log_info("block checksums: crc32c by %s", kvc_crc32c_kind_name(kvc_crc32c_best()));
	int listen_fd = kvc_net_listen(me->address);
	if (listen_fd < 0) {
		fprintf(stderr, "kvc-storage: cannot listen on %s: %s\n", me->address,
		        strerror(-listen_fd));
		return 1;
	}
	if (kvc_server_handle_signals(stop_service, &svc) < 0)
		return 1;
	kvc_log_info("serving %u target(s) from %u on %s", me->target_count, svc.first_target,
	             me->address);
	static struct kvc_server server;
	server = (struct kvc_server){.listen_fd = listen_fd, .auth = &keys,
	                             .handle = kvc_storage_service_handle,
	                             .cleanup = kvc_storage_service_cleanup,
	                             .service = &svc, .name = "kvc-storage"};
	kvc_server_configure(&server, &config);
	struct kvc_server *place = NULL;
	rc = config.transport_tcp_only ? 0
	   : start_placement(&svc, &keys, &config, me->address, &place);
	if (rc < 0) {
		fprintf(stderr, "kvc-storage: cannot serve placement: %s\n", strerror(-rc));
		return 1;
	}
	rc = me->metrics[0] ? kvc_storage_metrics_start(&svc, &server, place, me->metrics) : 0;
	if (rc < 0) {
		fprintf(stderr, "kvc-storage: cannot serve metrics on %s: %s\n", me->metrics,
		        strerror(-rc));
		return 1;
	}
	rc = place ? serve_placement(place) : 0;
	if (rc < 0) {
		fprintf(stderr, "kvc-storage: cannot serve placement: %s\n", strerror(-rc));
		return 1;
	}
	if (me->metrics[0])
		kvc_log_info("metrics on http://%s/metrics", me->metrics);
	rc = kvc_repair_start(&svc);
	if (rc == 0)
		rc = kvc_heartbeat_start(&svc, &config, server_index);
	if (rc < 0) {
		fprintf(stderr, "kvc-storage: cannot start heartbeats: %s\n", strerror(-rc));
		return 1;
	}
	pthread_t checkpoints;
	rc = -pthread_create(&checkpoints, NULL, checkpoint_main, &svc);
	if (rc < 0) {
		fprintf(stderr, "kvc-storage: cannot start index checkpoints: %s\n", strerror(-rc));
		return 1;
	}
	pthread_detach(checkpoints);
	rc = kvc_server_run(&server);
	kvc_log_error("accept failed: %s", strerror(-rc));
	return 1;
}
