/* Unit tests of the chunk listing (kvc_chunk_store_list: pages, cursors,
 * the empty store, inline and file chunks, crcs that tell equal bytes)
 * and of the whole-chunk set (kvc_chunk_store_set: replace, shrink,
 * grow past the inline limit, drop, zeros). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/chunk_store.h"
#include "test_dir.h"

#define CS (1u << 20)

static char dir[KVC_TEST_DIR_MAX], dir2[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store, *other;
static struct kvc_chunk_ring ring;

static void setup(void)
{
	kvc_test_dir_make(dir, "list");
	kvc_test_dir_make(dir2, "list");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
	cr_assert_eq(kvc_chunk_store_open(dir2, &other), 0);
	cr_assert_eq(kvc_chunk_ring_init(&ring, 64), 0);
}

static void teardown(void)
{
	kvc_chunk_store_close(store);
	kvc_chunk_store_close(other);
	kvc_chunk_ring_exit(&ring);
	kvc_test_dir_remove(dir);
	kvc_test_dir_remove(dir2);
}

TestSuite(chunk_list, .init = setup, .fini = teardown);

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(seed + i * 7 + (i >> 9));
}

static void put(struct kvc_chunk_store *s, uint64_t inode, uint32_t chunk, uint32_t offset,
                uint32_t length, unsigned seed)
{
	static uint8_t data[CS];
	uint64_t version;
	uint32_t chunk_length;
	fill(data, length, seed);
	cr_assert_eq(kvc_chunk_store_write(s, inode, chunk, CS, offset, data, length, &version,
	                                   &chunk_length), 0);
}

/* The whole chunk as a store reads it; returns its present length. */
static uint32_t read_whole(struct kvc_chunk_store *s, uint64_t inode, uint32_t chunk,
                           uint8_t *out)
{
	struct kvc_chunk_read r = {.inode = inode, .chunk = chunk, .offset = 0, .length = CS};
	cr_assert_eq(kvc_chunk_store_read_batch(&s, &ring, &r, 1), 0);
	cr_assert_eq(r.status, 0);
	uint32_t present = r.present;
	if (present)
		memcpy(out, r.data, present);
	kvc_chunk_store_read_release(&r, 1);
	return present;
}

static int list_all(struct kvc_chunk_store *s, struct kvc_chunk_entry *out, uint32_t cap,
                    uint32_t page)
{
	bool more = true, after = false;
	uint32_t total = 0;
	while (more) {
		uint64_t inode = after ? out[total - 1].inode : 0;
		uint32_t chunk = after ? out[total - 1].chunk : 0;
		uint32_t want = cap - total < page ? cap - total : page;
		int n = kvc_chunk_store_list(s, after, inode, chunk, out + total, want, &more);
		cr_assert_geq(n, 0);
		total += (uint32_t)n;
		after = total > 0;
		if (n == 0)
			cr_assert(!more);
	}
	return (int)total;
}

Test(chunk_list, empty_store)
{
	struct kvc_chunk_entry e[4];
	bool more = true;
	cr_assert_eq(kvc_chunk_store_list(store, false, 0, 0, e, 4, &more), 0);
	cr_assert(!more);
	more = true;
	cr_assert_eq(kvc_chunk_store_list(store, true, 5, 5, e, 4, &more), 0);
	cr_assert(!more);
}

Test(chunk_list, pages_and_cursors_in_key_order)
{
	/* inodes written out of order, some chunks high, around the
	 * big-endian key's byte boundaries */
	const uint64_t inodes[] = {300, 7, 256, 1ull << 40};
	const uint32_t chunks[] = {0, 1, 255, 256, 70000};
	for (int i = 0; i < 4; i++)
		for (int c = 0; c < 5; c++)
			put(store, inodes[i], chunks[c], 0, 100 + (uint32_t)c, (unsigned)(i * 5 + c));
	struct kvc_chunk_entry all[32];
	for (uint32_t page = 1; page <= 21; page += 4) {
		memset(all, 0, sizeof(all));
		cr_assert_eq(list_all(store, all, 32, page), 20, "page %u", page);
		for (int k = 1; k < 20; k++)
			cr_assert(all[k - 1].inode < all[k].inode ||
			          (all[k - 1].inode == all[k].inode && all[k - 1].chunk < all[k].chunk));
	}
	cr_assert_eq(all[0].inode, 7);
	cr_assert_eq(all[0].chunk, 0);
	cr_assert_eq(all[4].chunk, 70000);
	cr_assert_eq(all[4].length, 104);
	cr_assert_eq(all[19].inode, 1ull << 40);
	/* a cursor that is not a key starts at the next one */
	bool more;
	struct kvc_chunk_entry e[2];
	cr_assert_eq(kvc_chunk_store_list(store, true, 7, 2, e, 2, &more), 2);
	cr_assert_eq(e[0].inode, 7);
	cr_assert_eq(e[0].chunk, 255);
	cr_assert(more);
	cr_assert_eq(kvc_chunk_store_list(store, true, 8, 0, e, 2, &more), 2);
	cr_assert_eq(e[0].inode, 256);
	cr_assert_eq(e[0].chunk, 0);
	/* after the last: nothing */
	cr_assert_eq(kvc_chunk_store_list(store, true, 1ull << 40, 70000, e, 2, &more), 0);
	cr_assert(!more);
	/* exactly a page left: more is false */
	cr_assert_eq(kvc_chunk_store_list(store, true, 1ull << 40, 255, e, 2, &more), 2);
	cr_assert(!more);
}

Test(chunk_list, crcs_tell_equal_bytes_inline_or_file)
{
	kvc_chunk_store_set_inline(store, 64u << 10);
	kvc_chunk_store_set_inline(other, 0); /* every chunk in a file there */
	put(store, 1, 0, 0, 5000, 1);
	put(other, 1, 0, 0, 5000, 1);
	put(store, 1, 1, 0, 300000, 2); /* past the limit: a file on both */
	put(other, 1, 1, 0, 300000, 2);
	put(store, 1, 2, 100, 50, 3);
	put(other, 1, 2, 100, 50, 4); /* other bytes, same length */
	struct kvc_chunk_entry a[4], b[4];
	cr_assert_eq(list_all(store, a, 4, 4), 3);
	cr_assert_eq(list_all(other, b, 4, 4), 3);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(a[i].length, b[i].length);
		cr_assert_eq(a[i].chunk_crc, b[i].chunk_crc, "chunk %d", i);
	}
	cr_assert_eq(a[2].length, 150);
	cr_assert_eq(a[2].length, b[2].length);
	cr_assert_neq(a[2].chunk_crc, b[2].chunk_crc);
}

Test(chunk_list, set_replaces_a_chunk_whole)
{
	static uint8_t data[CS], back[CS];
	kvc_chunk_store_set_inline(store, 64u << 10);
	put(store, 9, 0, 0, CS, 5); /* a full file chunk */
	fill(data, 1000, 77);
	cr_assert_eq(kvc_chunk_store_set(store, 9, 0, data, 1000), 0);
	cr_assert_eq(read_whole(store, 9, 0, back), 1000); /* shorter: nothing of the old */
	cr_assert_eq(memcmp(back, data, 1000), 0);
	/* an inline chunk set to more than the inline limit goes to a file */
	fill(data, 200000, 78);
	cr_assert_eq(kvc_chunk_store_set(store, 9, 0, data, 200000), 0);
	cr_assert_eq(read_whole(store, 9, 0, back), 200000);
	cr_assert_eq(memcmp(back, data, 200000), 0);
	/* and a missing one is made */
	cr_assert_eq(kvc_chunk_store_set(store, 9, 5, data, 10), 0);
	cr_assert_eq(read_whole(store, 9, 5, back), 10);
	/* the listing matches a store written the ordinary way */
	put(other, 9, 0, 0, 200000, 78);
	struct kvc_chunk_entry a[4], b[4];
	cr_assert_eq(list_all(store, a, 4, 4), 2);
	cr_assert_eq(list_all(other, b, 4, 4), 1);
	cr_assert_eq(a[0].length, b[0].length);
	cr_assert_eq(a[0].chunk_crc, b[0].chunk_crc);
}

Test(chunk_list, set_of_nothing_drops_and_zeros_stay)
{
	static uint8_t zeros[CS], back[CS];
	put(store, 3, 0, 0, 4096, 1);
	put(store, 3, 1, 0, 500000, 2);
	cr_assert_eq(kvc_chunk_store_set(store, 3, 0, NULL, 0), 0);
	cr_assert_eq(kvc_chunk_store_set(store, 3, 1, NULL, 0), 0);
	cr_assert_eq(kvc_chunk_store_set(store, 3, 2, NULL, 0), 0); /* never there: fine */
	struct kvc_chunk_entry e[4];
	bool more;
	cr_assert_eq(kvc_chunk_store_list(store, false, 0, 0, e, 4, &more), 0);
	/* a chunk of zeros keeps its length */
	cr_assert_eq(kvc_chunk_store_set(store, 3, 1, zeros, 70000), 0);
	cr_assert_eq(read_whole(store, 3, 1, back), 70000);
	cr_assert_eq(memcmp(back, zeros, 70000), 0);
	cr_assert_eq(kvc_chunk_store_list(store, false, 0, 0, e, 4, &more), 1);
	cr_assert_eq(e[0].length, 70000);
	cr_assert_eq(kvc_chunk_store_set(store, 3, 1, zeros, (16u << 20) + 1), -EINVAL);
}
