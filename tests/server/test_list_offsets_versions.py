"""Every ListOffsets version Kafka 3.9 serves (0-9), OffsetForLeaderEpoch 0-4 and
InitProducerId 0-5, through raw frames (and kafka-python pinned to 0.9 for ListOffsets v0).

v0 answers by segment (base offsets and file modification times, Kafka's
legacyFetchOffsetsBefore); from v1 each special timestamp needs its version (-3 v7, -4 v8,
-5 v9) or gets UNSUPPORTED_VERSION; -4 is the log start and -5 offset -1 on a broker without
tiered storage; a partition named twice gets INVALID_REQUEST."""

import os

import pytest

from broker_process import RawClient, unique
from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode

T0 = 1_700_000_000_000


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def new_topic(client, configs=()):
    topic = unique("lo")
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs]}],
            "timeout_ms": 10000, "validate_only": False}
    assert client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0
    return topic


def produce(client, topic, values, timestamp=T0):
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [
            {"index": 0, "records": build_batch(values, timestamp=timestamp)}]}]}
    [p] = client.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"]
    assert p["error_code"] == 0
    return p["base_offset"]


def list_offsets(client, version, topic, *partitions, replica_id=-1):
    """``partitions``: (timestamp, extra fields) per entry, all of partition 0."""
    body = {"replica_id": replica_id, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [dict({"partition_index": 0, "current_leader_epoch": -1,
                                             "timestamp": ts, "max_num_offsets": 1}, **extra)
                                       for ts, extra in partitions]}]}
    return client.call(ApiKey.LIST_OFFSETS, version, body)["topics"][0]["partitions"]


def v0(client, topic, timestamp, max_num_offsets=10, replica_id=-1):
    [p] = list_offsets(client, 0, topic, (timestamp, {"max_num_offsets": max_num_offsets}),
                       replica_id=replica_id)
    return p["error_code"], p["old_style_offsets"]


@pytest.fixture
def three_segments(broker, client):
    """A topic whose segments start at 0, 3 and 6 (log end 8), last modified at 1000 s,
    2000 s and 3000 s."""
    topic = new_topic(client, [("segment.bytes", "200")])
    for i in range(4):
        produce(client, topic, [b"x" * 40, b"y" * 40] if i < 3 else [b"z" * 40])
    directory = os.path.join(broker.data_dir, f"{topic}-0")
    bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log"))
    assert bases == [0, 2, 4, 6], bases
    for base, seconds in zip(bases, (1000, 2000, 3000, 4000)):
        os.utime(os.path.join(directory, "%020d.log" % base), (seconds, seconds))
    return topic


def test_v0_latest_lists_the_log_end_then_segment_bases(client, three_segments):
    assert v0(client, three_segments, -1) == (0, [7, 6, 4, 2, 0])
    assert v0(client, three_segments, -1, max_num_offsets=1) == (0, [7])
    assert v0(client, three_segments, -1, max_num_offsets=0) == (0, [])


def test_v0_earliest_is_the_log_start(client, three_segments):
    assert v0(client, three_segments, -2) == (0, [0])
    assert client.call(ApiKey.DELETE_RECORDS, 2,
                       {"topics": [{"name": three_segments, "partitions": [
        {"partition_index": 0, "offset": 3}]}], "timeout_ms": 1000})["topics"][0][
        "partitions"][0]["error_code"] == 0
    # Segments below the log start are gone; the one holding it answers the log start.
    assert v0(client, three_segments, -2) == (0, [3])
    assert v0(client, three_segments, -1) == (0, [7, 6, 4, 3])


def test_v0_by_time_uses_segment_modification_times(client, three_segments):
    assert v0(client, three_segments, 2_500_000) == (0, [2, 0])
    assert v0(client, three_segments, 2_500_000, max_num_offsets=1) == (0, [2])
    assert v0(client, three_segments, 4_000_000) == (0, [6, 4, 2, 0])
    assert v0(client, three_segments, 999_999) == (0, [])


def test_v0_refusals(client, three_segments):
    assert v0(client, three_segments, -3)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert v0(client, three_segments, -1, max_num_offsets=-1)[0] == \
        ErrorCode.UNKNOWN_SERVER_ERROR
    [p] = list_offsets(client, 0, "no-such-topic-" + unique("x"), (-1, {}))
    assert p["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_kafka_python_pinned_to_0_9_uses_v0(broker, client):
    from kafka import KafkaConsumer, TopicPartition
    topic = new_topic(client)
    produce(client, topic, [b"a", b"b", b"c"])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 9))
    tp = TopicPartition(topic, 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 3}
    consumer.close()


@pytest.mark.parametrize("version", range(1, 10))
def test_special_timestamps_need_their_version(client, version):
    topic = new_topic(client)
    produce(client, topic, [b"a", b"b"], timestamp=T0)
    produce(client, topic, [b"c"], timestamp=T0 + 50)
    produce(client, topic, [b"d"], timestamp=T0 + 10)
    got = [(p["error_code"], p["offset"])
           for ts in (-1, -2, -3, -4, -5, -6, T0 + 20)
           for p in list_offsets(client, version, topic, (ts, {}))]
    unsupported = (ErrorCode.UNSUPPORTED_VERSION, -1)
    assert got == [
        (0, 4), (0, 0),
        (0, 2) if version >= 7 else unsupported,
        (0, 0) if version >= 8 else unsupported,
        (0, -1) if version >= 9 else unsupported,
        unsupported,
        (0, 2)]


def test_latest_tiered_still_checks_the_partition_and_epoch(client):
    topic = new_topic(client)
    [p] = list_offsets(client, 9, topic, (-5, {"current_leader_epoch": 99}))
    assert p["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    body = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 7, "current_leader_epoch": -1,
                                        "timestamp": -5}]}]}
    [p] = client.call(ApiKey.LIST_OFFSETS, 9, body)["topics"][0]["partitions"]
    assert p["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_partition_named_twice_is_an_invalid_request(client):
    topic = new_topic(client)
    produce(client, topic, [b"a"])
    answers = list_offsets(client, 7, topic, (-1, {}), (-2, {}))
    assert [(p["error_code"], p["offset"]) for p in answers] == \
        [(ErrorCode.INVALID_REQUEST, -1)] * 2


@pytest.mark.parametrize("version", range(0, 5))
def test_offset_for_leader_epoch_every_version(client, version):
    topic = new_topic(client)
    produce(client, topic, [b"a", b"b", b"c"])
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    [p] = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)["topics"][0]["partitions"]
    assert (p["error_code"], p["end_offset"]) == (0, 3)
    if version >= 1:                  # not on the wire before v1
        assert p["leader_epoch"] == 0
    else:
        assert "leader_epoch" not in p


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_every_version(client, version):
    body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1}
    answer = client.call(ApiKey.INIT_PRODUCER_ID, version, body)
    assert answer["error_code"] == 0 and answer["producer_id"] >= 0
    assert answer["producer_epoch"] == 0


@pytest.mark.parametrize("key, version", [(2, v) for v in range(10)] +
                         [(23, v) for v in range(5)] + [(22, v) for v in range(6)])
def test_response_layouts_are_kafka_39s(client, key, version):
    """Raw response frames read by kio (Kafka 3.9's JSON)."""
    kio_index = pytest.importorskip("kio.index")
    from kio.serial import entity_reader
    topic = new_topic(client)
    produce(client, topic, [b"a"])
    body = {
        2: {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1,
             "max_num_offsets": 3}]}]},
        23: {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        22: {"transactional_id": None, "transaction_timeout_ms": 0, "producer_id": -1,
             "producer_epoch": -1},
    }[key]
    client.send(key, version, body)
    frame = client.frame()
    flexible = {2: 6, 23: 4, 22: 2}[key] <= version
    header = 4 + (1 if flexible else 0)
    schema = kio_index.load_response_schema(key, version)
    entity, size = entity_reader(schema)(frame[header:], 0)
    assert size == len(frame) - header
    if key == 2:
        [p] = entity.topics[0].partitions
        assert p.error_code.value == 0
        assert (list(p.old_style_offsets) if version == 0 else p.offset) == \
            ([1, 0] if version == 0 else 1)
