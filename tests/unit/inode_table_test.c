/* Unit tests of kvc-fuse's inode table: open files' sizes, dirty sizes and
 * their commit, and when entries go away. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "fuse/inode_table.h"

static struct kvc_inode_table *table;
static struct kvc_attr file = {.ino = 42, .size = 1000,
                               .layout = {.chunk_size = 1 << 20, .stripe = 2,
                                          .chain_count = 3}};

static void setup(void)
{
	cr_assert_eq(kvc_inode_table_create(&table), 0);
}

static void teardown(void)
{
	kvc_inode_table_destroy(table);
}

TestSuite(inode_table, .init = setup, .fini = teardown);

Test(inode_table, open_files_are_known)
{
	struct kvc_layout layout;
	uint64_t size;
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), -ENOENT);
	cr_assert_eq(kvc_inode_table_open(table, &file), 0);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), 0);
	cr_assert_eq(size, 1000);
	cr_assert_eq(layout.stripe, 2);
	kvc_inode_table_release(table, 42);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), -ENOENT, "clean and closed");
}

Test(inode_table, writes_raise_a_dirty_size_until_committed)
{
	uint64_t size, inos[4];
	struct kvc_layout layout;
	kvc_inode_table_open(table, &file);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 0, "nothing written: clean");
	/* A write inside the file as this daemon knows it: its end is still
	 * sent (another client may have shrunk the file meanwhile). */
	kvc_inode_table_wrote(table, 42, 500);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	cr_assert_eq(size, 500);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 0, "taken");
	kvc_inode_table_committed(table, 42, 500);
	kvc_inode_table_wrote(table, 42, 5000);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	cr_assert_eq(size, 5000);
	cr_assert_eq(kvc_inode_table_list_dirty(table, inos, 4), 1);
	struct kvc_attr attr = file;
	kvc_inode_table_patch_attr(table, &attr, 0);
	cr_assert_eq(attr.size, 5000, "getattr sees the local size");
	/* closed while dirty: kept until the size is committed */
	kvc_inode_table_release(table, 42);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), 0);
	kvc_inode_table_committed(table, 42, 5000);
	cr_assert_eq(kvc_inode_table_list_dirty(table, inos, 4), 0);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), -ENOENT);
}

Test(inode_table, truncate_sets_a_clean_size)
{
	uint64_t size;
	struct kvc_layout layout;
	kvc_inode_table_open(table, &file);
	kvc_inode_table_wrote(table, 42, 9000);
	/* kvc-fuse commits before it truncates. */
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	kvc_inode_table_committed(table, 42, size);
	kvc_inode_table_set_size(table, 42, 10);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 0);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), 0);
	cr_assert_eq(size, 10);
	/* A write that raced the truncate is sent, whatever the order. */
	kvc_inode_table_wrote(table, 42, 8);
	kvc_inode_table_set_size(table, 42, 4);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	cr_assert_eq(size, 8);
}

/* A failed commit marks the end again: it is sent at the next pass. */
Test(inode_table, a_failed_commit_is_sent_again)
{
	uint64_t size, inos[4];
	kvc_inode_table_open(table, &file);
	kvc_inode_table_wrote(table, 42, 300);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	cr_assert_eq(kvc_inode_table_list_dirty(table, inos, 4), 0, "taken");
	kvc_inode_table_wrote(table, 42, size); /* the commit failed */
	kvc_inode_table_commit_failed(table, 42);
	cr_assert_eq(kvc_inode_table_list_dirty(table, inos, 4), 1);
	kvc_inode_table_release(table, 42);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1, "kept while unsent");
	kvc_inode_table_committed(table, 42, size);
	cr_assert_eq(kvc_inode_table_list_dirty(table, inos, 4), 0);
}

Test(inode_table, reopen_takes_the_servers_size_when_clean)
{
	uint64_t size;
	struct kvc_layout layout;
	struct kvc_attr grown = file;
	kvc_inode_table_open(table, &file);
	grown.size = 7777; /* another client grew it */
	kvc_inode_table_open(table, &grown);
	kvc_inode_table_get(table, 42, &layout, &size);
	cr_assert_eq(size, 7777);
	kvc_inode_table_wrote(table, 42, 8000);
	grown.size = 100;
	kvc_inode_table_open(table, &grown);
	kvc_inode_table_get(table, 42, &layout, &size);
	cr_assert_eq(size, 8000, "a dirty local size is not lost to a stale one");
}

/* Another client shrank a file open here: kvc-meta's answer asked for
 * after the event is the size, down too; one asked for before it, or any
 * answer while this client has uncommitted writes, only raises. */
Test(inode_table, a_change_elsewhere_lets_a_later_answer_shrink_a_clean_file)
{
	uint64_t size;
	struct kvc_layout layout;
	struct kvc_attr attr = file;
	attr.size = 3872;
	kvc_inode_table_open(table, &attr);
	struct kvc_attr told = attr;
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 100);
	cr_assert_eq(told.size, 3872, "opened, not learnt yet: only raised");
	kvc_inode_table_learnt(table, 42, 4);
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 3);
	cr_assert_eq(told.size, 3872, "asked for before the open: only raised");
	cr_assert_not(kvc_inode_table_changed_since(table, 42));
	kvc_inode_table_changed(table, 42, 10);
	cr_assert(kvc_inode_table_changed_since(table, 42));
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 9);
	cr_assert_eq(told.size, 3872, "asked for before the event: only raised");
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 10);
	cr_assert_eq(told.size, 483);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), 0);
	cr_assert_eq(size, 483, "reads stop at the new end");
	cr_assert_not(kvc_inode_table_changed_since(table, 42));
	/* dirty here: our writes are not lost to a smaller answer */
	kvc_inode_table_changed(table, 42, 20);
	kvc_inode_table_wrote(table, 42, 1000);
	cr_assert_not(kvc_inode_table_changed_since(table, 42));
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 30);
	cr_assert_eq(told.size, 1000);
	/* a commit in flight counts as dirty: no answer shrinks the file */
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 45);
	cr_assert_eq(told.size, 1000, "a commit in flight");
	/* our own commit makes the entry current again, once learnt */
	kvc_inode_table_committed(table, 42, size);
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 46);
	cr_assert_eq(told.size, 1000, "committed, not learnt yet");
	kvc_inode_table_learnt(table, 42, 50);
	told.size = 483;
	kvc_inode_table_patch_attr(table, &told, 40);
	cr_assert_eq(told.size, 1000, "an answer from before our commit");
	/* no event heard (kvc-meta's note expired): a later answer still counts */
	told.size = 200;
	kvc_inode_table_patch_attr(table, &told, 60);
	cr_assert_eq(told.size, 200);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), 0);
	cr_assert_eq(size, 200);
}

static atomic_int waited;

static void *wait_for_commits(void *arg)
{
	(void)arg;
	kvc_inode_table_wait_commits(table, 42);
	atomic_store(&waited, 1);
	return NULL;
}

/* A truncate waits for a size commit in flight elsewhere (the background
 * pass's): sent first, it would be undone when that commit lands. */
Test(inode_table, a_truncate_waits_for_a_commit_in_flight)
{
	uint64_t size;
	pthread_t thread;
	kvc_inode_table_open(table, &file);
	kvc_inode_table_wait_commits(table, 42); /* none: returns */
	kvc_inode_table_wrote(table, 42, 50);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	atomic_store(&waited, 0);
	cr_assert_eq(pthread_create(&thread, NULL, wait_for_commits, NULL), 0);
	struct timespec pause = {0, 50 * 1000 * 1000};
	nanosleep(&pause, NULL);
	cr_assert_eq(atomic_load(&waited), 0, "returned with a commit in flight");
	kvc_inode_table_committed(table, 42, size);
	pthread_join(thread, NULL);
	cr_assert_eq(atomic_load(&waited), 1);
	/* a failed commit settles it too */
	kvc_inode_table_wrote(table, 42, 60);
	cr_assert_eq(kvc_inode_table_take_dirty(table, 42, &size), 1);
	kvc_inode_table_wrote(table, 42, size);
	kvc_inode_table_commit_failed(table, 42);
	kvc_inode_table_wait_commits(table, 42);
}

Test(inode_table, the_entry_stays_until_the_last_close)
{
	kvc_inode_table_open(table, &file);
	kvc_inode_table_open(table, &file);
	cr_assert(kvc_inode_table_is_open(table, 42));
	kvc_inode_table_release(table, 42);
	cr_assert(kvc_inode_table_is_open(table, 42), "still open once");
	kvc_inode_table_release(table, 42);
	cr_assert_not(kvc_inode_table_is_open(table, 42));
	kvc_inode_table_release(table, 42); /* an extra release is harmless */
	cr_assert_not(kvc_inode_table_is_open(table, 42));
}

Test(inode_table, a_stale_file_fails_its_io)
{
	struct kvc_layout layout;
	uint64_t size;
	kvc_inode_table_open(table, &file);
	kvc_inode_table_mark_stale(table, 42);
	cr_assert_eq(kvc_inode_table_get(table, 42, &layout, &size), -ESTALE);
	uint64_t inos[4];
	cr_assert_eq(kvc_inode_table_list_open(table, inos, 4), 0, "stale files are not reopened");
	kvc_inode_table_release(table, 42);
	cr_assert_not(kvc_inode_table_is_open(table, 42));
}

Test(inode_table, what_the_pages_of_an_open_file_are_of)
{
	struct kvc_attr a = file;
	a.mtime_ns = 5000;
	cr_assert(kvc_inode_table_saw(table, &a), "not open: nothing to drop");
	cr_assert_eq(kvc_inode_table_open(table, &a), 0);
	cr_assert(kvc_inode_table_saw(table, &a), "as opened");
	struct kvc_attr rewritten = a;
	rewritten.mtime_ns = 6000; /* another client rewrote it, same size */
	cr_assert_not(kvc_inode_table_saw(table, &rewritten));
	cr_assert(kvc_inode_table_saw(table, &rewritten), "taken as the new one");
	struct kvc_attr shorter = rewritten;
	shorter.size = 10;
	cr_assert_not(kvc_inode_table_saw(table, &shorter));
	/* a second open takes its answer: the open kept the pages only when
	 * they were of it */
	cr_assert_eq(kvc_inode_table_open(table, &a), 0);
	cr_assert(kvc_inode_table_saw(table, &a));
	kvc_inode_table_release(table, 42);
	kvc_inode_table_release(table, 42);
}
