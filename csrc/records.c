/* Whole-batch encode and decode of Kafka v2 records (the bytes after the 61-byte
 * batch header). Each record is: varint length, int8 attributes, varlong
 * timestampDelta, varint offsetDelta, varint keyLength + key, varint
 * valueLength + value, varint headerCount, then per header varint keyLength +
 * key and varint valueLength + value; lengths of -1 mean null. Varints are
 * zigzag; "varint" fields must fit 32 bits (at most 5 bytes), the varlong 64.
 *
 * Decoding treats its input as hostile: every length is checked against the end
 * of its record before use, a record's declared length must equal what its
 * fields consumed, and nothing is allocated here at all (the caller sizes the
 * output arrays from the input length). Encoding checks every length against
 * the data and output buffers it was given. */
#include <string.h>

#include "kq_internal.h"

#define INT32_LIMIT 0x7fffffffLL

static inline int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z > 0x7f) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z > 0x7f) {
        *o++ = (uint8_t)((z & 0x7f) | 0x80);
        z >>= 7;
    }
    *o++ = (uint8_t)z;
    return o;
}

/* Encoded size of a length-prefixed field, or -1 if its length is unusable. */
static inline int64_t field_size(int64_t len) {
    if (len < -1 || len > INT32_LIMIT) return -1;
    return varint_size(len) + (len > 0 ? len : 0);
}

static inline uint8_t *put_field(uint8_t *o, const uint8_t **data, int64_t len) {
    o = put_varint(o, len);
    if (len > 0) {
        memcpy(o, *data, (size_t)len);
        o += len;
        *data += len;
    }
    return o;
}

/* The CRC runs behind the encoder a chunk at a time: each chunk is still in L1/L2
 * when it is summed, and is a whole number of kq_crc32c's long 3-way blocks (3 x 4
 * KiB), so that only the last piece of a batch goes through its slower tail. */
#define CRC_CHUNK (2 * 3 * 4096)

/* Both encoders: with crc_out NULL nothing is summed. */
static int64_t encode_values(const char *data, int64_t data_len, const int64_t *lens,
                             int64_t n, char *out, int64_t out_cap, uint32_t crc,
                             uint32_t *crc_out) {
    const uint8_t *d = (const uint8_t *)data;
    uint8_t *o = (uint8_t *)out, *o_end = (uint8_t *)out + out_cap, *summed = o;
    int64_t left = data_len;
    if (n > INT32_LIMIT + 1) return KQ_ERR_TOO_LARGE;
    for (int64_t i = 0; i < n; i++) {
        int64_t vlen = lens[i];
        if (vlen < -1 || vlen > left) return KQ_ERR_DATA;
        if (vlen > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        /* attributes, timestampDelta 0, offsetDelta, null key, value, no headers */
        int64_t body = 3 + varint_size(i) + field_size(vlen) + 1;
        if (body > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        if (o_end - o < varint_size(body) + body) return KQ_ERR_NO_SPACE;
        o = put_varint(o, body);
        *o++ = 0;
        *o++ = 0;
        o = put_varint(o, i);
        *o++ = 1;
        o = put_field(o, &d, vlen);
        *o++ = 0;
        if (vlen > 0) left -= vlen;
        while (crc_out != NULL && o - summed >= CRC_CHUNK) {
            crc = kq_crc32c(crc, (const char *)summed, CRC_CHUNK);
            summed += CRC_CHUNK;
        }
    }
    if (left != 0) return KQ_ERR_DATA;
    if (crc_out != NULL)
        *crc_out = kq_crc32c(crc, (const char *)summed, (size_t)(o - summed));
    return o - (uint8_t *)out;
}

int64_t kq_encode_values(const char *data, int64_t data_len, const int64_t *lens, int64_t n,
                         char *out, int64_t out_cap) {
    return encode_values(data, data_len, lens, n, out, out_cap, 0, NULL);
}

int64_t kq_encode_values_crc(const char *data, int64_t data_len, const int64_t *lens, int64_t n,
                             char *out, int64_t out_cap, uint32_t crc, uint32_t *crc_out) {
    return encode_values(data, data_len, lens, n, out, out_cap, crc, crc_out);
}

int64_t kq_cut_values(const int64_t *lens, int64_t n, int64_t per_record, int64_t target,
                      int64_t *ends, int64_t *sizes, int64_t *value_bytes, int64_t cap) {
    int64_t groups = 0, size = 0, start = 0, encoded = 0, values = 0;
    if (per_record < 0 || target < 0) return KQ_ERR_DATA;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = lens[i];
        if (len < -1) return KQ_ERR_DATA;
        if (len > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        int64_t bytes = len > 0 ? len : 0;
        int64_t add = per_record > INT64_MAX - bytes ? INT64_MAX : per_record + bytes;
        /* size + add > target, written so that neither side can overflow */
        if (i > start && add > target - size) {
            if (groups == cap) return KQ_ERR_NO_SPACE;
            sizes[groups] = encoded;
            value_bytes[groups] = values;
            ends[groups++] = i;
            start = i;
            size = encoded = values = 0;
        }
        size = add > INT64_MAX - size ? INT64_MAX : size + add;
        /* kq_encode_values' record i - start */
        int64_t body = 3 + varint_size(i - start) + field_size(len) + 1;
        if (body > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        encoded += varint_size(body) + body;
        values += bytes;
    }
    if (n > 0) {
        if (groups == cap) return KQ_ERR_NO_SPACE;
        sizes[groups] = encoded;
        value_bytes[groups] = values;
        ends[groups++] = n;
    }
    return groups;
}

int64_t kq_encode_records(const char *data, int64_t data_len, const int64_t *meta,
                          int64_t meta_len, int64_t n, char *out, int64_t out_cap) {
    const uint8_t *d = (const uint8_t *)data;
    uint8_t *o = (uint8_t *)out, *o_end = (uint8_t *)out + out_cap;
    const int64_t *m = meta, *m_end = meta + meta_len;
    int64_t left = data_len;
    if (n > INT32_LIMIT + 1) return KQ_ERR_TOO_LARGE;
    for (int64_t i = 0; i < n; i++) {
        if (m_end - m < 4) return KQ_ERR_DATA;
        int64_t ts = m[0], klen = m[1], vlen = m[2], nh = m[3];
        const int64_t *hm = m + 4;
        if (nh < 0 || (m_end - hm) / 2 < nh) return KQ_ERR_DATA;
        if (nh > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        /* Sum the lengths first so no byte is copied from past the data. */
        int64_t need = (klen > 0 ? klen : 0) + (vlen > 0 ? vlen : 0), fk, fv;
        int64_t body = 1 + varint_size(ts) + varint_size(i) + varint_size(nh);
        if ((fk = field_size(klen)) < 0 || (fv = field_size(vlen)) < 0) return KQ_ERR_TOO_LARGE;
        body += fk + fv;
        for (int64_t h = 0; h < nh; h++) {
            int64_t hk = hm[2 * h], hv = hm[2 * h + 1];
            if (hk < 0) return KQ_ERR_DATA;
            if ((fk = field_size(hk)) < 0 || (fv = field_size(hv)) < 0) return KQ_ERR_TOO_LARGE;
            body += fk + fv;
            need += hk + (hv > 0 ? hv : 0);
            if (body > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        }
        if (body > INT32_LIMIT) return KQ_ERR_TOO_LARGE;
        if (need > left) return KQ_ERR_DATA;
        if (o_end - o < varint_size(body) + body) return KQ_ERR_NO_SPACE;
        o = put_varint(o, body);
        *o++ = 0;
        o = put_varint(o, ts);
        o = put_varint(o, i);
        o = put_field(o, &d, klen);
        o = put_field(o, &d, vlen);
        o = put_varint(o, nh);
        for (int64_t h = 0; h < nh; h++) {
            o = put_field(o, &d, hm[2 * h]);
            o = put_field(o, &d, hm[2 * h + 1]);
        }
        left -= need;
        m = hm + 2 * nh;
    }
    if (left != 0 || m != m_end) return KQ_ERR_DATA;
    return o - (uint8_t *)out;
}

/* The records of buf[from:len], positions (and info[0]) counted from buf: one
 * pass writes what both entry points return. */
static int decode_from(const uint8_t *buf, int64_t from, int64_t len, int64_t count,
                       int64_t base_offset, int64_t base_timestamp, int64_t *cols,
                       int64_t *hcols, int64_t hcap, int64_t *info) {
    int64_t *c_off = cols, *c_ts = cols + count, *c_ks = cols + 2 * count,
            *c_ke = cols + 3 * count, *c_vs = cols + 4 * count, *c_ve = cols + 5 * count,
            *c_nh = cols + 6 * count;
    int64_t pos = from, headers = 0, null_keys = 0, null_values = 0, ts0 = 0;
    int rc, dense = 1, same_ts = 1;
    info[0] = info[1] = info[2] = info[3] = info[4] = info[5] = 0;
    /* The smallest record is 7 bytes, so a larger count is corrupt before any work. */
    if (count < 0 || count > (len - from) / 7) {
        info[0] = from;
        return KQ_ERR_COUNT;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t size, end, ts, od, nh;
        info[0] = pos;
        if (kq_get_varint(buf, &pos, len, &size)) return KQ_ERR_VARINT;
        if (size <= 0 || size > len - pos) return KQ_ERR_RECORD_SIZE;
        end = pos + size;
        pos++; /* attributes: unused in v2 */
        if (kq_get_varlong(buf, &pos, end, &ts)) return KQ_ERR_VARINT;
        if (kq_get_varint(buf, &pos, end, &od)) return KQ_ERR_VARINT;
        if ((rc = kq_get_field(buf, &pos, end, &c_ks[i], &c_ke[i]))) return rc;
        if ((rc = kq_get_field(buf, &pos, end, &c_vs[i], &c_ve[i]))) return rc;
        if (kq_get_varint(buf, &pos, end, &nh)) return KQ_ERR_VARINT;
        if (nh < 0 || nh > (end - pos) / 2) return KQ_ERR_COUNT;
        for (int64_t h = 0; h < nh; h++, headers++) {
            int64_t ks, ke, vs, ve;
            if ((rc = kq_get_field(buf, &pos, end, &ks, &ke))) return rc;
            if (ke < 0) return KQ_ERR_HEADER_KEY;
            if ((rc = kq_get_field(buf, &pos, end, &vs, &ve))) return rc;
            if (headers < hcap) {
                hcols[headers] = ks;
                hcols[hcap + headers] = ke;
                hcols[2 * hcap + headers] = vs;
                hcols[3 * hcap + headers] = ve;
            }
        }
        if (pos != end) return KQ_ERR_RECORD_SIZE;
        if (__builtin_add_overflow(base_offset, od, &c_off[i]) ||
            __builtin_add_overflow(base_timestamp, ts, &c_ts[i]))
            return KQ_ERR_OVERFLOW;
        c_nh[i] = nh;
        /* Producers write offsetDelta = index and often one timestamp per batch;
         * saying so lets Python use range() and repeat() instead of lists. */
        dense &= od == i;
        if (i == 0) ts0 = ts;
        same_ts &= ts == ts0;
        null_keys += c_ke[i] < 0;
        null_values += c_ve[i] < 0;
    }
    info[0] = pos;
    if (pos != len) return KQ_ERR_TRAILING;
    info[1] = null_keys;
    info[2] = null_values;
    info[3] = headers;
    info[4] = dense;
    info[5] = same_ts;
    return headers > hcap ? KQ_ERR_HEADERS_FULL : 0;
}

int kq_decode_records(const char *data, int64_t len, int64_t count, int64_t base_offset,
                      int64_t base_timestamp, int64_t *cols, int64_t *hcols, int64_t hcap,
                      int64_t *info) {
    return decode_from((const uint8_t *)data, 0, len, count, base_offset, base_timestamp,
                       cols, hcols, hcap, info);
}

int kq_decode_records_at(const char *buf, int64_t start, int64_t end, int64_t count,
                         int64_t base_offset, int64_t base_timestamp, int64_t *cols,
                         int64_t *hcols, int64_t hcap, int64_t *info) {
    return decode_from((const uint8_t *)buf, start, end, count, base_offset, base_timestamp,
                       cols, hcols, hcap, info);
}

/* Writes decimal v into o (no terminator); returns the byte after it. */
static char *put_decimal(char *o, int64_t v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *o++ = digits[--n];
    return o;
}

int64_t kq_fields_format(const int64_t *cols, int64_t count, int with_keys, int64_t from,
                         char *fmt, int64_t cap) {
    const int64_t *ks = cols + 2 * count, *ke = cols + 3 * count, *vs = cols + 4 * count,
                  *ve = cols + 5 * count;
    char *o = fmt, *o_end = fmt + cap;
    int64_t at = from;
    /* Records of one layout repeat the text of their key and of their value field:
     * the last text of each is kept and copied whole while gap and length repeat. */
    char text[2][KQ_FORMAT_FIELD_MAX];
    int64_t last_gap[2] = {-1, -1}, last_len[2] = {-1, -1}, text_len[2] = {0, 0};
    for (int64_t i = 0; i < count; i++) {
        for (int f = with_keys ? 0 : 1; f < 2; f++) {
            int64_t start = f ? vs[i] : ks[i], stop = f ? ve[i] : ke[i];
            if (stop < 0 || start < at) return -1;  /* a null, or fields out of order */
            if (o_end - o < KQ_FORMAT_FIELD_MAX) return -1;
            if (start - at != last_gap[f] || stop - start != last_len[f]) {
                char *t = text[f];
                if (start > at) {
                    t = put_decimal(t, start - at);
                    *t++ = 'x';
                }
                t = put_decimal(t, stop - start);
                *t++ = 's';
                last_gap[f] = start - at;
                last_len[f] = stop - start;
                text_len[f] = t - text[f];
            }
            /* A fixed-size copy (the room is checked above), then the true length. */
            memcpy(o, text[f], KQ_FORMAT_FIELD_MAX);
            o += text_len[f];
            at = stop;
        }
    }
    return o - fmt;
}
