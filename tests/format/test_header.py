"""BatchHeader, the one type of a v2 batch header: decoded from and encoded to bytes laid
out by hand from Kafka's DefaultRecordBatch offsets (not from kqlite's struct layout),
its RecordBatch accessors, what the transactions work needs of a control batch, a
legacy entry seen through the same fields, and the refusals."""

import crcmod.predefined
import pytest

from kqlite import Record
from kqlite.errors import CorruptRecordError
from kqlite.format import BatchHeader, parse_header
from kqlite.format.batch import build_batch, decode_records
from kqlite.format.down_convert import legacy_message
from kqlite.format.legacy import legacy_header

# Kafka's DefaultRecordBatch: (field, offset, size in bytes, signed).
KAFKA_LAYOUT = [
    ("base_offset", 0, 8, True), ("batch_length", 8, 4, True),
    ("partition_leader_epoch", 12, 4, True), ("magic", 16, 1, True), ("crc", 17, 4, False),
    ("attributes", 21, 2, True), ("last_offset_delta", 23, 4, True),
    ("base_timestamp", 27, 8, True), ("max_timestamp", 35, 8, True),
    ("producer_id", 43, 8, True), ("producer_epoch", 51, 2, True),
    ("base_sequence", 53, 4, True), ("records_count", 57, 4, True),
]
RECORDS_OFFSET = 61

FIELDS = dict(base_offset=2 ** 40 + 7, batch_length=49 + 1000, partition_leader_epoch=-1,
              magic=2, crc=0xF00DFACE, attributes=0x7F, last_offset_delta=41,
              base_timestamp=-5, max_timestamp=2 ** 62, producer_id=-(2 ** 63),
              producer_epoch=32767, base_sequence=2 ** 31 - 3, records_count=42)


def packed_by_hand(fields):
    out = bytearray(RECORDS_OFFSET)
    for name, offset, size, signed in KAFKA_LAYOUT:
        out[offset:offset + size] = fields[name].to_bytes(size, "big", signed=signed)
    return bytes(out)


def test_decode_and_encode_round_trip_kafkas_layout():
    raw = packed_by_hand(FIELDS)
    assert [name for name, *_ in KAFKA_LAYOUT] == list(BatchHeader._fields)
    header = parse_header(b"xyz" + raw, 3)
    assert header._asdict() == FIELDS
    assert header.encode() == raw and isinstance(header.encode(), bytearray)
    assert BatchHeader(**FIELDS) == header
    assert parse_header(header.encode()) == header


def test_the_accessors_are_kafkas_record_batch_ones():
    header = BatchHeader(**FIELDS)
    assert header.size == 1049 + 12                          # sizeInBytes
    assert header.last_offset == 2 ** 40 + 48                # baseOffset + lastOffsetDelta
    assert header.compression == 7                           # attribute bits 0-2
    assert header.timestamp_type == 1                        # bit 3: LogAppendTime
    assert header.is_transactional and header.is_control     # bits 4 and 5
    assert header.delete_horizon_ms == -5                    # bit 6: baseTimestamp is it
    assert header.last_sequence == 38                        # wraps after 2**31 - 1
    plain = header._replace(attributes=0, base_sequence=-1)
    assert (plain.compression, plain.timestamp_type, plain.is_transactional,
            plain.is_control, plain.delete_horizon_ms, plain.last_sequence) == \
        (0, 0, False, False, None, -1)


def test_encode_for_computes_the_length_and_crc_of_the_records_that_follow():
    built = build_batch([b"a", b"bc"], base_offset=9, timestamp=1_000, producer_id=4,
                        producer_epoch=1, base_sequence=0, transactional=True,
                        partition_leader_epoch=3)
    header = parse_header(built)
    records = built[RECORDS_OFFSET:]
    stale = header._replace(batch_length=0, crc=0)
    head = stale.encode_for(records)
    assert bytes(head) + records == built
    crc32c = crcmod.predefined.mkCrcFun("crc-32c")
    assert parse_header(head).crc == crc32c(bytes(head[21:]) + records)
    assert parse_header(head).batch_length == len(built) - 12


def test_a_control_batch_exposes_what_a_transaction_marker_reader_needs():
    # The transactions work parses the marker itself (its key: version, type); the header
    # says the batch is a control batch of a transaction and whose, and locates its record.
    marker_key = (0).to_bytes(2, "big") + (1).to_bytes(2, "big")     # version 0, COMMIT
    built = build_batch([Record(value=b"\0\0\0\0\0\0", key=marker_key)], base_offset=20,
                        timestamp=7, producer_id=99, producer_epoch=3, transactional=True,
                        control=True)
    header = parse_header(built)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset,
            header.last_offset) == (99, 3, 20, 20)
    (record,) = decode_records(built, 0, header)
    assert record.key == marker_key


def test_a_legacy_entry_through_the_same_fields():
    v0 = legacy_message(0, 5, -1, b"k", b"v")
    v1 = legacy_message(1, 6, 1_234, None, b"v", attributes=0x08 | 0x02)   # snappy, LAT
    h0, h1 = legacy_header(v0), legacy_header(v1)
    assert (h0.magic, h0.base_offset, h0.last_offset, h0.size, h0.records_count) == \
        (0, 5, 5, len(v0), 1)
    assert (h0.base_timestamp, h0.max_timestamp) == (-1, -1)
    assert (h1.magic, h1.base_offset, h1.compression, h1.timestamp_type, h1.records_count,
            h1.max_timestamp) == (1, 6, 2, 1, -1, 1_234)
    for h in (h0, h1):
        assert (h.partition_leader_epoch, h.producer_id, h.producer_epoch,
                h.base_sequence) == (-1, -1, -1, -1)
        assert not h.is_transactional and not h.is_control
    assert h0.crc == int.from_bytes(v0[12:16], "big")


def test_refusals():
    raw = packed_by_hand(FIELDS)
    with pytest.raises(CorruptRecordError, match="shorter than a batch header"):
        parse_header(raw[:60])
    with pytest.raises(CorruptRecordError, match="magic 1 is not a v2"):
        parse_header(raw[:16] + b"\x01" + raw[17:])
    with pytest.raises(CorruptRecordError, match="legacy message with magic 2"):
        legacy_header(raw)
