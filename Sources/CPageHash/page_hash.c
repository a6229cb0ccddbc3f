#include "granary_page_hash.h"
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes.
static const uint32_t round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
// FIPS 180-4, 5.3.3: the initial hash value.
static const uint32_t initial_state[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

int granary_sha256_x16_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

// Only these functions are compiled for AVX-512; the rest of granary runs on any x86-64.
#define WIDE __attribute__((target("avx512f,avx512bw")))
#define ROTR(x, n) _mm512_ror_epi32(x, n)
#define ADD(a, b) _mm512_add_epi32(a, b)
// Three-input logic (vpternlogd), by truth table: x ^ y ^ z, x ? y : z (Ch), majority (Maj).
#define XOR3(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0x96)
#define CHOOSE(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0xCA)
#define MAJORITY(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0xE8)

// One 64-byte block of each lane's message: `w` holds its 16 words (big-endian decoded) and
// is used as the message schedule's ring of the last 16 words (FIPS 180-4, 6.2.2).
WIDE static inline void compress(__m512i state[8], __m512i w[16]) {
    __m512i a = state[0], b = state[1], c = state[2], d = state[3];
    __m512i e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        __m512i word;
        if (t < 16) {
            word = w[t];
        } else {
            __m512i w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
            __m512i sigma0 = XOR3(ROTR(w15, 7), ROTR(w15, 18), _mm512_srli_epi32(w15, 3));
            __m512i sigma1 = XOR3(ROTR(w2, 17), ROTR(w2, 19), _mm512_srli_epi32(w2, 10));
            word = ADD(ADD(w[t & 15], sigma0), ADD(w[(t - 7) & 15], sigma1));
            w[t & 15] = word;
        }
        __m512i t1 = ADD(ADD(h, XOR3(ROTR(e, 6), ROTR(e, 11), ROTR(e, 25))),
                         ADD(CHOOSE(e, f, g), ADD(word, _mm512_set1_epi32((int)round_constants[t]))));
        __m512i t2 = ADD(XOR3(ROTR(a, 2), ROTR(a, 13), ROTR(a, 22)), MAJORITY(a, b, c));
        h = g;
        g = f;
        f = e;
        e = ADD(d, t1);
        d = c;
        c = b;
        b = a;
        a = ADD(t1, t2);
    }
    state[0] = ADD(state[0], a);
    state[1] = ADD(state[1], b);
    state[2] = ADD(state[2], c);
    state[3] = ADD(state[3], d);
    state[4] = ADD(state[4], e);
    state[5] = ADD(state[5], f);
    state[6] = ADD(state[6], g);
    state[7] = ADD(state[7], h);
}

WIDE void granary_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests) {
    __m512i state[8], w[16];
    for (int i = 0; i < 8; i++) state[i] = _mm512_set1_epi32((int)initial_state[i]);
    // Lane i reads page i: word t of a block is gathered from each page's block at once.
    const __m512i lanes = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)length));
    // Reverses the bytes of each 32-bit word (the message and the digest are big-endian).
    const __m512i swap = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203);
    for (size_t block = 0; block < length; block += 64) {
        for (int t = 0; t < 16; t++) {
            __m512i words = _mm512_i32gather_epi32(lanes, (const void *)(pages + block + 4 * (size_t)t), 1);
            w[t] = _mm512_shuffle_epi8(words, swap);
        }
        compress(state, w);
    }
    // Every page has the same length, so the padding block is the same in every lane: 0x80,
    // zeros, then the length in bits as a 64-bit big-endian number (FIPS 180-4, 5.1.1).
    uint64_t bits = (uint64_t)length * 8;
    for (int t = 0; t < 16; t++) w[t] = _mm512_setzero_si512();
    w[0] = _mm512_set1_epi32((int)0x80000000u);
    w[14] = _mm512_set1_epi32((int)(uint32_t)(bits >> 32));
    w[15] = _mm512_set1_epi32((int)(uint32_t)bits);
    compress(state, w);
    uint32_t words[8][16];
    for (int i = 0; i < 8; i++) _mm512_storeu_si512((void *)words[i], _mm512_shuffle_epi8(state[i], swap));
    for (int lane = 0; lane < 16; lane++) {
        for (int i = 0; i < 8; i++) memcpy(digests + lane * 32 + i * 4, &words[i][lane], 4);
    }
}
#else
// Not x86-64: no sixteen-lane way; PageHash hashes every page with swift-crypto.
int granary_sha256_x16_supported(void) { return 0; }
void granary_sha256_x16(const uint8_t *pages, size_t length, uint8_t *digests) {
    (void)pages;
    (void)length;
    (void)digests;
    abort();
}
#endif
