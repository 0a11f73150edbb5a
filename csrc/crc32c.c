/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and CRC-32 (IEEE).
 *
 * CRC-32C is the RecordBatch v2 checksum, so it runs over every byte appended,
 * received or recovered. On x86-64 CPUs with SSE4.2 (checked at run time, so one
 * binary serves every CPU) the crc32 instruction does the work. That instruction
 * has a latency of 3 cycles but accepts a new one every cycle, so long inputs are
 * cut into three equal streams computed together; the three partial CRCs are
 * joined with a precomputed "advance by L zero bytes" operator, a linear map
 * over GF(2) stored as four 256-entry tables. Elsewhere, and for CRC-32 (legacy
 * v0/v1 messages only), slice-by-8 tables are used.
 *
 * All internal states are "raw" (not inverted); the public functions apply the
 * customary pre- and post-inversion, which is what makes `crc` continuable. */
#include <string.h>

#include "kq_internal.h"

#define POLY_C 0x82F63B78u
#define POLY_IEEE 0xEDB88320u
/* Stream lengths of the two 3-way tiers: the long one amortizes the join over
 * 12 KiB, the short one keeps typical 1-12 KiB batches off the single stream. */
#define LONG_BLOCK 4096
#define SHORT_BLOCK 256

static uint32_t tab_c[8][256], tab_ieee[8][256];
static uint32_t shift_long[4][256], shift_short[4][256];
static volatile int ready;
static int hw;

static void make_tables(uint32_t poly, uint32_t t[8][256]) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (poly & (0u - (c & 1)));
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
}

static inline uint32_t load_le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static uint32_t sw_update(uint32_t c, const uint8_t *p, size_t n, const uint32_t t[8][256]) {
    while (n >= 8) {
        uint32_t lo = load_le32(p) ^ c, hi = load_le32(p + 4);
        c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
            t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
    return c;
}

/* Column b of the operator is the raw state reached from state 1<<b after len
 * zero bytes; by linearity any state maps to the XOR of its bits' columns,
 * tabulated a byte at a time. */
static void make_shift(uint32_t s[4][256], size_t len) {
    static const uint8_t zeros[LONG_BLOCK];
    uint32_t col[32];
    for (int b = 0; b < 32; b++) col[b] = sw_update(1u << b, zeros, len, tab_c);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1u << b)) r ^= col[8 * k + b];
            s[k][v] = r;
        }
}

static inline uint32_t shift(const uint32_t s[4][256], uint32_t c) {
    return s[0][c & 0xff] ^ s[1][(c >> 8) & 0xff] ^ s[2][(c >> 16) & 0xff] ^ s[3][c >> 24];
}

/* -DKQ_NO_SSE42 builds the portable code alone, as on other architectures. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KQ_NO_SSE42)
#include <nmmintrin.h>
#define KQ_HAVE_SSE42 1

__attribute__((target("sse4.2"), always_inline)) static inline uint64_t
hw_triple(uint64_t c0, const uint8_t *p, size_t block, const uint32_t s[4][256]) {
    uint64_t c1 = 0, c2 = 0, a, b, d;
    const uint8_t *p1 = p + block, *p2 = p + 2 * block;
    for (size_t i = 0; i < block; i += 8) {
        memcpy(&a, p + i, 8);
        memcpy(&b, p1 + i, 8);
        memcpy(&d, p2 + i, 8);
        c0 = _mm_crc32_u64(c0, a);
        c1 = _mm_crc32_u64(c1, b);
        c2 = _mm_crc32_u64(c2, d);
    }
    return shift(s, shift(s, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t hw_update(uint32_t c, const uint8_t *p,
                                                            size_t n) {
    uint64_t c0 = c, a;
    for (; n >= 3 * LONG_BLOCK; p += 3 * LONG_BLOCK, n -= 3 * LONG_BLOCK)
        c0 = hw_triple(c0, p, LONG_BLOCK, shift_long);
    for (; n >= 3 * SHORT_BLOCK; p += 3 * SHORT_BLOCK, n -= 3 * SHORT_BLOCK)
        c0 = hw_triple(c0, p, SHORT_BLOCK, shift_short);
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
    }
    uint32_t c32 = (uint32_t)c0;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

/* Runs when the extension is loaded, before any thread can call in; the lazy
 * call in each entry point only matters for toolchains without constructors
 * and rebuilds identical tables if it ever races. */
__attribute__((constructor)) static void init(void) {
    if (ready) return;
    make_tables(POLY_C, tab_c);
    make_tables(POLY_IEEE, tab_ieee);
    make_shift(shift_long, LONG_BLOCK);
    make_shift(shift_short, SHORT_BLOCK);
#ifdef KQ_HAVE_SSE42
    __builtin_cpu_init();
    hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    ready = 1;
}

int kq_crc32c_hardware(void) {
    if (!ready) init();
    return hw;
}

uint32_t kq_crc32c_portable(uint32_t crc, const char *data, size_t len) {
    if (!ready) init();
    return ~sw_update(~crc, (const uint8_t *)data, len, tab_c);
}

uint32_t kq_crc32c(uint32_t crc, const char *data, size_t len) {
    if (!ready) init();
#ifdef KQ_HAVE_SSE42
    if (hw) return ~hw_update(~crc, (const uint8_t *)data, len);
#endif
    return ~sw_update(~crc, (const uint8_t *)data, len, tab_c);
}

uint32_t kq_crc32(uint32_t crc, const char *data, size_t len) {
    if (!ready) init();
    return ~sw_update(~crc, (const uint8_t *)data, len, tab_ieee);
}
