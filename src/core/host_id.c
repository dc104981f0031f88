/* host_id: see host_id.h. */
#include "core/host_id.h"

#include <errno.h>
#include <sodium.h>

#include "core/fsutil.h"

/* Append up to 64 bytes of path to state; returns 1 when read. */
static int add_file(crypto_hash_sha256_state *state, const char *path)
{
	char buf[64];
	long n = kvc_fsutil_read_small(path, buf, sizeof(buf));
	if (n <= 0)
		return 0;
	crypto_hash_sha256_update(state, (const unsigned char *)buf, (unsigned long long)n);
	return 1;
}

int kvc_host_id(uint8_t id[KVC_PLACE_HOST_ID])
{
	crypto_hash_sha256_state state;
	_Static_assert(KVC_PLACE_HOST_ID == crypto_hash_sha256_BYTES, "");
	crypto_hash_sha256_init(&state);
	crypto_hash_sha256_update(&state, (const unsigned char *)"kvc-host\n", 9);
	int found = add_file(&state, "/etc/machine-id");
	found += add_file(&state, "/proc/sys/kernel/random/boot_id");
	if (!found)
		return -ENOENT;
	crypto_hash_sha256_final(&state, id);
	return 0;
}
