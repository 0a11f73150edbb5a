/* One pass over the batch headers of a buffer, summarized: what a process needs
 * to learn after another process appended (kqlite/storage/header_summary.py).
 *
 * Catching up with the ~1,000 batches other processes wrote while one waited for
 * the write lock used to make a Python tuple per batch; this keeps four numbers
 * instead. It accepts exactly the entries kq_scan_batches accepts without CRC
 * checks and stops where it stops, with the same status: the summary is that
 * scan's entries folded, whatever the bytes. Twin: kqlite/_native/pure_summary.py. */
#include "kq_internal.h"

int kq_summarize_batches(const char *data, int64_t start, int64_t end, int64_t *out) {
    const uint8_t *buf = (const uint8_t *)data;
    int64_t pos = start, n = 0;
    int64_t first_ts = 0, top_ts = 0, top_offset = 0, last = 0;
    int status = KQ_SCAN_OK;
    kq_entry en;
    while (pos < end) {
        status = kq_entry_frame(buf, pos, end, -1, &en);
        if (status == KQ_SCAN_OK)
            status = kq_entry_offsets(buf + pos, &en);
        if (status != KQ_SCAN_OK)
            break;
        /* The first entry holding the largest timestamp, as a strict '>' finds it. */
        if (n == 0) {
            first_ts = top_ts = en.max_ts;
            top_offset = en.last;
        } else if (en.max_ts > top_ts) {
            top_ts = en.max_ts;
            top_offset = en.last;
        }
        last = en.last;
        n++;
        pos += en.size;
    }
    out[0] = n;
    out[1] = pos;
    out[2] = first_ts;
    out[3] = top_ts;
    out[4] = top_offset;
    out[5] = last;
    return status;
}
