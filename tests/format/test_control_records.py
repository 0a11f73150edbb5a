"""Transaction markers: the 78-byte control batch equals bytes packed by hand from
Kafka's schemas (DefaultRecordBatch, DefaultRecord, ControlRecordType,
EndTransactionMarker), both directions; kafka-python reads ours; reading is as
lenient as Kafka's (and stricter where Kafka is strict)."""

import struct

import crcmod.predefined
import pytest
from kafka.record.default_records import DefaultRecordBatch

from kqlite.errors import InvalidRecordError
from kqlite.format import parse_header
from kqlite.format.batch import build_batch
from kqlite.format.control_records import (
    ABORT, COMMIT, CONTROL_BATCH_SIZE, UNKNOWN, EndTransactionMarker, build_control_batch,
    control_key, control_type, marker_value, parse_marker_value, read_marker)
from kqlite.format.record import Record
from kqlite.format.rewrite import empty_batch
from kqlite.format.validate import AppendOrigin, validate_batches

_crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def hand_packed_marker(producer_id, epoch, coordinator_epoch, type_id, ts, base_offset=0,
                       leader_epoch=-1, key_version=0, value_version=0):
    """A control batch packed field by field from Kafka's schemas, the CRC by crcmod."""
    key = struct.pack(">hh", key_version, type_id)
    value = struct.pack(">hi", value_version, coordinator_epoch)
    # DefaultRecord: length, attributes, timestampDelta, offsetDelta, keyLength, key,
    # valueLength, value, header count -- varints zigzag-encoded.
    body = bytes([0x00, 0x00, 0x00, 0x08]) + key + bytes([0x0C]) + value + bytes([0x00])
    record = bytes([len(body) << 1]) + body
    after_crc = struct.pack(">hiqqqhii", 0x0030, 0, ts, ts, producer_id, epoch, -1, 1) + record
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), leader_epoch, 2,
                       _crc32c(after_crc)) + after_crc


def test_a_commit_marker_with_coordinator_epoch_5_byte_for_byte():
    built = build_control_batch(4242, 3, 5, True, 1_700_000_000_000)
    assert bytes(built) == hand_packed_marker(4242, 3, 5, COMMIT, 1_700_000_000_000)
    assert len(built) == CONTROL_BATCH_SIZE == 78
    # The record exactly as docs/format.md (and the notes' section 3.1) spell it.
    assert bytes(built[61:]).hex() == "2000000008000000010c00000000000500"
    header = parse_header(built)
    assert (header.batch_length, header.attributes, header.last_offset_delta,
            header.base_sequence, header.records_count) == (66, 0x30, 0, -1, 1)
    assert header.is_control and header.is_transactional


def test_an_abort_marker_byte_for_byte_and_back():
    hand = hand_packed_marker(7, 0, 0, ABORT, 123, base_offset=40, leader_epoch=2)
    built = build_control_batch(7, 0, 0, False, 123, base_offset=40, partition_leader_epoch=2)
    assert bytes(built) == hand
    assert read_marker(hand) == EndTransactionMarker(ABORT, 0)
    assert read_marker(hand).is_abort and not read_marker(hand).is_commit
    assert read_marker(hand).name == "ABORT"


def test_kafka_python_reads_our_marker_as_a_control_record():
    batch = DefaultRecordBatch(bytes(build_control_batch(9, 1, 12, True, 55)))
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert (record.version, record.type, record.commit) == (0, 1, True)
    assert record.value == struct.pack(">hi", 0, 12)


def test_every_origin_but_a_client_may_append_a_marker():
    marker = build_control_batch(1, 0, 0, True, 1)
    with pytest.raises(InvalidRecordError, match="clients may not write control records"):
        validate_batches(marker)
    for origin in (AppendOrigin.LOCAL, AppendOrigin.COORDINATOR, AppendOrigin.REPLICATION):
        (header,) = validate_batches(marker, origin=origin)
        assert header.is_control


# -- reading leniency: Kafka's ControlRecordType.parseTypeId, EndTransactionMarker ----------

def test_a_key_version_other_than_0_reads_as_version_0():
    # Kafka logs it at debug level and reads the type; librdkafka would skip the record,
    # which is why kqlite writes version 0 only.
    assert control_type(struct.pack(">hh", 3, COMMIT)) == COMMIT
    assert read_marker(hand_packed_marker(1, 0, 4, ABORT, 0, key_version=1)) == \
        EndTransactionMarker(ABORT, 4)


def test_a_value_version_above_0_reads_as_version_0():
    assert parse_marker_value(COMMIT, struct.pack(">hi", 1, 9)) == EndTransactionMarker(COMMIT, 9)
    assert read_marker(hand_packed_marker(1, 0, 4, COMMIT, 0, value_version=2)) == \
        EndTransactionMarker(COMMIT, 4)


@pytest.mark.parametrize("key, message", [
    (None, "needs 4 bytes, this one has 0"),
    (b"\x00\x00\x00", "needs 4 bytes, this one has 3"),
    (struct.pack(">hh", -1, COMMIT), "version -1 is negative"),
])
def test_invalid_control_keys(key, message):
    with pytest.raises(InvalidRecordError, match=message):
        control_type(key)


def test_a_longer_key_is_read_by_its_first_4_bytes():
    assert control_type(struct.pack(">hh", 0, ABORT) + b"extra") == ABORT


def test_unknown_type_ids_read_as_unknown_and_are_no_marker():
    assert control_type(struct.pack(">hh", 0, 99)) == UNKNOWN
    assert control_type(struct.pack(">hh", 0, 2)) == 2            # KRaft's LEADER_CHANGE
    for type_id in (UNKNOWN, 2):
        with pytest.raises(InvalidRecordError, match="not a transaction marker"):
            parse_marker_value(type_id, marker_value(0))


@pytest.mark.parametrize("value, message", [
    (None, "needs 6 bytes, this one has 0"),
    (b"\x00\x00\x00\x00\x00", "needs 6 bytes, this one has 5"),
    (struct.pack(">hi", -2, 0), "version -2 is negative"),
])
def test_invalid_marker_values(value, message):
    with pytest.raises(InvalidRecordError, match=message):
        parse_marker_value(ABORT, value)


def test_an_emptied_control_batch_holds_no_marker():
    # What compaction leaves of a marker it keeps only for its producer's epoch (Kafka's
    # writeEmptyHeader keeps the control bit).
    empty = empty_batch(parse_header(build_control_batch(3, 0, 0, False, 8)))
    header = parse_header(empty)
    assert (header.records_count, header.is_control, header.is_transactional) == (0, True, True)
    assert read_marker(empty) is None


def test_a_data_batch_is_no_control_batch():
    with pytest.raises(InvalidRecordError, match="not a control batch"):
        read_marker(build_batch([Record(key=control_key(COMMIT), value=marker_value(1))]))


def test_our_marker_satisfies_librdkafkas_stricter_reading():
    # rdkafka_msgset_reader.c: a control record's key must be exactly 4 bytes of version 0.
    marker = build_control_batch(1, 0, 0, True, 0)
    record_key = bytes(marker[61 + 5:61 + 9])
    assert len(control_key(COMMIT)) == 4 and record_key == control_key(COMMIT)
    assert struct.unpack(">h", record_key[:2]) == (0,)
