/* CRC-32C and CRC-32.
 * CRC-32C is Kafka's v2 batch checksum, so it runs over every byte appended or
 * recovered. On x86-64 with SSE4.2 it uses the crc32 instruction on three
 * independent streams at once (the instruction has 3-cycle latency but 1-cycle
 * throughput), joined with a "shift by L zero bytes" operator precomputed as
 * four 256-entry tables. Elsewhere, and for CRC-32, slice-by-8 tables. */
#include "kq_internal.h"
#include <string.h>

#include "kqlite_native.h"

#define POLY_C 0x82F63B78u
#define POLY_IEEE 0xEDB88320u
#define STREAM 4096

static uint32_t tab_c[8][256], tab_ieee[8][256];
static uint32_t shift_c[4][256];  /* raw state -> state after STREAM zero bytes */
static int ready, hw;

int kq_native_abi(void) { return KQ_NATIVE_ABI; }

static void make_tables(uint32_t poly, uint32_t t[8][256]) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (poly & (0u - (c & 1)));
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
}

/* Raw (unconditioned) slice-by-8 update. */
static uint32_t sw_update(uint32_t c, const uint8_t *p, size_t n, uint32_t t[8][256]) {
    while (n && ((uintptr_t)p & 7)) { c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff]; n--; }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4); memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo); hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
            t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
        p += 8; n -= 8;
    }
    while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
    return c;
}

static uint32_t shift_stream(uint32_t c) {
    return shift_c[0][c & 0xff] ^ shift_c[1][(c >> 8) & 0xff] ^ shift_c[2][(c >> 16) & 0xff] ^
           shift_c[3][c >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW 1
__attribute__((target("sse4.2")))
static uint32_t hw_update(uint32_t c, const uint8_t *p, size_t n) {
    uint64_t c0 = c;
    while (n && ((uintptr_t)p & 7)) { c0 = _mm_crc32_u8((uint32_t)c0, *p++); n--; }
    while (n >= 3 * STREAM) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + STREAM, *p2 = p + 2 * STREAM;
        for (size_t i = 0; i < STREAM; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8); memcpy(&b, p1 + i, 8); memcpy(&d, p2 + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        c0 = shift_stream(shift_stream((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * STREAM; n -= 3 * STREAM;
    }
    while (n >= 8) { uint64_t a; memcpy(&a, p, 8); c0 = _mm_crc32_u64(c0, a); p += 8; n -= 8; }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

/* Run at load time so that no thread can see half-built tables. */
__attribute__((constructor)) static void init(void) {
    if (ready) return;
    make_tables(POLY_C, tab_c);
    make_tables(POLY_IEEE, tab_ieee);
    /* Column b of the shift operator: the state after STREAM zero bytes from state 1<<b. */
    static uint8_t zeros[STREAM];
    uint32_t col[32];
    for (int b = 0; b < 32; b++) col[b] = sw_update(1u << b, zeros, STREAM, tab_c);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int b = 0; b < 8; b++) if (v & (1u << b)) r ^= col[8 * k + b];
            shift_c[k][v] = r;
        }
#ifdef HAVE_HW
    __builtin_cpu_init();
    hw = __builtin_cpu_supports("sse4.2");
#endif
    ready = 1;
}

int kq_crc32c_hardware(void) { init(); return hw; }

uint32_t kq_crc32c(uint32_t crc, const uint8_t *data, size_t len) {
    init();
#ifdef HAVE_HW
    if (hw) return ~hw_update(~crc, data, len);
#endif
    return ~sw_update(~crc, data, len, tab_c);
}

uint32_t kq_crc32(uint32_t crc, const uint8_t *data, size_t len) {
    init();
    return ~sw_update(~crc, data, len, tab_ieee);
}
