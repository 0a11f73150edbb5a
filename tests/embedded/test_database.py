"""Database: topics, partitions, per-topic config, retention task."""

import os

import pytest

import kqlite
from kqlite.errors import ConfigError, LogClosedError


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        yield database


def test_create_list_describe_delete(db, tmp_path):
    db.create_topic("clicks", partitions=3, config={"retention.ms": 1000, "segment.bytes": 4096})
    db.create_topic("orders")
    assert db.list_topics() == ["clicks", "orders"]
    for p in range(3):
        assert (tmp_path / "data" / f"clicks-{p}").is_dir()
        meta = (tmp_path / "data" / f"clicks-{p}" / "partition.metadata").read_text()
        assert meta.startswith("version: 0\ntopic_id: ")
    db.log("clicks", 1).append([b"a", b"b"])
    d = db.describe_topic("clicks")
    assert [p.end_offset for p in d.partitions] == [0, 2, 0]
    assert d.config["retention.ms"] == 1000 and d.config["segment.bytes"] == 4096
    assert db.log("clicks", 0).config["segment.bytes"] == 4096
    db.delete_topic("clicks")
    assert db.list_topics() == ["orders"]
    assert not any(n.startswith("clicks") for n in os.listdir(tmp_path / "data"))
    with pytest.raises(kqlite.UnknownTopicError):
        db.log("clicks", 0)


def test_topics_persist_and_are_shared_between_opens(tmp_path):
    with kqlite.open(tmp_path / "d", retention_check_interval_ms=0) as a:
        a.create_topic("t", partitions=2, config={"cleanup.policy": "compact"})
        with kqlite.open(tmp_path / "d", retention_check_interval_ms=0) as b:
            assert b.partitions_for("t") == 2
            b.log("t", 1).append(kqlite.Record(key=b"k", value=b"from b"))
            assert [r.value for r in a.log("t", 1).read()] == [b"from b"]
            assert b.topic_config("t")["cleanup.policy"] == "compact"


def test_bad_topic_requests(db):
    for bad in ("", "a b", "x" * 250, "..", "slash/name"):
        with pytest.raises(ConfigError):
            db.create_topic(bad)
    with pytest.raises(ConfigError):
        db.create_topic("t", partitions=0)
    with pytest.raises(ConfigError, match="retention.ms"):
        db.create_topic("t", config={"retention.ms": "soon"})
    db.create_topic("t")
    with pytest.raises(kqlite.TopicExistsError):
        db.create_topic("t")
    assert db.create_topic("t", exist_ok=True)["partitions"] == 1
    with pytest.raises(kqlite.UnknownTopicError):
        db.log("t", 5)
    with pytest.raises(kqlite.UnknownTopicError):
        db.describe_topic("nope")


def test_create_partitions_and_alter_config(db):
    db.create_topic("t", partitions=2)
    db.create_partitions("t", 5)
    assert db.partitions_for("t") == 5
    with pytest.raises(ConfigError):
        db.create_partitions("t", 3)
    db.alter_topic_config("t", {"retention.bytes": 100})
    assert db.topic_config("t")["retention.bytes"] == 100
    db.alter_topic_config("t", {"retention.bytes": None})
    assert db.topic_config("t")["retention.bytes"] == -1


def test_database_retention_runs_everywhere(db):
    db.create_topic("old", partitions=2, config={"retention.ms": 1000, "segment.bytes": 200})
    for p in range(2):
        for i in range(20):
            db.log("old", p).append(b"x" * 20, timestamp=1_000 + i)
    deleted = db.enforce_retention(now_ms=10 ** 12)
    assert set(deleted) == {("old", 0), ("old", 1)}
    assert all(len(db.log("old", p).segments) == 1 for p in range(2))


def test_background_retention_task(tmp_path):
    with kqlite.open(tmp_path / "d", retention_check_interval_ms=50) as db:
        db.create_topic("t", config={"retention.ms": 1, "segment.bytes": 200})
        for i in range(20):
            db.log("t", 0).append(b"y" * 20, timestamp=1000)
        import time
        deadline = time.monotonic() + 5
        while len(db.log("t", 0).segments) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(db.log("t", 0).segments) == 1


def test_closed_database(tmp_path):
    db = kqlite.open(tmp_path / "d", retention_check_interval_ms=0)
    db.create_topic("t")
    db.close()
    with pytest.raises(LogClosedError):
        db.log("t", 0)
