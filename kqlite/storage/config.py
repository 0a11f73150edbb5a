"""Per-log configuration with Kafka's topic-config names and defaults.

Keys use Kafka's dotted names (``segment.bytes``); Python keyword spelling
(``segment_bytes``) is accepted too. Unknown keys and bad values raise
ConfigError naming the key, so a typo never silently falls back to a default.
docs/configuration.md lists every key.
"""

import difflib

from ..errors import ConfigError

__all__ = ["LogConfig", "DEFAULTS"]

_MAX_LONG = 2 ** 63 - 1

# name: (default, kind, minimum). Defaults are Kafka's broker defaults.
DEFAULTS = {
    "segment.bytes": (1 << 30, int, 14),
    "segment.ms": (7 * 24 * 3600 * 1000, int, 1),
    "segment.index.bytes": (10 * 1024 * 1024, int, 8),
    "index.interval.bytes": (4096, int, 0),
    "retention.ms": (7 * 24 * 3600 * 1000, int, -1),
    "retention.bytes": (-1, int, -1),
    "max.message.bytes": (1048588, int, 0),
    "flush.messages": (_MAX_LONG, int, 1),
    "flush.ms": (_MAX_LONG, int, 0),
    "message.timestamp.type": ("CreateTime", str, None),
    "compression.type": ("producer", str, None),
    "cleanup.policy": ("delete", str, None),
    "delete.retention.ms": (24 * 3600 * 1000, int, 0),
    "min.cleanable.dirty.ratio": (0.5, float, 0.0),
    "min.compaction.lag.ms": (0, int, 0),
    "file.delete.delay.ms": (60000, int, 0),
    # kqlite's own keys
    "fsync": ("never", str, None),              # "never" | "always" (group commit)
    "lock.timeout.ms": (30000, int, 0),
    "recovery.point.checkpoint.interval.ms": (60000, int, 0),
}

_CHOICES = {
    "message.timestamp.type": ("CreateTime", "LogAppendTime"),
    "compression.type": ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"),
    "fsync": ("never", "always"),
}


def _canonical(key):
    name = key.replace("_", ".")
    if name in DEFAULTS:
        return name
    close = difflib.get_close_matches(name, DEFAULTS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown log config {key!r}{hint}")


def _coerce(name, value):
    default, kind, minimum = DEFAULTS[name]
    if name == "cleanup.policy":
        parts = sorted(p.strip() for p in str(value).split(",") if p.strip())
        if not parts or any(p not in ("delete", "compact") for p in parts):
            raise ConfigError(f"cleanup.policy must be delete, compact or both, not {value!r}")
        return ",".join(parts)
    try:
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        value = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be {kind.__name__}, not {value!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, not {value!r}")
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ConfigError(f"{name} must be one of {', '.join(_CHOICES[name])}, not {value!r}")
    return value


class LogConfig:
    """Validated settings; read with ``config["segment.bytes"]`` or ``config.segment_bytes``."""

    def __init__(self, values=None, **kwargs):
        self._values = {name: spec[0] for name, spec in DEFAULTS.items()}
        self._overrides = {}
        merged = dict(values or {})
        merged.update(kwargs)
        for key, value in merged.items():
            name = _canonical(key)
            self._values[name] = self._overrides[name] = _coerce(name, value)

    def __getitem__(self, name):
        try:
            return self._values[name]  # the hot path: appends read a few settings each
        except KeyError:
            return self._values[_canonical(name)]

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
        merged.update({_canonical(k): v for k, v in changes.items()})
        return LogConfig(merged)

    def __repr__(self):
        return f"LogConfig({self._overrides!r})"
