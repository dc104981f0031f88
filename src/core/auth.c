/* auth: see auth.h. */
#include "core/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/wire.h"

/* The bytes a proof covers (auth.h draws them). */
struct transcript {
	char label[16];
	uint32_t version;
	uint32_t role;
	uint8_t client_nonce[KVC_AUTH_NONCE];
	uint8_t server_nonce[KVC_AUTH_NONCE];
};
_Static_assert(sizeof(struct transcript) == 88, "the transcript is 88 bytes");
_Static_assert(KVC_AUTH_NONCE == KVC_WIRE_NONCE && KVC_AUTH_MAC == KVC_WIRE_PROOF,
               "the handshake's bodies carry auth's nonces and proofs");

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_status;

static void sodium_start(void)
{
	sodium_status = sodium_init() < 0 ? -EIO : 0;
}

static int started(void)
{
	pthread_once(&sodium_once, sodium_start);
	return sodium_status;
}

int kvc_auth_key_load(const char *path, bool group_may_read, struct kvc_auth_key *key,
                      char *err, size_t err_size)
{
	char text[KVC_AUTH_MAX_KEY + 2];
	struct stat st;
	ssize_t got = 0;
	int rc = 0;
	memset(key, 0, sizeof(*key));
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_size, "%s: cannot read: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(err, err_size, "%s: not a regular file", path);
		goto out;
	}
	mode_t forbidden = group_may_read ? 0027 : 0077;
	if (st.st_mode & forbidden) {
		rc = -EINVAL;
		snprintf(err, err_size, "%s: mode %04o lets others at the secret (chmod %s %s)",
		         path, (unsigned)(st.st_mode & 07777), group_may_read ? "640" : "600", path);
		goto out;
	}
	do
		got = read(fd, text, sizeof(text));
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		rc = -errno;
		snprintf(err, err_size, "%s: cannot read: %s", path, strerror(errno));
		goto out;
	}
	size_t length = (size_t)got;
	if (length > 0 && text[length - 1] == '\n')
		length--;
	for (size_t i = 0; i < length && rc == 0; i++)
		if (text[i] < 0x21 || text[i] > 0x7e)
			rc = -EINVAL;
	if (rc < 0 || length < KVC_AUTH_MIN_KEY || length > KVC_AUTH_MAX_KEY) {
		rc = -EINVAL;
		snprintf(err, err_size, "%s: a secret is one line of %d to %d printable bytes "
		         "without spaces", path, KVC_AUTH_MIN_KEY, KVC_AUTH_MAX_KEY);
		goto out;
	}
	memcpy(key->bytes, text, length);
	key->length = (uint32_t)length;
out:
	sodium_memzero(text, sizeof(text));
	if (fd >= 0)
		close(fd);
	return rc;
}

int kvc_auth_nonce(uint8_t nonce[KVC_AUTH_NONCE])
{
	int rc = started();
	if (rc == 0)
		randombytes_buf(nonce, KVC_AUTH_NONCE);
	return rc;
}

void kvc_auth_proof(const struct kvc_auth_key *key, bool server, uint32_t role,
                    const uint8_t client_nonce[KVC_AUTH_NONCE],
                    const uint8_t server_nonce[KVC_AUTH_NONCE], uint8_t mac[KVC_AUTH_MAC])
{
	struct transcript t = {.version = KVC_WIRE_VERSION, .role = role};
	crypto_auth_hmacsha256_state state;
	_Static_assert(crypto_auth_hmacsha256_BYTES == KVC_AUTH_MAC, "HMAC-SHA256 is 32 bytes");
	strcpy(t.label, server ? "kvcfs server" : "kvcfs client");
	memcpy(t.client_nonce, client_nonce, KVC_AUTH_NONCE);
	memcpy(t.server_nonce, server_nonce, KVC_AUTH_NONCE);
	crypto_auth_hmacsha256_init(&state, key->bytes, key->length);
	crypto_auth_hmacsha256_update(&state, (const unsigned char *)&t, sizeof(t));
	crypto_auth_hmacsha256_final(&state, mac);
	sodium_memzero(&state, sizeof(state));
}

bool kvc_auth_proof_check(const struct kvc_auth_key *key, bool server, uint32_t role,
                          const uint8_t client_nonce[KVC_AUTH_NONCE],
                          const uint8_t server_nonce[KVC_AUTH_NONCE],
                          const uint8_t mac[KVC_AUTH_MAC])
{
	uint8_t expected[KVC_AUTH_MAC];
	if (key->length == 0)
		return false;
	kvc_auth_proof(key, server, role, client_nonce, server_nonce, expected);
	return sodium_memcmp(expected, mac, KVC_AUTH_MAC) == 0;
}

bool kvc_auth_equal(const void *a, size_t a_length, const void *b, size_t b_length)
{
	return a_length == b_length && sodium_memcmp(a, b, a_length) == 0;
}

const char *kvc_auth_role_name(uint32_t role)
{
	static const char *const names[KVC_AUTH_ROLES] = {"none", "cluster", "pool"};
	return role < KVC_AUTH_ROLES ? names[role] : "unknown";
}
