/* Unit tests of the RPC connection pool against a real server on
 * loopback: a pooled connection the server closed is noticed before use,
 * and a request the server took but never answered is not sent again
 * (done twice, a create would answer EEXIST). */
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

enum mode { ANSWER, ANSWER_THEN_CLOSE, CLOSE_UNANSWERED };

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
	kvc_server_reply(conn, h, 0, NULL, 0);
	return mode == ANSWER_THEN_CLOSE ? -EPROTO : 0;
}

static void *serve(void *arg)
{
	kvc_server_run(&((struct fake *)arg)->server);
	return NULL;
}

static struct fake *start(void)
{
	static struct fake f;
	struct sockaddr_in addr;
	socklen_t len = sizeof(addr);
	pthread_t thread;
	int fd = kvc_net_listen("127.0.0.1:0");
	cr_assert_geq(fd, 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	snprintf(f.address, sizeof(f.address), "127.0.0.1:%d", ntohs(addr.sin_port));
	f.server = (struct kvc_server){.listen_fd = fd, .max_connections = 16,
	                               .handle = handle, .service = &f, .name = "fake"};
	cr_assert_eq(pthread_create(&thread, NULL, serve, &f), 0);
	pthread_detach(thread);
	return &f;
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
