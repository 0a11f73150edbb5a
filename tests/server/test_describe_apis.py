"""DescribeLogDirs, DescribeCluster, DescribeProducers and ApiVersions v4 against
`kqlite serve`: kafka-python where it has the call (confluent-kafka's describe_cluster
asks Metadata instead, and it has no log-dir or producer calls), raw frames through
kqlite's codec for the errors, and every served version's layout checked against kio,
which is generated from Apache Kafka 3.9's message definitions."""

import io
import os
import shutil
import struct

import pytest

from broker_process import BrokerProcess, RawClient, unique

import kqlite
from kqlite.protocol import SUPPORTED, ApiKey, ErrorCode

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, TopicPartition  # noqa: E402

# The versions Apache Kafka 3.9 serves of AlterConfigs, IncrementalAlterConfigs,
# DescribeLogDirs, DescribeCluster, DescribeProducers and ApiVersions (none unstable).
KAFKA_39_VERSIONS = {ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
                     ApiKey.DESCRIBE_LOG_DIRS: (0, 4), ApiKey.DESCRIBE_CLUSTER: (0, 1),
                     ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.API_VERSIONS: (0, 4)}
# Kafka's AclOperation names of the CLUSTER resource's operations (AclEntry).
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
                      "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}


def _create(raw, topic, partitions):
    body = raw.call(ApiKey.CREATE_TOPICS, 5,
                    {"topics": [{"name": topic, "num_partitions": partitions,
                                 "replication_factor": 1, "assignments": [],
                                 "configs": []}],
                     "timeout_ms": 5000, "validate_only": False})
    assert body["topics"][0]["error_code"] == 0, body


def _produce_plain(broker, topic, partition, count):
    confluent = pytest.importorskip("confluent_kafka")
    p = confluent.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(count):
        p.produce(topic, value=b"v" * 100, partition=partition)
    assert p.flush(10) == 0


# -- DescribeLogDirs --------------------------------------------------------------------------

def test_kafka_python_describe_log_dirs_reports_partition_sizes(broker):
    topic = unique("logdirs")
    raw = RawClient(broker)
    _create(raw, topic, 3)
    _produce_plain(broker, topic, 1, 20)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        everything = admin.describe_log_dirs()
        some = admin.describe_log_dirs({topic: [1, 2, 7]})
    finally:
        admin.close()
    with kqlite.open(broker.data_dir) as db:
        sizes = {p.partition: p.size for p in db.describe_topic(topic).partitions}
    assert sizes[1] > 2000 and sizes[0] == sizes[2] == 0

    [result] = everything[0]["log_dirs"]
    assert result["error_code"] == 0
    assert result["log_dir"] == os.path.abspath(broker.data_dir)
    listed = {t["name"]: t["partitions"] for t in result["topics"]}
    assert {p["partition_index"]: p["partition_size"] for p in listed[topic]} == sizes
    assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in listed[topic])

    [result] = some[0]["log_dirs"]
    assert [(t["name"], [(p["partition_index"], p["partition_size"]) for p in t["partitions"]])
            for t in result["topics"]] == [(topic, [(1, sizes[1]), (2, 0)])]


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_log_dirs_every_version(broker, version):
    topic = unique(f"logdirs-v{version}")
    raw = RawClient(broker)
    _create(raw, topic, 2)
    body = raw.call(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": [
        {"topic": topic, "partitions": [0, 1, 0]},
        {"topic": "no-such-topic", "partitions": [0]}]})
    [result] = body["results"]
    assert result["error_code"] == 0
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in result["topics"]] == [(topic, [0, 1])]
    if version >= 3:
        assert body["error_code"] == 0
    if version >= 4:
        usage = shutil.disk_usage(broker.data_dir)
        assert result["total_bytes"] == usage.total
        assert 0 < result["usable_bytes"] <= usage.total
    raw.close()


def test_describe_log_dirs_never_looks_outside_the_data_dir(broker, tmp_path):
    outside = os.path.dirname(os.path.abspath(broker.data_dir))
    before = sorted(os.listdir(outside))
    raw = RawClient(broker)
    names = ["../escape", "..", "a/b", "x" * 250, "nul\0name", ""]
    body = raw.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": n, "partitions": [0]}
                                                            for n in names]})
    assert body["results"][0]["error_code"] == 0
    assert body["results"][0]["topics"] == []
    assert sorted(os.listdir(outside)) == before
    assert raw.metadata_ok()
    raw.close()


# -- DescribeCluster --------------------------------------------------------------------------

def test_kafka_python_describe_cluster(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    with open(os.path.join(broker.data_dir, "meta.properties")) as f:
        cluster_id = dict(line.strip().split("=", 1) for line in f if "=" in line)["cluster.id"]
    assert cluster["cluster_id"] == cluster_id
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == \
        [(0, "127.0.0.1", broker.port)]
    # Only DescribeCluster (not the Metadata fallback) carries the cluster's operations.
    assert set(cluster["authorized_operations"]) == CLUSTER_OPERATIONS


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_raw(broker, version):
    raw = RawClient(broker)
    asked = raw.call(ApiKey.DESCRIBE_CLUSTER, version,
                     {"include_cluster_authorized_operations": True})
    plain = raw.call(ApiKey.DESCRIBE_CLUSTER, version,
                     {"include_cluster_authorized_operations": False})
    assert asked["error_code"] == 0 and asked["error_message"] is None
    assert asked["cluster_authorized_operations"] == sum(
        1 << code for code in (5, 7, 8, 9, 10, 11, 12))
    assert plain["cluster_authorized_operations"] == -2147483648
    assert asked["brokers"] == [{"broker_id": 0, "host": "127.0.0.1", "port": broker.port,
                                 "rack": None}]
    if version >= 1:
        assert asked["endpoint_type"] == 1
    raw.close()


@pytest.mark.parametrize("endpoint, code", [(2, ErrorCode.MISMATCHED_ENDPOINT_TYPE),
                                            (0, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                                            (9, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)])
def test_describe_cluster_refuses_other_endpoint_types(broker, endpoint, code):
    raw = RawClient(broker)
    body = raw.call(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": endpoint})
    assert body["error_code"] == code and body["error_message"]
    assert body["brokers"] == []
    assert raw.metadata_ok()
    raw.close()


# -- DescribeProducers ------------------------------------------------------------------------

def _idempotent_produce(broker, topic, partition, count, timestamp_ms):
    confluent = pytest.importorskip("confluent_kafka")
    p = confluent.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                            "linger.ms": 0, "max.in.flight.requests.per.connection": 1})
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=partition, timestamp=timestamp_ms + i)
        p.flush(10)
    assert p.flush(10) == 0


def _producer_ids(data_dir, topic, partition):
    with kqlite.open(data_dir) as db:
        with db.leased_log(topic, partition) as lg:
            return {(h.producer_id, h.producer_epoch) for h in lg.batch_headers(0)}


def test_kafka_python_describe_producers_and_after_a_restart(tmp_path):
    b = BrokerProcess(tmp_path / "data")
    try:
        topic = unique("producers")
        raw = RawClient(b)
        _create(raw, topic, 2)
        raw.close()
        _idempotent_produce(b, topic, 0, 5, 1_700_000_000_000)
        [(pid, epoch)] = _producer_ids(b.data_dir, topic, 0)
        assert pid >= 0
        expected = {TopicPartition(topic, 0): [(pid, epoch, 4, 1_700_000_000_004, -1, -1)],
                    TopicPartition(topic, 1): []}

        def described():
            admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
            try:
                found = admin.describe_producers([TopicPartition(topic, 0),
                                                  TopicPartition(topic, 1)])
            finally:
                admin.close()
            return {tp: [tuple(p) for p in state.active_producers]
                    for tp, state in found.items()}

        assert described() == expected
        b.stop()
        b = BrokerProcess(tmp_path / "data")
        assert described() == expected
    finally:
        b.stop()


def test_describe_producers_errors(broker):
    topic = unique("producers-err")
    raw = RawClient(broker)
    _create(raw, topic, 1)
    body = raw.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": topic, "partition_indexes": [0, 3, -1, 0]},
        {"name": "no-such-topic", "partition_indexes": [0]},
        {"name": "../escape", "partition_indexes": [0]},
        {"name": "x" * 250, "partition_indexes": [1]},
        {"name": "", "partition_indexes": [0]}]})
    got = [(t["name"][:10], [(p["partition_index"], p["error_code"]) for p in t["partitions"]])
           for t in body["topics"]]
    assert got == [
        (topic[:10], [(0, 0), (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                      (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (0, 0)]),
        ("no-such-to", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("../escape", [(0, ErrorCode.INVALID_TOPIC_EXCEPTION)]),
        ("x" * 10, [(1, ErrorCode.INVALID_TOPIC_EXCEPTION)]),
        ("", [(0, ErrorCode.INVALID_TOPIC_EXCEPTION)])]
    assert not os.path.exists(os.path.join(os.path.dirname(broker.data_dir), "escape-0"))
    assert raw.metadata_ok()
    raw.close()


def test_describe_producers_storage_work_is_bounded_by_the_partitions(tmp_path):
    """Naming 20,000 partitions (most of them twice, most of them absent) costs a storage
    call per topic and per existing partition, not per name."""
    from broker_thread import BrokerThread
    with BrokerThread(tmp_path / "data") as bt:
        raw = RawClient(bt)
        _create(raw, "counted", 2)
        calls = []
        run = bt.broker.io.run

        async def counting(fn, *args, **kwargs):
            calls.append(fn)
            return await run(fn, *args, **kwargs)
        bt.broker.io.run = counting
        indexes = list(range(-5000, 5000)) * 2
        body = raw.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": "counted", "partition_indexes": indexes},
            {"name": "absent", "partition_indexes": indexes}]})
        raw.close()
    first, second = body["topics"]
    assert [p["partition_index"] for p in first["partitions"]] == indexes
    assert {p["partition_index"] for p in first["partitions"] if p["error_code"] == 0} == \
        {0, 1}
    assert {p["error_code"] for p in second["partitions"]} == \
        {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert len(calls) <= 6, calls


# -- ApiVersions ------------------------------------------------------------------------------

def test_api_versions_serves_v4_and_lists_the_admin_apis(broker):
    raw = RawClient(broker)
    for version in range(0, 5):
        body = raw.call(ApiKey.API_VERSIONS, version, {"client_software_name": "t",
                                                       "client_software_version": "1"})
        assert body["error_code"] == 0
        listed = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert listed == SUPPORTED
        assert KAFKA_39_VERSIONS.items() <= listed.items()
    raw.close()


def test_api_versions_v5_is_answered_in_v0(broker):
    raw = RawClient(broker)
    # A v5 request header: the broker knows no v5 and answers in v0 (KIP-511).
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 5, 7, 1) + b"t" + b"\0"
    body = b"\x02t\x021\0"
    raw.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    from kqlite.protocol import decode_response
    _corr, answer = decode_response(ApiKey.API_VERSIONS, 5, raw.frame())
    assert answer["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {k["api_key"]: (k["min_version"], k["max_version"])
            for k in answer["api_keys"]}[18] == (0, 4)
    raw.close()


# -- Layouts against Kafka 3.9 (kio) ----------------------------------------------------------

_LOG_DIRS_RESPONSE = {"throttle_time_ms": 3, "error_code": 0, "results": [{
    "error_code": 0, "log_dir": "/data", "total_bytes": 1 << 40, "usable_bytes": 1 << 33,
    "topics": [{"name": "t", "partitions": [{"partition_index": 2, "partition_size": 99,
                                             "offset_lag": 0, "is_future_key": False}]}]}]}
_ALTER_RESPONSE = {"throttle_time_ms": 0, "responses": [{
    "error_code": 40, "error_message": "bad", "resource_type": 2, "resource_name": "t"}]}
_BODIES = {
    (ApiKey.ALTER_CONFIGS, "request"): {
        "resources": [{"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.ms", "value": "1"}, {"name": "x", "value": None}]}],
        "validate_only": True},
    (ApiKey.ALTER_CONFIGS, "response"): _ALTER_RESPONSE,
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, "request"): {
        "resources": [{"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
            {"name": "retention.ms", "config_operation": 1, "value": None}]}],
        "validate_only": False},
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, "response"): _ALTER_RESPONSE,
    (ApiKey.DESCRIBE_LOG_DIRS, "request"): {"topics": [{"topic": "t", "partitions": [0, 5]}]},
    (ApiKey.DESCRIBE_LOG_DIRS, "response"): _LOG_DIRS_RESPONSE,
    (ApiKey.DESCRIBE_CLUSTER, "request"): {"include_cluster_authorized_operations": True,
                                           "endpoint_type": 1},
    (ApiKey.DESCRIBE_CLUSTER, "response"): {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "endpoint_type": 1, "cluster_id": "c", "controller_id": 0,
        "brokers": [{"broker_id": 0, "host": "h", "port": 9, "rack": "r"}],
        "cluster_authorized_operations": 8096},
    (ApiKey.DESCRIBE_PRODUCERS, "request"): {"topics": [{"name": "t",
                                                         "partition_indexes": [0, 1]}]},
    (ApiKey.DESCRIBE_PRODUCERS, "response"): {"throttle_time_ms": 0, "topics": [{
        "name": "t", "partitions": [{
            "partition_index": 0, "error_code": 0, "error_message": None, "active_producers": [{
                "producer_id": 1000, "producer_epoch": 2, "last_sequence": 41,
                "last_timestamp": 1_700_000_000_000, "coordinator_epoch": -1,
                "current_txn_start_offset": -1}]}]}]},
    (ApiKey.API_VERSIONS, "request"): {"client_software_name": "kio",
                                       "client_software_version": "0.5"},
    (ApiKey.API_VERSIONS, "response"): {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 4}]},
}
_CASES = [(key, v, kind) for key, (lo, hi) in sorted(KAFKA_39_VERSIONS.items())
          for v in range(lo, hi + 1) for kind in ("request", "response")]


@pytest.mark.parametrize("key, version, kind", _CASES,
                         ids=[f"{k}-v{v}-{kind}" for k, v, kind in _CASES])
def test_layout_is_kafka_39s(key, version, kind):
    """kio (Kafka 3.9's JSON) reads every byte kqlite writes and writes them back alike."""
    kio_index = pytest.importorskip("kio.index")
    from kio.serial import entity_reader, entity_writer
    from kqlite.protocol.codec import message
    from kqlite.protocol.primitives import Writer
    w = Writer()
    message(key, version, kind).encode(w, _BODIES[(key, kind)])
    ours = bytes(w.out)
    load = kio_index.load_request_schema if kind == "request" else kio_index.load_response_schema
    schema = load(key, version)
    entity, size = entity_reader(schema)(ours, 0)
    assert size == len(ours)
    theirs = io.BytesIO()
    entity_writer(schema)(theirs, entity)
    assert theirs.getvalue() == ours
