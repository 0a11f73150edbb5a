/* Record-boundary walk of Kafka v2 records: the produce path's proof that a
 * batch's records region holds exactly the records its header declares, each
 * one decodable, without building a single Python object.
 *
 * It accepts exactly the bytes kq_decode_records accepts (both use the field
 * readers in kq_internal.h and make the same checks in the same order) and
 * also checks header keys for UTF-8, which the decoder's Python caller does, so
 * that a batch that passes here can always be read back. walk_records() in
 * kqlite/_native/pure_codec.py mirrors this decision for decision.
 *
 * kq_record_marks is the same walk leaving a mark (offsetDelta, position, index)
 * every `stride` bytes, and kq_find_record walks from a record boundary to one
 * record by its offset, reading only the framing of the records it passes: a
 * read of one record by offset touches a few KiB of a 1 MiB batch. */
#include "kq_internal.h"

/* Strict UTF-8 as Python's codec reads it (Unicode table 3-7): no overlong
 * forms, no surrogates, nothing above U+10FFFF. */
static int utf8_valid(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xbf;       /* the range of the first continuation byte */
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0) lo = 0xa0;       /* overlong below U+0800 */
            if (c == 0xed) hi = 0x9f;       /* surrogates U+D800..U+DFFF */
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0) lo = 0x90;       /* overlong below U+10000 */
            if (c == 0xf4) hi = 0x8f;       /* above U+10FFFF */
        } else {
            return 0;
        }
        if (n - i - 1 < need || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

/* One record at buf[*pos] (the caller knows *pos < end), checked as the decoder
 * checks it plus the UTF-8 of header keys. On success *pos is the record's end,
 * *od its offsetDelta and *null_key says whether its key is null. */
static inline int walk_record(const uint8_t *buf, int64_t *pos, int64_t end,
                              int64_t base_timestamp, int64_t *od, int *null_key) {
    int64_t size, stop, ts, nh, ks, ke, vs, ve;
    int rc;
    if (kq_get_varint(buf, pos, end, &size)) return KQ_ERR_VARINT;
    if (size <= 0 || size > end - *pos) return KQ_ERR_RECORD_SIZE;
    stop = *pos + size;
    (*pos)++; /* attributes: unused in v2 */
    if (kq_get_varlong(buf, pos, stop, &ts) || kq_get_varint(buf, pos, stop, od))
        return KQ_ERR_VARINT;
    if ((rc = kq_get_field(buf, pos, stop, &ks, &ke))) return rc;
    if ((rc = kq_get_field(buf, pos, stop, &vs, &ve))) return rc;
    if (kq_get_varint(buf, pos, stop, &nh)) return KQ_ERR_VARINT;
    if (nh < 0 || nh > (stop - *pos) / 2) return KQ_ERR_COUNT;
    for (int64_t h = 0; h < nh; h++) {
        int64_t hs, he;
        if ((rc = kq_get_field(buf, pos, stop, &hs, &he))) return rc;
        if (he < 0) return KQ_ERR_HEADER_KEY;
        if (!utf8_valid(buf + hs, he - hs)) return KQ_ERR_HEADER_UTF8;
        if ((rc = kq_get_field(buf, pos, stop, &vs, &ve))) return rc;
    }
    if (*pos != stop) return KQ_ERR_RECORD_SIZE;
    if (__builtin_add_overflow(base_timestamp, ts, &ts)) return KQ_ERR_OVERFLOW;
    *null_key = ke < 0;
    return 0;
}

int kq_walk_records(const char *data, int64_t start, int64_t end, int64_t count,
                    int64_t base_timestamp, int64_t *offsets, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, record = start, null_keys = 0, walked = 0, od;
    int rc = 0, null_key;
    /* The smallest record is 7 bytes, so a larger count fails before any work. */
    if (count < 0 || count > (end - start) / 7) rc = KQ_ERR_COUNT;
    for (; rc == 0 && walked < count; walked++) {
        record = pos;
        if (pos >= end) {
            rc = KQ_ERR_MISSING;
            break;
        }
        if ((rc = walk_record(buf, &pos, end, base_timestamp, &od, &null_key))) break;
        null_keys += null_key;
        if (offsets) offsets[walked] = record;
    }
    if (rc == 0 && pos != end) {
        rc = KQ_ERR_TRAILING;
        record = pos;
    }
    info[0] = walked;
    info[1] = null_keys;
    info[2] = rc ? record : pos;
    return rc;
}

int kq_record_marks(const char *data, int64_t start, int64_t end, int64_t count,
                    int64_t base_offset, int64_t base_timestamp, int64_t stride,
                    int64_t *marks, int64_t cap, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, record = start, walked = 0, n = 0, last_mark = start, od, offset;
    int64_t prev = 0;
    int rc = 0, null_key, rising = 1;
    if (count < 0 || count > (end - start) / 7) rc = KQ_ERR_COUNT;
    for (; rc == 0 && walked < count; walked++) {
        record = pos;
        if (pos >= end) {
            rc = KQ_ERR_MISSING;
            break;
        }
        if ((rc = walk_record(buf, &pos, end, base_timestamp, &od, &null_key))) break;
        if (__builtin_add_overflow(base_offset, od, &offset)) {
            rc = KQ_ERR_OVERFLOW;
            break;
        }
        rising &= walked == 0 || od > prev;
        prev = od;
        if ((walked == 0 || record - last_mark >= stride) && n < cap) {
            marks[3 * n] = od;
            marks[3 * n + 1] = record;
            marks[3 * n + 2] = walked;
            n++;
            last_mark = record;
        }
    }
    if (rc == 0 && pos != end) {
        rc = KQ_ERR_TRAILING;
        record = pos;
    }
    info[0] = walked;
    info[1] = n;
    info[2] = rc ? record : pos;
    info[3] = rising;
    return rc;
}

int kq_find_record(const char *data, int64_t start, int64_t end, int64_t count,
                   int64_t target, int64_t base_offset, int64_t base_timestamp,
                   int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, walked = 0;
    int rc;
    for (; walked < count && pos < end; walked++) {
        int64_t record = pos, size, stop, ts, od, offset, nh, ks, ke, vs, ve;
        if (kq_get_varint(buf, &pos, end, &size)) return KQ_ERR_VARINT;
        if (size <= 0 || size > end - pos) return KQ_ERR_RECORD_SIZE;
        stop = pos + size;
        pos++; /* attributes: unused in v2 */
        if (kq_get_varlong(buf, &pos, stop, &ts) || kq_get_varint(buf, &pos, stop, &od))
            return KQ_ERR_VARINT;
        if (__builtin_add_overflow(base_offset, od, &offset)) return KQ_ERR_OVERFLOW;
        if (offset < target) {
            pos = stop; /* only its framing is read on the way */
            continue;
        }
        if ((rc = kq_get_field(buf, &pos, stop, &ks, &ke))) return rc;
        if ((rc = kq_get_field(buf, &pos, stop, &vs, &ve))) return rc;
        if (kq_get_varint(buf, &pos, stop, &nh)) return KQ_ERR_VARINT;
        if (nh < 0 || nh > (stop - pos) / 2) return KQ_ERR_COUNT;
        for (int64_t h = 0; h < nh; h++) {
            int64_t hs, he, hvs, hve;
            if ((rc = kq_get_field(buf, &pos, stop, &hs, &he))) return rc;
            if (he < 0) return KQ_ERR_HEADER_KEY;
            if ((rc = kq_get_field(buf, &pos, stop, &hvs, &hve))) return rc;
        }
        if (pos != stop) return KQ_ERR_RECORD_SIZE;
        if (__builtin_add_overflow(base_timestamp, ts, &ts)) return KQ_ERR_OVERFLOW;
        info[0] = walked;
        info[1] = record;
        info[2] = stop;
        info[3] = offset;
        info[4] = ts;
        info[5] = ks;
        info[6] = ke;
        info[7] = vs;
        info[8] = ve;
        info[9] = nh;
        return 0;
    }
    info[0] = walked;
    info[1] = pos;
    return KQ_FIND_NONE;
}
