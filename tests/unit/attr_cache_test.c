/* Unit tests of kvc-fuse's attr_cache (fuse/attr_cache.c): an answer is
 * served while fresh; an answer older (ctime) than the newest one seen for
 * its inode is never kept, and the one held stops being served until a
 * newer answer comes (a GETATTR that passed a change of ours, answered
 * after it, and a third one older still); a forget drops every answer,
 * and answers to requests made before it that arrive after it.
 * The events' ttl (fuse/meta_events.c) is stubbed: ten seconds. */
#include <criterion/criterion.h>

#include "fuse/attr_cache.h"

static uint64_t ticks;

uint64_t kvc_meta_events_tick(struct kvc_meta_events *ev)
{
	(void)ev;
	return ++ticks;
}

double kvc_meta_events_ttl(struct kvc_meta_events *ev, struct kvc_meta_events_mark mark,
                           uint64_t parent, const char *name, uint64_t ino)
{
	(void)ev, (void)mark, (void)parent, (void)name, (void)ino;
	return 10.0;
}

static struct kvc_attr at(uint64_t ino, int64_t ctime_ns, uint32_t mode)
{
	return (struct kvc_attr){.ino = ino, .ctime_ns = ctime_ns, .mode = mode};
}

Test(attr_cache, an_older_answer_is_never_served_after_a_newer_one)
{
	struct kvc_attr_cache *c;
	struct kvc_attr out;
	const struct kvc_meta_events_mark mark = {0, 0};
	cr_assert_eq(kvc_attr_cache_create(&c), 0);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 7, &out), 0, "nothing held");
	struct kvc_attr after = at(7, 200, 040700);
	kvc_attr_cache_put(c, &after, mark);
	cr_assert_gt(kvc_attr_cache_get(c, NULL, 7, &out), 0);
	cr_assert_eq(out.mode, 040700);
	/* Two answers from before the change arrive late. */
	struct kvc_attr before = at(7, 100, 040755), earlier = at(7, 50, 040777);
	kvc_attr_cache_put(c, &before, mark);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 7, &out), 0, "an older answer came: ask");
	kvc_attr_cache_put(c, &earlier, mark);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 7, &out), 0, "an older one still: ask");
	/* The next answer from kvc-meta is as new as the newest: served. */
	struct kvc_attr again = at(7, 200, 040700);
	kvc_attr_cache_put(c, &again, mark);
	cr_assert_gt(kvc_attr_cache_get(c, NULL, 7, &out), 0);
	cr_assert_eq(out.mode, 040700);
	kvc_attr_cache_forget(c, NULL);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 7, &out), 0, "forgotten");
	kvc_attr_cache_destroy(c);
}

Test(attr_cache, an_answer_asked_for_before_a_forget_is_not_served)
{
	struct kvc_attr_cache *c;
	struct kvc_attr out;
	cr_assert_eq(kvc_attr_cache_create(&c), 0);
	/* A GETATTR is asked (mark), then this client unlinks another hard
	 * link of the file (forget: nlink changed), then the old answer
	 * arrives: it tells the old nlink, and is not served. */
	const struct kvc_meta_events_mark asked = {ticks, 0};
	kvc_attr_cache_forget(c, NULL);
	struct kvc_attr old = at(9, 100, 0100644);
	old.nlink = 2;
	kvc_attr_cache_put(c, &old, asked);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 9, &out), 0, "an answer from before the change");
	/* asked for after the change: served */
	const struct kvc_meta_events_mark after = {ticks, 0};
	struct kvc_attr now = at(9, 150, 0100644);
	now.nlink = 1;
	kvc_attr_cache_put(c, &now, after);
	cr_assert_gt(kvc_attr_cache_get(c, NULL, 9, &out), 0);
	cr_assert_eq(out.nlink, 1);
	/* The answer to the change itself (a directory's attributes in our
	 * UNLINK's reply), asked before the forget that change made: served. */
	const struct kvc_meta_events_mark unlink_asked = {ticks, 0};
	uint64_t forgot = kvc_attr_cache_forget(c, NULL);
	struct kvc_attr dir = at(10, 300, 040755);
	kvc_attr_cache_put_own(c, &dir, unlink_asked, forgot);
	cr_assert_gt(kvc_attr_cache_get(c, NULL, 10, &out), 0, "the reply to our own change");
	kvc_attr_cache_forget(c, NULL);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 10, &out), 0, "but not past a later forget");
	/* Another change of ours (an rmdir of this directory elsewhere in the
	 * tree) forgets between our unlink's forget and its put: the reply is
	 * current as of our forget only, so not served. */
	const struct kvc_meta_events_mark asked2 = {ticks, 0};
	uint64_t mine = kvc_attr_cache_forget(c, NULL);
	kvc_attr_cache_forget(c, NULL); /* the other thread's */
	kvc_attr_cache_put_own(c, &dir, asked2, mine);
	cr_assert_eq(kvc_attr_cache_get(c, NULL, 10, &out), 0, "past another thread's forget");
	kvc_attr_cache_destroy(c);
}
