/* Unit tests of kvc-fuse's directory names given to the kernel
 * (fuse/dir_aliases.h): a directory answered under the name it had queues
 * nothing; under a new name, its old name is queued to be dropped (no
 * session here: the drop is counted only); this client's own rename moves
 * what was noted, so the name after it is no move. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fuse/dir_aliases.h"

static struct fuse_session *no_session;

/* The thread's count of drops, once it has caught up (at most 2 s). */
static uint64_t dropped_after(struct kvc_dir_aliases *a, uint64_t want)
{
	for (int i = 0; i < 2000 && kvc_dir_aliases_dropped(a) < want; i++)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	return kvc_dir_aliases_dropped(a);
}

Test(dir_aliases, a_directory_under_a_new_name_drops_the_old_one)
{
	struct kvc_dir_aliases *a;
	cr_assert_eq(kvc_dir_aliases_start(&no_session, &a), 0);
	kvc_dir_aliases_note(a, 77, 1, "d1", 2);
	kvc_dir_aliases_note(a, 77, 1, "d1", 2);
	kvc_dir_aliases_note(a, 78, 1, "other", 5);
	cr_assert_eq(dropped_after(a, 0), 0, "the same name: nothing");
	kvc_dir_aliases_note(a, 77, 5, "d1", 2); /* moved into 5 by another client */
	cr_assert_eq(dropped_after(a, 1), 1);
	kvc_dir_aliases_note(a, 77, 5, "n2", 2); /* renamed there */
	cr_assert_eq(dropped_after(a, 2), 2);
	/* our own rename: the kernel moved the name itself */
	kvc_dir_aliases_renamed(a, 5, "n2", 2, 9, "n3", 2);
	kvc_dir_aliases_note(a, 77, 9, "n3", 2);
	cr_assert_eq(dropped_after(a, 3), 2, "our own rename is no move");
	/* the longest name, moved by our rename and then by another client */
	char longest[255];
	memset(longest, 'x', sizeof(longest));
	kvc_dir_aliases_note(a, 90, 9, longest, sizeof(longest));
	kvc_dir_aliases_renamed(a, 9, longest, sizeof(longest), 3, longest, sizeof(longest));
	kvc_dir_aliases_note(a, 90, 3, longest, sizeof(longest));
	cr_assert_eq(dropped_after(a, 3), 2);
	kvc_dir_aliases_note(a, 90, 4, longest, sizeof(longest));
	cr_assert_eq(dropped_after(a, 3), 3);
	/* bad names are ignored */
	kvc_dir_aliases_note(a, 77, 9, "", 0);
	kvc_dir_aliases_note(a, 0, 9, "x", 1);
	cr_assert_eq(dropped_after(a, 4), 3);
	kvc_dir_aliases_stop(a);
}

Test(dir_aliases, a_flood_of_moves_keeps_the_latest)
{
	struct kvc_dir_aliases *a;
	cr_assert_eq(kvc_dir_aliases_start(&no_session, &a), 0);
	char name[16];
	for (int i = 0; i < 1000; i++) {
		int n = snprintf(name, sizeof(name), "n%d", i);
		kvc_dir_aliases_note(a, 42, 1, name, (size_t)n);
	}
	uint64_t got = dropped_after(a, 999);
	cr_assert(got > 0 && got <= 999, "%llu", (unsigned long long)got);
	kvc_dir_aliases_stop(a);
}

Test(dir_aliases, listed_names_go_stale_or_are_forgotten)
{
	struct kvc_dir_aliases *a;
	cr_assert_eq(kvc_dir_aliases_start(&no_session, &a), 0);
	for (uint64_t ino = 100; ino < 140; ino++) {
		char name[8];
		int n = snprintf(name, sizeof(name), "d%u", (unsigned)ino);
		kvc_dir_aliases_note(a, ino, 1, name, (size_t)n);
	}
	/* in steps of 16: every noted directory once, then the cursor is 0 */
	struct kvc_dir_alias step[16];
	uint32_t cursor = 0;
	int seen = 0, steps = 0;
	do {
		int n = kvc_dir_aliases_list(a, &cursor, step, 16);
		for (int i = 0; i < n; i++) {
			cr_assert(step[i].ino >= 100 && step[i].ino < 140);
			cr_assert_eq(step[i].parent, 1);
			char want[8];
			snprintf(want, sizeof(want), "d%u", (unsigned)step[i].ino);
			cr_assert_str_eq(step[i].name, want);
			cr_assert_eq(step[i].len, strlen(want));
		}
		seen += n;
		steps++;
	} while (cursor != 0 && steps < 100);
	cr_assert_eq(seen, 40);
	cr_assert_eq(cursor, 0);
	/* a forgotten directory is not listed; another's forget changes nothing */
	kvc_dir_aliases_forget(a, 100);
	kvc_dir_aliases_forget(a, 999);
	/* a stale name is dropped once, and not if a newer name was noted */
	struct kvc_dir_alias old = {.ino = 101, .parent = 1, .len = 4};
	memcpy(old.name, "d101", 5);
	struct kvc_dir_alias moved = {.ino = 102, .parent = 1, .len = 4};
	memcpy(moved.name, "d102", 5);
	kvc_dir_aliases_note(a, 102, 7, "elsewhere", 9); /* noted anew (and its old name dropped) */
	cr_assert_eq(dropped_after(a, 1), 1);
	kvc_dir_aliases_drop(a, &old, 0);
	kvc_dir_aliases_drop(a, &old, 0);
	kvc_dir_aliases_drop(a, &moved, 0);
	cr_assert_eq(dropped_after(a, 3), 2, "one drop for d101, none for the renoted d102");
	/* the name now names another directory the kernel was given under it
	 * (rmdir and mkdir while the old one is held): only forgotten */
	kvc_dir_aliases_note(a, 500, 1, "d103", 4);
	struct kvc_dir_alias replaced = {.ino = 103, .parent = 1, .len = 4};
	memcpy(replaced.name, "d103", 5);
	kvc_dir_aliases_drop(a, &replaced, 500);
	cr_assert_eq(dropped_after(a, 3), 2, "the new directory's entry stays");
	/* ... and not given to it so: the kernel's entry is stale, dropped */
	struct kvc_dir_alias stale = {.ino = 104, .parent = 1, .len = 4};
	memcpy(stale.name, "d104", 5);
	kvc_dir_aliases_drop(a, &stale, 600);
	cr_assert_eq(dropped_after(a, 3), 3);
	cursor = 0;
	seen = 0;
	steps = 0;
	bool found_102_elsewhere = false;
	do {
		int n = kvc_dir_aliases_list(a, &cursor, step, 16);
		for (int i = 0; i < n; i++) {
			cr_assert(step[i].ino != 100 && step[i].ino != 101 && step[i].ino != 103 &&
			          step[i].ino != 104);
			found_102_elsewhere |= step[i].ino == 102 && step[i].parent == 7;
		}
		seen += n;
		steps++;
	} while (cursor != 0 && steps < 100);
	cr_assert_eq(seen, 37); /* 100, 101, 103, 104 gone; 500 came */
	cr_assert(found_102_elsewhere);
	kvc_dir_aliases_stop(a);
}
