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
/* The crc32 instruction takes one word a cycle but answers three cycles
 * later: three independent streams over adjacent lanes, joined by
 * shifting a lane's crc over the next lane's length (a linear operator on
 * the crc, applied a byte at a time from tables: Mark Adler's crc32c.c). */
#define LONG_LANE 8192
#define SHORT_LANE 256
static uint32_t shift_long[4][256], shift_short[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;
	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		square[n] = gf2_times(mat, mat[n]);
}

/* The tables applying len (a power of two) zero bytes to a crc. */
static void shift_tables(uint32_t tables[4][256], size_t len)
{
	uint32_t even[32], odd[32];
	odd[0] = POLY; /* one zero bit */
	for (int n = 1; n < 32; n++)
		odd[n] = 1u << (n - 1);
	gf2_square(even, odd); /* two */
	gf2_square(odd, even); /* four */
	const uint32_t *op = NULL;
	for (;;) { /* eight bits = one byte in even, then doubling */
		gf2_square(even, odd);
		len >>= 1;
		if (len == 0) {
			op = even;
			break;
		}
		gf2_square(odd, even);
		len >>= 1;
		if (len == 0) {
			op = odd;
			break;
		}
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 0; k < 4; k++)
			tables[k][n] = gf2_times(op, n << (8 * k));
}

static void shift_build(void)
{
	shift_tables(shift_long, LONG_LANE);
	shift_tables(shift_short, SHORT_LANE);
}

static inline uint32_t shift(uint32_t tables[4][256], uint32_t crc)
{
	return tables[0][crc & 0xffu] ^ tables[1][(crc >> 8) & 0xffu] ^
	       tables[2][(crc >> 16) & 0xffu] ^ tables[3][crc >> 24];
}

static inline uint64_t word_at(const uint8_t *p)
{
	uint64_t word;
	memcpy(&word, p, 8);
	return word;
}

__attribute__((target("sse4.2")))
static uint64_t lanes3(uint64_t c0, const uint8_t **p, size_t *len, size_t lane,
                       uint32_t tables[4][256])
{
	while (*len >= 3 * lane) {
		const uint8_t *at = *p, *end = at + lane;
		uint64_t c1 = 0, c2 = 0;
		for (; at < end; at += 8) {
			c0 = __builtin_ia32_crc32di(c0, word_at(at));
			c1 = __builtin_ia32_crc32di(c1, word_at(at + lane));
			c2 = __builtin_ia32_crc32di(c2, word_at(at + 2 * lane));
		}
		c0 = shift(tables, (uint32_t)c0) ^ (uint32_t)c1;
		c0 = shift(tables, (uint32_t)c0) ^ (uint32_t)c2;
		*p += 3 * lane;
		*len -= 3 * lane;
	}
	return c0;
}

__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t len)
{
	pthread_once(&shift_once, shift_build);
	uint64_t c = crc;
	c = lanes3(c, &p, &len, LONG_LANE, shift_long);
	c = lanes3(c, &p, &len, SHORT_LANE, shift_short);
	while (len >= 8) {
		c = __builtin_ia32_crc32di(c, word_at(p));
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
