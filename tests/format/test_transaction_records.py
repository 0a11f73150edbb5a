"""``__transaction_state`` records (kqlite.format.transaction_records) byte for byte: key v0
and value v0 as Kafka 3.9 writes them, value v1 (flexible) read, tombstones, keys of
other versions skipped and values of other versions refused. The expected bytes are
packed by hand from Kafka's TransactionLogKey.json and TransactionLogValue.json; the
placement of an id is Kafka's Utils.abs(hashCode) % 50."""

import struct

import pytest

from kqlite.errors import CorruptRecordError
from kqlite.format.internal_topics import (TRANSACTIONS_PARTITIONS, java_hash, kafka_abs,
                                           kafka_partition_for_key, legacy_partition_for_key,
                                           transaction_partition_for)
from kqlite.format.transaction_records import (TransactionLogValue, TransactionStatus,
                                               decode_transaction_key,
                                               decode_transaction_value,
                                               encode_transaction_key,
                                               encode_transaction_value, group_partitions)

S = TransactionStatus


def _s(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _cs(text):
    """A compact string: length + 1 as an unsigned varint (one byte here)."""
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def test_key_v0_is_the_version_then_the_id():
    # The notes' worked example: id "txn-1".
    assert encode_transaction_key("txn-1") == bytes.fromhex("0000 0005 74786e2d31")
    assert decode_transaction_key(bytes.fromhex("0000000574786e2d31")) == "txn-1"
    assert encode_transaction_key("\u00e9") == struct.pack(">hh", 0, 2) + "\u00e9".encode()


def test_keys_of_another_version_are_not_transactions():
    assert decode_transaction_key(struct.pack(">h", 1) + _s("x")) is None
    assert decode_transaction_key(b"\x00") is None and decode_transaction_key(None) is None
    with pytest.raises(CorruptRecordError):
        decode_transaction_key(struct.pack(">hh", 0, 9) + b"abc")   # length past the end


ONGOING = TransactionLogValue(producer_id=4000, producer_epoch=3, timeout_ms=60000,
                              status=S.ONGOING, partitions=(("a", (0, 2)), ("b", (1,))),
                              last_update_ms=1_700_000_000_123, start_ms=1_700_000_000_000)
# Packed by hand in TransactionLogValue.json v0's field order.
ONGOING_V0 = (struct.pack(">hqhib", 0, 4000, 3, 60000, 1)
              + struct.pack(">i", 2)
              + _s("a") + struct.pack(">iii", 2, 0, 2)
              + _s("b") + struct.pack(">ii", 1, 1)
              + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000))


def test_value_v0_is_written_field_by_field():
    assert encode_transaction_value(ONGOING) == ONGOING_V0
    assert decode_transaction_value(ONGOING_V0) == ONGOING


def test_empty_writes_null_partitions_and_complete_an_empty_array():
    empty = TransactionLogValue(7, 0, 1000, S.EMPTY, None, 5, -1)
    assert encode_transaction_value(empty) == \
        struct.pack(">hqhibiqq", 0, 7, 0, 1000, 0, -1, 5, -1)
    assert decode_transaction_value(encode_transaction_value(empty)).partitions is None
    done = TransactionLogValue(7, 0, 1000, S.COMPLETE_COMMIT, (), 9, 8)
    assert encode_transaction_value(done) == \
        struct.pack(">hqhibiqq", 0, 7, 0, 1000, 4, 0, 9, 8)
    assert decode_transaction_value(encode_transaction_value(done)).partitions == ()


def test_states_that_are_never_written_are_refused():
    with pytest.raises(ValueError):
        encode_transaction_value(TransactionLogValue(1, 0, 1, S.EMPTY, (("a", (0,)),), 0, -1))
    for status in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(ValueError):
            encode_transaction_value(TransactionLogValue(1, 0, 1, status, (), 0, -1))


def test_value_v1_is_read_with_its_tagged_fields():
    # Flexible: compact arrays and strings, a tag section after each partition entry and
    # after the value. Tags 0 and 2 are present (previous producer id, client version);
    # tag 9 is unknown and skipped.
    v1 = (struct.pack(">hqhib", 1, 4000, 3, 60000, 2)
          + bytes([2 + 1])
          + _cs("a") + bytes([2 + 1]) + struct.pack(">ii", 0, 2) + b"\x00"
          + _cs("b") + bytes([1 + 1]) + struct.pack(">i", 1) + b"\x00"
          + struct.pack(">qq", 11, 10)
          + bytes([3]) + bytes([0, 8]) + struct.pack(">q", 3999)
          + bytes([2, 2]) + struct.pack(">h", 2)
          + bytes([9, 1, 0xFF]))
    value = decode_transaction_value(v1)
    assert value == TransactionLogValue(4000, 3, 60000, S.PREPARE_COMMIT,
                                        (("a", (0, 2)), ("b", (1,))), 11, 10,
                                        previous_producer_id=3999,
                                        client_transaction_version=2)
    # Null partitions in v1: compact length 0.
    empty = struct.pack(">hqhib", 1, 5, 0, 100, 0) + b"\x00" + struct.pack(">qq", 1, -1) + b"\0"
    assert decode_transaction_value(empty) == TransactionLogValue(5, 0, 100, S.EMPTY, None, 1, -1)


def test_tombstones_and_unknown_or_damaged_values():
    assert decode_transaction_value(None) is None
    with pytest.raises(CorruptRecordError, match="version 2"):
        decode_transaction_value(struct.pack(">h", 2) + ONGOING_V0[2:])
    with pytest.raises(CorruptRecordError):
        decode_transaction_value(ONGOING_V0[:-3])
    with pytest.raises(CorruptRecordError, match="status"):
        decode_transaction_value(struct.pack(">hqhibiqq", 0, 1, 0, 1, 42, -1, 0, -1))


def test_state_names_are_kafkas():
    assert [s.state_name for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                                        "CompleteCommit", "CompleteAbort", "Dead",
                                        "PrepareEpochFence"]
    assert S.from_state_name("Ongoing") is S.ONGOING and S.from_state_name("x") is None


def test_partitions_are_grouped_by_topic():
    assert group_partitions({("b", 1), ("a", 2), ("a", 0)}) == (("a", (0, 2)), ("b", (1,)))
    assert ONGOING.topic_partitions() == {("a", 0), ("a", 2), ("b", 1)}


def test_an_id_is_placed_by_kafkas_rule():
    assert kafka_abs(-5) == 5 and kafka_abs(-2 ** 31) == 0
    # A negative hash: Kafka takes its absolute value (kqlite's legacy offsets rule did
    # not).
    assert java_hash("my-group") == -1906497762
    assert transaction_partition_for("my-group") == 1906497762 % 50 == 12
    assert legacy_partition_for_key("my-group", 50) == 36
    assert java_hash("polygenelubricants") == -2 ** 31
    assert kafka_partition_for_key("polygenelubricants", TRANSACTIONS_PARTITIONS) == 0
    assert transaction_partition_for("txn-1") == kafka_abs(java_hash("txn-1")) % 50
    assert transaction_partition_for("x", 7) == java_hash("x") % 7
