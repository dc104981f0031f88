/*
 * kvc-mgmt: a cluster manager. Serves the routing table and takes the
 * storage servers' heartbeats for section [mgmt NAME] of the cluster file;
 * several may run, one leads (src/mgmt/manager.h).
 *
 *   kvc-mgmt --config FILE --name NAME [--verbose]
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/metrics_http.h"
#include "core/net.h"
#include "core/server.h"
#include "mgmt/manager.h"
#include "mgmt/service.h"

static const char usage[] =
	"usage: kvc-mgmt --config FILE --name NAME [--verbose]\n"
	"A cluster manager: keeps the chain table in etcd (the cluster file's etcd =),\n"
	"takes failed storage servers out of their chains and brings them back.\n"
	"Serves section [mgmt NAME] of the cluster file FILE; one of the managers\n"
	"leads at a time, the others stand by.\n"
	"  -c, --config FILE   the cluster file\n"
	"  -n, --name NAME     which [mgmt NAME] section this manager is\n"
	"  -v, --verbose       log debug records too\n"
	"  -h, --help          this text\n";

int main(int argc, char **argv)
{
	static const struct option options[] = {{"config", required_argument, 0, 'c'},
	                                        {"name", required_argument, 0, 'n'},
	                                        {"verbose", no_argument, 0, 'v'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-mgmt", usage, "c:n:v", options, 0};
	const char *config_path = NULL, *name = NULL;
	enum kvc_log_level level = KVC_LOG_INFO;
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'n': name = optarg; break;
		case 'v': level = KVC_LOG_DEBUG; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (!config_path || !name)
		return kvc_cli_fail(&cli, "--config FILE and --name NAME are required");
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	kvc_log_setup("kvc-mgmt", level);

	static struct kvc_config config;
	if (kvc_config_load_reported("kvc-mgmt", config_path, &config) < 0 ||
	    kvc_config_load_secret_reported("kvc-mgmt", &config, KVC_AUTH_CLUSTER) < 0)
		return 1;
	static struct kvc_auth_keys keys;
	keys.keys[KVC_AUTH_CLUSTER] = config.cred.key;
	const struct kvc_config_manager *me = NULL;
	for (uint32_t i = 0; i < config.manager_count; i++)
		if (strcmp(config.managers[i].name, name) == 0)
			me = &config.managers[i];
	if (!me) {
		fprintf(stderr, "kvc-mgmt: %s has no [mgmt %s] section\n", config_path, name);
		return 1;
	}
	int listen_fd = kvc_net_listen(me->address);
	if (listen_fd < 0) {
		fprintf(stderr, "kvc-mgmt: cannot listen on %s: %s\n", me->address,
		        strerror(-listen_fd));
		return 1;
	}
	static struct kvc_manager manager;
	int rc = kvc_manager_start(&manager, &config, me->name);
	if (rc < 0) {
		fprintf(stderr, "kvc-mgmt: cannot start: %s\n",
		        rc == -EINVAL ? "the cluster file's [storage NAME] sections do not make "
		                        "chains of `replicas` targets on distinct servers (as many "
		                        "servers as replicas, targets a multiple of it, no server "
		                        "with more than targets / replicas)"
		                      : strerror(-rc));
		return 1;
	}
	if (kvc_server_handle_signals(NULL, NULL) < 0)
		return 1;
	kvc_log_info("manager %s on %s, etcd %s", me->name, me->address, config.etcd);
	static struct kvc_server server;
	server = (struct kvc_server){.listen_fd = listen_fd, .auth = &keys,
	                             .handle = kvc_mgmt_service_handle,
	                             .service = &manager, .name = "kvc-mgmt"};
	kvc_server_configure(&server, &config);
	if (me->metrics[0]) {
		struct kvc_metrics *registry = kvc_metrics_create();
		struct kvc_metrics_http *http;
		rc = registry ? kvc_server_metrics_register(&server, registry, "kvc_mgmt",
		                                            kvc_mgmt_service_serves)
		              : -ENOMEM;
		if (rc == 0)
			rc = kvc_manager_metrics(&manager, registry);
		if (rc == 0)
			rc = kvc_metrics_http_start(me->metrics, registry, &http); /* until exit */
		if (rc < 0) {
			fprintf(stderr, "kvc-mgmt: cannot serve metrics on %s: %s\n", me->metrics,
			        strerror(-rc));
			return 1;
		}
		kvc_log_info("metrics on http://%s/metrics", me->metrics);
	}
	rc = kvc_server_run(&server);
	kvc_log_error("accept failed: %s", strerror(-rc));
	return 1;
}
