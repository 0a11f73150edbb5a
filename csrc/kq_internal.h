/* Shared between the csrc C files; not part of the cffi ABI. */
#ifndef KQ_INTERNAL_H
#define KQ_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "kqlite_native.h"

/* Kafka stores every fixed-width integer big-endian. */
static inline uint32_t kq_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t kq_be64(const uint8_t *p) {
    return ((uint64_t)kq_be32(p) << 32) | kq_be32(p + 4);
}

/* Readers of the v2 record fields, shared by the decoder (records.c) and the
 * walker (walk.c) so that both accept exactly the same bytes. Each reads only
 * inside buf[*pos:end] and advances *pos on success.
 *
 * A zigzag varint of at most 5 bytes whose unsigned form fits 32 bits. */
static inline int kq_get_varint(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *v) {
    int64_t p = *pos;
    uint64_t raw = 0;
    for (int shift = 0;; shift += 7) {
        if (shift > 28 || p >= end) return -1;
        uint8_t b = buf[p++];
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) break;
    }
    if (raw > 0xffffffffULL) return -1;
    *pos = p;
    *v = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* A zigzag varint of at most 10 bytes whose unsigned form fits 64 bits. */
static inline int kq_get_varlong(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *v) {
    int64_t p = *pos;
    uint64_t raw = 0;
    for (int shift = 0;; shift += 7) {
        if (shift > 63 || p >= end) return -1;
        uint8_t b = buf[p++];
        if (shift == 63 && (b & 0x7f) > 1) return -1;
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) break;
    }
    *pos = p;
    *v = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* A length-prefixed field inside buf[*pos:end]: [start, stop), or 0/-1 if null. */
static inline int kq_get_field(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *start,
                               int64_t *stop) {
    int64_t n;
    if (kq_get_varint(buf, pos, end, &n)) return KQ_ERR_VARINT;
    if (n < 0) {
        if (n != -1) return KQ_ERR_LENGTH;
        *start = 0;
        *stop = -1;
        return 0;
    }
    if (n > end - *pos) return KQ_ERR_LENGTH;
    *start = *pos;
    *pos += n;
    *stop = *pos;
    return 0;
}

#endif
