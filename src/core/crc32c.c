/* crc32c: see crc32c.h. */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u

static uint32_t table[256];

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

/* Folding with carry-less multiplies (AVX-512 VPCLMULQDQ), after Intel's
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ": 16
 * streams of 16 bytes each move a register's content forward over the
 * bytes after it (a 128-bit block of polynomial L x^64 + H moved D bits
 * on is congruent to L (x^(D+32) mod P) x^32 + H (x^(D-32) mod P) x^32,
 * and a reflected carry-less product lands exactly where that factor x^32
 * puts it). Four 64-byte registers take 256 bytes a round: about four
 * times what the crc32 instruction's three streams take. The last
 * register's 128 bits are reduced by the crc32 instruction itself. */
#include <immintrin.h>

#define CRC32C_NORMAL 0x11edc6f41ull /* P, bit i the coefficient of x^i */

/* reflect32(x^n mod P) << 1: the 33-bit form the products want. */
static uint64_t fold_constant(uint32_t n)
{
	uint64_t v = 1;
	for (uint32_t i = 0; i < n; i++) {
		v <<= 1;
		if (v & (1ull << 32))
			v ^= CRC32C_NORMAL;
	}
	uint64_t r = 0;
	for (int i = 0; i < 32; i++)
		if (v & (1ull << i))
			r |= 1ull << (31 - i);
	return r << 1;
}

/* Per fold distance D (bits): {x^(D+32), x^(D-32)} as above. */
static uint64_t fold_2048[2], fold_512[2], fold_384[2], fold_256[2], fold_128[2];

static void fold_build(void)
{
	uint64_t (*k[])[2] = {&fold_2048, &fold_512, &fold_384, &fold_256, &fold_128};
	const uint32_t d[] = {2048, 512, 384, 256, 128};
	for (int i = 0; i < 5; i++) {
		(*k[i])[0] = fold_constant(d[i] + 32);
		(*k[i])[1] = fold_constant(d[i] - 32);
	}
}

#define FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

FOLD_TARGET static inline __m512i fold512(__m512i acc, __m512i k, __m512i next)
{
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00),
	                                 _mm512_clmulepi64_epi128(acc, k, 0x11), next, 0x96);
}

FOLD_TARGET static inline __m128i fold128(__m128i acc, const uint64_t k[2])
{
	__m128i kk = _mm_set_epi64x((long long)k[1], (long long)k[0]);
	return _mm_xor_si128(_mm_clmulepi64_si128(acc, kk, 0x00),
	                     _mm_clmulepi64_si128(acc, kk, 0x11));
}

FOLD_TARGET static inline __m512i broadcast(const uint64_t k[2])
{
	return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k[1], (long long)k[0]));
}

#define FOLD_MIN 1024 /* shorter: the crc32 instruction */

FOLD_TARGET static uint32_t crc_fold(uint32_t crc, const uint8_t *p, size_t len)
{
	if (len < FOLD_MIN)
		return crc_sse42(crc, p, len);
	__m512i k4 = broadcast(fold_2048), k1 = broadcast(fold_512);
	/* The crc so far joins the first 32 bits of the message. */
	__m512i a0 = _mm512_xor_si512(_mm512_loadu_si512(p),
	                              _mm512_inserti32x4(_mm512_setzero_si512(),
	                                                 _mm_cvtsi32_si128((int)crc), 0));
	__m512i a1 = _mm512_loadu_si512(p + 64), a2 = _mm512_loadu_si512(p + 128),
	        a3 = _mm512_loadu_si512(p + 192);
	p += 256;
	len -= 256;
	for (; len >= 256; p += 256, len -= 256) {
		a0 = fold512(a0, k4, _mm512_loadu_si512(p));
		a1 = fold512(a1, k4, _mm512_loadu_si512(p + 64));
		a2 = fold512(a2, k4, _mm512_loadu_si512(p + 128));
		a3 = fold512(a3, k4, _mm512_loadu_si512(p + 192));
	}
	a1 = fold512(a0, k1, a1);
	a2 = fold512(a1, k1, a2);
	a3 = fold512(a2, k1, a3);
	for (; len >= 64; p += 64, len -= 64)
		a3 = fold512(a3, k1, _mm512_loadu_si512(p));
	__m128i x = _mm_xor_si128(
		_mm_xor_si128(fold128(_mm512_extracti32x4_epi32(a3, 0), fold_384),
	                      fold128(_mm512_extracti32x4_epi32(a3, 1), fold_256)),
		_mm_xor_si128(fold128(_mm512_extracti32x4_epi32(a3, 2), fold_128),
	                      _mm512_extracti32x4_epi32(a3, 3)));
	uint64_t c = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(x));
	c = __builtin_ia32_crc32di(c, (uint64_t)_mm_extract_epi64(x, 1));
	return crc_sse42((uint32_t)c, p, len);
}

#endif

/* The best kind this CPU has, found once, with the tables of every kind
 * it has built then (the kinds' own code assumes them). */
static enum kvc_crc32c_kind best = KVC_CRC32C_TABLE;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void best_find(void)
{
	table_build();
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		best = KVC_CRC32C_SSE42;
	/* avx512f only where the OS saves its registers (libgcc checks). */
	if (best == KVC_CRC32C_SSE42 && __builtin_cpu_supports("pclmul") &&
	    __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"))
		best = KVC_CRC32C_FOLD;
	if (best >= KVC_CRC32C_SSE42)
		shift_build();
	if (best == KVC_CRC32C_FOLD)
		fold_build();
#endif
}

/* crc by kind (one best_find has found). */
static uint32_t crc_by(enum kvc_crc32c_kind kind, uint32_t crc, const void *data, size_t len)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (kind == KVC_CRC32C_FOLD)
		return ~crc_fold(crc, data, len);
	if (kind == KVC_CRC32C_SSE42)
		return ~crc_sse42(crc, data, len);
#endif
	return ~crc_table(crc, data, len);
}

bool kvc_crc32c_has(enum kvc_crc32c_kind kind)
{
	pthread_once(&best_once, best_find);
	return kind <= best;
}

enum kvc_crc32c_kind kvc_crc32c_best(void)
{
	pthread_once(&best_once, best_find);
	return best;
}

uint32_t kvc_crc32c_with(enum kvc_crc32c_kind kind, uint32_t crc, const void *data, size_t len)
{
	pthread_once(&best_once, best_find);
	return crc_by(kind <= best ? kind : best, crc, data, len);
}

uint32_t kvc_crc32c(uint32_t crc, const void *data, size_t len)
{
	pthread_once(&best_once, best_find);
	return crc_by(best, crc, data, len);
}

const char *kvc_crc32c_kind_name(enum kvc_crc32c_kind kind)
{
	static const char *const names[] = {"table", "sse4.2 crc32", "avx512 vpclmulqdq"};
	return names[kind];
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
