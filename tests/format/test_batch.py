"""RecordBatch v2 build/parse/decode, checked field by field and against kafka-python."""

import pytest
from kafka.record.default_records import DefaultRecordBatch

from kqlite import Record
from kqlite.errors import CorruptRecordError, InvalidRecordError
from kqlite.format import batch


def test_header_fields_and_kafka_python_reads_it():
    data = batch.build_batch(
        [Record(key=b"k", value=b"v", timestamp=1000, headers=[("h", b"1")]),
         Record(value=b"w", timestamp=1500)],
        base_offset=42, codec="gzip", producer_id=7, producer_epoch=3, base_sequence=11,
        partition_leader_epoch=5, transactional=True)
    h = batch.parse_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.last_offset_delta) == (42, 5, 2, 1)
    assert (h.base_timestamp, h.max_timestamp, h.records_count) == (1000, 1500, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 11)
    assert h.compression == 1 and h.is_transactional and not h.is_control and h.size == len(data)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc() and theirs.base_offset == 42 and theirs.producer_id == 7
    recs = list(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == \
        [(42, 1000, b"k", b"v", [("h", b"1")]), (43, 1500, None, b"w", [])]


def test_base_offset_and_epoch_rewrite_keep_the_crc_valid():
    data = bytearray(batch.build_batch([b"a", b"b"], timestamp=1))
    batch.set_base_offset(data, 0, 1000)
    batch.set_leader_epoch(data, 0, 9)
    header, recs = batch.decode_batch(bytes(data))
    assert header.partition_leader_epoch == 9
    assert [r.offset for r in recs] == [1000, 1001]


def test_crc_mismatch_is_reported():
    data = bytearray(batch.build_batch([b"payload"], timestamp=1))
    data[-2] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        batch.decode_batch(bytes(data))
    assert batch.decode_records(bytes(data), verify=False)  # framing alone is fine


def test_log_append_time_overrides_record_timestamps():
    data = batch.build_batch([Record(value=b"x", timestamp=5)], timestamp=777, timestamp_type=1)
    header, recs = batch.decode_batch(data)
    assert header.timestamp_type == 1 and recs[0].timestamp == 777


def test_bad_input():
    with pytest.raises(InvalidRecordError):
        batch.build_batch([])
    with pytest.raises(InvalidRecordError, match="str"):
        batch.build_batch(["text"])
    with pytest.raises(CorruptRecordError):
        batch.parse_header(b"\0" * 20)
    legacy = bytearray(batch.build_batch([b"x"]))
    legacy[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        batch.parse_header(bytes(legacy))
