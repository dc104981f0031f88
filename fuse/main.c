/*
 * kvc-fuse: mounts a kvcfs cluster (default at the [fuse] mountpoint of the
 * cluster file) with libfuse's multithreaded low-level loop, allow_other
 * and default_permissions (the kernel checks permissions for every user).
 *
 *   kvc-fuse --config FILE [--mountpoint DIR] [--foreground] [--verbose]
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fuse/operations.h"
#include "fuse/usrbio_service.h"
#include "client/transport_local.h"
#include "fuse/fuse_metrics.h"
#include "fuse/op_metrics.h"
#include "core/mem_guard.h"
#include "core/metrics_http.h"
#include "core/server.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/log.h"

static const char usage[] =
	"usage: kvc-fuse --config FILE [--mountpoint DIR] [--verbose] [--debug]\n"
	"Mounts the cluster described by FILE (runs in the foreground).\n"
	"  -c, --config FILE      the cluster file\n"
	"  -m, --mountpoint DIR   mount there instead of at [fuse] mountpoint\n"
	"  -f, --foreground       accepted; kvc-fuse always runs in the foreground\n"
	"  -v, --verbose          log debug records too\n"
	"  -d, --debug            libfuse's debug output (every request)\n"
	"  -h, --help             this text\n";

/* Receiving threads: as configured, or (auto) one a core up to 16 on
 * machines of 4 cores or more; a 2-core machine gains nothing from them.
 * They also read the local requests of a wave (transport_local.h), one
 * copy and crc check each: on the 16-core H200 host 1 MiB ring reads at
 * depth 128 ran at 1.0x the page-cache baseline with 8 and 1.3-1.6x with
 * 12 to 16 (docs/benchmarks.md, 2026-12-02). */
static int receive_threads(int configured)
{
	if (configured >= 0)
		return configured;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (cores < 4)
		return 0;
	return cores > 16 ? 16 : (int)cores;
}

/* Every second until stopped (stop_flusher): the lease and sizes, then
 * the open files' watches. After a renew that failed (kvc-meta away) the
 * lease is tried again sooner, 100 ms later and then doubling up to the
 * second, each with up to half of it again at random (clients that lost
 * kvc-meta together do not come back at once), so a kvc-meta back from a
 * restart hears from us before the lease runs out; sizes stay on the
 * second. */
#define RETRY_FIRST_MS 100
#define TICK_MS 1000
static void *size_flusher(void *arg)
{
	struct kvc_fuse *fs = arg;
	int retry_ms = 0; /* after a failed renew: the next try's delay */
	struct kvc_clock_backoff retry; /* those delays, anew after a renew that worked */
	kvc_clock_backoff_init(&retry, RETRY_FIRST_MS, TICK_MS);
	int64_t sizes_ms = 0;
	unsigned seed = (unsigned)getpid() ^ (unsigned)kvc_clock_monotonic_ns();
	pthread_mutex_lock(&fs->flusher_lock);
	while (!fs->flusher_stop) {
		int64_t wait_ms = retry_ms ? retry_ms + rand_r(&seed) % (retry_ms / 2 + 1) : TICK_MS;
		struct timespec until = kvc_clock_deadline(wait_ms);
		while (!fs->flusher_stop &&
		       pthread_cond_timedwait(&fs->flusher_wake, &fs->flusher_lock, &until) == 0)
			;
		if (fs->flusher_stop)
			break;
		pthread_mutex_unlock(&fs->flusher_lock);
		int renewed = kvc_fuse_renew_lease(fs);
		int64_t now_ms = kvc_clock_monotonic_ns() / 1000000;
		if (renewed == 0 || now_ms - sizes_ms >= TICK_MS) {
			kvc_fuse_commit_sizes(fs);
			sizes_ms = now_ms;
		}
		retry_ms = renewed == 0 ? 0 : (int)kvc_clock_backoff_next_ms(&retry);
		if (renewed == 0) {
			kvc_clock_backoff_init(&retry, RETRY_FIRST_MS, TICK_MS);
			kvc_fuse_watch_open_files(fs);
			kvc_fuse_watch_dir_names(fs);
		}
		pthread_mutex_lock(&fs->flusher_lock);
	}
	pthread_mutex_unlock(&fs->flusher_lock);
	return NULL;
}

static void stop_flusher(struct kvc_fuse *fs)
{
	pthread_mutex_lock(&fs->flusher_lock);
	fs->flusher_stop = true;
	pthread_cond_signal(&fs->flusher_wake);
	pthread_mutex_unlock(&fs->flusher_lock);
	pthread_join(fs->flusher, NULL);
}

/* The device ("major:minor") of the newest mount at mountpoint, from
 * mountinfo, so the mount itself is not touched (its daemon is not serving
 * yet). Returns 0 or -ENOENT. */
static int mount_device(const char *mountpoint, char *device, size_t size)
{
	char real[PATH_MAX], line[8192];
	int rc = -ENOENT;
	FILE *f = realpath(mountpoint, real) ? fopen("/proc/self/mountinfo", "re") : NULL;
	if (!f)
		return rc;
	while (fgets(line, sizeof(line), f)) {
		char dev[32], point[PATH_MAX];
		if (sscanf(line, "%*s %*s %31s %*s %4095s", dev, point) == 2 &&
		    strcmp(point, real) == 0 && strlen(dev) < size) {
			strcpy(device, dev); /* the last match is the newest mount */
			rc = 0;
		}
	}
	fclose(f);
	return rc;
}

/* Raise the kernel's readahead for the new mount: FUSE starts at 128 KiB,
 * which leaves sequential reads waiting on one request at a time.
 * Best effort: logs and goes on. */
static void set_readahead(const char *device, int readahead_kb)
{
	char path[128];
	if (readahead_kb <= 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", device);
	FILE *bdi = fopen(path, "w");
	if (!bdi || fprintf(bdi, "%d\n", readahead_kb) < 0)
		kvc_log_warn("cannot set readahead through %s", path);
	if (bdi)
		fclose(bdi);
}

/* Start the USRBIO control socket and ring workers for the mount. */
static int start_usrbio(struct kvc_fuse *fs, const char *mountpoint, const char *device)
{
	static struct kvc_usrbio usrbio; /* lives as long as the process */
	unsigned major, minor;
	if (sscanf(device, "%u:%u", &major, &minor) != 2)
		return -EINVAL;
	usrbio.mount_dev = makedev(major, minor);
	return kvc_usrbio_start(&usrbio, fs, mountpoint);
}

static int mount_and_serve(struct kvc_fuse *fs, const char *mountpoint, bool debug)
{
	char *argv[] = {"kvc-fuse", "-o",
	                "allow_other,default_permissions,fsname=kvcfs,subtype=kvc,max_read=1048576",
	                debug ? "-d" : NULL, NULL};
	struct fuse_args args = FUSE_ARGS_INIT(debug ? 4 : 3, argv);
	int rc = 1;
	bool served = false; /* the session stays for the process's end (kvc_server_exit) */
	struct kvc_metrics_http *metrics = NULL;
	struct fuse_lowlevel_ops ops = kvc_fuse_operations; /* fuse_session_new copies it */
	/* Several kvc-fuse of one host may share a cluster file: the second
	 * finds the metrics port taken and mounts without metrics. */
	if (fs->config.fuse_metrics[0]) {
		int metrics_rc = kvc_fuse_metrics_start(fs);
		if (metrics_rc == 0)
			metrics_rc = kvc_metrics_http_start(fs->config.fuse_metrics,
			                                    kvc_fuse_metrics_registry(), &metrics);
		if (metrics_rc == 0) {
			kvc_fuse_op_metrics_wrap(&ops);
			kvc_log_info("metrics on http://%s/metrics", fs->config.fuse_metrics);
		} else {
			kvc_log_warn("no metrics: cannot serve them on %s: %s", fs->config.fuse_metrics,
			             strerror(-metrics_rc));
		}
	}
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), fs);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se) != 0)
		goto destroy;
	fs->session = se;
	if (fuse_session_mount(se, mountpoint) != 0) {
		fprintf(stderr, "kvc-fuse: cannot mount at %s\n", mountpoint);
		goto remove_handlers;
	}
	char device[32];
	if (mount_device(mountpoint, device, sizeof(device)) < 0) {
		fprintf(stderr, "kvc-fuse: %s is not in mountinfo after mounting\n", mountpoint);
		goto unmount;
	}
	set_readahead(device, fs->config.readahead_kb);
	int early_rc = fs->config.early_creates ? kvc_early_creates_start(fs, &fs->creates) : 0;
	if (early_rc < 0)
		kvc_log_warn("every create waits for kvc-meta: %s", strerror(-early_rc));
	if (fs->creates) { /* before the threads that call kvc-meta start */
		fs->meta.before_arg = fs->creates;
		fs->meta.before_call = kvc_early_creates_settle;
	}
	int usrbio_rc = start_usrbio(fs, mountpoint, device);
	if (usrbio_rc < 0) {
		fprintf(stderr, "kvc-fuse: cannot serve USRBIO for %s: %s\n", mountpoint,
		        strerror(-usrbio_rc));
		goto unmount;
	}
	int events_rc = kvc_meta_events_start(fs, &fs->events);
	if (events_rc < 0)
		kvc_log_warn("no change events from kvc-meta (%s): names and attributes are cached "
		             "for 1 s", strerror(-events_rc));
	int aliases_rc = kvc_dir_aliases_start(&fs->session, &fs->aliases);
	if (aliases_rc < 0)
		kvc_log_warn("directories moved by other clients may leave stale names here: %s",
		             strerror(-aliases_rc));
	int names_rc = kvc_dir_names_start(fs, &fs->dir_names);
	if (names_rc < 0)
		kvc_log_warn("every lookup asks kvc-meta: %s", strerror(-names_rc));
	int closes_rc = kvc_close_queue_start(fs, &fs->closes);
	if (closes_rc < 0)
		kvc_log_warn("closes are sent one by one: %s", strerror(-closes_rc));
	struct fuse_loop_config *loop = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(loop, 64);
	fuse_loop_cfg_set_idle_threads(loop, 16);
	/* Each worker reads its own clone of /dev/fuse: no struct file shared
	 * by every worker's read and reply (its count bounced between CPUs). */
	fuse_loop_cfg_set_clone_fd(loop, 1);
	kvc_log_info("mounted at %s", mountpoint);
	rc = fuse_session_loop_mt(se, loop) ? 1 : 0;
	served = true;
	fuse_loop_cfg_destroy(loop);
	stop_flusher(fs); /* nothing but this thread uses the state from here */
	kvc_fuse_flush_sizes(fs);
	kvc_early_creates_stop(fs->creates); /* enters what still waits; the
	                                      * hook stays (nothing waits) */
	kvc_close_queue_stop(fs->closes); /* later closes are sent at once */
	kvc_metrics_http_stop(metrics); /* no scrape reads the events after this */
	metrics = NULL;
	kvc_dir_names_stop(fs->dir_names);
	fs->dir_names = NULL;
	kvc_dir_aliases_stop(fs->aliases);
	fs->aliases = NULL;
	kvc_meta_events_stop(fs->events);
	fs->events = NULL;
unmount:
	fuse_session_unmount(se);
remove_handlers:
	fuse_remove_signal_handlers(se);
destroy:
	if (!served) /* else ring workers may still notify through it: it ends with the process */
		fuse_session_destroy(se);
	kvc_metrics_http_stop(metrics);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {{"config", required_argument, 0, 'c'},
	                                        {"mountpoint", required_argument, 0, 'm'},
	                                        {"foreground", no_argument, 0, 'f'},
	                                        {"debug", no_argument, 0, 'd'},
	                                        {"verbose", no_argument, 0, 'v'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-fuse", usage, "c:m:fdv", options, 0};
	const char *config_path = NULL, *mountpoint = NULL;
	enum kvc_log_level level = KVC_LOG_INFO;
	bool debug = false;
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'm': mountpoint = optarg; break;
		case 'f': break; /* always in the foreground; kept for habit */
		case 'd': debug = true; break;
		case 'v': level = KVC_LOG_DEBUG; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (!config_path)
		return kvc_cli_fail(&cli, "--config FILE is required");
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	kvc_log_setup("kvc-fuse", level);
	kvc_server_tune_memory(4u << 20, 16u << 20); /* its request buffers */
	static struct kvc_fuse fs;
	if (kvc_config_load_reported("kvc-fuse", config_path, &fs.config) < 0 ||
	    kvc_config_load_secret_reported("kvc-fuse", &fs.config, KVC_AUTH_CLUSTER) < 0)
		return 1;
	if (!mountpoint)
		mountpoint = fs.config.mountpoint;
	fs.attr_timeout = 1.0;
	/* The client id first: every connection to kvc-meta carries it. */
	if (getrandom(fs.client_id, sizeof(fs.client_id), 0) != (ssize_t)sizeof(fs.client_id)) {
		fprintf(stderr, "kvc-fuse: no random bytes for the client id: %s\n", strerror(errno));
		return 1;
	}
	int rc = kvc_meta_client_init(&fs.meta, &fs.config);
	if (rc == 0) {
		struct kvc_msg_client_hello hello = {.ttl_ms = fs.config.cache_ttl_ms};
		memcpy(hello.client, fs.client_id, sizeof(hello.client));
		kvc_rpc_pool_set_hello(&fs.meta.pool, &hello);
		/* A call that finds kvc-meta unreachable (restarting, or a link
		 * just back) keeps trying for the I/O bound before it answers
		 * EIO: it was never sent, so any call may be. */
		kvc_rpc_pool_set_reconnect(&fs.meta.pool, fs.config.io_timeout_ms);
	}
	if (rc == 0)
		rc = kvc_storage_client_init(&fs.storage, &fs.config);
	if (rc == 0)
		rc = kvc_storage_client_follow(&fs.storage); /* the managers' chain table */
	if (rc == 0)
		rc = kvc_inode_table_create(&fs.inodes);
	if (rc == 0)
		rc = kvc_attr_cache_create(&fs.attrs);
	if (rc == 0)
		rc = kvc_known_attrs_create(&fs.known);
	if (rc == 0) /* ring keys copy client memory under it (ring_keys.h) */
		rc = kvc_mem_guard_init();
	if (rc == 0) /* a same-host single-copy target's chunks read here */
		rc = kvc_transport_local_init(&fs.storage, &fs.config);
	if (rc == 0)
		rc = kvc_storage_client_start_receivers(&fs.storage,
		                                        receive_threads(fs.config.receive_threads));
	if (rc < 0) {
		fprintf(stderr, "kvc-fuse: cannot start: %s\n", strerror(-rc));
		return 1;
	}
	/* Refuse to mount a cluster whose metadata service does not answer. */
	struct kvc_attr root;
	rc = kvc_meta_client_getattr(&fs.meta, 1, &root);
	if (rc < 0) {
		fprintf(stderr, "kvc-fuse: kvc-meta at %s does not answer: %s\n",
		        fs.config.meta_address, strerror(-rc));
		return 1;
	}
	if (gethostname(fs.host, sizeof(fs.host) - 1) < 0)
		strcpy(fs.host, "localhost");
	pthread_mutex_init(&fs.closes_lock, NULL);
	pthread_mutex_init(&fs.renew_lock, NULL);
	struct timespec started;
	clock_gettime(CLOCK_MONOTONIC, &started); /* the lease runs from the start */
	atomic_init(&fs.renewed_ms, (int64_t)started.tv_sec * 1000 + started.tv_nsec / 1000000);
	for (size_t i = 0; i < sizeof(fs.session_locks) / sizeof(fs.session_locks[0]); i++)
		pthread_mutex_init(&fs.session_locks[i], NULL);
	kvc_fuse_clean_orphans(&fs);
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&fs.flusher_lock, NULL);
	pthread_condattr_t monotonic;
	pthread_condattr_init(&monotonic);
	pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
	pthread_cond_init(&fs.flusher_wake, &monotonic);
	pthread_condattr_destroy(&monotonic);
	pthread_create(&fs.flusher, NULL, size_flusher, &fs);
	/* The state lives until exit: the size flusher is stopped once the
	 * mount is served (mount_and_serve), and runs until exit otherwise.
	 * Ring workers and storage receivers still run then: no exit
	 * handlers (kvc_server_exit). */
	kvc_server_exit(mount_and_serve(&fs, mountpoint, debug));
}
