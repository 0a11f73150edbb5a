/* kqlite C helpers: the whole ABI (also the cffi cdef, so plain C types only).
 * Every function has a pure-Python twin in kqlite/_native/pure.py.
 * Bump KQ_NATIVE_ABI whenever a signature or a meaning below changes. */

#define KQ_NATIVE_ABI 1

int kq_native_abi(void);

/* CRC-32C (Castagnoli) and CRC-32 (IEEE). `crc` is a previous result (0 to
 * start), so kq_crc32c(kq_crc32c(0, a), b) == kq_crc32c(0, a || b). */
uint32_t kq_crc32c(uint32_t crc, const uint8_t *data, size_t len);
uint32_t kq_crc32(uint32_t crc, const uint8_t *data, size_t len);
int kq_crc32c_hardware(void);

/* Kafka v2 records, offsetDelta = index.
 * kq_encode_values: values only (no key, timestampDelta 0, no headers);
 *   lens[i] = value length or -1 for null; data = the non-null values concatenated.
 * kq_encode_records: meta per record = timestampDelta, keyLen, valueLen, headerCount,
 *   then keyLen, valueLen per header (-1 = null); data = the non-null bytes in order.
 * Both write into `out` (caller sizes it with KQ_RECORD_MAX_OVERHEAD per record
 * and KQ_HEADER_MAX_OVERHEAD per header plus the data) and return bytes written. */
int64_t kq_encode_values(const uint8_t *data, const int64_t *lens, int64_t n, uint8_t *out);
int64_t kq_encode_records(const uint8_t *data, const int64_t *meta, int64_t n, uint8_t *out);

/* Decode `count` records of buf[0:len]. rows gets 8 int64 per record: offsetDelta,
 * timestampDelta, keyPos, keyLen, valuePos, valueLen (len -1 = null), firstHeader,
 * headerCount; headers gets 4 per header: keyPos, keyLen, valuePos, valueLen.
 * Returns the number of headers (>= 0), KQ_ERR_HEADERS_FULL with *needed set when
 * header_cap is too small, or another negative KQ_ERR_* code. */
int64_t kq_decode_records(const uint8_t *buf, int64_t len, int64_t count, int64_t *rows,
                          int64_t *headers, int64_t header_cap, int64_t *needed,
                          int64_t *error_pos);

/* Walk log entries in buf[start:end]. out gets 6 int64 per entry: position, baseOffset,
 * lastOffset, maxTimestamp, size, magic. Stops after out_cap entries. Returns the scan
 * status (0 ok, 1 truncated, 2 crc, 3 bad header); *count and *stop are set.
 * max_size <= 0 means no limit. */
int kq_scan_batches(const uint8_t *buf, int64_t start, int64_t end, int verify_crc,
                    int64_t max_size, int64_t *out, int64_t out_cap, int64_t *count,
                    int64_t *stop);

/* Largest slot whose big-endian key (int32 for entry_size 8, int64 for 12) <= target. */
int64_t kq_index_search(const uint8_t *buf, int64_t count, int entry_size, int64_t target);
