/* One pass over the batch headers of a buffer, summarized: what a process needs
 * to learn after another process appended (kqlite/storage/header_summary.py).
 *
 * Catching up with the ~1,000 batches other processes wrote while one waited for
 * the write lock used to make a Python tuple per batch; this keeps four numbers
 * instead. It accepts exactly the entries kq_scan_batches accepts without CRC
 * checks and stops where it stops, with the same status: the summary is that
 * scan's entries folded, whatever the bytes. Twin: kqlite/_native/pure_summary.py. */
#include "kq_internal.h"

/* Smallest legal length field per magic, as in scan.c (v2: the batch header after
 * the length; v0: crc, magic, attributes, key and value lengths; v1: + timestamp). */
static int32_t summary_min_length(int magic) {
    switch (magic) {
    case 2: return 49;
    case 1: return 22;
    case 0: return 14;
    default: return -1;
    }
}

int kq_summarize_batches(const char *data, int64_t start, int64_t end, int64_t *out) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, n = 0;
    int64_t first_ts = 0, top_ts = 0, top_offset = 0, last = 0;
    int status = KQ_SCAN_OK;
    while (pos < end) {
        if (end - pos < 17) {
            status = KQ_SCAN_TRUNCATED;
            break;
        }
        const uint8_t *e = buf + pos;
        int64_t base = (int64_t)kq_be64(e);
        int32_t length = (int32_t)kq_be32(e + 8);
        int magic = e[16];
        int32_t minimum = summary_min_length(magic);
        int64_t size = (int64_t)length + 12, entry_last, max_ts;
        if (minimum < 0 || length < minimum) {
            status = KQ_SCAN_BAD_HEADER;
            break;
        }
        if (end - pos < size) {
            status = KQ_SCAN_TRUNCATED;
            break;
        }
        if (magic == 2) {
            if (__builtin_add_overflow(base, (int64_t)(int32_t)kq_be32(e + 23),
                                    &entry_last)) {
                status = KQ_SCAN_BAD_HEADER;
                break;
            }
            max_ts = (int64_t)kq_be64(e + 35);
        } else {
            entry_last = base;
            max_ts = magic == 1 ? (int64_t)kq_be64(e + 18) : -1;
        }
        /* The first entry holding the largest timestamp, as a strict '>' finds it. */
        if (n == 0) {
            first_ts = top_ts = max_ts;
            top_offset = entry_last;
        } else if (max_ts > top_ts) {
            top_ts = max_ts;
            top_offset = entry_last;
        }
        last = entry_last;
        n++;
        pos += size;
    }
    out[0] = n;
    out[1] = pos;
    out[2] = first_ts;
    out[3] = top_ts;
    out[4] = top_offset;
    out[5] = last;
    return status;
}
