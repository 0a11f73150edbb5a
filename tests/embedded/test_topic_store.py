"""The topic-definition store: FileTopicStore's contract, and a Database on another store."""

import copy
import multiprocessing
import os
import threading

import pytest

import kqlite
from kqlite.db.topic_store import FileTopicStore, TopicStore, new_topic_id
from kqlite.errors import ConfigError, KqliteError, TopicExistsError, UnknownTopicError


def test_create_get_update_delete(tmp_path):
    store = FileTopicStore(str(tmp_path))
    meta = store.create("t", 2, {"retention.ms": 5})
    assert meta["name"] == "t" and meta["partitions"] == 2 and len(meta["topic_id"]) == 22
    assert store.get("t") == meta
    with pytest.raises(TopicExistsError):
        store.create("t", 1, {})
    assert store.add_partitions("t", 4)["partitions"] == 4
    with pytest.raises(ConfigError):
        store.add_partitions("t", 3)
    assert store.alter_config("t", {"retention.ms": None, "segment.bytes": 4096})["config"] \
        == {"segment.bytes": 4096}
    assert store.names() == ["t"]
    assert store.delete("t")["topic_id"] == meta["topic_id"]
    assert store.get("t") is None and store.names() == []
    for op in (lambda: store.delete("t"), lambda: store.add_partitions("t", 9)):
        with pytest.raises(UnknownTopicError):
            op()
    store.close()


def test_the_file_format_is_kept(tmp_path):
    store = FileTopicStore(str(tmp_path))
    meta = store.create("t", 3, {"cleanup.policy": "compact"})
    with open(tmp_path / ".kqlite" / "topics" / "t.json") as f:
        import json
        assert json.load(f) == meta
    assert os.listdir(tmp_path / ".kqlite" / "topics") == ["t.json"]   # no temporary left


def test_reads_are_cached_until_refresh_and_updates_see_the_latest(tmp_path):
    a, b = FileTopicStore(str(tmp_path)), FileTopicStore(str(tmp_path))
    a.create("t", 1, {})
    assert b.get("t")["partitions"] == 1
    a.add_partitions("t", 3)
    assert b.get("t")["partitions"] == 1          # b's cache
    b.alter_config("t", {"retention.ms": 7})      # read-modify-write of the latest
    assert b.get("t")["partitions"] == 3
    a.refresh("t")
    assert a.get("t")["config"] == {"retention.ms": 7}


def test_a_damaged_definition_is_reported_with_its_file(tmp_path):
    store = FileTopicStore(str(tmp_path))
    path = tmp_path / ".kqlite" / "topics" / "bad.json"
    path.write_text("{not json")
    with pytest.raises(KqliteError, match="bad.json is damaged"):
        store.get("bad")


def test_names_that_cannot_be_topics_are_never_looked_up(tmp_path):
    (tmp_path / "secret.json").write_text('{"name": "x"}')
    store = FileTopicStore(str(tmp_path / "d"))
    assert store.get("../../secret") is None
    with pytest.raises(ConfigError):
        store.create("a/b", 1, {})


def _race(path, barrier, results):
    store = FileTopicStore(path)
    barrier.wait()
    try:
        store.create("t", 1, {})
        results.put("won")
    except TopicExistsError:
        results.put("lost")


def test_concurrent_creates_in_processes_have_one_winner(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), barrier, results))
             for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(results.get(timeout=10) for _ in procs) == ["lost"] * 3 + ["won"]


def test_concurrent_updates_in_threads_are_not_lost(tmp_path):
    store = FileTopicStore(str(tmp_path))
    store.create("t", 1, {})

    def grow(key):
        for i in range(10):
            store.alter_config("t", {key: i + 1})

    threads = [threading.Thread(target=grow, args=(k,))
               for k in ("retention.ms", "retention.bytes", "segment.ms")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get("t")["config"] == {"retention.ms": 10, "retention.bytes": 10,
                                        "segment.ms": 10}


class MemoryTopicStore(TopicStore):
    """Definitions in a dict: what a Database needs of a store, and nothing else (the
    ZooKeeper-backed store of a cluster stands in the same place)."""

    def __init__(self):
        self.topics = {}
        self.lock = threading.Lock()

    def create(self, name, partitions, config):
        with self.lock:
            if name in self.topics:
                raise TopicExistsError(name)
            meta = {"name": name, "topic_id": new_topic_id(), "partitions": partitions,
                    "config": dict(config)}
            self.topics[name] = meta
            return copy.deepcopy(meta)

    def get(self, name):
        return copy.deepcopy(self.topics.get(name))

    def names(self):
        return sorted(self.topics)

    def update(self, name, change):
        with self.lock:
            if name not in self.topics:
                raise UnknownTopicError(name)
            self.topics[name] = change(copy.deepcopy(self.topics[name]))
            return copy.deepcopy(self.topics[name])

    def delete(self, name):
        with self.lock:
            if name not in self.topics:
                raise UnknownTopicError(name)
            return self.topics.pop(name)


def test_a_database_uses_only_the_store_interface(tmp_path):
    store = MemoryTopicStore()
    with kqlite.open(tmp_path / "d", retention_check_interval_ms=0, topic_store=store) as db:
        db.create_topic("t", partitions=2, config={"retention.ms": 60000})
        db.create_partitions("t", 3)
        db.alter_topic_config("t", {"segment.bytes": 1 << 20})
        with db.producer() as p:
            for i in range(6):
                p.send("t", b"v%d" % i, partition=i % 3)
        c = db.consumer("t", group="g", auto_offset_reset="earliest")
        assert len(c.poll(timeout_ms=500)) == 6
        c.close()
        assert db.topic_config("t")["segment.bytes"] == 1 << 20
        assert set(db.list_topics(internal=True)) == {"t", "__consumer_offsets"}
        db.delete_topic("t")
        assert store.names() == ["__consumer_offsets"]
    assert not (tmp_path / "d" / ".kqlite" / "topics").exists()
    assert not any(n.startswith("t-") for n in os.listdir(tmp_path / "d"))
