/* Unit tests of server's memory policy for daemons (kvc_server_tune_memory):
 * a freed megabyte stays mapped and resident for the next request instead
 * of going back to the kernel (glibc's defaults mmap it and unmap it at
 * free, a TLB flush on every CPU the daemon runs on). */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/server.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

Test(server, a_freed_megabyte_stays_resident_for_the_next_request)
{
#ifdef UNDER_ASAN
	cr_skip("AddressSanitizer's allocator ignores mallopt");
#endif
	cr_assert_eq(kvc_server_tune_memory(4u << 20, 16u << 20), 0);
	size_t len = 1u << 20, page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *p = malloc(len);
	cr_assert_not_null(p);
	for (size_t i = 0; i < len; i += page) /* volatile: not a dead store before free */
		((volatile uint8_t *)p)[i] = 0x5a;
	/* The block's whole pages, away from the allocator's headers. */
	uintptr_t from = ((uintptr_t)p + 2 * page - 1) & ~(uintptr_t)(page - 1);
	size_t span = len - 4 * page;
	free(p);
	unsigned char vec[256];
	cr_assert_eq(mincore((void *)from, span, vec), 0,
	             "the freed block went back to the kernel: %s", strerror(errno));
	size_t resident = 0;
	for (size_t i = 0; i < span / page; i++)
		resident += vec[i] & 1;
	cr_assert_eq(resident, span / page, "%zu of %zu pages resident", resident, span / page);
}

Test(server, the_values_every_daemon_asks_for_are_taken)
{
#ifdef UNDER_ASAN
	cr_skip("AddressSanitizer's allocator ignores mallopt");
#endif
	/* kvc-storage's (main.c), then kvc-fuse's and kvc-meta's. */
	cr_assert_eq(kvc_server_tune_memory(64u << 20, 256u << 20), 0);
	cr_assert_eq(kvc_server_tune_memory(4u << 20, 16u << 20), 0);
	cr_assert_eq(kvc_server_tune_memory((size_t)INT_MAX + 1, 1u << 20), -EINVAL);
}
