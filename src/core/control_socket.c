/* control_socket: see control_socket.h. */
#include "core/control_socket.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void kvc_control_socket_address(const char *mount, struct sockaddr_un *addr,
                                socklen_t *len)
{
	char name[sizeof(addr->sun_path)];
	int n = snprintf(name, sizeof(name), "kvc-usrbio:%s", mount);
	if (n < 0 || (size_t)n >= sizeof(name) - 1) {
		uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a of the path */
		for (const char *p = mount; *p; p++)
			hash = (hash ^ (uint8_t)*p) * 0x100000001b3ull;
		n = snprintf(name, sizeof(name), "kvc-usrbio:#%016" PRIx64, hash);
	}
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	/* Abstract namespace: a leading NUL, no terminator. */
	memcpy(addr->sun_path + 1, name, (size_t)n);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}
