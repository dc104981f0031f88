/*
 * auth: the cluster's secrets and the proofs of the connection handshake
 * (the frames: docs/protocol.md "Connection start"; their bodies:
 * src/core/wire.h). Stateless; thread-safe.
 *
 * A secret file holds one line of 32 to 256 printable ASCII bytes (no
 * space; kvc-cluster writes 64 hex digits of /dev/urandom); the key is
 * those bytes, without the trailing newline. Two secrets, two roles:
 *   cluster (secret_file, 0600): kvc-meta, kvc-storage, kvc-fuse and root
 *     tools; it opens every message of every daemon;
 *   pool (pool_secret_file, 0640 allowed): page-pool clients; it opens
 *     kvc-meta's page-pool messages only (meta/service.c says which).
 * A file that others may read (or write), or that a group may write, is
 * refused; the cluster secret also refuses group read.
 *
 * Proofs: HMAC-SHA256 (libsodium) under the role's key over this 88-byte
 * transcript, which binds both nonces, the version and the role:
 *
 *   offset size field
 *   0      16   label         "kvcfs client" or "kvcfs server", NUL-padded
 *   16     4    version       KVC_WIRE_VERSION, little-endian
 *   20     4    role          enum kvc_auth_role, little-endian
 *   24     32   client nonce  random, from HELLO
 *   56     32   server nonce  random, from HELLO's reply
 *
 * The client proves first (AUTH); only then does the server send its own
 * proof, so a server never hands a stranger anything computed with the
 * key, and a client never sends a request to a server that has not proved
 * it holds the same secret. Proofs are compared in constant time.
 */
#ifndef KVC_AUTH_H
#define KVC_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVC_AUTH_NONCE 32
#define KVC_AUTH_MAC 32
#define KVC_AUTH_MIN_KEY 32
#define KVC_AUTH_MAX_KEY 256

/* Who a connection speaks for (HELLO's role field). */
enum kvc_auth_role {
	KVC_AUTH_NONE = 0,    /* no credentials: kvc-fuse's local control socket only */
	KVC_AUTH_CLUSTER = 1, /* the cluster secret: everything */
	KVC_AUTH_POOL = 2,    /* the pool secret: kvc-meta's page-pool messages */
	KVC_AUTH_ROLES = 3,
};

struct kvc_auth_key {
	uint32_t length; /* 0: none */
	uint8_t bytes[KVC_AUTH_MAX_KEY];
};

/* What a client presents: a role and that role's key (none for NONE). */
struct kvc_auth_cred {
	uint32_t role;
	struct kvc_auth_key key;
};

/* What a server accepts: a role whose key has length 0 is refused. A
 * server without a kvc_auth_keys (NULL) takes no credentials at all. */
struct kvc_auth_keys {
	struct kvc_auth_key keys[KVC_AUTH_ROLES];
};

/* Read a secret file into key. group_may_read: a 0640 file is fine (the
 * pool secret, an HTTP token); else only 0600 or stricter. Returns 0,
 * -errno when it cannot be read (-ENOENT, -EACCES), or -EINVAL when its
 * mode or content is wrong; err says what, with the path. */
int kvc_auth_key_load(const char *path, bool group_may_read, struct kvc_auth_key *key,
                      char *err, size_t err_size);

/* A fresh random nonce. Returns 0, or -EIO when the library cannot start. */
int kvc_auth_nonce(uint8_t nonce[KVC_AUTH_NONCE]);

/* The proof of the client (server = false) or of the server under key. */
void kvc_auth_proof(const struct kvc_auth_key *key, bool server, uint32_t role,
                    const uint8_t client_nonce[KVC_AUTH_NONCE],
                    const uint8_t server_nonce[KVC_AUTH_NONCE], uint8_t mac[KVC_AUTH_MAC]);

/* True when mac is the proof kvc_auth_proof gives (constant time). */
bool kvc_auth_proof_check(const struct kvc_auth_key *key, bool server, uint32_t role,
                          const uint8_t client_nonce[KVC_AUTH_NONCE],
                          const uint8_t server_nonce[KVC_AUTH_NONCE],
                          const uint8_t mac[KVC_AUTH_MAC]);

/* a == b, in time that does not depend on where they differ. */
bool kvc_auth_equal(const void *a, size_t a_length, const void *b, size_t b_length);

/* A role's name for logs: "none", "cluster", "pool" or "unknown". */
const char *kvc_auth_role_name(uint32_t role);

#endif
