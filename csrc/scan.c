/* Framing and CRC scan of a segment's bytes, and the sparse index search.
 *
 * kq_scan_batches is what recovery, the produce path and fetch validation run
 * over whole segments (often an mmap of up to 1 GiB), so it works in place and
 * stops at the first entry it cannot vouch for, saying why. It mirrors
 * scan_batches() in kqlite/_native/pure_codec.py decision for decision. */
#include "kq_internal.h"

int kq_scan_batches(const char *data, int64_t start, int64_t end, int verify_crc,
                    int64_t max_size, int64_t *out, int64_t out_cap, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, n = 0;
    int status = KQ_SCAN_OK;
    kq_entry en;
    while (pos < end && n < out_cap) {
        status = kq_entry_frame(buf, pos, end, max_size, &en);
        if (status != KQ_SCAN_OK)
            break;
        const uint8_t *e = buf + pos;
        int64_t size = en.size;
        if (verify_crc && (en.magic == 2
                ? kq_be32(e + 17) != kq_crc32c(0, (const char *)e + 21, (size_t)(size - 21))
                : kq_be32(e + 12) != kq_crc32(0, (const char *)e + 16, (size_t)(size - 16)))) {
            status = KQ_SCAN_CORRUPT_CRC;
            break;
        }
        status = kq_entry_offsets(e, &en);
        if (status != KQ_SCAN_OK)
            break;
        int64_t *o = out + 6 * n++;
        o[0] = pos;
        o[1] = en.base;
        o[2] = en.last;
        o[3] = en.max_ts;
        o[4] = size;
        o[5] = en.magic;
        pos += size;
    }
    info[0] = n;
    info[1] = pos;
    return status;
}

int kq_scan_extent(const char *data, int64_t start, int64_t end, int64_t from_offset,
                   int64_t limit, int64_t max_bytes, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, first = -1, total = 0;
    int status = KQ_SCAN_OK;
    kq_entry en;
    while (pos < end) {
        status = kq_entry_frame(buf, pos, end, -1, &en);
        if (status == KQ_SCAN_OK) status = kq_entry_offsets(buf + pos, &en);
        if (status != KQ_SCAN_OK) break;
        if (en.last >= from_offset) {
            if (en.last >= limit || (first >= 0 && total + en.size > max_bytes)) {
                status = KQ_EXTENT_DONE;
                break;
            }
            if (first < 0) first = pos;
            total += en.size;
            if (total >= max_bytes) {                   /* no further entry can fit */
                pos += en.size;
                status = KQ_EXTENT_DONE;
                break;
            }
        }
        pos += en.size;
    }
    info[0] = first;
    info[1] = total;
    info[2] = pos;
    return status;
}

int64_t kq_index_search(const char *data, int64_t count, int entry_size, int64_t target) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t lo = 0, hi = count - 1, answer = -1;
    while (lo <= hi) {
        int64_t mid = lo + ((hi - lo) >> 1);
        const uint8_t *p = buf + mid * entry_size;
        int64_t key = entry_size == 8 ? (int64_t)(int32_t)kq_be32(p) : (int64_t)kq_be64(p);
        if (key <= target) {
            answer = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return answer;
}
