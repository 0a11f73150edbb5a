"""DeleteRecords refuses what Kafka refuses (ReplicaManager.deleteRecordsOnLocalLog and
Partition.deleteRecordsOnLeader): a negative offset other than -1 and an offset past the
high watermark are OFFSET_OUT_OF_RANGE, an internal topic INVALID_TOPIC_EXCEPTION, a
compact-only topic POLICY_VIOLATION; a refused request deletes nothing. -1 means the high
watermark. Raw frames and confluent-kafka's AdminClient."""

import pytest

from broker_process import RawClient, unique
from kqlite.format.batch import build_batch
from kqlite.format.record import Record
from kqlite.protocol import ApiKey, ErrorCode


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def topic_with_records(client, n=5, configs=()):
    topic = unique("dr")
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs]}],
            "timeout_ms": 10000, "validate_only": False}
    assert client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0
    records = [(b"k%d" % i, b"v%d" % i) for i in range(n)]
    batch = build_batch([Record(v, key=k) for k, v in records])
    produce = {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    assert client.call(ApiKey.PRODUCE, 9, produce)["responses"][0]["partition_responses"][0][
        "error_code"] == 0
    return topic


def delete(client, topic, offset, version=2):
    body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0,
                                                       "offset": offset}]}],
            "timeout_ms": 5000}
    [p] = client.call(ApiKey.DELETE_RECORDS, version, body)["topics"][0]["partitions"]
    return p["error_code"], p["low_watermark"]


def log_start(client, topic):
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]}
    return client.call(ApiKey.LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]["offset"]


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("offset", [-2, -5, -(1 << 63)])
def test_negative_offsets_other_than_minus_one_are_refused(client, version, offset):
    topic = topic_with_records(client)
    assert delete(client, topic, 2, version) == (0, 2)
    assert delete(client, topic, offset, version) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert log_start(client, topic) == 2


def test_offsets_past_the_high_watermark_are_refused(client):
    topic = topic_with_records(client, 5)
    assert delete(client, topic, 6) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete(client, topic, 1 << 62) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert log_start(client, topic) == 0
    assert delete(client, topic, 5) == (0, 5)          # up to the high watermark is fine


def test_minus_one_means_the_high_watermark(client):
    topic = topic_with_records(client, 4)
    assert delete(client, topic, -1) == (0, 4)
    assert log_start(client, topic) == 4


def test_internal_topics_are_refused(client):
    assert delete(client, "__consumer_offsets", -1)[0] == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_compact_only_topics_are_refused(client):
    topic = topic_with_records(client, 3, configs=[("cleanup.policy", "compact")])
    assert delete(client, topic, 2) == (ErrorCode.POLICY_VIOLATION, -1)
    assert log_start(client, topic) == 0
    mixed = topic_with_records(client, 3, configs=[("cleanup.policy", "compact,delete")])
    assert delete(client, mixed, 2) == (0, 2)


def test_confluent_admin_client_delete_records(broker, client):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    if not hasattr(admin, "delete_records"):
        pytest.skip("this confluent-kafka has no AdminClient.delete_records")
    topic = topic_with_records(client, 5)

    def deleted(offset):
        tp = confluent_kafka.TopicPartition(topic, 0, offset)
        return admin.delete_records([tp])[tp].result(30)

    for offset in (9, -5):
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            deleted(offset)
        assert refused.value.args[0].code() == confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE
    assert log_start(client, topic) == 0
    assert deleted(3).low_watermark == 3
    assert deleted(confluent_kafka.OFFSET_END).low_watermark == 5
