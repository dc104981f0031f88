/* crc32c: see crc32c.h. */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
		table[i] = c;
	}
}

static uint32_t crc_table(uint32_t crc, const uint8_t *p, size_t len)
{
	pthread_once(&table_once, table_build);
	while (len--)
		crc = (crc >> 8) ^ table[(crc ^ *p++) & 0xffu];
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t len)
{
	uint64_t c = crc;
	while (len >= 8) {
		uint64_t word;
		memcpy(&word, p, 8);
		c = __builtin_ia32_crc32di(c, word);
		p += 8;
		len -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return c32;
}

static int have_sse42(void)
{
	static int cached = -1;
	if (cached < 0) {
		__builtin_cpu_init();
		cached = __builtin_cpu_supports("sse4.2") ? 1 : 0;
	}
	return cached;
}
#endif

uint32_t kvc_crc32c(uint32_t crc, const void *data, size_t len)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (have_sse42())
		return ~crc_sse42(crc, data, len);
#endif
	return ~crc_table(crc, data, len);
}

uint32_t kvc_crc32c_zeros(uint32_t crc, size_t len)
{
	static const uint8_t zeros[4096];
	while (len > 0) {
		size_t step = len < sizeof(zeros) ? len : sizeof(zeros);
		crc = kvc_crc32c(crc, zeros, step);
		len -= step;
	}
	return crc;
}
