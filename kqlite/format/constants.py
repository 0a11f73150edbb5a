"""On-disk and on-wire constants of Kafka's record formats (see docs/format.md).

ON-DISK / WIRE: every value here is defined by Apache Kafka; changing one breaks
compatibility with Kafka's files and clients.
"""

# Magic values (message format versions).
MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

# Compression codecs: attribute bits 0-2.
CODEC_MASK = 0x07
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
               CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

# RecordBatch v2 attribute bits.
TIMESTAMP_TYPE_MASK = 0x08      # 0 CreateTime, 1 LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# Legacy (v0/v1) message attribute bits.
LEGACY_CODEC_MASK = 0x07
LEGACY_TIMESTAMP_TYPE_MASK = 0x08

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# RecordBatch v2 header layout: field offsets from the start of the batch.
BASE_OFFSET_OFFSET = 0          # int64
LENGTH_OFFSET = 8               # int32: bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = 12  # int32
MAGIC_OFFSET = 16               # int8
CRC_OFFSET = 17                 # uint32, CRC-32C of ATTRIBUTES_OFFSET..end
ATTRIBUTES_OFFSET = 21          # int16
LAST_OFFSET_DELTA_OFFSET = 23   # int32
BASE_TIMESTAMP_OFFSET = 27      # int64
MAX_TIMESTAMP_OFFSET = 35       # int64
PRODUCER_ID_OFFSET = 43         # int64
PRODUCER_EPOCH_OFFSET = 51      # int16
BASE_SEQUENCE_OFFSET = 53       # int32
RECORDS_COUNT_OFFSET = 57       # int32
RECORDS_OFFSET = 61
BATCH_OVERHEAD = RECORDS_OFFSET  # a v2 batch with no records is 61 bytes
LOG_OVERHEAD = 12               # baseOffset + length: bytes before the length-counted part

# Legacy message header layout (after the 12-byte offset+size log overhead).
LEGACY_CRC_OFFSET = 12          # uint32 CRC-32 of magic..end
LEGACY_MAGIC_OFFSET = 16
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_V0_MIN_MESSAGE_SIZE = 14  # crc4 magic1 attr1 keylen4 valuelen4
LEGACY_V1_MIN_MESSAGE_SIZE = 22  # + timestamp8

# Index files.
OFFSET_INDEX_ENTRY_SIZE = 8     # int32 relative offset, int32 file position
TIME_INDEX_ENTRY_SIZE = 12      # int64 timestamp, int32 relative offset
