// The sixteen-lane SHA-256 (FIPS 180-4), written once and compiled several times by page_hash.c:
// with AVX-512 intrinsics (the wide way), and with Clang/GCC vector extensions (the portable
// way, which any CPU runs: the compiler lowers a 64-byte vector to AVX2, SSE2, NEON or scalar
// code). Lane i hashes page i; the pages are independent messages of one length.
//
// Not a header to include anywhere else: page_hash.c defines, before each inclusion,
//   LANES(name)           the instantiation's names (wide_compress, portable_compress, ...)
//   LANES_TARGET          its function attributes (a `target(...)`, or nothing)
//   VEC                   a vector of sixteen uint32_t
//   V_SET1(c)             every lane c
//   V_ADD(a, b)           lane-wise a + b (mod 2^32)
//   V_ROTR(x, n)          lane-wise rotation right by n
//   V_SHR(x, n)           lane-wise shift right by n
//   V_XOR3(x, y, z)       x ^ y ^ z
//   V_CHOOSE(x, y, z)     Ch: x ? y : z, bit by bit
//   V_MAJORITY(x, y, z)   Maj: the majority of each bit
//   V_LOAD_BLOCK(w, pages, length, block)  w[t] = word t of each page's block at byte `block`,
//                                           big-endian decoded (t = 0..15)
//   V_STORE(state, digests)            the eight state words of each lane as its digest
// and undefines them afterwards.

// One 64-byte block of each lane's message: `w` holds its 16 words (big-endian decoded) and
// is used as the message schedule's ring of the last 16 words (FIPS 180-4, 6.2.2).
LANES_TARGET static inline void LANES(compress)(VEC state[8], VEC w[16]) {
    VEC a = state[0], b = state[1], c = state[2], d = state[3];
    VEC e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        VEC word;
        if (t < 16) {
            word = w[t];
        } else {
            VEC w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
            VEC sigma0 = V_XOR3(V_ROTR(w15, 7), V_ROTR(w15, 18), V_SHR(w15, 3));
            VEC sigma1 = V_XOR3(V_ROTR(w2, 17), V_ROTR(w2, 19), V_SHR(w2, 10));
            word = V_ADD(V_ADD(w[t & 15], sigma0), V_ADD(w[(t - 7) & 15], sigma1));
            w[t & 15] = word;
        }
        VEC t1 = V_ADD(V_ADD(h, V_XOR3(V_ROTR(e, 6), V_ROTR(e, 11), V_ROTR(e, 25))),
                       V_ADD(V_CHOOSE(e, f, g), V_ADD(word, V_SET1(round_constants[t]))));
        VEC t2 = V_ADD(V_XOR3(V_ROTR(a, 2), V_ROTR(a, 13), V_ROTR(a, 22)), V_MAJORITY(a, b, c));
        h = g;
        g = f;
        f = e;
        e = V_ADD(d, t1);
        d = c;
        c = b;
        b = a;
        a = V_ADD(t1, t2);
    }
    state[0] = V_ADD(state[0], a);
    state[1] = V_ADD(state[1], b);
    state[2] = V_ADD(state[2], c);
    state[3] = V_ADD(state[3], d);
    state[4] = V_ADD(state[4], e);
    state[5] = V_ADD(state[5], f);
    state[6] = V_ADD(state[6], g);
    state[7] = V_ADD(state[7], h);
}

// The SHA-256 of the sixteen pages of `length` bytes from `pages` into `digests` (16 x 32 bytes).
LANES_TARGET static void LANES(sha256_x16)(const uint8_t *pages, size_t length, uint8_t *digests) {
    VEC state[8], w[16];
    for (int i = 0; i < 8; i++) state[i] = V_SET1(initial_state[i]);
    for (size_t block = 0; block < length; block += 64) {
        V_LOAD_BLOCK(w, pages, length, block);
        LANES(compress)(state, w);
    }
    // Every page has the same length, so the padding block is the same in every lane: 0x80,
    // zeros, then the length in bits as a 64-bit big-endian number (FIPS 180-4, 5.1.1).
    uint64_t bits = (uint64_t)length * 8;
    for (int t = 0; t < 16; t++) w[t] = V_SET1(0);
    w[0] = V_SET1(0x80000000u);
    w[14] = V_SET1((uint32_t)(bits >> 32));
    w[15] = V_SET1((uint32_t)bits);
    LANES(compress)(state, w);
    V_STORE(state, digests);
}

#undef LANES
#undef LANES_TARGET
#undef VEC
#undef V_SET1
#undef V_ADD
#undef V_ROTR
#undef V_SHR
#undef V_XOR3
#undef V_CHOOSE
#undef V_MAJORITY
#undef V_LOAD_BLOCK
#undef V_STORE
