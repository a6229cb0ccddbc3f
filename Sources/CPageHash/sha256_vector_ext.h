// The portable lanes' operations, in Clang/GCC vector extensions (see page_hash.c), for
// sha256_lanes.h: included once per build of them, with LANES(name) and LANES_TARGET defined by
// the includer (sha256_lanes.h undefines everything at its end).

// Word t of block `block` of each of the sixteen pages into w[t], lane by lane: transposed
// through memory (sixteen scalar stores, then one vector load per word), which compilers turn
// into far better code than inserting each word into a vector.
LANES_TARGET static inline void LANES(load_block)(
    granary_v16u w[16], const uint8_t *pages, size_t length, size_t block) {
    uint32_t words[16][16];
    for (int lane = 0; lane < 16; lane++) {
        const uint8_t *from = pages + (size_t)lane * length + block;
        for (int t = 0; t < 16; t++) words[t][lane] = load_be32(from + 4 * t);
    }
    for (int t = 0; t < 16; t++) memcpy(&w[t], words[t], sizeof w[t]);
}
#define VEC granary_v16u
#define V_SET1(c)                                                                                     \
    ((granary_v16u){(c), (c), (c), (c), (c), (c), (c), (c), (c), (c), (c), (c), (c), (c), (c), (c)})
#define V_ADD(a, b) ((a) + (b))
#define V_ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define V_SHR(x, n) ((x) >> (n))
#define V_XOR3(x, y, z) ((x) ^ (y) ^ (z))
#define V_CHOOSE(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define V_MAJORITY(x, y, z) (((x) & (y)) | ((z) & ((x) | (y))))
#define V_LOAD_BLOCK(w, pages, length, block) LANES(load_block)(w, pages, length, block)
#define V_STORE(state, digests)                                                                       \
    do {                                                                                              \
        for (int lane = 0; lane < 16; lane++)                                                         \
            for (int i = 0; i < 8; i++) store_be32((digests) + lane * 32 + i * 4, (state)[i][lane]);  \
    } while (0)
#include "sha256_lanes.h"
