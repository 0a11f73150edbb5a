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
    /* Bytes kq_fields_format writes at most per field: two 19-digit numbers, 'x', 's'. */
    KQ_FORMAT_FIELD_MAX = 40,

    /* Error codes (all negative) of the record codec. */
    KQ_ERR_VARINT = -1,          /* truncated, too long, or overflowing varint */
    KQ_ERR_LENGTH = -2,          /* field length < -1 or past the end of its record */
    KQ_ERR_RECORD_SIZE = -3,     /* record length negative, past the end, or != fields used */
    KQ_ERR_COUNT = -4,           /* record count impossible, or bad header count */
    KQ_ERR_TRAILING = -5,        /* bytes left after the last record */
    KQ_ERR_HEADER_KEY = -6,      /* null header key */
    KQ_ERR_OVERFLOW = -7,        /* base + delta does not fit int64 */
    KQ_ERR_HEADERS_FULL = -8,    /* header arrays too small: info[3] says how many */
    KQ_ERR_MISSING = -9,         /* the records end before the declared count */
    KQ_ERR_HEADER_UTF8 = -10,    /* header key is not UTF-8 */
    KQ_ERR_NO_SPACE = -20,       /* encode output buffer too small */
    KQ_ERR_DATA = -21,           /* encode lengths disagree with the data buffer */
    KQ_ERR_TOO_LARGE = -22,      /* encode field or record longer than 2**31 - 1 bytes */

    /* kq_scan_batches statuses, equal to kqlite._native.SCAN_*. */
    KQ_SCAN_OK = 0,
    KQ_SCAN_TRUNCATED = 1,
    KQ_SCAN_CORRUPT_CRC = 2,
    KQ_SCAN_BAD_HEADER = 3,

    /* kq_find_record: no record at or after the wanted offset in the range. */
    KQ_FIND_NONE = 1,

    /* kq_rounds_enter: the caller leads a round now / a round running at the call ended. */
    KQ_ROUND_ENDED = 0,
    KQ_ROUND_LEAD = 1
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

/* kq_encode_values that also sums what it writes while it is in cache: on success
 * *crc_out = kq_crc32c(crc, out, bytes written), so a batch's CRC can start from
 * its header fields and end with its records without a second pass over them. */
int64_t kq_encode_values_crc(const char *data, int64_t data_len, const int64_t *lens, int64_t n,
                             char *out, int64_t out_cap, uint32_t crc, uint32_t *crc_out);

/* Where a list of values is cut into batches, and the batches' sizes: each group
 * is the longest run of the records that follow the last one whose sizes
 * (per_record + lens[i] each, a null -1 counting 0) add up to at most target, and
 * at least one record. ends gets each group's end index (exclusive), sizes the
 * bytes kq_encode_values writes for its records, value_bytes the bytes of its
 * values (what its lengths add up to, nulls counting 0). Returns the number of groups,
 * KQ_ERR_DATA for a length < -1 or a negative per_record or target,
 * KQ_ERR_TOO_LARGE for a record longer than 2**31 - 1 bytes, or KQ_ERR_NO_SPACE
 * when cap groups are too few. */
int64_t kq_cut_values(const int64_t *lens, int64_t n, int64_t per_record, int64_t target,
                      int64_t *ends, int64_t *sizes, int64_t *value_bytes, int64_t cap);

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

/* kq_decode_records over buf[start:end], every position in cols and hcols
 * counted from buf (nulls stay 0, -1; info[0] on error too): a batch is decoded
 * where it lies in a larger read, without copying it out first. */
int kq_decode_records_at(const char *buf, int64_t start, int64_t end, int64_t count,
                         int64_t base_offset, int64_t base_timestamp, int64_t *cols,
                         int64_t *hcols, int64_t hcap, int64_t *info);

/* A struct-module format that unpacks, from position `from` of the decoded
 * buffer, the value (with_keys: the key, then the value) of each record that
 * kq_decode_records(_at) described in cols: "<gap>x<length>s" per field. One
 * struct unpack then makes every bytes object at C speed, where a slice per
 * field would run Python bytecode; batches of the same layout get the same
 * format. Returns the format's length, or -1 when a field is null, fields are
 * out of order or start before `from` (the caller slices instead), or `cap`
 * (>= KQ_FORMAT_FIELD_MAX per field) is too small. Internal to decode_records:
 * its twin is decode_records itself. */
int64_t kq_fields_format(const int64_t *cols, int64_t count, int with_keys, int64_t from,
                         char *fmt, int64_t cap);

/* Walk `count` records of buf[start:end] without decoding them: the checks of
 * kq_decode_records (every length inside its record, a record's length equal to
 * what its fields use, no bytes left over, non-null header keys, base_timestamp +
 * timestampDelta inside int64) plus the UTF-8 check of header keys that the
 * decoder leaves to its Python caller. The caller keeps base_offset + count
 * inside int64, so offsets are not checked. offsets: NULL, or room for `count`
 * int64 that receive the start position of each record (its length varint).
 * info (3 slots): [0] records walked whole, [1] null keys among them, [2] the
 * position after the last record, or of the failing record on error.
 * Returns 0 or KQ_ERR_VARINT, _LENGTH, _RECORD_SIZE, _COUNT (count impossible
 * for the bytes, or a bad header count), _TRAILING, _HEADER_KEY, _HEADER_UTF8,
 * _OVERFLOW or _MISSING. */
int kq_walk_records(const char *buf, int64_t start, int64_t end, int64_t count,
                    int64_t base_timestamp, int64_t *offsets, int64_t *info);

/* kq_walk_records' walk (same checks, same statuses) that also fails with
 * KQ_ERR_OVERFLOW when base_offset + offsetDelta leaves int64, and leaves marks:
 * three int64 (offsetDelta, start position, record index) for the first record
 * and then for each record starting `stride` or more bytes after the previous
 * mark, at most `cap` of them. info (4 slots): [0] records walked whole, [1]
 * marks written, [2] as kq_walk_records' info[2], [3] 1 if the offsetDeltas
 * strictly rise from record to record (else marks cannot be searched). */
int kq_record_marks(const char *buf, int64_t start, int64_t end, int64_t count,
                    int64_t base_offset, int64_t base_timestamp, int64_t stride,
                    int64_t *marks, int64_t cap, int64_t *info);

/* From the record boundary `start`, walk at most `count` records of buf[start:end]
 * to the first whose base_offset + offsetDelta >= target, reading only the
 * framing (length, timestampDelta, offsetDelta) of those before it; that record is
 * checked as the decoder checks it (header keys' UTF-8 is left to the caller).
 * Returns 0 with info (10 slots) = records passed, its start, its end, its offset,
 * its timestamp (base_timestamp + delta), key start, key stop, value start, value
 * stop (null: 0, -1), header count; KQ_FIND_NONE (info[0] records passed, info[1]
 * where the walk stopped) when the range ends first; or a KQ_ERR_* code. */
int kq_find_record(const char *buf, int64_t start, int64_t end, int64_t count,
                   int64_t target, int64_t base_offset, int64_t base_timestamp,
                   int64_t *info);

/* Walk log entries (magic 0, 1, 2) in buf[start:end]. out gets 6 int64 per entry:
 * position, baseOffset, lastOffset, maxTimestamp, size, magic. Stops after out_cap
 * entries. max_size < 0 means no limit. Returns a KQ_SCAN_* status and sets
 * info[0] = entries written, info[1] = position after the last one. */
int kq_scan_batches(const char *buf, int64_t start, int64_t end, int verify_crc,
                    int64_t max_size, int64_t *out, int64_t out_cap, int64_t *info);

/* The extent a fetch at from_offset returns from the entries kq_scan_batches(buf,
 * start, end, verify_crc 0) finds: passing over entries whose last offset is below
 * from_offset, the entries from the first other one on, up to the first whose last
 * offset is >= limit and while their total stays <= max_bytes (the first always
 * counts). info: [0] the first entry's position (-1: none yet), [1] their total
 * size, [2] where the scan stopped. Returns KQ_EXTENT_DONE once the extent is
 * complete, else the scan status where buf ran out (KQ_SCAN_OK: at end). */
enum { KQ_EXTENT_DONE = 4 };
int kq_scan_extent(const char *buf, int64_t start, int64_t end, int64_t from_offset,
                   int64_t limit, int64_t max_bytes, int64_t *info);

/* kq_scan_batches(buf, start, end, verify_crc 0, no max_size)'s entries folded
 * (csrc/summary.c): out (6 slots) = [0] entries, [1] position after the last one,
 * [2] the first one's maxTimestamp, [3] the largest maxTimestamp, [4] the
 * lastOffset of the first entry holding it, [5] the last one's lastOffset (slots
 * 2..5 mean nothing without entries). Returns kq_scan_batches' status. */
int kq_summarize_batches(const char *buf, int64_t start, int64_t end, int64_t *out);

/* Largest slot whose big-endian key (int32 for entry_size 8, int64 for 12) is
 * <= target, or -1. The caller guarantees count * entry_size bytes. */
int64_t kq_index_search(const char *buf, int64_t count, int entry_size, int64_t target);

/* Arrow columns (csrc/arrow.c), for the Spark data source. */
enum {
    /* kq_arrow_decode's output buffers, in this order in `cols`. */
    KQ_AC_OFFSET = 0,           /* int64 */
    KQ_AC_TIMESTAMP = 1,        /* int64 microseconds */
    KQ_AC_KEY_VALID = 2,        /* validity bitmap, then int32 offsets, then bytes */
    KQ_AC_KEY_OFFSETS = 3,
    KQ_AC_KEY_DATA = 4,
    KQ_AC_VALUE_VALID = 5,
    KQ_AC_VALUE_OFFSETS = 6,
    KQ_AC_VALUE_DATA = 7,
    KQ_AC_LIST_OFFSETS = 8,     /* int32 offsets of each row's headers */
    KQ_AC_HKEY_OFFSETS = 9,     /* header keys: int32 offsets, bytes (never null) */
    KQ_AC_HKEY_DATA = 10,
    KQ_AC_HVALUE_VALID = 11,    /* header values: validity, int32 offsets, bytes */
    KQ_AC_HVALUE_OFFSETS = 12,
    KQ_AC_HVALUE_DATA = 13,
    KQ_AC_COLUMNS = 14,
    /* fill slots: rows, key bytes, value bytes, headers, header key bytes, header
     * value bytes, null keys, null values, null header values. */
    KQ_ARROW_FILL = 9
};

/* Append the records of one v2 batch's records region buf[0:len] (`count`
 * records) whose offsets lie in [lo, hi) to Arrow-layout columns: cols[k] has
 * caps[k] bytes; fill (KQ_ARROW_FILL slots) says how much of them is used and is
 * advanced only on success, so a call that fails can be repeated with larger
 * buffers. The caller has written 0 at index 0 of every offsets buffer.
 * Timestamps are base_timestamp + timestampDelta, or fixed_timestamp for every
 * record when use_fixed (LogAppendTime), in microseconds. Header buffers are
 * written only when with_headers. A record at or past `hi` ends the call
 * (info[0] = 1); info[1] = rows appended. Returns 0, KQ_ERR_NO_SPACE,
 * KQ_ERR_TOO_LARGE (an int32 offset would overflow), KQ_ERR_OVERFLOW (an offset
 * or a timestamp in microseconds outside int64) or kq_walk_records' error for
 * bytes the record decoder refuses. */
int kq_arrow_decode(const char *data, int64_t len, int64_t count, int64_t base_offset,
                    int64_t base_timestamp, int64_t fixed_timestamp, int use_fixed,
                    int64_t lo, int64_t hi, int with_headers, char **cols,
                    const int64_t *caps, int64_t *fill, int64_t *info);

/* kq_arrow_decode over the whole batches of data[start:len) as the Spark readers
 * walk them (CRC checked, offsets rising, records below lo skipped, the first at
 * or past hi ending the read), with prev / has_prev the last offset of the batch
 * before start. A control batch gives no rows; with txn_aside a transactional or
 * control batch with a producer id is set aside (a read_committed filter must see
 * it), as is anything else the reader takes through its per-batch path: damaged
 * bytes, a legacy entry, offsets out of order, a compressed batch, records
 * kq_arrow_decode refuses. The call ends there, at the end of data, once a batch
 * leaves fill[0] >= max_rows or the binary bytes >= max_data, or when hi is
 * reached. info: [0] the position reached (of the batch set aside or to retry),
 * [1] lo past the batches done, [2] prev, [3] has_prev, [4] KQ_RUN_*. Returns 0
 * or KQ_ERR_NO_SPACE (grow the buffers and call again from info[0]). */
enum {
    KQ_RUN_END = 0,             /* every whole batch of data is done */
    KQ_RUN_ASIDE = 1,           /* the batch at info[0] goes through the per-batch path */
    KQ_RUN_FULL = 2,            /* max_rows or max_data reached */
    KQ_RUN_STOPPED = 3          /* hi reached: the read is complete */
};
int kq_arrow_decode_run(const char *data, int64_t len, int64_t start, int64_t lo, int64_t hi,
                        int64_t prev, int has_prev, int txn_aside, int64_t max_rows,
                        int64_t max_data, int with_headers, char **cols, const int64_t *caps,
                        int64_t *fill, int64_t *info);

/* Rows [lo, hi) of Arrow columns as v2 records (attributes 0, offsetDelta = row -
 * lo, timestampDelta = timestamps[row] - base_timestamp or 0 without timestamps),
 * the bytes kq_encode_records writes for the same records. A binary column is
 * (validity bitmap or NULL for no nulls, int32 offsets, bytes), all with Arrow
 * offset 0; NULL offsets mean an absent (all-null) key column. list_offsets NULL
 * means no headers; header keys have no nulls. Returns the bytes written,
 * KQ_ERR_NO_SPACE or KQ_ERR_TOO_LARGE. */
int64_t kq_arrow_encode(int64_t lo, int64_t hi, const char *key_valid, const char *key_offsets,
                        const char *key_data, const char *value_valid,
                        const char *value_offsets, const char *value_data,
                        const int64_t *timestamps, int64_t base_timestamp,
                        const char *list_offsets, const char *hkey_offsets,
                        const char *hkey_data, const char *hvalue_valid,
                        const char *hvalue_offsets, const char *hvalue_data,
                        char *out, int64_t out_cap);

/* Kafka's default partition of each row's key: (murmur2(key) & 0x7fffffff) %
 * partitions, or -1 for a null key. */
void kq_arrow_partitions(const char *key_valid, const char *key_offsets, const char *key_data,
                         int64_t rows, int32_t partitions, int32_t *out);

/* Group commit's rendezvous (csrc/rounds.c; twin: kqlite/_native/pure_rounds.py).
 * kq_rounds_writing adds delta to the threads between the start of a syncing
 * append and the end of its write. kq_rounds_enter: if a round is running, waits
 * for it to end and returns KQ_ROUND_ENDED; otherwise the caller leads: it waits
 * at most gather_ns for writers to finish and for as many threads as the last
 * round covered to join, and returns KQ_ROUND_LEAD. The leader runs its round,
 * then calls kq_rounds_leave, which wakes the waiters. kq_rounds_new returns NULL
 * when out of memory. */
typedef struct kq_rounds kq_rounds;
kq_rounds *kq_rounds_new(void);
void kq_rounds_free(kq_rounds *r);
void kq_rounds_writing(kq_rounds *r, int delta);
int kq_rounds_enter(kq_rounds *r, int64_t gather_ns);
void kq_rounds_leave(kq_rounds *r);

#endif
