/* Unit tests of kvc-storage's runs of read pieces (storage/
 * service_internal.h kvc_service_merge_pieces, _split_runs, _run_failed):
 * which pieces make a run, and each piece's share of its run's result:
 * a chunk shorter than the run (a hole at its end), a failed run, a
 * zero-length piece, the data section's length (the present bytes of the
 * run are the pieces' present bytes, in order); a PLACE_READ's pieces cut
 * at their spans (kvc_service_cut_spans: bad spans refused) and the
 * spans' results folded back into the pieces' (kvc_service_fold_spans). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "storage/service_internal.h"

static struct conn_state *state;

static void setup(void)
{
	state = calloc(1, sizeof(*state));
	cr_assert_not_null(state);
}

static void teardown(void)
{
	free(state);
}

TestSuite(service_runs, .init = setup, .fini = teardown);

static struct kvc_msg_piece piece(uint64_t inode, uint32_t chunk, uint32_t offset,
                                  uint32_t length)
{
	return (struct kvc_msg_piece){.inode = inode, .target = 1, .chunk = chunk,
	                              .offset = offset, .length = length, .chain = 1,
	                              .chain_version = 3};
}

Test(service_runs, pieces_that_continue_each_other_make_a_run)
{
	struct kvc_msg_piece p[7] = {
		piece(5, 0, 0, 4096),     piece(5, 0, 4096, 4096), piece(5, 0, 8192, 100),
		piece(5, 0, 9000, 10),    /* a gap: a new run */
		piece(5, 1, 9010, 10),    /* another chunk */
		piece(6, 1, 9020, 10),    /* another inode */
		piece(6, 1, 9030, 10)};
	uint32_t runs = kvc_service_merge_pieces(state, p, 7, UINT32_MAX);
	cr_assert_eq(runs, 4);
	uint32_t want_first[] = {0, 3, 4, 5, 7};
	for (uint32_t r = 0; r <= runs; r++)
		cr_assert_eq(state->run_first[r], want_first[r], "run %u", r);
	cr_assert_eq(state->merged[0].offset, 0);
	cr_assert_eq(state->merged[0].length, 8292);
	cr_assert_eq(state->merged[3].length, 20);
	/* another target, chain or version breaks a run too */
	p[1].target = 2;
	cr_assert_eq(kvc_service_merge_pieces(state, p, 3, UINT32_MAX), 3);
	p[1].target = 1;
	p[1].chain_version = 4;
	cr_assert_eq(kvc_service_merge_pieces(state, p, 3, UINT32_MAX), 3);
	p[1].chain_version = 3;
	/* only small pieces merge when asked; 0: a run each */
	cr_assert_eq(kvc_service_merge_pieces(state, p, 3, 4095), 3);
	cr_assert_eq(kvc_service_merge_pieces(state, p, 3, 4096), 1);
	cr_assert_eq(kvc_service_merge_pieces(state, p, 3, 0), 3);
	struct kvc_msg_piece empty[2] = {piece(5, 0, 0, 0), piece(5, 0, 0, 0)};
	cr_assert_eq(kvc_service_merge_pieces(state, empty, 2, 0), 2, "0: never merged");
	cr_assert_eq(kvc_service_merge_pieces(state, empty, 2, UINT32_MAX), 1);
}

Test(service_runs, each_piece_gets_its_share_of_a_short_run)
{
	static uint8_t bytes[12288];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (uint8_t)i;
	struct kvc_msg_piece p[4] = {piece(5, 0, 0, 4096), piece(5, 0, 4096, 4096),
	                             piece(5, 0, 8192, 0), piece(5, 0, 8192, 4096)};
	uint32_t runs = kvc_service_merge_pieces(state, p, 4, UINT32_MAX);
	cr_assert_eq(runs, 1);
	/* the chunk holds 6000 bytes: a hole from there on */
	state->results[0] = (struct kvc_msg_piece_result){0, 6000};
	state->data[0] = (struct iovec){bytes, 6000};
	kvc_service_split_runs(state, p, runs);
	uint32_t want[] = {4096, 1904, 0, 0};
	uint64_t sum = 0;
	for (int j = 0; j < 4; j++) {
		cr_assert_eq(state->piece_results[j].status, 0);
		cr_assert_eq(state->piece_results[j].length, want[j], "piece %d", j);
		cr_assert_eq(state->piece_data[j].iov_len, want[j]);
		sum += state->piece_data[j].iov_len;
	}
	cr_assert_eq(sum, 6000, "the data section is the run's present bytes");
	cr_assert_eq(state->piece_data[1].iov_base, bytes + 4096);
	cr_assert_null(state->piece_data[2].iov_base);
	cr_assert_not(kvc_service_run_failed(state, runs));
}

Test(service_runs, a_failed_run_fails_its_pieces_and_asks_for_a_reread)
{
	struct kvc_msg_piece p[3] = {piece(5, 0, 0, 4096), piece(5, 0, 4096, 4096),
	                             piece(7, 0, 0, 100)};
	uint32_t runs = kvc_service_merge_pieces(state, p, 3, UINT32_MAX);
	cr_assert_eq(runs, 2);
	state->results[0] = (struct kvc_msg_piece_result){-EIO, 0};
	state->data[0] = (struct iovec){NULL, 0};
	state->results[1] = (struct kvc_msg_piece_result){-EIO, 0};
	cr_assert(kvc_service_run_failed(state, runs), "a run of two failed: read again");
	kvc_service_split_runs(state, p, runs);
	for (int j = 0; j < 3; j++) {
		cr_assert_eq(state->piece_results[j].status, -EIO);
		cr_assert_eq(state->piece_results[j].length, 0);
	}
	/* a failed run of one piece is that piece's own answer */
	state->results[0] = (struct kvc_msg_piece_result){0, 8192};
	cr_assert_not(kvc_service_run_failed(state, runs));
	/* other failures (a stale version, ask the tail) are every piece's */
	state->results[0] = (struct kvc_msg_piece_result){-ESTALE, 0};
	cr_assert_not(kvc_service_run_failed(state, runs));
	state->results[0] = (struct kvc_msg_piece_result){-ENOMEM, 0};
	cr_assert(kvc_service_run_failed(state, runs));
	/* a placed piece alone has no bytes in the server's buffer */
	runs = kvc_service_merge_pieces(state, p, 1, UINT32_MAX);
	state->results[0] = (struct kvc_msg_piece_result){0, 4096};
	state->data[0] = (struct iovec){NULL, 4096};
	kvc_service_split_runs(state, p, runs);
	cr_assert_eq(state->piece_results[0].length, 4096);
	cr_assert_null(state->piece_data[0].iov_base);
}

static struct kvc_msg_place_span span(uint64_t offset, uint32_t length)
{
	return (struct kvc_msg_place_span){.offset = offset, .length = length};
}

Test(service_runs, pieces_are_cut_at_their_spans)
{
	struct kvc_msg_piece p[2] = {piece(5, 0, 100, 10000), piece(5, 1, 0, 300)};
	struct kvc_msg_place_span s[4] = {span(9000, 4000), span(0, 96), span(70000, 5904),
	                                  span(50, 300)};
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, s, 4), 0);
	uint32_t offset[] = {100, 4100, 4196, 0}, length[] = {4000, 96, 5904, 300};
	for (int j = 0; j < 4; j++) {
		cr_assert_eq(state->spanned[j].offset, offset[j], "span %d", j);
		cr_assert_eq(state->spanned[j].length, length[j], "span %d", j);
		cr_assert_eq(state->spanned[j].chunk, j < 3 ? 0u : 1u);
		cr_assert_eq(state->span_offsets[j], s[j].offset);
	}
	/* the cut spans continue each other: one run, as a key's segments */
	cr_assert_eq(kvc_service_merge_pieces(state, state->spanned, 4, UINT32_MAX), 2);
}

Test(service_runs, spans_that_do_not_add_up_are_refused)
{
	struct kvc_msg_piece p[2] = {piece(5, 0, 0, 4096), piece(5, 0, 4096, 4096)};
	struct kvc_msg_place_span crossing[3] = {span(0, 4000), span(8192, 200), span(0, 3992)};
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, crossing, 3), -EINVAL, "into the next piece");
	struct kvc_msg_place_span short_[2] = {span(0, 4096), span(8192, 4095)};
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, short_, 2), -EINVAL, "too few bytes");
	struct kvc_msg_place_span over[3] = {span(0, 4096), span(8192, 4096), span(0, 1)};
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, over, 3), -EINVAL, "one left over");
	struct kvc_msg_place_span empty[3] = {span(0, 4096), span(8192, 0), span(8192, 4096)};
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, empty, 3), -EINVAL, "an empty span");
	struct kvc_msg_place_span reserved[2] = {span(0, 4096), span(8192, 4096)};
	reserved[1].reserved = 1;
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, reserved, 2), -EINVAL);
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, reserved, 1), -EINVAL, "too few spans");
	reserved[1].reserved = 0;
	cr_assert_eq(kvc_service_cut_spans(state, p, 2, reserved, 2), 0);
	/* an empty piece (no span of its own: the fold would misplace the
	 * next piece's results) */
	struct kvc_msg_piece with_empty[2] = {piece(5, 0, 0, 0), piece(5, 0, 0, 200)};
	struct kvc_msg_place_span two[2] = {span(0, 100), span(100, 100)};
	cr_assert_eq(kvc_service_cut_spans(state, with_empty, 2, two, 2), -EINVAL);
}

Test(service_runs, spans_fold_into_their_pieces_results)
{
	struct kvc_msg_piece p[3] = {piece(5, 0, 0, 9000), piece(5, 0, 9000, 100),
	                             piece(5, 1, 0, 50)};
	struct kvc_msg_place_span s[6] = {span(0, 3000), span(3000, 3000), span(6000, 3000),
	                                  span(9000, 100), span(20000, 20), span(30000, 30)};
	cr_assert_eq(kvc_service_cut_spans(state, p, 3, s, 6), 0);
	/* piece 0: its chunk ends inside its second span (a hole after);
	 * piece 1: all there; piece 2: its second span failed */
	struct kvc_msg_piece_result r[6] = {{0, 3000}, {0, 1000}, {0, 0}, {0, 100}, {0, 20},
	                                    {-EFAULT, 0}};
	memcpy(state->piece_results, r, sizeof(r));
	kvc_service_fold_spans(state, p, 3);
	cr_assert_eq(state->piece_results[0].status, 0);
	cr_assert_eq(state->piece_results[0].length, 4000);
	cr_assert_eq(state->piece_results[1].status, 0);
	cr_assert_eq(state->piece_results[1].length, 100);
	cr_assert_eq(state->piece_results[2].status, -EFAULT);
	cr_assert_eq(state->piece_results[2].length, 0);
	/* a failed span fails its piece even after a short one */
	struct kvc_msg_piece_result late[6] = {{0, 10}, {-EIO, 0}, {0, 0}, {0, 100}, {0, 20}, {0, 30}};
	memcpy(state->piece_results, late, sizeof(late));
	kvc_service_fold_spans(state, p, 3);
	cr_assert_eq(state->piece_results[0].status, -EIO);
	cr_assert_eq(state->piece_results[0].length, 0);
	cr_assert_eq(state->piece_results[2].length, 50);
}
