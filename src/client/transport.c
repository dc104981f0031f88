/* transport: the dispatch over the transports of transport.h, and the
 * TCP one (CHUNK_READ / CHUNK_WRITE on the servers' pooled connections). */
#include "client/transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/storage_client.h"
#include "client/transport_local.h"
#include "core/metrics.h"

static const struct kvc_transport_ops *const transports[KVC_TRANSPORT_KINDS] = {
	[KVC_TRANSPORT_TCP] = &kvc_transport_tcp_ops,
	[KVC_TRANSPORT_PLACE] = &kvc_transport_place_ops,
};

uint64_t kvc_transport_region_id(void)
{
	static atomic_uint_fast64_t next = 1;
	return atomic_fetch_add(&next, 1);
}

int kvc_transport_region_create(size_t bytes, const char *name, bool populate,
                                struct kvc_storage_region *out)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	void *shared = MAP_FAILED;
	if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0)
		shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		              MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
	int rc = shared == MAP_FAILED ? -errno : 0;
	if (rc == 0)
		*out = (struct kvc_storage_region){.id = kvc_transport_region_id(), .fd = fd,
		                                   .size = bytes, .base = shared};
	else if (fd >= 0)
		close(fd);
	return rc;
}

uint64_t kvc_transport_place_epoch(struct kvc_storage_client *client)
{
	return atomic_load(&client->place_epoch);
}

bool kvc_transport_place_moved(struct kvc_storage_client *client, uint64_t epoch)
{
	return atomic_load(&client->place_epoch) != epoch;
}

void kvc_transport_region_drop(struct kvc_storage_client *client,
                               struct kvc_storage_region *region)
{
	if (region->base)
		atomic_fetch_add(&client->place_dropped, 1);
	kvc_transport_region_destroy(client, region);
}

void kvc_transport_region_destroy(struct kvc_storage_client *client,
                                  struct kvc_storage_region *region)
{
	if (!region->base)
		return;
	if (client)
		kvc_transport_forget_region(client, region);
	munmap(region->base, region->size);
	close(region->fd);
	*region = (struct kvc_storage_region){.fd = -1};
}

static struct kvc_rpc_pool *tcp_pool(struct kvc_storage_client *client, uint32_t server)
{
	return &client->pools[server];
}

static int tcp_read_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                         const struct kvc_msg_piece *pieces, uint32_t count,
                         const struct kvc_storage_region *region,
                         const struct kvc_msg_place_span *spans, uint32_t span_count)
{
	(void)client;
	(void)region;
	(void)spans;
	(void)span_count;
	struct kvc_msg_chunk_read head = {.count = count};
	struct iovec body[2] = {{&head, sizeof(head)},
	                        {(void *)pieces, count * sizeof(pieces[0])}};
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_READ, t->id, 0,
	                     (uint32_t)(sizeof(head) + count * sizeof(pieces[0])), 0);
	return kvc_wire_send_parts(t->fd, &h, body, 2);
}

static int tcp_write_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                          const struct kvc_msg_chunk_write *msg, const void *data,
                          uint32_t length, const struct kvc_storage_region *region,
                          uint64_t region_offset)
{
	(void)client;
	(void)region;
	(void)region_offset;
	struct kvc_wire_header h;
	struct iovec iov = {(void *)data, length};
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_WRITE, t->id, 0, sizeof(*msg), length);
	return kvc_wire_send(t->fd, &h, msg, &iov, 1);
}

const struct kvc_transport_ops kvc_transport_tcp_ops = {
	.name = "tcp", .pool = tcp_pool, .read_post = tcp_read_post,
	.read_type = KVC_MSG_CHUNK_READ, .data_inline = true, .write_post = tcp_write_post,
	.write_type = KVC_MSG_CHUNK_WRITE,
};

/* Take a connection of t's transport and a request id. */
static int take_connection(struct kvc_storage_client *client, struct kvc_transport_request *t)
{
	struct kvc_rpc_pool *pool = transports[t->kind]->pool(client, t->server);
	t->fd = kvc_rpc_pool_get(pool, &t->reused);
	if (t->fd < 0)
		return t->fd;
	t->id = kvc_rpc_next_id(pool);
	return 0;
}

int kvc_transport_read_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                            const struct kvc_msg_piece *pieces, uint32_t count,
                            const struct kvc_storage_region *region,
                            const struct kvc_msg_place_span *spans, uint32_t span_count)
{
	int rc = take_connection(client, t);
	if (rc == 0)
		rc = transports[t->kind]->read_post(client, t, pieces, count, region, spans,
		                                    span_count);
	if (rc == 0)
		atomic_fetch_add_explicit(&client->transport_ops[t->kind], 1, memory_order_relaxed);
	return rc;
}

int kvc_transport_read_complete(struct kvc_transport_request *t, uint32_t count,
                                struct kvc_msg_piece_result *results, int32_t *status,
                                uint64_t *data_len)
{
	const struct kvc_transport_ops *ops = transports[t->kind];
	struct kvc_wire_header h;
	int rc = kvc_wire_recv(t->fd, &h, results, count * (uint32_t)sizeof(results[0]));
	if (rc < 0)
		return rc;
	if (h.request_id != t->id || h.type != ops->read_type || (!ops->data_inline && h.data_len))
		return -EBADMSG;
	*status = h.status;
	*data_len = h.data_len;
	if (h.status < 0)
		return h.data_len ? -EBADMSG : 0;
	return h.body_len == count * sizeof(results[0]) ? 0 : -EBADMSG;
}

int kvc_transport_read_data(struct kvc_transport_request *t, void *dst, uint32_t length)
{
	if (!transports[t->kind]->data_inline || length == 0)
		return 0;
	return kvc_wire_recv_exact(t->fd, dst, length);
}

int kvc_transport_write_post(struct kvc_storage_client *client, struct kvc_transport_request *t,
                             const struct kvc_msg_chunk_write *msg, const void *data,
                             uint32_t length, const struct kvc_storage_region *region,
                             uint64_t region_offset)
{
	int rc = take_connection(client, t);
	if (rc == 0)
		rc = transports[t->kind]->write_post(client, t, msg, data, length, region,
		                                     region_offset);
	if (rc == 0) {
		atomic_fetch_add_explicit(&client->transport_ops[t->kind], 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&client->transport_bytes[t->kind], length,
		                          memory_order_relaxed);
	}
	return rc;
}

int kvc_transport_write_complete(struct kvc_transport_request *t)
{
	struct kvc_msg_chunk_write_reply reply;
	struct kvc_wire_header h;
	int rc = kvc_wire_recv(t->fd, &h, &reply, sizeof(reply));
	if (rc < 0)
		return rc;
	if (h.request_id != t->id || h.type != transports[t->kind]->write_type || h.data_len)
		return -EBADMSG;
	return h.status < 0 ? h.status : 1; /* 1: answered, connection reusable */
}

void kvc_transport_done(struct kvc_storage_client *client, struct kvc_transport_request *t,
                        bool healthy)
{
	if (t->fd >= 0)
		kvc_rpc_pool_put(transports[t->kind]->pool(client, t->server), t->fd, healthy);
	t->fd = -1;
}

void kvc_transport_drain(struct kvc_storage_client *client, struct kvc_transport_request *t)
{
	kvc_rpc_pool_drain(transports[t->kind]->pool(client, t->server));
}

/* The transports' metrics (kvc_transport_metrics). */
struct transport_metrics {
	struct kvc_storage_client *client;
	struct kvc_metrics_counter *ops[KVC_TRANSPORT_KINDS], *bytes[KVC_TRANSPORT_KINDS];
	struct kvc_metrics_counter *fallbacks, *epoch, *dropped;
};

static void collect_transports(void *arg)
{
	struct transport_metrics *tm = arg;
	for (int k = 0; k < KVC_TRANSPORT_KINDS; k++) {
		kvc_metrics_counter_set(tm->ops[k], atomic_load(&tm->client->transport_ops[k]));
		kvc_metrics_counter_set(tm->bytes[k], atomic_load(&tm->client->transport_bytes[k]));
	}
	kvc_metrics_counter_set(tm->fallbacks, atomic_load(&tm->client->place_fallbacks));
	kvc_metrics_counter_set(tm->epoch, atomic_load(&tm->client->place_epoch));
	kvc_metrics_counter_set(tm->dropped, atomic_load(&tm->client->place_dropped));
}

int kvc_transport_metrics(struct kvc_storage_client *client, struct kvc_metrics *registry,
                          const char *prefix)
{
	struct transport_metrics *tm = calloc(1, sizeof(*tm));
	char ops[96], bytes[96], fallbacks[96], epoch[96], dropped[96];
	if (!tm)
		return -ENOMEM;
	tm->client = client;
	snprintf(ops, sizeof(ops), "%s_transport_requests_total", prefix);
	snprintf(bytes, sizeof(bytes), "%s_transport_bytes_total", prefix);
	snprintf(fallbacks, sizeof(fallbacks), "%s_transport_place_fallbacks_total", prefix);
	snprintf(epoch, sizeof(epoch), "%s_transport_place_epoch_total", prefix);
	snprintf(dropped, sizeof(dropped), "%s_transport_place_memory_dropped_total", prefix);
	bool ok = true;
	for (int k = 0; k < KVC_TRANSPORT_KINDS; k++) {
		struct kvc_metrics_label label = {"transport", transports[k]->name};
		tm->ops[k] = kvc_metrics_counter(registry, ops,
		                                 "Chunk read and write requests sent, per transport "
		                                 "(tcp, or place: same-host placement).", &label, 1);
		tm->bytes[k] = kvc_metrics_counter(registry, bytes,
		                                   "Chunk bytes read and written, per transport.",
		                                   &label, 1);
		ok = ok && tm->ops[k] && tm->bytes[k];
	}
	tm->fallbacks = kvc_metrics_counter(registry, fallbacks,
	                                    "Placed requests that failed for the transport's "
	                                    "sake and ran again over TCP.", NULL, 0);
	tm->epoch = kvc_metrics_counter(registry, epoch,
	                                "Times memory that servers place into may still be "
	                                "written by one later: placed requests that fell back, "
	                                "placed pieces that failed with EIO.", NULL, 0);
	tm->dropped = kvc_metrics_counter(registry, dropped,
	                                  "Buffers servers place into given up (not reused) "
	                                  "because of such a time during their use.", NULL, 0);
	if (!ok || !tm->fallbacks || !tm->epoch || !tm->dropped) {
		free(tm);
		return -ENOMEM;
	}
	int rc = kvc_metrics_collector(registry, collect_transports, tm);
	return rc < 0 ? rc : kvc_transport_local_metrics(client, registry, prefix);
}
