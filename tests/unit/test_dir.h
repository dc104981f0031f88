/*
 * test_dir: the unit tests' temporary directories, one helper for all.
 * kvc_test_dir_make makes a fresh, empty /tmp/kvc-NAME-test-XXXXXX into
 * dir (KVC_TEST_DIR_MAX bytes); kvc_test_dir_remove removes it and all it
 * holds (links are removed, never followed) and leaves dir empty, so a
 * second call does nothing. Both fail the running test on error: a test
 * that cannot make its directory proves nothing, and one that leaves it
 * behind leaves the machine dirtier than it found it.
 *
 * A header of static functions: each unit test is a program of its own.
 */
#ifndef KVC_TEST_DIR_H
#define KVC_TEST_DIR_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#define KVC_TEST_DIR_MAX 64

static inline void kvc_test_dir_make(char *dir, const char *name)
{
	int n = snprintf(dir, KVC_TEST_DIR_MAX, "/tmp/kvc-%s-test-XXXXXX", name);
	cr_assert(n > 0 && n < KVC_TEST_DIR_MAX, "test directory name too long: %s", name);
	cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %m", dir);
}

static inline int kvc_test_dir_remove_one(const char *path, const struct stat *st, int type,
                                          struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) == 0 ? 0 : -1;
}

static inline void kvc_test_dir_remove(char *dir)
{
	if (dir[0] == '\0')
		return;
	cr_assert_eq(nftw(dir, kvc_test_dir_remove_one, 16, FTW_DEPTH | FTW_PHYS), 0,
	             "removing %s: %m", dir);
	dir[0] = '\0';
}

#endif
