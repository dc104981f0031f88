/*
 * service_internal: what the storage service's handler files share
 * (service.c: the dispatch table, writes, reads and the rest;
 * service_range.c: remove, truncate and punch down the chain;
 * service_place.c: same-host placement). Not part of service.h's API.
 *
 * A connection's state lives in conn->service_state and is used by one
 * thread at a time (the connection's); handlers answer through
 * kvc_service_reply and return what it returns (negative: the connection
 * is dropped).
 */
#ifndef KVC_STORAGE_SERVICE_INTERNAL_H
#define KVC_STORAGE_SERVICE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/chains.h"
#include "core/wire.h"
#include "storage/chunk_store.h"
#include "storage/service.h"

struct conn_state {
	struct kvc_chunk_ring ring;
	uint8_t *buffer; /* write data */
	size_t buffer_size;
	struct kvc_chunk_read reads[KVC_WIRE_MAX_PIECES];
	struct kvc_chunk_store *read_stores[KVC_WIRE_MAX_PIECES];
	int read_status[KVC_WIRE_MAX_PIECES]; /* a piece's chain check */
	bool tails[KVC_WIRE_MAX_PIECES];      /* the piece's target is its chain's tail */
	struct kvc_msg_piece_result results[KVC_WIRE_MAX_PIECES];
	struct iovec data[KVC_WIRE_MAX_PIECES];
	/* A read's pieces merged into runs (kvc_service_merge_pieces): the
	 * arrays above are the runs'; these, the pieces'. */
	struct kvc_msg_piece merged[KVC_WIRE_MAX_PIECES];
	uint32_t run_first[KVC_WIRE_MAX_PIECES + 1];
	struct kvc_msg_piece_result piece_results[KVC_WIRE_MAX_PIECES];
	struct iovec piece_data[KVC_WIRE_MAX_PIECES];
	/* A placed read's runs of several spans: each span's place in the
	 * region, in order (kvc_chunk_read's scatter points into it). */
	struct iovec scatter[KVC_WIRE_MAX_PIECES];
	/* A placed read's pieces cut at their spans (service_place.c): one
	 * piece and one region offset a span, read as the pieces above. */
	struct kvc_msg_piece spanned[KVC_WIRE_MAX_PIECES];
	uint64_t span_offsets[KVC_WIRE_MAX_PIECES];
	/* Placement (Unix socket only): the peer process, once checked. */
	int peer; /* 0: not checked yet; 1: a local daemon; -errno: refused */
	pid_t peer_pid;
};

/* A request: its fixed struct (checked to be in the body, and the whole
 * body when the type's size is exact) and the offset of what follows.
 * Variable parts are taken with take() and must end at the body's end. */
struct request {
	struct kvc_storage_service *svc;
	struct kvc_server_conn *conn;
	struct conn_state *state;
	const struct kvc_wire_header *h;
	const void *msg;
	uint32_t off;
};

/* The store of a target this server serves, or NULL. */
struct kvc_chunk_store *kvc_service_store(struct kvc_storage_service *svc, uint32_t target);
bool kvc_service_chunk_size_valid(uint32_t cs);
int kvc_service_ensure_buffer(struct conn_state *state, size_t need);
/* The next len bytes of the body after the fixed struct, or NULL. */
const void *kvc_service_take(struct request *r, uint32_t len);
/* Whether the whole body was taken. */
bool kvc_service_done(const struct request *r);
int kvc_service_reply(struct request *r, int rc, const void *body, uint32_t len);
/* Answer an error to a frame whose data section is still on the socket. */
int kvc_service_refuse(struct kvc_server_conn *conn, const struct kvc_wire_header *h,
                       int status);
/* The chain of a request for target at version (service.c says when it
 * is -ESTALE or -ENXIO). */
const struct kvc_chain *kvc_service_chain(const struct kvc_storage_service *svc, uint32_t chain,
                                          uint32_t version, uint32_t target,
                                          struct kvc_chain *copy, int *pos, int *rc);
int kvc_service_write_check(struct request *r, const struct kvc_msg_chunk_write *m,
                            uint64_t len, struct kvc_chain *copy,
                            const struct kvc_chain **chain, int *pos);
int kvc_service_chain_write(struct request *r, const struct kvc_msg_chunk_write *m,
                            struct kvc_chunk_store *store, const struct kvc_chain *chain,
                            int pos, uint32_t len, struct kvc_msg_chunk_write_reply *out);
int kvc_service_check_pieces(struct kvc_storage_service *svc, struct conn_state *state,
                             const struct kvc_msg_piece *pieces, uint32_t count);
uint64_t kvc_service_read_pieces(struct request *r, const struct kvc_msg_piece *pieces,
                                 uint32_t count);

/* Pieces of at most max_piece bytes that continue each other in one
 * chunk (same target, inode, chunk, chain and version, each starting
 * where the one before ended: the small segments of a ring key) make one
 * run, read as one piece: one lookup and one crc check of each block, not
 * one per piece. Fills state->merged (the runs, as pieces) and
 * state->run_first (run r is pieces run_first[r] .. run_first[r + 1] -
 * 1); returns the run count. max_piece 0: a run per piece. */
uint32_t kvc_service_merge_pieces(struct conn_state *state, const struct kvc_msg_piece *pieces,
                                  uint32_t count, uint32_t max_piece);
/* After kvc_service_read_pieces of the runs: whether a run of several
 * pieces failed as a whole (a bad block, no memory), which must not fail
 * its pieces that read fine alone: read them again a run each. */
bool kvc_service_run_failed(const struct conn_state *state, uint32_t runs);
/* A read of pieces in runs: merge (max_piece as for
 * kvc_service_merge_pieces), check, read (prepare, when given, sets up
 * each run's read first: placement), read a run that failed as a whole
 * again a piece at a time, then split the runs' results into the pieces'
 * (state->piece_results, state->piece_data). Returns the run count (the
 * caller releases state->reads), or the check's -errno (nothing read). */
int kvc_service_read_runs(struct request *r, const struct kvc_msg_piece *pieces, uint32_t count,
                          uint32_t max_piece,
                          void (*prepare)(struct conn_state *state, uint32_t runs,
                                          const void *arg),
                          const void *arg);
/* After the runs were read (state->results and state->data are the
 * runs'): each piece's result and bytes, its share of its run's
 * (state->piece_results, state->piece_data). */
void kvc_service_split_runs(struct conn_state *state, const struct kvc_msg_piece *pieces,
                            uint32_t runs);

/* service_range.c */
int kvc_service_range_remove(struct request *r);
int kvc_service_range_truncate(struct request *r);
int kvc_service_range_punch(struct request *r);

/* service_place.c */
/* Cut each piece of a PLACE_READ at its spans (wire_storage.h): one
 * piece of state->spanned and one offset of state->span_offsets a span,
 * in order. Returns 0, or -EINVAL for an empty piece or spans that do
 * not add up to their pieces' lengths (short, crossing into the next
 * piece, left over, empty, reserved word set). The caller checks the
 * spans lie in the region. */
int kvc_service_cut_spans(struct conn_state *state, const struct kvc_msg_piece *pieces,
                          uint32_t count, const struct kvc_msg_place_span *spans,
                          uint32_t span_count);
/* After the spans were read (state->piece_results are the spans'): their
 * results folded into their pieces' (state->piece_results[0, count)),
 * in place. A span's failure is its piece's; a piece's present bytes end
 * where its first short span's do (a chunk's bytes are a prefix: after a
 * short span, a hole). */
void kvc_service_fold_spans(struct conn_state *state, const struct kvc_msg_piece *pieces,
                            uint32_t count);
int kvc_service_place_hello(struct request *r);
int kvc_service_place_register(struct request *r);
int kvc_service_place_unregister(struct request *r);
int kvc_service_place_read(struct request *r);
int kvc_service_place_write(struct request *r);
int kvc_service_place_local(struct request *r);

#endif
