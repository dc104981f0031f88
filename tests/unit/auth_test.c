/* Unit tests of the cluster secrets and the connection handshake: secret
 * files with loose modes or bad contents are refused; a real server (the
 * one kvc-meta and kvc-storage run) takes only the secrets it was given,
 * tells its handler which role a connection proved, and a client refuses
 * a server that cannot prove the secret before sending it anything. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/net.h"
#include "core/rpc.h"
#include "core/server.h"
#include "test_dir.h"
#include "test_net.h"

#define SECRET_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define SECRET_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

static char dir[KVC_TEST_DIR_MAX];
static char err[512];

static void make_dir(void)
{
	kvc_test_dir_make(dir, "auth");
}

static void remove_dir(void)
{
	kvc_test_dir_remove(dir);
}

static const char *write_secret(const char *name, const char *text, mode_t mode)
{
	static char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, mode), 0);
	return path;
}

static struct kvc_auth_key key_of(const char *text)
{
	struct kvc_auth_key key = {.length = (uint32_t)strlen(text)};
	memcpy(key.bytes, text, key.length);
	return key;
}

Test(auth, secret_files_need_strict_modes_and_a_long_line, .init = make_dir,
     .fini = remove_dir)
{
	struct kvc_auth_key key;
	const char *path = write_secret("ok", SECRET_A "\n", 0600);
	cr_assert_eq(kvc_auth_key_load(path, false, &key, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(key.length, 64, "the newline is not part of the key");
	cr_assert_eq(memcmp(key.bytes, SECRET_A, 64), 0);

	path = write_secret("group", SECRET_A, 0640);
	cr_assert_eq(kvc_auth_key_load(path, false, &key, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "chmod 600"), "%s", err);
	cr_assert_eq(kvc_auth_key_load(path, true, &key, err, sizeof(err)), 0,
	             "the pool secret may be group-readable: %s", err);

	path = write_secret("world", SECRET_A, 0644);
	cr_assert_eq(kvc_auth_key_load(path, true, &key, err, sizeof(err)), -EINVAL);
	cr_assert_eq(key.length, 0);
	path = write_secret("groupwrite", SECRET_A, 0660);
	cr_assert_eq(kvc_auth_key_load(path, true, &key, err, sizeof(err)), -EINVAL);

	path = write_secret("short", "s3cret\n", 0600);
	cr_assert_eq(kvc_auth_key_load(path, false, &key, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "32 to 256 printable bytes"), "%s", err);
	path = write_secret("spaces", "0123456789abcdef 0123456789abcdef 0123\n", 0600);
	cr_assert_eq(kvc_auth_key_load(path, false, &key, err, sizeof(err)), -EINVAL);
	path = write_secret("twolines", SECRET_A "\n" SECRET_B "\n", 0600);
	cr_assert_eq(kvc_auth_key_load(path, false, &key, err, sizeof(err)), -EINVAL);

	char missing[160];
	snprintf(missing, sizeof(missing), "%s/none", dir);
	cr_assert_eq(kvc_auth_key_load(missing, false, &key, err, sizeof(err)), -ENOENT);
}

Test(auth, proofs_bind_key_side_role_and_both_nonces)
{
	struct kvc_auth_key a = key_of(SECRET_A), b = key_of(SECRET_B);
	uint8_t cn[KVC_AUTH_NONCE], sn[KVC_AUTH_NONCE], mac[KVC_AUTH_MAC];
	cr_assert_eq(kvc_auth_nonce(cn), 0);
	cr_assert_eq(kvc_auth_nonce(sn), 0);
	cr_assert_neq(memcmp(cn, sn, sizeof(cn)), 0, "nonces are random");
	kvc_auth_proof(&a, false, KVC_AUTH_CLUSTER, cn, sn, mac);
	cr_assert(kvc_auth_proof_check(&a, false, KVC_AUTH_CLUSTER, cn, sn, mac));
	cr_assert_not(kvc_auth_proof_check(&b, false, KVC_AUTH_CLUSTER, cn, sn, mac), "key");
	cr_assert_not(kvc_auth_proof_check(&a, true, KVC_AUTH_CLUSTER, cn, sn, mac),
	              "a client's proof is no server's proof");
	cr_assert_not(kvc_auth_proof_check(&a, false, KVC_AUTH_POOL, cn, sn, mac), "role");
	cr_assert_not(kvc_auth_proof_check(&a, false, KVC_AUTH_CLUSTER, sn, cn, mac), "nonces");
	struct kvc_auth_key none = {0};
	cr_assert_not(kvc_auth_proof_check(&none, false, KVC_AUTH_CLUSTER, cn, sn, mac));
	cr_assert(kvc_auth_equal("abc", 3, "abc", 3));
	cr_assert_not(kvc_auth_equal("abc", 3, "abd", 3));
	cr_assert_not(kvc_auth_equal("abc", 3, "abcd", 4));
}

/* A real server whose handler answers with the role the connection proved. */
struct served {
	struct kvc_server server;
	struct kvc_auth_keys keys;
	char address[64];
	atomic_int requests;
};

static int answer_role(void *service, struct kvc_server_conn *conn,
                       const struct kvc_wire_header *h)
{
	struct served *s = service;
	atomic_fetch_add(&s->requests, 1);
	return kvc_server_reply(conn, h, -(int)conn->role, NULL, 0);
}

static void *serve(void *arg)
{
	kvc_server_run(arg);
	return NULL;
}

static struct served *start(bool with_keys)
{
	struct served *s = calloc(1, sizeof(*s));
	pthread_t thread;
	int fd = kvc_test_listen_free(s->address, sizeof(s->address));
	s->keys.keys[KVC_AUTH_CLUSTER] = key_of(SECRET_A);
	s->keys.keys[KVC_AUTH_POOL] = key_of(SECRET_B);
	s->server = (struct kvc_server){.listen_fd = fd, .auth = with_keys ? &s->keys : NULL,
	                                .max_connections = 16, .handle = answer_role,
	                                .service = s, .name = "test"};
	cr_assert_eq(pthread_create(&thread, NULL, serve, &s->server), 0);
	pthread_detach(thread);
	return s;
}

/* One request with cred: the server's status (-role) or the handshake's. */
static int call_as(const char *address, uint32_t role, const char *secret)
{
	struct kvc_rpc_pool pool;
	struct kvc_auth_cred cred = {.role = role};
	if (secret)
		cred.key = key_of(secret);
	cr_assert_eq(kvc_rpc_pool_init(&pool, address, &cred, 1000, 2000), 0);
	int rc = kvc_rpc_call(&pool, KVC_MSG_GETATTR, NULL, 0, NULL, 0, NULL);
	kvc_rpc_pool_destroy(&pool);
	return rc;
}

Test(auth, a_server_takes_only_the_secrets_it_holds)
{
	struct served *s = start(true);
	cr_assert_eq(call_as(s->address, KVC_AUTH_CLUSTER, SECRET_A), -KVC_AUTH_CLUSTER);
	cr_assert_eq(call_as(s->address, KVC_AUTH_POOL, SECRET_B), -KVC_AUTH_POOL,
	             "the handler sees which secret the connection proved");
	cr_assert_eq(atomic_load(&s->requests), 2);
	cr_assert_eq(call_as(s->address, KVC_AUTH_CLUSTER, SECRET_B), -EACCES, "wrong secret");
	cr_assert_eq(call_as(s->address, KVC_AUTH_POOL, SECRET_A), -EACCES,
	             "the cluster secret is no pool secret");
	cr_assert_eq(call_as(s->address, KVC_AUTH_NONE, NULL), -EACCES, "no credentials");
	cr_assert_eq(atomic_load(&s->requests), 2, "no refused connection reached the handler");

	s->keys.keys[KVC_AUTH_POOL].length = 0; /* a server that serves no pool role */
	cr_assert_eq(call_as(s->address, KVC_AUTH_POOL, SECRET_B), -EACCES);
	cr_assert_eq(call_as(s->address, KVC_AUTH_CLUSTER, SECRET_A), -KVC_AUTH_CLUSTER,
	             "the server kept serving");
}

Test(auth, a_server_without_keys_takes_no_credentials)
{
	struct served *s = start(false);
	cr_assert_eq(call_as(s->address, KVC_AUTH_NONE, NULL), 0);
	cr_assert_eq(call_as(s->address, KVC_AUTH_CLUSTER, SECRET_A), -EACCES);
}

/* An impostor: takes any client proof and answers with a made-up one,
 * then counts what else the client sends. */
struct impostor {
	int listen_fd;
	char address[64];
	atomic_int frames_after_auth;
};

static void *impostor_main(void *arg)
{
	struct impostor *im = arg;
	int fd = accept(im->listen_fd, NULL, NULL);
	uint8_t body[64] = {0};
	struct kvc_wire_header h;
	for (int step = 0; fd >= 0; step++) {
		if (kvc_wire_recv(fd, &h, body, sizeof(body)) < 0)
			break;
		if (step >= 2) {
			atomic_fetch_add(&im->frames_after_auth, 1);
			continue;
		}
		struct kvc_msg_auth_proof made_up;
		memset(&made_up, 0x5a, sizeof(made_up));
		kvc_wire_header_init(&h, h.type, h.request_id, 0, sizeof(made_up), 0);
		kvc_wire_send(fd, &h, &made_up, NULL, 0); /* a nonce, then a "proof" */
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

Test(auth, a_client_sends_nothing_to_a_server_that_cannot_prove_the_secret)
{
	static struct impostor im;
	pthread_t thread;
	im.listen_fd = kvc_test_listen_free(im.address, sizeof(im.address));
	cr_assert_eq(pthread_create(&thread, NULL, impostor_main, &im), 0);
	cr_assert_eq(call_as(im.address, KVC_AUTH_CLUSTER, SECRET_A), -EACCES);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&im.frames_after_auth), 0, "the request never left");
	close(im.listen_fd);
}
