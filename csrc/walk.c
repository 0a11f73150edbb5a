/* Record-boundary walk of Kafka v2 records: the produce path's proof that a
 * batch's records region holds exactly the records its header declares, each
 * one decodable, without building a single Python object.
 *
 * It accepts exactly the bytes kq_decode_records accepts (both use the field
 * readers in kq_internal.h and make the same checks in the same order) and
 * also checks header keys for UTF-8, which the decoder's Python caller does, so
 * that a batch that passes here can always be read back. walk_records() in
 * kqlite/_native/pure.py mirrors this decision for decision. */
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

int kq_walk_records(const char *data, int64_t start, int64_t end, int64_t count,
                    int64_t base_timestamp, int64_t *offsets, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, record = start, null_keys = 0, walked = 0;
    int rc = 0;
    /* The smallest record is 7 bytes, so a larger count fails before any work. */
    if (count < 0 || count > (end - start) / 7) rc = KQ_ERR_COUNT;
    for (; rc == 0 && walked < count; walked++) {
        int64_t size, stop, ts, od, nh, ks, ke, vs, ve;
        record = pos;
        if (pos >= end) {
            rc = KQ_ERR_MISSING;
            break;
        }
        if (kq_get_varint(buf, &pos, end, &size)) {
            rc = KQ_ERR_VARINT;
            break;
        }
        if (size <= 0 || size > end - pos) {
            rc = KQ_ERR_RECORD_SIZE;
            break;
        }
        stop = pos + size;
        pos++; /* attributes: unused in v2 */
        if (kq_get_varlong(buf, &pos, stop, &ts) || kq_get_varint(buf, &pos, stop, &od)) {
            rc = KQ_ERR_VARINT;
            break;
        }
        if ((rc = kq_get_field(buf, &pos, stop, &ks, &ke))) break;
        if ((rc = kq_get_field(buf, &pos, stop, &vs, &ve))) break;
        if (kq_get_varint(buf, &pos, stop, &nh)) {
            rc = KQ_ERR_VARINT;
            break;
        }
        if (nh < 0 || nh > (stop - pos) / 2) {
            rc = KQ_ERR_COUNT;
            break;
        }
        for (int64_t h = 0; h < nh && rc == 0; h++) {
            int64_t hs, he;
            if ((rc = kq_get_field(buf, &pos, stop, &hs, &he))) break;
            if (he < 0)
                rc = KQ_ERR_HEADER_KEY;
            else if (!utf8_valid(buf + hs, he - hs))
                rc = KQ_ERR_HEADER_UTF8;
            else
                rc = kq_get_field(buf, &pos, stop, &vs, &ve);
        }
        if (rc) break;
        if (pos != stop) {
            rc = KQ_ERR_RECORD_SIZE;
            break;
        }
        if (__builtin_add_overflow(base_timestamp, ts, &ts)) {
            rc = KQ_ERR_OVERFLOW;
            break;
        }
        null_keys += ke < 0;
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
