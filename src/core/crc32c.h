/*
 * crc32c: CRC-32C (Castagnoli), the checksum of every stored chunk block.
 * Folds with AVX-512 VPCLMULQDQ where the CPU has it (runs of 1 KiB and
 * up), else uses the SSE4.2 crc32 instruction, else a table: all three
 * give identical results. Stateless apart from a table built once.
 */
#ifndef KVC_CRC32C_H
#define KVC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a crc over data: crc32c(0, ...) starts a new one. */
uint32_t kvc_crc32c(uint32_t crc, const void *data, size_t len);

/* crc32c of len zero bytes, without a buffer. */
uint32_t kvc_crc32c_zeros(uint32_t crc, size_t len);

#endif
