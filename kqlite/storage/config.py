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

from ..errors import ConfigError
from .config_rules import KAFKA_RULES, KQLITE_RULES, RULES, kafka_string, parse_value

__all__ = ["LogConfig", "DEFAULTS", "KAFKA_CONFIGS", "check_kafka_names", "kafka_string",
           "salvage"]

# name: (default, Python type, minimum or None): the shape callers have always read.
DEFAULTS = {
    name: (rule.default, type(rule.default), getattr(rule.validator, "minimum", None))
    for name, rule in RULES.items()}

# The names a Kafka client may set (Kafka 3.9's LogConfig.configNames()).
KAFKA_CONFIGS = frozenset(KAFKA_RULES)


def _unknown(key, known):
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown log config {key!r}{hint}")


def _canonical(key, keyword=False):
    """The dotted name of ``key``; a keyword argument may spell the dots as ``_``."""
    if key in RULES:
        return key
    if keyword and isinstance(key, str) and key.replace("_", ".") in RULES:
        return key.replace("_", ".")
    raise _unknown(key, RULES)


def check_kafka_names(names):
    """Refuse (ConfigError) any name that is not one of Kafka's topic configs, as Kafka's
    ``LogConfig.validateNames`` does: for what a Kafka client sends."""
    for name in names:
        if name not in KAFKA_CONFIGS:
            if name in KQLITE_RULES:
                raise ConfigError(f"{name!r} is a setting of kqlite's embedded API, not a "
                                  f"Kafka topic config")
            raise _unknown(name, KAFKA_CONFIGS)


def _conflicts(values):
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


def _check_together(values):
    for _key, message in _conflicts(values):
        raise ConfigError(message)


def salvage(values):
    """Stored overrides read by today's rules, for definitions written by earlier kqlite
    versions (which accepted some values Kafka refuses): ``(overrides, dropped)``, where
    each override Kafka 3.9 refuses is left out so that its default applies and
    ``dropped`` lists it as ``(key, value, reason)``. ``compression.type`` ``none``, which
    they accepted as no compression, is read as ``uncompressed``. A data dir must open
    whatever one stored config says."""
    kept, dropped = {}, []
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


class LogConfig:
    """Validated settings; read with ``config["segment.bytes"]`` or ``config.segment_bytes``."""

    def __init__(self, values=None, **kwargs):
        self._values = {name: rule.default for name, rule in RULES.items()}
        self._overrides = {}
        given = {_canonical(k): v for k, v in (values or {}).items()}
        given.update((_canonical(k, keyword=True), v) for k, v in kwargs.items())
        for name, value in given.items():
            self._values[name] = self._overrides[name] = parse_value(name, value)
        _check_together(self._values)

    def __getitem__(self, name):
        try:
            return self._values[name]  # the hot path: appends read a few settings each
        except KeyError:
            return self._values[_canonical(name, keyword=True)]

    def __getattr__(self, attr):
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def overrides(self):
        """The keys set explicitly, as Kafka stores per-topic overrides."""
        return dict(self._overrides)

    def as_dict(self):
        return dict(self._values)

    def with_overrides(self, **changes):
        merged = dict(self._overrides)
        merged.update({_canonical(k, keyword=True): v for k, v in changes.items()})
        return LogConfig(merged)

    def __repr__(self):
        return f"LogConfig({self._overrides!r})"
