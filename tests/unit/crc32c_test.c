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

Test(crc32c, zeros_without_buffer)
{
	static char zeros[70000];
	cr_assert_eq(kvc_crc32c_zeros(0, sizeof(zeros)), kvc_crc32c(0, zeros, sizeof(zeros)));
}
