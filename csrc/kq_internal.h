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

/* A v2 batch: the 61 bytes before its records, and the bits of its attributes
 * (Kafka's DefaultRecordBatch). */
enum {
    KQ_BATCH_OVERHEAD = 61,
    KQ_COMPRESSION_MASK = 0x07,
    KQ_LOG_APPEND_TIME_MASK = 0x08,
    KQ_TRANSACTIONAL_MASK = 0x10,
    KQ_CONTROL_MASK = 0x20
};

/* One log entry (magic 0, 1 or 2) at buf[pos:end], as kq_scan_batches checks it and
 * kq_summarize_batches folds it: both take these two steps, so that they stop at the
 * same entry with the same status. kq_entry_frame reads the framing: KQ_SCAN_OK
 * with base, magic and size set, else KQ_SCAN_TRUNCATED or KQ_SCAN_BAD_HEADER (an
 * unknown magic, a length below the magic's smallest legal one: the v2 batch header
 * after the length is 49 bytes, v0's crc, magic, attributes and key/value lengths
 * 14, v1 adds an 8-byte timestamp; or, with max_size >= 0, a larger entry). The
 * scan checks the CRC between the steps. kq_entry_offsets then sets last and
 * max_ts; a v2 last offset past int64 cannot be a real batch: KQ_SCAN_BAD_HEADER. */
typedef struct {
    int64_t base, size, last, max_ts;
    int magic;
} kq_entry;

static inline int kq_entry_frame(const uint8_t *buf, int64_t pos, int64_t end,
                                 int64_t max_size, kq_entry *en) {
    if (end - pos < 17) return KQ_SCAN_TRUNCATED;
    const uint8_t *e = buf + pos;
    int32_t length = (int32_t)kq_be32(e + 8);
    int magic = e[16];
    int32_t minimum = magic == 2 ? 49 : magic == 1 ? 22 : magic == 0 ? 14 : -1;
    int64_t size = (int64_t)length + 12;
    if (minimum < 0 || length < minimum || (max_size >= 0 && size > max_size))
        return KQ_SCAN_BAD_HEADER;
    if (end - pos < size) return KQ_SCAN_TRUNCATED;
    en->base = (int64_t)kq_be64(e);
    en->size = size;
    en->magic = magic;
    return KQ_SCAN_OK;
}

static inline int kq_entry_offsets(const uint8_t *e, kq_entry *en) {
    if (en->magic == 2) {
        if (__builtin_add_overflow(en->base, (int64_t)(int32_t)kq_be32(e + 23), &en->last))
            return KQ_SCAN_BAD_HEADER;
        en->max_ts = (int64_t)kq_be64(e + 35);
    } else {
        en->last = en->base;
        en->max_ts = en->magic == 1 ? (int64_t)kq_be64(e + 18) : -1;
    }
    return KQ_SCAN_OK;
}

/* Readers of the v2 record fields, shared by the decoder (records.c) and the
 * walker (walk.c) so that both accept exactly the same bytes. Each reads only
 * inside buf[*pos:end] and advances *pos on success.
 *
 * A zigzag varint of at most 5 bytes whose unsigned form fits 32 bits. One or two
 * bytes (lengths and deltas under 8192: most of them) skip the general loop. */
static inline int kq_get_varint(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *v) {
    int64_t p = *pos;
    uint64_t raw = 0;
    if (end - p >= 2 && (buf[p] < 0x80 || buf[p + 1] < 0x80)) {
        raw = buf[p] < 0x80 ? buf[p] : (buf[p] & 0x7f) | ((uint64_t)buf[p + 1] << 7);
        *pos = p + (buf[p] < 0x80 ? 1 : 2);
        *v = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        return 0;
    }
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

/* A zigzag varint of at most 10 bytes whose unsigned form fits 64 bits. One byte (a
 * timestamp delta under 64: most batches') skips the general loop. */
static inline int kq_get_varlong(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *v) {
    int64_t p = *pos;
    uint64_t raw = 0;
    if (p < end && buf[p] < 0x80) {
        *pos = p + 1;
        *v = (int64_t)(buf[p] >> 1) ^ -(int64_t)(buf[p] & 1);
        return 0;
    }
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
