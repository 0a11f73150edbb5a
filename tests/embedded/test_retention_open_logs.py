"""Retention, compaction and metrics over a data dir open only the logs they must."""

import asyncio
import types

import pytest

import kqlite
from kqlite.db.layout import partition_dir
from kqlite.db.retention import may_compact, may_delete
from kqlite.server.connection_limits import ConnectionLimits
from kqlite.server.metrics import Metrics
from kqlite.server.request_memory import RequestMemory
from kqlite.server.storage_io import StorageExecutor

T0 = 1_000_000


def open_db(path, **options):
    return kqlite.open(path, retention_check_interval_ms=0, **options)


def fill(db, topic, partition, count, ts=T0, key=None, size=40):
    with db.leased_log(topic, partition) as lg:
        for i in range(count):
            lg.append(kqlite.Record(key=key, value=b"v" * size, timestamp=ts + i))


@pytest.fixture
def data(tmp_path):
    """Topic "keep" (nothing to delete: one segment each), "old" (several segments, all
    records at T0), an empty "idle" topic and a compacted "table" of one segment per
    partition (nothing to compact); every log closed afterwards."""
    with open_db(tmp_path / "d") as db:
        db.create_topic("keep", partitions=20, config={"retention.ms": 1000})
        db.create_topic("old", partitions=2, config={"retention.ms": 1000,
                                                     "segment.bytes": 300})
        db.create_topic("idle", partitions=20)
        db.create_topic("table", partitions=5, config={"cleanup.policy": "compact"})
        for p in range(20):
            fill(db, "keep", p, 3)
        for p in range(5):
            fill(db, "table", p, 3, key=b"k")
        for p in range(2):
            fill(db, "old", p, 20)
    return tmp_path / "d"


def test_retention_opens_only_logs_with_something_to_delete(data):
    with open_db(data) as db:
        assert db.logs.open_keys() == []
        deleted = db.enforce_retention(now_ms=T0 + 10 ** 6)
        assert set(deleted) == {("old", 0), ("old", 1)}
        assert sorted(db.logs.open_keys()) == [("old", 0), ("old", 1)]
        for p in range(2):
            with db.leased_log("old", p) as lg:
                assert len(lg.segments) == 1
        for p in range(20):
            with db.leased_log("keep", p) as lg:
                assert lg.start_offset == 0 and lg.end_offset == 3


def test_open_logs_are_checked_without_guessing(data, monkeypatch):
    monkeypatch.setattr("kqlite.db.retention.may_delete", lambda *args: False)
    with open_db(data) as db:
        pinned = db.log("old", 0)
        before = len(pinned.segments)
        assert before > 1
        deleted = db.enforce_retention(now_ms=T0 + 10 ** 6)
        assert set(deleted) == {("old", 0)}          # ("old", 1) is closed: judged "no"
        assert len(deleted[("old", 0)]) == before - 1
        assert len(pinned.segments) == 1


def test_nothing_expired_opens_nothing(data):
    with open_db(data) as db:
        assert db.enforce_retention(now_ms=T0) == {}
        assert db.logs.open_keys() == []
        assert db.compact(now_ms=T0) == {}
        assert db.logs.open_keys() == []


def test_size_retention_is_judged_from_file_sizes(tmp_path):
    with open_db(tmp_path / "d") as db:
        db.create_topic("big", partitions=1, config={"segment.bytes": 300})
        fill(db, "big", 0, 30)
    with open_db(tmp_path / "d") as db:
        assert db.enforce_retention(now_ms=T0) == {}
        db.alter_topic_config("big", {"retention.bytes": 500})
        assert db.logs.open_keys() == []
        deleted = db.enforce_retention(now_ms=T0)[("big", 0)]
        assert deleted
        with db.leased_log("big", 0) as lg:
            assert lg.start_offset > 0 and lg.end_offset == 30


def test_the_guesses_agree_with_the_log(tmp_path):
    """For closed logs in many shapes, a "no" from may_delete/may_compact means the Log,
    once opened, deletes or compacts nothing."""
    shapes = []
    with open_db(tmp_path / "d") as db:
        for i, (count, seg, ret_ms, ret_bytes, policy) in enumerate([
                (1, 300, 1000, -1, "delete"), (30, 300, 1000, -1, "delete"),
                (30, 300, -1, 600, "delete"), (30, 300, -1, 100000, "delete"),
                (30, 300, 10 ** 9, -1, "delete"), (30, 300, 1000, -1, "compact"),
                (3, 300, 1000, -1, "compact"), (30, 300, 1000, 600, "compact,delete")]):
            name = f"s{i}"
            db.create_topic(name, 1, {"segment.bytes": seg, "retention.ms": ret_ms,
                                      "retention.bytes": ret_bytes, "cleanup.policy": policy,
                                      "min.cleanable.dirty.ratio": 0.5})
            fill(db, name, 0, count, key=b"k")
            shapes.append(name)
    acted = {"deleted": 0, "compacted": 0}
    for now in (T0, T0 + 500, T0 + 10 ** 7):
        for name in shapes:
            with open_db(tmp_path / "d") as db:
                config = db.topic_config(name)
                pdir = partition_dir(db.path, name, 0)
                delete_guess = may_delete(db.fs, pdir, config, now)
                compact_guess = may_compact(db.fs, pdir, config, None)
                with db.leased_log(name, 0) as lg:
                    segments = lg.segments
                    deleted = lg.enforce_retention(now)
                    report = lg.compact(now)
                if not delete_guess:
                    assert deleted == [], (name, now)
                if not compact_guess:
                    assert report.segments_cleaned == 0, (name, now)
                if len(segments) == 1:
                    assert not delete_guess and not compact_guess
                acted["deleted"] += bool(deleted)
                acted["compacted"] += bool(report.segments_cleaned)
    assert acted["deleted"] and acted["compacted"]     # the shapes do exercise both


def test_metrics_report_only_open_logs(data):
    with open_db(data) as db:
        # The broker's parts the scrape reads, real ones, around the data dir under test.
        broker = types.SimpleNamespace(db=db, limits=ConnectionLimits(),
                                       request_memory=RequestMemory(None, 1 << 20),
                                       io=StorageExecutor(1))
        metrics = Metrics(broker)
        text = asyncio.run(metrics.scrape())
        assert "kqlite_open_logs 0" in text
        assert "kqlite_log_end_offset{" not in text
        assert db.logs.open_keys() == []
        with db.leased_log("keep", 3) as lg:
            lg.append(b"x")
        c = db.consumer("keep", group="g", auto_offset_reset="earliest",
                        enable_auto_commit=False)
        c.commit({("keep", 3): 1, ("keep", 4): 2})
        c.close(commit=False)
        opened = set(db.logs.open_keys())
        text = asyncio.run(metrics.scrape())
        assert set(db.logs.open_keys()) == opened          # the scrape opened nothing
        assert 'kqlite_log_end_offset{topic="keep",partition="3"} 4' in text
        assert f"kqlite_open_logs {len(opened)}" in text
        assert 'kqlite_consumer_group_lag{group="g",topic="keep",partition="3"} 3' in text
