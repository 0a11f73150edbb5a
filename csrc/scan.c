/* Framing and CRC scan of a segment's bytes, and the sparse index search.
 *
 * kq_scan_batches is what recovery, the produce path and fetch validation run
 * over whole segments (often an mmap of up to 1 GiB), so it works in place and
 * stops at the first entry it cannot vouch for, saying why. It mirrors
 * scan_batches() in kqlite/_native/pure.py decision for decision. */
#include "kq_internal.h"

/* Smallest legal value of the length field per magic: v2 batch header after the
 * length (49 bytes); v0 crc+magic+attributes+key/value lengths (14); v1 adds
 * an 8-byte timestamp (22). */
static int32_t min_length(int magic) {
    switch (magic) {
    case 2: return 49;
    case 1: return 22;
    case 0: return 14;
    default: return -1;
    }
}

int kq_scan_batches(const char *data, int64_t start, int64_t end, int verify_crc,
                    int64_t max_size, int64_t *out, int64_t out_cap, int64_t *info) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, n = 0;
    int status = KQ_SCAN_OK;
    while (pos < end && n < out_cap) {
        if (end - pos < 17) {
            status = KQ_SCAN_TRUNCATED;
            break;
        }
        const uint8_t *e = buf + pos;
        int64_t base = (int64_t)kq_be64(e);
        int32_t length = (int32_t)kq_be32(e + 8);
        int magic = e[16];
        int32_t minimum = min_length(magic);
        int64_t size = (int64_t)length + 12, last, max_ts;
        if (minimum < 0 || length < minimum || (max_size >= 0 && size > max_size)) {
            status = KQ_SCAN_BAD_HEADER;
            break;
        }
        if (end - pos < size) {
            status = KQ_SCAN_TRUNCATED;
            break;
        }
        if (magic == 2) {
            if (verify_crc && kq_be32(e + 17) != kq_crc32c(0, (const char *)e + 21,
                                                           (size_t)(size - 21))) {
                status = KQ_SCAN_CORRUPT_CRC;
                break;
            }
            /* A last offset past int64 cannot be a real batch. */
            if (__builtin_add_overflow(base, (int64_t)(int32_t)kq_be32(e + 23), &last)) {
                status = KQ_SCAN_BAD_HEADER;
                break;
            }
            max_ts = (int64_t)kq_be64(e + 35);
        } else {
            if (verify_crc && kq_be32(e + 12) != kq_crc32(0, (const char *)e + 16,
                                                          (size_t)(size - 16))) {
                status = KQ_SCAN_CORRUPT_CRC;
                break;
            }
            last = base;
            max_ts = magic == 1 ? (int64_t)kq_be64(e + 18) : -1;
        }
        int64_t *o = out + 6 * n++;
        o[0] = pos;
        o[1] = base;
        o[2] = last;
        o[3] = max_ts;
        o[4] = size;
        o[5] = magic;
        pos += size;
    }
    info[0] = n;
    info[1] = pos;
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
