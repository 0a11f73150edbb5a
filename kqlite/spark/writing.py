"""Writing Spark rows into kqlite topics (no pyspark here).

Tasks turn Arrow batches from Spark into records: ``value`` (string or binary,
required), ``key`` (string or binary), ``topic`` (unless the ``topic`` option is
set), ``partition`` (int; else Kafka's partitioner: murmur2 of the key, a sticky
random partition per Arrow batch for keyless rows), ``headers``
(array<struct<key string, value binary>>) and, a kqlite extension, ``timestamp``
(timestamp or long milliseconds; else the time of the write). Other columns are
ignored, as Spark's Kafka sink does.

Two write modes:

``staged`` (the default)
    A task writes its records to a staging file in ``<data dir>/.kqlite/spark/
    staging`` and returns its name; the driver appends the staged records when
    Spark commits the job (batch) or the micro-batch (streaming), and deletes
    them when Spark aborts. A failed batch job appends nothing, and a streaming
    sink is exactly-once: the last published micro-batch id is recorded per sink
    in ``<data dir>/.kqlite/spark/sinks/<sink>/state.json``, a replayed batch is
    skipped, and a publish cut short by a crash is finished, not repeated, when
    the batch is replayed (``pending.json`` remembers where each partition ended
    before the publish, and the records already appended are recognised).

``direct``
    Tasks append straight to the topics: faster, at-least-once (a retried task or
    replayed micro-batch appends again), like Spark's Kafka sink.
"""

import hashlib
import json
import logging
import os
import random
import time
import uuid
from collections import defaultdict

import kqlite
from ..errors import InvalidRecordError
from ..db.files import SequentialWriter
from ..db.layout import meta_dir
from ..db.partitioner import partition_for_key
from ..storage.fs import DEFAULT_FS, atomic_write
from .options import SparkOptionError
from .arrow_write import (append_runs, cached_partition_count, column_of, runs,
                          staged_columns)
from .reading import open_data_dir, open_source, partition_count

__all__ = ["check_sink_schema", "stage_rows", "publish", "discard", "SinkState",
           "sink_dir", "STAGED_SCHEMA_FIELDS"]

log = logging.getLogger("kqlite.spark")

_STAGING_MAX_AGE = 24 * 3600     # orphaned staging files (killed tasks) go after a day

STAGED_SCHEMA_FIELDS = ("topic", "partition", "key", "value", "timestamp", "headers")


# -- Schema checks (driver) -------------------------------------------------------------------

def check_sink_schema(fields, topic_option):
    """Kafka-sink rules on the DataFrame's columns. ``fields`` is [(name, simpleString)]."""
    types = {name.lower(): t for name, t in fields}
    if "value" not in types:
        raise SparkOptionError("the kqlite sink needs a 'value' column (string or binary)")
    for col in ("key", "value"):
        if col in types and types[col] not in ("string", "binary"):
            raise SparkOptionError(f"column {col} must be string or binary, not {types[col]}; "
                                   f"cast it, e.g. to_json(...) or CAST({col} AS STRING)")
    if topic_option is None:
        if "topic" not in types:
            raise SparkOptionError("no topic: set the option 'topic' or give a 'topic' column")
        if types["topic"] != "string":
            raise SparkOptionError(f"column topic must be a string, not {types['topic']}")
    if "partition" in types and types["partition"] not in ("int", "smallint", "tinyint"):
        raise SparkOptionError(f"column partition must be an int, not {types['partition']}")
    if "headers" in types and types["headers"].replace(" ", "") not in (
            "array<struct<key:string,value:binary>>", "array<struct<key:string,value:string>>"):
        raise SparkOptionError("column headers must be array<struct<key:string,value:binary>>, "
                               f"not {types['headers']}")
    if "timestamp" in types and types["timestamp"] not in ("timestamp", "timestamp_ntz",
                                                           "bigint"):
        raise SparkOptionError("column timestamp must be a timestamp or a long (ms), not "
                               f"{types['timestamp']}")


def check_topic_exists(path, topic, bootstrap=None):
    db = open_source(path, bootstrap)
    try:
        partition_count(db, topic)
    except kqlite.UnknownTopicError:
        raise SparkOptionError(f"topic {topic!r} does not exist in {path}; create it first "
                               f"(kqlite.open(path).create_topic(...) or kqlite topics "
                               f"create)") from None
    finally:
        db.close()


# -- Rows to records (tasks) -------------------------------------------------------------------

def _as_bytes(values):
    return [v.encode() if isinstance(v, str) else v for v in values]


def batch_to_records(batch, topic_option, db, now_ms, rng, counts_cache):
    """One Arrow batch -> {(topic, partition): [Record]} (partition chosen as Kafka's)."""
    import pyarrow as pa
    n = batch.num_rows
    if n == 0:
        return {}
    values = _as_bytes(column_of(batch, "value").to_pylist())
    key_col = column_of(batch, "key")
    keys = _as_bytes(key_col.to_pylist()) if key_col is not None else [None] * n
    if topic_option is not None:
        topics = [topic_option] * n
    else:
        topics = column_of(batch, "topic").to_pylist()
    part_col = column_of(batch, "partition")
    parts = part_col.to_pylist() if part_col is not None else [None] * n
    head_col = column_of(batch, "headers")
    if head_col is not None:
        headers = [[(h["key"], h["value"].encode() if isinstance(h["value"], str)
                     else h["value"]) for h in hs] if hs else () for hs in head_col.to_pylist()]
    else:
        headers = [()] * n
    ts_col = column_of(batch, "timestamp")
    if ts_col is None:
        stamps = [now_ms] * n
    elif pa.types.is_timestamp(ts_col.type):
        mul, div = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000),
                    "ns": (1, 1000000)}[ts_col.type.unit]
        stamps = [now_ms if v is None else v * mul // div
                  for v in ts_col.cast(pa.int64()).to_pylist()]
    else:
        stamps = [now_ms if v is None else int(v) for v in ts_col.to_pylist()]
    sticky = {}
    out = defaultdict(list)
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise InvalidRecordError("a row has a null topic and the sink has no topic option")
        count = cached_partition_count(db, topic, counts_cache, partition_count)
        p = parts[i]
        if p is None:
            key = keys[i]
            if key is not None:
                p = partition_for_key(key, count)
            else:
                p = sticky.get(topic)
                if p is None:
                    p = sticky[topic] = rng.randrange(count)
        elif not 0 <= p < count:
            raise InvalidRecordError(f"partition {p} of topic {topic!r} does not exist "
                                     f"({count} partition(s))")
        out[(topic, p)].append(kqlite.Record(value=values[i], key=keys[i], headers=headers[i],
                                             timestamp=stamps[i]))
    return out


def stage_rows(path, batches, topic_option, mode):
    """Task side: write the rows of an iterator of Arrow batches. ``staged`` mode writes
    one staging file and returns ``(file name or None, {tp: count})``; ``direct`` mode
    appends and returns ``(None, {tp: count})``."""
    import pyarrow as pa
    db = open_data_dir(path)
    rng = random.Random()
    counts_cache, compacted_cache, config_cache = {}, {}, {}
    counts = defaultdict(int)
    writer = sink = None
    name = None
    fs = db.fs
    staging = _staging(path)
    try:
        for batch in batches:
            if isinstance(batch, pa.Table):
                batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
                if batch is None:
                    continue
            if batch.num_rows == 0:
                continue
            now_ms = int(time.time() * 1000)
            staged = staged_columns(batch, topic_option, db, now_ms, rng, counts_cache,
                                    compacted_cache, partition_count)
            if mode == "direct":
                for tp, count in append_runs(db, staged, config_cache).items():
                    counts[tp] += count
                continue
            for topic, p, first, stop in runs(staged):
                counts[(topic, p)] += stop - first
            if writer is None:
                fs.makedirs(staging)
                name = f"{uuid.uuid4().hex}.arrow"
                sink = SequentialWriter(fs.open(os.path.join(staging, name + ".tmp"),
                                                create=True))
                writer = pa.ipc.new_file(sink, _staged_schema())
            writer.write_batch(staged)
        if writer is not None:
            writer.close()
            writer = None
            sink.close()
            fs.rename(os.path.join(staging, name + ".tmp"), os.path.join(staging, name))
        return name, dict(counts)
    except BaseException:
        if writer is not None:
            try:
                writer.close()
            except Exception:
                pass
        if sink is not None:
            sink.close()
        if name is not None:
            for suffix in (".tmp", ""):
                try:
                    fs.remove(os.path.join(staging, name + suffix))
                except OSError:
                    pass
        raise
    finally:
        db.close()


def _staged_schema():
    import pyarrow as pa
    return pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("key", pa.binary()),
        ("value", pa.binary()), ("timestamp", pa.int64()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


def _staged_batch(groups):
    import pyarrow as pa
    cols = {f: [] for f in STAGED_SCHEMA_FIELDS}
    for (topic, p), records in sorted(groups.items()):
        for r in records:
            cols["topic"].append(topic)
            cols["partition"].append(p)
            cols["key"].append(r.key)
            cols["value"].append(r.value)
            cols["timestamp"].append(r.timestamp)
            cols["headers"].append(list(r.headers))
    return pa.RecordBatch.from_pydict(cols, schema=_staged_schema())


def _iter_staged(path):
    """Yield {(topic, partition): [Record]} per Arrow batch of a staging file, in order
    (so publishing holds one Spark batch of rows in memory at a time)."""
    import pyarrow as pa
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            b = reader.get_batch(i).to_pydict()
            out = defaultdict(list)
            for topic, p, key, value, ts, hs in zip(*(b[f] for f in STAGED_SCHEMA_FIELDS)):
                out[(topic, p)].append(kqlite.Record(
                    value=value, key=key, headers=[(h["key"], h["value"]) for h in hs or ()],
                    timestamp=ts))
            yield out


def _staged_batches(path):
    """The Arrow batches of a staging file, each sorted by (topic, partition)."""
    import pyarrow as pa
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def _read_staged(path):
    """{(topic, partition): [Record]} of a whole staging file, in file order."""
    out = defaultdict(list)
    for groups in _iter_staged(path):
        for tp, records in groups.items():
            out[tp].extend(records)
    return out


# -- Publishing (driver) ------------------------------------------------------------------------

def sink_dir(path, sink_id):
    safe = hashlib.sha1(sink_id.encode()).hexdigest()[:16]
    return meta_dir(path, "spark", "sinks", safe)


def _write_json(fs, path, obj):
    atomic_write(fs, path, json.dumps(obj, indent=1, sort_keys=True).encode())


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


class SinkState:
    """Per-sink bookkeeping for exactly-once micro-batches: ``state.json`` holds the last
    published batch id, ``pending.json`` a publish in progress."""

    def __init__(self, path, sink_id, fs=DEFAULT_FS, directory=None):
        self.fs = fs
        self.dir = sink_dir(path, sink_id) if directory is None else directory
        self.sink_id = sink_id
        fs.makedirs(self.dir)
        self.state_file = os.path.join(self.dir, "state.json")
        self.pending_file = os.path.join(self.dir, "pending.json")

    def last_batch(self):
        state = _read_json(self.state_file)
        return None if state is None else state["batchId"]

    def pending(self):
        return _read_json(self.pending_file)

    def begin(self, batch_id, files, before):
        _write_json(self.fs, self.pending_file, {
            "batchId": batch_id, "files": files,
            "before": {f"{t}\u0000{p}": off for (t, p), off in before.items()}})

    def finish(self, batch_id):
        _write_json(self.fs, self.state_file, {"batchId": batch_id, "sink": self.sink_id,
                                               "time": int(time.time() * 1000)})
        try:
            self.fs.remove(self.pending_file)
        except FileNotFoundError:
            pass


def _staging(path):
    return meta_dir(path, "spark", "staging")


def discard(path, files, fs=DEFAULT_FS):
    """Delete staging files (abort, or a replayed batch that was already published)."""
    for name in files:
        if name:
            try:
                fs.remove(os.path.join(_staging(path), os.path.basename(name)))
            except FileNotFoundError:
                pass


def _sweep_orphans(path, keep, fs=DEFAULT_FS):
    staging = _staging(path)
    try:
        names = fs.listdir(staging)
    except FileNotFoundError:
        return
    cutoff = time.time() - _STAGING_MAX_AGE
    for name in names:
        if name in keep:
            continue
        full = os.path.join(staging, name)
        try:
            if os.stat(full).st_mtime < cutoff:
                fs.remove(full)
        except OSError:
            pass


def _same(a, b, compare_time):
    return a.key == b.key and a.value == b.value and tuple(a.headers) == tuple(b.headers) \
        and (not compare_time or a.timestamp == b.timestamp)


def _already_there(lg, since, expected, compare_time):
    """How many of ``expected`` (in order) an interrupted publish already appended at or
    after offset ``since``: a greedy in-order match, so records other writers
    interleaved are skipped over."""
    if not expected:
        return 0
    matched = 0
    start = max(since, lg.start_offset)
    for rec in lg.read(start):
        if _same(rec, expected[matched], compare_time):
            matched += 1
            if matched == len(expected):
                break
    return matched


def publish(path, files, batch_id=None, sink_id=None, partitions=None):
    """Driver side: append the staged records of ``files`` (in order). With a
    ``batch_id`` and ``sink_id`` this is idempotent per batch id (see the module doc);
    ``partitions`` (the (topic, partition) pairs the files hold, from the tasks' commit
    messages) saves reading the files twice. Returns the number of records appended."""
    files = [os.path.basename(f) for f in files if f]
    state = SinkState(path, sink_id) if batch_id is not None and sink_id is not None else None
    recovering = False
    before = {}
    if state is not None:
        last = state.last_batch()
        if last is not None and batch_id <= last:
            log.info("kqlite sink %s: micro-batch %s was published before; skipping it",
                     sink_id, batch_id)
            discard(path, files)
            return 0
        pending = state.pending()
        if pending is not None and pending["batchId"] == batch_id and all(
                os.path.exists(os.path.join(_staging(path), f)) for f in pending["files"]):
            recovering = True
            discard(path, [f for f in files if f not in pending["files"]])
            files = pending["files"]
            for key, off in pending["before"].items():
                t, p = key.split("\u0000")
                before[(t, int(p))] = off
            log.warning("kqlite sink %s: finishing micro-batch %s, whose publish was cut "
                        "short", sink_id, batch_id)
        elif pending is not None:
            log.warning("kqlite sink %s: dropping the unfinished publish of micro-batch %s "
                        "(now publishing %s)", sink_id, pending["batchId"], batch_id)
    db = open_data_dir(path)
    appended = 0
    try:
        groups = [_read_staged(os.path.join(_staging(path), f)) for f in files] \
            if recovering else None
        if state is not None and not recovering:
            tps = set(partitions) if partitions is not None else set()
            if partitions is None:
                for f in files:
                    tps.update(_read_staged(os.path.join(_staging(path), f)))
            for tp in sorted(tps):
                with db.leased_log(*tp) as lg:
                    lg.end_offset                       # refresh from the shared state
                    before[tp] = lg.high_watermark
            state.begin(batch_id, files, before)
        touched = set()
        if recovering:
            expected = defaultdict(list)
            for g in groups:
                for tp, records in g.items():
                    expected[tp].extend(records)
            for tp, records in sorted(expected.items()):
                log_append_time = db.topic_config(tp[0])["message.timestamp.type"] == \
                    "LogAppendTime"
                with db.leased_log(*tp) as lg:
                    done = _already_there(lg, before.get(tp, 0), records, not log_append_time)
                    if done < len(records):
                        lg.append(records[done:])
                        appended += len(records) - done
                touched.add(tp)
        else:
            config_cache = {}
            for f in files:
                for staged in _staged_batches(os.path.join(_staging(path), f)):
                    for tp, count in append_runs(db, staged, config_cache).items():
                        appended += count
                        touched.add(tp)
        for tp in sorted(touched):
            with db.leased_log(*tp) as lg:
                lg.flush()
        if state is not None:
            state.finish(batch_id)
    finally:
        db.close()
    discard(path, files)
    _sweep_orphans(path, set(files))
    return appended

