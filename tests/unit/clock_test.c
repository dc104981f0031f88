/* Unit tests of clock's doubling backoff: its delays double from the
 * first up to the cap and stay there, for any first and cap, without
 * overflow. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "core/clock.h"

static void expect(int64_t first_ms, int64_t max_ms, const int64_t *want, int count)
{
	struct kvc_clock_backoff b;
	kvc_clock_backoff_init(&b, first_ms, max_ms);
	for (int i = 0; i < count; i++) {
		int64_t ms = kvc_clock_backoff_next_ms(&b);
		cr_assert_eq(ms, want[i], "delay %d of (%lld, %lld): %lld, not %lld", i,
		             (long long)first_ms, (long long)max_ms, (long long)ms,
		             (long long)want[i]);
	}
}

Test(clock, a_backoff_doubles_up_to_its_cap_and_stays)
{
	expect(20, 500, (const int64_t[]){20, 40, 80, 160, 320, 500, 500, 500}, 8);
	expect(100, 1000, (const int64_t[]){100, 200, 400, 800, 1000, 1000}, 6);
	expect(1, 64, (const int64_t[]){1, 2, 4, 8, 16, 32, 64, 64}, 8);
}

Test(clock, a_backoff_whose_first_delay_is_its_cap_keeps_it)
{
	expect(50, 50, (const int64_t[]){50, 50, 50}, 3);
}

/* Each delay is the smaller of twice the one before and the cap. */
Test(clock, a_backoff_is_the_smaller_of_twice_the_last_and_the_cap)
{
	for (int64_t first = 1; first <= 64; first++)
		for (int64_t max = first; max <= 700; max++) {
			struct kvc_clock_backoff b;
			kvc_clock_backoff_init(&b, first, max);
			int64_t last = kvc_clock_backoff_next_ms(&b);
			cr_assert_eq(last, first);
			for (int i = 0; i < 12; i++) {
				int64_t ms = kvc_clock_backoff_next_ms(&b);
				cr_assert_eq(ms, 2 * last < max ? 2 * last : max,
				             "(%lld, %lld) after %lld: %lld", (long long)first,
				             (long long)max, (long long)last, (long long)ms);
				last = ms;
			}
		}
}

Test(clock, a_backoff_never_overflows)
{
	struct kvc_clock_backoff b;
	kvc_clock_backoff_init(&b, 1, INT64_MAX);
	int64_t last = 0;
	for (int i = 0; i < 70; i++) {
		int64_t ms = kvc_clock_backoff_next_ms(&b);
		cr_assert_geq(ms, last);
		cr_assert_gt(ms, 0);
		last = ms;
	}
	cr_assert_eq(last, INT64_MAX);
}
