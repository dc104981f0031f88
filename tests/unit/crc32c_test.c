/* Unit tests of crc32c: the standard check value and incremental use. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/crc32c.h"

Test(crc32c, check_value)
{
	cr_assert_eq(kvc_crc32c(0, "123456789", 9), 0xe3069283u);
	cr_assert_eq(kvc_crc32c(0, "", 0), 0);
}

Test(crc32c, incremental_equals_whole)
{
	char buf[10007];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 31 + 7);
	uint32_t whole = kvc_crc32c(0, buf, sizeof(buf));
	uint32_t parts = kvc_crc32c(kvc_crc32c(0, buf, 3333), buf + 3333, sizeof(buf) - 3333);
	cr_assert_eq(whole, parts);
}

/* Bit by bit, the definition, continuing crc. */
static uint32_t reference_from(uint32_t crc, const uint8_t *p, size_t len)
{
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

static uint32_t reference(const uint8_t *p, size_t len)
{
	return reference_from(0, p, len);
}

Test(crc32c, every_length_and_alignment_equals_the_definition)
{
	static uint8_t buf[3 * 8192 * 2 + 64];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 7) * 7 + 3);
	static const size_t lengths[] = {0, 1, 7, 8, 9, 255, 256, 767, 768, 769, 1000, 4096,
	                                 16384, 16383, 16385, 24575, 24576, 24577, 3 * 8192 * 2,
	                                 40000};
	for (int kind = KVC_CRC32C_TABLE; kind <= KVC_CRC32C_FOLD; kind++) {
		if (!kvc_crc32c_has((enum kvc_crc32c_kind)kind))
			continue;
		for (size_t a = 0; a < 9; a++)
			for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
				cr_assert_eq(kvc_crc32c_with((enum kvc_crc32c_kind)kind, 0, buf + a,
				                             lengths[l]),
				             reference(buf + a, lengths[l]), "%s: alignment %zu length %zu",
				             kvc_crc32c_kind_name((enum kvc_crc32c_kind)kind), a, lengths[l]);
	}
	/* and continuing a crc */
	uint32_t part = kvc_crc32c(0, buf, 30000);
	cr_assert_eq(kvc_crc32c(part, buf + 30000, 10000), reference(buf, 40000));
}

Test(crc32c, zeros_without_buffer)
{
	static char zeros[70000];
	cr_assert_eq(kvc_crc32c_zeros(0, sizeof(zeros)), kvc_crc32c(0, zeros, sizeof(zeros)));
}

/* Every kind the CPU has, on lengths the folding path takes (1 KiB and
 * up): every remainder of its 256- and 64-byte rounds, any alignment, a
 * crc continued from any value. */
Test(crc32c, long_runs_from_any_crc_equal_the_definition)
{
	static uint8_t buf[70000 + 64];
	uint32_t seed = 12345;
	for (size_t i = 0; i < sizeof(buf); i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (uint8_t)(seed >> 16);
	}
	for (int kind = KVC_CRC32C_TABLE; kind <= KVC_CRC32C_FOLD; kind++) {
		enum kvc_crc32c_kind k = (enum kvc_crc32c_kind)kind;
		if (!kvc_crc32c_has(k)) {
			cr_log_info("crc32c: this CPU has no %s", kvc_crc32c_kind_name(k));
			continue;
		}
		for (int round = 0; round < 400; round++) {
			seed = seed * 1103515245u + 12345u;
			size_t len = round < 300 ? 1000 + (size_t)round : 1024 + (seed >> 8) % 69000;
			size_t at = (seed >> 4) % 64;
			uint32_t from = seed * 2654435761u;
			cr_assert_eq(kvc_crc32c_with(k, from, buf + at, len),
			             reference_from(from, buf + at, len),
			             "%s: length %zu alignment %zu crc %08x", kvc_crc32c_kind_name(k),
			             len, at, from);
		}
	}
}
