/* Unit tests of the layout math: chunk and target of every offset. */
#include <criterion/criterion.h>
#include <errno.h>

#include "core/layout.h"

static const struct kvc_layout three = {.chunk_size = 1 << 20, .stripe = 3,
                                        .first_chain = 1, .chain_count = 4};

Test(layout, check_accepts_and_refuses)
{
	cr_assert_eq(kvc_layout_check(&three), 0);
	struct kvc_layout l = three;
	l.chunk_size = 3 << 20;
	cr_assert_eq(kvc_layout_check(&l), -EINVAL);
	l = three;
	l.chunk_size = 1 << 10;
	cr_assert_eq(kvc_layout_check(&l), -EINVAL);
	l = three;
	l.stripe = 5;
	cr_assert_eq(kvc_layout_check(&l), -EINVAL);
	l = three;
	l.stripe = 0;
	cr_assert_eq(kvc_layout_check(&l), -EINVAL);
	l = three;
	l.first_chain = 4;
	cr_assert_eq(kvc_layout_check(&l), -EINVAL);
}

Test(layout, targets_round_robin_from_first_and_wrap)
{
	cr_assert_eq(kvc_layout_chain(&three, 0), 1);
	cr_assert_eq(kvc_layout_chain(&three, 1), 2);
	cr_assert_eq(kvc_layout_chain(&three, 2), 3);
	cr_assert_eq(kvc_layout_chain(&three, 3), 1);
	struct kvc_layout wrap = three;
	wrap.first_chain = 3;
	cr_assert_eq(kvc_layout_chain(&wrap, 1), 0);
	uint32_t t[8];
	cr_assert_eq(kvc_layout_chains(&wrap, t, 8), 3);
	cr_assert_eq(t[0], 3);
	cr_assert_eq(t[1], 0);
	cr_assert_eq(t[2], 1);
}

Test(layout, split_edges)
{
	struct kvc_layout_piece p[8];
	cr_assert_eq(kvc_layout_split(&three, 0, 0, p, 8), 0);
	/* exactly one chunk */
	cr_assert_eq(kvc_layout_split(&three, 0, 1 << 20, p, 8), 1);
	cr_assert_eq(p[0].length, 1u << 20);
	/* one byte before the boundary, two bytes: crosses */
	cr_assert_eq(kvc_layout_split(&three, (1 << 20) - 1, 2, p, 8), 2);
	cr_assert_eq(p[0].chunk, 0);
	cr_assert_eq(p[0].chunk_offset, (1u << 20) - 1);
	cr_assert_eq(p[0].length, 1);
	cr_assert_eq(p[1].chunk, 1);
	cr_assert_eq(p[1].chunk_offset, 0);
	cr_assert_eq(p[1].length, 1);
	cr_assert_eq(p[1].buffer_offset, 1);
	cr_assert_eq(p[1].chain, 2);
	/* unaligned over three chunks */
	cr_assert_eq(kvc_layout_split(&three, 100, 2 << 20, p, 8), 3);
	cr_assert_eq(p[0].length + p[1].length + p[2].length, 2u << 20);
	cr_assert_eq(p[2].chunk_offset, 0);
	cr_assert_eq(p[2].length, 100);
}

Test(layout, split_limits)
{
	struct kvc_layout_piece p[2];
	cr_assert_eq(kvc_layout_split(&three, 0, 3 << 20, p, 2), -E2BIG);
	cr_assert_eq(kvc_layout_split(&three, KVC_LAYOUT_MAX_FILE_SIZE, 1, p, 2), -EFBIG);
	cr_assert_eq(kvc_layout_split(&three, UINT64_MAX - 1, 10, p, 2), -EFBIG);
	/* the last byte of the largest file is fine */
	cr_assert_eq(kvc_layout_split(&three, KVC_LAYOUT_MAX_FILE_SIZE - 1, 1, p, 2), 1);
	cr_assert_eq(p[0].chunk, (uint32_t)((KVC_LAYOUT_MAX_FILE_SIZE - 1) >> 20));
}

Test(layout, one_tib_offset_maps_to_the_right_chunk)
{
	struct kvc_layout_piece p[1];
	uint64_t off = (1ull << 40) - 4096;
	cr_assert_eq(kvc_layout_split(&three, off, 4096, p, 1), 1);
	cr_assert_eq(p[0].chunk, (1u << 20) - 1);
	cr_assert_eq(p[0].chunk_offset, (1u << 20) - 4096);
	cr_assert_eq(p[0].chain, kvc_layout_chain(&three, (1u << 20) - 1));
}
