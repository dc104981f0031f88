/*
 * check: the "ok N - what" / "not ok N - what" lines the USRBIO test
 * programs print, one per check, and the counts their summary line and
 * exit status come from (failures also counts setup steps that went
 * wrong without a line of their own).
 */
#ifndef KVC_TEST_USRBIO_CHECK_H
#define KVC_TEST_USRBIO_CHECK_H

#include <stdbool.h>
#include <stdio.h>

static int checks, failures;

static inline void check(bool ok, const char *what, long got)
{
	checks++;
	if (!ok)
		failures++;
	printf("%s %d - %s (got %ld)\n", ok ? "ok" : "not ok", checks, what, got);
	fflush(stdout);
}

#endif
