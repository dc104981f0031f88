/* Unit tests of kvc-fuse's per-uid USRBIO limits (fuse/usrbio_limits.c). */
#include <criterion/criterion.h>
#include <errno.h>

#include "fuse/usrbio_limits.h"

static struct kvc_usrbio_limits limits;

static void setup(void)
{
	struct kvc_usrbio_usage max = {.iov_bytes = 100, .rings = 2, .registrations = 3,
	                               .connections = 2};
	cr_assert_eq(kvc_usrbio_limits_init(&limits, &max), 0);
}

static void teardown(void)
{
	kvc_usrbio_limits_destroy(&limits);
}

TestSuite(usrbio_limits, .init = setup, .fini = teardown);

Test(usrbio_limits, each_resource_stops_at_its_maximum)
{
	struct kvc_usrbio_usage iov = {.iov_bytes = 40, .registrations = 1};
	struct kvc_usrbio_usage ring = {.rings = 1};
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &iov), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &iov), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &iov), -EDQUOT, "120 bytes > 100");
	struct kvc_usrbio_usage used;
	kvc_usrbio_limits_usage(&limits, 7, &used);
	cr_assert_eq(used.iov_bytes, 80, "a refused charge takes nothing");
	cr_assert_eq(used.registrations, 2);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &ring), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &ring), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &ring), -EDQUOT);
	struct kvc_usrbio_usage fd = {.registrations = 1};
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &fd), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &fd), -EDQUOT);
}

Test(usrbio_limits, another_uid_is_unaffected_and_release_gives_back)
{
	struct kvc_usrbio_usage big = {.iov_bytes = 100, .registrations = 1};
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &big), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 8, &big), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &big), -EDQUOT);
	kvc_usrbio_limits_release(&limits, 7, &big);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &big), 0);
	/* Releasing more than held never wraps around. */
	kvc_usrbio_limits_release(&limits, 8, &big);
	kvc_usrbio_limits_release(&limits, 8, &big);
	struct kvc_usrbio_usage used;
	kvc_usrbio_limits_usage(&limits, 8, &used);
	cr_assert_eq(used.iov_bytes, 0);
}

Test(usrbio_limits, no_overflow_with_huge_charges)
{
	struct kvc_usrbio_usage huge = {.iov_bytes = UINT64_MAX};
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &huge), -EDQUOT);
	struct kvc_usrbio_usage some = {.iov_bytes = 50};
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &some), 0);
	huge.iov_bytes = UINT64_MAX - 10;
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 7, &huge), -EDQUOT);
}

Test(usrbio_limits, connections_count_alone_and_a_uid_holding_only_them_is_kept)
{
	struct kvc_usrbio_usage one = {.connections = 1}, used;
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 9, &one), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 9, &one), 0);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 9, &one), -EDQUOT);
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 10, &one), 0, "another uid");
	kvc_usrbio_limits_release(&limits, 9, &one);
	kvc_usrbio_limits_usage(&limits, 9, &used);
	cr_assert_eq(used.connections, 1, "still held: the uid's entry stays");
	cr_assert_eq(kvc_usrbio_limits_charge(&limits, 9, &one), 0);
	kvc_usrbio_limits_release(&limits, 9, &one);
	kvc_usrbio_limits_release(&limits, 9, &one);
	kvc_usrbio_limits_usage(&limits, 9, &used);
	cr_assert_eq(used.connections, 0);
}
