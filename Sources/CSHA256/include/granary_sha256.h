#ifndef GRANARY_SHA256_H
#define GRANARY_SHA256_H
// SHA-256 (FIPS 180-4) of one message, fed in pieces: every archive member, manifest, segment
// and page granary checks. Two ways to hash a 64-byte block, chosen at run time:
//   - x86-64 SHA extensions (SHA-NI: sha256rnds2, sha256msg1, sha256msg2), on CPUs that have
//     them with SSE4.1 (AMD since Zen, Intel since Goldmont and Ice Lake);
//   - portable C, on every CPU.
// Tests run both ways on every CPU that has the first (granary_sha256_force_portable) and
// compare them with NIST's examples and with other implementations (coreutils' sha256sum,
// Python's hashlib).
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t state[8];
    uint64_t length;     // bytes fed so far
    uint8_t buffer[64];  // a block begun and not yet hashed
    uint32_t buffered;   // bytes of it, 0..63
} granary_sha256;

void granary_sha256_init(granary_sha256 *context);
void granary_sha256_update(granary_sha256 *context, const void *bytes, size_t count);
// Writes the 32-byte digest; the context is then spent (init it again to reuse it).
void granary_sha256_final(granary_sha256 *context, void *digest);

// FIPS 180-4: the 64 round constants (4.2.2) and the initial hash value (5.3.3); the sixteen-lane
// page hash (Sources/CPageHash) uses them too.
extern const uint32_t granary_sha256_round_constants[64];
extern const uint32_t granary_sha256_initial_state[8];

// SHA-256's words are big-endian.
static inline uint32_t granary_sha256_load_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static inline void granary_sha256_store_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

// 1 when this CPU runs the SHA-NI way (and it is not turned off), else 0.
int granary_sha256_accelerated(void);
// 1 when this CPU has the SHA instructions (with SSE4.1 and SSSE3), whatever the switch below.
int granary_sha256_cpu_has_sha_instructions(void);
// 1: the portable way from now on, in this process, whatever the CPU has (tests); 0: the
// fastest way again.
void granary_sha256_force_portable(int on);
#endif
