"""Option parsing for the ``kqlite`` Spark data source (no pyspark, no pyarrow here).

Option names and meanings follow Spark's Kafka source
(docs/streaming/structured-streaming-kafka-integration.md) with the data dir
path in place of ``kafka.bootstrap.servers``. Spark hands options over as a
case-insensitive dict of strings; everything is parsed from strings here, and a
bad value raises :class:`SparkOptionError` naming the option.
"""

import json
import math
import os
import re

from ..errors import ConfigError
from ..storage.isolation import isolation_level, isolation_of

__all__ = ["SparkOptionError", "EARLIEST", "LATEST", "SourceOptions", "SinkOptions",
           "offset_json", "parse_offsets_json", "split_ranges", "rate_limit", "get_option"]

EARLIEST = -2   # Kafka's sentinels in startingOffsets / endingOffsets JSON
LATEST = -1
CONSUMER = -1   # WIRE: the replica id of a consumer's Fetch and ListOffsets


class SparkOptionError(ConfigError):
    """A ``kqlite`` data source option is missing, unknown or has a bad value."""


def get_option(options, name, default=None):
    """``options[name]`` matched case-insensitively (Spark's options already are)."""
    if options is None:
        return default
    if name in options:
        return options[name]
    low = name.lower()
    for key, value in options.items():
        if key.lower() == low:
            return value
    return default


def _bool(options, name, default) -> bool:
    raw = get_option(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SparkOptionError(f"option {name} must be true or false, not {raw!r}")


def _int(options, name, default=None, minimum=None):
    raw = get_option(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SparkOptionError(f"option {name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise SparkOptionError(f"option {name} must be >= {minimum}, not {value}")
    return value


def _json(options, name):
    raw = get_option(options, name)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise SparkOptionError(f"option {name} is not valid JSON ({exc}): {raw!r}") from None


def parse_offsets_json(name, raw):
    """``{"topic": {"0": 23, "1": -2}}`` -> ``{("topic", 0): 23, ("topic", 1): -2}``."""
    try:
        obj = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise SparkOptionError(f"option {name} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(obj, dict):
        raise SparkOptionError(f"option {name} must be a JSON object like "
                               f'{{"topic":{{"0":23}}}}, not {raw!r}')
    out = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise SparkOptionError(f"option {name}: topic {topic!r} must map partitions to "
                                   f"offsets, not {parts!r}")
        for p, off in parts.items():
            try:
                pn = int(p)
            except (TypeError, ValueError):
                raise SparkOptionError(f"option {name}: bad partition {p!r} of topic "
                                       f"{topic!r}") from None
            if isinstance(off, bool) or not isinstance(off, int):
                raise SparkOptionError(f"option {name}: offset of {topic}-{p} must be an "
                                       f"integer, not {off!r}")
            out[(topic, pn)] = off
    return out


def offset_json(offsets):
    """``{(topic, p): offset}`` -> Kafka's offset shape with string partition keys, in a
    stable order (sorted topics, numeric partition order), as Spark's offset log needs."""
    out = {}
    for (topic, p) in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def from_offset_json(obj):
    """The inverse of :func:`offset_json`: ``{(topic, p): offset}``."""
    out = {}
    for topic, parts in (obj or {}).items():
        for p, off in parts.items():
            out[(topic, int(p))] = int(off)
    return out


class _Spec:
    """A starting or ending position: "earliest", "latest", per-partition offsets, a
    timestamp for every partition or per-partition timestamps."""

    def __init__(self, kind, value=None):
        self.kind = kind          # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
        self.value = value

    def __repr__(self):
        return f"_Spec({self.kind!r}, {self.value!r})"

    def __eq__(self, other):
        return isinstance(other, _Spec) and (self.kind, self.value) == (other.kind, other.value)


def _check_broker_sink(options):
    """Through a broker the sink writes only transactions, for a streaming query with a
    checkpointLocation (where the driver keeps its decisions: broker_sink.py)."""
    if str(get_option(options, "writeMode") or "").lower() != "transactional" or \
            not get_option(options, "checkpointLocation"):
        raise SparkOptionError(
            "through a broker (kafka.bootstrap.servers) the kqlite sink writes only with "
            "writeMode=transactional in a streaming query with the option "
            "checkpointLocation; otherwise write into a kqlite data dir: pass its path "
            "with .save(path) or .option('path', ...) (the data dir a running kqlite "
            "serve uses is fine)")
    if get_option(options, "path"):
        raise SparkOptionError("give either a data dir path or kafka.bootstrap.servers, "
                               "not both")


def _source_location(options):
    """(path, bootstrap): exactly one of a data dir path and kafka.bootstrap.servers."""
    bootstrap = get_option(options, "kafka.bootstrap.servers")
    if bootstrap is None:
        return _path(options), None
    if get_option(options, "path"):
        raise SparkOptionError("give either a data dir path or kafka.bootstrap.servers, "
                               "not both")
    bootstrap = str(bootstrap).strip()
    if not bootstrap:
        raise SparkOptionError("kafka.bootstrap.servers is empty")
    return None, bootstrap


def _path(options):
    path = get_option(options, "path")
    if not path:
        raise SparkOptionError("no data dir: use .load('/path/to/data') or .option('path', ...)")
    if path.startswith("file:"):
        path = re.sub(r"^file:(//)?", "", path)
    return os.path.abspath(path)


class SourceOptions:
    """Parsed read options. ``streaming`` selects Kafka's streaming defaults (latest)."""

    def __init__(self, options, streaming):
        options = dict(options or {})
        self.raw = options
        self.streaming = streaming
        self.path, self.bootstrap = _source_location(options)
        chosen = [k for k in ("subscribe", "subscribePattern", "assign")
                  if get_option(options, k) is not None]
        if len(chosen) != 1:
            raise SparkOptionError("give exactly one of the options subscribe, "
                                   "subscribePattern or assign" +
                                   (f" (got {', '.join(chosen)})" if chosen else ""))
        self.strategy = chosen[0]
        self.topics = None
        self.pattern = None
        self.assign = None
        if self.strategy == "subscribe":
            self.topics = [t.strip() for t in get_option(options, "subscribe").split(",")
                           if t.strip()]
            if not self.topics:
                raise SparkOptionError("option subscribe needs at least one topic")
        elif self.strategy == "subscribePattern":
            raw = get_option(options, "subscribePattern")
            try:
                self.pattern = re.compile(raw)
            except re.error as exc:
                raise SparkOptionError(f"option subscribePattern is not a valid regular "
                                       f"expression ({exc}): {raw!r}") from None
        else:
            obj = _json(options, "assign")
            if not isinstance(obj, dict) or not obj or not all(
                    isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool)
                                                 for p in ps) for ps in obj.values()):
                raise SparkOptionError('option assign must be JSON like {"topicA":[0,1]}, '
                                       f'not {get_option(options, "assign")!r}')
            self.assign = sorted({(t, p) for t, ps in obj.items() for p in ps})
        self.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
        self.include_headers = _bool(options, "includeHeaders", False)
        self.min_partitions = _int(options, "minPartitions", None, minimum=1)
        self.max_offsets_per_trigger = _int(options, "maxOffsetsPerTrigger", None, minimum=1)
        self.min_offsets_per_trigger = _int(options, "minOffsetsPerTrigger", None, minimum=1)
        self.records_per_batch = _int(options, "maxRecordsPerBatch", 10000, minimum=1)
        # Kafka's consumer setting, as Spark's Kafka source passes kafka.* on to its
        # consumer; the default is that consumer's (Java's isolation.level).
        isolation = str(get_option(options, "kafka.isolation.level") or
                        "read_uncommitted").strip().lower()
        try:
            level = isolation_level(isolation)
        except ValueError:
            raise SparkOptionError("option kafka.isolation.level must be read_committed or "
                                   f"read_uncommitted, not {isolation!r}") from None
        self.isolation = isolation
        # What a consumer with that level reads to (Kafka's FetchIsolation.of): a data
        # dir's reads are limited as the broker would limit this consumer's Fetch.
        self.read_isolation = isolation_of(CONSUMER, level)
        strategy = (get_option(options, "startingOffsetsByTimestampStrategy") or "error").lower()
        if strategy not in ("error", "latest"):
            raise SparkOptionError("option startingOffsetsByTimestampStrategy must be error "
                                   f"or latest, not {strategy!r}")
        self.timestamp_strategy = strategy
        self.starting = self._position(options, "starting")
        self.ending = self._position(options, "ending")
        if streaming:
            if self.ending is not None:
                raise SparkOptionError("endingOffsets/endingTimestamp are for batch queries; "
                                       "a streaming query has no end")
            if self.starting is None:
                self.starting = _Spec("latest")
        else:
            if self.max_offsets_per_trigger is not None or \
                    self.min_offsets_per_trigger is not None:
                raise SparkOptionError("maxOffsetsPerTrigger/minOffsetsPerTrigger are for "
                                       "streaming queries")
            if self.starting is None:
                self.starting = _Spec("earliest")
            if self.ending is None:
                self.ending = _Spec("latest")
            if self.starting.kind == "latest":
                raise SparkOptionError("startingOffsets=latest is not allowed in a batch query")
            if self.starting.kind == "offsets" and LATEST in self.starting.value.values():
                raise SparkOptionError("startingOffsets offset -1 (latest) is not allowed in "
                                       "a batch query")
            if self.ending.kind == "earliest":
                raise SparkOptionError("endingOffsets=earliest is not allowed in a batch query")
            if self.ending.kind == "offsets" and EARLIEST in self.ending.value.values():
                raise SparkOptionError("endingOffsets offset -2 (earliest) is not allowed in "
                                       "a batch query")

    def _position(self, options, which):
        # Kafka's precedence: a global timestamp, then per-partition timestamps, then offsets.
        ts = get_option(options, f"{which}Timestamp")
        if ts is not None:
            try:
                return _Spec("timestamp", int(str(ts).strip()))
            except ValueError:
                raise SparkOptionError(f"option {which}Timestamp must be milliseconds since "
                                       f"the epoch, not {ts!r}") from None
        by_ts = get_option(options, f"{which}OffsetsByTimestamp")
        if by_ts is not None:
            return _Spec("timestamps", parse_offsets_json(f"{which}OffsetsByTimestamp", by_ts))
        raw = get_option(options, f"{which}Offsets")
        if raw is None:
            return None
        text = raw.strip()
        if text.lower() in ("earliest", "latest"):
            return _Spec(text.lower())
        offsets = parse_offsets_json(f"{which}Offsets", text)
        for tp, off in offsets.items():
            if off < EARLIEST:
                raise SparkOptionError(f"option {which}Offsets: offset {off} of "
                                       f"{tp[0]}-{tp[1]} is invalid (use >= 0, -2 for earliest "
                                       f"or -1 for latest)")
        return _Spec("offsets", offsets)

    def matches(self, topic):
        """Is ``topic`` selected by subscribe/subscribePattern/assign?"""
        if self.topics is not None:
            return topic in self.topics
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None   # Java's Pattern.matches
        return any(t == topic for t, _ in self.assign)


class SinkOptions:
    """Parsed write options."""

    def __init__(self, options):
        options = dict(options or {})
        self.raw = options
        self.bootstrap = get_option(options, "kafka.bootstrap.servers")
        if self.bootstrap is None:
            self.path = _path(options)
        else:
            _check_broker_sink(options)
            self.path = None
        self.topic = get_option(options, "topic")
        self.sink_id = get_option(options, "sinkId")
        self.checkpoint = get_option(options, "checkpointLocation")
        self.batch_id = _int(options, "batchId", None, minimum=0)
        if self.batch_id is not None and not self.sink_id:
            raise SparkOptionError("option batchId needs the option sinkId too: the sink "
                                   "records the last batch id it published under that name")
        mode = (get_option(options, "writeMode") or "staged").lower()
        if mode not in ("staged", "direct", "transactional"):
            raise SparkOptionError("option writeMode must be staged, direct or transactional, "
                                   f"not {mode!r}")
        if mode == "direct" and self.batch_id is not None:
            raise SparkOptionError("option batchId needs writeMode=staged or transactional")
        self.write_mode = mode


def split_ranges(ranges, min_partitions):
    """Kafka's KafkaOffsetRangeCalculator: drop empty ranges; when there are fewer than
    ``min_partitions`` left, split each range into ``round(size / ideal)`` (at least 1)
    pieces, the last piece taking the remainder. ``ranges`` are (topic, p, start, end)."""
    todo = [r for r in ranges if r[3] > r[2]]
    if not min_partitions or len(todo) >= min_partitions:
        return todo
    total = sum(r[3] - r[2] for r in todo)
    ideal = total / min_partitions
    out = []
    for topic, p, start, end in todo:
        size = end - start
        parts = max(int(math.floor(size / ideal + 0.5)), 1)
        remaining = size
        pos = start
        for i in range(parts):
            this = remaining // (parts - i)
            remaining -= this
            stop = min(pos + this, end)
            out.append((topic, p, pos, stop))
            pos = stop
    return out


def rate_limit(limit, start, end, earliest=None):
    """Kafka's KafkaMicroBatchStream.rateLimit: share ``limit`` offsets among the
    partitions in proportion to their backlog (``floor``, or ``ceil`` below 1 so small
    partitions are not starved), never past ``end``. ``start``/``end`` map (topic, p) to
    offsets; partitions missing from ``start`` begin at ``earliest[tp]`` (default 0)."""
    earliest = earliest or {}
    sizes = {}
    for tp, stop in end.items():
        begin = start.get(tp, earliest.get(tp, 0))
        if stop - begin > 0:
            sizes[tp] = stop - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    out = {}
    for tp, stop in end.items():
        if tp not in sizes:
            out[tp] = stop
            continue
        begin = start.get(tp, earliest.get(tp, 0))
        prorate = limit * (sizes[tp] / total)
        share = int(math.ceil(prorate)) if prorate < 1 else int(math.floor(prorate))
        out[tp] = min(stop, begin + share)
    return out
