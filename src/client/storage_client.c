/* storage_client: see storage_client.h (reads: storage_read.c; the chain
 * table and the manager's routing: storage_routing.c). */
#include "client/storage_client_internal.h"
#include "client/storage_target.h"
#include "client/transport_local.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

/* Pieces written in parallel in one wave, each on its own connection. */
#define WRITE_WAVE 64

int kvc_storage_client_init(struct kvc_storage_client *client,
                            const struct kvc_config *config)
{
	memset(client, 0, sizeof(*client));
	int rc = kvc_chains_build(config, &client->chains);
	/* With managers, a file whose storage sections make no chains (a
	 * joining host's, or none): the managers' table only. */
	bool from_file = rc == 0 && config->server_count > 0;
	if (rc < 0 && config->manager_count) {
		memset(&client->chains, 0, sizeof(client->chains));
		rc = 0;
	}
	if (rc < 0)
		return rc;
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_rwlock_init(&client->chains_lock, NULL);
	pthread_mutex_init(&client->routing_lock, NULL);
	pthread_mutex_init(&client->hosts_lock, NULL);
	client->cred = config->cred;
	client->connect_timeout_ms = config->connect_timeout_ms;
	client->io_timeout_ms = config->io_timeout_ms;
	pthread_cond_init(&client->routing_changed, &attr);
	pthread_condattr_destroy(&attr);
	client->failure_timeout_ms = config->failure_timeout_ms;
	for (uint32_t i = 0; i < config->manager_count && rc == 0; i++) {
		rc = kvc_rpc_pool_init(&client->managers[i], config->managers[i].address,
		                       &config->cred, config->connect_timeout_ms,
		                       config->io_timeout_ms);
		client->manager_count = rc == 0 ? i + 1 : i;
	}
	if (rc < 0) {
		kvc_storage_client_destroy(client);
		return rc;
	}
	uint32_t servers = from_file ? config->server_count : 0;
	client->target_count = from_file ? config->target_count : 0;
	for (uint32_t t = 0; t < client->target_count; t++)
		client->target_server[t] = config->targets[t].server;
	for (uint32_t i = 0; i < servers; i++) {
		strcpy(client->server_address[i], config->servers[i].address);
		rc = kvc_rpc_pool_init(&client->pools[i], config->servers[i].address,
		                       &config->cred, config->connect_timeout_ms,
		                       config->io_timeout_ms);
		if (rc < 0) {
			kvc_storage_client_destroy(client);
			return rc;
		}
		client->server_count = i + 1; /* what destroy undoes */
	}
	rc = kvc_transport_place_init(client, config);
	if (rc < 0)
		kvc_storage_client_destroy(client);
	return rc;
}

void kvc_storage_client_destroy(struct kvc_storage_client *client)
{
	kvc_transport_local_destroy(client);
	kvc_transport_place_destroy(client);
	for (uint32_t i = 0; i < client->server_count; i++)
		kvc_rpc_pool_destroy(&client->pools[i]);
	for (uint32_t i = 0; i < client->manager_count; i++)
		kvc_rpc_pool_destroy(&client->managers[i]);
	client->server_count = 0;
	client->manager_count = 0;
}

/* Map transport failures to -EIO; keep what a server answered. */
int kvc_storage_client_error(int rc)
{
	return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

bool kvc_storage_client_retryable(int rc, bool reused)
{
	return reused && (rc == -ECONNRESET || rc == -EPIPE);
}

/* Record the first failure of an io (receiving threads may race here:
 * two requests can carry pieces of one io). */
void kvc_storage_io_fail(struct kvc_storage_io *io, int rc)
{
	int expected = 0;
	__atomic_compare_exchange_n(&io->result, &expected, rc, false, __ATOMIC_RELAXED,
	                            __ATOMIC_RELAXED);
}

static int io_check(struct kvc_storage_client *client, const struct kvc_storage_io *io,
                    uint32_t *chains_seen)
{
	struct kvc_chain last;
	if (kvc_layout_check(&io->layout) < 0)
		return -EINVAL;
	/* *chains_seen: a chain count the table had earlier in this batch
	 * (the ios of a batch mostly share a layout: one table lookup). The
	 * table never shrinks (kvc_storage_client_set_chains installs only
	 * tables with at least as many chains), so a count seen stays valid. */
	if (io->layout.chain_count > *chains_seen) {
		if (!kvc_storage_client_chain(client, io->layout.chain_count - 1, &last))
			return -EINVAL;
		*chains_seen = io->layout.chain_count;
	}
	if (io->offset > KVC_LAYOUT_MAX_FILE_SIZE ||
	    io->length > KVC_LAYOUT_MAX_FILE_SIZE - io->offset)
		return -EFBIG;
	return 0;
}

int kvc_storage_client_for_each_piece(struct kvc_storage_client *client,
                                      struct kvc_storage_io *ios, int count,
                                      kvc_storage_piece_fn fn, void *arg)
{
	struct kvc_layout_piece pieces[64];
	uint32_t chains_seen = 0;
	for (int i = 0; i < count; i++) {
		struct kvc_storage_io *io = &ios[i];
		io->result = io_check(client, io, &chains_seen);
		if (io->result < 0)
			continue;
		uint64_t done = 0;
		while (done < io->length) {
			/* At most 63 whole chunks per step keeps within 64 pieces. */
			uint64_t step = io->length - done;
			uint64_t cap = 63ull * io->layout.chunk_size;
			if (step > cap)
				step = cap;
			int n = kvc_layout_split(&io->layout, io->offset + done, step, pieces, 64);
			for (int k = 0; k < n; k++) {
				pieces[k].buffer_offset += done;
				int rc = fn(arg, io, (uint32_t)i, &pieces[k]);
				if (rc < 0)
					return rc;
			}
			done += step;
		}
	}
	return 0;
}

struct write_piece {
	struct kvc_transport_request t;
	uint32_t server;
	uint32_t length;
	uint32_t io;
	int rc;
	struct kvc_msg_chunk_write msg;
	const void *data;
	const struct kvc_storage_region *region; /* placed: data is in it */
};

struct write_plan {
	struct kvc_storage_client *client;
	struct kvc_storage_io *ios;
	struct write_piece wave[WRITE_WAVE];
	int wave_count;
};

static int write_send(struct kvc_storage_client *client, struct write_piece *w)
{
	w->t.server = w->server;
	w->t.fd = -1;
	uint64_t region_offset = w->region ? (uint64_t)((const uint8_t *)w->data - w->region->base)
	                                   : 0;
	return kvc_transport_write_post(client, &w->t, &w->msg, w->data, w->length, w->region,
	                                region_offset);
}

/* A placed write the server could not take for the transport's sake
 * (not a status of the write itself): run it over TCP. */
static bool place_fault(int rc)
{
	return kvc_rpc_is_transport_error(rc) || rc == -ENOENT || rc == -EOPNOTSUPP ||
	       rc == -EACCES || rc == -EBADMSG;
}

/* Receive a sent piece's answer; a placed one that failed for the
 * transport goes again over TCP, unless its answer timed out: the server
 * may still hold it and apply it after a later write of the same bytes'
 * range, so it fails as a TCP write that times out does (placement to
 * that server pauses either way). */
static void write_finish(struct kvc_storage_client *client, struct write_piece *w)
{
	/* A frame that did not go out whole (e.g. EFAULT: its source
	 * memory vanished) leaves the connection mid-frame: never reuse it. */
	bool sent = w->rc == 0;
	if (w->rc == 0)
		w->rc = kvc_transport_write_complete(&w->t);
	kvc_transport_done(client, &w->t, sent && (w->rc == 1 || (w->rc < 0 &&
	                                           !kvc_rpc_is_transport_error(w->rc))));
	bool fault = w->rc < 0 && w->t.kind != KVC_TRANSPORT_TCP && place_fault(w->rc);
	if (fault)
		kvc_transport_place_failed(client, w->server, w->rc);
	if (fault && w->rc != -ETIMEDOUT) {
		w->t.kind = KVC_TRANSPORT_TCP;
		w->region = NULL;
		w->rc = write_send(client, w);
		sent = w->rc == 0;
		if (w->rc == 0)
			w->rc = kvc_transport_write_complete(&w->t);
		kvc_transport_done(client, &w->t, sent && (w->rc == 1 || (w->rc < 0 &&
		                                           !kvc_rpc_is_transport_error(w->rc))));
	}
	if (w->rc < 0 && kvc_storage_client_retryable(w->rc, w->t.reused)) {
		kvc_transport_drain(client, &w->t);
		w->rc = write_send(client, w);
		if (w->rc == 0)
			w->rc = kvc_transport_write_complete(&w->t);
		kvc_transport_done(client, &w->t, w->rc == 1);
	}
}

/* Send a wave of pieces, then collect every answer. */
static void write_wave(struct write_plan *plan)
{
	struct kvc_storage_client *client = plan->client;
	for (int i = 0; i < plan->wave_count; i++)
		plan->wave[i].rc = write_send(client, &plan->wave[i]);
	for (int i = 0; i < plan->wave_count; i++) {
		struct write_piece *w = &plan->wave[i];
		write_finish(client, w);
		if (w->rc < 0)
			kvc_storage_io_fail(&plan->ios[w->io], kvc_storage_client_error(w->rc));
	}
	plan->wave_count = 0;
}

/* Every piece goes to the head of its chain. */
static int write_add_piece(void *arg, struct kvc_storage_io *io, uint32_t io_index,
                           const struct kvc_layout_piece *p)
{
	struct write_plan *plan = arg;
	struct kvc_chain c, *chain = &c;
	if (io->scatter) {
		kvc_storage_io_fail(io, -EINVAL); /* scattering is for reads */
		return 0;
	}
	if (!kvc_storage_client_chain(plan->client, p->chain, &c) || c.count == 0) {
		kvc_storage_io_fail(io, -EIO); /* no member serving */
		return 0;
	}
	uint32_t head = chain->targets[0];
	uint32_t server = plan->client->target_server[head];
	bool placed = io->region && kvc_transport_place_ready(plan->client, server, io->region);
	plan->wave[plan->wave_count++] = (struct write_piece){
		.t = {.kind = placed ? KVC_TRANSPORT_PLACE : KVC_TRANSPORT_TCP, .fd = -1},
		.region = placed ? io->region : NULL,
		.server = server, .length = p->length,
		.io = io_index, .data = (const uint8_t *)io->buf + p->buffer_offset,
		.msg = {.inode = io->inode, .target = head, .chunk = p->chunk,
		        .chunk_size = io->layout.chunk_size, .offset = p->chunk_offset,
		        .chain = p->chain, .chain_version = chain->version}};
	if (plan->wave_count == WRITE_WAVE)
		write_wave(plan);
	return 0;
}

static int write_batch_once(struct kvc_storage_client *client, struct kvc_storage_io *ios,
                            int count)
{
	struct write_plan *plan = malloc(sizeof(*plan));
	if (!plan)
		return -ENOMEM;
	*plan = (struct write_plan){.client = client, .ios = ios};
	int rc = kvc_storage_client_for_each_piece(client, ios, count, write_add_piece, plan);
	if (plan->wave_count)
		write_wave(plan);
	free(plan);
	for (int i = 0; i < count && rc == 0; i++)
		rc = ios[i].result;
	return rc;
}

int kvc_storage_client_write_batch(struct kvc_storage_client *client,
                                   struct kvc_storage_io *ios, int count)
{
	return kvc_storage_client_with_routing(client, ios, count, write_batch_once);
}

int64_t kvc_storage_client_patience_ns(const struct kvc_storage_client *client)
{
	/* Detection (the manager's failure timeout, twice for a heartbeat that
	 * just missed it), plus an attempt that met a stopped server: a
	 * connection and a fresh one, each up to the io timeout. */
	int io = client->io_timeout_ms;
	return (2ll * client->failure_timeout_ms + 2ll * io + 1000) * 1000000;
}

/* What a new routing table may cure: a member down or stopped (-EIO,
 * -ETIMEDOUT), a table older or newer than the server's (-ESTALE, -ENXIO). */
static bool routing_may_cure(int rc)
{
	return rc == -EIO || rc == -ETIMEDOUT || rc == -ESTALE || rc == -ENXIO;
}

int kvc_storage_client_with_routing(struct kvc_storage_client *client,
                                    struct kvc_storage_io *ios, int count,
                                    int (*run)(struct kvc_storage_client *client,
                                               struct kvc_storage_io *ios, int count))
{
	struct kvc_chains now;
	kvc_storage_client_chains(client, &now);
	uint64_t version = now.version;
	int rc = run(client, ios, count);
	if (rc == 0 || !client->following)
		return rc;
	/* Long enough for the manager to notice a failure and change chains. */
	int64_t deadline = (int64_t)kvc_clock_monotonic_ns() +
	                   kvc_storage_client_patience_ns(client);
	int *failed = malloc((size_t)count * sizeof(*failed));
	struct kvc_storage_io *again = malloc((size_t)count * sizeof(*again));
	while (failed && again && rc < 0) {
		int n = 0;
		bool stale = false;
		for (int i = 0; i < count; i++)
			if (ios[i].result < 0 && routing_may_cure(ios[i].result)) {
				stale |= ios[i].result == -ESTALE;
				failed[n] = i;
				again[n++] = ios[i];
			}
		int64_t left_ms = (deadline - (int64_t)kvc_clock_monotonic_ns()) / 1000000;
		if (n == 0 || left_ms <= 0)
			break;
		uint64_t seen = version;
		if (stale) {
			/* The server's table is newer (ask now) or older (it follows
			 * within a heartbeat): try again shortly either way. */
			kvc_storage_client_refresh(client);
			kvc_clock_sleep_ms(100);
			seen = kvc_storage_client_wait_routing(client, version, 0);
		} else {
			seen = kvc_storage_client_wait_routing(client, version, (int)left_ms);
			if (seen == version)
				break; /* no change came: the failure stands */
		}
		version = seen;
		atomic_fetch_add_explicit(&client->routing_retries, 1, memory_order_relaxed);
		(void)run(client, again, n);
		for (int k = 0; k < n; k++)
			ios[failed[k]].result = again[k].result;
		rc = 0;
		for (int i = 0; i < count && rc == 0; i++)
			rc = ios[i].result;
	}
	free(failed);
	free(again);
	return rc;
}

int kvc_storage_client_write(struct kvc_storage_client *client, uint64_t inode,
                             const struct kvc_layout *layout, uint64_t offset,
                             uint64_t length, const void *buf)
{
	struct kvc_storage_io io = {.inode = inode, .layout = *layout, .offset = offset,
	                            .length = length, .buf = (void *)buf};
	return kvc_storage_client_write_batch(client, &io, 1);
}

int kvc_storage_client_forward(struct kvc_storage_client *client,
                               const struct kvc_msg_chunk_write *msg, const void *data,
                               uint32_t length)
{
	if (msg->target >= client->target_count)
		return -EINVAL;
	struct write_piece w = {.t = {.kind = KVC_TRANSPORT_TCP, .fd = -1},
	                        .server = client->target_server[msg->target],
	                        .length = length, .msg = *msg, .data = data};
	w.rc = write_send(client, &w);
	write_finish(client, &w);
	return w.rc < 0 ? kvc_storage_client_error(w.rc) : 0;
}

/* Send one small request for every chain of the layout: to its head
 * alone (heads: a range operation, which comes down the chain, wire.h) or
 * to every member (each target once: SYNC). A request that fails for what
 * a new routing table may cure (a member down or stopped, a table older
 * or newer than the server's) is sent again once the table changed, to
 * the new head, or to a target still a member then (a member taken out
 * catches up when it returns). */
static int each_target(struct kvc_storage_client *client, const struct kvc_layout *layout,
                       uint16_t type, bool heads,
                       void (*fill)(void *body, uint32_t target, uint32_t chain,
                                    uint32_t version, void *arg),
                       uint32_t body_len, void *arg)
{
	uint32_t chains[KVC_WIRE_MAX_TARGETS];
	uint64_t done = 0; /* targets answered, or chains (heads), a bit each */
	_Static_assert(KVC_WIRE_MAX_TARGETS <= 64, "one bit per target");
	struct kvc_chain c, *chain = &c;
	if (kvc_layout_check(layout) < 0 ||
	    !kvc_storage_client_chain(client, layout->chain_count - 1, &c))
		return -EINVAL;
	int count = kvc_layout_chains(layout, chains, KVC_WIRE_MAX_TARGETS);
	int64_t deadline = (int64_t)kvc_clock_monotonic_ns() +
	                   kvc_storage_client_patience_ns(client);
	int result;
	for (;;) {
		struct kvc_chains now;
		kvc_storage_client_chains(client, &now);
		bool curable = false, stale = false;
		result = 0;
		for (int i = 0; i < count; i++) {
			if (!kvc_storage_client_chain(client, chains[i], &c))
				continue;
			if (heads && chain->count == 0 && result == 0) {
				result = -EIO; /* no member serving: a new table may bring one */
				curable = true;
			}
			for (uint32_t m = 0; m < (heads ? (chain->count ? 1u : 0u) : chain->count); m++) {
				uint32_t target = chain->targets[m];
				uint64_t bit = 1ull << (heads ? (uint32_t)i : target);
				if (done & bit)
					continue;
				uint8_t body[64], reply[64];
				fill(body, target, chains[i], chain->version, arg);
				uint32_t reply_len;
				/* These requests are idempotent: a pooled connection
				 * whose server restarted unseen (across a partition) is
				 * replaced and the request sent once more. A SYNC may be
				 * awaited long (storage_target.h): that time is not taken
				 * from the wait for a new table. */
				int64_t sent_ns = (int64_t)kvc_clock_monotonic_ns();
				int rc = kvc_storage_target_call_idempotent(client, target, type, body,
				                                            body_len, reply, sizeof(reply),
				                                            &reply_len);
				if (type == KVC_MSG_SYNC)
					deadline += (int64_t)kvc_clock_monotonic_ns() - sent_ns;
				if (rc == 0) {
					done |= bit;
					/* a SYNC syncs every target of its server (h_sync):
					 * one a server, not one a target */
					for (uint32_t t = 0; !heads && type == KVC_MSG_SYNC &&
					                     t < client->target_count && t < 64; t++)
						if (client->target_server[t] == client->target_server[target])
							done |= 1ull << t;
				} else if (result == 0) {
					result = kvc_storage_client_error(rc);
					/* A head answers the rest of its chain's failures. */
					curable = kvc_rpc_is_transport_error(rc) || rc == -ESTALE ||
					          (heads && routing_may_cure(rc));
					stale |= rc == -ESTALE;
				}
			}
		}
		int64_t left_ms = (deadline - (int64_t)kvc_clock_monotonic_ns()) / 1000000;
		if (result == 0 || !curable || !client->following || left_ms <= 0)
			break;
		if (stale) {
			/* The server's table is newer (ask now) or older (it follows
			 * within a heartbeat): again shortly either way. */
			kvc_storage_client_refresh(client);
			kvc_clock_sleep_ms(100);
		} else if (kvc_storage_client_wait_routing(client, now.version, (int)left_ms) ==
		           now.version) {
			break;
		}
	}
	return result;
}

struct inode_size {
	uint64_t inode;
	uint64_t size;
	uint32_t chunk_size;
};

static void fill_remove(void *body, uint32_t target, uint32_t chain, uint32_t version,
                        void *arg)
{
	const struct inode_size *a = arg;
	struct kvc_msg_chunk_remove m = {.inode = a->inode, .target = target, .chain = chain,
	                                 .chain_version = version};
	memcpy(body, &m, sizeof(m));
}

static void fill_truncate(void *body, uint32_t target, uint32_t chain, uint32_t version,
                          void *arg)
{
	const struct inode_size *a = arg;
	struct kvc_msg_chunk_truncate m = {.inode = a->inode, .size = a->size,
	                                   .target = target, .chunk_size = a->chunk_size,
	                                   .chain = chain, .chain_version = version};
	memcpy(body, &m, sizeof(m));
}

static void fill_nothing(void *body, uint32_t target, uint32_t chain, uint32_t version,
                         void *arg)
{
	(void)body, (void)target, (void)chain, (void)version, (void)arg;
}

int kvc_storage_client_remove(struct kvc_storage_client *client, uint64_t inode,
                              const struct kvc_layout *layout)
{
	struct inode_size a = {.inode = inode};
	return each_target(client, layout, KVC_MSG_CHUNK_REMOVE, true, fill_remove,
	                   sizeof(struct kvc_msg_chunk_remove), &a);
}

int kvc_storage_client_truncate(struct kvc_storage_client *client, uint64_t inode,
                                const struct kvc_layout *layout, uint64_t size)
{
	struct inode_size a = {.inode = inode, .size = size, .chunk_size = layout->chunk_size};
	return each_target(client, layout, KVC_MSG_CHUNK_TRUNCATE, true, fill_truncate,
	                   sizeof(struct kvc_msg_chunk_truncate), &a);
}

struct chunk_range {
	uint64_t inode;
	uint32_t first, count;
};

static void fill_punch(void *body, uint32_t target, uint32_t chain, uint32_t version,
                       void *arg)
{
	const struct chunk_range *a = arg;
	struct kvc_msg_chunk_punch m = {.inode = a->inode, .target = target,
	                                .first_chunk = a->first, .count = a->count,
	                                .chain = chain, .chain_version = version};
	memcpy(body, &m, sizeof(m));
}

/* Zeros over [from, to) of inode, a part of one chunk. */
static int write_zeros(struct kvc_storage_client *client, uint64_t inode,
                       const struct kvc_layout *layout, uint64_t from, uint64_t to)
{
	if (from >= to)
		return 0;
	void *zeros = calloc(1, to - from);
	int rc = zeros ? kvc_storage_client_write(client, inode, layout, from, to - from, zeros)
	               : -ENOMEM;
	free(zeros);
	return rc;
}

int kvc_storage_client_punch_plan(const struct kvc_layout *layout, uint64_t offset,
                                  uint64_t length, uint64_t size,
                                  struct kvc_storage_punch_plan *plan)
{
	memset(plan, 0, sizeof(*plan));
	if (kvc_layout_check(layout) < 0 || offset > KVC_LAYOUT_MAX_FILE_SIZE ||
	    length > KVC_LAYOUT_MAX_FILE_SIZE - offset)
		return -EINVAL;
	uint64_t end = offset + length < size ? offset + length : size;
	if (offset >= end)
		return 0; /* past the end of the file: nothing to do */
	uint64_t cs = layout->chunk_size;
	uint64_t first_whole = (offset + cs - 1) / cs, end_whole = end / cs;
	if (first_whole >= end_whole) { /* no whole chunk inside: zeros only */
		plan->zero_from[0] = offset;
		plan->zero_to[0] = end;
		return 0;
	}
	plan->zero_from[0] = offset;
	plan->zero_to[0] = first_whole * cs;
	plan->zero_from[1] = end_whole * cs;
	plan->zero_to[1] = end;
	/* Chunk indexes are below 2^32 (KVC_LAYOUT_MAX_FILE_SIZE), their count
	 * may be 2^32 itself: two ranges at most. */
	_Static_assert(KVC_LAYOUT_MAX_FILE_SIZE / KVC_LAYOUT_MIN_CHUNK <= 2ull * UINT32_MAX, "");
	for (uint64_t first = first_whole; first < end_whole; plan->ranges++) {
		uint64_t count = end_whole - first < UINT32_MAX ? end_whole - first : UINT32_MAX;
		plan->first[plan->ranges] = (uint32_t)first;
		plan->count[plan->ranges] = (uint32_t)count;
		first += count;
	}
	return 0;
}

int kvc_storage_client_punch(struct kvc_storage_client *client, uint64_t inode,
                             const struct kvc_layout *layout, uint64_t offset,
                             uint64_t length, uint64_t size)
{
	struct kvc_storage_punch_plan plan;
	int rc = kvc_storage_client_punch_plan(layout, offset, length, size, &plan);
	for (int i = 0; i < 2 && rc == 0; i++)
		rc = write_zeros(client, inode, layout, plan.zero_from[i], plan.zero_to[i]);
	for (int i = 0; i < plan.ranges && rc == 0; i++) {
		struct chunk_range a = {inode, plan.first[i], plan.count[i]};
		rc = each_target(client, layout, KVC_MSG_CHUNK_PUNCH, true, fill_punch,
		                 sizeof(struct kvc_msg_chunk_punch), &a);
	}
	return rc;
}

int kvc_storage_client_sync(struct kvc_storage_client *client,
                            const struct kvc_layout *layout)
{
	return each_target(client, layout, KVC_MSG_SYNC, false, fill_nothing, 0, NULL);
}

int kvc_storage_client_server_space(struct kvc_storage_client *client, uint32_t server,
                                    struct kvc_msg_target_space *out, int max)
{
	struct {
		struct kvc_msg_space_reply head;
		struct kvc_msg_target_space targets[KVC_WIRE_MAX_TARGETS];
	} reply;
	uint32_t len = 0;
	if (server >= client->server_count)
		return -EINVAL;
	int rc = kvc_rpc_call(&client->pools[server], KVC_MSG_SPACE, NULL, 0, &reply,
	                      sizeof(reply), &len);
	if (rc < 0)
		return rc;
	if (len < sizeof(reply.head) || reply.head.count > KVC_WIRE_MAX_TARGETS ||
	    len != sizeof(reply.head) + reply.head.count * sizeof(reply.targets[0]))
		return -EBADMSG;
	int count = (int)reply.head.count < max ? (int)reply.head.count : max;
	memcpy(out, reply.targets, (size_t)count * sizeof(out[0]));
	return count;
}

/* True when two "host:port" addresses name the same host. */
static bool same_host(const char *a, const char *b)
{
	const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
	size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
	return la == lb && memcmp(a, b, la) == 0;
}

int kvc_storage_client_space(struct kvc_storage_client *client,
                             struct kvc_storage_space *space)
{
	/* Filesystems already counted: (server, fsid). Targets of one host on
	 * one disk (the embedded cluster) count once. */
	uint32_t seen_server[KVC_WIRE_MAX_TARGETS];
	uint64_t seen_fsid[KVC_WIRE_MAX_TARGETS];
	uint64_t seen_free[KVC_WIRE_MAX_TARGETS], seen_reserve[KVC_WIRE_MAX_TARGETS];
	int seen = 0;
	memset(space, 0, sizeof(*space));
	for (uint32_t s = 0; s < client->server_count; s++) {
		struct kvc_msg_target_space targets[KVC_WIRE_MAX_TARGETS];
		int count = kvc_storage_client_server_space(client, s, targets, KVC_WIRE_MAX_TARGETS);
		if (count < 0) {
			for (uint32_t t = 0; t < client->target_count; t++)
				space->targets_down += client->target_server[t] == s;
			continue;
		}
		space->targets_up += (uint32_t)count;
		for (int i = 0; i < count; i++) {
			space->chunks += targets[i].chunks;
			space->targets_refusing += (targets[i].flags & KVC_SPACE_REFUSING) != 0;
			int j = 0;
			while (j < seen && !(seen_fsid[j] == targets[i].fsid &&
			                     same_host(client->server_address[seen_server[j]],
			                               client->server_address[s])))
				j++;
			if (j < seen) {
				if (targets[i].reserve_bytes > seen_reserve[j])
					seen_reserve[j] = targets[i].reserve_bytes;
				continue;
			}
			if (seen == KVC_WIRE_MAX_TARGETS)
				continue;
			seen_server[seen] = s;
			seen_fsid[seen] = targets[i].fsid;
			seen_free[seen] = targets[i].free_bytes;
			seen_reserve[seen++] = targets[i].reserve_bytes;
			space->total_bytes += targets[i].total_bytes;
			space->free_bytes += targets[i].free_bytes;
		}
	}
	for (int j = 0; j < seen; j++)
		space->avail_bytes += seen_free[j] > seen_reserve[j] ? seen_free[j] - seen_reserve[j] : 0;
	return space->targets_up ? 0 : -EIO;
}
