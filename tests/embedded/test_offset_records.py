"""``__consumer_offsets`` records as Kafka writes and reads them: every OffsetCommitValue
version, GroupMetadata records and other key versions left alone, damaged records skipped,
commit metadata and leader epoch kept, tombstones for deleted groups."""

import struct

import pytest

import kqlite
from kqlite.db.offsets import OffsetAndMetadata
from kqlite.format.internal_topics import (OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                           kafka_partition_for_key)
from kqlite.format.offset_records import (decode_offset_key, decode_offset_value,
                                          encode_offset_key)
from kqlite.format.record import Record


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        database.create_topic("t", partitions=4)
        yield database


def _s(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


# OffsetCommitValue of each version, written by hand from Kafka's OffsetCommitValue.json
# (tests/format/test_offset_records.py decodes each one alone).
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


def _group_key(group):
    """GroupMetadataKey (version 2), from Kafka's GroupMetadataKey.json."""
    return struct.pack(">h", 2) + _s(group)


def _append(db, group, records):
    db.offsets.committed(group)          # creates the topic, as a first read does
    with db.leased_log(OFFSETS_TOPIC, kafka_partition_for_key(group, OFFSETS_PARTITIONS)) as log:
        log.append(records)


def test_records_of_every_value_version_are_loaded(db):
    _append(db, "old", [Record(key=encode_offset_key("old", "t", v), value=VALUES[v])
                        for v in sorted(VALUES)])
    assert db.offsets.committed_details("old") == {("t", v): EXPECTED[v] for v in VALUES}
    assert db.offsets.committed("old") == {("t", v): EXPECTED[v].offset for v in VALUES}


def test_group_metadata_records_and_unknown_keys_are_skipped(db):
    group = "grp"
    _append(db, group, [
        Record(key=encode_offset_key(group, "t", 0), value=VALUES[3]),
        # A GroupMetadata record (key version 2) and its tombstone: the coordinator's.
        Record(key=_group_key(group), value=struct.pack(">h", 3) + _s("consumer")),
        Record(key=_group_key(group), value=None),
        # A KIP-848 record kind (key version 3) and a key too short to have a version.
        Record(key=struct.pack(">h", 3) + _s(group), value=b"\0\0anything"),
        Record(key=b"\x01", value=b"x"),
    ])
    assert db.offsets.committed_details(group) == {("t", 0): EXPECTED[3]}
    assert group in db.offsets.groups()


def test_unreadable_records_are_skipped_without_hiding_the_others(db, caplog):
    group = "dmg"
    _append(db, group, [
        Record(key=encode_offset_key(group, "t", 0), value=VALUES[2]),
        Record(key=encode_offset_key(group, "t", 1), value=struct.pack(">h", 9) + b"future"),
        Record(key=encode_offset_key(group, "t", 2), value=b"\0\3\0"),       # truncated v3
        Record(key=struct.pack(">h", 1) + b"\0\x40ab", value=VALUES[0]),  # truncated key
        Record(key=encode_offset_key(group, "t", 3), value=VALUES[4]),
    ])
    with caplog.at_level("WARNING", logger="kqlite"):
        assert db.offsets.committed_details(group) == {("t", 0): EXPECTED[2],
                                                       ("t", 3): EXPECTED[4]}
    assert "skipped 3 unreadable offset commit record(s)" in caplog.text


def test_commit_metadata_and_leader_epoch_are_stored_as_value_v3(db):
    c = db.consumer("t", group="meta", enable_auto_commit=False)
    c.commit({("t", 0): OffsetAndMetadata(5, 2, "hello", -1), ("t", 1): 9})
    got = db.offsets.committed_details("meta")
    assert got[("t", 0)][:3] == (5, 2, "hello") and got[("t", 0)].commit_timestamp > 0
    assert got[("t", 1)][:3] == (9, -1, "")
    assert c.committed(("t", 0)) == 5
    c.close()
    with db.leased_log(OFFSETS_TOPIC, kafka_partition_for_key("meta", OFFSETS_PARTITIONS)) as log:
        values = {decode_offset_key(r.key): r.value for r in log.read(0)}
    assert values[("meta", "t", 0)][:2] == struct.pack(">h", 3)
    assert decode_offset_value(values[("meta", "t", 0)])[:3] == (5, 2, "hello")


def test_another_database_on_the_data_dir_reads_the_metadata(db, tmp_path):
    db.offsets.commit("shared", {("t", 2): OffsetAndMetadata(11, 4, "m", 1234)})
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as other:
        assert other.offsets.committed_details("shared") == {
            ("t", 2): OffsetAndMetadata(11, 4, "m", 1234)}


def test_delete_group_writes_tombstones_for_its_offsets(db, tmp_path):
    db.offsets.commit("gone", {("t", 0): 1, ("t", 1): 2})
    db.offsets.commit("kept", {("t", 0): 3})
    assert db.offsets.delete_group("gone") == [("t", 0), ("t", 1)]
    assert db.offsets.committed("gone") == {}
    with db.leased_log(OFFSETS_TOPIC, kafka_partition_for_key("gone", OFFSETS_PARTITIONS)) as log:
        tail = [(r.key, r.value) for r in log.read(0)][-2:]
    assert tail == [(encode_offset_key("gone", "t", 0), None),
                    (encode_offset_key("gone", "t", 1), None)]
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as other:
        assert other.offsets.committed("gone") == {}
        assert other.offsets.committed("kept") == {("t", 0): 3}
        assert "gone" not in other.offsets.groups()
