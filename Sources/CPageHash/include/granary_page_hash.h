#ifndef GRANARY_PAGE_HASH_H
#define GRANARY_PAGE_HASH_H
// SHA-256 (FIPS 180-4) of sixteen database pages at once, one page per 32-bit lane of a vector:
// `backup --delta` hashes every page of a store, and the pages are independent messages of one
// length. The lane logic is written once (sha256_lanes.h) and compiled as two ways:
//   - wide: AVX-512 intrinsics, on CPUs that have AVX-512F and AVX-512BW;
//   - portable: Clang/GCC vector extensions, on every CPU (built twice on x86-64: for the
//     baseline, SSE2, and for AVX2, chosen at run time).
// Both give the bytes granary's one-message SHA-256 gives (Sources/CSHA256; PageHashTests runs
// every way this CPU has, and compares them with sha256sum); the measurements are in
// docs/performance.md.
#include <stddef.h>
#include <stdint.h>

// 1 when this CPU and kernel run AVX-512F and AVX-512BW code (granary_sha256_x16 may be
// called), else 0.
int granary_sha256_x16_supported(void);

// The SHA-256 of each of the sixteen pages of `length` bytes that follow one another from
// `pages` (16 x length bytes), into `digests` (16 x 32 bytes, page order). `length` must be a
// multiple of 64 and at most 65536 (a page size); call only when granary_sha256_x16_supported().
void granary_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests);

// How many builds of the portable way this CPU runs: 2 on x86-64 with AVX2 (builds 1 and 2),
// else 1 (build 1, the baseline).
int granary_sha256_x16_portable_builds(void);

// granary_sha256_x16's result by the portable way, on any CPU. `build`: 0 for the fastest this
// CPU runs, 1 for the baseline build, 2 for the AVX2 build (at most
// granary_sha256_x16_portable_builds(); tests run each).
void granary_sha256_x16_portable(const uint8_t *pages, size_t length, uint8_t *digests, int build);
#endif
