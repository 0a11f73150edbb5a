"""Per-log configuration with Kafka's topic-config names, defaults and validation.

Every Kafka 3.9 topic config is accepted and checked by Kafka's rules
(``config_rules.py``: its types, ranges and allowed values), so a value Kafka refuses
raises ConfigError naming the key and the rule, and one Kafka accepts is accepted; a
typo never silently falls back to a default. kqlite's own keys (``fsync``,
``lock.timeout.ms``, ``recovery.point.checkpoint.interval.ms``) are for the embedded API
only: :func:`check_kafka_names` refuses them, and anything else not Kafka's, in what a
Kafka client sends.

Keys in a dict are exactly Kafka's dotted names (``segment.bytes``), as Kafka's own
``LogConfig.validateNames`` requires; Python keyword arguments spell them with ``_``
(``segment_bytes=...``). docs/configuration.md lists every key.
"""

import difflib
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, Optional, TypedDict, Union

from ..errors import ConfigError
from .config_rules import KAFKA_RULES, KQLITE_RULES, MIRROR_RULES, RULES, kafka_string, \
    parse_value

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["LogConfig", "LogOptions", "DEFAULTS", "KAFKA_CONFIGS", "check_kafka_names",
           "kafka_string", "salvage"]

# name: (default, Python type, minimum or None): the shape callers have always read.
DEFAULTS = {
    name: (rule.default, type(rule.default), getattr(rule.validator, "minimum", None))
    for name, rule in RULES.items()}

# Kafka 3.9's LogConfig.configNames().
KAFKA_CONFIGS = frozenset(KAFKA_RULES)
# The names a Kafka client may set: Kafka's and the mark of a kqlite mirror topic.
_CLIENT_CONFIGS = KAFKA_CONFIGS | frozenset(MIRROR_RULES)


def _unknown(key: object, known: Iterable[str]) -> ConfigError:
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown log config {key!r}{hint}")


def _canonical(key: str, keyword: bool = False) -> str:
    """The dotted name of ``key``; a keyword argument may spell the dots as ``_``."""
    if key in RULES:
        return key
    if keyword and isinstance(key, str) and key.replace("_", ".") in RULES:
        return key.replace("_", ".")
    raise _unknown(key, RULES)


def check_kafka_names(names: Iterable[str]) -> None:
    """Refuse (ConfigError) any name that is not one of Kafka's topic configs (or
    ``kqlite.mirror.source``), as Kafka's ``LogConfig.validateNames`` does: for what a
    Kafka client sends."""
    for name in names:
        if name not in _CLIENT_CONFIGS:
            if name in KQLITE_RULES:
                raise ConfigError(f"{name!r} is a setting of kqlite's embedded API, not a "
                                  f"Kafka topic config")
            raise _unknown(name, _CLIENT_CONFIGS)


def _conflicts(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Kafka's LogConfig checks of one config against another: ``(key, message)`` for each
    broken, ``key`` being the one whose default settles it."""
    found = []
    low, high = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if low > high:
        found.append(("min.compaction.lag.ms",
                      f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                      f"max.compaction.lag.ms ({high})"))
    if values["remote.storage.enable"]:
        # As a Kafka broker with remote.log.storage.system.enable=false answers.
        found.append(("remote.storage.enable",
                      "remote.storage.enable cannot be true: kqlite has no tiered storage "
                      "(Kafka: Tiered Storage functionality is disabled in the broker)"))
    return found


def _check_together(values: Mapping[str, Any]) -> None:
    for _key, message in _conflicts(values):
        raise ConfigError(message)


def salvage(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any, str]]]:
    """Stored overrides read by today's rules, for definitions written by earlier kqlite
    versions (which accepted some values Kafka refuses): ``(overrides, dropped)``, where
    each override Kafka 3.9 refuses is left out so that its default applies and
    ``dropped`` lists it as ``(key, value, reason)``. ``compression.type`` ``none``, which
    they accepted as no compression, is read as ``uncompressed``. A data dir must open
    whatever one stored config says."""
    kept: dict[str, Any] = {}
    dropped: list[tuple[str, Any, str]] = []
    for key, value in values.items():
        if key == "compression.type" and value == "none":
            value = "uncompressed"
        try:
            kept[key] = parse_value(_canonical(key), value)
        except ConfigError as exc:
            dropped.append((key, value, str(exc)))
    defaults = {name: rule.default for name, rule in RULES.items()}
    for key, message in _conflicts({**defaults, **kept}):
        if key in kept:
            dropped.append((key, kept.pop(key), message))
    return kept, dropped


_List = Union[str, list[str], tuple[str, ...]]


class LogOptions(TypedDict, total=False):
    """The keyword options of ``Log.open`` and ``LogConfig`` (Kafka's names with ``_``
    for ``.``) and their types, for type checkers: one per RULES entry
    (tests/typing/test_types.py checks that they agree). At run time a Kafka-style
    string is accepted too (``segment_bytes="1048576"``), as Kafka accepts one."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    flush_messages: int
    flush_ms: int
    retention_bytes: int
    retention_ms: int
    max_message_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    file_delete_delay_ms: int
    min_cleanable_dirty_ratio: float
    cleanup_policy: _List
    unclean_leader_election_enable: bool
    min_insync_replicas: int
    compression_type: Literal["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    preallocate: bool
    message_format_version: str
    kqlite_mirror_source: str
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"]
    message_timestamp_difference_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    leader_replication_throttled_replicas: _List
    follower_replication_throttled_replicas: _List
    message_downconversion_enable: bool
    remote_storage_enable: bool
    local_retention_ms: int
    local_retention_bytes: int
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool
    fsync: Literal["never", "always"]
    lock_timeout_ms: int
    recovery_point_checkpoint_interval_ms: int


class LogConfig:
    """Validated settings; read with ``config["segment.bytes"]`` or ``config.segment_bytes``.

    Values are typed by key (docs/configuration.md): ints, floats, bools, strings and
    lists of strings, so they read as ``Any``."""

    def __init__(self, values: Optional[Mapping[str, Any]] = None,
                 **kwargs: "Unpack[LogOptions]") -> None:
        self._values: dict[str, Any] = {name: rule.default for name, rule in RULES.items()}
        self._overrides: dict[str, Any] = {}
        given = {_canonical(k): v for k, v in (values or {}).items()}
        given.update((_canonical(k, keyword=True), v) for k, v in kwargs.items())
        for name, value in given.items():
            self._values[name] = self._overrides[name] = parse_value(name, value)
        _check_together(self._values)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]  # the hot path: appends read a few settings each
        except KeyError:
            return self._values[_canonical(name, keyword=True)]

    def __getattr__(self, attr: str) -> Any:
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def overrides(self) -> dict[str, Any]:
        """The keys set explicitly, as Kafka stores per-topic overrides."""
        return dict(self._overrides)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def with_overrides(self, **changes: Any) -> "LogConfig":
        merged = dict(self._overrides)
        merged.update({_canonical(k, keyword=True): v for k, v in changes.items()})
        return LogConfig(merged)

    def __repr__(self) -> str:
        return f"LogConfig({self._overrides!r})"
