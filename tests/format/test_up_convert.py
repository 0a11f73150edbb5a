"""Up-conversion of produced legacy message sets (magic 0/1, built by kafka-python's
LegacyRecordBatchBuilder, an independent implementation) to one v2 batch: the records come
through as Kafka's LogValidator converts them, the batch passes the client validation of
format/validate.py and decodes with kafka-python's DefaultRecordBatch; every malformed set
is refused with the error Kafka answers."""

import struct
import zlib

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kqlite.errors import CorruptRecordError, InvalidRecordError, UnsupportedCodecError
from kqlite.format import compression
from kqlite.format.batch import decode_batch
from kqlite.format.up_convert import is_legacy, up_convert
from kqlite.format.validate import validate_batches

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
T0 = 1_700_000_000_000
ITEMS = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"k3", b"v" * 300)]


def legacy(magic, codec, items=ITEMS, timestamps=None):
    """A message set as a pre-0.11 producer sends it (kafka-python's builder)."""
    if timestamps is None:
        timestamps = [T0 + 5 * i for i in range(len(items))]
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 24)
    for i, ((key, value), ts) in enumerate(zip(items, timestamps)):
        assert builder.append(i, timestamp=ts if magic else None, key=key, value=value)
    return bytes(builder.build())


def message(magic, key, value, *, attributes=0, offset=0, timestamp=T0):
    """One legacy message entry, framed and with its CRC-32."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def wrapper(magic, codec, inner, *, attributes=None, offset=0, timestamp=T0):
    value = None if inner is None else compression.compress(codec, inner)
    return message(magic, None, value, offset=offset, timestamp=timestamp,
                   attributes=codec if attributes is None else attributes)


def converted(data):
    """(header, records) of the converted batch, checked as a producer's v2 batch."""
    out = up_convert(data)
    [validated] = validate_batches(out)
    header, records = decode_batch(out)
    assert (validated.records_count, header.records_count) == (len(records), len(records))
    return header, records


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_records_keep_keys_values_and_timestamps(magic, codec):
    if codec == LZ4 and magic == 0:
        pytest.importorskip("xxhash", reason="kafka-python needs xxhash for magic-0 lz4")
    header, records = converted(legacy(magic, codec))
    assert [(r.key, r.value) for r in records] == ITEMS
    assert [r.offset for r in records] == list(range(len(ITEMS)))
    expected_ts = [T0 + 5 * i for i in range(len(ITEMS))] if magic else [-1] * len(ITEMS)
    assert [r.timestamp for r in records] == expected_ts
    assert header.compression == codec
    assert (header.base_offset, header.producer_id, header.base_sequence) == (0, -1, -1)
    assert header.timestamp_type == 0
    assert header.max_timestamp == max(expected_ts)


def test_kafka_python_reads_the_converted_batch():
    out = up_convert(legacy(1, GZIP))
    batch = DefaultRecordBatch(bytearray(out))
    assert batch.validate_crc()
    assert [(r.key, r.value, r.timestamp) for r in batch] == \
        [(k, v, T0 + 5 * i) for i, (k, v) in enumerate(ITEMS)]


def test_log_append_time_marks_the_batch():
    data = bytearray(wrapper(1, GZIP, legacy(1, NONE)))
    data[17] |= 0x08                                   # the wrapper says LogAppendTime
    struct.pack_into(">q", data, 18, T0 + 999)
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    header, records = converted(bytes(data))
    assert header.timestamp_type == 1 and header.max_timestamp == T0 + 999
    assert {r.timestamp for r in records} == {T0 + 999}


def test_uncompressed_log_append_time_message_marks_the_batch():
    data = message(1, b"k", b"v", timestamp=T0) + \
        message(1, b"k", b"w", timestamp=T0 + 3, attributes=0x08)
    header, _records = converted(data)
    assert header.timestamp_type == 1 and header.max_timestamp == T0 + 3


def test_is_legacy():
    assert is_legacy(legacy(0, NONE)) and is_legacy(legacy(1, GZIP))
    assert not is_legacy(up_convert(legacy(1, NONE)))
    assert not is_legacy(b"")


@pytest.mark.parametrize("data, reason", [
    (b"", "no message set"),
    (legacy(0, NONE) + legacy(1, NONE), "magic 1, not the magic 0"),
    (legacy(1, GZIP) + legacy(1, GZIP), "one wrapper message"),
    (legacy(1, NONE) + legacy(1, GZIP), "one wrapper message"),
    (wrapper(1, GZIP, None), "no value"),
    (wrapper(1, GZIP, legacy(0, NONE)), "inner message has magic 0"),
    (wrapper(1, GZIP, legacy(1, SNAPPY)), "itself compressed"),
    (wrapper(1, GZIP, legacy(1, NONE), offset=2), "below its last inner offset"),
    (message(1, None, b"zstd bytes", attributes=ZSTD), "zstd"),
], ids=["empty", "mixed-magic", "two-wrappers", "plain-then-wrapper", "null-wrapper",
        "inner-magic", "nested", "wrapper-offset", "zstd"])
def test_invalid_sets_are_invalid_record(data, reason):
    with pytest.raises(InvalidRecordError, match=reason):
        up_convert(data)


def test_empty_wrapper_is_invalid_record():
    # gzip of nothing: a valid stream holding no inner message.
    with pytest.raises(InvalidRecordError, match="no inner message"):
        up_convert(message(1, None, compression.compress(GZIP, b""), attributes=GZIP))


def _flip(data, at):
    damaged = bytearray(data)
    damaged[at] ^= 0xFF
    return bytes(damaged)


@pytest.mark.parametrize("data", [
    _flip(legacy(1, NONE), -1),                                    # outer CRC
    legacy(1, NONE)[:-3],                                          # partial entry at the end
    message(1, None, b"not gzip", attributes=GZIP),                # does not decompress
    wrapper(1, GZIP, _flip(legacy(1, NONE), -1)),                  # inner CRC
    wrapper(1, GZIP, legacy(1, NONE)[:-2]),                        # partial inner message
    legacy(1, NONE)[:12] + struct.pack(">i", 3) + legacy(1, NONE)[16:],   # size below minimum
], ids=["crc", "partial", "not-gzip", "inner-crc", "inner-partial", "short-size"])
def test_corrupt_sets_are_corrupt_message(data):
    with pytest.raises(CorruptRecordError):
        up_convert(data)


def test_unknown_codec_is_unsupported():
    with pytest.raises(UnsupportedCodecError):
        up_convert(message(1, None, b"x", attributes=6))


def test_decompression_is_bounded():
    big = legacy(1, NONE, items=[(None, b"\0" * 100_000)] * 20)
    with pytest.raises(CorruptRecordError):
        up_convert(wrapper(1, GZIP, big), max_uncompressed=1 << 20)
