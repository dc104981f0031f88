/*
 * config: the cluster file every daemon and tool reads. An INI-like text:
 *
 *   secret_file = /var/lib/kvc/secret       # the cluster secret (0600):
 *                               # daemons and root tools prove it
 *   pool_secret_file = /var/lib/kvc/pool.secret  # optional (0640): opens
 *                               # kvc-meta's page-pool messages only
 *   chunk_size = 1048576        # default layout for new files
 *   stripe = 3
 *   etcd = http://127.0.0.1:2379 # where the managers keep the cluster's
 *                               # state (comma-separated endpoints)
 *   heartbeat_ms = 500          # storage servers to the leading manager
 *   failure_timeout_ms = 3000   # a server silent this long leaves its
 *                               # chains (the manager bumps their versions)
 *   replicas = 1                # targets per chain, on distinct storage
 *                               # servers (core/chains.h; default 3 with
 *                               # [mgmt] sections, a multi-host cluster, 1
 *                               # without); the target count must be a
 *                               # multiple of it
 *   min_write_replicas = 2      # a chain with fewer members refuses writes
 *                               # (EROFS) rather than keep one copy
 *                               # (default replicas / 2 + 1; 1 for one)
 *   transport = auto            # how chunk bytes move between kvc-fuse and
 *                               # a storage server: auto (same-host
 *                               # placement where the server is on this
 *                               # host, else TCP) or tcp (TCP always)
 *   connect_timeout_ms = 2000   # client side bounds: nothing hangs
 *   io_timeout_ms = 5000        # (without managers a SYNC waits up to a
 *                               # minute more: client/storage_target.h)
 *   server_max_connections = 4096   # per kvc-meta / kvc-storage server
 *   server_idle_timeout_ms = 600000  # a connection idle this long is
 *                               # closed (0: never)
 *   server_io_timeout_ms = 30000 # a peer stalled mid-frame this long is
 *                               # closed (0: never)
 *   storage_reserve_mb = auto   # free space each target's filesystem keeps
 *                               # back: chunk data that would go below it
 *                               # gets ENOSPC (auto: min(1 GiB, max(8 MiB,
 *                               # 2% of the volume)); 0: none)
 *   storage_direct_reads = off  # on: chunk data the page cache does not
 *                               # hold is read with O_DIRECT where buffers
 *                               # align (no page-cache copy, no
 *                               # readahead; cold data does not evict
 *                               # warm); off: through the page cache
 *   storage_inline_kb = 64      # chunks ending at or below it live in the
 *                               # target's index, not in a file of their
 *                               # own (0: none; at most 256; default: the
 *                               # chunk store's, storage/chunk_store.h)
 *   [meta]
 *   address = 127.0.0.1:9000
 *   data = /var/lib/kvc/meta    # LMDB directory
 *   sync_interval_ms = 1000     # background fsync of LMDB
 *   reserve_mb = auto           # free space the volume of `data` keeps
 *                               # for deletes: below it, namespace growth
 *                               # gets ENOSPC (auto: half what
 *                               # storage_reserve_mb's auto gives that
 *                               # volume; 0: none)
 *   http = 127.0.0.1:18000      # page pools over HTTP ("off": none)
 *   http_max_body = 1048576     # larger request bodies get 413
 *   http_threads = 4
 *   http_token_file = PATH      # optional: every HTTP route but /health
 *                               # needs "Authorization: Bearer <its text>"
 *   http_destructive = loopback # who may clear and delete over HTTP:
 *                               # loopback (default), any or none
 *   lease_ms = 5000             # read lease of a location lookup
 *   client_timeout_ms = 30000   # a kvc-fuse silent this long is gone: the
 *                               # files it had open are released
 *   watch_entries = 1048576     # names and inodes clients cache that
 *                               # kvc-meta tracks to tell them of changes
 *                               # (meta/watches.h; ~40 bytes each)
 *   world_size = 0              # TP world of every namespace (0: infer)
 *   vllm_namespace = vllm       # the namespace vLLM's routes use
 *   [storage s1]                # one section per storage server
 *   address = 127.0.0.1:9101
 *   target = /var/lib/kvc/s1/t0 # one or more; ids follow file order
 *   metrics = 127.0.0.1:9201    # optional: GET /metrics (Prometheus) on
 *                               # host:port; "off" or absent: none
 *                               # (docs/operations.md "Metrics")
 *   [mgmt m1]                   # optional, one per manager (kvc-mgmt): with
 *   address = 127.0.0.1:9410    # them the chain table lives in etcd and
 *                               # follows failures; without, it is this file's
 *   metrics = 127.0.0.1:9420    # optional: its Prometheus metrics
 *   [fuse]
 *   mountpoint = /mnt/kvc
 *   metrics = 127.0.0.1:9299    # optional: kvc-fuse's GET /metrics, as
 *                               # [storage NAME]'s (kvc-meta serves its
 *                               # own on [meta] http)
 *   readahead_kb = 16384        # kernel readahead of the mount
 *   cache_ttl_ms = 10000        # how long the kernel caches names and
 *                               # attributes while kvc-meta's change
 *                               # events reach this client (1 s without)
 *   receive_threads = auto      # threads receiving read answers in
 *                               # parallel (auto: half the cores, up to 8,
 *                               # with 4 cores or more; 0: none)
 *   early_creates = on          # new files (and unlinks) in busy
 *                               # directories are made here and entered
 *                               # in kvc-meta in batches
 *                               # (fuse/early_creates.h); off: each
 *                               # waits for kvc-meta
 *   early_open_delay_ms = 5     # a file made so and still open is
 *                               # entered when this old (0 .. 600000;
 *                               # other clients see it then)
 *   gpu_staging_mb = 128        # pinned staging per ring worker for
 *                               # device iovs (allocated on first use)
 *   usrbio_uid_iov_mb = 1048576 # USRBIO clients of one uid, all together:
 *   usrbio_uid_rings = 1024     # iov memory registered, rings, and
 *   usrbio_uid_registrations = 65536  # iovs + fds (more: EDQUOT)
 *   usrbio_uid_connections = 256  # control connections open at once
 *                               # (more: refused at accept, EUSERS)
 *
 * Target ids are the order in which targets appear in the file; the table
 * may only grow (existing files keep their layout). kvc_config_load checks
 * everything and says what is wrong, with the line, in the error buffer.
 * The file names the secret files but holds no secret itself, so it may be
 * world-readable; the secrets are read only by kvc_config_load_secret.
 */
#ifndef KVC_CONFIG_H
#define KVC_CONFIG_H

/* The USRBIO control socket's connections, all uids together. */
#define KVC_USRBIO_MAX_CONNECTIONS 4096

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/auth.h"
#include "core/net.h"
#include "core/wire.h"

#define KVC_CONFIG_MAX_SERVERS KVC_WIRE_MAX_SERVERS
#define KVC_CONFIG_MAX_MANAGERS 8
#define KVC_CONFIG_NAME_MAX KVC_WIRE_HOST_NAME
_Static_assert(KVC_NET_ADDRESS_MAX == KVC_WIRE_HOST_ADDRESS, "an address fits the wire's");

struct kvc_config_server {
	char name[KVC_CONFIG_NAME_MAX];
	char address[KVC_NET_ADDRESS_MAX];
	char metrics[KVC_NET_ADDRESS_MAX]; /* "" when off */
	uint32_t first_target;
	uint32_t target_count;
};

struct kvc_config_manager {
	char name[KVC_CONFIG_NAME_MAX];
	char address[KVC_NET_ADDRESS_MAX];
	char metrics[KVC_NET_ADDRESS_MAX]; /* "" when off */
};

struct kvc_config_target {
	char path[PATH_MAX];
	uint32_t server; /* index into servers */
};

/* [meta] http_destructive: where clear and delete routes are taken from. */
enum kvc_config_http_destructive {
	KVC_HTTP_DESTRUCTIVE_LOOPBACK = 0,
	KVC_HTTP_DESTRUCTIVE_ANY,
	KVC_HTTP_DESTRUCTIVE_NONE,
};

struct kvc_config {
	char secret_file[PATH_MAX];      /* "" when the file names none */
	char pool_secret_file[PATH_MAX]; /* "" when none */
	struct kvc_auth_cred cred;       /* what this process proves: role none
	                                    until kvc_config_load_secret */
	uint32_t chunk_size;
	uint32_t stripe;
	uint32_t replicas;
	uint32_t min_write_replicas;
	char etcd[1024]; /* "" when there are no managers */
	int heartbeat_ms;
	int failure_timeout_ms;
	bool transport_tcp_only; /* transport = tcp */
	bool local_reads;        /* local_reads = on (the default) | off */
	uint32_t manager_count;
	struct kvc_config_manager managers[KVC_CONFIG_MAX_MANAGERS];
	int connect_timeout_ms;
	int io_timeout_ms;
	int server_max_connections;
	int server_idle_timeout_ms;
	int server_io_timeout_ms;
	int64_t storage_reserve_bytes; /* -1: auto (core/reserve.h) */
	int64_t storage_inline_bytes;  /* -1: the chunk store's default */
	bool storage_direct_reads;     /* data not cached: O_DIRECT (chunk_store.h) */
	char meta_address[KVC_NET_ADDRESS_MAX];
	char meta_data[PATH_MAX];
	int sync_interval_ms;
	int64_t meta_reserve_bytes; /* -1: auto (core/reserve.h) */
	char http_address[KVC_NET_ADDRESS_MAX]; /* "" when off */
	uint32_t http_max_body;
	int http_threads;
	char http_token_file[PATH_MAX]; /* "" when none */
	int http_destructive;           /* enum kvc_config_http_destructive */
	uint32_t lease_ms;
	uint32_t client_timeout_ms;
	uint32_t meta_watch_entries;
	uint32_t world_size;
	char vllm_namespace[65];
	char mountpoint[PATH_MAX];
	char fuse_metrics[KVC_NET_ADDRESS_MAX]; /* "" when off */
	int readahead_kb;
	uint32_t cache_ttl_ms;
	int receive_threads; /* -1: auto */
	bool early_creates;
	uint32_t early_open_delay_ms;
	uint32_t gpu_staging_mb;
	uint64_t usrbio_uid_iov_mb;       /* per uid: fuse/usrbio_limits.h */
	uint32_t usrbio_uid_rings;
	uint32_t usrbio_uid_registrations;
	uint32_t usrbio_uid_connections; /* <= KVC_USRBIO_MAX_CONNECTIONS */
	uint32_t server_count;
	struct kvc_config_server servers[KVC_CONFIG_MAX_SERVERS];
	uint32_t target_count;
	struct kvc_config_target targets[KVC_WIRE_MAX_TARGETS];
};

/* Parse and check a cluster file. Returns 0, or -ENOENT/-EACCES when it
 * cannot be read, -EINVAL with a message ("path:line: what") in err. */
int kvc_config_load(const char *path, struct kvc_config *config, char *err,
                    size_t err_size);

/* kvc_config_load for a program's main: on failure prints
 * "PROGRAM: bad config: what" on stderr. Returns 0 or -errno. */
int kvc_config_load_reported(const char *program, const char *path, struct kvc_config *config);

/* Parse from a string (tests); `origin` names it in messages. */
int kvc_config_parse(const char *text, const char *origin,
                     struct kvc_config *config, char *err, size_t err_size);

/* Read the secret of role (KVC_AUTH_CLUSTER: secret_file, KVC_AUTH_POOL:
 * pool_secret_file) into config->cred, which the daemon clients then
 * prove. Returns 0, -ENOENT (the file names no such secret, or it does
 * not exist), -EACCES (not readable by this user), -EINVAL (a bad mode or
 * content); err says what. */
int kvc_config_load_secret(struct kvc_config *config, uint32_t role, char *err,
                           size_t err_size);

/* kvc_config_load_secret for a program's main: on failure prints
 * "PROGRAM: cannot use the ROLE secret: what" on stderr. */
int kvc_config_load_secret_reported(const char *program, struct kvc_config *config,
                                    uint32_t role);

/* The storage server named `name`, or NULL. */
const struct kvc_config_server *kvc_config_server_find(const struct kvc_config *config,
                                                       const char *name);

#endif
