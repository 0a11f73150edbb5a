/* kqlite C helpers: the whole C ABI, plain C types only.
 *
 * This header is also the cffi cdef (csrc/build_native.py drops the '#' lines),
 * so it must stay cdef-clean: declarations, enums, comments. Every function has
 * a pure-Python twin in kqlite/_native/pure.py and kqlite/_native/_c.py wraps
 * these into the same Python signatures.
 *
 * The ABI number KQLITE_NATIVE_ABI lives in csrc/build_native.py and
 * kqlite/_native/_c.py; bump both whenever a declaration or a meaning here
 * changes, so that a stale build is refused at import instead of misused. */
#ifndef KQLITE_NATIVE_H
#define KQLITE_NATIVE_H
#include <stddef.h>
#include <stdint.h>

enum {
    /* Bytes of framing one record can add to its key/value/header bytes, and one
     * header to its key/value bytes: 32-bit varints take <= 5 bytes, the
     * timestampDelta varlong <= 10. Output buffers are sized with these. */
    KQ_RECORD_MAX_OVERHEAD = 36,
    KQ_HEADER_MAX_OVERHEAD = 10,

    /* Error codes (all negative) of the record codec. */
    KQ_ERR_VARINT = -1,          /* truncated, too long, or overflowing varint */
    KQ_ERR_LENGTH = -2,          /* field length < -1 or past the end of its record */
    KQ_ERR_RECORD_SIZE = -3,     /* record length negative, past the end, or != fields used */
    KQ_ERR_COUNT = -4,           /* record count impossible, or bad header count */
    KQ_ERR_TRAILING = -5,        /* bytes left after the last record */
    KQ_ERR_HEADER_KEY = -6,      /* null header key */
    KQ_ERR_OVERFLOW = -7,        /* base + delta does not fit int64 */
    KQ_ERR_HEADERS_FULL = -8,    /* header arrays too small: info[3] says how many */
    KQ_ERR_NO_SPACE = -20,       /* encode output buffer too small */
    KQ_ERR_DATA = -21,           /* encode lengths disagree with the data buffer */
    KQ_ERR_TOO_LARGE = -22,      /* encode field or record longer than 2**31 - 1 bytes */

    /* kq_scan_batches statuses, equal to kqlite._native.SCAN_*. */
    KQ_SCAN_OK = 0,
    KQ_SCAN_TRUNCATED = 1,
    KQ_SCAN_CORRUPT_CRC = 2,
    KQ_SCAN_BAD_HEADER = 3
};

/* CRC-32C (Castagnoli) and CRC-32 (IEEE, zlib's). `crc` is a previous result (0
 * to start): kq_crc32c(kq_crc32c(0, a), b) == kq_crc32c(0, a || b).
 * kq_crc32c_portable is the table path the dispatcher falls back to without
 * SSE4.2 (exposed so tests can check it on any CPU); kq_crc32c_hardware says
 * whether kq_crc32c uses the crc32 instruction. */
uint32_t kq_crc32c(uint32_t crc, const char *data, size_t len);
uint32_t kq_crc32c_portable(uint32_t crc, const char *data, size_t len);
uint32_t kq_crc32(uint32_t crc, const char *data, size_t len);
int kq_crc32c_hardware(void);

/* Kafka v2 records with attributes 0 and offsetDelta = index.
 * kq_encode_values: values only (null key, timestampDelta 0, no headers);
 *   lens[i] = value length or -1 for null; data = the non-null values concatenated.
 * kq_encode_records: meta per record = timestampDelta, keyLen, valueLen, headerCount,
 *   then keyLen, valueLen per header (-1 = null); data = all non-null bytes in order.
 * Both check every length against data_len (never reading past it) and the
 * output against out_cap; they return the bytes written or a KQ_ERR_* code. */
int64_t kq_encode_values(const char *data, int64_t data_len, const int64_t *lens, int64_t n,
                         char *out, int64_t out_cap);
int64_t kq_encode_records(const char *data, int64_t data_len, const int64_t *meta,
                          int64_t meta_len, int64_t n, char *out, int64_t out_cap);

/* Decode `count` records of buf[0:len], reading nothing outside it.
 * cols holds 7 columns of `count` int64 (column k of record i at cols[k*count+i]):
 *   offset, timestamp (base + delta), keyStart, keyStop, valueStart, valueStop,
 *   headerCount; a null key or value has start 0 and stop -1.
 * hcols holds 4 columns of hcap: keyStart, keyStop, valueStart, valueStop of each
 *   header in record order (header keys are never null).
 * info (6 slots) gets: [0] byte position of the failing record (on error),
 *   [1] null keys, [2] null values, [3] total headers, [4] 1 if every offsetDelta
 *   equals the record's index, [5] 1 if every timestampDelta equals the first.
 * Returns 0, KQ_ERR_HEADERS_FULL (everything validated; call again with
 * hcap >= info[3]) or another KQ_ERR_* code. */
int kq_decode_records(const char *buf, int64_t len, int64_t count, int64_t base_offset,
                      int64_t base_timestamp, int64_t *cols, int64_t *hcols, int64_t hcap,
                      int64_t *info);

/* Walk log entries (magic 0, 1, 2) in buf[start:end]. out gets 6 int64 per entry:
 * position, baseOffset, lastOffset, maxTimestamp, size, magic. Stops after out_cap
 * entries. max_size < 0 means no limit. Returns a KQ_SCAN_* status and sets
 * info[0] = entries written, info[1] = position after the last one. */
int kq_scan_batches(const char *buf, int64_t start, int64_t end, int verify_crc,
                    int64_t max_size, int64_t *out, int64_t out_cap, int64_t *info);

/* Largest slot whose big-endian key (int32 for entry_size 8, int64 for 12) is
 * <= target, or -1. The caller guarantees count * entry_size bytes. */
int64_t kq_index_search(const char *buf, int64_t count, int entry_size, int64_t target);

#endif
