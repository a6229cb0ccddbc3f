#ifndef GRANARY_PAGE_HASH_H
#define GRANARY_PAGE_HASH_H
// SHA-256 (FIPS 180-4) of sixteen database pages at once, one page per 32-bit lane of AVX-512
// registers: `backup --delta` hashes every page of a store, and the pages are independent
// messages of one length. One SHA-NI stream does about 1.2 GB/s on the machines granary is
// measured on; sixteen lanes do about 2.3 GB/s (docs/performance.md).
#include <stddef.h>
#include <stdint.h>

// 1 when this CPU and kernel run AVX-512F and AVX-512BW code (granary_sha256_x16 may be
// called), else 0.
int granary_sha256_x16_supported(void);

// The SHA-256 of each of the sixteen pages of `length` bytes that follow one another from
// `pages` (16 x length bytes), into `digests` (16 x 32 bytes, page order). `length` must be a
// multiple of 64 and at most 65536 (a page size); call only when granary_sha256_x16_supported().
void granary_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests);
#endif
