/*
 * crc32c: CRC-32C (Castagnoli), the checksum of every stored chunk block.
 * Folds with AVX-512 VPCLMULQDQ where the CPU has it (runs of 1 KiB and
 * up), else uses the SSE4.2 crc32 instruction, else a table: all three
 * give identical results. Stateless apart from tables built once (and
 * which kind the CPU has, found once).
 */
#ifndef KVC_CRC32C_H
#define KVC_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Continue a crc over data: crc32c(0, ...) starts a new one. */
uint32_t kvc_crc32c(uint32_t crc, const void *data, size_t len);

/* The implementations, slowest first: each is the same function. */
enum kvc_crc32c_kind { KVC_CRC32C_TABLE, KVC_CRC32C_SSE42, KVC_CRC32C_FOLD };

/* Whether this CPU runs kind (the table always); the best it runs, the
 * one kvc_crc32c uses. */
bool kvc_crc32c_has(enum kvc_crc32c_kind kind);
enum kvc_crc32c_kind kvc_crc32c_best(void);
/* kvc_crc32c by one kind (the best there is when the CPU lacks it): for
 * tests and benchmarks of each; everything else calls kvc_crc32c. */
uint32_t kvc_crc32c_with(enum kvc_crc32c_kind kind, uint32_t crc, const void *data, size_t len);
const char *kvc_crc32c_kind_name(enum kvc_crc32c_kind kind);

/* crc32c of len zero bytes, without a buffer. */
uint32_t kvc_crc32c_zeros(uint32_t crc, size_t len);

#endif
