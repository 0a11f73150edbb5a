"""Topic administration as Kafka 3.9 serves it: every version of Metadata, CreateTopics,
DeleteTopics, DescribeConfigs and CreatePartitions that a Kafka 3.9 broker serves, topic
ids (Metadata v12, DeleteTopics v6), explicit replica assignments naming this broker,
and authorized operations in Metadata (all of them: there is no authorizer).

confluent-kafka where a client exhibits the behaviour, raw frames through kqlite's codec
for the versions and refusals no client sends.
"""

import uuid

import pytest

from broker_process import RawClient, unique

from kqlite.protocol import ApiKey, ErrorCode

ZERO = uuid.UUID(int=0)
NOT_ASKED = -2147483648           # Kafka's default authorized operations (Integer.MIN_VALUE)

# Kafka 3.9's AclOperation codes and AclEntry.supportedOperations, packed one bit per code
# (Utils.to32BitField): what a broker without an authorizer answers.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
TOPIC_OPS = (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPS = (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
               ALTER, DESCRIBE)

# The ranges an Apache Kafka 3.9 broker advertises (validVersions of the request JSON).
KAFKA_39 = {3: (0, 12), 19: (0, 7), 20: (0, 6), 32: (0, 4), 37: (0, 3)}


def bits(ops):
    return sum(1 << op for op in ops)


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def create(c, version, name, partitions=2, configs=(), **extra):
    topic = {"name": name, "num_partitions": partitions, "replication_factor": 1,
             "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs]}
    topic.update(extra)
    body = c.call(ApiKey.CREATE_TOPICS, version, {"topics": [topic], "timeout_ms": 5000,
                                                  "validate_only": False})
    (result,) = body["topics"]
    return result


def delete(c, version, name):
    if version < 6:
        body = c.call(ApiKey.DELETE_TOPICS, version, {"topic_names": [name], "timeout_ms": 5000})
    else:
        body = c.call(ApiKey.DELETE_TOPICS, version,
                      {"topics": [{"name": name}], "timeout_ms": 5000})
    return [(r["name"], r["error_code"]) for r in body["responses"]]


def described(c, version, name):
    body = c.call(ApiKey.METADATA, version,
                  {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    (topic,) = body["topics"]
    return topic


def test_api_versions_advertises_kafka_39s_ranges(client):
    body = client.call(ApiKey.API_VERSIONS, 3,
                       {"client_software_name": "t", "client_software_version": "1"})
    served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert {k: served.get(k) for k in KAFKA_39} == KAFKA_39


@pytest.mark.parametrize("version", range(0, 8))
def test_create_topics_every_version(client, version):
    name = unique(f"ct{version}")
    result = create(client, version, name, partitions=3, configs=[("retention.ms", "60000")])
    assert (result["name"], result["error_code"]) == (name, 0)
    assert len(described(client, 4, name)["partitions"]) == 3
    again = create(client, version, name)
    assert again["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    if version >= 1:
        assert "already exists" in again["error_message"]
    if version >= 5:
        assert (result["num_partitions"], result["replication_factor"]) == (3, 1)
    if version >= 7:
        assert result["topic_id"] == described(client, 10, name)["topic_id"] != ZERO


@pytest.mark.parametrize("version", range(0, 7))
def test_delete_topics_every_version(client, version):
    name = unique(f"dt{version}")
    assert create(client, 4, name)["error_code"] == 0
    assert delete(client, version, name) == [(name, 0)]
    assert described(client, 4, name)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert delete(client, version, name) == [(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_configs_every_version(client, version):
    name = unique(f"dc{version}")
    assert create(client, 4, name, configs=[("retention.ms", "60000")])["error_code"] == 0
    body = client.call(ApiKey.DESCRIBE_CONFIGS, version, {"resources": [
        {"resource_type": 2, "resource_name": name,
         "configuration_keys": ["retention.ms", "segment.bytes"]}]})
    (result,) = body["results"]
    assert result["error_code"] == 0
    configs = {c["name"]: c for c in result["configs"]}
    assert configs["retention.ms"]["value"] == "60000"
    if version == 0:
        assert (configs["retention.ms"]["is_default"],
                configs["segment.bytes"]["is_default"]) == (False, True)
    else:
        assert (configs["retention.ms"]["config_source"],
                configs["segment.bytes"]["config_source"]) == (1, 5)


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_every_version(client, version):
    name = unique(f"cp{version}")
    assert create(client, 4, name, partitions=1)["error_code"] == 0
    body = client.call(ApiKey.CREATE_PARTITIONS, version, {"topics": [
        {"name": name, "count": 3, "assignments": [{"broker_ids": [0]}, {"broker_ids": [0]}]}],
        "timeout_ms": 5000, "validate_only": False})
    assert [(r["name"], r["error_code"]) for r in body["results"]] == [(name, 0)]
    assert len(described(client, 4, name)["partitions"]) == 3


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_every_version(client, version):
    name = unique(f"md{version}")
    assert create(client, 4, name, partitions=2)["error_code"] == 0
    topic = described(client, version, name)
    assert (topic["name"], topic["error_code"], len(topic["partitions"])) == (name, 0, 2)
    if version >= 8:
        assert topic["topic_authorized_operations"] == NOT_ASKED


def test_create_partitions_refuses_other_brokers_and_wrong_counts(client):
    name = unique("cpa")
    assert create(client, 4, name, partitions=1)["error_code"] == 0

    def grow(count, assignments, validate_only=False):
        body = client.call(ApiKey.CREATE_PARTITIONS, 1, {"topics": [
            {"name": name, "count": count,
             "assignments": None if assignments is None else
             [{"broker_ids": b} for b in assignments]}],
            "timeout_ms": 5000, "validate_only": validate_only})
        return body["results"][0]["error_code"]

    assert grow(2, [[1]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(3, [[0]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(2, [[0, 0]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(1, None) == ErrorCode.INVALID_PARTITIONS
    assert grow(3, None, validate_only=True) == 0
    assert grow(0, None, validate_only=True) == ErrorCode.INVALID_PARTITIONS
    assert len(described(client, 4, name)["partitions"]) == 1
    body = client.call(ApiKey.CREATE_PARTITIONS, 1,
                       {"topics": [{"name": name, "count": 2, "assignments": None}] * 2,
                        "timeout_ms": 5000, "validate_only": False})
    assert [r["error_code"] for r in body["results"]] == [ErrorCode.INVALID_REQUEST] * 2
    missing = client.call(ApiKey.CREATE_PARTITIONS, 1,
                          {"topics": [{"name": unique("none"), "count": 2,
                                       "assignments": None}],
                           "timeout_ms": 5000, "validate_only": True})
    assert missing["results"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_with_an_explicit_assignment(client):
    name = unique("assigned")
    assignment = [{"partition_index": i, "broker_ids": [0]} for i in (1, 0, 2)]
    ok = create(client, 5, name, partitions=-1, replication_factor=-1, assignments=assignment)
    assert (ok["error_code"], ok["num_partitions"], ok["replication_factor"]) == (0, 3, 1)
    parts = described(client, 4, name)["partitions"]
    assert [(p["partition_index"], p["replica_nodes"]) for p in parts] == \
        [(0, [0]), (1, [0]), (2, [0])]
    refused = {
        "other broker": ([[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        "two replicas": ([[0, 1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        "duplicate replica": ([[0, 0]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        "no replica": ([[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    }
    for why, (brokers, code) in refused.items():
        other = unique("refused")
        assignment = [{"partition_index": i, "broker_ids": b} for i, b in enumerate(brokers)]
        result = create(client, 5, other, partitions=-1, replication_factor=-1,
                        assignments=assignment)
        assert result["error_code"] == code, why
        assert described(client, 4, other)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    gap = [{"partition_index": i, "broker_ids": [0]} for i in (0, 2)]
    assert create(client, 5, unique("gap"), partitions=-1, replication_factor=-1,
                  assignments=gap)["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    both = create(client, 5, unique("both"), partitions=1, replication_factor=-1,
                  assignments=[{"partition_index": 0, "broker_ids": [0]}])
    assert both["error_code"] == ErrorCode.INVALID_REQUEST
    assert create(client, 5, unique("rf"), replication_factor=2)["error_code"] == \
        ErrorCode.INVALID_REPLICATION_FACTOR
    assert create(client, 5, unique("rf"), replication_factor=0)["error_code"] == \
        ErrorCode.INVALID_REPLICATION_FACTOR
    assert create(client, 5, unique("np"), partitions=0)["error_code"] == \
        ErrorCode.INVALID_PARTITIONS


def test_create_topics_validate_only_and_duplicates(client):
    name = unique("vo")
    body = client.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{"name": name, "num_partitions": 2,
                                                             "replication_factor": 1}],
                                                 "timeout_ms": 5000, "validate_only": True})
    assert body["topics"][0]["error_code"] == 0
    assert described(client, 4, name)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bad_config = client.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1,
         "configs": [{"name": "retention.ms", "value": "soon"}]}],
        "timeout_ms": 5000, "validate_only": True})
    assert bad_config["topics"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    twice = client.call(ApiKey.CREATE_TOPICS, 4, {"topics": [{"name": name, "num_partitions": 1,
                                                              "replication_factor": 1}] * 2,
                                                  "timeout_ms": 5000, "validate_only": False})
    assert [t["error_code"] for t in twice["topics"]] == [ErrorCode.INVALID_REQUEST] * 2
    assert described(client, 4, name)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_topic_ids_in_delete_topics_v6(client):
    name = unique("byid")
    topic_id = create(client, 7, name)["topic_id"]
    unknown = uuid.uuid4()
    body = client.call(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": unknown},
                                                            {"name": None, "topic_id": topic_id}],
                                                 "timeout_ms": 5000})
    assert [(r["name"], r["topic_id"], r["error_code"]) for r in body["responses"]] == \
        [(None, unknown, ErrorCode.UNKNOWN_TOPIC_ID), (name, topic_id, 0)]
    assert described(client, 4, name)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    other = unique("both")
    other_id = create(client, 7, other)["topic_id"]
    body = client.call(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": other, "topic_id": other_id}],
                                                 "timeout_ms": 5000})
    assert [r["error_code"] for r in body["responses"]] == [ErrorCode.INVALID_REQUEST]
    assert described(client, 4, other)["error_code"] == 0


def test_topic_ids_in_metadata(client):
    name = unique("mdid")
    topic_id = create(client, 7, name)["topic_id"]
    unknown = uuid.uuid4()
    body = client.call(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": topic_id},
                                                        {"name": None, "topic_id": unknown}],
                                             "allow_auto_topic_creation": True})
    assert sorted((t["name"] or "", t["topic_id"] == topic_id, t["error_code"])
                  for t in body["topics"]) == \
        [("", False, ErrorCode.UNKNOWN_TOPIC_ID), (name, True, 0)]
    old = client.call(ApiKey.METADATA, 11, {"topics": [{"name": None, "topic_id": topic_id}],
                                            "allow_auto_topic_creation": True})
    assert [t["error_code"] for t in old["topics"]] == [ErrorCode.INVALID_REQUEST]


@pytest.mark.parametrize("version", range(8, 13))
def test_metadata_authorized_operations_when_asked(client, version):
    name = unique("ops")
    assert create(client, 4, name)["error_code"] == 0
    body = client.call(ApiKey.METADATA, version, {"topics": [{"name": name}],
                                                  "allow_auto_topic_creation": False,
                                                  "include_cluster_authorized_operations": True,
                                                  "include_topic_authorized_operations": True})
    assert [t["topic_authorized_operations"] for t in body["topics"]] == [bits(TOPIC_OPS)]
    if version <= 10:
        assert body["cluster_authorized_operations"] == bits(CLUSTER_OPS)
    plain = client.call(ApiKey.METADATA, version, {"topics": [{"name": name}],
                                                   "allow_auto_topic_creation": False})
    assert [t["topic_authorized_operations"] for t in plain["topics"]] == [NOT_ASKED]
    if version <= 10:
        assert plain["cluster_authorized_operations"] == NOT_ASKED


def test_confluent_kafka_admin_assignment_and_authorized_operations(broker):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name, refused = unique("ck-assigned"), unique("ck-refused")
    futures = admin.create_topics([NewTopic(name, 2, -1, replica_assignment=[[0], [0]]),
                                   NewTopic(refused, 2, -1, replica_assignment=[[0], [7]])])
    futures[name].result(30)
    with pytest.raises(ck.KafkaException) as caught:
        futures[refused].result(30)
    assert caught.value.args[0].code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
    (description,) = admin.describe_topics(TopicCollection([name]),
                                           include_authorized_operations=True).values()
    topic = description.result(30)
    assert len(topic.partitions) == 2
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}
