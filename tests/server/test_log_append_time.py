"""message.timestamp.type=LogAppendTime through the broker: the batch gets the broker's
clock (attribute bit, maxTimestamp, CRC), the Produce response returns it as
log_append_time_ms (-1 for CreateTime topics), consumers and the embedded reader see it,
and the log keeps it across a broker restart."""

import time

import pytest

import kqlite
from broker_process import BrokerProcess, RawClient, unique
from kqlite.format.batch import build_batch, decode_batch
from kqlite.protocol import ApiKey, ErrorCode

confluent_kafka = pytest.importorskip("confluent_kafka")

OLD = 1_000_000          # a producer timestamp far in the past (ms)


def create_topic(client, topic, timestamp_type):
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": "message.timestamp.type", "value": timestamp_type}]}],
            "timeout_ms": 10000, "validate_only": False}
    [result] = client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
    assert result["error_code"] == 0, result


def produce(client, topic, batch, version=9):
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    [t] = client.call(ApiKey.PRODUCE, version, body)["responses"]
    [p] = t["partition_responses"]
    return p


def fetch_batches(client, topic, offset=0):
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    [t] = client.call(ApiKey.FETCH, 11, body)["responses"]
    [p] = t["partitions"]
    assert p["error_code"] == 0
    data, batches, pos = bytes(p["records"] or b""), [], 0
    while pos < len(data):
        header, records = decode_batch(data, pos)
        batches.append((header, records))
        pos += header.size
    return batches


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def test_produce_response_and_stored_batch_carry_the_append_time(broker, client):
    topic = unique("lat")
    create_topic(client, topic, "LogAppendTime")
    before = int(time.time() * 1000)
    answer = produce(client, topic, build_batch([b"a", b"b", b"c"], timestamp=OLD))
    after = int(time.time() * 1000)
    assert answer["error_code"] == 0
    assert before <= answer["log_append_time_ms"] <= after
    [(header, records)] = fetch_batches(client, topic)
    assert header.timestamp_type == 1
    assert header.max_timestamp == answer["log_append_time_ms"]
    assert header.base_timestamp == OLD       # Kafka leaves baseTimestamp as produced
    assert [r.timestamp for r in records] == [answer["log_append_time_ms"]] * 3
    # The time index follows the append time, not the producer's clock.
    lo = client.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                          "timestamp": OLD + 1}]}]})
    assert lo["topics"][0]["partitions"][0]["offset"] == 0


def test_create_time_topic_answers_minus_one(broker, client):
    topic = unique("ct")
    create_topic(client, topic, "CreateTime")
    answer = produce(client, topic, build_batch([b"x"], timestamp=OLD))
    assert (answer["error_code"], answer["log_append_time_ms"]) == (0, -1)
    [(header, records)] = fetch_batches(client, topic)
    assert header.timestamp_type == 0 and records[0].timestamp == OLD


def test_create_time_topic_clears_a_producers_log_append_time_bit(broker, client):
    """Kafka's LogValidator rewrites such a batch as CreateTime (maxTimestamp kept)."""
    topic = unique("ct-bit")
    create_topic(client, topic, "CreateTime")
    batch = build_batch([b"x", b"y"], timestamp=OLD, timestamp_type=1)
    answer = produce(client, topic, batch)
    assert (answer["error_code"], answer["log_append_time_ms"]) == (0, -1)
    [(header, records)] = fetch_batches(client, topic)
    assert header.timestamp_type == 0
    assert [r.timestamp for r in records] == [OLD, OLD]


def test_log_append_time_topic_refuses_a_producers_log_append_time_bit(broker, client):
    """Kafka's validateTimestamp: a producer may not set LogAppendTime itself. Nothing is
    stored."""
    topic = unique("lat-bit")
    create_topic(client, topic, "LogAppendTime")
    answer = produce(client, topic, build_batch([b"x"], timestamp=OLD, timestamp_type=1))
    assert answer["error_code"] == ErrorCode.INVALID_TIMESTAMP
    assert answer["error_code"] != ErrorCode.NONE and answer["base_offset"] == -1
    assert fetch_batches(client, topic) == []


def test_old_produce_versions_get_the_append_time_too(broker, client):
    topic = unique("lat-v2")
    create_topic(client, topic, "LogAppendTime")
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=OLD, key=None, value=b"legacy")
    before = int(time.time() * 1000)
    answer = produce(client, topic, bytes(builder.build()), version=2)
    assert answer["error_code"] == 0 and answer["log_append_time_ms"] >= before
    [(header, records)] = fetch_batches(client, topic)
    assert header.timestamp_type == 1
    assert records[0].timestamp == answer["log_append_time_ms"]


def test_idempotent_retry_answers_the_first_append_time(broker, client):
    topic = unique("lat-retry")
    create_topic(client, topic, "LogAppendTime")
    producer_id = client.call(ApiKey.INIT_PRODUCER_ID, 4,
                              {"transactional_id": None, "transaction_timeout_ms": 0,
                               "producer_id": -1, "producer_epoch": -1})["producer_id"]
    batch = build_batch([b"once"], timestamp=OLD, producer_id=producer_id, producer_epoch=0,
                        base_sequence=0)
    first = produce(client, topic, batch)
    time.sleep(0.01)
    again = produce(client, topic, batch)
    assert first["error_code"] == again["error_code"] == 0
    assert again["base_offset"] == first["base_offset"]
    assert again["log_append_time_ms"] == first["log_append_time_ms"] > OLD
    assert len(fetch_batches(client, topic)) == 1


def test_confluent_clients_see_log_append_time_and_the_log_keeps_it(tmp_path):
    from confluent_kafka import (TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer,
                                 TopicPartition)
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = unique("lat-client")
    broker = BrokerProcess(tmp_path / "data")
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic(topic, 1, 1, config={
            "message.timestamp.type": "LogAppendTime"})])
        futures[topic].result(30)
        reports = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        before = int(time.time() * 1000)
        for i in range(5):
            producer.produce(topic, b"v%d" % i, partition=0, timestamp=OLD + i,
                             on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
        assert producer.flush(30) == 0
        after = int(time.time() * 1000)
        assert all(err is None for err, _ts in reports)
        for _err, (ts_type, ts) in reports:
            assert ts_type == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after

        def consumed():
            consumer = Consumer({"bootstrap.servers": broker.bootstrap,
                                 "group.id": unique("g"), "enable.auto.commit": False})
            consumer.assign([TopicPartition(topic, 0, 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 5 and time.monotonic() < deadline:
                msg = consumer.poll(1)
                if msg is not None and msg.error() is None:
                    got.append((msg.value(), msg.timestamp()))
            consumer.close()
            return got

        got = consumed()
        assert [v for v, _ts in got] == [b"v%d" % i for i in range(5)]
        for _v, (ts_type, ts) in got:
            assert ts_type == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
        with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
            embedded = [(r.value, r.timestamp) for r in db.log(topic, 0).read()]
        assert embedded == [(v, ts) for v, (_t, ts) in got]
        broker.stop()
        broker = BrokerProcess(tmp_path / "data")
        assert consumed() == got
    finally:
        broker.stop()
