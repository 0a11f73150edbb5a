/* Kafka v2 records to and from Arrow's columnar layout, for the Spark data source.
 *
 * Decoding appends the records of one batch straight into the buffers of Arrow
 * arrays (int64 offsets and microsecond timestamps; validity bitmap + int32
 * offsets + bytes for key and value; for headers a list<struct<key string,
 * value binary>>), so that a reader can wrap them with pyarrow's from_buffers
 * and never build a Python object per record. The records are first walked with
 * kq_walk_records, so exactly the bytes the per-record decoder accepts are
 * accepted here; the copy pass after it can then trust every length.
 *
 * Encoding is the inverse: rows of Arrow key/value/timestamp/header columns to
 * the records region of a v2 batch, byte for byte what kq_encode_records
 * writes for the same records. kq_arrow_partitions is Kafka's murmur2
 * partitioner over a key column. */
#include <string.h>

#include "kq_internal.h"

static inline int bit_get(const uint8_t *bits, int64_t i) {
    return (bits[i >> 3] >> (i & 7)) & 1;
}

static inline void bit_put(uint8_t *bits, int64_t i, int on) {
    if (on) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    else bits[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

static inline int32_t get_i32(const char *p, int64_t i) {
    int32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static inline void put_i32(char *p, int64_t i, int64_t v) {
    int32_t w = (int32_t)v;
    memcpy(p + 4 * i, &w, 4);
}

static inline void put_i64(char *p, int64_t i, int64_t v) {
    memcpy(p + 8 * i, &v, 8);
}

/* One binary/string column being appended to: rows so far `r`, bytes so far `n`. */
static int put_binary(char **cols, const int64_t *caps, int valid_col, int64_t r, int64_t *n,
                      int64_t *nulls, const uint8_t *buf, int64_t start, int64_t stop) {
    int64_t len = stop < 0 ? 0 : stop - start;
    if (*n + len > INT32_MAX) return KQ_ERR_TOO_LARGE;
    if ((r >> 3) >= caps[valid_col] || 4 * (r + 2) > caps[valid_col + 1]
            || *n + len > caps[valid_col + 2])
        return KQ_ERR_NO_SPACE;
    bit_put((uint8_t *)cols[valid_col], r, stop >= 0);
    if (stop < 0) (*nulls)++;
    else memcpy(cols[valid_col + 2] + *n, buf + start, (size_t)len);
    *n += len;
    put_i32(cols[valid_col + 1], r + 1, *n);
    return 0;
}

int kq_arrow_decode(const char *data, int64_t len, int64_t count, int64_t base_offset,
                    int64_t base_timestamp, int64_t fixed_timestamp, int use_fixed,
                    int64_t lo, int64_t hi, int with_headers, char **cols,
                    const int64_t *caps, int64_t *fill, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t winfo[3];
    int rc = kq_walk_records(data, 0, len, count, base_timestamp, NULL, winfo);
    if (rc) return rc;
    int64_t f[KQ_ARROW_FILL];
    memcpy(f, fill, sizeof f);
    int64_t pos = 0;
    info[0] = 0;
    info[1] = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t rec_len = 0, ts_delta = 0, off_delta = 0, ks = 0, ke = -1, vs = 0, ve = -1;
        int64_t hcount = 0, offset, ts;
        kq_get_varint(buf, &pos, len, &rec_len);
        int64_t next = pos + rec_len;
        pos++;                                          /* attributes */
        kq_get_varlong(buf, &pos, len, &ts_delta);
        kq_get_varint(buf, &pos, len, &off_delta);
        if (__builtin_add_overflow(base_offset, off_delta, &offset)) return KQ_ERR_OVERFLOW;
        if (offset < lo) {
            pos = next;
            continue;
        }
        if (offset >= hi) {
            info[0] = 1;                                /* the per-record reader stops here */
            break;
        }
        ts = use_fixed ? fixed_timestamp : base_timestamp + ts_delta;
        if (__builtin_mul_overflow(ts, (int64_t)1000, &ts)) return KQ_ERR_OVERFLOW;
        int64_t r = f[0];
        if (8 * (r + 1) > caps[KQ_AC_OFFSET] || 8 * (r + 1) > caps[KQ_AC_TIMESTAMP])
            return KQ_ERR_NO_SPACE;
        put_i64(cols[KQ_AC_OFFSET], r, offset);
        put_i64(cols[KQ_AC_TIMESTAMP], r, ts);
        kq_get_field(buf, &pos, next, &ks, &ke);
        if ((rc = put_binary(cols, caps, KQ_AC_KEY_VALID, r, &f[1], &f[6], buf, ks, ke)))
            return rc;
        kq_get_field(buf, &pos, next, &vs, &ve);
        if ((rc = put_binary(cols, caps, KQ_AC_VALUE_VALID, r, &f[2], &f[7], buf, vs, ve)))
            return rc;
        kq_get_varint(buf, &pos, next, &hcount);
        if (with_headers) {
            for (int64_t h = 0; h < hcount; h++) {
                int64_t hks = 0, hke = 0, hvs = 0, hve = -1, hr = f[3];
                kq_get_field(buf, &pos, next, &hks, &hke);
                kq_get_field(buf, &pos, next, &hvs, &hve);
                if (f[4] + (hke - hks) > INT32_MAX || hr + 1 > INT32_MAX)
                    return KQ_ERR_TOO_LARGE;
                if (4 * (hr + 2) > caps[KQ_AC_HKEY_OFFSETS] || f[4] + (hke - hks) >
                        caps[KQ_AC_HKEY_DATA])
                    return KQ_ERR_NO_SPACE;
                memcpy(cols[KQ_AC_HKEY_DATA] + f[4], buf + hks, (size_t)(hke - hks));
                f[4] += hke - hks;
                put_i32(cols[KQ_AC_HKEY_OFFSETS], hr + 1, f[4]);
                if ((rc = put_binary(cols, caps, KQ_AC_HVALUE_VALID, hr, &f[5], &f[8], buf,
                                     hvs, hve)))
                    return rc;
                f[3]++;
            }
            if (4 * (r + 2) > caps[KQ_AC_LIST_OFFSETS]) return KQ_ERR_NO_SPACE;
            put_i32(cols[KQ_AC_LIST_OFFSETS], r + 1, f[3]);
        }
        f[0]++;
        pos = next;
    }
    info[1] = f[0] - fill[0];
    memcpy(fill, f, sizeof f);
    return 0;
}

/* The whole batches of a fetched chunk go through one call here rather than one
 * Python round per batch (a one-record batch costs about as much to set up as to
 * decode). Every decision is the reader's (kqlite/spark/arrow_read.py, whose
 * per-batch path handles what is set aside), taken in its order. */
int kq_arrow_decode_run(const char *data, int64_t len, int64_t start, int64_t lo, int64_t hi,
                        int64_t prev, int has_prev, int txn_aside, int64_t max_rows,
                        int64_t max_data, int with_headers, char **cols, const int64_t *caps,
                        int64_t *fill, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, dinfo[2];
    int why = KQ_RUN_END, rc = 0;
    kq_entry en;
    while (pos < len) {
        const uint8_t *e = buf + pos;
        if (kq_entry_frame(buf, pos, len, -1, &en) != KQ_SCAN_OK
                || (en.magic == 2 ? kq_be32(e + 17) != kq_crc32c(0, (const char *)e + 21,
                                                                (size_t)(en.size - 21))
                                  : kq_be32(e + 12) != kq_crc32(0, (const char *)e + 16,
                                                                (size_t)(en.size - 16)))
                || kq_entry_offsets(e, &en) != KQ_SCAN_OK) {
            why = KQ_RUN_ASIDE;                         /* damaged: the reader raises */
            break;
        }
        if (has_prev && prev >= en.base) {
            why = KQ_RUN_ASIDE;                         /* offsets out of order */
            break;
        }
        /* The filter must see these also below lo: a marker there ends the aborted
         * transaction that the batches after it would otherwise be dropped for. */
        if (txn_aside && en.magic == 2 && (int64_t)kq_be64(e + 43) >= 0
                && (((e[21] << 8) | e[22]) & (KQ_CONTROL_MASK | KQ_TRANSACTIONAL_MASK))) {
            why = KQ_RUN_ASIDE;
            break;
        }
        if (en.last < lo) {                             /* wholly below the cursor */
            prev = en.last;
            has_prev = 1;
            pos += en.size;
            continue;
        }
        if (en.base >= hi) {
            why = KQ_RUN_STOPPED;
            break;
        }
        if (en.magic != 2 || en.base > en.last) {
            why = KQ_RUN_ASIDE;                         /* legacy, or a negative delta */
            break;
        }
        int attributes = (int)(int16_t)((e[21] << 8) | e[22]);
        int stopped = 0;
        if (attributes & KQ_CONTROL_MASK) {
            stopped = en.last + 1 >= hi;                /* a marker gives no rows */
        } else {
            if (attributes & KQ_COMPRESSION_MASK) {
                why = KQ_RUN_ASIDE;
                break;
            }
            int64_t count = (int64_t)(int32_t)kq_be32(e + 57);
            int64_t base_ts = (int64_t)kq_be64(e + 27);
            int fixed = (attributes & KQ_LOG_APPEND_TIME_MASK) != 0;
            rc = kq_arrow_decode(data + pos + KQ_BATCH_OVERHEAD, en.size - KQ_BATCH_OVERHEAD,
                                 count, en.base, base_ts, en.max_ts, fixed, lo, hi,
                                 with_headers, cols, caps, fill, dinfo);
            if (rc == KQ_ERR_NO_SPACE) break;           /* grow, then call again here */
            if (rc) {
                rc = 0;
                why = KQ_RUN_ASIDE;                     /* refused bytes or an overflow */
                break;
            }
            stopped = (int)dinfo[0];
        }
        prev = en.last;
        has_prev = 1;
        if (en.last + 1 > lo) lo = en.last + 1;
        pos += en.size;
        if (stopped) {
            why = KQ_RUN_STOPPED;
            break;
        }
        if (fill[0] >= max_rows || fill[1] + fill[2] + fill[4] + fill[5] >= max_data) {
            why = KQ_RUN_FULL;
            break;
        }
    }
    info[0] = pos;
    info[1] = lo;
    info[2] = prev;
    info[3] = has_prev;
    info[4] = why;
    return rc;
}

static inline int varint_size(uint64_t zz) {
    int n = 1;
    while (zz >= 0x80) {
        zz >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline char *put_varint(char *p, int64_t v) {
    uint64_t zz = zigzag(v);
    while (zz >= 0x80) {
        *p++ = (char)((zz & 0x7f) | 0x80);
        zz >>= 7;
    }
    *p++ = (char)zz;
    return p;
}

/* Length of row i of a binary column, -1 for null (a NULL offsets array: all null). */
static inline int64_t cell(const char *valid, const char *offsets, int64_t i, int64_t *start) {
    if (offsets == NULL || (valid != NULL && !bit_get((const uint8_t *)valid, i))) return -1;
    *start = get_i32(offsets, i);
    return get_i32(offsets, i + 1) - *start;
}

int64_t kq_arrow_encode(int64_t lo, int64_t hi, const char *key_valid, const char *key_offsets,
                        const char *key_data, const char *value_valid,
                        const char *value_offsets, const char *value_data,
                        const int64_t *timestamps, int64_t base_timestamp,
                        const char *list_offsets, const char *hkey_offsets,
                        const char *hkey_data, const char *hvalue_valid,
                        const char *hvalue_offsets, const char *hvalue_data,
                        char *out, int64_t out_cap) {
    char *p = out, *end = out + out_cap;
    for (int64_t i = lo; i < hi; i++) {
        int64_t ks = 0, vs = 0;
        int64_t klen = cell(key_valid, key_offsets, i, &ks);
        int64_t vlen = cell(value_valid, value_offsets, i, &vs);
        int64_t ts_delta = timestamps ? timestamps[i] - base_timestamp : 0;
        int64_t h0 = 0, h1 = 0;
        if (list_offsets) {
            h0 = get_i32(list_offsets, i);
            h1 = get_i32(list_offsets, i + 1);
        }
        int64_t body = 1 + varint_size(zigzag(ts_delta)) + varint_size(zigzag(i - lo))
            + varint_size(zigzag(klen)) + (klen > 0 ? klen : 0)
            + varint_size(zigzag(vlen)) + (vlen > 0 ? vlen : 0)
            + varint_size(zigzag(h1 - h0));
        for (int64_t h = h0; h < h1; h++) {
            int64_t hks = 0, hvs = 0;
            int64_t hk = cell(NULL, hkey_offsets, h, &hks);
            int64_t hv = cell(hvalue_valid, hvalue_offsets, h, &hvs);
            body += varint_size(zigzag(hk)) + (hk > 0 ? hk : 0) + varint_size(zigzag(hv)) + (hv > 0 ? hv : 0);
        }
        if (body > INT32_MAX) return KQ_ERR_TOO_LARGE;
        if (end - p < body + 5) return KQ_ERR_NO_SPACE;
        p = put_varint(p, body);
        *p++ = 0;                                       /* attributes */
        p = put_varint(p, ts_delta);
        p = put_varint(p, i - lo);
        p = put_varint(p, klen);
        if (klen > 0) {
            memcpy(p, key_data + ks, (size_t)klen);
            p += klen;
        }
        p = put_varint(p, vlen);
        if (vlen > 0) {
            memcpy(p, value_data + vs, (size_t)vlen);
            p += vlen;
        }
        p = put_varint(p, h1 - h0);
        for (int64_t h = h0; h < h1; h++) {
            int64_t hks = 0, hvs = 0;
            int64_t hk = cell(NULL, hkey_offsets, h, &hks);
            int64_t hv = cell(hvalue_valid, hvalue_offsets, h, &hvs);
            p = put_varint(p, hk);
            if (hk > 0) {
                memcpy(p, hkey_data + hks, (size_t)hk);
                p += hk;
            }
            p = put_varint(p, hv);
            if (hv > 0) {
                memcpy(p, hvalue_data + hvs, (size_t)hv);
                p += hv;
            }
        }
    }
    return p - out;
}

static uint32_t murmur2(const uint8_t *data, int64_t length) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    int64_t end = length - length % 4;
    for (int64_t i = 0; i < end; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8)
            | ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length % 4) {
    case 3: h ^= (uint32_t)data[end + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[end + 1] << 8;  /* fall through */
    case 1: h ^= data[end]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

void kq_arrow_partitions(const char *key_valid, const char *key_offsets, const char *key_data,
                         int64_t rows, int32_t partitions, int32_t *out) {
    for (int64_t i = 0; i < rows; i++) {
        int64_t ks = 0;
        int64_t klen = cell(key_valid, key_offsets, i, &ks);
        out[i] = klen < 0 ? -1 : (int32_t)((murmur2((const uint8_t *)key_data + ks, klen)
                                            & 0x7fffffffu) % (uint32_t)partitions);
    }
}
