/* storage_client: see storage_client.h. */
#include "client/storage_client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/layout.h"

/* A read request to one server carries at most this much data and this
 * many pieces; up to READ_WAVE requests (each on its own connection) are in
 * flight at once. */
#define REQUEST_BYTES (4u << 20)
#define MAX_REQUEST_PIECES 256
#define READ_WAVE 32
/* Pieces written in parallel in one wave, each on its own connection. */
#define WRITE_WAVE 32
/* How long reads avoid a server that failed them (other replicas first). */
#define AVOID_NS (2ll * 1000 * 1000 * 1000)

int kvc_storage_client_init(struct kvc_storage_client *client,
                            const struct kvc_config *config)
{
	memset(client, 0, sizeof(*client));
	int rc = kvc_chains_build(config, &client->chains);
	if (rc < 0)
		return rc;
	client->server_count = config->server_count;
	client->target_count = config->target_count;
	for (uint32_t t = 0; t < config->target_count; t++)
		client->target_server[t] = config->targets[t].server;
	for (uint32_t i = 0; i < config->server_count; i++) {
		strcpy(client->server_address[i], config->servers[i].address);
		rc = kvc_rpc_pool_init(&client->pools[i], config->servers[i].address,
		                           &config->cred, config->connect_timeout_ms,
		                           config->io_timeout_ms);
		if (rc < 0) {
			client->server_count = i;
			kvc_storage_client_destroy(client);
			return rc;
		}
	}
	return 0;
}

void kvc_storage_client_destroy(struct kvc_storage_client *client)
{
	for (uint32_t i = 0; i < client->server_count; i++)
		kvc_rpc_pool_destroy(&client->pools[i]);
	client->server_count = 0;
}

/* Map transport failures to -EIO; keep what a server answered. */
static int client_error(int rc)
{
	return kvc_rpc_is_transport_error(rc) ? -EIO : rc;
}

static bool retryable(int rc, bool reused)
{
	return reused && (rc == -ECONNRESET || rc == -EPIPE);
}

/* Record the first failure of an io (receiving threads may race here:
 * two requests can carry pieces of one io). */
static void io_fail(struct kvc_storage_io *io, int rc)
{
	int expected = 0;
	__atomic_compare_exchange_n(&io->result, &expected, rc, false, __ATOMIC_RELAXED,
	                            __ATOMIC_RELAXED);
}

static int io_check(struct kvc_storage_client *client, const struct kvc_storage_io *io)
{
	if (kvc_layout_check(&io->layout) < 0 || io->layout.chain_count > client->chains.count)
		return -EINVAL;
	if (io->offset > KVC_LAYOUT_MAX_FILE_SIZE ||
	    io->length > KVC_LAYOUT_MAX_FILE_SIZE - io->offset)
		return -EFBIG;
	return 0;
}

/* Walk every chunk piece of every valid io, in order, calling fn. */
typedef int (*piece_fn)(void *arg, struct kvc_storage_io *io, uint32_t io_index,
                        const struct kvc_layout_piece *piece);

static int for_each_piece(struct kvc_storage_client *client, struct kvc_storage_io *ios,
                          int count, piece_fn fn, void *arg)
{
	struct kvc_layout_piece pieces[64];
	for (int i = 0; i < count; i++) {
		struct kvc_storage_io *io = &ios[i];
		io->result = io_check(client, io);
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

struct read_dest {
	uint8_t *dst;
	uint32_t io;
	uint8_t tried; /* chain members asked so far (bit per position) */
	bool to_tail;  /* the last replica had a write in flight: ask the tail */
};

struct read_request {
	uint32_t server;
	int fd;
	bool reused;
	int rc;
	uint64_t id;
	uint64_t bytes;
	struct kvc_msg_chunk_read head;
	struct kvc_msg_piece pieces[MAX_REQUEST_PIECES];
	struct read_dest dest[MAX_REQUEST_PIECES];
};

/* A piece to read again from another replica. */
struct read_retry {
	struct kvc_msg_piece piece;
	struct read_dest dest;
};

struct read_plan {
	struct kvc_storage_client *client;
	struct kvc_storage_io *ios;
	struct read_request **open;   /* per server: the request being filled */
	struct read_request *wave[READ_WAVE];
	int wave_count;
	pthread_mutex_t retry_lock; /* retries, retry_count, retry_cap (receivers add) */
	struct read_retry *retries;
	int retry_count, retry_cap;
	int error; /* -ENOMEM: a retry could not be queued */
};

static int read_send(struct kvc_storage_client *client, struct read_request *req)
{
	struct kvc_rpc_pool *pool = &client->pools[req->server];
	req->fd = kvc_rpc_pool_get(pool, &req->reused);
	if (req->fd < 0)
		return req->fd;
	req->id = kvc_rpc_next_id(pool);
	/* head and pieces are adjacent in the struct: one body. */
	_Static_assert(offsetof(struct read_request, pieces) ==
	                       offsetof(struct read_request, head) + sizeof(req->head), "");
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_READ, req->id, 0,
	                     (uint32_t)(sizeof(req->head) + req->head.count * sizeof(req->pieces[0])),
	                     0);
	return kvc_wire_send(req->fd, &h, &req->head, NULL, 0);
}

static int dev_zero = -1;
static pthread_once_t dev_zero_once = PTHREAD_ONCE_INIT;

static void open_dev_zero(void)
{
	dev_zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
}

/* Zero the missing tail of a piece (a hole). The destination may be
 * memory another process can shrink under us (a USRBIO iov): the kernel
 * zeroes it, and a page gone is EFAULT for that io, not a SIGBUS for the
 * process (as for the bytes recv() puts there). Returns 0 or -EFAULT. */
static int zero_fill(uint8_t *dst, size_t len)
{
	pthread_once(&dev_zero_once, open_dev_zero);
	if (dev_zero < 0) { /* no /dev/zero: only our own buffers are safe */
		memset(dst, 0, len);
		return 0;
	}
	while (len > 0) {
		ssize_t n = read(dev_zero, dst, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EFAULT;
		dst += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Queue piece k of req to be read from another replica (to_tail: from
 * the chain's tail). */
static void read_again(struct read_plan *plan, const struct read_request *req, uint32_t k,
                       bool to_tail)
{
	pthread_mutex_lock(&plan->retry_lock);
	if (plan->retry_count == plan->retry_cap) {
		int cap = plan->retry_cap ? 2 * plan->retry_cap : 64;
		struct read_retry *grown = realloc(plan->retries, (size_t)cap * sizeof(*grown));
		if (grown) {
			plan->retries = grown;
			plan->retry_cap = cap;
		}
	}
	if (plan->retry_count < plan->retry_cap) {
		struct read_retry *r = &plan->retries[plan->retry_count++];
		r->piece = req->pieces[k];
		r->dest = req->dest[k];
		r->dest.to_tail = to_tail;
	} else {
		io_fail(&plan->ios[req->dest[k].io], -ENOMEM);
	}
	pthread_mutex_unlock(&plan->retry_lock);
}

/* A piece status another replica may not have: crc mismatch, a stale
 * chain version, a target that is gone, a write in flight. */
static bool other_replica_may(int status)
{
	return status == -EIO || status == -ESTALE || status == -ENXIO || status == -EAGAIN;
}

/* Receive a reply into each piece's destination. Returns 1 when the frame
 * was consumed (the connection is reusable), or a transport -errno. */
static int read_receive(struct read_plan *plan, struct read_request *req)
{
	struct kvc_msg_piece_result results[MAX_REQUEST_PIECES];
	struct kvc_storage_io *ios = plan->ios;
	struct kvc_wire_header h;
	uint32_t count = req->head.count;
	int rc = kvc_wire_recv(req->fd, &h, results, sizeof(results));
	if (rc < 0)
		return rc;
	if (h.request_id != req->id || h.type != KVC_MSG_CHUNK_READ)
		return -EBADMSG;
	if (h.status < 0) {
		for (uint32_t i = 0; i < count; i++)
			io_fail(&ios[req->dest[i].io], -EIO);
		return h.data_len ? -EBADMSG : 1;
	}
	if (h.body_len != count * sizeof(results[0]))
		return -EBADMSG;
	uint64_t expected = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (results[i].length > req->pieces[i].length ||
		    (results[i].status < 0 && results[i].length))
			return -EBADMSG;
		expected += results[i].length;
	}
	if (expected != h.data_len)
		return -EBADMSG;
	for (uint32_t i = 0; i < count; i++) {
		struct kvc_storage_io *io = &ios[req->dest[i].io];
		uint8_t *dst = req->dest[i].dst;
		if (results[i].status < 0) {
			if (other_replica_may(results[i].status))
				read_again(plan, req, i, results[i].status == -EAGAIN);
			else
				io_fail(io, -EIO);
			continue;
		}
		if (results[i].length) {
			rc = kvc_wire_recv_exact(req->fd, dst, results[i].length);
			if (rc < 0)
				return rc;
		}
		if (results[i].length < req->pieces[i].length &&
		    zero_fill(dst + results[i].length, req->pieces[i].length - results[i].length) < 0)
			io_fail(io, -EFAULT);
		else if (io->forbid_holes && results[i].length < req->pieces[i].length)
			io_fail(io, -ENODATA);
	}
	return 1;
}

/* Receive one sent request's answer into its destinations (retrying once
 * on a fresh connection when its server restarted; when it cannot be
 * reached, its pieces go to other replicas), then free it. */
static void read_finish(struct read_plan *plan, struct read_request *r)
{
	struct kvc_storage_client *client = plan->client;
	struct kvc_rpc_pool *pool = &client->pools[r->server];
	if (r->rc == 0)
		r->rc = read_receive(plan, r);
	if (r->fd >= 0)
		kvc_rpc_pool_put(pool, r->fd, r->rc == 1);
	if (r->rc < 0 && retryable(r->rc, r->reused)) {
		/* The server restarted under an idle connection: once more. */
		kvc_rpc_pool_drain(pool);
		r->rc = read_send(client, r);
		if (r->rc == 0)
			r->rc = read_receive(plan, r);
		if (r->fd >= 0)
			kvc_rpc_pool_put(pool, r->fd, r->rc == 1);
	}
	if (r->rc < 0) {
		if (kvc_rpc_is_transport_error(r->rc))
			atomic_store(&client->avoid_until_ns[r->server],
			             (int64_t)kvc_clock_monotonic_ns() + AVOID_NS);
		/* Pieces received before the break are read again too: the
		 * destinations are only ever written with the same bytes. */
		for (uint32_t k = 0; k < r->head.count; k++)
			read_again(plan, r, k, false);
	}
	free(r);
}

/* A wave's receives handed to the receiving threads. */
struct wave_sync {
	pthread_mutex_t lock;
	pthread_cond_t done;
	int pending;
};

struct receive_job {
	struct receive_job *next;
	struct read_plan *plan;
	struct read_request *request;
	struct wave_sync *sync;
};

struct kvc_storage_receivers {
	pthread_mutex_t lock; /* the job queue */
	pthread_cond_t work;
	struct receive_job *head, *tail;
};

static void *receiver_main(void *arg)
{
	struct kvc_storage_receivers *rx = arg;
	for (;;) {
		pthread_mutex_lock(&rx->lock);
		while (!rx->head)
			pthread_cond_wait(&rx->work, &rx->lock);
		struct receive_job *job = rx->head;
		rx->head = job->next;
		if (!rx->head)
			rx->tail = NULL;
		pthread_mutex_unlock(&rx->lock);
		read_finish(job->plan, job->request);
		pthread_mutex_lock(&job->sync->lock);
		if (--job->sync->pending == 0)
			pthread_cond_signal(&job->sync->done);
		pthread_mutex_unlock(&job->sync->lock);
	}
	return NULL;
}

int kvc_storage_client_start_receivers(struct kvc_storage_client *client, int threads)
{
	if (threads <= 0)
		return 0;
	struct kvc_storage_receivers *rx = calloc(1, sizeof(*rx));
	if (!rx)
		return -ENOMEM;
	pthread_mutex_init(&rx->lock, NULL);
	pthread_cond_init(&rx->work, NULL);
	for (int i = 0; i < threads; i++) {
		pthread_t thread;
		int rc = pthread_create(&thread, NULL, receiver_main, rx);
		if (rc)
			return -rc; /* threads started so far serve on: rx stays owned by them */
		pthread_detach(thread);
	}
	client->receivers = rx;
	return 0;
}

/* Send every request of the wave, then receive every answer: with
 * receiving threads, in parallel (each answer lands in its own part of
 * the destination buffers). */
static void read_wave(struct read_plan *plan)
{
	struct kvc_storage_client *client = plan->client;
	struct kvc_storage_receivers *rx = client->receivers;
	int n = plan->wave_count;
	for (int i = 0; i < n; i++)
		plan->wave[i]->rc = read_send(client, plan->wave[i]);
	if (!rx || n < 2) {
		for (int i = 0; i < n; i++)
			read_finish(plan, plan->wave[i]);
		plan->wave_count = 0;
		return;
	}
	struct wave_sync sync = {.pending = n - 1};
	struct receive_job jobs[READ_WAVE];
	pthread_mutex_init(&sync.lock, NULL);
	pthread_cond_init(&sync.done, NULL);
	pthread_mutex_lock(&rx->lock);
	for (int i = 1; i < n; i++) {
		jobs[i] = (struct receive_job){NULL, plan, plan->wave[i], &sync};
		if (rx->tail)
			rx->tail->next = &jobs[i];
		else
			rx->head = &jobs[i];
		rx->tail = &jobs[i];
	}
	pthread_cond_broadcast(&rx->work);
	pthread_mutex_unlock(&rx->lock);
	read_finish(plan, plan->wave[0]);
	pthread_mutex_lock(&sync.lock);
	while (sync.pending > 0)
		pthread_cond_wait(&sync.done, &sync.lock);
	pthread_mutex_unlock(&sync.lock);
	pthread_mutex_destroy(&sync.lock);
	pthread_cond_destroy(&sync.done);
	plan->wave_count = 0;
}

/* Close the open request of a server: it joins the wave. */
static void read_close(struct read_plan *plan, uint32_t server)
{
	struct read_request *r = plan->open[server];
	if (!r)
		return;
	plan->open[server] = NULL;
	plan->wave[plan->wave_count++] = r;
	if (plan->wave_count == READ_WAVE)
		read_wave(plan);
}

/* The member of chain to read a piece from: the tail when asked, else
 * one not tried yet, starting at `start` (chunks spread over replicas),
 * preferring servers that did not fail recently. -1 when every member was
 * tried. */
static int pick_replica(struct kvc_storage_client *client, const struct kvc_chain *chain,
                        uint32_t start, uint8_t tried, bool to_tail)
{
	uint32_t n = chain->count;
	if (n == 0)
		return -1;
	if (to_tail && !(tried & (1u << (n - 1))))
		return (int)n - 1;
	int64_t now = (int64_t)kvc_clock_monotonic_ns();
	int fallback = -1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t pos = (start + k) % n;
		if (tried & (1u << pos))
			continue;
		uint32_t server = client->target_server[chain->targets[pos]];
		if (atomic_load(&client->avoid_until_ns[server]) <= now)
			return (int)pos;
		if (fallback < 0)
			fallback = (int)pos;
	}
	return fallback;
}

/* Add a piece for chain member pos to its server's open request. */
static int read_add(struct read_plan *plan, struct kvc_msg_piece piece, struct read_dest dest,
                    int pos)
{
	const struct kvc_chain *chain = &plan->client->chains.chains[piece.chain];
	piece.target = chain->targets[pos];
	piece.chain_version = chain->version;
	dest.tried |= (uint8_t)(1u << pos);
	dest.to_tail = false;
	uint32_t server = plan->client->target_server[piece.target];
	struct read_request *r = plan->open[server];
	if (r && (r->head.count == MAX_REQUEST_PIECES || r->bytes + piece.length > REQUEST_BYTES)) {
		read_close(plan, server);
		r = NULL;
	}
	if (!r) {
		r = malloc(sizeof(*r));
		if (!r)
			return -ENOMEM;
		r->server = server;
		r->fd = -1;
		r->bytes = 0;
		r->head = (struct kvc_msg_chunk_read){0};
		plan->open[server] = r;
	}
	uint32_t k = r->head.count++;
	r->pieces[k] = piece;
	r->dest[k] = dest;
	r->bytes += piece.length;
	return 0;
}

static int read_add_piece(void *arg, struct kvc_storage_io *io, uint32_t io_index,
                          const struct kvc_layout_piece *p)
{
	struct read_plan *plan = arg;
	const struct kvc_chain *chain = &plan->client->chains.chains[p->chain];
	int pos = pick_replica(plan->client, chain, (uint32_t)((io->inode + p->chunk) % 251), 0,
	                       false);
	if (pos < 0) {
		io_fail(io, -EIO); /* a chain with no member serving */
		return 0;
	}
	struct kvc_msg_piece piece = {.inode = io->inode, .chain = p->chain, .chunk = p->chunk,
	                              .offset = p->chunk_offset, .length = p->length};
	return read_add(plan, piece,
	                (struct read_dest){(uint8_t *)io->buf + p->buffer_offset, io_index, 0, false},
	                pos);
}

/* Every open request joins the wave, and the wave runs. */
static void read_flush(struct read_plan *plan)
{
	for (uint32_t s = 0; s < plan->client->server_count; s++)
		read_close(plan, s);
	if (plan->wave_count)
		read_wave(plan);
}

/* Pieces that failed at one replica, to the next; until none is left. */
static int read_retries(struct read_plan *plan)
{
	int rc = 0;
	while (plan->retry_count > 0 && rc == 0) {
		struct read_retry *list = plan->retries;
		int count = plan->retry_count;
		plan->retries = NULL;
		plan->retry_count = plan->retry_cap = 0;
		for (int i = 0; i < count && rc == 0; i++) {
			struct read_retry *r = &list[i];
			const struct kvc_chain *chain = &plan->client->chains.chains[r->piece.chain];
			int pos = pick_replica(plan->client, chain, 0, r->dest.tried, r->dest.to_tail);
			if (pos < 0)
				io_fail(&plan->ios[r->dest.io], -EIO); /* no replica could serve it */
			else
				rc = read_add(plan, r->piece, r->dest, pos);
		}
		free(list);
		if (rc == 0)
			read_flush(plan);
	}
	return rc;
}

int kvc_storage_client_read_batch(struct kvc_storage_client *client,
                                  struct kvc_storage_io *ios, int count)
{
	struct read_plan plan = {.client = client, .ios = ios};
	plan.open = calloc(client->server_count ? client->server_count : 1, sizeof(*plan.open));
	if (!plan.open)
		return -ENOMEM;
	pthread_mutex_init(&plan.retry_lock, NULL);
	int rc = for_each_piece(client, ios, count, read_add_piece, &plan);
	read_flush(&plan); /* what was planned goes out even after an ENOMEM */
	if (rc == 0)
		rc = read_retries(&plan);
	for (uint32_t s = 0; s < client->server_count; s++)
		free(plan.open[s]);
	free(plan.retries);
	free(plan.open);
	pthread_mutex_destroy(&plan.retry_lock);
	for (int i = 0; i < count && rc == 0; i++)
		rc = ios[i].result;
	return rc;
}

int kvc_storage_client_read(struct kvc_storage_client *client, uint64_t inode,
                            const struct kvc_layout *layout, uint64_t offset,
                            uint64_t length, void *buf)
{
	struct kvc_storage_io io = {.inode = inode, .layout = *layout, .offset = offset,
	                            .length = length, .buf = buf};
	return kvc_storage_client_read_batch(client, &io, 1);
}

struct write_piece {
	int fd;
	bool reused;
	uint32_t server;
	uint32_t length;
	uint32_t io;
	uint64_t id;
	int rc;
	struct kvc_msg_chunk_write msg;
	const void *data;
};

struct write_plan {
	struct kvc_storage_client *client;
	struct kvc_storage_io *ios;
	struct write_piece wave[WRITE_WAVE];
	int wave_count;
};

static int write_send(struct kvc_storage_client *client, struct write_piece *w)
{
	struct kvc_rpc_pool *pool = &client->pools[w->server];
	w->fd = kvc_rpc_pool_get(pool, &w->reused);
	if (w->fd < 0)
		return w->fd;
	w->id = kvc_rpc_next_id(pool);
	struct kvc_wire_header h;
	struct iovec data = {(void *)w->data, w->length};
	kvc_wire_header_init(&h, KVC_MSG_CHUNK_WRITE, w->id, 0, sizeof(w->msg), w->length);
	return kvc_wire_send(w->fd, &h, &w->msg, &data, 1);
}

static int write_receive(struct write_piece *w)
{
	struct kvc_msg_chunk_write_reply reply;
	struct kvc_wire_header h;
	int rc = kvc_wire_recv(w->fd, &h, &reply, sizeof(reply));
	if (rc < 0)
		return rc;
	if (h.request_id != w->id || h.type != KVC_MSG_CHUNK_WRITE || h.data_len)
		return -EBADMSG;
	return h.status < 0 ? h.status : 1; /* 1: answered, connection reusable */
}

/* Send a wave of pieces, then collect every answer. */
static void write_wave(struct write_plan *plan)
{
	struct kvc_storage_client *client = plan->client;
	for (int i = 0; i < plan->wave_count; i++)
		plan->wave[i].rc = write_send(client, &plan->wave[i]);
	for (int i = 0; i < plan->wave_count; i++) {
		struct write_piece *w = &plan->wave[i];
		struct kvc_rpc_pool *pool = &client->pools[w->server];
		/* A frame that did not go out whole (e.g. EFAULT: its source
		 * memory vanished) leaves the connection mid-frame: never reuse it. */
		bool sent = w->rc == 0;
		if (w->rc == 0)
			w->rc = write_receive(w);
		if (w->fd >= 0)
			kvc_rpc_pool_put(pool, w->fd, sent && (w->rc == 1 || (w->rc < 0 &&
			                                       !kvc_rpc_is_transport_error(w->rc))));
		if (w->rc < 0 && retryable(w->rc, w->reused)) {
			kvc_rpc_pool_drain(pool);
			w->rc = write_send(client, w);
			if (w->rc == 0)
				w->rc = write_receive(w);
			if (w->fd >= 0)
				kvc_rpc_pool_put(pool, w->fd, w->rc == 1);
		}
		if (w->rc < 0)
			io_fail(&plan->ios[w->io], client_error(w->rc));
	}
	plan->wave_count = 0;
}

/* Every piece goes to the head of its chain. */
static int write_add_piece(void *arg, struct kvc_storage_io *io, uint32_t io_index,
                           const struct kvc_layout_piece *p)
{
	struct write_plan *plan = arg;
	const struct kvc_chain *chain = &plan->client->chains.chains[p->chain];
	if (chain->count == 0) {
		io_fail(io, -EIO); /* no member serving */
		return 0;
	}
	uint32_t head = chain->targets[0];
	plan->wave[plan->wave_count++] = (struct write_piece){
		.fd = -1, .server = plan->client->target_server[head], .length = p->length,
		.io = io_index, .data = (const uint8_t *)io->buf + p->buffer_offset,
		.msg = {.inode = io->inode, .target = head, .chunk = p->chunk,
		        .chunk_size = io->layout.chunk_size, .offset = p->chunk_offset,
		        .chain = p->chain, .chain_version = chain->version}};
	if (plan->wave_count == WRITE_WAVE)
		write_wave(plan);
	return 0;
}

int kvc_storage_client_write_batch(struct kvc_storage_client *client,
                                   struct kvc_storage_io *ios, int count)
{
	struct write_plan *plan = malloc(sizeof(*plan));
	if (!plan)
		return -ENOMEM;
	*plan = (struct write_plan){.client = client, .ios = ios};
	int rc = for_each_piece(client, ios, count, write_add_piece, plan);
	if (plan->wave_count)
		write_wave(plan);
	free(plan);
	for (int i = 0; i < count && rc == 0; i++)
		rc = ios[i].result;
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
	struct write_piece w = {.fd = -1, .server = client->target_server[msg->target],
	                        .length = length, .msg = *msg, .data = data};
	struct kvc_rpc_pool *pool = &client->pools[w.server];
	w.rc = write_send(client, &w);
	bool sent = w.rc == 0;
	if (w.rc == 0)
		w.rc = write_receive(&w);
	if (w.fd >= 0)
		kvc_rpc_pool_put(pool, w.fd, sent && (w.rc == 1 || (w.rc < 0 &&
		                                       !kvc_rpc_is_transport_error(w.rc))));
	if (w.rc < 0 && retryable(w.rc, w.reused)) {
		kvc_rpc_pool_drain(pool);
		w.rc = write_send(client, &w);
		if (w.rc == 0)
			w.rc = write_receive(&w);
		if (w.fd >= 0)
			kvc_rpc_pool_put(pool, w.fd, w.rc == 1);
	}
	return w.rc < 0 ? client_error(w.rc) : 0;
}

/* Send one small request to the server of every target of every chain in
 * the layout (each target once). */
static int each_target(struct kvc_storage_client *client, const struct kvc_layout *layout,
                       uint16_t type, void (*fill)(void *body, uint32_t target, void *arg),
                       uint32_t body_len, void *arg)
{
	uint32_t chains[KVC_WIRE_MAX_TARGETS];
	uint64_t done = 0; /* targets asked, a bit each */
	_Static_assert(KVC_WIRE_MAX_TARGETS <= 64, "one bit per target");
	if (kvc_layout_check(layout) < 0 || layout->chain_count > client->chains.count)
		return -EINVAL;
	int count = kvc_layout_chains(layout, chains, KVC_WIRE_MAX_TARGETS);
	int result = 0;
	for (int i = 0; i < count; i++) {
		const struct kvc_chain *chain = &client->chains.chains[chains[i]];
		for (uint32_t m = 0; m < chain->count; m++) {
			uint32_t target = chain->targets[m];
			if (done & (1ull << target))
				continue;
			done |= 1ull << target;
			uint8_t body[64], reply[64];
			fill(body, target, arg);
			uint32_t reply_len;
			int rc = kvc_rpc_call(&client->pools[client->target_server[target]], type, body,
			                      body_len, reply, sizeof(reply), &reply_len);
			if (rc < 0 && result == 0)
				result = client_error(rc);
		}
	}
	return result;
}

struct inode_size {
	uint64_t inode;
	uint64_t size;
	uint32_t chunk_size;
};

static void fill_remove(void *body, uint32_t target, void *arg)
{
	const struct inode_size *a = arg;
	struct kvc_msg_chunk_remove m = {.inode = a->inode, .target = target};
	memcpy(body, &m, sizeof(m));
}

static void fill_truncate(void *body, uint32_t target, void *arg)
{
	const struct inode_size *a = arg;
	struct kvc_msg_chunk_truncate m = {.inode = a->inode, .size = a->size,
	                                   .target = target, .chunk_size = a->chunk_size};
	memcpy(body, &m, sizeof(m));
}

static void fill_nothing(void *body, uint32_t target, void *arg)
{
	(void)body, (void)target, (void)arg;
}

int kvc_storage_client_remove(struct kvc_storage_client *client, uint64_t inode,
                              const struct kvc_layout *layout)
{
	struct inode_size a = {.inode = inode};
	return each_target(client, layout, KVC_MSG_CHUNK_REMOVE, fill_remove,
	                   sizeof(struct kvc_msg_chunk_remove), &a);
}

int kvc_storage_client_truncate(struct kvc_storage_client *client, uint64_t inode,
                                const struct kvc_layout *layout, uint64_t size)
{
	struct inode_size a = {.inode = inode, .size = size, .chunk_size = layout->chunk_size};
	return each_target(client, layout, KVC_MSG_CHUNK_TRUNCATE, fill_truncate,
	                   sizeof(struct kvc_msg_chunk_truncate), &a);
}

struct chunk_range {
	uint64_t inode;
	uint32_t first, count;
};

static void fill_punch(void *body, uint32_t target, void *arg)
{
	const struct chunk_range *a = arg;
	struct kvc_msg_chunk_punch m = {.inode = a->inode, .target = target,
	                                .first_chunk = a->first, .count = a->count};
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
		rc = each_target(client, layout, KVC_MSG_CHUNK_PUNCH, fill_punch,
		                 sizeof(struct kvc_msg_chunk_punch), &a);
	}
	return rc;
}

int kvc_storage_client_sync(struct kvc_storage_client *client,
                            const struct kvc_layout *layout)
{
	return each_target(client, layout, KVC_MSG_SYNC, fill_nothing, 0, NULL);
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
