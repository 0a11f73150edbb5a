"""Every Fetch version Kafka 3.9 serves, 0-17: old readers get down-converted records
(magic 0 for v0-1, magic 1 for v2-3), v13+ name topics by id, v16+ name the leader on
a fenced epoch. Raw frames through the project's codec, kio (code generated from Kafka
3.9's JSON) as an independent parser, and kafka-python pinned to old protocol versions."""

import time
import uuid

import pytest

from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch, decode_batch
from kqlite.format.legacy import iter_legacy_records
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.handlers import fetch as fetch_handler

VALUES = [b"v%d" % i for i in range(12)]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def body(topics, **extra):
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "topics": topics, "forgotten_topics_data": [], **extra}


def p(index, offset=0, current_leader_epoch=-1):
    return {"partition": index, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
            "current_leader_epoch": current_leader_epoch}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("versions") / "data") as b:
        db = b.broker.db
        db.create_topic("mixed", 1)
        with db.leased_log("mixed", 0) as log:
            # Three records per batch, each codec in turn.
            log.append_batches(b"".join(
                build_batch(VALUES[i:i + 3], base_offset=i, codec=list(CODECS.values())[i // 3])
                for i in range(0, 12, 3)))
        db.create_topic("zstd-topic", 1, {"compression.type": "zstd"})
        db.create_topic("zstd-batches", 1)
        with db.leased_log("zstd-batches", 0) as log:
            log.append_batches(build_batch([b"z"], codec=4))
        db.create_topic("fenced", 1)
        with db.leased_log("fenced", 0) as log:
            log.append_as_leader(build_batch([b"e"]), leader_epoch=3)
        yield b


def topic_id(client, name):
    meta = client.call(ApiKey.METADATA, 12,
                       {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    return meta["topics"][0]["topic_id"]


@pytest.mark.parametrize("version", range(0, 18))
def test_every_version_reads_every_record(broker, version):
    client = RawClient(broker)
    topic = {"topic_id": topic_id(client, "mixed")} if version >= 13 else {"topic": "mixed"}
    # From offset 4: inside the second batch (gzip) -- legacy readers get it whole.
    response = client.call(ApiKey.FETCH, version, body([{**topic, "partitions": [p(0, 4)]}]))
    client.close()
    (t,) = response["responses"]
    (part,) = t["partitions"]
    assert part["error_code"] == ErrorCode.NONE and part["high_watermark"] == 12
    data = bytes(part["records"])
    if version >= 4:
        offsets, pos = [], 0
        while pos < len(data):
            header, records = decode_batch(data, pos)
            offsets += [r.offset for r in records]
            pos += header.size
        assert offsets == list(range(3, 12))
        assert data[16] == 2
    else:
        magic = 0 if version <= 1 else 1
        records = list(iter_legacy_records(data))
        assert [(r.offset, r.value) for r in records] == \
            [(i, VALUES[i]) for i in range(3, 12)]
        assert data[16] == magic             # the first entry's magic
        assert all(r.timestamp == -1 for r in records) == (magic == 0)


def test_responses_parse_with_kio_in_every_version(broker):
    kio_serial = pytest.importorskip("kio.serial")
    import importlib
    client = RawClient(broker)
    tid = topic_id(client, "mixed")
    for version in range(0, 18):
        topic = {"topic_id": tid} if version >= 13 else {"topic": "mixed"}
        client.send(ApiKey.FETCH, version, body([{**topic, "partitions": [p(0), p(5)]}]))
        frame = client.frame()
        module = importlib.import_module(f"kio.schema.fetch.v{version}.response")
        start = 5 if version >= 12 else 4     # correlation id, [empty header tags]
        parsed, size = kio_serial.entity_reader(module.FetchResponse)(memoryview(frame), start)
        assert start + size == len(frame)
        parts = parsed.responses[0].partitions
        assert [(q.partition_index, q.error_code.value) for q in parts] == \
            [(0, 0), (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert parts[1].records == b""        # an error carries empty records, not null
    client.close()


def test_unknown_topic_ids(broker):
    client = RawClient(broker)
    stranger = uuid.uuid4()
    response = client.call(ApiKey.FETCH, 13,
                           body([{"topic_id": stranger, "partitions": [p(0), p(1)]},
                                 {"topic_id": uuid.UUID(int=0),
                                  "partitions": [p(0)]}]))
    client.close()
    assert [(t["topic_id"], [(q["partition_index"], q["error_code"]) for q in t["partitions"]])
            for t in response["responses"]] == [
        (stranger, [(0, ErrorCode.UNKNOWN_TOPIC_ID), (1, ErrorCode.UNKNOWN_TOPIC_ID)]),
        (uuid.UUID(int=0), [(0, ErrorCode.UNKNOWN_TOPIC_ID)])]


def test_zstd_for_old_readers(broker):
    client = RawClient(broker)
    for version, topic, code in [(3, "zstd-batches", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                                 (9, "zstd-topic", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                                 (10, "zstd-topic", ErrorCode.NONE),
                                 (9, "zstd-batches", ErrorCode.NONE)]:
        response = client.call(ApiKey.FETCH, version,
                               body([{"topic": topic, "partitions": [p(0)]}]))
        (part,) = response["responses"][0]["partitions"]
        assert (version, topic, part["error_code"]) == (version, topic, code)
        if code:
            assert part["records"] == b""
    client.close()


def test_v16_names_the_leader_of_a_fenced_epoch(broker):
    client = RawClient(broker)
    tid = topic_id(client, "fenced")
    response = client.call(ApiKey.FETCH, 16,
                           body([{"topic_id": tid,
                                  "partitions": [p(0, current_leader_epoch=1)]}]))
    (part,) = response["responses"][0]["partitions"]
    assert part["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    assert part["current_leader"] == {"leader_id": 0, "leader_epoch": 3}
    assert response["node_endpoints"] == [{"node_id": 0, "host": "127.0.0.1",
                                           "port": broker.port, "rack": None}]
    response = client.call(ApiKey.FETCH, 15,
                           body([{"topic_id": tid, "partitions": [p(0)]}],
                                replica_state={"replica_id": -1, "replica_epoch": -1}))
    assert response["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    client.close()


def test_max_bytes_is_capped_at_kafkas_fetch_max_bytes(broker, monkeypatch):
    assert fetch_handler.FETCH_MAX_BYTES == 55 * 1024 * 1024
    one = len(build_batch(VALUES[0:3]))
    monkeypatch.setattr(fetch_handler, "FETCH_MAX_BYTES", 2 * one + 10)
    client = RawClient(broker)
    response = client.call(ApiKey.FETCH, 11, body([{"topic": "mixed", "partitions": [p(0)]}],
                                                  max_bytes=0x7FFFFFFF))
    client.close()
    (part,) = response["responses"][0]["partitions"]
    assert 0 < len(part["records"]) <= 2 * one + 10


@pytest.mark.parametrize("api_version,magic", [((0, 9), 0), ((0, 10, 0), 1), ((0, 10, 1), 1)])
def test_kafka_python_on_old_protocol_versions(broker, api_version, magic):
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{broker.port}",
                                   api_version=api_version, enable_auto_commit=False,
                                   auto_offset_reset="earliest")
    consumer.assign([kafka.TopicPartition("mixed", 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 12 and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            got += [(r.offset, r.value, r.timestamp if magic else None) for r in records]
    consumer.close()
    assert [(o, v) for o, v, _ in got] == list(enumerate(VALUES))
    if magic == 0:
        assert {ts for _, _, ts in got} == {None}
    else:
        assert all(ts > 0 for _, _, ts in got)
