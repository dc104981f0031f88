/* storage_read: the read path of the storage client (storage_client.h):
 * pieces grouped by server into requests, sent a wave at a time and
 * received (on receiving threads when started) straight into the callers'
 * buffers; a piece that fails at one chain member is read from the next. */
#include "client/storage_client_internal.h"
#include "client/transport_local.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

/* A read request to one server carries at most this much data (placed:
 * client->place_request_bytes) and as many pieces and spans as the wire
 * allows (a key scattered into 16 segments is one piece of 16 spans a
 * chunk: a smaller cap made such gets cost 2-4x the requests of
 * one-segment gets of the same bytes);
 * up to READ_WAVE requests (each on its own connection) are in flight at
 * once. */
#define REQUEST_BYTES (4u << 20)
#define MAX_REQUEST_PIECES KVC_WIRE_MAX_PIECES
#define READ_WAVE 32
/* A piece of a scattered io goes to at most this many places (a ring
 * key's segments: KVC_KEY_MAX_SEGS); one that covers more is cut. */
#define PIECE_MAX_PLACES 64
/* Tries of one piece (members, and waits for a write in flight while the
 * tail catches up) before it is -EIO. */
#define MAX_ATTEMPTS 200

struct read_dest {
	uint8_t *dst; /* where the piece's first byte goes */
	uint32_t io;
	uint32_t seg; /* a scattered io: the place dst lies in (dest_places) */
	uint8_t tried; /* chain members asked so far (bit per position) */
	bool to_tail;  /* the last replica had a write in flight: ask the tail */
	uint16_t attempts;
};

struct read_request {
	uint32_t server;
	struct kvc_transport_request t; /* its transport and connection */
	/* placed pieces of a target this client reads itself (transport_local.h):
	 * read here by whichever thread finishes the request (the wave's
	 * receivers, in parallel), those that cannot be placed as usual */
	bool local;
	const struct kvc_storage_region *region; /* placed: where the pieces go */
	int rc;
	uint64_t bytes;
	struct kvc_msg_chunk_read head;
	struct kvc_msg_piece pieces[MAX_REQUEST_PIECES];
	struct read_dest dest[MAX_REQUEST_PIECES];
	/* placed: where in region each piece's bytes go, its spans in order */
	uint32_t span_count;
	struct kvc_msg_place_span spans[MAX_REQUEST_PIECES];
};

/* A piece to read again from another replica. */
struct read_retry {
	struct kvc_msg_piece piece;
	struct read_dest dest;
};

struct read_plan {
	struct kvc_storage_client *client;
	struct kvc_storage_io *ios;
	struct read_request **open;   /* per server and transport: the request being filled */
	struct read_request *wave[READ_WAVE];
	int wave_count;
	pthread_mutex_t retry_lock; /* retries, retry_count, retry_cap (receivers add) */
	struct read_retry *retries;
	int retry_count, retry_cap;
	int error; /* -ENOMEM: a retry could not be queued */
	/* The batch's planning thread only (read_add_piece, read_add): the
	 * last chain looked up and the last server's placement readiness
	 * for a region. The pieces of one io (a ring key's segments) share
	 * both: a table lock, a chain copy and the placement lock per io
	 * instead of per piece. Both are forgotten after every wave, whose
	 * answers may have turned a server's placement off or brought a new
	 * routing table (read_wave). */
	struct kvc_chain chain;
	uint32_t chain_id; /* UINT32_MAX: none yet */
	const struct kvc_storage_region *ready_region;
	uint32_t ready_server; /* UINT32_MAX: none yet */
	bool ready;
};

/* An io that wants `done` counts its pieces in requests or queued again,
 * plus one while the batch plans (read_batch_once): the last release of a
 * successful io calls done. Acquire-release: the releasing thread sees
 * every other thread's writes to the io's memory and result. */
static void io_hold(struct kvc_storage_io *io)
{
	if (io->done)
		__atomic_fetch_add(&io->pending, 1, __ATOMIC_RELAXED);
}

static void io_release(struct kvc_storage_io *io)
{
	if (io->done && __atomic_sub_fetch(&io->pending, 1, __ATOMIC_ACQ_REL) == 0 &&
	    __atomic_load_n(&io->result, __ATOMIC_RELAXED) == 0)
		io->done(io);
}

static int read_send(struct kvc_storage_client *client, struct read_request *req)
{
	req->t.server = req->server;
	req->t.fd = -1;
	if (req->local)
		return 0; /* read_finish reads it */
	return kvc_transport_read_post(client, &req->t, req->pieces, req->head.count, req->region,
	                               req->spans, req->span_count);
}

/* Where bytes [from, from + len) of a piece go (d: where its first byte
 * goes): one place, or for a scattered io the parts of the io's places
 * the range covers (at most PIECE_MAX_PLACES: read_add_piece cuts pieces
 * so). Empty parts are left out. Returns the count. */
static uint32_t dest_places(const struct kvc_storage_io *io, const struct read_dest *d,
                            uint64_t from, uint64_t len, struct iovec *out)
{
	if (!io->scatter) {
		out[0] = (struct iovec){d->dst + from, len};
		return len > 0;
	}
	uint32_t n = 0;
	uint8_t *at = d->dst;
	const struct iovec *place = &io->scatter[d->seg], *last = &io->scatter[io->scatter_count];
	uint64_t room = (uint64_t)((uint8_t *)place->iov_base + place->iov_len - at);
	while (len > 0 && n < PIECE_MAX_PLACES) {
		if (from < room) {
			uint64_t take = room - from < len ? room - from : len;
			out[n++] = (struct iovec){at + from, take};
			len -= take;
			from = 0;
		} else {
			from -= room;
		}
		if (++place == last)
			break;
		at = place->iov_base;
		room = place->iov_len;
	}
	return n;
}

static int dev_zero = -1;
static pthread_once_t dev_zero_once = PTHREAD_ONCE_INIT;

static void open_dev_zero(void)
{
	dev_zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
}

/* Zero the missing tail of a piece (a hole; storage_client_internal.h).
 * As for the bytes recv() puts there, a page gone is EFAULT for that io,
 * not a SIGBUS for the process. */
int kvc_storage_zero_fill(uint8_t *dst, size_t len)
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
	atomic_fetch_add_explicit(&plan->client->replica_retries, 1, memory_order_relaxed);
	if (plan->retry_count < plan->retry_cap) {
		struct read_retry *r = &plan->retries[plan->retry_count++];
		r->piece = req->pieces[k];
		r->dest = req->dest[k];
		r->dest.to_tail = to_tail;
		io_hold(&plan->ios[r->dest.io]); /* released when read_retries takes it */
	} else {
		kvc_storage_io_fail(&plan->ios[req->dest[k].io], -ENOMEM);
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
	uint32_t count = req->head.count;
	int32_t status = 0;
	uint64_t data_len = 0;
	int rc = kvc_transport_read_complete(&req->t, count, results, &status, &data_len);
	if (rc < 0)
		return rc;
	if (status < 0 && req->t.kind != KVC_TRANSPORT_TCP)
		return status; /* the placement's fault (region unknown...): TCP again */
	if (status < 0) {
		for (uint32_t i = 0; i < count; i++)
			kvc_storage_io_fail(&ios[req->dest[i].io], -EIO);
		return 1;
	}
	bool inline_data = req->t.kind == KVC_TRANSPORT_TCP;
	uint64_t expected = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (results[i].length > req->pieces[i].length ||
		    (results[i].status < 0 && results[i].length))
			return -EBADMSG;
		expected += results[i].length;
	}
	if (inline_data ? expected != data_len : data_len != 0)
		return -EBADMSG;
	atomic_fetch_add_explicit(&plan->client->transport_bytes[req->t.kind], expected,
	                          memory_order_relaxed);
	for (uint32_t i = 0; i < count; i++) {
		struct kvc_storage_io *io = &ios[req->dest[i].io];
		if (results[i].status == -EFAULT && !inline_data) {
			kvc_storage_io_fail(io, -EFAULT); /* the caller's memory is gone there */
			continue;
		}
		if (results[i].status == -EIO && !inline_data)
			atomic_fetch_add(&plan->client->place_epoch, 1);
		if (results[i].status < 0) {
			if (other_replica_may(results[i].status))
				read_again(plan, req, i, results[i].status == -EAGAIN);
			else
				kvc_storage_io_fail(io, -EIO);
			continue;
		}
		struct iovec places[PIECE_MAX_PLACES];
		uint32_t n = inline_data ? dest_places(io, &req->dest[i], 0, results[i].length, places)
		                         : 0;
		for (uint32_t j = 0; j < n && rc >= 0; j++)
			rc = kvc_transport_read_data(&req->t, places[j].iov_base,
			                             (uint32_t)places[j].iov_len);
		if (rc < 0)
			return rc;
		if (results[i].length == req->pieces[i].length)
			continue;
		/* a hole after the present bytes */
		n = dest_places(io, &req->dest[i], results[i].length,
		                req->pieces[i].length - results[i].length, places);
		int zeroed = 0; /* the caller's memory, not the connection: this io only */
		for (uint32_t j = 0; j < n && zeroed == 0; j++)
			zeroed = kvc_storage_zero_fill(places[j].iov_base, places[j].iov_len);
		if (zeroed < 0)
			kvc_storage_io_fail(io, -EFAULT);
		else if (io->forbid_holes)
			kvc_storage_io_fail(io, -ENODATA);
	}
	return 1;
}

/* A local request's pieces read here; those that could not be (not
 * cached, a change meanwhile, a crc...) stay, in order, and are placed
 * by their server as any request's. Returns whether any stayed. */
static bool read_local(struct read_plan *plan, struct read_request *r)
{
	uint32_t kept = 0;
	r->bytes = 0;
	for (uint32_t k = 0; k < r->head.count; k++) {
		struct kvc_storage_io *io = &plan->ios[r->dest[k].io];
		if (kvc_transport_local_read(plan->client, r->server, &r->pieces[k], r->dest[k].dst,
		                             io->forbid_holes)) {
			io_release(io);
			continue;
		}
		r->pieces[kept] = r->pieces[k];
		r->dest[kept] = r->dest[k];
		assert(r->span_count == r->head.count); /* never a scattered io: a span a piece */
		r->spans[kept] = r->spans[k];
		r->bytes += r->pieces[kept].length;
		kept++;
	}
	r->head.count = r->span_count = kept;
	r->local = false;
	return kept > 0;
}

/* Receive one sent request's answer into its destinations (retrying once
 * on a fresh connection when its server restarted; when it cannot be
 * reached, its pieces go to other replicas), then free it. A local
 * request is read here first, and only what is left is sent. */
static void read_finish(struct read_plan *plan, struct read_request *r)
{
	struct kvc_storage_client *client = plan->client;
	if (r->local) {
		if (!read_local(plan, r)) {
			free(r);
			return;
		}
		r->rc = read_send(client, r);
	}
	if (r->rc == 0)
		r->rc = read_receive(plan, r);
	kvc_transport_done(client, &r->t, r->rc == 1);
	if (r->rc < 0 && r->t.kind != KVC_TRANSPORT_TCP) {
		/* The placement failed (not the data): the same request over TCP,
		 * where the bytes come in the answer. Destinations are only ever
		 * written with the same bytes, so what was placed already is fine. */
		kvc_transport_place_failed(client, r->server, r->rc);
		r->t.kind = KVC_TRANSPORT_TCP;
		r->rc = read_send(client, r);
		if (r->rc == 0)
			r->rc = read_receive(plan, r);
		kvc_transport_done(client, &r->t, r->rc == 1);
	}
	if (r->rc < 0 && kvc_storage_client_retryable(r->rc, r->t.reused)) {
		/* The server restarted under an idle connection: once more. */
		kvc_transport_drain(client, &r->t);
		r->rc = read_send(client, r);
		if (r->rc == 0)
			r->rc = read_receive(plan, r);
		kvc_transport_done(client, &r->t, r->rc == 1);
	}
	if (r->rc < 0) {
		if (kvc_rpc_is_transport_error(r->rc))
			atomic_store(&client->avoid_until_ns[r->server],
			             (int64_t)kvc_clock_monotonic_ns() + KVC_STORAGE_AVOID_NS);
		/* Pieces received before the break are read again too: the
		 * destinations are only ever written with the same bytes. */
		for (uint32_t k = 0; k < r->head.count; k++)
			read_again(plan, r, k, false);
	}
	for (uint32_t k = 0; k < r->head.count; k++)
		io_release(&plan->ios[r->dest[k].io]);
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
	int n = plan->wave_count, kept = 0;
	/* Without receiving threads the wave's local requests are read here,
	 * first, so what is left of them goes out with the rest of the wave
	 * (a send then a wait each would serialize the server's reads of
	 * what the page cache lacked). With them, each is read and sent by
	 * whichever thread finishes it (read_finish). */
	bool local_here = !rx || n < 2;
	for (int i = 0; i < n; i++) {
		struct read_request *w = plan->wave[i];
		if (w->local && local_here && !read_local(plan, w)) {
			free(w);
			continue;
		}
		w->rc = read_send(client, w);
		plan->wave[kept++] = w;
	}
	n = plan->wave_count = kept;
	plan->chain_id = plan->ready_server = UINT32_MAX; /* see struct read_plan */
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
static void read_close(struct read_plan *plan, uint32_t slot)
{
	struct read_request *r = plan->open[slot];
	if (!r)
		return;
	plan->open[slot] = NULL;
	plan->wave[plan->wave_count++] = r;
	if (plan->wave_count == READ_WAVE)
		read_wave(plan);
}

/* The member of chain to read a piece from. to_tail (the last member had
 * a write in flight): the tail; when the tail is still catching up, the
 * last member serving reads again, after a pause (*pause set): the write
 * in flight there ends soon. Else a serving member not tried yet,
 * starting at `start` (chunks spread over replicas), preferring servers
 * that did not fail recently. -1 when every serving member was tried. */
static int pick_replica(struct kvc_storage_client *client, const struct kvc_chain *chain,
                        uint32_t start, uint8_t tried, bool to_tail, bool *pause)
{
	uint32_t n = chain->count;
	if (n == 0)
		return -1;
	if (to_tail) {
		int last = (int)n - 1;
		while (last >= 0 && (chain->syncing & (1u << last)))
			last--;
		if (last >= 0 && last < (int)n - 1)
			*pause = true;
		if (last >= 0 && (last < (int)n - 1 || !(tried & (1u << last))))
			return last;
	}
	int64_t now = -1; /* read once, and only for a server avoided lately */
	int fallback = -1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t pos = (start + k) % n;
		if ((tried | chain->syncing) & (1u << pos))
			continue;
		uint32_t server = client->target_server[chain->targets[pos]];
		int64_t until = atomic_load(&client->avoid_until_ns[server]);
		if (until > 0 && now < 0)
			now = (int64_t)kvc_clock_monotonic_ns();
		if (until == 0 || until <= now)
			return (int)pos;
		if (fallback < 0)
			fallback = (int)pos;
	}
	return fallback;
}

/* Add a piece for member pos of chain to its server's open request. */
static int read_add(struct read_plan *plan, const struct kvc_chain *chain,
                    struct kvc_msg_piece piece, struct read_dest dest, int pos)
{
	piece.target = chain->targets[pos];
	piece.chain_version = chain->version;
	dest.tried |= (uint8_t)(1u << pos);
	dest.to_tail = false;
	dest.attempts++;
	uint32_t server = plan->client->target_server[piece.target];
	/* Placed where the io's memory is a region and the server is here. */
	const struct kvc_storage_region *region = plan->ios[dest.io].region;
	if (region && (server != plan->ready_server || region != plan->ready_region)) {
		plan->ready = kvc_transport_place_ready(plan->client, server, region);
		plan->ready_server = server;
		plan->ready_region = region;
	}
	if (region && !plan->ready)
		region = NULL;
	/* A same-host target this client reads itself (transport_local.h):
	 * a request of its own, which no message carries unless a piece
	 * cannot be read here (read_local). */
	bool local = region && !plan->ios[dest.io].scatter &&
	             kvc_transport_local_ready(plan->client, server, piece.target);
	struct iovec places[PIECE_MAX_PLACES];
	uint32_t n = region ? dest_places(&plan->ios[dest.io], &dest, 0, piece.length, places) : 0;
	uint32_t slot = 3 * server + (region != NULL) + local;
	struct read_request *r = plan->open[slot];
	if (r && (r->head.count == MAX_REQUEST_PIECES || r->span_count + n > MAX_REQUEST_PIECES ||
	          r->bytes + piece.length >
	                  (region ? plan->client->place_request_bytes : REQUEST_BYTES) ||
	          r->region != region || r->local != local)) {
		read_close(plan, slot);
		r = NULL;
	}
	if (!r) {
		r = malloc(sizeof(*r));
		if (!r)
			return -ENOMEM;
		r->server = server;
		r->t = (struct kvc_transport_request){
			.kind = region ? KVC_TRANSPORT_PLACE : KVC_TRANSPORT_TCP, .fd = -1};
		r->region = region;
		r->local = local;
		r->bytes = 0;
		r->span_count = 0;
		r->head = (struct kvc_msg_chunk_read){0};
		plan->open[slot] = r;
	}
	uint32_t k = r->head.count++;
	r->pieces[k] = piece;
	for (uint32_t j = 0; j < n; j++)
		r->spans[r->span_count++] = (struct kvc_msg_place_span){
			.offset = (uint64_t)((uint8_t *)places[j].iov_base - region->base),
			.length = (uint32_t)places[j].iov_len};
	r->dest[k] = dest;
	r->bytes += piece.length;
	io_hold(&plan->ios[dest.io]); /* released by read_finish */
	return 0;
}

static int read_add_piece(void *arg, struct kvc_storage_io *io, uint32_t io_index,
                          const struct kvc_layout_piece *p)
{
	struct read_plan *plan = arg;
	bool pause = false;
	if (p->chain != plan->chain_id)
		plan->chain_id = kvc_storage_client_chain(plan->client, p->chain, &plan->chain)
		                         ? p->chain
		                         : UINT32_MAX;
	const struct kvc_chain *chain = &plan->chain;
	int pos = plan->chain_id == p->chain
	                ? pick_replica(plan->client, chain, (uint32_t)((io->inode + p->chunk) % 251), 0,
	                               false, &pause)
	                : -1;
	if (pos < 0) {
		kvc_storage_io_fail(io, -EIO); /* a chain with no member serving */
		return 0;
	}
	struct kvc_msg_piece piece = {.inode = io->inode, .chain = p->chain, .chunk = p->chunk,
	                              .offset = p->chunk_offset, .length = p->length};
	if (!io->scatter)
		return read_add(plan, chain, piece,
		                (struct read_dest){.dst = (uint8_t *)io->buf + p->buffer_offset,
		                                   .io = io_index},
		                pos);
	/* A scattered io: one piece for the places it covers (the server
	 * cuts it at its spans and reads a run of them once), cut after
	 * PIECE_MAX_PLACES places. A wave run by read_add midway leaves the
	 * later parts on the chain as looked up for the piece: a newer table
	 * meanwhile costs them an -ESTALE and a retry. */
	uint64_t seg_start = 0, at = p->buffer_offset, end = p->buffer_offset + p->length;
	uint32_t i = 0;
	while (i < io->scatter_count && seg_start + io->scatter[i].iov_len <= at)
		seg_start += io->scatter[i++].iov_len;
	int rc = 0;
	while (rc == 0 && at < end && i < io->scatter_count) {
		struct read_dest dest = {.dst = (uint8_t *)io->scatter[i].iov_base + (at - seg_start),
		                         .io = io_index, .seg = i};
		uint64_t from = at;
		for (uint32_t places = 0; i < io->scatter_count && at < end && places < PIECE_MAX_PLACES;) {
			uint64_t seg_end = seg_start + io->scatter[i].iov_len;
			uint64_t stop = seg_end < end ? seg_end : end;
			places += stop > at;
			at = stop > at ? stop : at;
			if (at < seg_end)
				break; /* the piece ends inside this place */
			seg_start = seg_end;
			i++;
		}
		if (at == from)
			break; /* places shorter than the io */
		struct kvc_msg_piece part = piece;
		part.offset += (uint32_t)(from - p->buffer_offset);
		part.length = (uint32_t)(at - from);
		rc = read_add(plan, chain, part, dest, pos);
	}
	if (rc == 0 && at < end)
		kvc_storage_io_fail(io, -EINVAL); /* places shorter than the io */
	return rc;
}

/* Every open request joins the wave, and the wave runs. */
static void read_flush(struct read_plan *plan)
{
	for (uint32_t s = 0; s < 3 * KVC_CONFIG_MAX_SERVERS; s++) /* servers only grow */
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
		bool pause = false;
		for (int i = 0; i < count; i++) {
			struct read_retry *r = &list[i];
			struct kvc_storage_io *io = &plan->ios[r->dest.io];
			struct kvc_chain chain;
			int pos = rc == 0 && r->dest.attempts < MAX_ATTEMPTS &&
			                  kvc_storage_client_chain(plan->client, r->piece.chain, &chain)
			        ? pick_replica(plan->client, &chain, 0, r->dest.tried, r->dest.to_tail,
			                       &pause)
			        : -1;
			if (pos >= 0)
				rc = read_add(plan, &chain, r->piece, r->dest, pos);
			if (pos < 0 || rc < 0) /* no replica could serve it, or out of memory */
				kvc_storage_io_fail(io, rc < 0 ? rc : -EIO);
			io_release(io);
		}
		free(list);
		if (pause)
			kvc_clock_sleep_ms(1);
		read_flush(plan); /* what was planned goes out even after an ENOMEM */
	}
	return rc;
}

/* After an ENOMEM: pieces still queued to be read again are not, and
 * their ios fail with rc (none may pass for read). */
static void read_drop_retries(struct read_plan *plan, int rc)
{
	for (int i = 0; i < plan->retry_count; i++) {
		struct kvc_storage_io *io = &plan->ios[plan->retries[i].dest.io];
		kvc_storage_io_fail(io, rc);
		io_release(io);
	}
	plan->retry_count = 0;
}

static int read_batch_once(struct kvc_storage_client *client, struct kvc_storage_io *ios,
                           int count)
{
	struct read_plan plan = {.client = client, .ios = ios, .chain_id = UINT32_MAX,
	                         .ready_server = UINT32_MAX};
	/* Every possible server, by TCP, by placement and read here (slot
	 * 3 * server + placed + local): a new table may add servers during
	 * the batch. */
	plan.open = calloc(3 * KVC_CONFIG_MAX_SERVERS, sizeof(*plan.open));
	if (!plan.open)
		return -ENOMEM;
	pthread_mutex_init(&plan.retry_lock, NULL);
	for (int i = 0; i < count; i++)
		ios[i].pending = 1; /* the planning's hold (io_hold) */
	int rc = kvc_storage_client_for_each_piece(client, ios, count, read_add_piece, &plan);
	for (int i = 0; i < count; i++) {
		if (rc < 0) /* not every piece planned: no io may pass for read */
			kvc_storage_io_fail(&ios[i], rc);
		io_release(&ios[i]);
	}
	read_flush(&plan); /* what was planned goes out even after an ENOMEM */
	if (rc == 0)
		rc = read_retries(&plan);
	if (rc < 0)
		read_drop_retries(&plan, rc);
	for (uint32_t s = 0; s < 3 * KVC_CONFIG_MAX_SERVERS; s++)
		free(plan.open[s]);
	free(plan.retries);
	free(plan.open);
	pthread_mutex_destroy(&plan.retry_lock);
	for (int i = 0; i < count && rc == 0; i++)
		rc = ios[i].result;
	return rc;
}

int kvc_storage_client_read_batch(struct kvc_storage_client *client,
                                  struct kvc_storage_io *ios, int count)
{
	return kvc_storage_client_with_routing(client, ios, count, read_batch_once);
}
