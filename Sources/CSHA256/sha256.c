#include "granary_sha256.h"
#include <stdatomic.h>
#include <string.h>

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes.
const uint32_t granary_sha256_round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
#define K granary_sha256_round_constants
// FIPS 180-4, 5.3.3: the initial hash value.
const uint32_t granary_sha256_initial_state[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

// ---------------------------------------------------------------------------------------------
// The portable way (FIPS 180-4, 6.2.2).
static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
#define load_be32 granary_sha256_load_be32
#define store_be32 granary_sha256_store_be32

static void blocks_portable(uint32_t state[8], const uint8_t *data, size_t blocks) {
    uint32_t w[64];
    while (blocks--) {
        for (int t = 0; t < 16; t++) w[t] = load_be32(data + 4 * t);
        for (int t = 16; t < 64; t++) {
            uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        for (int t = 0; t < 64; t++) {
            uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        state[0] += a;
        state[1] += b;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
        data += 64;
    }
}

// ---------------------------------------------------------------------------------------------
// The SHA-NI way. The instructions keep the working variables as two vectors, ABEF and CDGH;
// each sha256rnds2 does two rounds, taking the two message-plus-constant words it needs from the
// low half of its third operand. The message schedule for words t..t+3 is
//   msg2(msg1(W[t-16..t-13], W[t-12..t-9]) + W[t-7..t-4], W[t-4..t-1]),
// where msg1 adds sigma0 of the words after the first operand's and msg2 adds sigma1.
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define SHANI __attribute__((target("sha,sse4.1")))

SHANI static void blocks_shani(uint32_t state[8], const uint8_t *data, size_t blocks) {
    const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&state[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&state[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    while (blocks--) {
        const __m128i abef_before = abef, cdgh_before = cdgh;
        __m128i w[4];
#pragma clang loop unroll(full)
        for (int group = 0; group < 16; group++) {
            __m128i words;
            if (group < 4) {
                words = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * group)), byteswap);
            } else {
                // w[group % 4] holds W[t-16..t-13]; the ring's others W[t-12..t-9], W[t-8..t-5], W[t-4..t-1].
                __m128i older = _mm_sha256msg1_epu32(w[group % 4], w[(group + 1) % 4]);
                older = _mm_add_epi32(older, _mm_alignr_epi8(w[(group + 3) % 4], w[(group + 2) % 4], 4));
                words = _mm_sha256msg2_epu32(older, w[(group + 3) % 4]);
            }
            w[group % 4] = words;
            __m128i sum = _mm_add_epi32(words, _mm_loadu_si128((const __m128i *)&K[4 * group]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, sum);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(sum, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef_before);
        cdgh = _mm_add_epi32(cdgh, cdgh_before);
        data += 64;
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

static int cpu_has_shani(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b & bit_SHA) != 0;
}
#else
static int cpu_has_shani(void) { return 0; }
static void blocks_shani(uint32_t state[8], const uint8_t *data, size_t blocks) {
    blocks_portable(state, data, blocks);
}
#endif

// -1: not looked up yet; 0: portable; 1: SHA-NI. Relaxed atomics: every thread that looks it up
// finds the same answer.
static _Atomic int cpu_way = -1;
static _Atomic int forced_portable = 0;

int granary_sha256_cpu_has_sha_instructions(void) {
    int way = atomic_load_explicit(&cpu_way, memory_order_relaxed);
    if (way < 0) {
        way = cpu_has_shani();
        atomic_store_explicit(&cpu_way, way, memory_order_relaxed);
    }
    return way;
}

int granary_sha256_accelerated(void) {
    if (atomic_load_explicit(&forced_portable, memory_order_relaxed)) return 0;
    return granary_sha256_cpu_has_sha_instructions();
}

void granary_sha256_force_portable(int on) { atomic_store_explicit(&forced_portable, on != 0, memory_order_relaxed); }

static void blocks(uint32_t state[8], const uint8_t *data, size_t count) {
    if (granary_sha256_accelerated()) {
        blocks_shani(state, data, count);
    } else {
        blocks_portable(state, data, count);
    }
}

void granary_sha256_init(granary_sha256 *context) {
    memcpy(context->state, granary_sha256_initial_state, sizeof granary_sha256_initial_state);
    context->length = 0;
    context->buffered = 0;
}

void granary_sha256_update(granary_sha256 *context, const void *bytes, size_t count) {
    const uint8_t *data = bytes;
    if (count == 0) return;
    context->length += count;
    if (context->buffered > 0) {
        size_t take = 64 - context->buffered;
        if (take > count) take = count;
        memcpy(context->buffer + context->buffered, data, take);
        context->buffered += (uint32_t)take;
        data += take;
        count -= take;
        if (context->buffered < 64) return;
        blocks(context->state, context->buffer, 1);
        context->buffered = 0;
    }
    if (count >= 64) {
        blocks(context->state, data, count / 64);
        data += count / 64 * 64;
        count %= 64;
    }
    if (count > 0) {
        memcpy(context->buffer, data, count);
        context->buffered = (uint32_t)count;
    }
}

void granary_sha256_final(granary_sha256 *context, void *digest) {
    uint8_t *out = digest;
    uint64_t bits = context->length * 8;
    uint8_t tail[128] = {0};
    uint32_t used = context->buffered;
    memcpy(tail, context->buffer, used);
    tail[used] = 0x80;
    // The length goes in the last 8 bytes of the block that has room for it after the 0x80.
    size_t total = used + 1 + 8 <= 64 ? 64 : 128;
    for (int i = 0; i < 8; i++) tail[total - 1 - i] = (uint8_t)(bits >> (8 * i));
    blocks(context->state, tail, total / 64);
    for (int i = 0; i < 8; i++) store_be32(out + 4 * i, context->state[i]);
    memset(context, 0, sizeof *context);
}
