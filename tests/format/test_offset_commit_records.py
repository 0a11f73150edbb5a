"""Offset commit records (kqlite.format.offset_records) byte for byte: OffsetCommitKey v1
and OffsetCommitValue v3 as Kafka 3.9 writes them, every value version Kafka ever wrote
read back, and the keys of other record kinds told apart. The expected bytes are written
by hand from Kafka's OffsetCommitKey.json and OffsetCommitValue.json."""

import struct

import pytest

from kqlite.errors import CorruptRecordError
from kqlite.format.offset_records import (OffsetAndMetadata, decode_offset_key,
                                          decode_offset_value, encode_offset_key,
                                          encode_offset_value)


def _s(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


# OffsetCommitValue of each version, written by hand from Kafka's OffsetCommitValue.json.
VALUES = {
    0: struct.pack(">hq", 0, 100) + _s("v0") + struct.pack(">q", 1000),
    1: struct.pack(">hq", 1, 101) + _s("v1") + struct.pack(">qq", 1001, 99999),
    2: struct.pack(">hq", 2, 102) + _s("v2") + struct.pack(">q", 1002),
    3: struct.pack(">hqi", 3, 103, 7) + _s("v3") + struct.pack(">q", 1003),
    # v4 is flexible: compact string (length + 1 as an unsigned varint), then tagged fields.
    4: struct.pack(">hqi", 4, 104, 8) + bytes([3]) + b"v4" + struct.pack(">q", 1004) + b"\0",
}
EXPECTED = {
    0: OffsetAndMetadata(100, -1, "v0", 1000),
    1: OffsetAndMetadata(101, -1, "v1", 1001),
    2: OffsetAndMetadata(102, -1, "v2", 1002),
    3: OffsetAndMetadata(103, 7, "v3", 1003),
    4: OffsetAndMetadata(104, 8, "v4", 1004),
}


@pytest.mark.parametrize("version", sorted(VALUES))
def test_every_offset_commit_value_version_is_read(version):
    assert decode_offset_value(VALUES[version]) == EXPECTED[version]


def test_key_v1_and_value_v3_are_written_as_kafka_writes_them():
    assert encode_offset_key("grp", "t", 3) == \
        struct.pack(">h", 1) + _s("grp") + _s("t") + struct.pack(">i", 3)
    assert encode_offset_value(103, "v3", 1003, 7) == VALUES[3]
    assert encode_offset_value(5) == struct.pack(">hqi", 3, 5, -1) + _s("") + \
        struct.pack(">q", -1)
    assert decode_offset_key(encode_offset_key("grp", "t", 3)) == ("grp", "t", 3)


def test_keys_of_other_record_kinds_are_not_offset_commits():
    assert decode_offset_key(struct.pack(">h", 0) + _s("g") + _s("t") +
                             struct.pack(">i", 1)) == ("g", "t", 1)   # version 0 reads too
    assert decode_offset_key(struct.pack(">h", 2) + _s("g")) is None     # group metadata
    assert decode_offset_key(struct.pack(">h", 3) + _s("g")) is None     # KIP-848
    assert decode_offset_key(b"\x01") is None and decode_offset_key(None) is None


def test_records_that_do_not_parse_are_refused():
    with pytest.raises(CorruptRecordError):
        decode_offset_key(struct.pack(">h", 1) + b"\0\x40ab")
    with pytest.raises(CorruptRecordError):
        decode_offset_value(struct.pack(">h", 9) + b"future")
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\0\3\0")
