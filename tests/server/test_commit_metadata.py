"""Commit metadata and the committed leader epoch: stored by OffsetCommit, returned by
OffsetFetch, kept across a broker restart and shared with the embedded API, with the
clients that send them (librdkafka, kafka-python) and with raw frames."""

import pytest

import kqlite
from kqlite.db.offsets import OffsetAndMetadata

from broker_process import BrokerProcess, RawClient, unique

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data")
    yield b
    b.stop()


def _create(broker, topic, partitions=2):
    c = RawClient(broker)
    reply = c.call(ApiKey.CREATE_TOPICS, 5,
                   {"topics": [{"name": topic, "num_partitions": partitions,
                                "replication_factor": 1, "assignments": [],
                                "configs": []}],
                    "timeout_ms": 10000, "validate_only": False})
    assert reply["topics"][0]["error_code"] == ErrorCode.NONE
    c.close()


def _commit_body(group, topic, partitions, generation=-1, member=""):
    return {"group_id": group, "generation_id_or_member_epoch": generation,
            "member_id": member, "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": partitions}]}


def _fetch(client, group, topic, partitions, version=7):
    reply = client.call(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": [
        {"name": topic, "partition_indexes": partitions}], "require_stable": False})
    assert reply["error_code"] == ErrorCode.NONE
    return {p["partition_index"]: (p["committed_offset"], p["committed_leader_epoch"],
                                   p["metadata"], p["error_code"])
            for p in reply["topics"][0]["partitions"]}


def test_confluent_kafka_commit_metadata_and_leader_epoch_round_trip(broker, tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    topic, group = unique("meta-ck"), unique("g-ck")
    _create(broker, topic)
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[ck.TopicPartition(topic, 0, 42, "ck-metadata", 3),
                                 ck.TopicPartition(topic, 1, 7, "x" * 1000)],
                        asynchronous=False)
        got = {tp.partition: tp for tp in consumer.committed(
            [ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=30)}
        assert (got[0].offset, got[0].metadata, got[0].leader_epoch) == (42, "ck-metadata", 3)
        assert (got[1].offset, got[1].metadata) == (7, "x" * 1000)
    finally:
        consumer.close()
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as db:
        details = db.offsets.committed_details(group)
    # librdkafka sends the metadata with its C string's terminator; stored as sent, as Kafka
    # stores it, and stripped again by librdkafka when it reads it back.
    assert details[(topic, 0)][:3] == (42, 3, "ck-metadata\0")


def test_kafka_python_commit_metadata_and_leader_epoch_round_trip(broker):
    kafka = pytest.importorskip("kafka")
    from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata, TopicPartition
    topic, group = unique("meta-kp"), unique("g-kp")
    _create(broker, topic)
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                   enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 1)
        consumer.commit({tp: KOffsetAndMetadata(9, "kp-metadata", 5)})
        got = consumer.committed(tp, metadata=True)
        assert (got.offset, got.metadata, got.leader_epoch) == (9, "kp-metadata", 5)
    finally:
        consumer.close()


def test_metadata_and_epoch_survive_a_restart_and_reach_the_embedded_api(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    try:
        _create(broker, "t")
        c = RawClient(broker)
        reply = c.call(ApiKey.OFFSET_COMMIT, 8, _commit_body("g", "t", [
            {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 2,
             "committed_metadata": "before restart"},
            {"partition_index": 1, "committed_offset": 20, "committed_leader_epoch": -1,
             "committed_metadata": None}]))
        assert [p["error_code"] for p in reply["topics"][0]["partitions"]] == [0, 0]
        c.close()
    finally:
        broker.stop()
    with kqlite.open(data, retention_check_interval_ms=0) as db:
        details = db.offsets.committed_details("g")
        assert details[("t", 0)][:3] == (10, 2, "before restart")
        assert details[("t", 1)][:3] == (20, -1, "")
        db.offsets.commit("g", {("t", 1): OffsetAndMetadata(21, 4, "embedded", -1)})
    broker = BrokerProcess(data)
    try:
        c = RawClient(broker)
        assert _fetch(c, "g", "t", [0, 1]) == {0: (10, 2, "before restart", 0),
                                               1: (21, 4, "embedded", 0)}
        c.close()
    finally:
        broker.stop()


def test_metadata_over_the_limit_is_refused_and_not_stored(broker):
    _create(broker, "big")
    c = RawClient(broker)
    # 4096 UTF-16 code units is Kafka's limit; an emoji is two of them.
    reply = c.call(ApiKey.OFFSET_COMMIT, 8, _commit_body("g-big", "big", [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
         "committed_metadata": "\U0001F600" * 2049},
        {"partition_index": 1, "committed_offset": 6, "committed_leader_epoch": -1,
         "committed_metadata": "\U0001F600" * 2048}]))
    assert [p["error_code"] for p in reply["topics"][0]["partitions"]] == [
        ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.NONE]
    assert _fetch(c, "g-big", "big", [0, 1]) == {0: (-1, -1, "", 0),
                                                 1: (6, -1, "\U0001F600" * 2048, 0)}
    c.close()


def test_unknown_partitions_are_refused_and_the_rest_stored(broker):
    _create(broker, "known")
    c = RawClient(broker)
    body = _commit_body("g-unknown", "known", [
        {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
         "committed_metadata": "a"},
        {"partition_index": 7, "committed_offset": 1, "committed_leader_epoch": -1,
         "committed_metadata": "b"}])
    body["topics"].append({"name": "no-such-topic", "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
         "committed_metadata": None}]})
    reply = c.call(ApiKey.OFFSET_COMMIT, 8, body)
    codes = {(t["name"], p["partition_index"]): p["error_code"]
             for t in reply["topics"] for p in t["partitions"]}
    assert codes == {("known", 0): ErrorCode.NONE,
                     ("known", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _fetch(c, "g-unknown", "known", [0, 7]) == {0: (1, -1, "a", 0), 7: (-1, -1, "", 0)}
    c.close()
