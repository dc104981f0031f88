/* Unit tests of the storage client's pure parts: what a punch writes and
 * drops (kvc_storage_client_punch_plan). */
#include <criterion/criterion.h>
#include <errno.h>

#include "client/storage_client.h"
#include "core/layout.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define TIB (1024ull * 1024 * MIB)

static struct kvc_layout layout_of(uint32_t chunk_size)
{
	return (struct kvc_layout){.chunk_size = chunk_size, .stripe = 3, .first_chain = 0,
	                           .chain_count = 3};
}

static uint64_t chunks_dropped(const struct kvc_storage_punch_plan *p)
{
	uint64_t total = 0;
	for (int i = 0; i < p->ranges; i++)
		total += p->count[i];
	return total;
}

Test(punch_plan, a_256_tib_file_of_64_kib_chunks_drops_every_chunk)
{
	/* 2^32 chunks: their count does not fit the wire's 32 bits, so the
	 * plan takes two ranges instead of a count of 0. */
	struct kvc_layout layout = layout_of(64 * KIB);
	struct kvc_storage_punch_plan p;
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, 0, 256 * TIB, 256 * TIB, &p), 0);
	cr_assert_eq(chunks_dropped(&p), 1ull << 32);
	cr_assert_eq(p.ranges, 2);
	cr_assert_eq(p.first[0], 0);
	cr_assert_eq(p.count[0], UINT32_MAX);
	cr_assert_eq(p.first[1], UINT32_MAX);
	cr_assert_eq(p.count[1], 1);
	cr_assert_eq(p.zero_from[0], p.zero_to[0], "no partial chunk at the start");
	cr_assert_eq(p.zero_from[1], p.zero_to[1], "nor at the end");
}

Test(punch_plan, the_last_chunks_of_the_largest_file)
{
	struct kvc_layout layout = layout_of(64 * KIB);
	struct kvc_storage_punch_plan p;
	uint64_t size = 256 * TIB;
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, size - 3 * 64 * KIB - 5,
	                                           3 * 64 * KIB + 5, size, &p), 0);
	cr_assert_eq(p.ranges, 1);
	cr_assert_eq(p.first[0], UINT32_MAX - 2);
	cr_assert_eq(p.count[0], 3);
	cr_assert_eq(p.zero_to[0] - p.zero_from[0], 5, "the partial chunk before them");
	cr_assert_eq(p.zero_from[1], p.zero_to[1]);
}

Test(punch_plan, partial_chunks_get_zeros_whole_ones_are_dropped)
{
	struct kvc_layout layout = layout_of(1 * MIB);
	struct kvc_storage_punch_plan p;
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, MIB / 2, 3 * MIB, 10 * MIB, &p), 0);
	cr_assert_eq(p.zero_from[0], MIB / 2);
	cr_assert_eq(p.zero_to[0], MIB);
	cr_assert_eq(p.ranges, 1);
	cr_assert_eq(p.first[0], 1);
	cr_assert_eq(p.count[0], 2);
	cr_assert_eq(p.zero_from[1], 3 * MIB);
	cr_assert_eq(p.zero_to[1], 3 * MIB + MIB / 2);
}

Test(punch_plan, stops_at_the_size_and_inside_one_chunk)
{
	struct kvc_layout layout = layout_of(1 * MIB);
	struct kvc_storage_punch_plan p;
	/* past the size: nothing */
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, 5 * MIB, MIB, 5 * MIB, &p), 0);
	cr_assert_eq(p.ranges, 0);
	cr_assert_eq(p.zero_from[0], p.zero_to[0]);
	/* clipped at the size, inside one chunk: zeros only */
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, MIB + 10, 10 * MIB, MIB + 100, &p), 0);
	cr_assert_eq(p.ranges, 0);
	cr_assert_eq(p.zero_from[0], MIB + 10);
	cr_assert_eq(p.zero_to[0], MIB + 100);
}

Test(punch_plan, refuses_bad_ranges)
{
	struct kvc_layout layout = layout_of(1 * MIB), bad = layout_of(1000);
	struct kvc_storage_punch_plan p;
	cr_assert_eq(kvc_storage_client_punch_plan(&bad, 0, MIB, MIB, &p), -EINVAL);
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, 256 * TIB, 1, ~0ull, &p), -EINVAL);
	cr_assert_eq(kvc_storage_client_punch_plan(&layout, 1, 256 * TIB, ~0ull, &p), -EINVAL);
}
