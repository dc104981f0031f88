/* Unit tests of kvc-fuse's known_attrs (fuse/known_attrs.c): a
 * directory's or special file's last attributes come back with nlink 0
 * once kvc-meta says it is gone; regular files are never kept; an older
 * answer (ctime) does not replace a newer one; an inode whose slot another
 * took is not known any more, and never answered with the other's
 * attributes; a number noted as a regular file is not known as what it
 * was before. */
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "fuse/known_attrs.h"

static struct kvc_attr at(uint64_t ino, int64_t ctime_ns, uint32_t mode)
{
	return (struct kvc_attr){.ino = ino, .ctime_ns = ctime_ns, .mode = mode, .nlink = 2,
	                         .uid = 7};
}

static struct kvc_known_attrs *table;

static void setup(void)
{
	cr_assert_eq(kvc_known_attrs_create(&table), 0);
}

static void teardown(void)
{
	kvc_known_attrs_destroy(table);
}

TestSuite(known_attrs, .init = setup, .fini = teardown);

Test(known_attrs, a_removed_directory_or_fifo_keeps_its_last_attributes)
{
	struct kvc_attr out;
	cr_assert(!kvc_known_attrs_gone(table, 5, &out));
	struct kvc_attr dir = at(5, 100, S_IFDIR | 0755), fifo = at(6, 100, S_IFIFO | 0600);
	kvc_known_attrs_note(table, &dir);
	kvc_known_attrs_note(table, &fifo);
	cr_assert(kvc_known_attrs_gone(table, 5, &out));
	cr_assert_eq(out.ino, 5);
	cr_assert_eq(out.mode, S_IFDIR | 0755);
	cr_assert_eq(out.uid, 7);
	cr_assert_eq(out.nlink, 0);
	cr_assert(kvc_known_attrs_gone(table, 6, &out));
	cr_assert_eq(out.mode, S_IFIFO | 0600);
	cr_assert_eq(out.nlink, 0);
}

Test(known_attrs, regular_files_are_not_kept)
{
	struct kvc_attr out, file = at(9, 100, S_IFREG | 0644);
	kvc_known_attrs_note(table, &file);
	cr_assert(!kvc_known_attrs_gone(table, 9, &out));
}

Test(known_attrs, an_older_answer_does_not_replace_a_newer_one)
{
	struct kvc_attr out, newer = at(5, 200, S_IFDIR | 0700), older = at(5, 100, S_IFDIR | 0755);
	kvc_known_attrs_note(table, &newer);
	kvc_known_attrs_note(table, &older);
	cr_assert(kvc_known_attrs_gone(table, 5, &out));
	cr_assert_eq(out.mode, S_IFDIR | 0700);
	cr_assert_eq(out.ctime_ns, 200);
}

Test(known_attrs, an_inode_whose_slot_another_took_is_not_known)
{
	struct kvc_attr out, first = at(1, 100, S_IFDIR | 0755);
	kvc_known_attrs_note(table, &first);
	/* Find another inode of the same slot: some inode below a million
	 * makes the first one unknown when noted. */
	uint64_t other = 0;
	for (uint64_t ino = 2; ino < 1000000 && !other; ino++) {
		struct kvc_attr a = at(ino, 100, S_IFLNK | 0777);
		kvc_known_attrs_note(table, &a);
		if (!kvc_known_attrs_gone(table, 1, &out))
			other = ino;
	}
	cr_assert_neq(other, 0);
	cr_assert(kvc_known_attrs_gone(table, other, &out));
	cr_assert_eq(out.ino, other);
	cr_assert(!kvc_known_attrs_gone(table, 1, &out));
}

Test(known_attrs, a_number_handed_out_again_as_a_file_forgets_the_old_type)
{
	/* kvc-meta's host crashed after a checkpoint: inode 5 was a directory
	 * here, and comes back as a regular file. */
	struct kvc_attr out, dir = at(5, 100, S_IFDIR | 0755), file = at(5, 50, S_IFREG | 0644);
	struct kvc_attr other = at(6, 100, S_IFIFO | 0600);
	kvc_known_attrs_note(table, &dir);
	kvc_known_attrs_note(table, &other);
	kvc_known_attrs_note(table, &file);
	cr_assert(!kvc_known_attrs_gone(table, 5, &out));
	cr_assert(kvc_known_attrs_gone(table, 6, &out)); /* others untouched */
}
