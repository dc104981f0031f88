/* Unit tests of the cluster manager's etcd client (src/mgmt/etcd.h)
 * against real etcd processes (the `etcd` of Debian's etcd-server): each
 * test of the etcd suite starts its own single member (ports picked in
 * 23310-23399 under a lock, a temporary data dir, killed and removed
 * after; the member dies with the test process too), the cluster test
 * three members. The stream suite feeds the watch-stream decoder garbage
 * without any etcd. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "mgmt/etcd.h"
#include "mgmt/etcd_internal.h"

#define PORT_FIRST 23310
#define PORT_LAST 23399

struct member {
	pid_t pid;
	char dir[64];
	int client_port, peer_port;
	char url[64];
};

/* Ports are picked and bound under a lock (an abstract unix socket, gone
 * with its process), so parallel tests do not pick the same ones. */
static int ports_lock(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char name[] = "kvc-etcd-test-ports";
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	memcpy(a.sun_path + 1, name, sizeof(name) - 1);
	for (int i = 0; i < 3000; i++) {
		if (bind(fd, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + sizeof(name)) == 0)
			return fd;
		usleep(10000);
	}
	cr_assert_fail("port lock not free after 30 s");
	return -1;
}

static bool port_free(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

/* n free ports, none in taken[0..n_taken). */
static void pick_ports(int *ports, int n)
{
	int got = 0;

	for (int p = PORT_FIRST; p <= PORT_LAST && got < n; p++)
		if (port_free(p))
			ports[got++] = p;
	cr_assert_eq(got, n, "no %d free ports in %d-%d", n, PORT_FIRST, PORT_LAST);
}

static void spawn_member(struct member *m, const char *name, const char *cluster)
{
	char data[96], listen_client[64], listen_peer[64], log[96], token[64];
	pid_t parent = getpid();

	snprintf(m->dir, sizeof(m->dir), "/tmp/kvc-etcd-test-XXXXXX");
	cr_assert_not_null(mkdtemp(m->dir));
	snprintf(data, sizeof(data), "%s/data", m->dir);
	snprintf(log, sizeof(log), "%s/etcd.log", m->dir);
	snprintf(listen_client, sizeof(listen_client), "http://127.0.0.1:%d", m->client_port);
	snprintf(listen_peer, sizeof(listen_peer), "http://127.0.0.1:%d", m->peer_port);
	snprintf(token, sizeof(token), "kvc-test-%d", (int)parent);
	snprintf(m->url, sizeof(m->url), "%s", listen_client);
	m->pid = fork();
	cr_assert_geq(m->pid, 0);
	if (m->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
		if (getppid() != parent)
			_exit(1);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("etcd", "etcd", "--name", name, "--data-dir", data,
			"--listen-client-urls", listen_client, "--advertise-client-urls", listen_client,
			"--listen-peer-urls", listen_peer, "--initial-advertise-peer-urls", listen_peer,
			"--initial-cluster", cluster, "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
}

/* Until a read through m's client URL succeeds (15 s at most). */
static void wait_healthy(const struct member *m)
{
	struct kvc_etcd *e;
	int64_t until = kvc_clock_monotonic_ns() + 15000000000LL;
	int rc = -1;

	cr_assert_eq(kvc_etcd_open(m->url, 1000, &e), 0);
	while (rc < 0 && kvc_clock_monotonic_ns() < until) {
		struct kvc_etcd_kvs kvs;

		rc = kvc_etcd_get(e, "health", &kvs);
		kvc_etcd_kvs_free(&kvs);
		if (rc < 0)
			usleep(50000);
	}
	kvc_etcd_close(e);
	cr_assert_geq(rc, 0, "etcd on %s not healthy: %d (log in %s)", m->url, rc, m->dir);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void kill_member(struct member *m)
{
	if (m->pid > 0) {
		kill(m->pid, SIGKILL);
		waitpid(m->pid, NULL, 0);
		m->pid = 0;
	}
}

static void remove_member(struct member *m)
{
	kill_member(m);
	if (m->dir[0])
		nftw(m->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	m->dir[0] = 0;
}

/* Start n members of one cluster and wait until each answers. */
static void start_cluster(struct member *ms, int n)
{
	int lock = ports_lock(), ports[6];
	char cluster[512] = "", name[16];
	size_t off = 0;

	pick_ports(ports, 2 * n);
	for (int i = 0; i < n; i++) {
		ms[i].client_port = ports[2 * i];
		ms[i].peer_port = ports[2 * i + 1];
		off += snprintf(cluster + off, sizeof(cluster) - off, "%sm%d=http://127.0.0.1:%d",
			i ? "," : "", i, ms[i].peer_port);
	}
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "m%d", i);
		spawn_member(&ms[i], name, cluster);
	}
	for (int i = 0; i < n; i++)
		wait_healthy(&ms[i]);
	close(lock); /* the members hold their ports now */
}

static struct member one;
static struct kvc_etcd *E;

static void setup_one(void)
{
	start_cluster(&one, 1);
	cr_assert_eq(kvc_etcd_open(one.url, 5000, &E), 0);
}

static void teardown_one(void)
{
	kvc_etcd_close(E);
	remove_member(&one);
}

TestSuite(etcd, .init = setup_one, .fini = teardown_one, .timeout = 60);

Test(etcd, put_get_prefix_delete)
{
	struct kvc_etcd_kvs kvs;
	int64_t r1, r2, r3, rd;

	cr_assert_eq(kvc_etcd_put(E, "/kvc/b", "two", 3, 0, &r2), 0);
	cr_assert_eq(kvc_etcd_put(E, "/kvc/a", "one", 3, 0, &r1), 0);
	cr_assert_eq(kvc_etcd_put(E, "/kvd", "out", 3, 0, &r3), 0);
	cr_assert(r1 > r2 && r3 > r1);

	cr_assert_eq(kvc_etcd_get(E, "/kvc/a", &kvs), 1);
	cr_assert_eq(kvs.kvs[0].value_len, 3);
	cr_assert_str_eq((char *)kvs.kvs[0].value, "one");
	cr_assert_str_eq(kvs.kvs[0].key, "/kvc/a");
	cr_assert_eq(kvs.kvs[0].mod_revision, r1);
	cr_assert_eq(kvs.kvs[0].create_revision, r1);
	cr_assert_eq(kvs.kvs[0].lease, 0);
	cr_assert_eq(kvs.revision, r3);
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_get(E, "/kvc/none", &kvs), 0);
	cr_assert_eq(kvs.revision, r3);
	kvc_etcd_kvs_free(&kvs);

	cr_assert_eq(kvc_etcd_get_prefix(E, "/kvc/", &kvs), 2);
	cr_assert_str_eq(kvs.kvs[0].key, "/kvc/a"); /* sorted by key */
	cr_assert_str_eq(kvs.kvs[1].key, "/kvc/b");
	cr_assert_eq(kvs.kvs[1].mod_revision, r2);
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_get_prefix(E, "", &kvs), 3); /* every key */
	kvc_etcd_kvs_free(&kvs);

	cr_assert_eq(kvc_etcd_delete(E, "/kvc/a", &rd), 1);
	cr_assert_gt(rd, r3);
	cr_assert_eq(kvc_etcd_delete(E, "/kvc/a", NULL), 0);
	cr_assert_eq(kvc_etcd_put(E, "/kvc/c", "", 0, 0, NULL), 0);
	cr_assert_eq(kvc_etcd_delete_prefix(E, "/kvc/", NULL), 2);
	cr_assert_eq(kvc_etcd_get_prefix(E, "/kv", &kvs), 1);
	cr_assert_str_eq(kvs.kvs[0].key, "/kvd");
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_get(E, "", &kvs), -EINVAL); /* etcd refuses an empty key */
	kvc_etcd_kvs_free(&kvs);
}

Test(etcd, binary_values)
{
	uint8_t v[1000];
	struct kvc_etcd_kvs kvs;

	for (size_t i = 0; i < sizeof(v); i++)
		v[i] = (uint8_t)(i * 7);
	v[0] = 0;
	v[500] = 0;
	cr_assert_eq(kvc_etcd_put(E, "bin", v, sizeof(v), 0, NULL), 0);
	cr_assert_eq(kvc_etcd_get(E, "bin", &kvs), 1);
	cr_assert_eq(kvs.kvs[0].value_len, sizeof(v));
	cr_assert_eq(memcmp(kvs.kvs[0].value, v, sizeof(v)), 0);
	kvc_etcd_kvs_free(&kvs);
	/* A key under a prefix ending in 0xff bytes. */
	cr_assert_eq(kvc_etcd_put(E, "p\xff\xff" "x", "\0\0", 2, 0, NULL), 0);
	cr_assert_eq(kvc_etcd_get_prefix(E, "p\xff\xff", &kvs), 1);
	cr_assert_eq(kvs.kvs[0].value_len, 2);
	cr_assert_eq(memcmp(kvs.kvs[0].value, "\0\0", 2), 0);
	kvc_etcd_kvs_free(&kvs);
}

Test(etcd, compare_and_swap)
{
	struct kvc_etcd_kvs kvs;
	int64_t r1, r2;

	cr_assert_eq(kvc_etcd_cas_put(E, "cas", "a", 1, 0, 0, &r1), 1); /* absent: created */
	cr_assert_eq(kvc_etcd_cas_put(E, "cas", "b", 1, 0, 0, NULL), 0); /* no longer absent */
	cr_assert_eq(kvc_etcd_cas_put(E, "cas", "b", 1, 0, r1, &r2), 1);
	cr_assert_gt(r2, r1);
	cr_assert_eq(kvc_etcd_cas_put(E, "cas", "c", 1, 0, r1, NULL), 0); /* stale */
	cr_assert_eq(kvc_etcd_get(E, "cas", &kvs), 1);
	cr_assert_eq(kvs.kvs[0].value[0], 'b');
	cr_assert_eq(kvs.kvs[0].mod_revision, r2);
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_cas_delete(E, "cas", r1, NULL), 0);
	cr_assert_eq(kvc_etcd_cas_delete(E, "cas", r2, NULL), 1);
	cr_assert_eq(kvc_etcd_get(E, "cas", &kvs), 0);
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_cas_put(E, "cas", "x", 1, 0, -1, NULL), -EINVAL);
}

struct contender {
	struct kvc_etcd *e;
	const char *name;
	int64_t lease;
	int rc;
	struct kvc_etcd_kvs current;
	pthread_barrier_t *go;
};

static void *contend(void *arg)
{
	struct contender *c = arg;

	pthread_barrier_wait(c->go);
	c->rc = kvc_etcd_put_if_absent(c->e, "leader", c->name, strlen(c->name), c->lease,
		&c->current);
	return NULL;
}

Test(etcd, leader_election)
{
	struct contender c[2] = { { .name = "alpha" }, { .name = "beta" } };
	pthread_barrier_t go;
	pthread_t t[2];

	pthread_barrier_init(&go, NULL, 2);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(kvc_etcd_open(one.url, 5000, &c[i].e), 0);
		cr_assert_eq(kvc_etcd_lease_grant(c[i].e, 30, &c[i].lease), 0);
		c[i].go = &go;
		pthread_create(&t[i], NULL, contend, &c[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(c[0].rc + c[1].rc, 1, "%d %d", c[0].rc, c[1].rc);
	struct contender *won = c[0].rc ? &c[0] : &c[1], *lost = c[0].rc ? &c[1] : &c[0];
	cr_assert_eq(won->current.count, 0);
	cr_assert_eq(lost->current.count, 1);
	cr_assert_str_eq((char *)lost->current.kvs[0].value, won->name); /* who leads */
	cr_assert_eq(lost->current.kvs[0].lease, won->lease);
	kvc_etcd_kvs_free(&lost->current);
	/* The leader's lease goes: the other one wins. */
	cr_assert_eq(kvc_etcd_lease_revoke(won->e, won->lease), 0);
	cr_assert_eq(kvc_etcd_put_if_absent(lost->e, "leader", lost->name, strlen(lost->name),
			     lost->lease, &lost->current), 1);
	kvc_etcd_kvs_free(&lost->current);
	kvc_etcd_kvs_free(&won->current);
	for (int i = 0; i < 2; i++)
		kvc_etcd_close(c[i].e);
	pthread_barrier_destroy(&go);
}

Test(etcd, general_txn)
{
	struct kvc_etcd_cmp cmp[] = {
		{ .key = "t/a", .target = KVC_ETCD_CMP_VALUE, .result = KVC_ETCD_EQUAL,
			.value = "1", .value_len = 1 },
		{ .key = "t/b", .target = KVC_ETCD_CMP_VERSION, .result = KVC_ETCD_EQUAL },
	};
	struct kvc_etcd_op ok[] = {
		{ .kind = KVC_ETCD_OP_PUT, .key = "t/b", .value = "2", .value_len = 1 },
		{ .kind = KVC_ETCD_OP_GET, .key = "t/", .prefix = 1 },
	};
	struct kvc_etcd_op fail[] = { { .kind = KVC_ETCD_OP_DELETE, .key = "t/", .prefix = 1 } };
	struct kvc_etcd_txn t = { cmp, 2, ok, 2, fail, 1 };
	struct kvc_etcd_kvs kvs;

	cr_assert_eq(kvc_etcd_put(E, "t/a", "1", 1, 0, NULL), 0);
	cr_assert_eq(kvc_etcd_txn(E, &t, &kvs), 1);
	cr_assert_eq(kvs.count, 2);
	cr_assert_str_eq(kvs.kvs[1].key, "t/b");
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_txn(E, &t, &kvs), 0); /* t/b exists now: delete all */
	cr_assert_eq(kvs.count, 0);
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_get_prefix(E, "t/", &kvs), 0);
	kvc_etcd_kvs_free(&kvs);
	cmp[0].target = KVC_ETCD_CMP_TARGETS;
	cr_assert_eq(kvc_etcd_txn(E, &t, &kvs), -EINVAL);
}

Test(etcd, leases)
{
	struct kvc_etcd_kvs kvs;
	int64_t id, id2, ttl = 0;
	int64_t until = kvc_clock_monotonic_ns() + 20000000000LL;
	int n = 1;

	cr_assert_eq(kvc_etcd_lease_grant(E, 2, &id), 0);
	cr_assert_eq(kvc_etcd_put(E, "leased", "x", 1, id, NULL), 0);
	cr_assert_eq(kvc_etcd_lease_keepalive(E, id, &ttl), 0);
	cr_assert(ttl > 0 && ttl <= 2, "ttl %lld", (long long)ttl);
	cr_assert_eq(kvc_etcd_get(E, "leased", &kvs), 1);
	cr_assert_eq(kvs.kvs[0].lease, id);
	kvc_etcd_kvs_free(&kvs);
	/* No more keepalives: the key goes with the lease. */
	while (n == 1 && kvc_clock_monotonic_ns() < until) {
		usleep(200000);
		n = kvc_etcd_get(E, "leased", &kvs);
		kvc_etcd_kvs_free(&kvs);
	}
	cr_assert_eq(n, 0);
	cr_assert_eq(kvc_etcd_lease_keepalive(E, id, &ttl), -ENOENT);
	cr_assert_eq(kvc_etcd_put(E, "leased", "x", 1, id, NULL), -ENOENT);

	/* Revoke removes the keys at once. */
	cr_assert_eq(kvc_etcd_lease_grant(E, 60, &id2), 0);
	cr_assert_eq(kvc_etcd_put(E, "leased2", "y", 1, id2, NULL), 0);
	cr_assert_eq(kvc_etcd_lease_revoke(E, id2), 0);
	cr_assert_eq(kvc_etcd_get(E, "leased2", &kvs), 0);
	kvc_etcd_kvs_free(&kvs);
	cr_assert_eq(kvc_etcd_lease_revoke(E, id2), -ENOENT);
	cr_assert_eq(kvc_etcd_lease_grant(E, 0, &id2), -EINVAL);
}

/* A watcher thread that records events. */
#define MAX_EVENTS 64
struct watcher {
	struct kvc_etcd *e;
	struct kvc_etcd_watch w;
	int stop_after; /* stop after this many events (0: never) */
	int rc;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;
	enum kvc_etcd_event_type type[MAX_EVENTS];
	char key[MAX_EVENTS][32], value[MAX_EVENTS][32];
	int64_t rev[MAX_EVENTS];
};

static int on_event(void *arg, const struct kvc_etcd_event *ev)
{
	struct watcher *wt = arg;
	int stop;

	pthread_mutex_lock(&wt->lock);
	if (wt->n < MAX_EVENTS) {
		wt->type[wt->n] = ev->type;
		snprintf(wt->key[wt->n], 32, "%s", ev->kv.key);
		snprintf(wt->value[wt->n], 32, "%.*s", (int)ev->kv.value_len, (char *)ev->kv.value);
		wt->rev[wt->n] = ev->kv.mod_revision;
		wt->n++;
	}
	stop = wt->stop_after && wt->n >= wt->stop_after;
	pthread_cond_broadcast(&wt->cond);
	pthread_mutex_unlock(&wt->lock);
	return stop;
}

static void *watch_main(void *arg)
{
	struct watcher *wt = arg;

	wt->rc = kvc_etcd_watch(wt->e, &wt->w);
	return NULL;
}

static void watcher_start(struct watcher *wt, struct kvc_etcd *e, const char *key, int prefix,
	int64_t from, int stop_fd, int stop_after)
{
	memset(wt, 0, sizeof(*wt));
	pthread_mutex_init(&wt->lock, NULL);
	pthread_cond_init(&wt->cond, NULL);
	wt->e = e;
	wt->stop_after = stop_after;
	wt->w = (struct kvc_etcd_watch){ .key = key, .prefix = prefix, .start_revision = from,
		.stop_fd = stop_fd, .fn = on_event, .arg = wt };
	pthread_create(&wt->thread, NULL, watch_main, wt);
}

/* Until wt holds n events (30 s at most). */
static void watcher_wait(struct watcher *wt, int n)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	pthread_mutex_lock(&wt->lock);
	while (wt->n < n && pthread_cond_timedwait(&wt->cond, &wt->lock, &until) == 0)
		;
	pthread_mutex_unlock(&wt->lock);
	cr_assert_geq(wt->n, n, "%d events of %d", wt->n, n);
}

static int64_t current_revision(struct kvc_etcd *e)
{
	struct kvc_etcd_kvs kvs;

	int64_t rev;

	cr_assert_geq(kvc_etcd_get(e, "any", &kvs), 0);
	rev = kvs.revision;
	kvc_etcd_kvs_free(&kvs);
	cr_assert_gt(rev, 0);
	return rev;
}

Test(etcd, watch_events_and_stop)
{
	struct watcher wt;
	int64_t from = current_revision(E) + 1, r[3];
	int efd = eventfd(0, EFD_CLOEXEC);

	watcher_start(&wt, E, "w/", 1, from, efd, 0);
	cr_assert_eq(kvc_etcd_put(E, "w/a", "1\0z", 3, 0, &r[0]), 0);
	cr_assert_eq(kvc_etcd_put(E, "other", "x", 1, 0, NULL), 0);
	cr_assert_eq(kvc_etcd_put(E, "w/b", "2", 1, 0, &r[1]), 0);
	cr_assert_eq(kvc_etcd_delete(E, "w/a", &r[2]), 1);
	watcher_wait(&wt, 3);
	cr_assert_eq(wt.type[0], KVC_ETCD_EVENT_PUT);
	cr_assert_str_eq(wt.key[0], "w/a");
	cr_assert_str_eq(wt.value[0], "1"); /* up to the NUL */
	cr_assert_eq(wt.rev[0], r[0]);
	cr_assert_str_eq(wt.key[1], "w/b");
	cr_assert_eq(wt.rev[1], r[1]);
	cr_assert_eq(wt.type[2], KVC_ETCD_EVENT_DELETE);
	cr_assert_str_eq(wt.key[2], "w/a");
	cr_assert_eq(wt.rev[2], r[2]);
	/* Idle now: the stop fd ends it. */
	int64_t t0 = kvc_clock_monotonic_ns();
	cr_assert_eq(eventfd_write(efd, 1), 0);
	pthread_join(wt.thread, NULL);
	cr_log_info("watch stopped %lld us after the eventfd write",
		(long long)(kvc_clock_monotonic_ns() - t0) / 1000);
	cr_assert_eq(wt.rc, 0);
	cr_assert_eq(wt.n, 3);
	cr_assert_eq(wt.w.next_revision, r[2] + 1);
	close(efd);
}

Test(etcd, watch_history_callback_stop_and_compaction)
{
	struct watcher wt;
	int64_t r[3];

	for (int i = 0; i < 3; i++) {
		char v[2] = { (char)('a' + i), 0 };
		cr_assert_eq(kvc_etcd_put(E, "h", v, 1, 0, &r[i]), 0);
	}
	/* From the past, stopped by the callback after two events. */
	watcher_start(&wt, E, "h", 0, r[0], -1, 2);
	pthread_join(wt.thread, NULL);
	cr_assert_eq(wt.rc, 0, "%d", wt.rc);
	cr_assert_eq(wt.n, 2);
	cr_assert_str_eq(wt.value[0], "a");
	cr_assert_str_eq(wt.value[1], "b");
	cr_assert_eq(wt.w.next_revision, r[1] + 1);
	/* Compacted away: -ERANGE with the compact revision. */
	cr_assert_eq(kvc_etcd_compact(E, r[2]), 0);
	watcher_start(&wt, E, "h", 0, r[0], -1, 0);
	pthread_join(wt.thread, NULL);
	cr_assert_eq(wt.rc, -ERANGE);
	cr_assert_eq(wt.w.compact_revision, r[2]);
	cr_assert_eq(wt.n, 0);
}

/* A port bound by nobody but us, that refuses connections. */
static int refusing(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	*port = ntohs(a.sin_port);
	return fd;
}

/* A port that accepts connections (into its backlog) and never answers. */
static int blackhole(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(fd, 16), 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	*port = ntohs(a.sin_port);
	return fd;
}

Test(etcd, failover_and_dead_endpoints)
{
	struct kvc_etcd *e;
	struct kvc_etcd_kvs kvs;
	char eps[256];
	int dead[2], hole_port, hole = blackhole(&hole_port);
	int dead_fd[2] = { refusing(&dead[0]), refusing(&dead[1]) };
	int64_t t0, ms;

	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,%s", dead[0], one.url);
	cr_assert_eq(kvc_etcd_open(eps, 2000, &e), 0);
	cr_assert_eq(kvc_etcd_put(e, "f", "1", 1, 0, NULL), 0);
	cr_assert_eq(kvc_etcd_get(e, "f", &kvs), 1);
	kvc_etcd_kvs_free(&kvs);
	kvc_etcd_close(e);

	/* A hung member first: it gets its share of the timeout, no more. */
	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,%s", hole_port, one.url);
	cr_assert_eq(kvc_etcd_open(eps, 2000, &e), 0);
	cr_assert_eq(kvc_etcd_get(e, "f", &kvs), 1);
	kvc_etcd_kvs_free(&kvs);
	kvc_etcd_close(e);

	/* All dead: refused, within the timeout. */
	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,http://127.0.0.1:%d/", dead[0], dead[1]);
	cr_assert_eq(kvc_etcd_open(eps, 2000, &e), 0);
	t0 = kvc_clock_monotonic_ns();
	int rc = kvc_etcd_get(e, "f", &kvs);
	cr_assert_eq(rc, -ECONNREFUSED, "%d", rc);
	ms = (kvc_clock_monotonic_ns() - t0) / 1000000;
	cr_assert_lt(ms, 2000 + 1000, "%lld ms", (long long)ms);
	struct kvc_etcd_watch w = { .key = "f", .stop_fd = -1, .fn = on_event };
	cr_assert_eq(kvc_etcd_watch(e, &w), -ECONNREFUSED);
	kvc_etcd_close(e);

	/* Hung only: timed out, within the timeout. */
	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d", hole_port);
	cr_assert_eq(kvc_etcd_open(eps, 1000, &e), 0);
	t0 = kvc_clock_monotonic_ns();
	cr_assert_eq(kvc_etcd_put(e, "f", "2", 1, 0, NULL), -ETIMEDOUT);
	ms = (kvc_clock_monotonic_ns() - t0) / 1000000;
	cr_assert_lt(ms, 1000 + 1000, "%lld ms", (long long)ms);
	kvc_etcd_close(e);
	close(hole);
	close(dead_fd[0]);
	close(dead_fd[1]);

	cr_assert_eq(kvc_etcd_open("", 1000, &e), -EINVAL);
	cr_assert_eq(kvc_etcd_open("ftp://x", 1000, &e), -EINVAL);
	cr_assert_eq(kvc_etcd_open("http://", 1000, &e), -EINVAL);
	cr_assert_eq(kvc_etcd_open("http://x", 0, &e), -EINVAL);
}

/* Three members; one is killed: reads, writes and a watch go on. */
static struct member three[3];

static void teardown_three(void)
{
	for (int i = 0; i < 3; i++)
		remove_member(&three[i]);
}

Test(etcd_cluster, one_member_dies, .fini = teardown_three, .timeout = 90)
{
	struct kvc_etcd *e;
	struct kvc_etcd_kvs kvs;
	struct watcher wt;
	char eps[256], key[16];
	int efd = eventfd(0, EFD_CLOEXEC);

	start_cluster(three, 3);
	snprintf(eps, sizeof(eps), "%s,%s,%s", three[0].url, three[1].url, three[2].url);
	cr_assert_eq(kvc_etcd_open(eps, 5000, &e), 0);
	cr_assert_eq(kvc_etcd_put(e, "c/before", "0", 1, 0, NULL), 0);
	/* The watch streams from member 0 (the first to answer). */
	watcher_start(&wt, e, "c/", 1, current_revision(e), efd, 0);
	watcher_wait(&wt, 1);
	kill_member(&three[0]);
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "c/k%d", i);
		cr_assert_eq(kvc_etcd_put(e, key, key, strlen(key), 0, NULL), 0, "put %d", i);
		cr_assert_eq(kvc_etcd_get(e, key, &kvs), 1);
		cr_assert_str_eq((char *)kvs.kvs[0].value, key);
		kvc_etcd_kvs_free(&kvs);
	}
	cr_assert_eq(kvc_etcd_get_prefix(e, "c/", &kvs), 6);
	kvc_etcd_kvs_free(&kvs);
	watcher_wait(&wt, 6); /* resumed on another member, nothing lost or twice */
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "c/k%d", i);
		cr_assert_str_eq(wt.key[i + 1], key);
	}
	cr_assert_eq(eventfd_write(efd, 1), 0);
	pthread_join(wt.thread, NULL);
	cr_assert_eq(wt.rc, 0);
	cr_assert_eq(wt.n, 6);
	kvc_etcd_close(e);
	close(efd);
}

/* The watch stream's decoder, without etcd. */

struct objects {
	int n;
	char text[4][256];
};

static int collect(void *arg, const char *obj, size_t len)
{
	struct objects *o = arg;

	cr_assert_lt(len, 256);
	memcpy(o->text[o->n], obj, len);
	o->text[o->n][len] = 0;
	o->n++;
	return 0;
}

static int feed(size_t max, const char *text, struct objects *o)
{
	struct kvc_etcd_stream s;
	int rc;

	kvc_etcd_stream_init(&s, max);
	rc = kvc_etcd_stream_feed(&s, text, strlen(text), collect, o);
	cr_assert_leq(s.cap, max);
	kvc_etcd_stream_free(&s);
	return rc;
}

Test(etcd_stream, splits_objects_whatever_the_chunks)
{
	const char *text = " {\"a\":\"}{\\\"\"}\n\r\t{\"b\":[1,{\"c\":2}]}\n{\"d";
	struct kvc_etcd_stream s;
	struct objects o = { 0 };

	kvc_etcd_stream_init(&s, 1024);
	for (size_t i = 0; i < strlen(text); i++)
		cr_assert_eq(kvc_etcd_stream_feed(&s, text + i, 1, collect, &o), 0);
	cr_assert_eq(o.n, 2);
	cr_assert_str_eq(o.text[0], "{\"a\":\"}{\\\"\"}");
	cr_assert_str_eq(o.text[1], "{\"b\":[1,{\"c\":2}]}");
	kvc_etcd_stream_free(&s);
}

Test(etcd_stream, garbage_and_oversized)
{
	struct objects o = { 0 };
	char big[512], deep[128];

	cr_assert_eq(feed(1024, "hello", &o), -EPROTO);
	cr_assert_eq(feed(1024, "[1,2]", &o), -EPROTO);
	cr_assert_eq(feed(1024, "{}x", &o), -EPROTO);
	cr_assert_eq(feed(1024, "\0", &o), 0); /* strlen 0: nothing */
	memset(big, 'x', sizeof(big));
	memcpy(big, "{\"a\":\"", 6);
	big[sizeof(big) - 1] = 0;
	cr_assert_eq(feed(64, big, &o), -EPROTO); /* over the bound, unfinished */
	memset(deep, '{', sizeof(deep));
	deep[sizeof(deep) - 1] = 0;
	cr_assert_eq(feed(1 << 20, deep, &o), -EPROTO);
	memset(deep, '[', sizeof(deep));
	deep[0] = '{';
	deep[sizeof(deep) - 1] = 0;
	cr_assert_eq(feed(1 << 20, deep, &o), -EPROTO);
}

static int count_event(void *arg, const struct kvc_etcd_event *ev)
{
	(void)ev;
	(*(int *)arg)++;
	return 0;
}

static int decode(const char *obj, struct kvc_etcd_watch *w)
{
	struct kvc_etcd_watch_state st = { .w = w };
	int fn_rc = 0;

	return kvc_etcd_watch_response(&st, obj, strlen(obj), &fn_rc);
}

Test(etcd_stream, watch_responses)
{
	int n = 0;
	struct kvc_etcd_watch w = { .fn = count_event, .arg = &n };

	cr_assert_eq(decode("{\"result\":{\"header\":{\"revision\":\"7\"},\"created\":true}}", &w), 0);
	cr_assert_eq(w.next_revision, 8);
	cr_assert_eq(decode("{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"9\"}},"
			    "{\"type\":\"DELETE\",\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"10\"}}]}}", &w), 0);
	cr_assert_eq(n, 2);
	cr_assert_eq(w.next_revision, 11);
	/* Replayed after a resume: skipped. */
	cr_assert_eq(decode("{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"10\"}}]}}", &w), 0);
	cr_assert_eq(n, 2);
	cr_assert_eq(decode("{\"result\":{\"header\":{\"revision\":\"20\"}}}", &w), 0); /* progress */
	cr_assert_eq(w.next_revision, 21);
	cr_assert_eq(decode("{\"result\":{\"canceled\":true,\"compact_revision\":\"15\"}}", &w), -ERANGE);
	cr_assert_eq(w.compact_revision, 15);
	cr_assert_eq(decode("{\"error\":{\"grpc_code\":14,\"message\":\"no leader\"}}", &w), -EAGAIN);
	cr_assert_eq(decode("{\"error\":\"bad\",\"code\":3}", &w), -EINVAL);

	const char *bad[] = {
		"{x}",
		"{\"result\":[]}",
		"{\"result\":{\"events\":{}}}",
		"{\"result\":{\"events\":[1]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"key\":\"!!!!\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ=\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"value\":\"YQ==\"}}]}}",
		"{\"result\":{\"events\":[{\"type\":\"EXPIRE\",\"kv\":{\"key\":\"YQ==\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"12a\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"-3\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"version\":\"99999999999999999999\"}}]}}",
		"{\"result\":{\"header\":{\"revision\":true}}}",
		"{\"result\":{},\"result\":{}}",
		"{\"error\":{\"message\":\"no code\"}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(decode(bad[i], &w), -EPROTO, "%s", bad[i]);
	cr_assert_eq(n, 2);
}
