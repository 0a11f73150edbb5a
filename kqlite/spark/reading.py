"""Planning and reading offset ranges of a kqlite data dir (no pyspark here).

The driver side resolves which topic-partitions a query reads and the offsets a
position option ("earliest", "latest", JSON offsets, timestamps) stands for. The
executor side turns one offset range of one partition into Arrow record batches in
the Kafka-source schema. Reading a range is deterministic: the same (topic,
partition, start, end) always gives the same rows while they are retained, which
is what Spark's replay of an unfinished micro-batch needs.

Isolation (the option ``kafka.isolation.level``) is the consumer's: a data dir is
read as a broker serves that consumer's ListOffsets and Fetch. Under
``read_committed`` (Isolation.COMMITTED) "latest" is the last stable offset, a
timestamp is looked up below it, and a range leaves out transaction markers and the
records of aborted transactions (Kafka's consumer algorithm, storage's
AbortedFilter); under ``read_uncommitted`` (HIGH_WATERMARK) "latest" is the high
watermark and only markers are left out. Through a broker the catalog's requests
carry the level and the broker applies the same limits, so the functions here take
an ``isolation`` only for a data dir's logs. Because the end of a read_committed
range is at most the last stable offset, every transaction in it is decided, and
the same range always gives the same rows.
"""

import logging
import os

import kqlite
from ..db.layout import meta_dir
from ..errors import KqliteError, OffsetOutOfRangeError
from ..storage import Isolation
from ..storage.isolation import isolation_level, isolation_of
from .options import CONSUMER, EARLIEST, LATEST, SparkOptionError
from .schema import arrow_schema, headers_type

__all__ = ["DataLossError", "open_data_dir", "selected_partitions", "resolve_positions",
           "latest_offsets", "earliest_offsets", "timestamp_type", "read_range", "check_lost"]

log = logging.getLogger("kqlite.spark")

_LOSS_HINT = ("Some data may have been lost because it is not available in the kqlite data "
              "dir any more: it was deleted by retention or delete_records, the log was "
              "truncated, or the topic was deleted. If you want your query to go on "
              "regardless, set the source option \"failOnDataLoss\" to \"false\".")


class DataLossError(KqliteError):
    """Offsets a query must read are gone (retention, truncation, a deleted topic)."""


def open_data_dir(path):
    """Open an existing data dir for the data source (no background retention thread).

    A missing directory is an error, not a new empty data dir: a typo in a path
    should not quietly read nothing or write somewhere unexpected."""
    if not os.path.isdir(meta_dir(path, "topics")):
        if not os.path.isdir(path):
            raise SparkOptionError(f"no kqlite data dir at {path}")
        raise SparkOptionError(f"{path} is not a kqlite data dir (it has no .kqlite/topics; "
                               f"create topics with kqlite.open(path).create_topic(...))")
    return kqlite.open(path, retention_check_interval_ms=0)


def open_source(path=None, bootstrap=None, isolation="read_uncommitted"):
    """The driver's and executors' view of where the records are: a data dir, or with
    ``bootstrap`` (kafka.bootstrap.servers) a broker read with Kafka's ``isolation``
    level (kafka.isolation.level)."""
    if bootstrap:
        from .broker import BrokerCatalog
        return BrokerCatalog(bootstrap, isolation)
    return open_data_dir(path)


def partition_count(db, topic):
    """The partition count as the topic file says now (another process may have grown it)."""
    # Database caches topic definitions: refresh re-reads it. (A BrokerCatalog asks the
    # broker each time and has no such cache.)
    if isinstance(db, kqlite.Database):
        return db.partitions_for(topic, refresh=True)
    return db.partitions_for(topic)


def selected_partitions(db, opts):
    """Sorted (topic, partition) pairs the subscription covers now."""
    if opts.assign is not None:
        counts = {}
        for topic, p in opts.assign:
            if topic not in counts:
                try:
                    counts[topic] = partition_count(db, topic)
                except kqlite.UnknownTopicError:
                    raise SparkOptionError(f"option assign names topic {topic!r}, which does "
                                           f"not exist in {db.path}") from None
            if not 0 <= p < counts[topic]:
                raise SparkOptionError(f"option assign names partition {p} of topic "
                                       f"{topic!r}, which has {counts[topic]} partition(s)")
        return list(opts.assign)
    present = set(db.list_topics(internal=True))
    if opts.topics is not None:
        topics = [t for t in opts.topics if t in present]
    else:   # a pattern never matches internal topics (__consumer_offsets), as in Kafka
        topics = [t for t in present if opts.matches(t) and not t.startswith("__")]
    out = []
    for topic in sorted(set(topics)):
        try:
            out.extend((topic, p) for p in range(partition_count(db, topic)))
        except kqlite.UnknownTopicError:   # deleted meanwhile
            continue
    return out


def latest_offsets(db, tps, isolation=Isolation.HIGH_WATERMARK):
    """The end a reader under ``isolation`` may read to (the high watermark, or the last
    stable offset under COMMITTED) of each partition."""
    if not isinstance(db, kqlite.Database):
        return db.latest_offsets(tps)       # a broker: one request per leader
    out = {}
    for tp in tps:
        with db.leased_log(*tp) as lg:    # a lease: thousands of partitions, few descriptors
            out[tp] = _end(lg, isolation)
    return out


def earliest_offsets(db, tps):
    if not isinstance(db, kqlite.Database):
        return db.earliest_offsets(tps)
    out = {}
    for tp in tps:
        with db.leased_log(*tp) as lg:
            out[tp] = lg.start_offset
    return out


def resolve_positions(db, spec, tps, which, strategy="error",
                      isolation=Isolation.HIGH_WATERMARK):
    """Offsets ``spec`` (a starting or ending _Spec) stands for, for each of ``tps``.

    Per-partition JSON that leaves a partition out gives it the default: earliest
    for a start, latest for an end (Kafka insists on every partition; kqlite is
    lenient). A start by timestamp with no record at or after it fails, or with
    startingOffsetsByTimestampStrategy=latest takes the latest offset; an end by
    timestamp with no such record takes the latest offset (as Kafka). "Latest" and
    timestamps are under ``isolation`` (a data dir's; see the module docstring)."""
    if spec.kind == "earliest":
        return earliest_offsets(db, tps)
    if spec.kind == "latest":
        return latest_offsets(db, tps, isolation)
    out = {}
    for tp in tps:
        with db.leased_log(*tp) as lg:
            out[tp] = _position(lg, spec, tp, which, strategy, isolation)
    return out


def _position(lg, spec, tp, which, strategy, isolation):
    """The offset ``spec`` stands for in one partition (see resolve_positions)."""
    if spec.kind == "offsets":
        want = spec.value.get(tp, EARLIEST if which == "starting" else LATEST)
        if want == EARLIEST:
            return lg.start_offset
        if want == LATEST:
            return _end(lg, isolation)
        return want
    ts = spec.value if spec.kind == "timestamp" else spec.value.get(tp)
    if ts is None:
        return lg.start_offset if which == "starting" else _end(lg, isolation)
    found = lg.offset_for_time(ts, isolation=isolation)
    if found is None:
        if which == "starting" and strategy == "error":
            raise SparkOptionError(
                f"no record at or after timestamp {ts} in {tp[0]}-{tp[1]} (option "
                f"{which}Timestamp/{which}OffsetsByTimestamp); set "
                f"startingOffsetsByTimestampStrategy=latest to start at the end instead")
        found = _end(lg, isolation)
    return found


def _end(lg, isolation):
    """The offset a read of ``lg`` stops below: for a data dir's Log, the limit of
    ``isolation`` (storage's read_limit; the high watermark or the last stable offset),
    caught up with other processes' appends; for a BrokerPartition, ListOffsets latest
    under the catalog's isolation level (the broker applies the same rule)."""
    if isinstance(lg, kqlite.Log):
        return lg.offset_snapshot().read_limit(isolation)
    return lg.high_watermark


def timestamp_type(db, topic):
    """Kafka's timestampType column: 1 for a LogAppendTime topic, else 0 (CreateTime)."""
    try:
        return 1 if db.topic_config(topic)["message.timestamp.type"] == "LogAppendTime" else 0
    except KqliteError:
        return 0


def check_lost(message, fail_on_data_loss):
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {_LOSS_HINT}")
    log.warning("%s; going on because failOnDataLoss=false", message)


def read_range(path, topic, partition, start, end, ts_type=0, include_headers=False,
               fail_on_data_loss=True, batch_rows=10000, bootstrap=None, fast=True,
               isolation="read_uncommitted", columns=None):
    """Yield pyarrow RecordBatches of the records of ``topic-partition`` with offsets in
    ``[start, end)``: every column of the Kafka-source schema, or with ``columns``
    (schema.requested_columns) those only, in that order. Spark turns each column of
    each row it is handed into its row format, whether the query uses it or not, so a
    column left out here is work taken out of the whole job; headers are not decoded
    at all when they are not asked for. See _read_all for the rest."""
    if columns is None:
        yield from _read_all(path, topic, partition, start, end, ts_type, include_headers,
                             fail_on_data_loss, batch_rows, bootstrap, fast, isolation)
        return
    import pyarrow as pa
    schema = arrow_schema(include_headers, columns)
    for batch in _read_all(path, topic, partition, start, end, ts_type,
                           include_headers and "headers" in columns, fail_on_data_loss,
                           batch_rows, bootstrap, fast, isolation):
        yield pa.RecordBatch.from_arrays([batch.column(c) for c in columns], schema=schema)


def _read_all(path, topic, partition, start, end, ts_type, include_headers,
              fail_on_data_loss, batch_rows, bootstrap, fast, isolation):
    """Yield pyarrow RecordBatches of the records of ``topic-partition`` with offsets in
    ``[start, end)`` (executor side; opens and closes the data dir, or the broker
    connections with ``bootstrap``, itself). A data dir is read with the columnar
    decoder of arrow_read unless ``fast`` is False (the per-record path, which the
    tests compare it with); a broker's fetched batches always go through the same
    columnar decoder (broker.BrokerPartition.read_arrow). ``isolation`` is Kafka's
    isolation.level (read_uncommitted or read_committed); see the module docstring."""
    import pyarrow as pa
    schema = arrow_schema(include_headers)
    if end <= start:
        return
    db = open_source(path, bootstrap, isolation)
    try:
        if not isinstance(db, kqlite.Database):
            yield from _read_broker(db, topic, partition, start, end, ts_type,
                                    include_headers, fail_on_data_loss, batch_rows)
            return
        lg = _log_or_lost(db, topic, partition, start, end, fail_on_data_loss)
        if lg is None:
            return
        limit = isolation_of(CONSUMER, isolation_level(isolation))
        records = None
        for _attempt in range(3):
            start, end = _still_there(topic, partition, start, end, lg.start_offset,
                                      _end(lg, limit), fail_on_data_loss)
            if start >= end:
                return
            try:
                records = lg.read(start, max_offset=end, isolation=limit)
                break
            except OffsetOutOfRangeError:
                continue    # retention moved the start between the check and the read
        if records is None:
            records = lg.read(max(start, lg.start_offset), max_offset=end, isolation=limit)
        if fast and isinstance(db, kqlite.Database):
            records.close()     # not iterated: the columnar path reads the same range
            start = max(start, lg.start_offset)
            from .arrow_read import read_arrow
            yield from read_arrow(lg, start, end, include_headers, topic, partition,
                                  ts_type, batch_rows, limit)
            return
        htype = headers_type() if include_headers else None
        while True:
            rows = []
            for rec in records:
                rows.append(rec)
                if len(rows) >= batch_rows:
                    break
            if not rows:
                return
            yield _batch(pa, schema, htype, rows, topic, partition, ts_type)
            if len(rows) < batch_rows:
                return
    finally:
        db.close()


def _read_broker(catalog, topic, partition, start, end, ts_type, include_headers,
                 fail_on_data_loss, batch_rows):
    """read_range through a broker: the same data-loss rules as a data dir's."""
    lg = _log_or_lost(catalog, topic, partition, start, end, fail_on_data_loss)
    if lg is None:
        return
    start, end = _still_there(topic, partition, start, end, lg.start_offset,
                              lg.high_watermark, fail_on_data_loss)
    if start >= end:
        return

    def lost(message):
        check_lost(message, fail_on_data_loss)

    yield from lg.read_arrow(start, end, include_headers, ts_type, batch_rows, lost)


def _log_or_lost(source, topic, partition, start, end, fail_on_data_loss):
    """The partition's log from a Database or a BrokerCatalog, or None (reported as
    data loss) when the topic is gone."""
    try:
        return source.log(topic, partition)
    except kqlite.UnknownTopicError:
        check_lost(f"topic partition {topic}-{partition} no longer exists (offsets "
                   f"[{start}, {end}) were to be read)", fail_on_data_loss)
        return None


def _still_there(topic, partition, start, end, first, last, fail_on_data_loss):
    """[start, end) cut to what the partition still holds, [first, last): what was cut
    is reported (check_lost), as data loss."""
    if start < first:
        check_lost(f"offsets [{start}, {min(first, end)}) of {topic}-{partition} are "
                   f"gone: the log now starts at {first}", fail_on_data_loss)
        start = first
    if end > last and start < end:
        check_lost(f"offsets [{max(start, last)}, {end}) of {topic}-{partition} are "
                   f"gone: the log now ends at {last}", fail_on_data_loss)
        end = last
    return start, end


def _batch(pa, schema, htype, rows, topic, partition, ts_type):
    n = len(rows)
    offsets, stamps, keys, values, headers = zip(*rows)
    arrays = [
        pa.array(keys, type=pa.binary()),
        pa.array(values, type=pa.binary()),
        pa.array([topic] * n, type=pa.string()),
        pa.array([partition] * n, type=pa.int32()),
        pa.array(offsets, type=pa.int64()),
        pa.array([ts * 1000 for ts in stamps], type=pa.int64()).cast(
            pa.timestamp("us", tz="UTC")),
        pa.array([ts_type] * n, type=pa.int32()),
    ]
    if htype is not None:
        arrays.append(pa.array([list(h) for h in headers], type=htype))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
