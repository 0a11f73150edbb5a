"""Topic names in the embedded API: every Database method and the topic store refuse a
name that breaks Kafka's rules with InvalidTopicError (a ConfigError and an
UnknownTopicError) before any file is touched, and names up to Kafka's 249-character
limit work end to end, including a deletion a crash interrupted."""

import json
import os

import pytest

import kqlite
from kqlite.db.partition_dirs import record_deletion
from kqlite.db.topic_names import InvalidTopicError, fit_file_name
from kqlite.db.topic_store import FileTopicStore
from kqlite.errors import ConfigError, UnknownTopicError

BAD_NAMES = ["../victim", "../../victim", "../../../victim", "a/../../victim", "..", ".",
             "", "x\0y", "sp ace", "e" * 250, None, 7]


@pytest.fixture
def place(tmp_path):
    """A data dir, with a decoy topic definition and partition beside it and inside it."""
    data = tmp_path / "data"
    for target in (tmp_path, data, data / ".kqlite"):
        target.mkdir(exist_ok=True)
        (target / "victim.json").write_text(json.dumps(
            {"name": "victim", "topic_id": "x" * 22, "partitions": 1, "config": {}}))
        (target / "victim-0").mkdir()
        (target / "victim-0" / "00000000000000000000.log").write_bytes(b"keep me")
    return tmp_path, data


def _untouched(root, data):
    for target in (root, data, data / ".kqlite"):
        assert (target / "victim-0" / "00000000000000000000.log").read_bytes() == b"keep me"
        assert json.loads((target / "victim.json").read_text())["name"] == "victim"


def _database_calls(db):
    return {
        "create_topic": lambda n: db.create_topic(n, 1),
        "topic_metadata": lambda n: db.topic_metadata(n, refresh=True),
        "partitions_for": lambda n: db.partitions_for(n, refresh=True),
        "create_partitions": lambda n: db.create_partitions(n, 2),
        "alter_topic_config": lambda n: db.alter_topic_config(n, {"retention.ms": 1}),
        "delete_topic": db.delete_topic,
        "topic_config": db.topic_config,
        "describe_topic": db.describe_topic,
        "log": lambda n: db.log(n, 0),
        "leased_log": lambda n: db.leased_log(n, 0).__enter__(),
        "producer.send": lambda n: db.producer().send(n, b"v", partition=0),
    }


def test_every_database_method_refuses_a_bad_name(place):
    root, data = place
    with kqlite.open(str(data), retention_check_interval_ms=0, auto_create_topics=True) as db:
        calls = _database_calls(db)
        for what, call in calls.items():
            for name in BAD_NAMES:
                with pytest.raises(InvalidTopicError) as caught:
                    call(name)
                assert isinstance(caught.value, ConfigError), what
                assert isinstance(caught.value, UnknownTopicError), what
                assert "invalid topic name" in str(caught.value)
        assert db.list_topics() == []
    _untouched(root, data)


def test_the_topic_store_never_builds_a_path_from_a_bad_name(place):
    root, data = place
    store = FileTopicStore(str(data))
    try:
        for name in BAD_NAMES:
            assert store.get(name) is None
            for op in (lambda: store.delete(name), lambda: store.add_partitions(name, 5),
                       lambda: store.alter_config(name, {"retention.ms": 1}),
                       lambda: store.create(name, 1, {})):
                with pytest.raises(InvalidTopicError):
                    op()
        assert store.names() == []
    finally:
        store.close()
    _untouched(root, data)


@pytest.mark.parametrize("length", [241, 249])
def test_names_up_to_249_characters_work_end_to_end(tmp_path, length):
    name = "n" * length
    data = str(tmp_path / "data")
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        db.create_topic(name, 3, {"retention.ms": 60000})
        db.alter_topic_config(name, {"retention.ms": 120000})
        db.create_partitions(name, 4)
        producer = db.producer()
        for p in range(4):
            producer.send(name, b"v%d" % p, partition=p)
        producer.flush()
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        assert db.list_topics() == [name]
        assert db.topic_config(name).as_dict()["retention.ms"] == 120000
        for p in range(4):
            with db.leased_log(name, p) as lg:
                assert [r.value for r in lg.read()] == [b"v%d" % p]
        db.delete_topic(name)
        assert db.list_topics() == []
    assert sorted(os.listdir(os.path.join(data, ".kqlite", "topics"))) == []
    assert not [n for n in os.listdir(data) if n.startswith("n" * 200)]


def test_an_interrupted_deletion_of_a_long_name_is_finished(tmp_path):
    name = "d" * 249
    data = str(tmp_path / "data")
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        meta = db.create_topic(name, 2)
        db.producer().send(name, b"v", partition=0)
        # Step 1 and 2 of a deletion, then a crash before the directories went.
        record_deletion(db.fs, db.path, meta)
        db.topics.delete(name)
    assert len(os.listdir(os.path.join(data, ".kqlite", "deleting"))) == 1
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        assert db.list_topics() == []
    assert os.listdir(os.path.join(data, ".kqlite", "deleting")) == []
    assert not [n for n in os.listdir(data) if n.startswith("d" * 200)]


def test_a_deletion_record_naming_no_valid_topic_is_left_alone(place):
    root, data = place
    deleting = data / ".kqlite" / "deleting"
    deleting.mkdir(parents=True)
    planted = {"name": "../victim", "topic_id": "x" * 22, "partitions": 1, "config": {}}
    (deleting / "planted.json").write_text(json.dumps(planted))
    with kqlite.open(str(data), retention_check_interval_ms=0) as db:
        db.create_topic("t", 1)      # creating a topic finishes pending deletions too
    _untouched(root, data)


def test_long_file_names_are_shortened_to_255_bytes():
    assert fit_file_name("t", ".json.tmp") == "t.json.tmp"
    long = fit_file_name("x" * 249, ".abcdefghijklmnopqrstuv.json", spare=4)
    assert len(long) == 251 and long.endswith(".abcdefghijklmnopqrstuv.json")
