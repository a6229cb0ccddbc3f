#include "granary_page_hash.h"
#include "granary_sha256.h"
#include <assert.h>
#include <string.h>

// FIPS 180-4's round constants and initial hash value, from the one-message SHA-256.
#define round_constants granary_sha256_round_constants
#define initial_state granary_sha256_initial_state

// What every way of the header promises its caller: whole 64-byte blocks, at most a page size
// of SQLite's, and somewhere to read from and write to. Checked once per call (debug builds).
static inline void check_arguments(const uint8_t *pages, size_t length, const uint8_t *digests) {
    (void)pages;
    (void)length;
    (void)digests;
    assert(pages != NULL && digests != NULL);
    assert(length > 0 && length % 64 == 0 && length <= 65536);
    // The sixteen pages and the sixteen digests must not overlap (the digests are written last,
    // but a caller hashing in place would hash its own output on the next call).
    assert(digests + 16 * 32 <= pages || pages + 16 * length <= digests);
}

// ---------------------------------------------------------------------------------------------
// The portable way: Clang/GCC vector extensions. A vector of sixteen uint32_t is 64 bytes; the
// compiler lowers each operation to what the target has (two AVX2 or four SSE2 instructions on
// x86-64, four NEON ones on arm64, a loop elsewhere).
typedef uint32_t granary_v16u __attribute__((vector_size(64)));

#define load_be32 granary_sha256_load_be32
#define store_be32 granary_sha256_store_be32

#define LANES(name) portable_##name
#define LANES_TARGET
#include "sha256_vector_ext.h"

#if defined(__x86_64__)
#include <immintrin.h>

// The same portable source compiled for AVX2 (two 256-bit instructions per operation instead
// of four 128-bit SSE2 ones), chosen at run time on CPUs that have it.
#define LANES(name) avx2_##name
#define LANES_TARGET __attribute__((target("avx2")))
#include "sha256_vector_ext.h"

// The wide way: AVX-512 intrinsics. Only these functions are compiled for AVX-512; the rest of
// granary runs on any x86-64.
#define WIDE __attribute__((target("avx512f,avx512bw")))

// Word `offset / 4` of each of the sixteen pages, gathered at once (lane i reads page i) and
// byte-swapped (the message is big-endian).
WIDE static inline __m512i wide_load(const uint8_t *pages, size_t length, size_t offset) {
    const __m512i lanes = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)length));
    const __m512i swap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
    return _mm512_shuffle_epi8(_mm512_i32gather_epi32(lanes, (const void *)(pages + offset), 1), swap);
}
WIDE static inline void wide_store(const __m512i state[8], uint8_t *digests) {
    const __m512i swap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
    uint32_t words[8][16];
    for (int i = 0; i < 8; i++) _mm512_storeu_si512((void *)words[i], _mm512_shuffle_epi8(state[i], swap));
    for (int lane = 0; lane < 16; lane++) {
        for (int i = 0; i < 8; i++) memcpy(digests + lane * 32 + i * 4, &words[i][lane], 4);
    }
}

#define VEC __m512i
#define V_SET1(c) _mm512_set1_epi32((int)(uint32_t)(c))
#define V_ADD(a, b) _mm512_add_epi32(a, b)
#define V_ROTR(x, n) _mm512_ror_epi32(x, n)
#define V_SHR(x, n) _mm512_srli_epi32(x, n)
// Three-input logic (vpternlogd), by truth table: x ^ y ^ z, x ? y : z (Ch), majority (Maj).
#define V_XOR3(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0x96)
#define V_CHOOSE(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0xCA)
#define V_MAJORITY(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0xE8)
#define V_LOAD_BLOCK(w, pages, length, block)                                                         \
    for (int t = 0; t < 16; t++) (w)[t] = wide_load(pages, length, (block) + 4 * (size_t)t)
#define V_STORE(state, digests) wide_store(state, digests)
#define LANES(name) wide_##name
#define LANES_TARGET WIDE
#include "sha256_lanes.h"

int granary_sha256_x16_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

static int has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

void granary_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests) {
    check_arguments(pages, length, digests);
    assert(granary_sha256_x16_supported());
    wide_sha256_x16(pages, length, digests);
}
#else
// Not x86-64: the portable way only.
int granary_sha256_x16_supported(void) { return 0; }
static int has_avx2(void) { return 0; }
void granary_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests) {
    (void)pages;
    (void)length;
    (void)digests;
    // granary_sha256_x16_supported() said 0: calling this is the caller's bug.
    assert(0 && "granary_sha256_x16 without AVX-512");
    __builtin_trap();
}
static void avx2_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests) {
    portable_sha256_x16(pages, length, digests);
}
#endif

int granary_sha256_x16_portable_builds(void) { return has_avx2() ? 2 : 1; }

void granary_sha256_x16_portable(const uint8_t *pages, size_t length, uint8_t *digests, int build) {
    check_arguments(pages, length, digests);
    assert(build >= 0 && build <= granary_sha256_x16_portable_builds());
    if (build == 0) build = granary_sha256_x16_portable_builds();
    if (build == 2) {
        avx2_sha256_x16(pages, length, digests);
    } else {
        portable_sha256_x16(pages, length, digests);
    }
}
