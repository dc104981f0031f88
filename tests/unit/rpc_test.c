/* Unit tests of the RPC connection pool against a real server on
 * loopback: a pooled connection the server closed is noticed before use,
 * a request the server took but never answered is not sent again (done
 * twice, a create would answer EEXIST), an answer slower than the I/O
 * bound is awaited as the caller's patience says, and a call that finds no
 * server keeps connecting for the pool's reconnect time (none: it fails at
 * once), then sends once. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "core/net.h"
#include "core/rpc.h"
#include "core/server.h"
#include "test_net.h"

enum mode { ANSWER, ANSWER_THEN_CLOSE, CLOSE_UNANSWERED, ANSWER_SLOWLY };

#define SLOW_ANSWER_US 700000 /* the fake's answer, past the pool's 200 ms bound */

struct fake {
	atomic_int requests;
	atomic_int mode;
	struct kvc_server server;
	char address[64];
};

static int handle(void *service, struct kvc_server_conn *conn, const struct kvc_wire_header *h)
{
	struct fake *f = service;
	atomic_fetch_add(&f->requests, 1);
	int mode = atomic_load(&f->mode);
	if (mode == CLOSE_UNANSWERED)
		return -EPROTO; /* the server closes the connection, no reply */
	if (mode == ANSWER_SLOWLY)
		usleep(SLOW_ANSWER_US);
	kvc_server_reply(conn, h, 0, NULL, 0);
	return mode == ANSWER_THEN_CLOSE ? -EPROTO : 0;
}

struct late {
	struct fake *fake;
	useconds_t delay_us;
};

static void *serve_late(void *arg)
{
	struct late *l = arg;
	usleep(l->delay_us);
	kvc_server_run(&l->fake->server);
	return NULL;
}

/* The fake server; with delay_us, connections wait that long in the
 * listen queue (connected, unanswered: a server stopped, then let go). */
static struct fake *start_after(useconds_t delay_us)
{
	static struct fake f;
	static struct late late;
	pthread_t thread;
	int fd = kvc_test_listen_free(f.address, sizeof(f.address));
	f.server = (struct kvc_server){.listen_fd = fd, .max_connections = 16,
	                               .handle = handle, .service = &f, .name = "fake"};
	late = (struct late){.fake = &f, .delay_us = delay_us};
	cr_assert_eq(pthread_create(&thread, NULL, serve_late, &late), 0);
	pthread_detach(thread);
	return &f;
}

static struct fake *start(void)
{
	return start_after(0);
}

Test(rpc, dead_idle_connections_are_replaced_and_nothing_runs_twice)
{
	struct fake *f = start();
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred none = {.role = KVC_AUTH_NONE};
	cr_assert_eq(kvc_rpc_pool_init(&pool, f->address, &none, 1000, 2000), 0);
	cr_assert_eq(kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL), 0);
	cr_assert_eq(atomic_load(&f->requests), 1);

	/* The server answers, then closes: the pooled connection is dead. */
	atomic_store(&f->mode, ANSWER_THEN_CLOSE);
	cr_assert_eq(kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL), 0);
	usleep(100000); /* the close reaches us */
	atomic_store(&f->mode, ANSWER);
	cr_assert_eq(kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL), 0, "a fresh connection");
	cr_assert_eq(atomic_load(&f->requests), 3, "each request ran once");

	/* The server takes a request and dies before answering: an error, and
	 * the request is not sent again. */
	atomic_store(&f->mode, CLOSE_UNANSWERED);
	int rc = kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL);
	cr_assert(rc < 0 && kvc_rpc_is_transport_error(rc), "got %d", rc);
	cr_assert_eq(atomic_load(&f->requests), 4, "not retried after it was sent");
	kvc_rpc_pool_destroy(&pool);
}

static bool still_yes(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
	return true;
}

static bool still_no(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
	return false;
}

Test(rpc, a_slow_answer_is_awaited_while_the_caller_says_it_is_worth_it)
{
	struct fake *f = start();
	atomic_store(&f->mode, ANSWER_SLOWLY);
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred none = {.role = KVC_AUTH_NONE};
	cr_assert_eq(kvc_rpc_pool_init(&pool, f->address, &none, 1000, 200), 0);

	int rc = kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL);
	cr_assert_eq(rc, -ETIMEDOUT, "past the I/O bound without patience: %d", rc);

	struct kvc_rpc_patience plain = {.wait_ms = 30000};
	cr_assert_eq(kvc_rpc_call_waiting(&pool, 16, NULL, 0, NULL, 0, NULL, &plain), 0);

	atomic_int asked = 0;
	struct kvc_rpc_patience watching = {.wait_ms = 30000, .still = still_yes, .arg = &asked};
	cr_assert_eq(kvc_rpc_call_waiting(&pool, 16, NULL, 0, NULL, 0, NULL, &watching), 0);
	cr_assert_geq(atomic_load(&asked), 1, "asked after each slice of the I/O bound");

	/* The caller no longer wants it (the server left the routing table):
	 * the wait ends at the first slice. */
	atomic_store(&asked, 0);
	struct kvc_rpc_patience given_up = {.wait_ms = 30000, .still = still_no, .arg = &asked};
	rc = kvc_rpc_call_waiting(&pool, 16, NULL, 0, NULL, 0, NULL, &given_up);
	cr_assert_eq(rc, -ETIMEDOUT, "got %d", rc);
	cr_assert_eq(atomic_load(&asked), 1);

	/* Patience shorter than the answer. */
	struct kvc_rpc_patience short_wait = {.wait_ms = 1};
	cr_assert_eq(kvc_rpc_call_waiting(&pool, 16, NULL, 0, NULL, 0, NULL, &short_wait),
	             -ETIMEDOUT);

	/* The connections that timed out were dropped, not pooled out of
	 * frame: a prompt answer after all of it is this request's own. */
	atomic_store(&f->mode, ANSWER);
	cr_assert_eq(kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL), 0);
	kvc_rpc_pool_destroy(&pool);
}

Test(rpc, a_slow_handshake_is_awaited_with_the_request_s_patience)
{
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred none = {.role = KVC_AUTH_NONE};

	struct fake *f = start_after(SLOW_ANSWER_US);
	cr_assert_eq(kvc_rpc_pool_init(&pool, f->address, &none, 1000, 200), 0);
	struct kvc_rpc_patience plain = {.wait_ms = 30000};
	cr_assert_eq(kvc_rpc_call_waiting(&pool, 16, NULL, 0, NULL, 0, NULL, &plain), 0,
	             "a new connection's handshake waits as the request does");
	cr_assert_eq(atomic_load(&f->requests), 1);
	kvc_rpc_pool_destroy(&pool);
}

Test(rpc, a_slow_handshake_without_patience_times_out)
{
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred none = {.role = KVC_AUTH_NONE};
	struct fake *f = start_after(SLOW_ANSWER_US);
	cr_assert_eq(kvc_rpc_pool_init(&pool, f->address, &none, 1000, 200), 0);
	int rc = kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL);
	cr_assert_eq(rc, -ETIMEDOUT, "got %d", rc);
	kvc_rpc_pool_destroy(&pool);
}

/* A server that starts listening delay_us after the call (kvc-meta
 * restarting): on a port that was free a moment ago. */
struct listen_later {
	struct fake fake;
	useconds_t delay_us;
};

static void *listen_late(void *arg)
{
	struct listen_later *l = arg;
	usleep(l->delay_us);
	int fd = kvc_net_listen(l->fake.address);
	if (fd < 0)
		return NULL;
	l->fake.server = (struct kvc_server){.listen_fd = fd, .max_connections = 16,
	                                     .handle = handle, .service = &l->fake,
	                                     .name = "late"};
	kvc_server_run(&l->fake.server);
	return NULL;
}

/* An address on which nothing listens (a port free a moment ago). */
static void free_address(char *out, size_t len)
{
	close(kvc_test_listen_free(out, len));
}

/* A call to an address where no server comes, with reconnect_ms of
 * reconnect time: it gives up, refused. */
static void no_server_refuses(int reconnect_ms)
{
	char address[64];
	free_address(address, sizeof(address));
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred none = {.role = KVC_AUTH_NONE};
	cr_assert_eq(kvc_rpc_pool_init(&pool, address, &none, 1000, 2000), 0);
	kvc_rpc_pool_set_reconnect(&pool, reconnect_ms);
	int rc = kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL);
	cr_assert_eq(rc, -ECONNREFUSED, "got %d", rc);
	kvc_rpc_pool_destroy(&pool);
}

Test(rpc, a_call_that_finds_no_server_fails_at_once_without_reconnect)
{
	no_server_refuses(0);
}

Test(rpc, a_call_keeps_connecting_for_its_reconnect_time_and_runs_once)
{
	static struct listen_later late = {.delay_us = 400000};
	free_address(late.fake.address, sizeof(late.fake.address));
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred none = {.role = KVC_AUTH_NONE};
	cr_assert_eq(kvc_rpc_pool_init(&pool, late.fake.address, &none, 1000, 2000), 0);
	kvc_rpc_pool_set_reconnect(&pool, 5000);
	pthread_t thread;
	cr_assert_eq(pthread_create(&thread, NULL, listen_late, &late), 0);
	pthread_detach(thread);
	cr_assert_eq(kvc_rpc_call(&pool, 16, NULL, 0, NULL, 0, NULL), 0,
	             "the server that came back answered");
	cr_assert_eq(atomic_load(&late.fake.requests), 1, "sent once");
	kvc_rpc_pool_destroy(&pool);
}

Test(rpc, reconnecting_gives_up_at_its_time)
{
	no_server_refuses(300);
}
