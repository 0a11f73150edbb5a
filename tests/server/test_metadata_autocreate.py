"""Metadata auto-creation is bounded and holds up no one: one request naming 10,000 new
topics creates at most AUTO_CREATE_LIMIT of them and answers UNKNOWN_TOPIC_OR_PARTITION
for the rest (clients ask again, as they do while Kafka creates a topic); while it
creates, other clients are answered, and a topic another request is creating is not
created twice. Request names are de-duplicated, as Kafka does.

The creation is held at a gate of the file-system seam (the write of a topic definition,
before it is visible), so "while the first request creates" is a state the test reaches.
"""

import os

import pytest

from broker_process import RawClient
from broker_thread import BrokerThread, GatedFS

from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.replica_manager import AUTO_CREATE_LIMIT

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def definition_write(path):
    return os.sep + os.path.join(".kqlite", "topics", "") in path and path.endswith(".tmp")


@pytest.fixture
def gated(tmp_path):
    fs = GatedFS()
    broker = BrokerThread(tmp_path / "data", fs=fs, default_partitions=1)
    broker.broker.db.create_topic("existing", 1)
    yield broker, fs
    broker.stop()


def stored_topics(broker):
    return set(broker.broker.db.list_topics())


def metadata_body(names, auto=True):
    return {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": auto}


def test_one_request_creates_at_most_the_bound_and_others_are_served_meanwhile(gated):
    broker, fs = gated
    names = [f"new-{i:05d}" for i in range(10000)]
    creator, other = RawClient(broker, timeout=120), RawClient(broker)
    gate = fs.gate("pwrite", definition_write)
    try:
        creator.send(ApiKey.METADATA, 9, metadata_body(names))
        gate.wait_entered()
        # The creator's request is inside its first creation; another client is served.
        assert other.call(ApiKey.API_VERSIONS, 2, {})["error_code"] == ErrorCode.NONE
        meta = other.call(ApiKey.METADATA, 9, metadata_body(["existing"], auto=False))
        assert [t["error_code"] for t in meta["topics"]] == [ErrorCode.NONE]
        produce = other.call(ApiKey.PRODUCE, 7, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "existing", "partition_data": [
                {"index": 0, "records": build_batch([b"meanwhile"])}]}]})
        assert produce["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert not creator.has_response()
        gate.release()
        first = creator.receive(ApiKey.METADATA, 9)
        assert [t["name"] for t in first["topics"]] == names
        created = [t["name"] for t in first["topics"] if t["error_code"] == ErrorCode.NONE]
        assert created == names[:AUTO_CREATE_LIMIT]
        assert all(len(t["partitions"]) == 1 for t in first["topics"][:AUTO_CREATE_LIMIT])
        assert {t["error_code"] for t in first["topics"][AUTO_CREATE_LIMIT:]} == {UNKNOWN}
        assert stored_topics(broker) == {"existing", *created}
        # Asking again creates the next ones: clients that retry get every topic.
        second = creator.call(ApiKey.METADATA, 9, metadata_body(names))
        ok = [t["name"] for t in second["topics"] if t["error_code"] == ErrorCode.NONE]
        assert ok == names[:2 * AUTO_CREATE_LIMIT]
        assert len(stored_topics(broker)) == 1 + 2 * AUTO_CREATE_LIMIT
    finally:
        gate.release()
        creator.close()
        other.close()


def test_a_topic_being_created_is_not_created_twice(gated):
    broker, fs = gated
    first, second = RawClient(broker), RawClient(broker)
    gate = fs.gate("pwrite", definition_write)
    try:
        first.send(ApiKey.METADATA, 9, metadata_body(["racing"]))
        gate.wait_entered()
        # As Kafka answers a topic whose creation is in flight: ask again.
        meanwhile = second.call(ApiKey.METADATA, 9, metadata_body(["racing"]))
        assert [(t["name"], t["error_code"]) for t in meanwhile["topics"]] == \
            [("racing", UNKNOWN)]
        gate.release()
        done = first.receive(ApiKey.METADATA, 9)
        assert [(t["name"], t["error_code"]) for t in done["topics"]] == [("racing", 0)]
        again = second.call(ApiKey.METADATA, 9, metadata_body(["racing"]))
        assert [t["error_code"] for t in again["topics"]] == [0]
        assert broker.broker.db.list_topics() == ["existing", "racing"]
    finally:
        gate.release()
        first.close()
        second.close()


def test_a_name_repeated_in_one_request_is_answered_once(gated):
    broker, _fs = gated
    c = RawClient(broker)
    try:
        body = c.call(ApiKey.METADATA, 9, metadata_body(["twice", "existing", "twice"] * 3000))
        assert [(t["name"], t["error_code"]) for t in body["topics"]] == \
            [("twice", 0), ("existing", 0)]
    finally:
        c.close()
