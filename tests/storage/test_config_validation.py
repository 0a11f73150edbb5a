"""Topic config values are parsed and validated as Kafka 3.9 does (its LogConfig's
ConfigDef: types, validators, ranges; ConfigDef.parseType's trimming and Java's number
parsing), through LogConfig, the Database's create_topic and alter_topic_config.

Each row cites the Kafka rule it follows. Java facts the rows rely on (Integer.parseInt
takes any Unicode decimal digit of the BMP, String.trim removes every char <= U+0020 and
nothing else, Double.parseDouble takes "NaN", "0x1p-1", "0.5d" but not "nan" or "inf",
"falſe".equalsIgnoreCase("false")) were checked with OpenJDK 17."""

import math
from pathlib import Path

import pytest

import kqlite
from kqlite.errors import ConfigError
from kqlite.storage.config import KAFKA_CONFIGS, LogConfig, check_kafka_names, kafka_string

INT_MAX, LONG_MAX = 2 ** 31 - 1, 2 ** 63 - 1

# (config, value given, value stored, Kafka's rule)
ACCEPTED = [
    ("segment.bytes", "14", 14, "INT atLeast(LegacyRecord.RECORD_OVERHEAD_V0 = 14)"),
    ("segment.bytes", "2147483647", INT_MAX, "INT: Integer.parseInt, up to 2^31-1"),
    ("segment.bytes", " 1048576\t\n", 1048576, "parseType trims strings (String.trim)"),
    ("segment.bytes", "\x00\x1f64\x01", 64, "String.trim removes every char <= U+0020"),
    ("segment.bytes", "+4096", 4096, "Integer.parseInt takes a leading +"),
    ("segment.bytes", "0004096", 4096, "Integer.parseInt takes leading zeros"),
    ("segment.bytes", "\u0664\u0660\u0669\u0666", 4096,
     "Integer.parseInt takes any decimal digit (Character.digit): Arabic-Indic"),
    ("segment.bytes", "\uff11\uff16", 16, "Character.digit: fullwidth digits"),
    ("segment.bytes", 1 << 20, 1 << 20, "INT takes an Integer"),
    ("segment.ms", "1", 1, "LONG atLeast(1)"),
    ("segment.ms", "9223372036854775807", LONG_MAX, "LONG: Long.parseLong, up to 2^63-1"),
    ("segment.jitter.ms", "0", 0, "LONG atLeast(0)"),
    ("segment.index.bytes", "4", 4, "INT atLeast(4)"),
    ("flush.messages", "1", 1, "LONG atLeast(1)"),
    ("flush.ms", "0", 0, "LONG atLeast(0)"),
    ("retention.bytes", "-9223372036854775808", -LONG_MAX - 1, "LONG without validator"),
    ("retention.bytes", "-5", -5, "LONG without validator"),
    ("retention.ms", "-1", -1, "LONG atLeast(-1)"),
    ("max.message.bytes", "0", 0, "INT atLeast(0)"),
    ("max.message.bytes", "2147483647", INT_MAX, "INT atLeast(0)"),
    ("index.interval.bytes", "0", 0, "INT atLeast(0)"),
    ("delete.retention.ms", "0", 0, "LONG atLeast(0)"),
    ("min.compaction.lag.ms", "0", 0, "LONG atLeast(0)"),
    ("max.compaction.lag.ms", "1", 1, "LONG atLeast(1)"),
    ("file.delete.delay.ms", "0", 0, "LONG atLeast(0)"),
    ("min.cleanable.dirty.ratio", "0", 0.0, "DOUBLE between(0, 1)"),
    ("min.cleanable.dirty.ratio", "1", 1.0, "DOUBLE between(0, 1)"),
    ("min.cleanable.dirty.ratio", " .25 ", 0.25, "Double.parseDouble: .25, trimmed"),
    ("min.cleanable.dirty.ratio", "0.25d", 0.25, "Double.parseDouble: d suffix"),
    ("min.cleanable.dirty.ratio", "5E-1", 0.5, "Double.parseDouble: exponent"),
    ("min.cleanable.dirty.ratio", "0x1p-2", 0.25, "Double.parseDouble: hex float"),
    ("min.cleanable.dirty.ratio", "+1.", 1.0, "Double.parseDouble: sign, trailing point"),
    ("min.cleanable.dirty.ratio", 1, 1.0, "DOUBLE takes any Number"),
    ("cleanup.policy", "", "", "LIST ValidList.in(compact, delete): the empty list"),
    ("cleanup.policy", "delete,compact", "compact,delete", "ValidList: any order"),
    ("cleanup.policy", " compact , delete ", "compact,delete",
     "LIST splits at \\s*,\\s* after trimming"),
    ("cleanup.policy", "delete,delete", "delete", "ValidList checks each item"),
    ("cleanup.policy", ["compact"], "compact", "LIST takes a List"),
    ("unclean.leader.election.enable", "TRUE", True, "BOOLEAN: equalsIgnoreCase"),
    ("unclean.leader.election.enable", " False\n", False, "BOOLEAN: trimmed"),
    ("unclean.leader.election.enable", "fal\u017fe", False,
     "equalsIgnoreCase: long s upper-cases to S"),
    ("unclean.leader.election.enable", True, True, "BOOLEAN takes a Boolean"),
    ("min.insync.replicas", "1", 1, "INT atLeast(1)"),
    ("min.insync.replicas", "2147483647", INT_MAX, "INT atLeast(1)"),
    ("compression.type", "uncompressed", "uncompressed", "BrokerCompressionType names"),
    ("compression.type", "zstd", "zstd", "BrokerCompressionType names"),
    ("compression.type", "lz4", "lz4", "BrokerCompressionType names"),
    ("compression.type", "snappy", "snappy", "BrokerCompressionType names"),
    ("compression.type", " gzip ", "gzip", "STRING is trimmed"),
    ("compression.type", "producer", "producer", "BrokerCompressionType names"),
    ("compression.gzip.level", "-1", -1, "GZIP level: 1..9 or Deflater.DEFAULT_COMPRESSION"),
    ("compression.gzip.level", "1", 1, "GZIP level: 1..9"),
    ("compression.gzip.level", "9", 9, "GZIP level: 1..9"),
    ("compression.lz4.level", "1", 1, "LZ4 level between(1, 17)"),
    ("compression.lz4.level", "17", 17, "LZ4 level between(1, 17)"),
    ("compression.zstd.level", "-131072", -131072, "ZSTD level between(-131072, 22)"),
    ("compression.zstd.level", "22", 22, "ZSTD level between(-131072, 22)"),
    ("preallocate", "true", True, "BOOLEAN"),
    ("message.format.version", "0.8.0", "0.8.0", "MetadataVersion IBP_0_8_0"),
    ("message.format.version", "0.10.2", "0.10.2", "MetadataVersion: production release"),
    ("message.format.version", "0.10.0-IV1", "0.10.0-IV1", "MetadataVersion IBP_0_10_0_IV1"),
    ("message.format.version", "0.10.0.1", "0.10.0.1", "fromVersionString: 3 parts of 0.x"),
    ("message.format.version", "2.8", "2.8", "MetadataVersion: production release"),
    ("message.format.version", "2.8.2", "2.8.2", "fromVersionString: 2 parts after 0.x"),
    ("message.format.version", "3.9-IV0", "3.9-IV0", "MetadataVersion IBP_3_9_IV0"),
    ("message.format.version", "4.0-IV1", "4.0-IV1", "MetadataVersion IBP_4_0_IV1"),
    ("message.timestamp.type", "LogAppendTime", "LogAppendTime",
     "ValidString.in(CreateTime, LogAppendTime)"),
    ("message.timestamp.type", " CreateTime ", "CreateTime", "STRING is trimmed"),
    ("message.timestamp.difference.max.ms", "0", 0, "LONG atLeast(0)"),
    ("message.timestamp.before.max.ms", "0", 0, "LONG atLeast(0)"),
    ("message.timestamp.after.max.ms", "9223372036854775807", LONG_MAX, "LONG atLeast(0)"),
    ("leader.replication.throttled.replicas", "*", "*", "ThrottledReplicaListValidator: *"),
    ("leader.replication.throttled.replicas", "0:1, 1:2", "0:1,1:2",
     "ThrottledReplicaListValidator: partitionId:brokerId,..."),
    ("follower.replication.throttled.replicas", "", "", "ThrottledReplicaListValidator: empty"),
    ("follower.replication.throttled.replicas", "*", "*", "ThrottledReplicaListValidator: *"),
    ("message.downconversion.enable", "false", False, "BOOLEAN"),
    ("remote.storage.enable", "false", False, "BOOLEAN"),
    ("local.retention.ms", "-2", -2, "LONG atLeast(-2)"),
    ("local.retention.bytes", "-2", -2, "LONG atLeast(-2)"),
    ("remote.log.copy.disable", "true", True, "BOOLEAN"),
    ("remote.log.delete.on.disable", "true", True, "BOOLEAN"),
]

# (config, value given, Kafka's rule that refuses it)
REFUSED = [
    ("segment.bytes", "13", "atLeast(14)"),
    ("segment.bytes", "2147483648", "INT: Integer.parseInt overflows past 2^31-1"),
    ("segment.bytes", "-2147483649", "INT: Integer.parseInt overflows"),
    ("segment.bytes", "1_000", "Integer.parseInt: no underscores"),
    ("segment.bytes", "1 000", "Integer.parseInt: no spaces inside"),
    ("segment.bytes", "\u00a01000", "String.trim leaves U+00A0 (no-break space)"),
    ("segment.bytes", "1000\u2003", "String.trim leaves U+2003 (em space)"),
    ("segment.bytes", "0x400", "Integer.parseInt: decimal only"),
    ("segment.bytes", "1e3", "Integer.parseInt: no exponent"),
    ("segment.bytes", "1024.0", "Integer.parseInt: no point"),
    ("segment.bytes", "", "Integer.parseInt of an empty string"),
    ("segment.bytes", "+", "Integer.parseInt: a sign alone"),
    ("segment.bytes", "--14", "Integer.parseInt: one sign"),
    ("segment.bytes", "\U0001d7cf\U0001d7ce\U0001d7ce",
     "Character.digit(char): a digit outside the BMP is a surrogate pair"),
    ("segment.bytes", 2 ** 31, "INT: an Integer"),
    ("segment.bytes", True, "INT: a Boolean is not an Integer"),
    ("segment.bytes", 1024.0, "INT: a Double is not an Integer"),
    ("segment.bytes", None, "INT: null"),
    ("segment.ms", "0", "atLeast(1)"),
    ("segment.ms", "9223372036854775808", "LONG: Long.parseLong overflows past 2^63-1"),
    ("segment.jitter.ms", "-1", "atLeast(0)"),
    ("segment.index.bytes", "3", "atLeast(4)"),
    ("segment.index.bytes", "2147483648", "INT"),
    ("index.interval.bytes", "-1", "atLeast(0)"),
    ("index.interval.bytes", "4294967296", "INT"),
    ("max.message.bytes", "-1", "atLeast(0)"),
    ("max.message.bytes", "2147483648", "INT"),
    ("min.insync.replicas", "0", "atLeast(1)"),
    ("min.insync.replicas", "2147483648", "INT"),
    ("flush.messages", "0", "atLeast(1)"),
    ("flush.ms", "-1", "atLeast(0)"),
    ("retention.ms", "-2", "atLeast(-1)"),
    ("retention.bytes", "9223372036854775808", "LONG"),
    ("delete.retention.ms", "-1", "atLeast(0)"),
    ("min.compaction.lag.ms", "-1", "atLeast(0)"),
    ("max.compaction.lag.ms", "0", "atLeast(1)"),
    ("file.delete.delay.ms", "-1", "atLeast(0)"),
    ("min.cleanable.dirty.ratio", "nan", "Double.parseDouble: only NaN, case-sensitive"),
    ("min.cleanable.dirty.ratio", "NaN",
     "between(0, 1) -- Kafka's Range lets NaN by (kqlite's one deviation: it never compacts)"),
    ("min.cleanable.dirty.ratio", math.nan, "between(0, 1), as above"),
    ("min.cleanable.dirty.ratio", "inf", "Double.parseDouble: Infinity, not inf"),
    ("min.cleanable.dirty.ratio", "Infinity", "between(0, 1)"),
    ("min.cleanable.dirty.ratio", "-Infinity", "between(0, 1)"),
    ("min.cleanable.dirty.ratio", "-0.1", "between(0, 1)"),
    ("min.cleanable.dirty.ratio", "1.0000001", "between(0, 1)"),
    ("min.cleanable.dirty.ratio", "1.5", "between(0, 1)"),
    ("min.cleanable.dirty.ratio", "2", "between(0, 1)"),
    ("min.cleanable.dirty.ratio", "0_5", "Double.parseDouble: no underscores"),
    ("min.cleanable.dirty.ratio", "\u0660.\u0665", "Double.parseDouble: ASCII digits only"),
    ("min.cleanable.dirty.ratio", "0.5x", "Double.parseDouble: trailing garbage"),
    ("min.cleanable.dirty.ratio", ".", "Double.parseDouble: no digits"),
    ("min.cleanable.dirty.ratio", "", "Double.parseDouble of an empty string"),
    ("min.cleanable.dirty.ratio", True, "DOUBLE: a Boolean is not a Number"),
    ("cleanup.policy", "delete,", "LIST split keeps the trailing empty item (split(.., -1))"),
    ("cleanup.policy", "compact,,delete", "ValidList: an empty item"),
    ("cleanup.policy", "Delete", "ValidList: case-sensitive"),
    ("cleanup.policy", "compact;delete", "ValidList: one item 'compact;delete'"),
    ("cleanup.policy", "none", "ValidList.in(compact, delete)"),
    ("cleanup.policy", ["compact", " delete"], "a List's items are not trimmed"),
    ("cleanup.policy", 5, "LIST: a comma separated list"),
    ("unclean.leader.election.enable", "yes", "BOOLEAN: true or false"),
    ("unclean.leader.election.enable", "1", "BOOLEAN: true or false"),
    ("unclean.leader.election.enable", "", "BOOLEAN: true or false"),
    ("unclean.leader.election.enable", 1, "BOOLEAN: an Integer is not a Boolean"),
    ("preallocate", "on", "BOOLEAN"),
    ("message.downconversion.enable", "no", "BOOLEAN"),
    ("compression.type", "none", "ValidString: BrokerCompressionType has uncompressed"),
    ("compression.type", "GZIP", "ValidString: case-sensitive"),
    ("compression.type", "zip", "ValidString"),
    ("compression.type", "", "ValidString"),
    ("compression.type", 1, "STRING: a String"),
    ("compression.gzip.level", "0", "GZIP level: 1..9 or -1"),
    ("compression.gzip.level", "10", "GZIP level: 1..9 or -1"),
    ("compression.gzip.level", "-2", "GZIP level: 1..9 or -1"),
    ("compression.lz4.level", "0", "between(1, 17)"),
    ("compression.lz4.level", "18", "between(1, 17)"),
    ("compression.zstd.level", "-131073", "between(-131072, 22)"),
    ("compression.zstd.level", "23", "between(-131072, 22)"),
    ("message.format.version", "4.0", "MetadataVersion: 4.0 is not a production release"),
    ("message.format.version", "3.9-IV1", "MetadataVersion: no such version"),
    ("message.format.version", "3.10", "MetadataVersion: no such version"),
    ("message.format.version", "3.0.", "fromVersionString: split drops the empty part"),
    ("message.format.version", "0.8", "fromVersionString: a 0.x version has three parts"),
    ("message.format.version", "latest", "MetadataVersion: no such version"),
    ("message.format.version", "", "MetadataVersion: no such version"),
    ("message.timestamp.type", "createtime", "ValidString: case-sensitive"),
    ("message.timestamp.type", "LogAppendtime", "ValidString: case-sensitive"),
    ("message.timestamp.type", "", "ValidString.in(CreateTime, LogAppendTime)"),
    ("message.timestamp.difference.max.ms", "-1", "atLeast(0)"),
    ("message.timestamp.before.max.ms", "-1", "atLeast(0)"),
    ("message.timestamp.after.max.ms", "-1", "atLeast(0)"),
    ("leader.replication.throttled.replicas", "0:a", "ThrottledReplicaListValidator"),
    ("leader.replication.throttled.replicas", "all", "ThrottledReplicaListValidator"),
    ("leader.replication.throttled.replicas", "*:*", "ThrottledReplicaListValidator"),
    ("follower.replication.throttled.replicas", "*,0:1", "ThrottledReplicaListValidator"),
    ("follower.replication.throttled.replicas", "0-1", "ThrottledReplicaListValidator"),
    ("local.retention.ms", "-3", "atLeast(-2)"),
    ("local.retention.bytes", "-3", "atLeast(-2)"),
    ("remote.storage.enable", "true",
     "validateRemoteStorageOnlyIfSystemEnabled: kqlite has no tiered storage"),
    ("remote.log.copy.disable", "yes", "BOOLEAN"),
    ("remote.log.delete.on.disable", "0", "BOOLEAN"),
]


def _case_id(row):
    return f"{row[0]}={row[1]!r}"[:70]


@pytest.mark.parametrize("name,given,stored,rule", ACCEPTED, ids=map(_case_id, ACCEPTED))
def test_kafka_accepts(name, given, stored, rule):
    value = LogConfig({name: given}).overrides()[name]
    assert value == stored and type(value) is type(stored), rule


@pytest.mark.parametrize("name,given,rule", REFUSED, ids=map(_case_id, REFUSED))
def test_kafka_refuses(name, given, rule):
    with pytest.raises(ConfigError) as caught:
        LogConfig({name: given})
    assert name in str(caught.value), rule


def test_the_stored_form_reads_back_as_itself():
    # Overrides are stored normalized (the topic store's JSON) and parsed again on load.
    for name, given, stored, _rule in ACCEPTED:
        assert LogConfig({name: stored}).overrides() == {name: stored}


def test_min_compaction_lag_may_not_pass_max_compaction_lag():
    # LogConfig.validateValues: min.compaction.lag.ms > max.compaction.lag.ms is refused.
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        LogConfig({"min.compaction.lag.ms": "5001", "max.compaction.lag.ms": "5000"})
    assert LogConfig({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "5000"})


def test_every_kafka_topic_config_and_its_default():
    # TopicConfig's 34 configs and QuotaConfigs' two throttled-replica lists: Kafka 3.9's
    # LogConfig.configNames(), with its defaults (Kafka's broker defaults).
    kafka_defaults = {
        "segment.bytes": 1073741824, "segment.ms": 604800000, "segment.jitter.ms": 0,
        "segment.index.bytes": 10485760, "flush.messages": LONG_MAX, "flush.ms": LONG_MAX,
        "retention.bytes": -1, "retention.ms": 604800000, "remote.storage.enable": False,
        "local.retention.ms": -2, "local.retention.bytes": -2,
        "remote.log.copy.disable": False, "remote.log.delete.on.disable": False,
        "max.message.bytes": 1048588, "index.interval.bytes": 4096,
        "file.delete.delay.ms": 60000, "delete.retention.ms": 86400000,
        "min.compaction.lag.ms": 0, "max.compaction.lag.ms": LONG_MAX,
        "min.cleanable.dirty.ratio": 0.5, "cleanup.policy": "delete",
        "unclean.leader.election.enable": False, "min.insync.replicas": 1,
        "compression.type": "producer", "compression.gzip.level": -1,
        "compression.lz4.level": 9, "compression.zstd.level": 3, "preallocate": False,
        "message.format.version": "3.0-IV1", "message.timestamp.type": "CreateTime",
        "message.timestamp.difference.max.ms": LONG_MAX,
        "message.timestamp.before.max.ms": LONG_MAX,
        "message.timestamp.after.max.ms": LONG_MAX, "message.downconversion.enable": True,
        "leader.replication.throttled.replicas": "",
        "follower.replication.throttled.replicas": ""}
    assert KAFKA_CONFIGS == set(kafka_defaults)
    effective = LogConfig().as_dict()
    assert {name: effective[name] for name in kafka_defaults} == kafka_defaults
    # Every row above names a real config, and every Kafka config has rows both ways.
    assert {r[0] for r in ACCEPTED} == {r[0] for r in REFUSED} == set(kafka_defaults)


def test_dict_keys_are_kafka_names_and_keywords_may_use_underscores():
    # LogConfig.validateNames: "Unknown topic config name". A dict is what a Kafka client
    # sends (CreateTopics), so "segment_bytes" there is unknown, with a hint.
    with pytest.raises(ConfigError, match="did you mean 'segment.bytes'"):
        LogConfig({"segment_bytes": 1024})
    with pytest.raises(ConfigError, match="unknown log config 'retention'"):
        LogConfig({"retention": "1"})
    assert LogConfig(segment_bytes=1024)["segment.bytes"] == 1024
    assert LogConfig().with_overrides(segment_bytes=2048).overrides() == {"segment.bytes": 2048}


def test_kafka_clients_may_set_only_kafka_configs():
    check_kafka_names(sorted(KAFKA_CONFIGS))
    for name in ("fsync", "lock.timeout.ms", "recovery.point.checkpoint.interval.ms"):
        LogConfig({name: LogConfig()[name]})        # the embedded API's own settings
        with pytest.raises(ConfigError, match="not a Kafka topic config"):
            check_kafka_names([name])
    for name in ("segment_bytes", "no.such.config", "log.retention.ms"):
        with pytest.raises(ConfigError, match="unknown"):
            check_kafka_names(["retention.ms", name])


def test_values_as_kafka_shows_them():
    # ConfigDef.convertToString: Boolean.toString, Double.toString, lists joined by ",".
    config = LogConfig({"preallocate": "TRUE", "min.cleanable.dirty.ratio": "0.0005",
                        "cleanup.policy": "delete,compact"})
    shown = {name: kafka_string(name, config[name]) for name in
             ("preallocate", "unclean.leader.election.enable", "min.cleanable.dirty.ratio",
              "cleanup.policy", "segment.bytes")}
    assert shown == {"preallocate": "true", "unclean.leader.election.enable": "false",
                     "min.cleanable.dirty.ratio": "5.0E-4",
                     "cleanup.policy": "compact,delete", "segment.bytes": "1073741824"}
    assert [kafka_string("min.cleanable.dirty.ratio", x) for x in (0.5, 1.0, 0.0, 0.001)] \
        == ["0.5", "1.0", "0.0", "0.001"]


def test_a_refused_value_message_is_bounded():
    with pytest.raises(ConfigError) as caught:
        LogConfig({"segment.bytes": "9" * 100_000})
    assert len(str(caught.value)) < 200


# -- The embedded API ----------------------------------------------------------------------

def test_create_topic_refuses_what_kafka_refuses_and_creates_nothing(tmp_path):
    with kqlite.open(tmp_path / "d") as db:
        for name, given, _rule in REFUSED:
            with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
                db.create_topic("t", 1, {name: given})
        assert db.list_topics() == []


def test_create_and_alter_keep_configs_kafka_accepts(tmp_path):
    # Configs kqlite does not act on (one broker: no replicas, no unclean election, no
    # throttles) are accepted, stored and reported, as Kafka tools set them.
    wanted = {"unclean.leader.election.enable": "true", "min.insync.replicas": "2",
              "follower.replication.throttled.replicas": "*",
              "message.downconversion.enable": "false", "cleanup.policy": ""}
    with kqlite.open(tmp_path / "d") as db:
        db.create_topic("t", 1, wanted)
        with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
            db.alter_topic_config("t", {"min.cleanable.dirty.ratio": "1.5"})
        with pytest.raises(ConfigError, match="segment.bytes"):
            db.alter_topic_config("t", {"segment.bytes": 2 ** 31})
        db.alter_topic_config("t", {"segment.bytes": "1048576"})
    with kqlite.open(tmp_path / "d") as db:
        stored = db.topic_metadata("t", refresh=True)["config"]
        config = db.topic_config("t")
    assert stored == {"unclean.leader.election.enable": True, "min.insync.replicas": 2,
                      "follower.replication.throttled.replicas": "*",
                      "message.downconversion.enable": False, "cleanup.policy": "",
                      "segment.bytes": 1048576}
    assert config["min.insync.replicas"] == 2 and config["min.cleanable.dirty.ratio"] == 0.5


def test_the_configuration_page_lists_every_config_with_its_rule():
    # The page's table is generated from the rules (tests/test_configuration_doc.py holds
    # it to the generator); here: what it shows reads back as the rules say.
    from kqlite.storage.config_rules import RULES, parse_value
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    table = page.split("| key | default | valid values | Kafka's broker config | meaning |\n"
                       "|---|---|---|---|---|\n")[1]
    rows = {}
    for line in table.split("\n\n")[0].splitlines():
        key, default, valid, broker, _meaning = [cell.strip()
                                                 for cell in line.strip("|").split(" | ")]
        rows[key.strip("`")] = (default.split(" (")[0].strip("`"), valid,
                                None if broker == "—" else broker.strip("`"))
    assert rows.keys() == RULES.keys()
    for name, (default, valid, broker) in rows.items():
        default = {"2^63-1": str(LONG_MAX), "empty": ""}.get(default, default)
        assert (parse_value(name, default), valid, broker) == \
            (RULES[name].default, RULES[name].valid, RULES[name].broker)
