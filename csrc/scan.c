/* Batch framing/CRC scan over a segment buffer, and the sparse index search.
 * Mirrors scan_batches()/index_search() in kqlite/_native/pure.py exactly. */
#include "kq_internal.h"

#include "kqlite_native.h"

int kq_scan_batches(const uint8_t *buf, int64_t start, int64_t end, int verify_crc,
                    int64_t max_size, int64_t *out, int64_t out_cap, int64_t *count,
                    int64_t *stop) {
    int64_t pos = start, n = 0;
    int status = 0;
    while (pos < end && n < out_cap) {
        if (end - pos < 17) { status = 1; break; }
        int64_t base = (int64_t)kq_be64(buf + pos);
        int32_t length = (int32_t)kq_be32(buf + pos + 8);
        int magic = buf[pos + 16];
        int32_t minimum = magic == 2 ? 49 : magic == 1 ? 22 : magic == 0 ? 14 : -1;
        if (minimum < 0 || length < minimum) { status = 3; break; }
        int64_t size = (int64_t)length + 12;
        if (max_size > 0 && size > max_size) { status = 3; break; }
        if (end - pos < size) { status = 1; break; }
        int64_t last, max_ts;
        if (magic == 2) {
            if (verify_crc && kq_be32(buf + pos + 17) !=
                    kq_crc32c(0, buf + pos + 21, (size_t)(size - 21))) { status = 2; break; }
            last = base + (int32_t)kq_be32(buf + pos + 23);
            max_ts = (int64_t)kq_be64(buf + pos + 35);
        } else {
            if (verify_crc && kq_be32(buf + pos + 12) !=
                    kq_crc32(0, buf + pos + 16, (size_t)(size - 16))) { status = 2; break; }
            last = base;
            max_ts = magic == 1 ? (int64_t)kq_be64(buf + pos + 18) : -1;
        }
        int64_t *o = out + 6 * n++;
        o[0] = pos; o[1] = base; o[2] = last; o[3] = max_ts; o[4] = size; o[5] = magic;
        pos += size;
    }
    *count = n;
    *stop = pos;
    return status;
}

int64_t kq_index_search(const uint8_t *buf, int64_t count, int entry_size, int64_t target) {
    int64_t lo = 0, hi = count - 1, answer = -1;
    while (lo <= hi) {
        int64_t mid = lo + ((hi - lo) >> 1);
        const uint8_t *p = buf + mid * entry_size;
        int64_t key = entry_size == 8 ? (int64_t)(int32_t)kq_be32(p) : (int64_t)kq_be64(p);
        if (key <= target) { answer = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return answer;
}
