/* config: see config.h. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/server.h"

enum section { SECTION_GLOBAL, SECTION_META, SECTION_STORAGE, SECTION_FUSE, SECTION_MGMT };

struct parser {
	struct kvc_config *config;
	const char *origin;
	int line;
	enum section section;
	char *err;
	size_t err_size;
};

__attribute__((format(printf, 2, 3)))
static int fail(struct parser *p, const char *fmt, ...)
{
	va_list ap;
	int n = p->line > 0 ? snprintf(p->err, p->err_size, "%s:%d: ", p->origin, p->line)
	                    : snprintf(p->err, p->err_size, "%s: ", p->origin);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < p->err_size)
		vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

static int copy_string(struct parser *p, char *dst, size_t cap, const char *key,
                       const char *value)
{
	if (strlen(value) >= cap)
		return fail(p, "%s is too long (at most %zu bytes)", key, cap - 1);
	strcpy(dst, value);
	return 0;
}

static int parse_int(struct parser *p, const char *key, const char *value,
                     long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(value, &end, 0);
	if (errno || end == value || *end != '\0' || v < min || v > max) {
		/* Not `return fail(...)`: the caller reads *out when this returns 0,
		 * and the compiler cannot see that fail() never does. */
		fail(p, "%s must be an integer in [%ld, %ld], not '%s'", key, min, max, value);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* [fuse] usrbio_uid_*: what the USRBIO clients of one uid may hold. */
static int usrbio_limit(struct parser *p, const char *key, const char *value)
{
	struct kvc_config *c = p->config;
	long v;
	int rc;
	if (strcmp(key, "usrbio_uid_iov_mb") == 0) {
		rc = parse_int(p, key, value, 1, 1L << 30, &v);
		if (rc == 0)
			c->usrbio_uid_iov_mb = (uint64_t)v;
		return rc;
	}
	if (strcmp(key, "usrbio_uid_rings") == 0) {
		rc = parse_int(p, key, value, 1, 65536, &v);
		if (rc == 0)
			c->usrbio_uid_rings = (uint32_t)v;
		return rc;
	}
	if (strcmp(key, "usrbio_uid_registrations") == 0) {
		rc = parse_int(p, key, value, 1, 1 << 24, &v);
		if (rc == 0)
			c->usrbio_uid_registrations = (uint32_t)v;
		return rc;
	}
	if (strcmp(key, "usrbio_uid_connections") == 0) {
		rc = parse_int(p, key, value, 1, KVC_USRBIO_MAX_CONNECTIONS, &v);
		if (rc == 0)
			c->usrbio_uid_connections = (uint32_t)v;
		return rc;
	}
	return fail(p, "unknown key '%s' in this section", key);
}

static int section_header(struct parser *p, char *text)
{
	struct kvc_config *c = p->config;
	char *close = strchr(text, ']');
	if (!close || close[1] != '\0')
		return fail(p, "section header must end with ']'");
	*close = '\0';
	char *name = trim(text + 1);
	if (strcmp(name, "meta") == 0) {
		p->section = SECTION_META;
	} else if (strcmp(name, "fuse") == 0) {
		p->section = SECTION_FUSE;
	} else if (strncmp(name, "storage", 7) == 0 && isspace((unsigned char)name[7])) {
		char *server = trim(name + 7);
		if (c->server_count == KVC_CONFIG_MAX_SERVERS)
			return fail(p, "too many storage servers (at most %d)", KVC_CONFIG_MAX_SERVERS);
		if (*server == '\0' || kvc_config_server_find(c, server))
			return fail(p, "storage server name '%s' is empty or used twice", server);
		struct kvc_config_server *s = &c->servers[c->server_count++];
		p->section = SECTION_STORAGE;
		s->first_target = c->target_count;
		return copy_string(p, s->name, sizeof(s->name), "storage server name", server);
	} else if (strncmp(name, "mgmt", 4) == 0 && isspace((unsigned char)name[4])) {
		char *manager = trim(name + 4);
		if (c->manager_count == KVC_CONFIG_MAX_MANAGERS)
			return fail(p, "too many managers (at most %d)", KVC_CONFIG_MAX_MANAGERS);
		for (uint32_t i = 0; i < c->manager_count; i++)
			if (strcmp(c->managers[i].name, manager) == 0)
				return fail(p, "manager name '%s' is used twice", manager);
		if (*manager == '\0')
			return fail(p, "a [mgmt NAME] section needs a name");
		p->section = SECTION_MGMT;
		c->manager_count++;
		return copy_string(p, c->managers[c->manager_count - 1].name,
		                   sizeof(c->managers[0].name), "manager name", manager);
	} else {
		return fail(p, "unknown section [%s] (expected meta, storage NAME, mgmt NAME or fuse)",
		            name);
	}
	return 0;
}

/* A metrics listener: "host:port" (port 1..65535) or "off" (""). */
static int metrics_address(struct parser *p, char *dst, size_t cap, const char *value)
{
	const char *colon = strrchr(value, ':');
	char *end;
	if (strcmp(value, "off") == 0) {
		*dst = '\0';
		return 0;
	}
	long port = colon ? strtol(colon + 1, &end, 10) : 0;
	if (!colon || colon == value || colon[1] == '\0' || *end != '\0' || port < 1 ||
	    port > 65535 || strchr(value, ' '))
		return fail(p, "metrics must be host:port (port 1..65535) or off, not '%s'", value);
	return copy_string(p, dst, cap, "metrics", value);
}

/* A reserve in MiB, or "auto" (-1): storage_reserve_mb, [meta] reserve_mb. */
static int reserve_value(struct parser *p, const char *key, const char *value, int64_t *out)
{
	long v;
	if (strcmp(value, "auto") == 0) {
		*out = -1;
		return 0;
	}
	int rc = parse_int(p, key, value, 0, 1l << 24, &v);
	if (rc == 0)
		*out = (int64_t)v << 20;
	return rc == 0 ? 0 : fail(p, "%s must be auto or a size in MiB in [0, %ld], not '%s'",
	                          key, 1l << 24, value);
}

/* The limits of every kvc-meta and kvc-storage server (core/server.h). */
static int server_key(struct parser *p, const char *key, const char *value)
{
	struct kvc_config *c = p->config;
	long v;
	int rc;
	if (strcmp(key, "server_max_connections") == 0) {
		rc = parse_int(p, key, value, 1, 65536, &v);
		if (rc == 0)
			c->server_max_connections = (int)v;
		return rc;
	}
	if (strcmp(key, "server_idle_timeout_ms") == 0) {
		rc = parse_int(p, key, value, 0, 86400000, &v);
		if (rc == 0)
			c->server_idle_timeout_ms = (int)v;
		return rc;
	}
	if (strcmp(key, "server_io_timeout_ms") == 0) {
		rc = parse_int(p, key, value, 0, 3600000, &v);
		if (rc == 0)
			c->server_io_timeout_ms = (int)v;
		return rc;
	}
	if (strcmp(key, "storage_reserve_mb") == 0)
		return reserve_value(p, key, value, &c->storage_reserve_bytes);
	if (strcmp(key, "storage_direct_reads") == 0) {
		if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
			return fail(p, "storage_direct_reads must be on or off, not '%s'", value);
		c->storage_direct_reads = strcmp(value, "on") == 0;
		return 0;
	}
	if (strcmp(key, "storage_inline_kb") == 0) { /* storage/chunk_store.h's limit */
		rc = parse_int(p, key, value, 0, 256, &v);
		if (rc == 0)
			c->storage_inline_bytes = (int64_t)v << 10;
		return rc;
	}
	return fail(p, "unknown key '%s'", key);
}

static int global_key(struct parser *p, const char *key, const char *value)
{
	struct kvc_config *c = p->config;
	long v;
	int rc;
	if (strcmp(key, "secret_file") == 0)
		return copy_string(p, c->secret_file, sizeof(c->secret_file), key, value);
	if (strcmp(key, "pool_secret_file") == 0)
		return copy_string(p, c->pool_secret_file, sizeof(c->pool_secret_file), key, value);
	if (strcmp(key, "token") == 0)
		return fail(p, "'token' is gone: name a secret file instead (secret_file = PATH, "
		               "0600; kvc-cluster start creates it)");
	if (strcmp(key, "chunk_size") == 0) {
		rc = parse_int(p, key, value, KVC_LAYOUT_MIN_CHUNK, KVC_LAYOUT_MAX_CHUNK, &v);
		if (rc < 0)
			return rc;
		if (v & (v - 1))
			return fail(p, "chunk_size must be a power of two, not %ld", v);
		c->chunk_size = (uint32_t)v;
		return 0;
	}
	if (strcmp(key, "stripe") == 0) {
		rc = parse_int(p, key, value, 1, KVC_WIRE_MAX_TARGETS, &v);
		if (rc == 0)
			c->stripe = (uint32_t)v;
		return rc;
	}
	if (strcmp(key, "etcd") == 0)
		return copy_string(p, c->etcd, sizeof(c->etcd), key, value);
	if (strcmp(key, "heartbeat_ms") == 0) {
		rc = parse_int(p, key, value, 50, 60000, &v);
		if (rc == 0)
			c->heartbeat_ms = (int)v;
		return rc;
	}
	if (strcmp(key, "failure_timeout_ms") == 0) {
		rc = parse_int(p, key, value, 200, 600000, &v);
		if (rc == 0)
			c->failure_timeout_ms = (int)v;
		return rc;
	}
	if (strcmp(key, "min_write_replicas") == 0) {
		rc = parse_int(p, key, value, 1, KVC_WIRE_MAX_REPLICAS, &v);
		if (rc == 0)
			c->min_write_replicas = (uint32_t)v;
		return rc;
	}
	if (strcmp(key, "replicas") == 0) {
		rc = parse_int(p, key, value, 1, KVC_WIRE_MAX_REPLICAS, &v);
		if (rc == 0)
			c->replicas = (uint32_t)v;
		return rc;
	}
	if (strcmp(key, "transport") == 0) {
		if (strcmp(value, "auto") == 0 || strcmp(value, "tcp") == 0) {
			c->transport_tcp_only = strcmp(value, "tcp") == 0;
			return 0;
		}
		return fail(p, "transport must be auto or tcp, not '%s'", value);
	}
	if (strcmp(key, "local_reads") == 0) {
		if (strcmp(value, "on") == 0 || strcmp(value, "off") == 0) {
			c->local_reads = strcmp(value, "on") == 0;
			return 0;
		}
		return fail(p, "local_reads must be on or off, not '%s'", value);
	}
	if (strcmp(key, "connect_timeout_ms") == 0) {
		rc = parse_int(p, key, value, 1, 600000, &v);
		if (rc == 0)
			c->connect_timeout_ms = (int)v;
		return rc;
	}
	if (strcmp(key, "io_timeout_ms") == 0) {
		rc = parse_int(p, key, value, 1, 600000, &v);
		if (rc == 0)
			c->io_timeout_ms = (int)v;
		return rc;
	}
	return server_key(p, key, value);
}

static int section_key(struct parser *p, const char *key, const char *value)
{
	struct kvc_config *c = p->config;
	long v;
	int rc;
	switch (p->section) {
	case SECTION_GLOBAL:
		return global_key(p, key, value);
	case SECTION_MGMT:
		if (strcmp(key, "address") == 0)
			return copy_string(p, c->managers[c->manager_count - 1].address,
			                   sizeof(c->managers[0].address), key, value);
		if (strcmp(key, "metrics") == 0)
			return metrics_address(p, c->managers[c->manager_count - 1].metrics,
			                       sizeof(c->managers[0].metrics), value);
		break;
	case SECTION_META:
		if (strcmp(key, "address") == 0)
			return copy_string(p, c->meta_address, sizeof(c->meta_address), key, value);
		if (strcmp(key, "data") == 0)
			return copy_string(p, c->meta_data, sizeof(c->meta_data), key, value);
		if (strcmp(key, "sync_interval_ms") == 0) {
			rc = parse_int(p, key, value, 0, 3600000, &v);
			if (rc == 0)
				c->sync_interval_ms = (int)v;
			return rc;
		}
		if (strcmp(key, "reserve_mb") == 0)
			return reserve_value(p, key, value, &c->meta_reserve_bytes);
		if (strcmp(key, "http") == 0)
			return copy_string(p, c->http_address, sizeof(c->http_address), key,
			                   strcmp(value, "off") == 0 ? "" : value);
		if (strcmp(key, "http_max_body") == 0) {
			rc = parse_int(p, key, value, 1024, 1 << 30, &v);
			if (rc == 0)
				c->http_max_body = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "http_threads") == 0) {
			rc = parse_int(p, key, value, 1, 256, &v);
			if (rc == 0)
				c->http_threads = (int)v;
			return rc;
		}
		if (strcmp(key, "http_token_file") == 0)
			return copy_string(p, c->http_token_file, sizeof(c->http_token_file), key,
			                   value);
		if (strcmp(key, "http_destructive") == 0) {
			static const char *const modes[] = {"loopback", "any", "none"};
			for (int i = 0; i < 3; i++)
				if (strcmp(value, modes[i]) == 0) {
					c->http_destructive = i;
					return 0;
				}
			return fail(p, "http_destructive must be loopback, any or none, not '%s'", value);
		}
		if (strcmp(key, "client_timeout_ms") == 0) {
			rc = parse_int(p, key, value, 1000, 3600000, &v);
			if (rc == 0)
				c->client_timeout_ms = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "watch_entries") == 0) {
			rc = parse_int(p, key, value, 1024, 1 << 26, &v);
			if (rc == 0)
				c->meta_watch_entries = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "lease_ms") == 0) {
			rc = parse_int(p, key, value, 0, 3600000, &v);
			if (rc == 0)
				c->lease_ms = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "world_size") == 0) {
			rc = parse_int(p, key, value, 0, 256, &v);
			if (rc == 0)
				c->world_size = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "vllm_namespace") == 0) {
			if (*value == '\0')
				return fail(p, "vllm_namespace must not be empty");
			return copy_string(p, c->vllm_namespace, sizeof(c->vllm_namespace), key, value);
		}
		break;
	case SECTION_STORAGE: {
		struct kvc_config_server *s = &c->servers[c->server_count - 1];
		if (strcmp(key, "address") == 0)
			return copy_string(p, s->address, sizeof(s->address), key, value);
		if (strcmp(key, "metrics") == 0)
			return metrics_address(p, s->metrics, sizeof(s->metrics), value);
		if (strcmp(key, "target") == 0) {
			if (c->target_count == KVC_WIRE_MAX_TARGETS)
				return fail(p, "too many targets (at most %d)", KVC_WIRE_MAX_TARGETS);
			struct kvc_config_target *t = &c->targets[c->target_count++];
			t->server = c->server_count - 1;
			s->target_count++;
			return copy_string(p, t->path, sizeof(t->path), key, value);
		}
		break;
	}
	case SECTION_FUSE:
		if (strcmp(key, "mountpoint") == 0)
			return copy_string(p, c->mountpoint, sizeof(c->mountpoint), key, value);
		if (strcmp(key, "metrics") == 0)
			return metrics_address(p, c->fuse_metrics, sizeof(c->fuse_metrics), value);
		if (strcmp(key, "cache_ttl_ms") == 0) {
			rc = parse_int(p, key, value, 1000, 600000, &v);
			if (rc == 0)
				c->cache_ttl_ms = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "receive_threads") == 0) {
			if (strcmp(value, "auto") == 0) {
				c->receive_threads = -1;
				return 0;
			}
			rc = parse_int(p, key, value, 0, 64, &v);
			if (rc == 0)
				c->receive_threads = (int)v;
			return rc;
		}
		if (strcmp(key, "early_creates") == 0) {
			if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
				return fail(p, "early_creates must be on or off, not '%s'", value);
			c->early_creates = strcmp(value, "on") == 0;
			return 0;
		}
		if (strcmp(key, "early_open_delay_ms") == 0) {
			rc = parse_int(p, key, value, 0, 600000, &v);
			if (rc == 0)
				c->early_open_delay_ms = (uint32_t)v;
			return rc;
		}
		if (strcmp(key, "gpu_staging_mb") == 0) {
			rc = parse_int(p, key, value, 2, 4096, &v);
			if (rc == 0)
				c->gpu_staging_mb = (uint32_t)v;
			return rc;
		}
		if (strncmp(key, "usrbio_uid_", 11) == 0)
			return usrbio_limit(p, key, value);
		if (strcmp(key, "readahead_kb") == 0) {
			rc = parse_int(p, key, value, 0, 1 << 20, &v);
			if (rc == 0)
				c->readahead_kb = (int)v;
			return rc;
		}
		break;
	}
	return fail(p, "unknown key '%s' in this section", key);
}

static int check_whole(struct parser *p)
{
	struct kvc_config *c = p->config;
	p->line = 0;
	if (c->meta_address[0] == '\0')
		return fail(p, "[meta] address is missing");
	if (c->server_count == 0 && c->manager_count == 0)
		return fail(p, "no [storage NAME] section: a cluster needs at least one (or [mgmt "
		               "NAME] sections: then the managers' routing table names them)");
	for (uint32_t i = 0; i < c->server_count; i++) {
		if (c->servers[i].address[0] == '\0')
			return fail(p, "[storage %s] address is missing", c->servers[i].name);
		if (c->servers[i].target_count == 0)
			return fail(p, "[storage %s] has no target", c->servers[i].name);
	}
	for (uint32_t i = 0; i < c->manager_count; i++)
		if (c->managers[i].address[0] == '\0')
			return fail(p, "[mgmt %s] address is missing", c->managers[i].name);
	if (c->manager_count && c->etcd[0] == '\0')
		return fail(p, "[mgmt NAME] sections need etcd = URL[,URL...] (where the managers "
		               "keep the cluster's state)");
	if (c->heartbeat_ms * 2 > c->failure_timeout_ms)
		return fail(p, "failure_timeout_ms (%d) must be at least twice heartbeat_ms (%d)",
		            c->failure_timeout_ms, c->heartbeat_ms);
	if (c->min_write_replicas > c->replicas)
		return fail(p, "min_write_replicas = %u is more than replicas = %u",
		            c->min_write_replicas, c->replicas);
	/* With managers the chains are theirs (seeded from their cluster file's
	 * storage sections: kvc-mgmt checks those make chains); a client's or a
	 * joining host's file may name fewer servers, or none. */
	if (c->manager_count)
		return 0;
	if (c->replicas > c->server_count)
		return fail(p, "replicas = %u needs as many storage servers; the cluster has %u",
		            c->replicas, c->server_count);
	if (c->target_count % c->replicas)
		return fail(p, "the %u targets do not make chains of %u (replicas): a chain's "
		               "members are whole targets, give every chain its %u",
		            c->target_count, c->replicas, c->replicas);
	for (uint32_t i = 0; i < c->server_count && c->replicas > 1; i++)
		if (c->servers[i].target_count > c->target_count / c->replicas)
			return fail(p, "[storage %s] has %u of the %u targets: with replicas = %u a "
			               "chain's members are on distinct servers, so no server may hold "
			               "more than %u", c->servers[i].name, c->servers[i].target_count,
			            c->target_count, c->replicas, c->target_count / c->replicas);
	if (c->stripe > c->target_count / c->replicas)
		return fail(p, "stripe %u is larger than the %u chains of the cluster (targets / "
		               "replicas)", c->stripe, c->target_count / c->replicas);
	return 0;
}

int kvc_config_parse(const char *text, const char *origin,
                     struct kvc_config *config, char *err, size_t err_size)
{
	struct parser p = {config, origin, 0, SECTION_GLOBAL, err, err_size};
	char line[PATH_MAX + 256];
	int rc = 0;

	memset(config, 0, sizeof(*config));
	config->chunk_size = KVC_LAYOUT_DEFAULT_CHUNK;
	config->stripe = 0; /* 0: all chains, set below */
	config->replicas = 0; /* not given: set below */
	config->heartbeat_ms = 500;
	config->failure_timeout_ms = 3000;
	config->connect_timeout_ms = 2000;
	config->io_timeout_ms = 5000;
	config->server_max_connections = KVC_SERVER_DEFAULT_MAX_CONNECTIONS;
	config->server_idle_timeout_ms = KVC_SERVER_DEFAULT_IDLE_TIMEOUT_MS;
	config->local_reads = true;
	config->server_io_timeout_ms = KVC_SERVER_DEFAULT_IO_TIMEOUT_MS;
	config->sync_interval_ms = 1000;
	config->storage_reserve_bytes = -1;
	config->storage_inline_bytes = -1;
	config->storage_direct_reads = false;
	config->meta_reserve_bytes = -1;
	strcpy(config->http_address, "127.0.0.1:18000");
	config->http_max_body = 1 << 20;
	config->http_threads = 4;
	config->lease_ms = 5000;
	config->client_timeout_ms = 30000;
	config->meta_watch_entries = 1 << 20;
	config->cache_ttl_ms = 10000;
	strcpy(config->vllm_namespace, "vllm");
	strcpy(config->mountpoint, "/mnt/kvc");
	config->readahead_kb = 16384;
	config->early_creates = true;
	config->early_open_delay_ms = 5;
	config->receive_threads = -1;
	config->gpu_staging_mb = 128;
	config->usrbio_uid_iov_mb = 1 << 20; /* 1 TiB */
	config->usrbio_uid_rings = 1024;
	config->usrbio_uid_registrations = 65536;
	config->usrbio_uid_connections = 256;

	const char *cursor = text;
	while (*cursor && rc == 0) {
		const char *nl = strchr(cursor, '\n');
		size_t len = nl ? (size_t)(nl - cursor) : strlen(cursor);
		p.line++;
		if (len >= sizeof(line))
			return fail(&p, "line is too long");
		memcpy(line, cursor, len);
		line[len] = '\0';
		cursor += len + (nl ? 1 : 0);

		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (*s == '\0')
			continue;
		if (*s == '[') {
			rc = section_header(&p, s);
			continue;
		}
		char *eq = strchr(s, '=');
		if (!eq)
			return fail(&p, "expected 'key = value' or '[section]'");
		*eq = '\0';
		rc = section_key(&p, trim(s), trim(eq + 1));
	}
	if (rc < 0)
		return rc;
	/* A cluster with managers is the multi-host kind: three copies unless
	 * told; the embedded one (no managers) keeps one. */
	if (config->replicas == 0)
		config->replicas = config->manager_count ? 3 : 1;
	rc = check_whole(&p);
	if (rc == 0 && config->stripe == 0)
		config->stripe = config->target_count / config->replicas;
	if (rc == 0 && config->min_write_replicas == 0)
		config->min_write_replicas = config->replicas > 1 ? config->replicas / 2 + 1 : 1;
	return rc;
}

int kvc_config_load(const char *path, struct kvc_config *config, char *err,
                    size_t err_size)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		int rc = -errno;
		snprintf(err, err_size, "%s: cannot read: %s", path, strerror(errno));
		return rc;
	}
	char *text = NULL;
	size_t size = 0;
	FILE *mem = open_memstream(&text, &size);
	char buf[4096];
	size_t got;
	while (mem && (got = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, got, mem);
	fclose(f);
	if (!mem) {
		snprintf(err, err_size, "%s: out of memory", path);
		return -ENOMEM;
	}
	fclose(mem);
	int rc = kvc_config_parse(text, path, config, err, err_size);
	free(text);
	return rc;
}

const struct kvc_config_server *kvc_config_server_find(const struct kvc_config *config,
                                                       const char *name)
{
	for (uint32_t i = 0; i < config->server_count; i++)
		if (strcmp(config->servers[i].name, name) == 0)
			return &config->servers[i];
	return NULL;
}

int kvc_config_load_secret(struct kvc_config *config, uint32_t role, char *err,
                           size_t err_size)
{
	const char *path = role == KVC_AUTH_CLUSTER ? config->secret_file
	                   : role == KVC_AUTH_POOL  ? config->pool_secret_file : NULL;
	if (!path || !*path) {
		snprintf(err, err_size, "the cluster file names no %s",
		         role == KVC_AUTH_POOL ? "pool_secret_file" : "secret_file");
		return -ENOENT;
	}
	struct kvc_auth_cred cred = {.role = role};
	int rc = kvc_auth_key_load(path, role == KVC_AUTH_POOL, &cred.key, err, err_size);
	if (rc == 0)
		config->cred = cred;
	return rc;
}

int kvc_config_load_reported(const char *program, const char *path, struct kvc_config *config)
{
	char err[512];
	int rc = kvc_config_load(path, config, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "%s: bad config: %s\n", program, err);
	return rc;
}

int kvc_config_load_secret_reported(const char *program, struct kvc_config *config,
                                    uint32_t role)
{
	char err[PATH_MAX + 128];
	int rc = kvc_config_load_secret(config, role, err, sizeof(err));
	if (rc < 0)
		fprintf(stderr, "%s: cannot use the %s secret: %s\n", program,
		        kvc_auth_role_name(role), err);
	return rc;
}
