/*
 * bench meta: kvc-bench meta [--config FILE] [--http HOST:PORT] [--seconds S]
 *                            [--protocol http|native] [--batch N] [--clients N]
 *                            [--json FILE]
 *
 * A connector-like workload on kvc-meta's page pools: each client loops
 * allocate -> confirm -> exists -> locations over a batch of new keys of
 * one shared pool (1M pages, rank 0, world 1), at batch 8 and 256, with
 * 1, 8 and 32 concurrent clients, over HTTP (one
 * keep-alive connection per client, plain sockets) and over the binary
 * protocol (include/kvc/meta.h). Reports keys per second (each key passes
 * four operations) and p50/p99 latency of one full round. --protocol,
 * --batch and --clients run one part of the grid (e.g. for a profile).
 */
#include "meta.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common.h"
#include "core/cli.h"
#include "core/config.h"
#include "kvc/meta.h"
#include "core/net.h"

/* One pool shared by every client (keys carry the client's number), the
 * same every run and cleared after each point: nothing piles up in
 * kvc-meta across runs. Large enough that no point fills it. */
#define BENCH_NAMESPACE "kvc-bench"
#define POOL_PAGES (1u << 20)
#define MAX_CLIENTS 32

struct client {
	int id;
	bool http;
	int batch;
	double seconds;
	const char *http_address;
	struct kvc_meta *meta;
	char ns[32];
	int prefix;     /* keys are "<prefix>-<n>": clients share one pool */
	uint64_t keys;
	double *lat;
	size_t lat_count, lat_cap;
	int error;
};

/* One HTTP/1.1 request on a kept-alive socket; returns the status. */
static int http_post(int fd, const char *path, const char *body, size_t len, char *reply,
                     size_t cap)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
	                 "POST %s HTTP/1.1\r\nHost: kvc\r\nContent-Type: application/json\r\n"
	                 "Content-Length: %zu\r\n\r\n", path, len);
	/* One segment per request: headers and body together. */
	struct iovec parts[2] = {{head, (size_t)n}, {(void *)body, len}};
	struct msghdr msg = {.msg_iov = parts, .msg_iovlen = 2};
	if (sendmsg(fd, &msg, MSG_NOSIGNAL) != (ssize_t)((size_t)n + len))
		return -EIO;
	size_t got = 0;
	char *end = NULL;
	long content = -1;
	for (;;) {
		ssize_t r = recv(fd, reply + got, cap - 1 - got, 0);
		if (r <= 0)
			return -EIO;
		got += (size_t)r;
		reply[got] = '\0';
		if (!end && (end = strstr(reply, "\r\n\r\n"))) {
			char *cl = strcasestr(reply, "Content-Length:");
			content = cl ? strtol(cl + 15, NULL, 10) : 0;
		}
		if (end && (size_t)(end + 4 - reply) + (size_t)content <= got)
			break;
		if (got == cap - 1)
			return -EMSGSIZE;
	}
	return atoi(reply + 9);
}

static int http_round(struct client *c, int fd, uint64_t base, char *body, char *reply)
{
	size_t cap = 1 << 20;
	int n = 0;
	/* allocate on rank 0 */
	n = snprintf(body, cap, "{\"keys\":[");
	for (int i = 0; i < c->batch; i++)
		n += snprintf(body + n, cap - (size_t)n, "%s[\"c%d-%llu\",\"\"]", i ? "," : "", c->prefix,
		              (unsigned long long)(base + (uint64_t)i));
	n += snprintf(body + n, cap - (size_t)n, "],\"namespace\":\"%s\"}", c->ns);
	if (http_post(fd, "/0/reserve_and_allocate_page_indices", body, (size_t)n, reply, cap) != 200)
		return -EIO;
	/* pages from the reply: [[false,P],...] */
	const char *p = strstr(reply, "\"indices\":");
	n = snprintf(body, cap, "{\"written_keys_to_confirm\":[");
	for (int i = 0; i < c->batch && p; i++) {
		p = strchr(p + 1, ',');
		long page = p ? strtol(p + 1, NULL, 10) : -1;
		if (p)
			p = strchr(p, ']');
		n += snprintf(body + n, cap - (size_t)n, "%s[\"c%d-%llu\",%ld]", i ? "," : "", c->prefix,
		              (unsigned long long)(base + (uint64_t)i), page);
	}
	n += snprintf(body + n, cap - (size_t)n, "],\"namespace\":\"%s\"}", c->ns);
	if (http_post(fd, "/0/confirm_write", body, (size_t)n, reply, cap) != 204)
		return -EIO;
	n = snprintf(body, cap, "{\"keys\":[");
	for (int i = 0; i < c->batch; i++)
		n += snprintf(body + n, cap - (size_t)n, "%s\"c%d-%llu\"", i ? "," : "", c->prefix,
		              (unsigned long long)(base + (uint64_t)i));
	n += snprintf(body + n, cap - (size_t)n, "],\"namespace\":\"%s\"}", c->ns);
	if (http_post(fd, "/0/exists", body, (size_t)n, reply, cap) != 200 ||
	    http_post(fd, "/0/get_page_indices", body, (size_t)n, reply, cap) != 200)
		return -EIO;
	return 0;
}

static int native_round(struct client *c, uint64_t base, char (*names)[48],
                        struct kvc_meta_key *keys, int64_t *pages, bool *found)
{
	for (int i = 0; i < c->batch; i++) {
		int len = snprintf(names[i], 48, "c%d-%llu", c->prefix,
		                   (unsigned long long)(base + (uint64_t)i));
		keys[i] = (struct kvc_meta_key){names[i], (uint32_t)len};
	}
	uint32_t n = (uint32_t)c->batch;
	int rc = kvc_meta_allocate(c->meta, c->ns, 0, keys, n, pages, NULL);
	if (rc == 0)
		rc = kvc_meta_confirm(c->meta, c->ns, 0, keys, pages, n, NULL, 0, NULL);
	if (rc == 0)
		rc = kvc_meta_exists(c->meta, c->ns, keys, n, found);
	if (rc == 0)
		rc = kvc_meta_locations(c->meta, c->ns, 0, keys, n, 0, pages);
	return rc;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	int fd = -1;
	char *body = malloc(1 << 20), *reply = malloc(1 << 20);
	char (*names)[48] = malloc(sizeof(*names) * 4096);
	struct kvc_meta_key *keys = malloc(sizeof(*keys) * 4096);
	int64_t *pages = malloc(sizeof(*pages) * 4096);
	bool *found = malloc(sizeof(*found) * 4096);
	if (c->http && (fd = kvc_net_connect(c->http_address, 2000, 10000)) < 0) {
		c->error = fd;
		goto out;
	}
	double start = bench_now(), t = start;
	uint64_t base = 0;
	while (t - start < c->seconds) {
		int rc = c->http ? http_round(c, fd, base, body, reply)
		                 : native_round(c, base, names, keys, pages, found);
		if (rc < 0) {
			c->error = rc;
			break;
		}
		double now = bench_now();
		if (c->lat_count < c->lat_cap)
			c->lat[c->lat_count++] = (now - t) * 1e6;
		t = now;
		base += (uint64_t)c->batch;
		c->keys += (uint64_t)c->batch;
	}
out:
	if (fd >= 0)
		close(fd);
	free(body), free(reply), free(names), free(keys), free(pages), free(found);
	return NULL;
}

static int run_point(struct bench_table *t, struct kvc_meta *meta, const char *http_address,
                     bool http, int batch, int clients, double seconds)
{
	struct client c[MAX_CLIENTS];
	pthread_t threads[MAX_CLIENTS];
	for (int i = 0; i < clients; i++) {
		c[i] = (struct client){.id = i, .http = http, .batch = batch, .seconds = seconds,
		                       .http_address = http_address, .meta = meta, .prefix = i,
		                       .lat_cap = 1 << 20};
		strcpy(c[i].ns, BENCH_NAMESPACE);
		c[i].lat = malloc(c[i].lat_cap * sizeof(double));
	}
	double start = bench_now();
	for (int i = 0; i < clients; i++)
		pthread_create(&threads[i], NULL, client_main, &c[i]);
	uint64_t keys = 0;
	size_t total = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(threads[i], NULL);
		if (c[i].error) {
			fprintf(stderr, "kvc-bench: client %d: %s\n", i, strerror(-c[i].error));
			return c[i].error;
		}
		keys += c[i].keys;
		total += c[i].lat_count;
	}
	double elapsed = bench_now() - start;
	double *lat = malloc((total ? total : 1) * sizeof(double));
	size_t k = 0;
	for (int i = 0; i < clients; i++) {
		memcpy(lat + k, c[i].lat, c[i].lat_count * sizeof(double));
		k += c[i].lat_count;
		free(c[i].lat);
	}
	int rc = kvc_meta_clear(meta, BENCH_NAMESPACE);
	if (rc < 0)
		fprintf(stderr, "kvc-bench: clear: %s\n", strerror(-rc));
	struct bench_result *r = bench_add(t, "%s batch %d, %d client%s", http ? "http" : "native",
	                                   batch, clients, clients > 1 ? "s" : "");
	r->iops = (double)keys / elapsed;        /* keys per second */
	r->ratio = r->iops * 4 / 1e6;            /* million key operations per second */
	bench_percentiles(lat, total, r);
	free(lat);
	return 0;
}

static const char usage[] =
	"usage: kvc-bench meta [--config FILE] [--http HOST:PORT] [--seconds S]\n"
	"                      [--protocol http|native] [--batch N] [--clients N] [--json FILE]\n"
	"Page pools under a connector-like load (allocate, confirm, exists,\n"
	"locations) over HTTP and the binary protocol, at batch 8 and 256 with\n"
	"1, 8 and 32 clients.\n"
	"  -c, --config FILE          the cluster file (default /var/lib/kvc/cluster.conf)\n"
	"  -H, --http HOST:PORT       kvc-meta's HTTP address (default: [meta] http)\n"
	"  -s, --seconds S            how long each point runs (default 2)\n"
	"  -p, --protocol P           only http or only native\n"
	"  -b, --batch N              only batch N\n"
	"  -n, --clients N            only N clients\n"
	"  -j, --json FILE            write the table as JSON too\n"
	"  -h, --help                 this text\n";

int bench_meta_main(int argc, char **argv)
{
	static const struct option options[] = {{"config", required_argument, 0, 'c'},
	                                        {"http", required_argument, 0, 'H'},
	                                        {"seconds", required_argument, 0, 's'},
	                                        {"json", required_argument, 0, 'j'},
	                                        {"protocol", required_argument, 0, 'p'},
	                                        {"batch", required_argument, 0, 'b'},
	                                        {"clients", required_argument, 0, 'n'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-bench meta", usage, "c:H:s:j:p:b:n:", options, 0};
	const char *config_path = "/var/lib/kvc/cluster.conf", *json = NULL, *http = NULL;
	const char *only_protocol = NULL;
	double seconds = 2;
	int opt, only_batch = 0, only_clients = 0;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'c': config_path = optarg; break;
		case 'H': http = optarg; break;
		case 's': seconds = atof(optarg); break;
		case 'j': json = optarg; break;
		case 'p': only_protocol = optarg; break;
		case 'b': only_batch = atoi(optarg); break;
		case 'n': only_clients = atoi(optarg); break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	if ((only_protocol && strcmp(only_protocol, "http") != 0 &&
	     strcmp(only_protocol, "native") != 0) || only_batch < 0 ||
	    only_batch > KVC_META_MAX_BATCH || only_clients < 0 || only_clients > MAX_CLIENTS)
		return kvc_cli_fail(&cli, "--protocol http|native, --batch 1..%d, --clients 1..%d",
		                    KVC_META_MAX_BATCH, MAX_CLIENTS);
	static struct kvc_config config;
	if (kvc_config_load_reported("kvc-bench", config_path, &config) < 0)
		return 1;
	if (!http)
		http = config.http_address;
	struct kvc_meta *meta;
	int rc = kvc_meta_open_config(&meta, config_path);
	if (rc < 0) {
		fprintf(stderr, "kvc-bench: cannot use kvc-meta's page pools: %s\n", strerror(-rc));
		return 1;
	}
	rc = kvc_meta_pool_init(meta, BENCH_NAMESPACE, 0, POOL_PAGES, 1);
	if (rc < 0) {
		fprintf(stderr, "kvc-bench: pool init: %s\n", strerror(-rc));
		return 1;
	}
	static struct bench_table t = {.ratio_label = "Mkeyop/s"};
	int batches[] = {8, 256}, clients[] = {1, 8, 32};
	int batch_count = 2, client_count = 3;
	if (only_batch)
		batches[0] = only_batch, batch_count = 1;
	if (only_clients)
		clients[0] = only_clients, client_count = 1;
	for (int proto = 0; proto < 2; proto++) {
		const char *name = proto ? "native" : "http";
		if (only_protocol && strcmp(only_protocol, name) != 0)
			continue;
		for (int b = 0; b < batch_count; b++)
			for (int c = 0; c < client_count; c++) {
				fprintf(stderr, "%s batch %d, %d clients...\n", name, batches[b], clients[c]);
				if (run_point(&t, meta, http, proto == 0, batches[b], clients[c], seconds) < 0)
					return 1;
			}
	}
	printf("IOPS = keys per second (each key: allocate, confirm, exists, locations); "
	       "p50/p99: one round of the batch\n");
	bench_report(&t, json);
	kvc_meta_close(meta);
	return 0;
}
