/* Concurrency stress test of the chunk store: writers, readers, punches and
 * truncates on the same few chunks from several threads at once, for a
 * bounded number of operations each, then content checks.
 *
 * Content: every write stores 8-byte words that name themselves (writer,
 * sequence, chunk, word index), so a reader can tell a right word from
 * garbage or a misplaced one without knowing the order of operations. Each
 * writer owns one half of every chunk and remembers the last word it wrote
 * at each position; after every thread has finished, each word must be
 * either that last word or zero (a punch or truncate came after it), and
 * every read must verify its crcs. A lock-order deadlock between the
 * threads shows up as the test's timeout.
 *
 * It runs three times: every chunk inline (the default limit holds a whole
 * 64 KiB chunk), every chunk in a file (limit 0), and a limit of half a
 * chunk, where writes move chunks from their record to a file and punches
 * and truncates bring them back inline. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/chunk_store.h"
#include "test_dir.h"

#define CS (64u << 10)           /* the smallest chunk: four crc blocks */
#define WORDS (CS / 8)
#define INODES 2
#define CHUNKS 4                 /* per inode */
#define WRITERS 2                /* writer w owns half w of every chunk */
#define READERS 2
#define OPS 4000                 /* per thread */

static char dir[KVC_TEST_DIR_MAX];
static struct kvc_chunk_store *store;

/* What went wrong first, reported by the main thread after the join. */
static atomic_int failures;
static char first_failure[256];
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((format(printf, 1, 2)))
static void failure(const char *fmt, ...)
{
	if (atomic_fetch_add(&failures, 1) != 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&failure_lock);
	vsnprintf(first_failure, sizeof(first_failure), fmt, ap);
	pthread_mutex_unlock(&failure_lock);
	va_end(ap);
}

static uint32_t next_random(uint32_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 17;
	*state ^= *state << 5;
	return *state;
}

/* A word: stamp (writer + 1, sequence) in the high half, the chunk's id
 * and the word's index in the low half. Zero is never a written word. */
static uint64_t word_of(uint32_t writer, uint32_t seq, uint32_t inode, uint32_t chunk,
                        uint32_t index)
{
	uint32_t stamp = seq << 2 | (writer + 1);
	return (uint64_t)stamp << 32 | (inode * CHUNKS + chunk) << 16 | index;
}

static bool word_plausible(uint64_t w, uint32_t inode, uint32_t chunk, uint32_t index)
{
	if (w == 0)
		return true;
	uint32_t low = (uint32_t)w, writer = (uint32_t)(w >> 32 & 3) - 1;
	return low == ((inode * CHUNKS + chunk) << 16 | index) && writer < WRITERS &&
	       index / (WORDS / WRITERS) == writer;
}

struct worker {
	pthread_t thread;
	uint32_t id;
	uint32_t seed;
	struct kvc_chunk_ring ring; /* readers */
	/* writers: the last word written at each position */
	uint64_t last[INODES][CHUNKS][WORDS];
};

static struct worker writers[WRITERS], readers[READERS], puncher, truncater;

static int write_words(struct worker *w, uint32_t seq, uint32_t inode, uint32_t chunk,
                       uint32_t first, uint32_t count)
{
	static _Thread_local uint64_t buf[WORDS];
	uint64_t version;
	uint32_t length;
	for (uint32_t i = 0; i < count; i++)
		buf[i] = word_of(w->id, seq, inode, chunk, first + i);
	int rc = kvc_chunk_store_write(store, inode + 1, chunk, CS, first * 8, buf,
	                               count * 8, &version, &length);
	if (rc == 0)
		memcpy(&w->last[inode][chunk][first], buf, count * 8);
	return rc;
}

static void *writer_main(void *arg)
{
	struct worker *w = arg;
	uint32_t half = WORDS / WRITERS;
	for (uint32_t seq = 1; seq <= OPS; seq++) {
		uint32_t inode = next_random(&w->seed) % INODES;
		uint32_t chunk = next_random(&w->seed) % CHUNKS;
		uint32_t first = next_random(&w->seed) % half;
		uint32_t count = 1 + next_random(&w->seed) % (half - first);
		int rc = write_words(w, seq, inode, chunk, w->id * half + first, count);
		if (rc < 0)
			failure("writer %u: write failed: %s", w->id, strerror(-rc));
	}
	return NULL;
}

/* Check a read piece's words; the piece starts at word `first`. */
static void check_piece(const struct kvc_chunk_read *r, uint32_t inode, uint32_t first)
{
	if (r->status < 0) {
		failure("read of inode %u chunk %u: %s", inode, r->chunk, strerror(-r->status));
		return;
	}
	for (uint32_t i = 0; i < r->present / 8; i++) {
		uint64_t w;
		memcpy(&w, r->data + i * 8, 8);
		if (!word_plausible(w, inode, r->chunk, first + i)) {
			failure("inode %u chunk %u word %u: %#llx is not a word written there", inode,
			        r->chunk, first + i, (unsigned long long)w);
			return;
		}
	}
}

static void *reader_main(void *arg)
{
	struct worker *w = arg;
	for (uint32_t op = 0; op < OPS; op++) {
		/* A batch of pieces over several chunks: several chunk locks at once. */
		struct kvc_chunk_read reads[3];
		struct kvc_chunk_store *stores[3] = {store, store, store};
		uint32_t inode = next_random(&w->seed) % INODES, firsts[3];
		for (int k = 0; k < 3; k++) {
			uint32_t first = next_random(&w->seed) % WORDS;
			uint32_t count = 1 + next_random(&w->seed) % (WORDS - first);
			firsts[k] = first;
			reads[k] = (struct kvc_chunk_read){.inode = inode + 1,
			                                   .chunk = next_random(&w->seed) % CHUNKS,
			                                   .offset = first * 8, .length = count * 8};
		}
		if (kvc_chunk_store_read_batch(stores, &w->ring, reads, 3) < 0)
			failure("reader %u: the ring failed", w->id);
		for (int k = 0; k < 3; k++)
			check_piece(&reads[k], inode, firsts[k]);
		kvc_chunk_store_read_release(reads, 3);
	}
	return NULL;
}

static void *puncher_main(void *arg)
{
	struct worker *w = arg;
	for (uint32_t op = 0; op < OPS; op++) {
		uint32_t first = next_random(&w->seed) % CHUNKS;
		uint32_t count = 1 + next_random(&w->seed) % (CHUNKS - first);
		int64_t rc = kvc_chunk_store_punch(store, next_random(&w->seed) % INODES + 1, first,
		                                   count);
		if (rc < 0)
			failure("punch failed: %s", strerror((int)-rc));
	}
	return NULL;
}

static void *truncater_main(void *arg)
{
	struct worker *w = arg;
	for (uint32_t op = 0; op < OPS; op++) {
		/* word-aligned sizes, so a word is either kept or dropped whole */
		uint64_t size = (uint64_t)(next_random(&w->seed) % (CHUNKS * WORDS + 1)) * 8;
		int64_t rc = kvc_chunk_store_truncate(store,
		                                      next_random(&w->seed) % INODES + 1, size, CS);
		if (rc < 0)
			failure("truncate failed: %s", strerror((int)-rc));
	}
	return NULL;
}

static void setup(void)
{
	kvc_test_dir_make(dir, "chunk-stress");
	cr_assert_eq(kvc_chunk_store_open(dir, &store), 0);
}

static void teardown(void)
{
	kvc_chunk_store_close(store);
	kvc_test_dir_remove(dir);
}

/* Read a whole chunk; 0 or -errno, out zero-filled past the data. */
static int read_chunk(struct kvc_chunk_ring *ring, uint32_t inode, uint32_t chunk, uint64_t *out)
{
	struct kvc_chunk_read r = {.inode = inode + 1, .chunk = chunk, .offset = 0, .length = CS};
	kvc_chunk_store_read_batch(&store, ring, &r, 1);
	memset(out, 0, CS);
	if (r.status == 0 && r.present)
		memcpy(out, r.data, r.present);
	kvc_chunk_store_read_release(&r, 1);
	return r.status;
}

static void start(struct worker *w, uint32_t id, void *(*fn)(void *))
{
	w->id = id;
	w->seed = 0x9e3779b9u * (id + 1) + (uint32_t)(uintptr_t)fn;
	cr_assert_eq(kvc_chunk_ring_init(&w->ring, 64), 0);
	/* half the readers read through the io_uring only, the others take
	 * data the page cache holds at once (chunk_read.c's read_cached) */
	w->ring.ring_only = fn == reader_main && (id & 1);
	cr_assert_eq(pthread_create(&w->thread, NULL, fn, w), 0);
}

static void stress(uint32_t inline_max)
{
	static uint64_t back[WORDS];
	cr_assert_eq(kvc_chunk_store_set_inline(store, inline_max), 0);
	for (uint32_t i = 0; i < WRITERS; i++)
		start(&writers[i], i, writer_main);
	for (uint32_t i = 0; i < READERS; i++)
		start(&readers[i], i, reader_main);
	start(&puncher, 0, puncher_main);
	start(&truncater, 0, truncater_main);
	for (uint32_t i = 0; i < WRITERS; i++)
		pthread_join(writers[i].thread, NULL);
	for (uint32_t i = 0; i < READERS; i++)
		pthread_join(readers[i].thread, NULL);
	pthread_join(puncher.thread, NULL);
	pthread_join(truncater.thread, NULL);
	cr_assert_eq(atomic_load(&failures), 0, "%d failures, the first: %s",
	             atomic_load(&failures), first_failure);

	/* Quiet now: every word is its writer's last one, or zero where a
	 * punch or truncate dropped it. */
	struct kvc_chunk_ring *ring = &puncher.ring;
	uint64_t kept = 0;
	for (uint32_t inode = 0; inode < INODES; inode++) {
		for (uint32_t chunk = 0; chunk < CHUNKS; chunk++) {
			cr_assert_eq(read_chunk(ring, inode, chunk, back), 0, "crcs verify");
			for (uint32_t i = 0; i < WORDS; i++) {
				uint64_t last = writers[i / (WORDS / WRITERS)].last[inode][chunk][i];
				cr_assert(back[i] == 0 || back[i] == last,
				          "inode %u chunk %u word %u: %#llx, last written %#llx", inode,
				          chunk, i, (unsigned long long)back[i], (unsigned long long)last);
				kept += back[i] != 0;
			}
		}
	}
	/* And the store still works: whole halves written again read back
	 * exactly. */
	for (uint32_t wi = 0; wi < WRITERS; wi++)
		for (uint32_t inode = 0; inode < INODES; inode++)
			for (uint32_t chunk = 0; chunk < CHUNKS; chunk++)
				cr_assert_eq(write_words(&writers[wi], OPS + 1, inode, chunk,
				                         wi * (WORDS / WRITERS), WORDS / WRITERS), 0);
	for (uint32_t inode = 0; inode < INODES; inode++) {
		for (uint32_t chunk = 0; chunk < CHUNKS; chunk++) {
			cr_assert_eq(read_chunk(ring, inode, chunk, back), 0);
			for (uint32_t i = 0; i < WORDS; i++)
				cr_assert_eq(back[i], writers[i / (WORDS / WRITERS)].last[inode][chunk][i]);
		}
	}
	cr_log_info("%llu words survived the stress", (unsigned long long)kept);
	for (uint32_t i = 0; i < WRITERS; i++)
		kvc_chunk_ring_exit(&writers[i].ring);
	for (uint32_t i = 0; i < READERS; i++)
		kvc_chunk_ring_exit(&readers[i].ring);
	kvc_chunk_ring_exit(&puncher.ring);
	kvc_chunk_ring_exit(&truncater.ring);
}

Test(chunk_store_stress, writers_readers_punches_truncates, .init = setup, .fini = teardown,
     .timeout = 60)
{
	stress(KVC_CHUNK_INLINE_DEFAULT);
}

Test(chunk_store_stress, with_every_chunk_in_a_file, .init = setup, .fini = teardown,
     .timeout = 60)
{
	stress(0);
}

Test(chunk_store_stress, with_chunks_moving_to_files, .init = setup, .fini = teardown,
     .timeout = 60)
{
	stress(CS / 2);
}
