"""AlterConfigs and IncrementalAlterConfigs against `kqlite serve`: real admin clients
(confluent-kafka, kafka-python, aiokafka) change topic configs that DescribeConfigs, the
next produce and a restarted broker see; raw frames through kqlite's codec for every
refusal Kafka makes (and then nothing is stored)."""

import asyncio
import os
import time

import pytest

from broker_process import BrokerProcess, RawClient, unique

import kqlite
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.storage.config_rules import documentation

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _create(raw, topic, configs=None):
    body = raw.call(ApiKey.CREATE_TOPICS, 5, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 5000, "validate_only": False})
    assert body["topics"][0]["error_code"] == 0, body


def _overrides(raw, topic):
    """The topic's overrides, as DescribeConfigs reports them (source DYNAMIC_TOPIC_CONFIG)."""
    body = raw.call(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": False})
    [result] = body["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: c["value"] for c in result["configs"] if c["config_source"] == 1}


def _stored(data_dir, topic):
    """The overrides in the data dir, read by another process (the embedded API)."""
    with kqlite.open(data_dir) as db:
        return db.topic_metadata(topic, refresh=True)["config"]


def _alter(raw, version, resources, validate_only=False):
    body = raw.call(ApiKey.ALTER_CONFIGS, version, {"resources": [
        {"resource_type": t, "resource_name": n,
         "configs": [{"name": k, "value": v} for k, v in configs]}
        for t, n, configs in resources], "validate_only": validate_only})
    return [(r["error_code"], r["resource_name"]) for r in body["responses"]], body


def _incremental(raw, version, resources, validate_only=False):
    body = raw.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, {"resources": [
        {"resource_type": t, "resource_name": n,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]}
        for t, n, configs in resources], "validate_only": validate_only})
    return [(r["error_code"], r["resource_name"]) for r in body["responses"]], body


# -- Real clients -----------------------------------------------------------------------------

def test_confluent_incremental_alter_configs(broker):
    confluent = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ConfigSource, ResourceType)
    topic = unique("cf-incr")
    raw = RawClient(broker)
    _create(raw, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def change(*entries):
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op) for name, op, value in entries])
        for future in admin.incremental_alter_configs([res]).values():
            future.result(timeout=15)

    def described():
        res = ConfigResource(ResourceType.TOPIC, topic)
        [future] = admin.describe_configs([res]).values()
        entries = future.result(timeout=15)
        return {n: (e.value, ConfigSource(e.source)) for n, e in entries.items()
                if n in ("retention.ms", "cleanup.policy", "max.message.bytes")}

    change(("retention.ms", AlterConfigOpType.SET, "3600000"),
           ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    assert described() == {
        "retention.ms": ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": ("compact,delete", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "max.message.bytes": ("1048588", ConfigSource.DEFAULT_CONFIG)}
    change(("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"),
           ("retention.ms", AlterConfigOpType.DELETE, None))
    assert described() == {
        "retention.ms": ("604800000", ConfigSource.DEFAULT_CONFIG),
        "cleanup.policy": ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "max.message.bytes": ("1048588", ConfigSource.DEFAULT_CONFIG)}
    assert _stored(broker.data_dir, topic) == {"cleanup.policy": "compact"}

    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(confluent.KafkaException) as info:
        list(admin.incremental_alter_configs([bad]).values())[0].result(timeout=15)
    assert info.value.args[0].code() == confluent.KafkaError.INVALID_CONFIG
    assert _stored(broker.data_dir, topic) == {"cleanup.policy": "compact"}


def test_confluent_alter_configs_replaces_every_override(broker):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
    topic = unique("cf-alter")
    raw = RawClient(broker)
    _create(raw, topic, {"retention.ms": "1000", "segment.bytes": "1048576"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "2000"})
    for future in admin.alter_configs([res]).values():
        future.result(timeout=15)
    # Legacy AlterConfigs sets the whole config: the overrides it does not name are gone.
    assert _overrides(raw, topic) == {"max.message.bytes": "2000"}
    assert _stored(broker.data_dir, topic) == {"max.message.bytes": 2000}


def test_kafka_python_alter_configs_legacy_and_incremental(broker):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
    topic = unique("kp-alter")
    raw = RawClient(broker)
    _create(raw, topic, {"segment.bytes": "1048576"})
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "5000"})],
                            raise_on_unknown=False, incremental=False)
        # kafka-python's legacy path first reads the overrides and sends them back with
        # the change, since AlterConfigs replaces them all.
        assert _overrides(raw, topic) == {"retention.ms": "5000", "segment.bytes": "1048576"}
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "cleanup.policy": (AlterConfigOp.SET, "compact"),
            "retention.ms": (AlterConfigOp.DELETE, None)})],
            raise_on_unknown=False, incremental=True)
        assert _overrides(raw, topic) == {"cleanup.policy": "compact", "segment.bytes": "1048576"}
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "7"})],
                            validate_only=True, raise_on_unknown=False, incremental=True)
        assert _overrides(raw, topic) == {"cleanup.policy": "compact", "segment.bytes": "1048576"}
    finally:
        admin.close()


def test_aiokafka_alter_configs(broker):
    pytest.importorskip("aiokafka")
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    topic = unique("aio-alter")
    raw = RawClient(broker)
    _create(raw, topic)

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await admin.alter_configs([ConfigResource(
                ConfigResourceType.TOPIC, topic, {"retention.bytes": "123456"})])
        finally:
            await admin.close()
    [response] = asyncio.run(run())
    [resource] = response.resources
    assert resource[0] == 0, resource
    assert _overrides(raw, topic) == {"retention.bytes": "123456"}


def test_max_message_bytes_applies_to_the_next_produce(broker):
    confluent = pytest.importorskip("confluent_kafka")
    topic = unique("maxbytes")
    raw = RawClient(broker)
    _create(raw, topic)
    producer = confluent.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                   "retries": 0})

    def produce():
        errors = []
        producer.produce(topic, value=b"x" * 3000, partition=0,
                         on_delivery=lambda err, msg: errors.append(err))
        producer.flush(15)
        assert len(errors) == 1
        return errors[0]

    assert produce() is None
    codes, _ = _incremental(raw, 1, [(TOPIC, topic, [("max.message.bytes", SET, "1000")])])
    assert codes == [(0, topic)]
    assert produce().code() == confluent.KafkaError.MSG_SIZE_TOO_LARGE
    codes, _ = _incremental(raw, 0, [(TOPIC, topic, [("max.message.bytes", DELETE, None)])])
    assert codes == [(0, topic)]
    assert produce() is None


def test_retention_follows_altered_configs(tmp_path):
    """The broker's retention (Database.enforce_retention, what its retention thread runs)
    obeys retention.ms and cleanup.policy as changed over the wire."""
    confluent = pytest.importorskip("confluent_kafka")
    from broker_thread import BrokerThread
    with BrokerThread(tmp_path / "data") as bt:
        raw = RawClient(bt)
        _create(raw, "aging", {"segment.bytes": "1024"})
        producer = confluent.Producer({"bootstrap.servers": f"127.0.0.1:{bt.port}",
                                       "linger.ms": 0})
        for i in range(12):
            producer.produce("aging", value=b"x" * 300, partition=0)
            producer.flush(10)
        db = bt.broker.db
        a_day_later = int(time.time() * 1000) + 86_400_000

        def retained():
            db.enforce_retention(now_ms=a_day_later)
            return db.describe_topic("aging").partitions[0].start_offset

        assert retained() == 0
        codes, _ = _incremental(raw, 1, [(TOPIC, "aging", [
            ("retention.ms", SET, "60000"), ("cleanup.policy", SET, "compact")])])
        assert codes == [(0, "aging")]
        assert retained() == 0            # compact only: retention deletes nothing
        codes, _ = _incremental(raw, 1, [(TOPIC, "aging", [
            ("cleanup.policy", APPEND, "delete")])])
        assert codes == [(0, "aging")]
        assert retained() > 0
        raw.close()


def test_changes_persist_across_a_restart(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data)
    try:
        topic = unique("persist")
        raw = RawClient(b)
        _create(raw, topic)
        codes, _ = _incremental(raw, 1, [(TOPIC, topic, [
            ("retention.ms", SET, "86400000"), ("cleanup.policy", SET, "compact")])])
        assert codes == [(0, topic)]
        raw.close()
        b.stop()
        b = BrokerProcess(data)
        raw = RawClient(b)
        assert _overrides(raw, topic) == {"retention.ms": "86400000",
                                          "cleanup.policy": "compact"}
        raw.close()
    finally:
        b.stop()
    with kqlite.open(data) as db:
        config = db.topic_config(topic)
    assert config["retention.ms"] == 86400000 and config["cleanup.policy"] == "compact"


# -- Refusals (raw frames) --------------------------------------------------------------------

INVALID_NAMES = ["../outside", "..", ".", "a/b", "x" * 250, "nul\0name", "sp ace"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_refusals_store_nothing(broker, version):
    topic = unique(f"refuse-{version}")
    raw = RawClient(broker)
    _create(raw, topic, {"retention.ms": "1000"})
    outside = os.path.dirname(os.path.abspath(broker.data_dir))
    before = sorted(os.listdir(outside))
    cases = [
        ((TOPIC, topic, [("no.such.config", "1")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("segment_bytes", "1048576")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("retention.ms", "soon")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("retention.ms", "-7")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("cleanup.policy", "sometimes")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("message.timestamp.type", "Tomorrow")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("retention.ms", None)]), ErrorCode.INVALID_REQUEST),
        ((TOPIC, topic, [("retention.ms", "5"), ("retention.ms", "6")]),
         ErrorCode.INVALID_REQUEST),
        ((TOPIC, "no-such-topic", [("retention.ms", "5")]),
         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ((TOPIC, "", [("retention.ms", "5")]), ErrorCode.INVALID_REQUEST),
        ((3, "group", [("retention.ms", "5")]), ErrorCode.INVALID_REQUEST),
        ((BROKER, "0", [("log.retention.ms", "5")]), ErrorCode.INVALID_REQUEST),
        ((BROKER, "", [("log.retention.ms", "5")]), ErrorCode.INVALID_REQUEST),
        ((BROKER, "7", []), ErrorCode.INVALID_REQUEST),
        ((BROKER, "zero", []), ErrorCode.INVALID_REQUEST),
        ((BROKER, "0", []), ErrorCode.NONE),
    ] + [((TOPIC, name, [("retention.ms", "5")]), ErrorCode.INVALID_TOPIC_EXCEPTION)
         for name in INVALID_NAMES]
    for validate_only in (False, True):
        for resource, expected in cases:
            codes, body = _alter(raw, version, [resource], validate_only)
            assert codes == [(expected, resource[1])], (resource, body)
            if expected:
                assert body["responses"][0]["error_message"]
    # The same resource twice: both refused, neither applied.
    codes, _ = _alter(raw, version, [(TOPIC, topic, [("retention.ms", "5")]),
                                     (TOPIC, topic, [("retention.ms", "6")])])
    assert codes == [(ErrorCode.INVALID_REQUEST, topic)] * 2
    # A valid change asked with validate_only is checked, not stored.
    codes, _ = _alter(raw, version, [(TOPIC, topic, [("retention.ms", "5")])], True)
    assert codes == [(0, topic)]
    assert _stored(broker.data_dir, topic) == {"retention.ms": 1000}
    assert _overrides(raw, topic) == {"retention.ms": "1000"}
    assert sorted(os.listdir(outside)) == before
    assert raw.metadata_ok()
    raw.close()


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_refusals_store_nothing(broker, version):
    topic = unique(f"irefuse-{version}")
    raw = RawClient(broker)
    _create(raw, topic, {"cleanup.policy": "compact"})
    outside = os.path.dirname(os.path.abspath(broker.data_dir))
    before = sorted(os.listdir(outside))
    cases = [
        ((TOPIC, topic, [("no.such.config", SET, "1")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("retention.ms", SET, "soon")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("retention.ms", APPEND, "5")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("no.such.config", SUBTRACT, "5")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("cleanup.policy", APPEND, "never")]), ErrorCode.INVALID_CONFIG),
        # An empty item given is kept by Java's split and refused by ValidList.
        ((TOPIC, topic, [("cleanup.policy", APPEND, "delete,,compact")]),
         ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("cleanup.policy", APPEND, "")]), ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("segment.bytes", APPEND, "1")]), ErrorCode.INVALID_CONFIG),
        # A valid change in the same resource as a bad one is not applied either.
        ((TOPIC, topic, [("retention.ms", SET, "5"), ("segment.ms", SET, "0")]),
         ErrorCode.INVALID_CONFIG),
        ((TOPIC, topic, [("retention.ms", SET, None)]), ErrorCode.INVALID_REQUEST),
        ((TOPIC, topic, [("retention.ms", 9, "5")]), ErrorCode.INVALID_REQUEST),
        ((TOPIC, topic, [("retention.ms", SET, "5"), ("retention.ms", DELETE, None)]),
         ErrorCode.INVALID_REQUEST),
        ((TOPIC, "no-such-topic", [("retention.ms", SET, "5")]),
         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ((TOPIC, "", [("retention.ms", SET, "5")]), ErrorCode.INVALID_REQUEST),
        ((8, "0", [("kafka.server", SET, "DEBUG")]), ErrorCode.INVALID_REQUEST),
        ((16, "metrics", [("interval.ms", SET, "5")]), ErrorCode.INVALID_REQUEST),
        ((BROKER, "0", [("log.retention.ms", DELETE, None)]), ErrorCode.INVALID_REQUEST),
        ((BROKER, "3", []), ErrorCode.INVALID_REQUEST),
        ((BROKER, "", []), ErrorCode.NONE),
        # Deleting an override the topic does not have is no change, as in Kafka.
        ((TOPIC, topic, [("retention.bytes", DELETE, None)]), ErrorCode.NONE),
    ] + [((TOPIC, name, [("retention.ms", SET, "5")]), ErrorCode.INVALID_TOPIC_EXCEPTION)
         for name in INVALID_NAMES]
    for validate_only in (False, True):
        for resource, expected in cases:
            codes, body = _incremental(raw, version, [resource], validate_only)
            assert codes == [(expected, resource[1])], (resource, body)
    codes, _ = _incremental(raw, version, [(TOPIC, topic, [("retention.ms", SET, "5")]),
                                           (TOPIC, topic, [("segment.ms", SET, "5")])])
    assert codes == [(ErrorCode.INVALID_REQUEST, topic)] * 2
    codes, _ = _incremental(raw, version, [(TOPIC, topic, [
        ("retention.ms", SET, "5"), ("cleanup.policy", APPEND, "delete")])], True)
    assert codes == [(0, topic)]
    assert _stored(broker.data_dir, topic) == {"cleanup.policy": "compact"}
    assert sorted(os.listdir(outside)) == before
    assert raw.metadata_ok()
    raw.close()


def test_one_bad_resource_does_not_block_the_others(broker):
    first, second = unique("mixed-a"), unique("mixed-b")
    raw = RawClient(broker)
    _create(raw, first)
    _create(raw, second)
    codes, _ = _incremental(raw, 1, [
        (TOPIC, first, [("retention.ms", SET, "60000")]),
        (TOPIC, "../" + first, [("retention.ms", SET, "1")]),
        (TOPIC, second, [("retention.ms", SET, "never")]),
    ])
    assert codes == [(0, first), (ErrorCode.INVALID_TOPIC_EXCEPTION, "../" + first),
                     (ErrorCode.INVALID_CONFIG, second)]
    assert _stored(broker.data_dir, first) == {"retention.ms": 60000}
    assert _stored(broker.data_dir, second) == {}
    raw.close()


def test_list_edits_split_values_as_java_does(broker):
    # Kafka's controller splits APPEND/SUBTRACT values with Java's String.split: trailing
    # empty items are dropped ("compact," is "compact"), and each part is added or
    # removed once.
    topic = unique("javasplit")
    raw = RawClient(broker)
    _create(raw, topic)
    for op, value, expected in [(APPEND, "compact,", "compact,delete"),
                                (SUBTRACT, "delete,,", "compact"),
                                (APPEND, "delete,delete", "compact,delete")]:
        codes, body = _incremental(raw, 1, [(TOPIC, topic, [("cleanup.policy", op, value)])])
        assert codes == [(0, topic)], body
        assert _overrides(raw, topic)["cleanup.policy"] == expected
    raw.close()


@pytest.mark.parametrize("config", ["leader.replication.throttled.replicas",
                                    "follower.replication.throttled.replicas"])
def test_append_and_subtract_apply_to_every_kafka_list_config(broker, config):
    topic = unique("throttled")
    raw = RawClient(broker)
    _create(raw, topic)
    steps = [(APPEND, "0:0", "0:0"), (APPEND, "1:0,0:0", "0:0,1:0"),
             (SUBTRACT, "0:0", "1:0"), (SUBTRACT, "1:0", "")]
    for op, value, expected in steps:
        codes, body = _incremental(raw, 1, [(TOPIC, topic, [(config, op, value)])])
        assert codes == [(0, topic)], body
        assert _overrides(raw, topic)[config] == expected
    codes, _ = _incremental(raw, 1, [(TOPIC, topic, [(config, APPEND, "0:zero")])])
    assert codes == [(ErrorCode.INVALID_CONFIG, topic)]
    assert _stored(broker.data_dir, topic) == {config: ""}
    raw.close()


# -- DescribeConfigs --------------------------------------------------------------------------

DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5   # WIRE: ConfigSource
# WIRE: DescribeConfigsResponse.ConfigType of some of Kafka's topic configs.
CONFIG_TYPES = {"retention.ms": 5, "segment.bytes": 3, "preallocate": 1,
                "compression.type": 2, "cleanup.policy": 7, "min.cleanable.dirty.ratio": 6,
                "leader.replication.throttled.replicas": 7, "message.format.version": 2}
KQLITE_SETTINGS = {"fsync", "lock.timeout.ms", "recovery.point.checkpoint.interval.ms"}


def _describe(raw, version, resource_type, name, keys=None, *, synonyms=False, docs=False):
    body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                           "configuration_keys": keys}]}
    if version >= 1:
        body["include_synonyms"] = synonyms
    if version >= 3:
        body["include_documentation"] = docs
    [result] = raw.call(ApiKey.DESCRIBE_CONFIGS, version, body)["results"]
    return result


def _synonyms(entry):
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_shows_topic_configs_as_kafka_does(broker, version):
    """As Kafka 3.9's ConfigHelper.createTopicConfigEntry: every topic config of
    LogConfig, values in Java's notation, the topic's override then the broker config
    behind it as synonyms."""
    from kqlite.storage.config import KAFKA_CONFIGS
    topic = unique(f"describe{version}")
    raw = RawClient(broker)
    _create(raw, topic, {"retention.ms": "60000", "max.message.bytes": "2000",
                         "min.cleanable.dirty.ratio": "1e-4", "preallocate": "TRUE"})
    with kqlite.open(broker.data_dir) as db:     # kqlite's own setting, from the embedded API
        db.alter_topic_config(topic, {"fsync": "always"})
    for keys in (None, []):
        result = _describe(raw, version, TOPIC, topic, keys)
        assert result["error_code"] == 0, result
        entries = {c["name"]: c for c in result["configs"]}
        assert set(entries) == KAFKA_CONFIGS and not KQLITE_SETTINGS & set(entries)
    assert {name: entries[name]["value"] for name in (
        "retention.ms", "max.message.bytes", "min.cleanable.dirty.ratio", "preallocate",
        "unclean.leader.election.enable", "message.downconversion.enable", "segment.bytes",
        "cleanup.policy", "flush.ms", "leader.replication.throttled.replicas")} == {
        "retention.ms": "60000", "max.message.bytes": "2000",
        "min.cleanable.dirty.ratio": "1.0E-4", "preallocate": "true",
        "unclean.leader.election.enable": "false", "message.downconversion.enable": "true",
        "segment.bytes": "1073741824", "cleanup.policy": "delete",
        "flush.ms": "9223372036854775807", "leader.replication.throttled.replicas": ""}
    overridden = {"retention.ms", "max.message.bytes", "min.cleanable.dirty.ratio",
                  "preallocate"}
    for name, entry in entries.items():
        assert (entry["read_only"], entry["is_sensitive"]) == (False, False), entry
        if version == 0:
            assert entry["is_default"] is (name not in overridden), entry
        else:
            assert entry["config_source"] == (DYNAMIC_TOPIC_CONFIG if name in overridden
                                              else DEFAULT_CONFIG), entry
            assert entry["synonyms"] == []          # not asked for
        if version >= 3:
            assert entry["documentation"] is None   # not asked for
    if version >= 3:
        assert {n: entries[n]["config_type"] for n in CONFIG_TYPES} == CONFIG_TYPES
    if version >= 1:
        asked = {c["name"]: c for c in _describe(raw, version, TOPIC, topic, synonyms=True,
                                                 docs=True)["configs"]}
        assert {name: _synonyms(asked[name]) for name in (
            "retention.ms", "max.message.bytes", "segment.bytes", "segment.ms",
            "min.insync.replicas", "remote.storage.enable", "min.cleanable.dirty.ratio",
            "cleanup.policy")} == {
            # log.retention.ms has no default of its own in Kafka: no broker synonym.
            "retention.ms": [("retention.ms", "60000", DYNAMIC_TOPIC_CONFIG)],
            "max.message.bytes": [("max.message.bytes", "2000", DYNAMIC_TOPIC_CONFIG),
                                  ("message.max.bytes", "1048588", DEFAULT_CONFIG)],
            "segment.bytes": [("log.segment.bytes", "1073741824", DEFAULT_CONFIG)],
            "segment.ms": [],
            "min.insync.replicas": [("min.insync.replicas", "1", DEFAULT_CONFIG)],
            "remote.storage.enable": [],
            "min.cleanable.dirty.ratio": [
                ("min.cleanable.dirty.ratio", "1.0E-4", DYNAMIC_TOPIC_CONFIG),
                ("log.cleaner.min.cleanable.ratio", "0.5", DEFAULT_CONFIG)],
            "cleanup.policy": [("log.cleanup.policy", "delete", DEFAULT_CONFIG)]}
        if version >= 3:
            # The config rule's documentation, without Markdown's backticks.
            assert {n: c["documentation"] for n, c in asked.items()} == \
                {n: documentation(n) for n in asked}
            assert "`" not in asked["cleanup.policy"]["documentation"]
    only = _describe(raw, version, TOPIC, topic, ["retention.ms", "fsync", "no.such.config"])
    assert [c["name"] for c in only["configs"]] == ["retention.ms"]
    raw.close()


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_broker_resource_names_kafkas_broker_configs(broker, version):
    raw = RawClient(broker)
    result = _describe(raw, version, BROKER, "0", synonyms=True)
    assert result["error_code"] == 0, result
    entries = {c["name"]: c for c in result["configs"]}
    assert {name: entries[name]["value"] for name in (
        "message.max.bytes", "log.segment.bytes", "log.roll.ms", "log.index.size.max.bytes",
        "log.cleaner.min.cleanable.ratio", "log.cleaner.delete.retention.ms",
        "log.segment.delete.delay.ms", "unclean.leader.election.enable",
        "compression.type", "log.cleanup.policy")} == {
        "message.max.bytes": "1048588", "log.segment.bytes": "1073741824",
        "log.roll.ms": "604800000", "log.index.size.max.bytes": "10485760",
        "log.cleaner.min.cleanable.ratio": "0.5", "log.cleaner.delete.retention.ms": "86400000",
        "log.segment.delete.delay.ms": "60000", "unclean.leader.election.enable": "false",
        "compression.type": "producer", "log.cleanup.policy": "delete"}
    # Neither kqlite's own settings nor topic config names with "log." put in front.
    assert not {"log.fsync", "log.max.message.bytes", "log.lock.timeout.ms",
                "log.remote.storage.enable", "log.segment.ms"} & set(entries)
    assert all(c["read_only"] and not c["is_sensitive"] for c in entries.values())
    if version >= 1:
        assert _synonyms(entries["message.max.bytes"]) == [
            ("message.max.bytes", "1048588", DEFAULT_CONFIG)]
        assert entries["message.max.bytes"]["config_source"] == DEFAULT_CONFIG
    if version >= 3:
        assert entries["log.cleaner.min.cleanable.ratio"]["config_type"] == 6
    for name, code in [("", ErrorCode.NONE), ("7", ErrorCode.INVALID_REQUEST),
                       ("zero", ErrorCode.INVALID_REQUEST)]:
        result = _describe(raw, version, BROKER, name)
        assert result["error_code"] == code, (name, result)
        # The cluster-wide resource lists dynamic broker defaults: kqlite has none.
        assert result["configs"] == []
    raw.close()


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_responses_parse_with_kio(broker, version):
    """The bytes as Kafka 3.9's message JSON lays them out (kio, an independent codec)."""
    kio_serial = pytest.importorskip("kio.serial")
    kio_index = pytest.importorskip("kio.index")
    topic = unique(f"kiodescribe{version}")
    raw = RawClient(broker)
    _create(raw, topic, {"retention.ms": "60000"})
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic,
                           "configuration_keys": None},
                          {"resource_type": BROKER, "resource_name": "0",
                           "configuration_keys": ["message.max.bytes"]}],
            "include_synonyms": True, "include_documentation": True}
    raw.send(ApiKey.DESCRIBE_CONFIGS, version, body)
    frame = raw.frame()
    header = 4 + (version >= 4)          # correlation id (+ tagged fields, flexible v4)
    schema = kio_index.load_response_schema(ApiKey.DESCRIBE_CONFIGS, version)
    parsed, size = kio_serial.entity_reader(schema)(memoryview(frame), header)
    assert size == len(frame) - header
    topic_result, broker_result = parsed.results
    configs = {c.name: c for c in topic_result.configs}
    assert configs["retention.ms"].value == "60000"
    assert configs["preallocate"].value == "false"
    assert [c.name for c in broker_result.configs] == ["message.max.bytes"]
    if version >= 1:
        assert [(s.name, s.value) for s in configs["segment.bytes"].synonyms] == [
            ("log.segment.bytes", "1073741824")]
    if version >= 3:
        assert int(configs["retention.ms"].config_type) == 5
        assert configs["retention.ms"].documentation == documentation("retention.ms")
        assert broker_result.configs[0].documentation.endswith(
            documentation("max.message.bytes"))
    raw.close()


def test_confluent_describe_configs_as_kafka_shows_them(broker):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
    topic = unique("cf-describe")
    raw = RawClient(broker)
    _create(raw, topic, {"unclean.leader.election.enable": "true", "max.message.bytes": "2000"})
    raw.close()
    with kqlite.open(broker.data_dir) as db:
        db.alter_topic_config(topic, {"fsync": "always"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    [future] = admin.describe_configs([res]).values()
    entries = future.result(timeout=15)
    assert not KQLITE_SETTINGS & set(entries)
    unclean = entries["unclean.leader.election.enable"]
    assert (unclean.value, ConfigSource(unclean.source)) == \
        ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    largest = entries["max.message.bytes"]
    assert [(s.name, s.value, ConfigSource(s.source)) for s in largest.synonyms.values()] == [
        ("max.message.bytes", "2000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)]
    assert not largest.is_read_only and not largest.is_sensitive
    assert entries["preallocate"].value == "false"
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    broker_res = ConfigResource(ResourceType.BROKER, "0")
    [future] = admin.describe_configs([broker_res]).values()
    broker_entries = future.result(timeout=15)
    assert broker_entries["message.max.bytes"].value == "1048588"
    assert broker_entries["message.max.bytes"].is_read_only
