"""Every Produce version Kafka 3.9 serves (0-11), through raw frames and old clients.

v0-2 carry legacy message sets (magic 0/1), which the broker up-converts to v2 batches as
Kafka 3.x does; each version is answered in its own layout (read back by kio, generated
from Kafka 3.9's message JSON); v3+ refuse legacy sets, v3-6 refuse zstd."""

import struct
import zlib

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import kqlite
from broker_process import RawClient, unique
from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode

T0 = 1_700_000_000_000
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def new_topic(client):
    topic = unique("pv")
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 10000, "validate_only": False}
    assert client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0
    return topic


def legacy(magic, codec, n=3, start=0):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(start, start + n):
        builder.append(i - start, timestamp=T0 + i if magic else None, key=b"k%d" % i,
                       value=b"v%d" % i)
    return bytes(builder.build())


def produce_request(topic, records, version, acks=-1):
    return {"transactional_id": None, "acks": acks, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                               "records": records}]}]}


def produce(client, topic, records, version):
    response = client.call(ApiKey.PRODUCE, version, produce_request(topic, records, version))
    [t] = response["responses"]
    [p] = t["partition_responses"]
    return p


def stored(broker, topic):
    with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
        log = db.log(topic, 0)
        return log.end_offset, [(r.offset, r.timestamp, r.key, r.value) for r in log.read()]


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("magic, codec", [(0, NONE), (0, GZIP), (1, NONE), (1, GZIP),
                                          (1, SNAPPY), (1, LZ4)])
def test_legacy_message_sets_are_up_converted(broker, client, version, magic, codec):
    topic = new_topic(client)
    first = produce(client, topic, legacy(magic, codec, 3), version)
    second = produce(client, topic, legacy(magic, codec, 2, start=3), version)
    assert (first["error_code"], first["base_offset"]) == (0, 0)
    assert (second["error_code"], second["base_offset"]) == (0, 3)
    end, records = stored(broker, topic)
    assert end == 5
    assert records == [(i, T0 + i if magic else -1, b"k%d" % i, b"v%d" % i) for i in range(5)]


def test_a_v2_batch_in_an_old_request_is_appended(broker, client):
    """Kafka checks the magic only from v3; librdkafka has sent v2 batches in v2 requests."""
    topic = new_topic(client)
    answer = produce(client, topic, build_batch([b"new"], timestamp=T0), 2)
    assert (answer["error_code"], answer["base_offset"]) == (0, 0)
    assert stored(broker, topic) == (1, [(0, T0, None, b"new")])


@pytest.mark.parametrize("version", range(3, 12))
def test_v2_batches_in_every_later_version(broker, client, version):
    topic = new_topic(client)
    answer = produce(client, topic, build_batch([b"a", b"b"], timestamp=T0), version)
    assert (answer["error_code"], answer["base_offset"]) == (0, 0)
    assert answer["log_append_time_ms"] == -1
    if version >= 5:
        assert answer["log_start_offset"] == 0
    assert stored(broker, topic)[0] == 2


@pytest.mark.parametrize("version", [3, 9, 11])
def test_legacy_sets_are_refused_from_v3(broker, client, version):
    topic = new_topic(client)
    answer = produce(client, topic, legacy(1, NONE), version)
    assert answer["error_code"] == ErrorCode.INVALID_RECORD
    assert stored(broker, topic) == (0, [])


@pytest.mark.parametrize("version, code", [(3, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                                           (6, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                                           (7, ErrorCode.NONE), (11, ErrorCode.NONE)])
def test_zstd_needs_v7(broker, client, version, code):
    pytest.importorskip("zstandard")
    topic = new_topic(client)
    answer = produce(client, topic, build_batch([b"z"] * 3, timestamp=T0, codec="zstd"),
                     version)
    assert answer["error_code"] == code
    assert stored(broker, topic)[0] == (3 if code == ErrorCode.NONE else 0)


def _recrc(entry):
    entry = bytearray(entry)
    struct.pack_into(">I", entry, 12, zlib.crc32(entry[16:]))
    return bytes(entry)


@pytest.mark.parametrize("records, code", [
    (legacy(0, NONE) + legacy(1, NONE), ErrorCode.INVALID_RECORD),       # magic changes
    (legacy(1, GZIP) + legacy(1, GZIP), ErrorCode.INVALID_RECORD),       # two wrappers
    (legacy(1, NONE)[:-1] + b"\0", ErrorCode.CORRUPT_MESSAGE),           # CRC
    (legacy(1, NONE)[:-4], ErrorCode.CORRUPT_MESSAGE),                   # partial message
    (_recrc(legacy(1, NONE, 1)[:17] + bytes([6]) + legacy(1, NONE, 1)[18:]),
     ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),                            # codec id 6
    (None, ErrorCode.INVALID_RECORD),
], ids=["mixed-magic", "two-wrappers", "crc", "partial", "codec-6", "null"])
def test_bad_legacy_sets_are_refused_and_nothing_is_stored(broker, client, records, code):
    topic = new_topic(client)
    answer = produce(client, topic, records, 2)
    assert (answer["error_code"], answer["base_offset"]) == (code, -1)
    assert stored(broker, topic) == (0, [])
    # The connection stays usable.
    assert produce(client, topic, legacy(1, NONE), 2)["error_code"] == 0


@pytest.mark.parametrize("version", range(0, 12))
def test_every_response_layout_is_kafka_39s(broker, client, version):
    """The raw response frame of each version, read by kio (Kafka 3.9's JSON)."""
    kio_index = pytest.importorskip("kio.index")
    from kio.serial import entity_reader
    topic = new_topic(client)
    records = legacy(1, NONE) if version < 3 else build_batch([b"x"], timestamp=T0)
    client.send(ApiKey.PRODUCE, version, produce_request(topic, records, version))
    frame = client.frame()
    header_size = 4 + (1 if version >= 9 else 0)        # correlation id (+ tagged fields)
    schema = kio_index.load_response_schema(0, version)
    entity, size = entity_reader(schema)(frame[header_size:], 0)
    assert size == len(frame) - header_size
    [t] = entity.responses
    [p] = t.partition_responses
    assert (t.name, p.index, p.error_code.value, p.base_offset) == (topic, 0, 0, 0)


def test_kafka_python_with_old_protocol_versions(broker):
    """kafka-python pinned to 0.10 (Produce v2, magic 1) and 0.9 (Produce v1, magic 0)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    for api_version, magic in (((0, 10, 0), 1), ((0, 9), 0)):
        topic = unique("old-client")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                                 compression_type="gzip")
        metas = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0,
                               timestamp_ms=T0 + i if magic else None).get(30)
                 for i in range(5)]
        producer.close()
        assert [m.offset for m in metas] == list(range(5))
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=3000,
                                 auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0)])
        got = [(m.offset, m.key, m.value) for m in consumer]
        consumer.close()
        assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]
        end, records = stored(broker, topic)
        assert [r[1] for r in records] == [T0 + i if magic else -1 for i in range(5)]
