/* Unit tests of creates made ahead (meta/meta_adopt.c): grants never
 * overlap and survive a restart, an adopted file is what was sent, each
 * record of an ADOPT gets its own result (a bad one changes nothing and
 * the others go on), and malformed bodies change nothing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta/meta_adopt.h"
#include "meta_fixture.h"

static const uint8_t client[KVC_WIRE_CLIENT_ID] = "adopt-client-01";

static void setup(void)
{
	meta_fixture_open("adopt");
}

TestSuite(meta_adopt, .init = setup, .fini = meta_fixture_close);

static void record(struct body *b, uint64_t parent, const struct kvc_attr *attr, uint32_t flags,
                   const char *name, uint32_t name_len)
{
	struct kvc_msg_adopt_record rec = {.parent = parent, .attr = *attr, .flags = flags,
	                                   .name_len = name_len};
	add(b, &rec, sizeof(rec));
	add(b, name, name_len);
	b->count++;
}

/* A file as a kvc-fuse would make it with granted number ino. */
static struct kvc_attr file(uint64_t ino, uint64_t size)
{
	return (struct kvc_attr){.ino = ino, .size = size, .atime_ns = 1000, .mtime_ns = 2000,
	                         .ctime_ns = 3000, .mode = S_IFREG | 0640, .uid = 7, .gid = 8,
	                         .nlink = 5, .rdev = 9,
	                         .layout = {.chunk_size = 1 << 20, .stripe = 2, .first_chain = 1,
	                                    .chain_count = 3}};
}

/* What kvc-meta's handler does with a body: parse, then run. */
static int adopt_as(uint32_t count, const uint8_t *bytes, uint32_t len,
                    struct kvc_msg_key_result *out, uint64_t *replaced)
{
	struct kvc_msg_adopt m = {.count = count};
	memcpy(m.client, client, sizeof(m.client));
	struct kvc_meta_adopt_record *recs = calloc(count ? count : 1, sizeof(*recs));
	cr_assert_not_null(recs);
	int rc = kvc_meta_adopt_parse(&m, bytes, len, recs);
	if (rc == 0)
		rc = kvc_meta_adopt_run(store, &m, recs, out, replaced);
	free(recs);
	return rc;
}

static int adopt(const struct body *b, struct kvc_msg_key_result *out, uint64_t *replaced)
{
	return adopt_as(b->count, b->bytes, b->len, out, replaced);
}

static uint64_t grant(uint32_t count)
{
	struct kvc_msg_ino_grant_reply g;
	cr_assert_eq(kvc_meta_adopt_grant(store, client, count, &g), 0);
	cr_assert_eq(g.count, count);
	cr_assert_eq(g.chain_count, defaults.chain_count);
	return g.first;
}

Test(meta_adopt, grants_are_disjoint_and_survive_reopen)
{
	struct kvc_msg_ino_grant_reply g;
	uint64_t a = grant(10), b = grant(KVC_WIRE_MAX_GRANT);
	cr_assert_geq(a, 2);
	cr_assert_eq(b, a + 10, "the next grant starts where the last ended");
	struct kvc_attr made = mkfile(1, "made-here");
	cr_assert_eq(made.ino, b + KVC_WIRE_MAX_GRANT, "kvc-meta takes no granted number");
	cr_assert_eq(kvc_meta_adopt_grant(store, client, 0, &g), -EINVAL);
	cr_assert_eq(kvc_meta_adopt_grant(store, client, KVC_WIRE_MAX_GRANT + 1, &g), -EINVAL);

	kvc_meta_store_close(store);
	store = NULL;
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(grant(1), made.ino + 1, "grants are durable: none is given out twice");
	kvc_meta_store_set_chain_count(store, 5);
	cr_assert_eq(kvc_meta_adopt_grant(store, client, 1, &g), 0);
	cr_assert_eq(g.chain_count, 5, "the chains new files are placed over now");
}

Test(meta_adopt, adopted_file_is_what_was_sent)
{
	uint64_t d = mkdir_at(1, "d");
	struct kvc_attr before, got;
	cr_assert_eq(kvc_meta_store_getattr(store, d, &before), 0);
	uint64_t first = grant(2);
	struct body b = {0};
	struct kvc_attr sent = file(first + 1, 123456789);
	record(&b, d, &sent, 0, N("out.bin"));
	struct kvc_msg_key_result out[1];
	uint64_t replaced[1] = {99};
	cr_assert_eq(adopt(&b, out, replaced), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(replaced[0], 0);

	cr_assert_eq(kvc_meta_store_lookup(store, d, N("out.bin"), &got), 0);
	cr_assert_eq(got.ino, first + 1);
	cr_assert_eq(got.size, 123456789);
	cr_assert_eq(got.mode, S_IFREG | 0640);
	cr_assert_eq(got.uid, 7);
	cr_assert_eq(got.gid, 8);
	cr_assert_eq(got.nlink, 1, "nlink is not the sender's");
	cr_assert_eq(got.rdev, 0, "rdev is not the sender's");
	cr_assert_eq(got.atime_ns, 1000);
	cr_assert_eq(got.mtime_ns, 2000);
	cr_assert_eq(got.ctime_ns, 3000);
	cr_assert_eq(memcmp(&got.layout, &sent.layout, sizeof(got.layout)), 0);
	cr_assert_eq(memcmp(&got, &out[0].attr, sizeof(got)), 0, "the reply has what was entered");
	cr_assert_eq(kvc_meta_store_getattr(store, first + 1, &got), 0);
	cr_assert_eq(got.size, 123456789);

	struct kvc_attr after;
	cr_assert_eq(kvc_meta_store_getattr(store, d, &after), 0);
	cr_assert_gt(after.mtime_ns, before.mtime_ns, "the parent's mtime moves");
	cr_assert_gt(after.ctime_ns, before.ctime_ns);
	cr_assert_eq(after.nlink, before.nlink);
	cr_assert_eq(counts().open_sessions, 0, "no session without KVC_ADOPT_OPEN");
	cr_assert_eq(kvc_meta_store_unlink(store, d, N("out.bin")), 0);
	cr_assert_eq(counts().gc_pending, 1, "an adopted file's chunks are reclaimed as any file's");
}

Test(meta_adopt, open_flag_opens_a_session)
{
	uint64_t first = grant(1);
	struct body b = {0};
	struct kvc_attr sent = file(first, 10);
	record(&b, 1, &sent, KVC_ADOPT_OPEN, N("open"));
	struct kvc_msg_key_result out[1];
	cr_assert_eq(adopt(&b, out, NULL), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(counts().open_sessions, 1);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("open")), 0);
	struct kvc_meta_counts c = counts();
	cr_assert_eq(c.orphans, 1, "removed while the adopter has it open");
	cr_assert_eq(c.gc_pending, 0);
	cr_assert_eq(kvc_meta_store_close_session(store, first, client), 0);
	c = counts();
	cr_assert_eq(c.orphans, 0);
	cr_assert_eq(c.gc_pending, 1, "the session was the adopter's");
}

Test(meta_adopt, a_file_is_replaced_anything_else_exists)
{
	struct kvc_attr old = mkfile(1, "f"), kept = mkfile(1, "kept"), got;
	uint64_t sub = mkdir_at(1, "sub");
	struct kvc_attr held;
	cr_assert_eq(kvc_meta_store_open_session(store, kept.ino, client, &held), 0);
	uint64_t first = grant(3);
	struct body b = {0};
	struct kvc_attr a0 = file(first, 1), a1 = file(first + 1, 2), a2 = file(first + 2, 3);
	record(&b, 1, &a0, 0, N("f"));
	record(&b, 1, &a1, 0, N("sub"));
	record(&b, 1, &a2, 0, N("kept"));
	struct kvc_msg_key_result out[3];
	uint64_t replaced[3];
	cr_assert_eq(adopt(&b, out, replaced), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(replaced[0], old.ino);
	cr_assert_eq(out[1].rc, -EEXIST, "a directory is never replaced");
	cr_assert_eq(replaced[1], 0);
	cr_assert_eq(out[2].rc, 0);
	cr_assert_eq(replaced[2], kept.ino);

	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("f"), &got), 0);
	cr_assert_eq(got.ino, first);
	cr_assert_eq(kvc_meta_store_getattr(store, old.ino, &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("sub"), &got), 0);
	cr_assert_eq(got.ino, sub);
	cr_assert_eq(kvc_meta_store_getattr(store, first + 1, &got), -ENOENT,
	             "a failed record enters nothing");
	struct kvc_meta_counts c = counts();
	cr_assert_eq(c.gc_pending, 2, "the replaced file goes as an unlink takes it, and the "
	                              "refused one's chunks go at once");
	cr_assert(in_gc(old.ino) && in_gc(first + 1));
	uint64_t inos[8];
	struct kvc_layout layouts[8];
	int n = kvc_meta_store_gc_list(store, inos, layouts, 8);
	for (int i = 0; i < n; i++)
		if (inos[i] == first + 1)
			cr_assert_eq(layouts[i].first_chain, a1.layout.first_chain,
			             "removed by the refused file's own layout");
	cr_assert_eq(counts().grants, 0, "every number settled: the grant is gone");
	cr_assert_eq(c.orphans, 1, "the open one is kept until closed");
	cr_assert_eq(kvc_meta_store_getattr(store, kept.ino, &got), 0);
	cr_assert_eq(got.nlink, 0);
}

Test(meta_adopt, each_bad_record_fails_alone)
{
	uint64_t d = mkdir_at(1, "d");
	struct kvc_attr used = mkfile(1, "used"), gone = mkfile(1, "gone");
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("gone")), 0); /* its number is in gc */
	uint64_t first = grant(16);
	char long_name[KVC_WIRE_MAX_NAME + 1];
	memset(long_name, 'x', sizeof(long_name));
	struct kvc_attr ok1 = file(first, 1), ok2 = file(first + 1, 2);
	struct kvc_attr past = file(first + 16, 0), in_use = file(used.ino, 0);
	struct kvc_attr in_gc = file(gone.ino, 0), root = file(1, 0), zero = file(0, 0);
	struct kvc_attr again = file(first, 0), suid = file(first + 2, 0);
	struct kvc_attr dirmode = file(first + 3, 0), sticky = file(first + 4, 0);
	struct kvc_attr chunk = file(first + 5, 0), stripe0 = file(first + 6, 0);
	struct kvc_attr chains = file(first + 7, 0), fchain = file(first + 8, 0);
	struct kvc_attr wide = file(first + 9, 0), plain = file(first + 10, 0);
	suid.mode |= S_ISUID;
	dirmode.mode = S_IFDIR | 0755;
	sticky.mode |= S_ISVTX;
	chunk.layout.chunk_size = 3 << 20; /* not a power of two */
	stripe0.layout.stripe = 0;
	chains.layout.chain_count = KVC_WIRE_MAX_TARGETS + 1; /* more than a table has */
	chains.layout.stripe = 1;
	fchain.layout.first_chain = 3;
	wide.layout.stripe = 4;

	struct body b = {0};
	struct {
		const struct kvc_attr *attr;
		uint32_t flags;
		const char *name;
		uint32_t name_len;
		int rc;
	} cases[] = {
		{&ok1, 0, N("ok1"), 0},
		{&past, 0, N("past"), -ESTALE},     /* not granted */
		{&in_use, 0, N("in-use"), -ESTALE}, /* kvc-meta's own number */
		{&in_gc, 0, N("in-gc"), -ESTALE},
		{&root, 0, N("root"), -EINVAL},
		{&zero, 0, N("zero"), -EINVAL},
		{&again, 0, N("again"), -ESTALE}, /* ok1's number, entered just before */
		{&suid, 0, N("suid"), -EINVAL},
		{&dirmode, 0, N("dirmode"), -EINVAL},
		{&sticky, 0, N("sticky"), -EINVAL},
		{&chunk, 0, N("chunk"), -EINVAL},
		{&stripe0, 0, N("stripe0"), -EINVAL},
		{&chains, 0, N("chains"), -EINVAL},
		{&fchain, 0, N("fchain"), -EINVAL},
		{&wide, 0, N("wide"), -EINVAL},
		{&plain, 2, N("flags"), -EINVAL},
	};
	_Static_assert(sizeof(cases) / sizeof(cases[0]) == MAX_RECORDS, "");
	for (size_t i = 0; i < MAX_RECORDS; i++)
		record(&b, d, cases[i].attr, cases[i].flags, cases[i].name, cases[i].name_len);
	struct kvc_msg_key_result out[MAX_RECORDS];
	cr_assert_eq(adopt(&b, out, NULL), 0);
	for (size_t i = 0; i < MAX_RECORDS; i++)
		cr_assert_eq(out[i].rc, cases[i].rc, "record %zu (%s): %d", i, cases[i].name,
		             out[i].rc);

	/* Names, and the last record of a batch that succeeds after them. */
	struct body n = {0};
	record(&n, d, &plain, 0, N(".."));
	record(&n, d, &plain, 0, N("."));
	record(&n, d, &plain, 0, N("a/b"));
	record(&n, d, &plain, 0, long_name, sizeof(long_name));
	record(&n, d, &plain, 0, "", 0);
	record(&n, 12345, &plain, 0, N("no-parent"));
	record(&n, used.ino, &plain, 0, N("file-parent"));
	record(&n, d, &ok2, 0, N("ok2"));
	cr_assert_eq(adopt(&n, out, NULL), 0);
	int want[] = {-EINVAL, -EINVAL, -EINVAL, -ENAMETOOLONG, -EINVAL, -ENOENT, -ENOTDIR, 0};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_assert_eq(out[i].rc, want[i], "name record %zu: %d", i, out[i].rc);

	struct kvc_attr got;
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("ok1"), &got), 0);
	cr_assert_eq(got.ino, first);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("ok2"), &got), 0);
	cr_assert_eq(got.ino, first + 1);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("past"), &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, d, N("suid"), &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_getattr(store, first + 2, &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_getattr(store, gone.ino, &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("used"), &got), 0);
	cr_assert_eq(got.ino, used.ino, "a number in use is never stolen");
	cr_assert_eq(got.size, 0);
}

Test(meta_adopt, a_number_is_entered_once)
{
	uint64_t first = grant(1);
	struct body b = {0};
	struct kvc_attr a = file(first, 1);
	record(&b, 1, &a, 0, N("once"));
	struct kvc_msg_key_result out[1];
	cr_assert_eq(adopt(&b, out, NULL), 0);
	cr_assert_eq(out[0].rc, 0);
	/* The same ADOPT sent again (its answer was lost): it is in already. */
	struct kvc_meta_counts before = counts();
	cr_assert_eq(adopt(&b, out, NULL), 0);
	cr_assert_eq(out[0].rc, 0, "a resent record is answered as entered");
	cr_assert_eq(out[0].attr.ino, first);
	cr_assert_eq(counts().inodes, before.inodes);
	struct body again = {0};
	record(&again, 1, &a, 0, N("twice"));
	cr_assert_eq(adopt(&again, out, NULL), 0);
	cr_assert_eq(out[0].rc, -ESTALE, "re-entering a number is refused");
	/* Removed but still open: an orphan's number is not free either. */
	struct kvc_attr held;
	cr_assert_eq(kvc_meta_store_open_session(store, first, client, &held), 0);
	cr_assert_eq(kvc_meta_store_unlink(store, 1, N("once")), 0);
	cr_assert_eq(adopt(&again, out, NULL), 0);
	cr_assert_eq(out[0].rc, -ESTALE);
}

/* ---- grants belong to a client ---- */

static int adopt_for(const uint8_t *who, const struct body *b, struct kvc_msg_key_result *out)
{
	struct kvc_msg_adopt m = {.count = b->count};
	struct kvc_meta_adopt_record recs[MAX_RECORDS];
	memcpy(m.client, who, sizeof(m.client));
	int rc = kvc_meta_adopt_parse(&m, b->bytes, b->len, recs);
	return rc < 0 ? rc : kvc_meta_adopt_run(store, &m, recs, out, NULL);
}

/* Enter number ino as (1, name) for client; the record's result. */
static int enter_as(const uint8_t *who, uint64_t ino, const char *name)
{
	struct body b = {0};
	struct kvc_attr a = file(ino, 3);
	struct kvc_msg_key_result out[1];
	record(&b, 1, &a, 0, name, (uint32_t)strlen(name));
	cr_assert_eq(adopt_for(who, &b, out), 0);
	return out[0].rc;
}

static int drop(const uint8_t *who, uint64_t *reclaimed)
{
	return kvc_meta_store_drop_client(store, who, reclaimed);
}

Test(meta_adopt, only_the_client_granted_a_number_enters_it)
{
	static const uint8_t other[KVC_WIRE_CLIENT_ID] = "adopt-client-02";
	uint64_t first = grant(2);
	cr_assert_eq(enter_as(other, first, "theirs"), -ESTALE, "another client's number");
	cr_assert_eq(enter_as(client, first, "mine"), 0);
	cr_assert_eq(enter_as(client, first + 1, "mine-too"), 0);
	/* Every number entered: the grant is gone, so nothing is reclaimed
	 * and the client holds nothing kvc-meta would drop. */
	uint64_t reclaimed = 99;
	cr_assert_eq(drop(client, &reclaimed), 0, "no grant left");
	cr_assert_eq(reclaimed, 0);
	cr_assert_eq(counts().gc_pending, 0);
}

static uint64_t grant_to(const uint8_t *who, uint32_t count)
{
	struct kvc_msg_ino_grant_reply g;
	cr_assert_eq(kvc_meta_adopt_grant(store, who, count, &g), 0);
	return g.first;
}

Test(meta_adopt, clients_grants_side_by_side_stay_apart)
{
	static const uint8_t b[KVC_WIRE_CLIENT_ID] = "adopt-client-0b";
	uint64_t a1 = grant_to(client, 4), b1 = grant_to(b, 4), a2 = grant_to(client, 4);
	cr_assert_eq(b1, a1 + 4);
	cr_assert_eq(a2, b1 + 4);
	/* Each one's numbers next to the other's: the lookup of the grant
	 * holding a number never takes a neighbour's. */
	cr_assert_eq(enter_as(b, a1 + 3, "b-takes-a-last"), -ESTALE);
	cr_assert_eq(enter_as(b, a2, "b-takes-a-next"), -ESTALE);
	cr_assert_eq(enter_as(client, b1, "a-takes-b-first"), -ESTALE);
	cr_assert_eq(enter_as(client, b1 + 3, "a-takes-b-last"), -ESTALE);
	cr_assert_eq(enter_as(b, b1 + 3, "b-own"), 0);
	cr_assert_eq(enter_as(client, a2 + 3, "a-own"), 0);

	/* Returning a's grants reclaims a's numbers only. */
	struct kvc_msg_ino_range none[2] = {{0}, {0}};
	uint64_t reclaimed = 0;
	cr_assert_eq(kvc_meta_store_grants_return(store, client, none, 2, &reclaimed), 0);
	cr_assert_eq(reclaimed, 4 + 3);
	cr_assert(!in_gc(b1) && in_gc(a1) && in_gc(a2) && !in_gc(a2 + 3));
	cr_assert_eq(enter_as(b, b1, "b-still"), 0, "b's grant is untouched");
	cr_assert_eq(drop(b, &reclaimed), 1);
	cr_assert_eq(reclaimed, 2);

	/* A dropped client gets no grant until it rejoins (it could not hear
	 * of one reclaimed with it); none holds more than the cap. */
	struct kvc_msg_ino_grant_reply g;
	cr_assert_eq(kvc_meta_adopt_grant(store, b, 1, &g), -ESTALE);
	struct kvc_meta_dropped d;
	cr_assert_eq(kvc_meta_store_client_dropped(store, b, &d), 1);
	cr_assert_eq(kvc_meta_store_client_rejoin(store, b, d.drops), 0);
	cr_assert_eq(kvc_meta_adopt_grant(store, b, 1, &g), 0, "after its rejoin");
	for (int i = 0; i < KVC_META_MAX_GRANTS; i++)
		cr_assert_eq(kvc_meta_adopt_grant(store, client, 1, &g), 0);
	cr_assert_eq(kvc_meta_adopt_grant(store, client, 1, &g), -EBUSY);
	/* A return naming a run of no grant (reclaimed already) is no error. */
	struct kvc_msg_ino_range stale[2] = {{.first = a1, .count = 4}, {0}};
	cr_assert_eq(kvc_meta_store_grants_return(store, client, stale, 2, &reclaimed), 0);
	cr_assert_eq(reclaimed, KVC_META_MAX_GRANTS);
}

Test(meta_adopt, a_client_with_sessions_and_grants_is_listed_once)
{
	static const uint8_t others[3][KVC_WIRE_CLIENT_ID] = {"adopt-client-00", "adopt-client-03",
	                                                      "adopt-client-04"};
	uint8_t ids[8][KVC_META_CLIENT_ID];
	struct kvc_attr f = mkfile(1, "open-here"), held;
	cr_assert_eq(kvc_meta_store_open_session(store, f.ino, client, &held), 0);
	grant(2);
	grant_to(others[0], 1); /* grants only, before and after client in key order */
	grant_to(others[2], 1);
	cr_assert_eq(kvc_meta_store_open_session(store, f.ino, others[1], &held), 0);
	cr_assert_eq(kvc_meta_store_session_clients(store, ids, 8), 4, "each client once");
	uint64_t reclaimed = 0;
	cr_assert_eq(drop(client, &reclaimed), 2, "its session and its grant");
	cr_assert_eq(reclaimed, 2);
	cr_assert_eq(kvc_meta_store_session_clients(store, ids, 8), 3);
}

Test(meta_adopt, a_return_drops_what_was_never_used_and_reclaims_what_was_lost)
{
	uint64_t first = grant(8), spare = grant(4);
	cr_assert_eq(enter_as(client, first, "a"), 0);
	cr_assert_eq(enter_as(client, first + 1, "b"), 0);
	/* first + 2 was given to a file that was never entered (lost); the
	 * client never used first + 3 .. 7, nor the spare grant. */
	struct kvc_msg_ino_range bad[2] = {{.first = first + 3, .count = 4}, {0}};
	uint64_t reclaimed = 99;
	cr_assert_eq(kvc_meta_store_grants_return(store, client, bad, 2, &reclaimed), -EINVAL,
	             "a run that does not end its grant");
	bad[0] = (struct kvc_msg_ino_range){.first = first + 1, .count = 7};
	cr_assert_eq(kvc_meta_store_grants_return(store, client, bad, 2, &reclaimed), -EINVAL,
	             "a run holding an entered number");
	cr_assert_eq(counts().gc_pending, 0, "a refused return changes nothing");

	struct kvc_msg_ino_range unused[2] = {{.first = first + 3, .count = 5},
	                                      {.first = spare, .count = 4}};
	cr_assert_eq(kvc_meta_store_grants_return(store, client, unused, 2, &reclaimed), 0);
	cr_assert_eq(reclaimed, 1, "the lost file's number only");
	cr_assert(in_gc(first + 2));
	cr_assert(!in_gc(first) && !in_gc(first + 3) && !in_gc(spare));
	uint64_t inos[64];
	struct kvc_layout layouts[64];
	int n = kvc_meta_store_gc_list(store, inos, layouts, 64);
	cr_assert_eq(n, 1);
	cr_assert_eq(layouts[0].chain_count, defaults.chain_count);
	cr_assert_eq(layouts[0].stripe, defaults.chain_count, "removed from every chain");
	cr_assert_eq(enter_as(client, first + 4, "late"), -ESTALE, "returned numbers are gone");
	cr_assert_eq(drop(client, &reclaimed), 0, "nothing held after a return");
}

Test(meta_adopt, a_client_declared_gone_loses_its_grants)
{
	uint8_t ids[4][KVC_META_CLIENT_ID];
	uint64_t first = grant(4);
	cr_assert_eq(enter_as(client, first, "kept"), 0);
	cr_assert_eq(kvc_meta_store_session_clients(store, ids, 4), 1,
	             "a client holding grants only is watched for silence");
	cr_assert_eq(memcmp(ids[0], client, KVC_META_CLIENT_ID), 0);

	/* Grants are durable: a restart keeps them. */
	kvc_meta_store_close(store);
	store = NULL;
	cr_assert_eq(kvc_meta_store_open(dir, &defaults, &store), 0);
	cr_assert_eq(enter_as(client, first + 1, "after-restart"), 0);

	uint64_t reclaimed = 0;
	cr_assert_eq(counts().grants, 1, "the grant is counted (STATFS, kvc-admin status)");
	cr_assert_eq(drop(client, &reclaimed), 1, "one grant dropped");
	cr_assert_eq(counts().grants, 0);
	cr_assert_eq(reclaimed, 2, "the two numbers never entered");
	cr_assert(in_gc(first + 2) && in_gc(first + 3));
	struct kvc_meta_dropped d;
	cr_assert_eq(kvc_meta_store_client_dropped(store, client, &d), 1,
	             "it hears of the drop (RENEW: ESTALE)");
	cr_assert_eq(kvc_meta_store_session_clients(store, ids, 4), 0);
	cr_assert_eq(enter_as(client, first + 2, "too-late"), -ESTALE);
	struct kvc_attr got;
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("kept"), &got), 0, "entered files stay");
}

Test(meta_adopt, malformed_bodies_change_nothing)
{
	uint64_t first = grant(2);
	struct kvc_attr a = file(first, 1), b2 = file(first + 1, 1);
	struct body b = {0};
	record(&b, 1, &a, 0, N("one"));
	record(&b, 1, &b2, 0, N("two"));
	struct kvc_msg_key_result out[KVC_WIRE_MAX_KEYS + 1];
	struct kvc_meta_counts before = counts();
	uint32_t second = (uint32_t)(sizeof(struct kvc_msg_adopt_record) + 3);

	cr_assert_eq(adopt_as(2, b.bytes, b.len - 1, out, NULL), -EINVAL, "last name cut");
	cr_assert_eq(adopt_as(2, b.bytes, second + 10, out, NULL), -EINVAL, "record cut");
	cr_assert_eq(adopt_as(2, b.bytes, second, out, NULL), -EINVAL, "record missing");
	cr_assert_eq(adopt_as(1, b.bytes, second + 1, out, NULL), -EINVAL, "trailing byte");
	cr_assert_eq(adopt_as(3, b.bytes, b.len, out, NULL), -EINVAL, "count past the records");
	cr_assert_eq(adopt_as(0, b.bytes, 0, out, NULL), -EINVAL, "count 0");
	cr_assert_eq(adopt_as(KVC_WIRE_MAX_KEYS + 1, b.bytes, b.len, out, NULL), -EINVAL,
	             "count over KVC_WIRE_MAX_KEYS");

	/* A name_len that runs past the body's end, and one past any name. */
	struct body past = b;
	struct kvc_msg_adopt_record rec;
	memcpy(&rec, past.bytes + second, sizeof(rec));
	rec.name_len = 200;
	memcpy(past.bytes + second, &rec, sizeof(rec));
	cr_assert_eq(adopt_as(2, past.bytes, past.len, out, NULL), -EINVAL, "name past the end");
	struct body huge = {0};
	record(&huge, 1, &a, 0, N("x"));
	memcpy(&rec, huge.bytes, sizeof(rec));
	rec.name_len = UINT32_MAX;
	memcpy(huge.bytes, &rec, sizeof(rec));
	cr_assert_eq(adopt_as(1, huge.bytes, huge.len, out, NULL), -EINVAL, "name_len wraps");

	struct kvc_meta_counts after = counts();
	cr_assert_eq(memcmp(&before, &after, sizeof(before)), 0);
	struct kvc_attr got;
	cr_assert_eq(kvc_meta_store_lookup(store, 1, N("one"), &got), -ENOENT);
	cr_assert_eq(kvc_meta_store_getattr(store, first, &got), -ENOENT);
	/* The well-formed body goes in. */
	cr_assert_eq(adopt(&b, out, NULL), 0);
	cr_assert_eq(out[0].rc, 0);
	cr_assert_eq(out[1].rc, 0);
}
