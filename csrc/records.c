/* Kafka v2 record encode/decode for whole batches (zigzag varints).
 * Decoding never reads outside buf[0:len]: every length is checked against the
 * end of its record before use, and a record's declared size must match what
 * its fields consumed. */
#include "kq_internal.h"
#include <string.h>

#include "kqlite_native.h"

static inline uint8_t *put_varint(uint8_t *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z > 0x7f) { *o++ = (uint8_t)((z & 0x7f) | 0x80); z >>= 7; }
    *o++ = (uint8_t)z;
    return o;
}

static inline int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z > 0x7f) { z >>= 7; n++; }
    return n;
}

int64_t kq_encode_values(const uint8_t *data, const int64_t *lens, int64_t n, uint8_t *out) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n; i++) {
        int64_t vlen = lens[i];
        /* body: attributes, tsDelta 0, offsetDelta i, key null, value, 0 headers */
        int64_t body = 1 + 1 + varint_size(i) + 1 + varint_size(vlen) + (vlen > 0 ? vlen : 0) + 1;
        o = put_varint(o, body);
        *o++ = 0;
        *o++ = 0;
        o = put_varint(o, i);
        *o++ = 1;
        o = put_varint(o, vlen);
        if (vlen > 0) { memcpy(o, data, (size_t)vlen); o += vlen; data += vlen; }
        *o++ = 0;
    }
    return o - out;
}

static inline int64_t bytes_size(int64_t len) {
    return varint_size(len) + (len > 0 ? len : 0);
}

static inline uint8_t *put_bytes(uint8_t *o, const uint8_t **data, int64_t len) {
    o = put_varint(o, len);
    if (len > 0) { memcpy(o, *data, (size_t)len); o += len; *data += len; }
    return o;
}

int64_t kq_encode_records(const uint8_t *data, const int64_t *meta, int64_t n, uint8_t *out) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n; i++) {
        int64_t ts = meta[0], klen = meta[1], vlen = meta[2], nh = meta[3];
        const int64_t *hm = meta + 4;
        int64_t body = 1 + varint_size(ts) + varint_size(i) + bytes_size(klen) +
                       bytes_size(vlen) + varint_size(nh);
        for (int64_t h = 0; h < nh; h++) body += bytes_size(hm[2 * h]) + bytes_size(hm[2 * h + 1]);
        o = put_varint(o, body);
        *o++ = 0;
        o = put_varint(o, ts);
        o = put_varint(o, i);
        o = put_bytes(o, &data, klen);
        o = put_bytes(o, &data, vlen);
        o = put_varint(o, nh);
        for (int64_t h = 0; h < nh; h++) {
            o = put_bytes(o, &data, hm[2 * h]);
            o = put_bytes(o, &data, hm[2 * h + 1]);
        }
        meta = hm + 2 * nh;
    }
    return o - out;
}

/* Reads a zigzag varint from buf[*pos:end]; returns 0 on success. */
static inline int get_varint(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *v) {
    uint64_t r = 0;
    int shift = 0;
    int64_t p = *pos;
    for (;;) {
        if (p >= end || shift > 63) return -1;
        uint8_t b = buf[p++];
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
    *pos = p;
    *v = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
    return 0;
}

/* A length-prefixed field: position and length (-1 null) after bounds checks. */
static inline int64_t get_field(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *fpos,
                                int64_t *flen) {
    int64_t n;
    if (get_varint(buf, pos, end, &n)) return KQ_ERR_VARINT;
    if (n < -1) return KQ_ERR_LENGTH;
    *fpos = *pos;
    *flen = n;
    if (n > 0) {
        if (n > end - *pos) return KQ_ERR_LENGTH;
        *pos += n;
    }
    return 0;
}

int64_t kq_decode_records(const uint8_t *buf, int64_t len, int64_t count, int64_t *rows,
                          int64_t *headers, int64_t header_cap, int64_t *needed,
                          int64_t *error_pos) {
    int64_t pos = 0, nh_total = 0, rc;
    if (count < 0 || count > len) return KQ_ERR_COUNT;
    for (int64_t i = 0; i < count; i++) {
        int64_t size, v, end;
        *error_pos = pos;
        if (get_varint(buf, &pos, len, &size)) return KQ_ERR_VARINT;
        if (size < 0 || size > len - pos) return KQ_ERR_RECORD_SIZE;
        end = pos + size;
        if (pos >= end) return KQ_ERR_RECORD_SIZE;
        pos++;  /* attributes */
        int64_t *row = rows + 8 * i;
        if (get_varint(buf, &pos, end, &v)) return KQ_ERR_VARINT;
        row[1] = v;
        if (get_varint(buf, &pos, end, &v)) return KQ_ERR_VARINT;
        row[0] = v;
        if ((rc = get_field(buf, &pos, end, &row[2], &row[3]))) return rc;
        if ((rc = get_field(buf, &pos, end, &row[4], &row[5]))) return rc;
        int64_t nh;
        if (get_varint(buf, &pos, end, &nh)) return KQ_ERR_VARINT;
        if (nh < 0 || nh > end - pos) return KQ_ERR_COUNT;
        row[6] = nh_total;
        row[7] = nh;
        for (int64_t h = 0; h < nh; h++, nh_total++) {
            int64_t kp, kl, vp, vl;
            if ((rc = get_field(buf, &pos, end, &kp, &kl))) return rc;
            if (kl < 0) return KQ_ERR_HEADER_KEY;
            if ((rc = get_field(buf, &pos, end, &vp, &vl))) return rc;
            if (nh_total < header_cap) {
                int64_t *hd = headers + 4 * nh_total;
                hd[0] = kp; hd[1] = kl; hd[2] = vp; hd[3] = vl;
            }
        }
        if (pos != end) return KQ_ERR_RECORD_SIZE;
    }
    *error_pos = pos;
    if (pos != len) return KQ_ERR_TRAILING;
    if (nh_total > header_cap) { *needed = nh_total; return KQ_ERR_HEADERS_FULL; }
    return nh_total;
}
