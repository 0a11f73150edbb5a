"""Every config a log takes, as one table: Kafka 3.9's topic configs as its ``LogConfig``
defines them and kqlite's own per-log settings, each a :class:`Rule` carrying all that is
said about it -- its type, default, validator and valid values, the broker config that
sets its default in Kafka, and its documentation.

The table is the one place a config is described: ``LogConfig`` (config.py) parses and
checks values by it, DescribeConfigs (kqlite/server/config_entries.py) reports its
types, synonyms and documentation from it, and docs/configuration.md's table of topic
configs is generated from it (scripts/configuration_tables.py; a test holds the page to
what the script writes). A new topic config is one row here.

A value is parsed by its type as Kafka's ``ConfigDef.parseType`` parses it, then checked
by the row's validator (config_values.py: Java's parsing, Kafka's validators), then
normalized: lists become one comma-joined string (``cleanup.policy`` sorted and without
repeats), so the stored form is JSON and ``"compact" in config["cleanup.policy"]`` works.

A row's ``doc`` says what the config does in kqlite, in words true of both the embedded
API and the broker, and says so when kqlite only stores and reports a value. It may
hold Markdown code spans: the page shows them, DescribeConfigs and ``--help`` show the
text without the backticks (:func:`documentation`).
"""

from typing import Callable, NamedTuple, Optional

from ..errors import ConfigError
from .config_values import (PARSERS, at_least, between, gzip_level, java_double_string,
                            java_trim, list_of, metadata_version, one_of, throttled_replicas)

__all__ = ["Rule", "KAFKA_RULES", "KQLITE_RULES", "MIRROR_RULES", "MIRROR_SOURCE", "RULES", "LIST_CONFIGS", "CONFIG_TYPE_IDS",
           "SERVER_SYNONYMS", "parse_value", "kafka_string", "documentation"]

LONG_MAX = 2 ** 63 - 1


class Rule(NamedTuple):
    type: str                  # Kafka's ConfigDef.Type: INT LONG DOUBLE BOOLEAN STRING LIST
    default: object            # Kafka's default, normalized
    validator: Optional[Callable]  # parsed value -> None, or what the value must be
    valid: str                 # the valid values, in words
    broker: Optional[str]      # Kafka's broker config setting the default (None: none)
    doc: str                   # what the config does in kqlite (Markdown code spans)


def _refuse(name, value, must):
    shown = value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "..."
    return ConfigError(f"{name} {must}, not {shown!r}")


def _rule(kind, default, validator=None, valid=None, *, broker=None, doc):
    if valid is None:
        valid = {"BOOLEAN": "true, false"}.get(kind, "any")
    return Rule(kind, default, validator, valid, broker, doc)


def _long_at_least(default, minimum, **described):
    return _rule("LONG", default, at_least(minimum), f"{minimum} .. 2^63-1", **described)


def _int_at_least(default, minimum, **described):
    return _rule("INT", default, at_least(minimum), f"{minimum} .. 2^31-1", **described)


_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_STORED = "Stored and reported; "
_TIERED = _STORED + "it belongs to Kafka's tiered storage, which kqlite does not have."
_LEVEL = _STORED + "kqlite compresses at its codecs' default levels."
_THROTTLE = _STORED + "kqlite never throttles replication."
_TIMESTAMP_BOUND = _STORED + "not enforced: no batch is refused for its timestamps."

# Kafka 3.9's LogConfig.CONFIG, in its order. Defaults are Kafka's broker defaults;
# ``broker`` is ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS.
KAFKA_RULES = {
    "segment.bytes": _int_at_least(
        1 << 30, 14, broker="log.segment.bytes",           # LegacyRecord.RECORD_OVERHEAD_V0
        doc="A new segment file is rolled when the active one would grow past this many "
            "bytes."),
    "segment.ms": _long_at_least(
        7 * 24 * 3600 * 1000, 1, broker="log.roll.ms",
        doc="A new segment is rolled when an incoming batch's timestamp is this many "
            "milliseconds newer than the active segment's first batch."),
    "segment.jitter.ms": _long_at_least(
        0, 0, broker="log.roll.jitter.ms",
        doc=_STORED + "kqlite rolls by `segment.ms` without jitter."),
    "segment.index.bytes": _int_at_least(
        10 * 1024 * 1024, 4, broker="log.index.size.max.bytes",
        doc="Largest size of a segment's offset and time indexes (`.index`, `.timeindex`); "
            "a full index rolls the segment (each holds at least one entry)."),
    "flush.messages": _long_at_least(
        LONG_MAX, 1, broker="log.flush.interval.messages",
        doc="The log is fsynced after this many records have been appended since the last "
            "fsync."),
    "flush.ms": _long_at_least(
        LONG_MAX, 0, broker="log.flush.interval.ms",
        doc="Appended data older than this many milliseconds is fsynced by a background "
            "thread."),
    "retention.bytes": _rule(
        "LONG", -1, None, "-2^63 .. 2^63-1 (negative: no limit)", broker="log.retention.bytes",
        doc="With the `delete` policy, the oldest segments are deleted while the partition "
            "is larger than this; negative: no size limit."),
    "retention.ms": _long_at_least(
        7 * 24 * 3600 * 1000, -1, broker="log.retention.ms",
        doc="With the `delete` policy, a segment is deleted once its newest record is older "
            "than this many milliseconds (by the data dir's retention thread, or "
            "`enforce_retention()`); `-1`: no time limit."),
    "max.message.bytes": _int_at_least(
        1048588, 0, broker="message.max.bytes",
        doc="Largest record batch a produce may append (`MESSAGE_TOO_LARGE`); the embedded "
            "`append()` splits long lists into batches below it and raises "
            "`RecordTooLargeError` for a single larger record."),
    "index.interval.bytes": _int_at_least(
        4096, 0, broker="log.index.interval.bytes",
        doc="Bytes of log between two entries of the sparse offset index."),
    "delete.retention.ms": _long_at_least(
        24 * 3600 * 1000, 0, broker="log.cleaner.delete.retention.ms",
        doc="With the `compact` policy, how long a tombstone is kept after the compaction "
            "that first kept it (Kafka's delete horizon)."),
    "min.compaction.lag.ms": _long_at_least(
        0, 0, broker="log.cleaner.min.compaction.lag.ms",
        doc="With the `compact` policy, segments holding a record younger than this (by "
            "timestamp) are not compacted yet; may not exceed `max.compaction.lag.ms`."),
    "max.compaction.lag.ms": _long_at_least(
        LONG_MAX, 1, broker="log.cleaner.max.compaction.lag.ms",
        doc=_STORED + "kqlite's compaction is not forced after it."),
    "file.delete.delay.ms": _long_at_least(
        60000, 0, broker="log.segment.delete.delay.ms",
        doc=_STORED + "kqlite deletes segment files at once (readers, in this process or "
                      "others, keep their open handles)."),
    "min.cleanable.dirty.ratio": _rule(
        "DOUBLE", 0.5, between(0, 1), "0 .. 1", broker="log.cleaner.min.cleanable.ratio",
        doc="With the `compact` policy, compaction runs only when the bytes written since "
            "the last one are at least this share of the cleanable bytes."),
    "cleanup.policy": _rule(
        "LIST", "delete", list_of("compact", "delete"),
        "delete, compact, both (either order) or empty", broker="log.cleanup.policy",
        doc="`delete`: time and size retention apply; `compact`: the latest record of each "
            "key is kept, and records need keys; both, or neither (empty: records are kept "
            "for ever), as in Kafka."),
    "unclean.leader.election.enable": _rule(
        "BOOLEAN", False, broker="unclean.leader.election.enable",
        doc="In a cluster, a partition whose in-sync replicas are all down gets a live "
            "out-of-sync replica as leader, which may lose committed records. A single "
            "broker holds each partition's one replica: there is no election."),
    "min.insync.replicas": _int_at_least(
        1, 1, broker="min.insync.replicas",
        doc="In a cluster, while a partition's ISR is smaller than this (capped at the "
            "replication factor) an `acks=all` produce is refused with "
            "`NOT_ENOUGH_REPLICAS` and the high watermark does not move. A single broker "
            "holds each partition's one replica, always in sync: capped at one, the "
            "setting never refuses a produce there."),
    "compression.type": _rule(
        "STRING", "producer", one_of(*_COMPRESSION_TYPES), ", ".join(_COMPRESSION_TYPES),
        broker="compression.type",
        doc="Codec of the batches the embedded API writes without being given one "
            "(`producer` and `uncompressed`: none); batches from Kafka producers are "
            "stored as sent."),
    "compression.gzip.level": _rule(
        "INT", -1, gzip_level, "1 .. 9, or -1", broker="compression.gzip.level", doc=_LEVEL),
    "compression.lz4.level": _rule(
        "INT", 9, between(1, 17), "1 .. 17", broker="compression.lz4.level", doc=_LEVEL),
    "compression.zstd.level": _rule(
        "INT", 3, between(-131072, 22), "-131072 .. 22", broker="compression.zstd.level",
        doc=_LEVEL),
    "preallocate": _rule(
        "BOOLEAN", False, broker="log.preallocate",
        doc=_STORED + "segment files grow as they are written."),
    "message.format.version": _rule(
        "STRING", "3.0-IV1", metadata_version, "a Kafka version (0.8.0 .. 3.9, 3.0-IV1, ...)",
        broker="log.message.format.version",
        doc="Stored and ignored, as Kafka 3.0 and later ignore it."),
    "message.timestamp.type": _rule(
        "STRING", "CreateTime", one_of("CreateTime", "LogAppendTime"),
        "CreateTime, LogAppendTime", broker="log.message.timestamp.type",
        doc="`CreateTime` keeps the producer's timestamps; `LogAppendTime` stamps every "
            "batch with the time it is appended."),
    "message.timestamp.difference.max.ms": _long_at_least(
        LONG_MAX, 0, broker="log.message.timestamp.difference.max.ms", doc=_TIMESTAMP_BOUND),
    "message.timestamp.before.max.ms": _long_at_least(
        LONG_MAX, 0, broker="log.message.timestamp.before.max.ms", doc=_TIMESTAMP_BOUND),
    "message.timestamp.after.max.ms": _long_at_least(
        LONG_MAX, 0, broker="log.message.timestamp.after.max.ms", doc=_TIMESTAMP_BOUND),
    "leader.replication.throttled.replicas": _rule(
        "LIST", "", throttled_replicas, "*, or partitionId:brokerId,...", doc=_THROTTLE),
    "follower.replication.throttled.replicas": _rule(
        "LIST", "", throttled_replicas, "*, or partitionId:brokerId,...", doc=_THROTTLE),
    "message.downconversion.enable": _rule(
        "BOOLEAN", True, broker="log.message.downconversion.enable",
        doc=_STORED + "not acted on: a Fetch of version 0 to 3 is always down-converted."),
    "remote.storage.enable": _rule(
        "BOOLEAN", False, None, "false (true is refused: no tiered storage)",
        doc="Kafka's tiered storage, which kqlite does not have: `true` is refused, as a "
            "Kafka broker whose tiered storage is disabled refuses it."),
    "local.retention.ms": _long_at_least(-2, -2, broker="log.local.retention.ms", doc=_TIERED),
    "local.retention.bytes": _long_at_least(-2, -2, broker="log.local.retention.bytes",
                                            doc=_TIERED),
    "remote.log.copy.disable": _rule("BOOLEAN", False, doc=_TIERED),
    "remote.log.delete.on.disable": _rule("BOOLEAN", False, doc=_TIERED),
}

# kqlite's own per-log settings (the embedded API); no Kafka client may set them.
KQLITE_RULES = {
    "fsync": _rule(
        "STRING", "never", one_of("never", "always"), "never, always",
        doc="kqlite's own (set through the embedded API): `always` makes every append, the "
            "broker's included, return only after an fdatasync covering its records; "
            "concurrent appenders share fsyncs (group commit)."),
    "lock.timeout.ms": _long_at_least(
        30000, 0,
        doc="kqlite's own: how long a write waits for another process's append lock before "
            "`LogLockedError`."),
    "recovery.point.checkpoint.interval.ms": _int_at_least(
        60000, 0,
        doc="kqlite's own: how often the data dir's `recovery-point-offset-checkpoint` is "
            "rewritten after flushes (the partition's own state file records every "
            "flush)."),
}

# kqlite's own topic configs that a Kafka client may set (CreateTopics, AlterConfigs):
# the mark of an offset-preserving mirror topic (kqlite/server/mirror_append.py). Unlike
# KQLITE_RULES they travel over the wire, so that the mirror sets the mark when it
# creates the topic and ``kqlite mirror promote`` removes it.
MIRROR_SOURCE = "kqlite.mirror.source"
MIRROR_RULES = {
    MIRROR_SOURCE: _rule(
        "STRING", "",
        doc="kqlite's own: when not empty, the topic is an offset-preserving mirror of the "
            "named source cluster (set by `kqlite mirror --mode preserve`): producers are "
            "refused (`INVALID_REQUEST`) and only a mirror with CLUSTER_ACTION appends the "
            "source's batches at their offsets, deletes records or adds partitions "
            "(`POLICY_VIOLATION` for others). Deleting it promotes the topic; no other "
            "config of the topic changes while it is set."),
}

RULES = {**KAFKA_RULES, **KQLITE_RULES, **MIRROR_RULES}

# The LIST configs: IncrementalAlterConfigs' APPEND and SUBTRACT apply to these only.
LIST_CONFIGS = frozenset(name for name, rule in KAFKA_RULES.items() if rule.type == "LIST")

# WIRE: DescribeConfigs' config_type (Kafka's DescribeConfigsResponse.ConfigType ids).
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                   "LIST": 7, "CLASS": 8, "PASSWORD": 9}

# Kafka's broker config that sets each topic config's default; the others have none.
SERVER_SYNONYMS = {name: rule.broker for name, rule in KAFKA_RULES.items()
                   if rule.broker is not None}


def documentation(name):
    """What config ``name`` does, as DescribeConfigs shows it: the row's ``doc`` in plain
    text (its Markdown code spans without their backticks)."""
    return RULES[name].doc.replace("`", "")


def parse_value(name, value):
    """``value`` of config ``name`` parsed, validated and normalized as Kafka 3.9 does;
    raises ConfigError naming the config and the rule it breaks."""
    rule = RULES[name]
    parser = PARSERS[rule.type]
    parsed = parser(value)
    if parsed is None:
        raise _refuse(name, value, parser.must)
    problem = None if rule.validator is None else rule.validator(parsed)
    if problem is not None:
        raise _refuse(name, value, problem)
    if rule.type != "LIST":
        return parsed
    if name == "cleanup.policy":
        parsed = sorted(set(parsed))
    elif name in ("leader.replication.throttled.replicas",
                  "follower.replication.throttled.replicas"):
        parsed = [java_trim(item) for item in parsed]
    return ",".join(parsed)


def kafka_string(name, value):
    """A normalized value as Kafka shows it (ConfigDef.convertToString): ``true``/``false``,
    Java's Double.toString (``0.5``, ``1.0E-4``), lists joined by commas."""
    kind = RULES[name].type if name in RULES else None
    if kind == "BOOLEAN" and isinstance(value, bool):
        return "true" if value else "false"
    if kind == "DOUBLE" and isinstance(value, float):
        return java_double_string(value)
    return str(value)
