"""Which ``__consumer_offsets`` records kqlite's legacy placement left in the wrong
partition, and what moving them writes (kqlite.format.offsets_relocation): the latest
stray of a key counts, the partition they go to wins for every key it mentions, the
strays are tombstoned under every key bytes they were written under, and records that
cannot be read stay put."""

import struct

from kqlite.format.group_records import encode_group_key
from kqlite.format.internal_topics import (kafka_partition_for_key, legacy_partition_for_key,
                                           legacy_partner_partition)
from kqlite.format.offset_records import encode_offset_key, encode_offset_value
from kqlite.format.offsets_relocation import (RecordKey, mentioned, move, record_key,
                                              strays)
from kqlite.format.record import Record

N = 50
STRAY = "my-group"              # Kafka: 12, legacy: 36
K, L = 12, 36


def _native_of(index):
    return next(g for g in (f"n{i}" for i in range(10_000))
                if kafka_partition_for_key(g, N) == index)


def _commit(group, partition, offset, ts=1000, offset_key=None):
    return Record(key=offset_key or encode_offset_key(group, "t", partition),
                  value=encode_offset_value(offset, "", ts), timestamp=ts)


def _tombstone(group, partition):
    return Record(key=encode_offset_key(group, "t", partition), value=None)


def _offset_key_v0(group, partition):
    """OffsetCommitKey version 0: the same fields as version 1."""
    return encode_offset_key(group, "t", partition).replace(b"\x00\x01", b"\x00\x00", 1)


def _in_order(records):
    return [r._replace(offset=i) for i, r in enumerate(records)]


def test_the_groups_of_the_example_are_placed_apart():
    assert kafka_partition_for_key(STRAY, N) == K and legacy_partition_for_key(STRAY, N) == L
    assert legacy_partner_partition(K, N) == L


def test_record_keys_of_commits_and_group_metadata_and_none_for_the_rest():
    assert record_key(encode_offset_key("g", "t", 3)) == RecordKey("g", "t", 3)
    assert record_key(encode_group_key("g")) == RecordKey("g")
    assert record_key(struct.pack(">h", 5) + b"newer") is None       # a KIP-848 record
    assert record_key(struct.pack(">h", 1) + b"\x00\x09short") is None  # damaged
    assert record_key(None) is None


def test_only_records_of_groups_placed_elsewhere_are_strays_and_the_latest_counts():
    native = _native_of(L)
    found = strays(iter(_in_order([
        _commit(native, 0, 5),
        _commit(STRAY, 0, 1),
        _commit(STRAY, 0, 2, ts=2000),
        _commit(STRAY, 1, 7),
        _tombstone(STRAY, 1),
        Record(key=encode_group_key(STRAY), value=b"\x00\x03metadata", timestamp=3000),
        Record(key=struct.pack(">h", 1) + b"\x00\x09short", value=b"x"),
    ])), L, N)
    assert set(found) == {K}
    held = found[K]
    assert set(held) == {RecordKey(STRAY, "t", 0), RecordKey(STRAY, "t", 1), RecordKey(STRAY)}
    assert held[RecordKey(STRAY, "t", 0)].record.timestamp == 2000
    assert held[RecordKey(STRAY, "t", 1)].record.value is None
    # In its own partition a group's records are no strays.
    assert strays(iter([_commit(STRAY, 0, 1)]), K, N) == {}


def test_a_move_copies_what_the_target_does_not_mention_and_tombstones_every_live_stray():
    commit_0 = _commit(STRAY, 0, 2, ts=2000)
    metadata = Record(key=encode_group_key(STRAY), value=b"\x00\x03metadata", timestamp=3000)
    found = strays(iter(_in_order([
        _commit(STRAY, 0, 1), commit_0,
        _commit(STRAY, 1, 7), _tombstone(STRAY, 1),       # deleted before the change
        _commit(STRAY, 2, 9),                             # committed again since, in K
        _commit(STRAY, 3, 4),                             # deleted since, in K
        metadata,
    ])), L, N)[K]
    target = _in_order([_commit(STRAY, 2, 10, ts=5000), _tombstone(STRAY, 3)])
    keys = mentioned(iter(target))
    assert keys == {RecordKey(STRAY, "t", 2), RecordKey(STRAY, "t", 3)}
    planned = move(found, keys)
    # Copied as they were: key and value bytes, timestamp.
    assert [(r.key, r.value, r.timestamp) for r in planned.records] == [
        (metadata.key, metadata.value, 3000), (commit_0.key, commit_0.value, 2000)]
    # Every key whose latest stray is a record gets a tombstone, copied or not.
    assert [(r.key, r.value) for r in planned.tombstones] == [
        (encode_group_key(STRAY), None), (encode_offset_key(STRAY, "t", 0), None),
        (encode_offset_key(STRAY, "t", 2), None), (encode_offset_key(STRAY, "t", 3), None)]


def test_a_move_done_again_after_its_copies_and_tombstones_moves_nothing():
    source = [_commit(STRAY, 0, 2)]
    first = move(strays(iter(_in_order(source)), L, N)[K], set())
    source_after = _in_order(source + first.tombstones)
    again = move(strays(iter(source_after), L, N)[K], mentioned(iter(first.records)))
    assert again.records == [] and again.tombstones == []
    # Cut after the copies, before the tombstones: nothing is copied twice.
    cut = move(strays(iter(_in_order(source)), L, N)[K], mentioned(iter(first.records)))
    assert cut.records == [] and [r.key for r in cut.tombstones] == \
        [encode_offset_key(STRAY, "t", 0)]


def test_a_key_written_under_two_key_versions_is_tombstoned_under_both():
    found = strays(iter(_in_order([
        _commit(STRAY, 0, 1, offset_key=_offset_key_v0(STRAY, 0)),
        _commit(STRAY, 0, 2)])), L, N)[K]
    planned = move(found, set())
    assert [r.value for r in planned.records] == [encode_offset_value(2, "", 1000)]
    assert sorted(r.key for r in planned.tombstones) == \
        sorted([_offset_key_v0(STRAY, 0), encode_offset_key(STRAY, "t", 0)])
