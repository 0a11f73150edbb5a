"""Per-record refusals (KIP-467): a produced batch refused because of some of its records
names them in the Produce answer (v8+) -- ``record_errors`` with each one's index in the
batch and LogValidator's message, ``error_message`` with Kafka's summary -- and nothing of
the batch is stored. Raw frames for the wire (v8, v9 flexible, v7 without the fields), then
librdkafka, which fails only the named records as invalid."""

import pytest

import kqlite
from broker_process import RawClient, unique
from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode

T0 = 1_700_000_000_000


def create_topic(client, topic, configs):
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout_ms": 10000, "validate_only": False}
    [result] = client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
    assert result["error_code"] == 0, result


def produce(client, topic, records, version):
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    [p] = client.call(ApiKey.PRODUCE, version, body)["responses"][0]["partition_responses"]
    return p


def stored(broker, topic):
    with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
        return [r.key for r in db.log(topic, 0).read()]


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


@pytest.fixture
def compacted(client):
    topic = unique("compacted")
    create_topic(client, topic, {"cleanup.policy": "compact"})
    return topic


def _keys_with_gaps():
    """Five records; those at 1 and 3 have no key."""
    return [kqlite.Record(b"v%d" % i, key=None if i in (1, 3) else b"k%d" % i)
            for i in range(5)]


@pytest.mark.parametrize("version", [8, 9])
def test_keyless_records_are_named_by_their_batch_index(broker, client, compacted, version):
    answer = produce(client, compacted, build_batch(_keys_with_gaps(), timestamp=T0), version)
    message = (f"Compacted topic cannot accept message without key in topic partition "
               f"{compacted}-0")
    assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.INVALID_RECORD, -1)
    assert answer["record_errors"] == [
        {"batch_index": 1, "batch_index_error_message": message},
        {"batch_index": 3, "batch_index_error_message": message}]
    assert answer["error_message"] == (
        f"One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message="
        f"'{message}'), RecordError(batchIndex=3, message='{message}')]")
    assert stored(broker, compacted) == []


def test_produce_v7_has_no_record_errors(broker, client, compacted):
    answer = produce(client, compacted, build_batch(_keys_with_gaps(), timestamp=T0), 7)
    assert answer["error_code"] == ErrorCode.INVALID_RECORD
    assert "record_errors" not in answer and "error_message" not in answer


def test_a_batch_without_a_bad_record_has_no_record_errors(broker, client, compacted):
    records = [kqlite.Record(b"v", key=b"k%d" % i) for i in range(3)]
    answer = produce(client, compacted, build_batch(records, timestamp=T0), 8)
    assert (answer["error_code"], answer["record_errors"], answer["error_message"]) == \
        (ErrorCode.NONE, [], None)


def test_a_producers_log_append_time_batch_names_every_record(broker, client):
    topic = unique("lat")
    create_topic(client, topic, {"message.timestamp.type": "LogAppendTime"})
    batch = build_batch([kqlite.Record(b"ab", key=b"k"), kqlite.Record(b"c")], timestamp=T0,
                        timestamp_type=1)
    answer = produce(client, topic, batch, 8)
    assert answer["error_code"] == ErrorCode.INVALID_TIMESTAMP
    assert answer["error_message"] == \
        "One or more records have been rejected due to invalid timestamp"
    assert [e["batch_index"] for e in answer["record_errors"]] == [0, 1]
    assert answer["record_errors"][1]["batch_index_error_message"] == (
        f"Invalid timestamp type in message DefaultRecord(offset=1, timestamp={T0}, key=0 "
        f"bytes, value=1 bytes). Producer should not set timestamp type to LogAppendTime.")


def test_librdkafka_fails_only_the_keyless_records_as_invalid(broker, client, compacted):
    """librdkafka (rdkafka_request.c, rd_kafka_msgbatch_handle_Produce_result_record_errors)
    fails the whole batch, as Kafka refuses it whole: the records ``record_errors`` names get
    INVALID_RECORD (librdkafka keeps each one's message as the message's errstr, which
    confluent-kafka's KafkaError does not show), every other one _INVALID_DIFFERENT_RECORD
    ("an invalid record in the same batch caused the failure of this message too"), which
    the application may send again."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    KafkaError = confluent_kafka.KafkaError
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "linger.ms": 500,
        "batch.num.messages": 1000, "compression.type": "none"})
    reports = {}

    def report(err, msg):
        reports[int(msg.value())] = err

    keyless = set(range(5, 100, 10))
    for i in range(100):
        producer.produce(compacted, value=b"%d" % i, partition=0,
                         key=None if i in keyless else b"k%d" % i, on_delivery=report)
    assert producer.flush(30) == 0
    invalid = {i for i, err in reports.items()
               if err is not None and err.code() == KafkaError.INVALID_RECORD}
    assert invalid == keyless
    others = {i for i, err in reports.items()
              if err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD}
    # A record librdkafka sent in a batch of its own before the rest (the first, when
    # its linger ends early) holds a key and is delivered.
    delivered = {i for i, err in reports.items() if err is None}
    assert others and others | delivered == set(range(100)) - keyless
    assert not others & delivered
    first = stored(broker, compacted)
    assert first == [b"k%d" % i for i in sorted(delivered)]

    reports.clear()
    for i in sorted(others):
        producer.produce(compacted, value=b"%d" % i, partition=0, key=b"k%d" % i,
                         on_delivery=report)
    assert producer.flush(30) == 0
    assert set(reports) == others and all(err is None for err in reports.values())
    assert stored(broker, compacted) == first + [b"k%d" % i for i in sorted(others)]
