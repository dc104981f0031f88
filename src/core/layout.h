/*
 * layout: where a file's bytes live. A file is cut into chunks of
 * chunk_size bytes (a power of two); chunk i covers
 * [i * chunk_size, (i + 1) * chunk_size) and lives on chain
 * (first_chain + i % stripe) % chain_count, so a file spreads round-robin
 * over `stripe` consecutive chains of the cluster's chain table
 * (core/chains.h) starting at its own first_chain. chain_count is the size
 * of that table when the file was placed (the table only grows), so a
 * layout never moves chunks; which targets hold a chain is the chain
 * table's business.
 *
 * The splitter cuts a byte range of a file into per-chunk pieces; it is pure
 * arithmetic with no allocation.
 */
#ifndef KVC_LAYOUT_H
#define KVC_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

#define KVC_LAYOUT_MIN_CHUNK (64u << 10)
#define KVC_LAYOUT_MAX_CHUNK (16u << 20)
#define KVC_LAYOUT_DEFAULT_CHUNK (1u << 20)
/* 256 TiB: with the smallest chunk this keeps chunk indexes within 32 bits. */
#define KVC_LAYOUT_MAX_FILE_SIZE (1ull << 48)

/* One piece of a byte range: bytes [chunk_offset, chunk_offset + length)
 * of chunk `chunk`, on `chain`, at byte `buffer_offset` of the caller's
 * buffer. */
struct kvc_layout_piece {
	uint32_t chunk;
	uint32_t chain;
	uint32_t chunk_offset;
	uint32_t length;
	uint64_t buffer_offset;
};

/* Check a layout: chunk_size a power of two in [MIN, MAX], 1 <= stripe <=
 * chain_count <= KVC_WIRE_MAX_TARGETS, first_chain < chain_count.
 * Returns 0 or -EINVAL. */
int kvc_layout_check(const struct kvc_layout *layout);

/* The chain that holds chunk index `chunk`. */
uint32_t kvc_layout_chain(const struct kvc_layout *layout, uint64_t chunk);

/* Cut [offset, offset + length) into at most max_pieces pieces.
 * Returns the piece count, 0 for length 0, -EFBIG past the maximum file
 * size, -E2BIG when more than max_pieces are needed. */
int kvc_layout_split(const struct kvc_layout *layout, uint64_t offset,
                     uint64_t length, struct kvc_layout_piece *pieces,
                     int max_pieces);

/* Distinct chains of a layout, in stripe order; returns how many. */
int kvc_layout_chains(const struct kvc_layout *layout, uint32_t *chains,
                       int max_chains);

#endif
