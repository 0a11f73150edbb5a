"""A data dir's ``__consumer_offsets`` moved once from kqlite's legacy placement to Kafka's
(kqlite/db/offsets_placement.py): commits written under the legacy rule are found by the
next process, a commit or a deletion in Kafka's partition wins over a legacy record, a
deletion after the move stays deleted, a move cut between its copies and its tombstones
is done again with the same result, processes starting together move the records once,
and a cluster broker's data dir is left alone.

The legacy data is written as an older kqlite wrote it: records appended to the partition
``legacy_partition_for_key`` names, by a Database whose offset store never ran."""

import multiprocessing

import pytest

import kqlite
from kqlite.db import offsets_placement
from kqlite.db.offsets_placement import PLACEMENT_MARK, is_kafka_placed
from kqlite.format.group_records import encode_group_key
from kqlite.format.internal_topics import (OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                           kafka_partition_for_key, legacy_partition_for_key)
from kqlite.format.offset_records import (decode_offset_key, encode_offset_key,
                                          encode_offset_value)
from kqlite.format.offsets_relocation import move, strays
from kqlite.format.record import Record
from kqlite.storage import cluster_dir
from kqlite.storage.log import Log

GROUP = "my-group"          # Kafka's partition 12, legacy 36
K, L = 12, 36
NATIVE = "test-group"       # partition 12 under both rules


def _write_legacy(path, group, records):
    """Append ``records`` where the legacy rule put ``group``'s, as an older kqlite did."""
    with kqlite.open(path) as db:
        if db.topics.get(OFFSETS_TOPIC) is None:
            db.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG)
        with db.leased_log(OFFSETS_TOPIC, legacy_partition_for_key(group, OFFSETS_PARTITIONS)) \
                as log:
            log.append(records)


def _write_kafka_placed(path, group, records):
    with kqlite.open(path) as db:
        with db.leased_log(OFFSETS_TOPIC, kafka_partition_for_key(group, OFFSETS_PARTITIONS)) \
                as log:
            log.append(records)


def _commit(group, partition, offset):
    return Record(key=encode_offset_key(group, "t", partition),
                  value=encode_offset_value(offset, "", 1000), timestamp=1000)


def _tombstone(group, partition):
    return Record(key=encode_offset_key(group, "t", partition), value=None)


def _records(path, index):
    with kqlite.open(path) as db:
        with db.leased_log(OFFSETS_TOPIC, index) as log:
            return list(log.read(log.start_offset))


def _live_strays(path):
    """The (group, topic, partition)s whose latest record in the legacy partition is not
    a tombstone: what a move would still tombstone there."""
    found = strays(iter(_records(path, L)), L, OFFSETS_PARTITIONS).get(K, {})
    return sorted(decode_offset_key(r.key) for r in move(found, set()).tombstones)


def test_the_example_group_is_placed_apart_by_the_two_rules():
    assert kafka_partition_for_key(GROUP, OFFSETS_PARTITIONS) == K
    assert legacy_partition_for_key(GROUP, OFFSETS_PARTITIONS) == L
    assert legacy_partition_for_key(NATIVE, OFFSETS_PARTITIONS) == \
        kafka_partition_for_key(NATIVE, OFFSETS_PARTITIONS) == K


def test_commits_written_under_the_legacy_placement_are_found_after_the_change(tmp_path):
    path = str(tmp_path / "data")
    _write_legacy(path, GROUP, [_commit(GROUP, 0, 5), _commit(GROUP, 1, 7),
                                Record(key=encode_group_key(GROUP), value=b"\x00\x03meta")])
    _write_legacy(path, NATIVE, [_commit(NATIVE, 0, 3)])
    with kqlite.open(path) as db:
        assert not is_kafka_placed(db)
        assert db.offsets.committed(GROUP) == {("t", 0): 5, ("t", 1): 7}
        assert db.offsets.committed(NATIVE) == {("t", 0): 3}
        assert db.offsets.groups() == sorted([GROUP, NATIVE])
        assert is_kafka_placed(db)
    # In Kafka's partition now, group metadata included; tombstoned where they were.
    moved = [(r.key, r.value) for r in _records(path, K) if r.key != _commit(NATIVE, 0, 3).key]
    assert moved == [(encode_group_key(GROUP), b"\x00\x03meta"),
                     (encode_offset_key(GROUP, "t", 0), encode_offset_value(5, "", 1000)),
                     (encode_offset_key(GROUP, "t", 1), encode_offset_value(7, "", 1000))]
    assert _live_strays(path) == []


def test_a_commit_or_a_deletion_in_kafkas_partition_wins_over_a_legacy_record(tmp_path):
    path = str(tmp_path / "data")
    _write_legacy(path, GROUP, [_commit(GROUP, 0, 1), _commit(GROUP, 1, 7),
                                _commit(GROUP, 2, 3)])
    # Written under Kafka's rule: a newer commit of partition 0, a deletion of partition 1.
    _write_kafka_placed(path, GROUP, [_commit(GROUP, 0, 9), _tombstone(GROUP, 1)])
    with kqlite.open(path) as db:
        assert db.offsets.committed(GROUP) == {("t", 0): 9, ("t", 2): 3}
    assert _live_strays(path) == []


def test_a_deletion_after_the_move_stays_deleted_even_if_the_move_ran_again(tmp_path):
    path = str(tmp_path / "data")
    _write_legacy(path, GROUP, [_commit(GROUP, 0, 5)])
    with kqlite.open(path) as db:
        assert db.offsets.delete_group(GROUP) == [("t", 0)]
    with kqlite.open(path) as db:
        assert db.offsets.committed(GROUP) == {}
    # Without the mark the move runs again, and finds nothing live to bring back.
    (tmp_path / "data" / ".kqlite" / PLACEMENT_MARK).unlink()
    with kqlite.open(path) as db:
        assert db.offsets.committed(GROUP) == {}
        assert is_kafka_placed(db)


class _Cut(Exception):
    pass


def test_a_move_cut_after_its_copies_is_done_again_with_the_same_result(tmp_path,
                                                                         monkeypatch):
    path = str(tmp_path / "data")
    _write_legacy(path, GROUP, [_commit(GROUP, 0, 5), _commit(GROUP, 1, 7)])
    flush = Log.flush
    cut = []

    def cut_after_the_first_flush(log):
        flush(log)              # the copies are durable in Kafka's partition...
        if not cut:
            cut.append(log)
            raise _Cut()        # ...and the move stops there, before the tombstones
    monkeypatch.setattr(Log, "flush", cut_after_the_first_flush)
    with kqlite.open(path) as db:
        with pytest.raises(_Cut):
            db.offsets.committed(GROUP)
        assert not is_kafka_placed(db)
    monkeypatch.setattr(Log, "flush", flush)
    assert _live_strays(path) == [(GROUP, "t", 0), (GROUP, "t", 1)]   # not yet
    with kqlite.open(path) as db:
        assert db.offsets.committed(GROUP) == {("t", 0): 5, ("t", 1): 7}
        assert is_kafka_placed(db)
    # Each record was copied once.
    assert sorted(decode_offset_key(r.key) for r in _records(path, K)) == \
        [(GROUP, "t", 0), (GROUP, "t", 1)]
    assert _live_strays(path) == []


def _first_use(path, barrier, results):
    barrier.wait()
    with kqlite.open(path) as db:
        results.put(sorted(db.offsets.committed(GROUP).items()))


def test_processes_starting_together_move_the_records_once(tmp_path):
    path = str(tmp_path / "data")
    _write_legacy(path, GROUP, [_commit(GROUP, p, 10 + p) for p in range(20)])
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_first_use, args=(path, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    expected = [(("t", p), 10 + p) for p in range(20)]
    assert [results.get(timeout=5) for _ in procs] == [expected] * 4
    assert len(_records(path, K)) == 20          # one copy of each, by one process
    with kqlite.open(path) as db:                 # and the next commit wins, as always
        db.offsets.commit(GROUP, {("t", 0): 99})
    with kqlite.open(path) as db:
        assert db.offsets.committed(GROUP)[("t", 0)] == 99


def test_a_data_dir_without_offsets_is_marked_and_a_cluster_brokers_is_left_alone(tmp_path):
    with kqlite.open(str(tmp_path / "fresh")) as db:
        assert offsets_placement.move_to_kafka_placement(db) == 0
        assert is_kafka_placed(db)
    path = str(tmp_path / "replicated")
    _write_legacy(path, GROUP, [_commit(GROUP, 0, 5)])
    with kqlite.open(path) as db:
        cluster_dir.mark_replicated(db.fs, path, 1)
    with kqlite.open(path) as db:
        assert offsets_placement.move_to_kafka_placement(db) == 0
        assert not is_kafka_placed(db)
    assert _live_strays(path) == [(GROUP, "t", 0)]
