"""Topic config values through `kqlite serve`, raw frames through kqlite's codec: what
Kafka 3.9's LogConfig refuses is INVALID_CONFIG (40) with a message naming the config and
nothing is created or changed; what it accepts is created and reported by DescribeConfigs.
(tests/storage/test_config_validation.py has every rule, row by row.)"""

import os

import pytest

from broker_process import RawClient, unique

import kqlite
from kqlite.protocol import ApiKey, ErrorCode

TOPIC, SUBTRACT = 2, 3

# (config, value): each refused by Kafka 3.9 (the rule in the storage table's rows)
REFUSED = [
    ("min.cleanable.dirty.ratio", "NaN"),          # between(0, 1)
    ("min.cleanable.dirty.ratio", "1.5"),          # between(0, 1)
    ("segment.bytes", "2147483648"),               # INT: past 2^31-1
    ("segment.bytes", "1_000"),                    # Integer.parseInt: no underscores
    ("max.message.bytes", "\u00a01000"),           # String.trim leaves U+00A0
    ("cleanup.policy", "delete,"),                 # ValidList: an empty item
    ("compression.type", "none"),                  # BrokerCompressionType names
    ("unclean.leader.election.enable", "yes"),     # BOOLEAN
    ("segment_bytes", "1048576"),                  # LogConfig.validateNames
    ("remote.storage.enable", "true"),             # tiered storage is disabled
]


def _create(raw, version, topics, validate_only=False):
    body = raw.call(ApiKey.CREATE_TOPICS, version, {"topics": [{
        "name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs]} for name, configs in topics],
        "timeout_ms": 5000, "validate_only": validate_only})
    return {t["name"]: t for t in body["topics"]}


def _exists(raw, topic):
    body = raw.call(ApiKey.METADATA, 9, {"topics": [{"name": topic}],
                                         "allow_auto_topic_creation": False})
    [entry] = body["topics"]
    assert entry["error_code"] in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), entry
    return entry["error_code"] == 0


def _described(raw, topic):
    body = raw.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    [result] = body["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


@pytest.mark.parametrize("version", [0, 1, 4, 7])
def test_create_topics_refuses_values_kafka_refuses_and_creates_nothing(broker, version):
    raw = RawClient(broker)
    for validate_only in ([False, True] if version >= 1 else [False]):
        for name, value in REFUSED:
            topic = unique(f"badcfg{version}")
            good = unique(f"goodcfg{version}")
            answers = _create(raw, version, [(topic, [(name, value)]),
                                             (good, [("retention.ms", "60000")])],
                              validate_only)
            assert answers[topic]["error_code"] == ErrorCode.INVALID_CONFIG, (name, value)
            if version >= 1:
                assert name in answers[topic]["error_message"]
            # The other topic of the request is unaffected.
            assert answers[good]["error_code"] == 0
            assert not _exists(raw, topic)
            assert _exists(raw, good) is not validate_only
            assert not any(d.startswith(topic) for d in os.listdir(broker.data_dir))
    assert raw.metadata_ok()
    raw.close()


def test_create_topics_keeps_kafka_configs_kqlite_does_not_act_on(broker):
    # Kafka tools set these; Kafka stores them and DescribeConfigs reports them.
    raw = RawClient(broker)
    topic = unique("toolcfg")
    configs = [("min.insync.replicas", "2"), ("unclean.leader.election.enable", "TRUE"),
               ("follower.replication.throttled.replicas", " * "),
               ("message.downconversion.enable", "false"), ("cleanup.policy", ""),
               ("segment.bytes", " 1048576 ")]
    assert _create(raw, 5, [(topic, configs)])[topic]["error_code"] == 0
    described = _described(raw, topic)
    dynamic = 1     # ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert {name: described[name] for name in ("min.insync.replicas", "cleanup.policy",
                                               "follower.replication.throttled.replicas",
                                               "segment.bytes")} == {
        "min.insync.replicas": ("2", dynamic), "cleanup.policy": ("", dynamic),
        "follower.replication.throttled.replicas": ("*", dynamic),
        "segment.bytes": ("1048576", dynamic)}
    assert described["unclean.leader.election.enable"][1] == dynamic
    with kqlite.open(broker.data_dir) as db:
        stored = db.topic_metadata(topic, refresh=True)["config"]
    assert stored["unclean.leader.election.enable"] is True
    assert stored["message.downconversion.enable"] is False
    raw.close()


def test_subtracting_the_last_cleanup_policy_leaves_the_empty_list(broker):
    # Kafka 3.9 SUBTRACTs down to "" and its ValidList accepts the empty list: no
    # deletion and no compaction.
    raw = RawClient(broker)
    topic = unique("nopolicy")
    assert _create(raw, 5, [(topic, [("cleanup.policy", "compact")])])[topic]["error_code"] == 0
    body = raw.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic,
        "configs": [{"name": "cleanup.policy", "config_operation": SUBTRACT,
                                          "value": "compact"}]}], "validate_only": False})
    assert [r["error_code"] for r in body["responses"]] == [0], body
    assert _described(raw, topic)["cleanup.policy"] == ("", 1)
    raw.close()


# -- kqlite's own settings are not Kafka's ----------------------------------------------------

KQLITE_SETTINGS = [("fsync", "always"), ("lock.timeout.ms", "1000"),
                   ("recovery.point.checkpoint.interval.ms", "1000")]
SET, DELETE = 0, 1


def _incremental(raw, topic, ops, validate_only=False):
    body = raw.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic,
        "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": validate_only})
    [response] = body["responses"]
    return response["error_code"], response["error_message"]


def _alter(raw, topic, configs):
    body = raw.call(ApiKey.ALTER_CONFIGS, 2, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic,
        "configs": [{"name": k, "value": v} for k, v in configs]}], "validate_only": False})
    [response] = body["responses"]
    return response["error_code"], response["error_message"]


def _stored(broker, topic):
    with kqlite.open(broker.data_dir) as db:
        return db.topic_metadata(topic, refresh=True)["config"]


@pytest.mark.parametrize("name,value", KQLITE_SETTINGS)
def test_create_topics_refuses_kqlites_own_settings(broker, name, value):
    raw = RawClient(broker)
    for validate_only in (False, True):
        topic = unique("ownsetting")
        [answer] = _create(raw, 5, [(topic, [(name, value)])], validate_only).values()
        assert answer["error_code"] == ErrorCode.INVALID_CONFIG, answer
        assert name in answer["error_message"] and "embedded" in answer["error_message"]
        assert not _exists(raw, topic)
    raw.close()


def test_alter_configs_change_only_kafkas_configs(broker):
    raw = RawClient(broker)
    topic, plain = unique("holds-fsync"), unique("plain")
    assert _create(raw, 5, [(topic, [("retention.ms", "60000")]),
                            (plain, [])])[topic]["error_code"] == 0
    with kqlite.open(broker.data_dir) as db:          # the embedded API may set them
        db.alter_topic_config(topic, {"fsync": "always"})
    for name, value in KQLITE_SETTINGS:
        for validate_only in (False, True):
            code, message = _incremental(raw, topic, [(name, SET, value)], validate_only)
            assert code == ErrorCode.INVALID_CONFIG and name in message
        code, message = _alter(raw, topic, [("retention.ms", "1000"), (name, value)])
        assert code == ErrorCode.INVALID_CONFIG and name in message
    code, _ = _incremental(raw, topic, [("fsync", DELETE, None)])
    assert code == ErrorCode.INVALID_CONFIG
    assert _stored(broker, topic) == {"retention.ms": 60000, "fsync": "always"}
    # Changing Kafka's configs of a topic holding one of kqlite's works, and keeps it:
    # a Kafka client neither sees nor sets it, so legacy AlterConfigs does not drop it.
    assert _incremental(raw, topic, [("retention.ms", SET, "5000")]) == (0, None)
    assert _stored(broker, topic) == {"retention.ms": 5000, "fsync": "always"}
    assert _alter(raw, topic, [("segment.bytes", "1048576")]) == (0, None)
    assert _stored(broker, topic) == {"segment.bytes": 1048576, "fsync": "always"}
    # Deleting what a topic does not hold changes nothing, whatever the name (Kafka).
    assert _incremental(raw, plain, [("fsync", DELETE, None)]) == (0, None)
    assert _stored(broker, plain) == {}
    raw.close()


# -- Definitions stored by earlier kqlite versions -----------------------------------------

def test_a_topic_stored_with_values_kafka_refuses_is_served(tmp_path, caplog):
    """Earlier kqlite stored compression.type "none" and some out-of-range values; the
    broker serves such a topic with those configs at their defaults."""
    import json
    confluent = pytest.importorskip("confluent_kafka")
    from broker_thread import BrokerThread
    data = tmp_path / "data"
    with kqlite.open(data) as db:
        db.create_topic("old", 1, {"retention.ms": 60000})
        db.log("old", 0).append([b"before"])
    path = data / ".kqlite" / "topics" / "old.json"
    meta = json.loads(path.read_text())
    meta["config"].update({"compression.type": "none", "min.cleanable.dirty.ratio": 1.5,
                           "segment.index.bytes": 2})
    path.write_text(json.dumps(meta))
    with caplog.at_level("WARNING", logger="kqlite"), BrokerThread(data) as bt:
        raw = RawClient(bt)
        described = _described(raw, "old")
        assert {k: described[k] for k in ("compression.type", "min.cleanable.dirty.ratio",
                                           "segment.index.bytes", "retention.ms")} == {
            "compression.type": ("uncompressed", 1), "min.cleanable.dirty.ratio": ("0.5", 5),
            "segment.index.bytes": ("10485760", 5), "retention.ms": ("60000", 1)}
        raw.close()
        producer = confluent.Producer({"bootstrap.servers": f"127.0.0.1:{bt.port}",
                                       "linger.ms": 0})
        delivered = []
        producer.produce("old", value=b"after", partition=0,
                         on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        producer.flush(15)
        assert delivered == [(None, 1)]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "old" in warned and "min.cleanable.dirty.ratio" in warned and "1.5" in warned
    assert "segment.index.bytes" in warned
    with kqlite.open(data) as db:
        assert [r.value for r in db.log("old", 0).read()] == [b"before", b"after"]
