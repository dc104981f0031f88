/* transport_place: same-host placement, the client side (transport.h).
 * Per storage server: whether it is on this host (its address is local
 * and its PLACE_HELLO host identity equals ours), the registration
 * connection (the regions registered with the server live as long as
 * it), the ids registered on it, and a pool of data connections to the
 * server's abstract Unix socket "kvc-place:<address>". */
#include "client/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/storage_client.h"
#include "core/clock.h"
#include "core/host_id.h"
#include "core/log.h"
#include "core/net.h"

/* A placed read request's bytes, at least and at most. */
#define PLACE_REQUEST_MIN (1u << 20)
#define PLACE_REQUEST_MAX (4u << 20)
/* After a failure, placement to that server pauses this long. */
#define RETRY_NS (1000ll * 1000 * 1000)
#define NEVER INT64_MAX

struct place_server {
	pthread_mutex_t lock; /* all below; held across registration exchanges */
	bool on;              /* connected, same host */
	int64_t retry_at_ns;  /* while off: when to try again (NEVER: not local) */
	int reg_fd;           /* the registration connection, -1 */
	uint64_t *ids;        /* regions registered on reg_fd */
	int count, cap;
	bool pool_ok;
	struct kvc_rpc_pool pool;
};

struct kvc_place_client {
	bool have_host;
	uint8_t host_id[KVC_PLACE_HOST_ID];
	struct place_server servers[KVC_CONFIG_MAX_SERVERS];
};

int kvc_transport_place_init(struct kvc_storage_client *client, const struct kvc_config *config)
{
	client->place = NULL;
	if (config->transport_tcp_only)
		return 0;
	struct kvc_place_client *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->have_host = kvc_host_id(p->host_id) == 0;
	client->place = p;
	/* One server thread moves a placed request's bytes: with more cores,
	 * more and smaller requests run at once (16 MiB over the CPUs,
	 * between 1 and 4 MiB: 1 MiB on a 16-core host, 4 MiB on 4 cores or
	 * fewer, where fewer requests save wake-ups). */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t bytes = cpus > 0 ? (16ull << 20) / (uint64_t)cpus : PLACE_REQUEST_MAX;
	client->place_request_bytes = bytes < PLACE_REQUEST_MIN   ? PLACE_REQUEST_MIN
	                            : bytes > PLACE_REQUEST_MAX ? PLACE_REQUEST_MAX
	                                                        : (uint32_t)bytes;
	for (uint32_t i = 0; i < client->server_count; i++)
		kvc_transport_place_add_server(client, i);
	return 0;
}

void kvc_transport_place_add_server(struct kvc_storage_client *client, uint32_t i)
{
	struct kvc_place_client *p = client->place;
	if (!p || i >= KVC_CONFIG_MAX_SERVERS)
		return;
	struct place_server *s = &p->servers[i];
	char address[KVC_NET_ADDRESS_MAX + 16];
	pthread_mutex_init(&s->lock, NULL);
	s->reg_fd = -1;
	snprintf(address, sizeof(address), "@kvc-place:%s", client->server_address[i]);
	s->pool_ok = p->have_host && kvc_net_address_is_local(client->server_address[i]) &&
	             kvc_rpc_pool_init(&s->pool, address, &client->cred, client->connect_timeout_ms,
	                               client->io_timeout_ms) == 0;
	s->retry_at_ns = s->pool_ok ? 0 : NEVER;
}

void kvc_transport_place_destroy(struct kvc_storage_client *client)
{
	struct kvc_place_client *p = client->place;
	if (!p)
		return;
	for (uint32_t i = 0; i < client->server_count; i++) {
		struct place_server *s = &p->servers[i];
		if (s->reg_fd >= 0)
			close(s->reg_fd);
		if (s->pool_ok)
			kvc_rpc_pool_destroy(&s->pool);
		free(s->ids);
		pthread_mutex_destroy(&s->lock);
	}
	free(p);
	client->place = NULL;
}

/* One exchange on the registration connection. Returns the server's
 * status or a transport -errno. */
static int exchange(struct kvc_storage_client *client, struct place_server *s, uint16_t type,
                    const void *body, uint32_t body_len, const int *fds, int fd_count,
                    void *reply, uint32_t reply_len)
{
	struct kvc_wire_header h;
	uint64_t id = kvc_rpc_next_id(&s->pool);
	(void)client;
	kvc_wire_header_init(&h, type, id, 0, body_len, 0);
	int rc = kvc_wire_send_fds(s->reg_fd, &h, body, fds, fd_count);
	if (rc == 0)
		rc = kvc_wire_recv(s->reg_fd, &h, reply, reply_len);
	if (rc == 0 && (h.request_id != id || h.type != type || h.data_len ||
	                (h.status == 0 && h.body_len != reply_len)))
		rc = -EBADMSG;
	return rc < 0 ? rc : h.status;
}

/* Off for a while (lock held): the registrations go with the connection. */
static void turn_off(struct place_server *s, int64_t retry_at_ns)
{
	if (s->reg_fd >= 0)
		close(s->reg_fd);
	s->reg_fd = -1;
	s->count = 0;
	s->on = false;
	s->retry_at_ns = retry_at_ns;
	if (s->pool_ok)
		kvc_rpc_pool_drain(&s->pool);
}

/* Connect and compare host identities (lock held); quiet: no log line
 * (a tool's probe). */
static void connect_server(struct kvc_storage_client *client, uint32_t server, bool quiet)
{
	struct kvc_place_client *p = client->place;
	struct place_server *s = &p->servers[server];
	bool reused;
	s->reg_fd = kvc_rpc_pool_get(&s->pool, &reused);
	if (s->reg_fd < 0) {
		/* No such socket: an older server, or one in another network
		 * namespace; ask again later. */
		s->reg_fd = -1;
		turn_off(s, kvc_clock_monotonic_ns() + 10 * RETRY_NS);
		return;
	}
	struct kvc_msg_place_hello_reply hello;
	int rc = exchange(client, s, KVC_MSG_PLACE_HELLO, NULL, 0, NULL, 0, &hello, sizeof(hello));
	if (rc == 0 && memcmp(hello.host_id, p->host_id, sizeof(p->host_id)) != 0) {
		if (!quiet)
			kvc_log_warn("storage server %s answers on this host's socket but is "
			             "another host: no placement", client->server_address[server]);
		turn_off(s, NEVER);
		return;
	}
	if (rc == -EACCES || rc == -EOPNOTSUPP) {
		/* The server refuses our uid, or serves no placement: for good. */
		if (!quiet)
			kvc_log_warn("storage server %s refuses placement (%s): TCP",
			             client->server_address[server], strerror(-rc));
		turn_off(s, NEVER);
		return;
	}
	if (rc < 0) {
		turn_off(s, kvc_clock_monotonic_ns() + RETRY_NS);
		return;
	}
	s->on = true;
	if (!quiet)
		kvc_log_info("storage server %s is on this host: reads and writes of registered "
		             "memory are placed", client->server_address[server]);
}

static bool has_region(const struct place_server *s, uint64_t id)
{
	for (int i = 0; i < s->count; i++)
		if (s->ids[i] == id)
			return true;
	return false;
}

static int add_region(struct kvc_storage_client *client, struct place_server *s,
                      const struct kvc_storage_region *region)
{
	if (s->count == s->cap) {
		int cap = s->cap ? 2 * s->cap : 16;
		uint64_t *grown = realloc(s->ids, (size_t)cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->ids = grown;
		s->cap = cap;
	}
	struct kvc_msg_place_register m = {.region = region->id, .size = region->size,
	                                   .file_offset = region->file_offset};
	int rc = exchange(client, s, KVC_MSG_PLACE_REGISTER, &m, sizeof(m), &region->fd, 1, NULL,
	                  0);
	if (rc == 0)
		s->ids[s->count++] = region->id;
	return rc;
}

bool kvc_transport_place_ready(struct kvc_storage_client *client, uint32_t server,
                               const struct kvc_storage_region *region)
{
	struct kvc_place_client *p = client->place;
	if (!p || !region || server >= client->server_count)
		return false;
	struct place_server *s = &p->servers[server];
	bool ready = false;
	pthread_mutex_lock(&s->lock);
	if (!s->on && s->retry_at_ns != NEVER && kvc_clock_monotonic_ns() >= s->retry_at_ns)
		connect_server(client, server, false);
	if (s->on) {
		int rc = has_region(s, region->id) ? 0 : add_region(client, s, region);
		if (rc < 0 && kvc_rpc_is_transport_error(rc))
			turn_off(s, kvc_clock_monotonic_ns() + RETRY_NS);
		ready = rc == 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ready;
}

const char *kvc_transport_for(struct kvc_storage_client *client, uint32_t server)
{
	struct kvc_place_client *p = client->place;
	if (!p || server >= client->server_count)
		return "tcp";
	struct place_server *s = &p->servers[server];
	pthread_mutex_lock(&s->lock);
	if (!s->on && s->retry_at_ns != NEVER && kvc_clock_monotonic_ns() >= s->retry_at_ns)
		connect_server(client, server, true);
	bool on = s->on;
	pthread_mutex_unlock(&s->lock);
	return on ? "place" : "tcp";
}

int kvc_transport_place_connection(struct kvc_storage_client *client, uint32_t server,
                                   bool *reused)
{
	struct kvc_place_client *p = client->place;
	if (!p || server >= client->server_count)
		return -EOPNOTSUPP;
	struct place_server *s = &p->servers[server];
	pthread_mutex_lock(&s->lock);
	if (!s->on && s->retry_at_ns != NEVER && kvc_clock_monotonic_ns() >= s->retry_at_ns)
		connect_server(client, server, true);
	bool on = s->on, never = s->retry_at_ns == NEVER;
	pthread_mutex_unlock(&s->lock);
	if (!on)
		return never ? -EOPNOTSUPP : -EAGAIN;
	return kvc_rpc_pool_get(&s->pool, reused);
}

void kvc_transport_place_connection_done(struct kvc_storage_client *client, uint32_t server,
                                         int fd, bool healthy)
{
	kvc_rpc_pool_put(&client->place->servers[server].pool, fd, healthy);
}

void kvc_transport_place_failed(struct kvc_storage_client *client, uint32_t server, int rc)
{
	struct kvc_place_client *p = client->place;
	if (!p || server >= client->server_count)
		return;
	struct place_server *s = &p->servers[server];
	atomic_fetch_add(&client->place_fallbacks, 1);
	atomic_fetch_add(&client->place_epoch, 1);
	pthread_mutex_lock(&s->lock);
	if (s->on)
		kvc_log_warn("placement to storage server %s failed (%s): TCP for a while",
		             client->server_address[server], strerror(-rc));
	turn_off(s, kvc_clock_monotonic_ns() + RETRY_NS);
	pthread_mutex_unlock(&s->lock);
}

void kvc_transport_forget_region(struct kvc_storage_client *client,
                                 const struct kvc_storage_region *region)
{
	struct kvc_place_client *p = client->place;
	if (!p || !region)
		return;
	for (uint32_t i = 0; i < client->server_count; i++) {
		struct place_server *s = &p->servers[i];
		pthread_mutex_lock(&s->lock);
		for (int k = 0; k < s->count; k++) {
			if (s->ids[k] != region->id)
				continue;
			struct kvc_msg_place_region m = {.region = region->id};
			int rc = exchange(client, s, KVC_MSG_PLACE_UNREGISTER, &m, sizeof(m), NULL, 0,
			                  NULL, 0);
			s->ids[k] = s->ids[--s->count];
			/* Unknown to the server or no answer: the connection goes,
			 * and with it whatever it registered. */
			if (rc < 0)
				turn_off(s, kvc_clock_monotonic_ns() + RETRY_NS);
			break;
		}
		pthread_mutex_unlock(&s->lock);
	}
}

static struct kvc_rpc_pool *place_pool(struct kvc_storage_client *client, uint32_t server)
{
	return &client->place->servers[server].pool;
}

static int place_read_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                           const struct kvc_msg_piece *pieces, uint32_t count,
                           const struct kvc_storage_region *region,
                           const struct kvc_msg_place_span *spans, uint32_t span_count)
{
	(void)client;
	struct kvc_msg_place_read head = {.region = region->id, .count = count, .spans = span_count};
	struct iovec body[3] = {{&head, sizeof(head)},
	                        {(void *)pieces, count * sizeof(pieces[0])},
	                        {(void *)spans, span_count * sizeof(spans[0])}};
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_PLACE_READ, t->id, 0,
	                     (uint32_t)(sizeof(head) + count * sizeof(pieces[0]) +
	                                span_count * sizeof(spans[0])),
	                     0);
	return kvc_wire_send_parts(t->fd, &h, body, 3);
}

static int place_write_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                            const struct kvc_msg_chunk_write *msg, const void *data,
                            uint32_t length, const struct kvc_storage_region *region,
                            uint64_t region_offset)
{
	(void)client;
	(void)data;
	struct kvc_msg_place_write m = {.write = *msg, .region = region->id,
	                                .region_offset = region_offset, .length = length};
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_PLACE_WRITE, t->id, 0, sizeof(m), 0);
	return kvc_wire_send(t->fd, &h, &m, NULL, 0);
}

const struct kvc_transport_ops kvc_transport_place_ops = {
	.name = "place", .pool = place_pool, .read_post = place_read_post,
	.read_type = KVC_MSG_PLACE_READ, .data_inline = false, .write_post = place_write_post,
	.write_type = KVC_MSG_PLACE_WRITE,
};
