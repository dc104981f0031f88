/*
 * config: the cluster file every daemon and tool reads. An INI-like text:
 *
 *   token = s3cret              # optional shared cluster token
 *   chunk_size = 1048576        # default layout for new files
 *   stripe = 3
 *   connect_timeout_ms = 2000   # client side bounds: nothing hangs
 *   io_timeout_ms = 5000
 *   [meta]
 *   address = 127.0.0.1:9000
 *   data = /var/lib/kvc/meta    # LMDB directory
 *   sync_interval_ms = 1000     # background fsync of LMDB
 *   http = 127.0.0.1:18000      # page pools over HTTP ("off": none)
 *   http_max_body = 1048576     # larger request bodies get 413
 *   http_threads = 4
 *   lease_ms = 5000             # read lease of a location lookup
 *   client_timeout_ms = 30000   # a kvc-fuse silent this long is gone: the
 *                               # files it had open are released
 *   world_size = 0              # TP world of every namespace (0: infer)
 *   vllm_namespace = vllm       # the namespace vLLM's routes use
 *   [storage s1]                # one section per storage server
 *   address = 127.0.0.1:9101
 *   target = /var/lib/kvc/s1/t0 # one or more; ids follow file order
 *   [fuse]
 *   mountpoint = /mnt/kvc
 *   readahead_kb = 16384        # kernel readahead of the mount
 *   receive_threads = auto      # threads receiving read answers in
 *                               # parallel (auto: half the cores, up to 8,
 *                               # with 4 cores or more; 0: none)
 *   gpu_staging_mb = 128        # pinned staging per ring worker for
 *                               # device iovs (allocated on first use)
 *   usrbio_uid_iov_mb = 1048576 # USRBIO clients of one uid, all together:
 *   usrbio_uid_rings = 1024     # iov memory registered, rings, and
 *   usrbio_uid_registrations = 65536  # iovs + fds (more: EDQUOT)
 *
 * Target ids are the order in which targets appear in the file; the table
 * may only grow (existing files keep their layout). kvc_config_load checks
 * everything and says what is wrong, with the line, in the error buffer.
 */
#ifndef KVC_CONFIG_H
#define KVC_CONFIG_H

#include <limits.h>
#include <stdint.h>

#include "core/net.h"
#include "core/wire.h"

#define KVC_CONFIG_MAX_SERVERS 32
#define KVC_CONFIG_NAME_MAX 64

struct kvc_config_server {
	char name[KVC_CONFIG_NAME_MAX];
	char address[KVC_NET_ADDRESS_MAX];
	uint32_t first_target;
	uint32_t target_count;
};

struct kvc_config_target {
	char path[PATH_MAX];
	uint32_t server; /* index into servers */
};

struct kvc_config {
	char token[KVC_WIRE_MAX_TOKEN + 1];
	uint32_t chunk_size;
	uint32_t stripe;
	int connect_timeout_ms;
	int io_timeout_ms;
	char meta_address[KVC_NET_ADDRESS_MAX];
	char meta_data[PATH_MAX];
	int sync_interval_ms;
	char http_address[KVC_NET_ADDRESS_MAX]; /* "" when off */
	uint32_t http_max_body;
	int http_threads;
	uint32_t lease_ms;
	uint32_t client_timeout_ms;
	uint32_t world_size;
	char vllm_namespace[65];
	char mountpoint[PATH_MAX];
	int readahead_kb;
	int receive_threads; /* -1: auto */
	uint32_t gpu_staging_mb;
	uint64_t usrbio_uid_iov_mb;       /* per uid: fuse/usrbio_limits.h */
	uint32_t usrbio_uid_rings;
	uint32_t usrbio_uid_registrations;
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

/* The storage server named `name`, or NULL. */
const struct kvc_config_server *kvc_config_server_find(const struct kvc_config *config,
                                                       const char *name);

#endif
