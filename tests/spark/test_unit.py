"""The kqlite data source's reader and writer classes driven directly, without a JVM.

Spark calls these methods from its Python workers; here the tests call them the same
way (planning on the "driver", read/write on the "executor") so most behaviour is
checked in milliseconds. tests/spark/test_spark.py runs the same paths through Spark.
"""

import json
import os
import pickle

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")

import pyarrow as pa  # noqa: E402
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

import kqlite
from kqlite.db.partitioner import partition_for_key
from kqlite.spark import KqliteDataSource, register
from kqlite.spark import writing
from kqlite.spark.options import (
    SinkOptions, SourceOptions, SparkOptionError, offset_json, rate_limit, split_ranges,
)
from kqlite.spark.reading import DataLossError, read_range
from kqlite.spark.schema import arrow_schema, ddl, spark_schema
from kqlite.spark.source import (
    ADMISSION_CONTROL, KqliteBatchReader, KqliteStreamReader, KqliteStreamWriter,
    KqliteWriter, OffsetRange, WriteResult,
)
from kqlite.storage.sharing import STATE_FILE
from kqlite.storage.state import STATE_SIZE

T0 = 1_700_000_000_000


@pytest.fixture
def data(tmp_path):
    """A data dir with topic t (2 partitions, 10 keyed records with headers) and an
    empty topic u; returns (path, {(partition, offset): record})."""
    path = str(tmp_path / "data")
    written = {}
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("t", 2)
        db.create_topic("u", 1)
        with db.producer() as producer:
            for i in range(10):
                md = producer.send("t", key=b"k%d" % i, value=b"v%d" % i, timestamp=T0 + i,
                                   headers=[("n", b"%d" % i), ("empty", None)]).result()
                written[(md.partition, md.offset)] = (b"k%d" % i, b"v%d" % i, T0 + i)
    return path, written


def rows(reader, parts):
    out = []
    for part in parts:
        for batch in reader.read(pickle.loads(pickle.dumps(part))):
            assert isinstance(batch, pa.RecordBatch)
            out.extend(batch.to_pylist())
    return out


def spark_struct(include_headers):
    return spark_schema(include_headers)


# -- Schema and options ------------------------------------------------------------------

@pytest.mark.parametrize("headers", [True, False])
def test_arrow_schema_is_exactly_what_spark_checks(headers):
    from pyspark.sql.pandas.types import to_arrow_schema
    try:
        expected = to_arrow_schema(spark_struct(headers), timezone="UTC")    # Spark >= 4.2
    except TypeError:
        expected = to_arrow_schema(spark_struct(headers))                   # Spark 4.1
        expected = expected.set(5, pa.field("timestamp", pa.timestamp("us", tz="UTC")))
    assert arrow_schema(headers).equals(expected)
    assert str(arrow_schema(headers)) == str(expected)      # field names of lists too
    assert ("headers" in ddl(headers)) == headers
    # The data source accepts its own schema and refuses any other.
    source = KqliteDataSource({"path": "/d", "subscribe": "t",
                               "includeHeaders": str(headers).lower()})
    assert isinstance(source.reader(spark_schema(headers)), KqliteBatchReader)
    with pytest.raises(SparkOptionError, match="fixed schema"):
        source.reader(StructType([StructField("value", StringType())]))


def test_data_source_name_and_discovery_hook():
    import pyspark_kqlite
    assert KqliteDataSource.name() == "kqlite"
    assert pyspark_kqlite.DefaultSource.name() == "kqlite"
    ds = pyspark_kqlite.DefaultSource({"path": "/x", "includeHeaders": "true"})
    assert ds.schema() == ddl(True)

    class FakeRegistry:
        def register(self, cls):
            self.cls = cls

    class FakeSpark:
        dataSource = FakeRegistry()
    assert register(FakeSpark) is KqliteDataSource and FakeSpark.dataSource.cls is \
        KqliteDataSource


@pytest.mark.parametrize("options, message", [
    ({"path": "/d"}, "exactly one of"),
    ({"path": "/d", "subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
    ({"subscribe": "a"}, "no data dir"),
    ({"path": "/d", "subscribe": "a", "kafka.bootstrap.servers": "h:9092"}, "not both"),
    ({"subscribe": "a", "kafka.bootstrap.servers": " "}, "is empty"),
    ({"path": "/d", "assign": "[1]"}, "assign must be JSON"),
    ({"path": "/d", "subscribe": "a", "startingOffsets": "latest"}, "not allowed in a batch"),
    ({"path": "/d", "subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "not allowed"),
    ({"path": "/d", "subscribe": "a", "endingOffsets": "earliest"}, "not allowed"),
    ({"path": "/d", "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "not allowed"),
    ({"path": "/d", "subscribe": "a", "startingOffsets": "{bad"}, "not valid JSON"),
    ({"path": "/d", "subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "invalid"),
    ({"path": "/d", "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
    ({"path": "/d", "subscribe": "a", "minPartitions": "0"}, ">= 1"),
    ({"path": "/d", "subscribe": "a", "maxOffsetsPerTrigger": "5"}, "streaming queries"),
    ({"path": "/d", "subscribePattern": "("}, "regular expression"),
])
def test_bad_batch_options(options, message):
    with pytest.raises(SparkOptionError, match=message):
        SourceOptions(options, streaming=False)


def test_streaming_options_and_defaults():
    opts = SourceOptions({"path": "/d", "subscribe": "a, b"}, streaming=True)
    assert opts.topics == ["a", "b"] and opts.starting.kind == "latest" and opts.ending is None
    assert opts.fail_on_data_loss and not opts.include_headers
    with pytest.raises(SparkOptionError, match="batch queries"):
        SourceOptions({"path": "/d", "subscribe": "a", "endingOffsets": "latest"}, True)
    batch = SourceOptions({"path": "file:///d", "subscribe": "a", "STARTINGOFFSETS": "earliest"},
                          False)
    assert batch.path == "/d" and batch.starting.kind == "earliest"
    assert batch.ending.kind == "latest"
    # Kafka's precedence: startingTimestamp over startingOffsetsByTimestamp over offsets.
    both = SourceOptions({"path": "/d", "subscribe": "a", "startingOffsets": "earliest",
                          "startingTimestamp": "5"}, False)
    assert both.starting.kind == "timestamp" and both.starting.value == 5
    pattern = SourceOptions({"path": "/d", "subscribePattern": "clicks-.*"}, True)
    assert pattern.matches("clicks-eu") and not pattern.matches("xclicks-eu")


def test_sink_options():
    with pytest.raises(SparkOptionError, match="sinkId"):
        SinkOptions({"path": "/d", "batchId": "3"})
    with pytest.raises(SparkOptionError, match="writeMode"):
        SinkOptions({"path": "/d", "writeMode": "fast"})
    opts = SinkOptions({"path": "/d", "topic": "t", "sinkId": "s", "batchId": "3"})
    assert (opts.topic, opts.batch_id, opts.write_mode) == ("t", 3, "staged")


def test_split_ranges_like_kafkas_range_calculator():
    # KafkaOffsetRangeCalculatorSuite: fewer ranges than minPartitions get split by size.
    assert split_ranges([("t", 0, 1, 4)], 3) == [("t", 0, 1, 2), ("t", 0, 2, 3), ("t", 0, 3, 4)]
    assert split_ranges([("t", 1, 1, 5), ("t", 2, 1, 21)], 4) == [
        ("t", 1, 1, 5), ("t", 2, 1, 7), ("t", 2, 7, 14), ("t", 2, 14, 21)]
    # Enough ranges already (empty ones do not count and are dropped).
    assert split_ranges([("t", 0, 0, 5), ("t", 1, 3, 3)], None) == [("t", 0, 0, 5)]
    assert split_ranges([("t", 0, 0, 5), ("t", 1, 0, 5)], 2) == [("t", 0, 0, 5), ("t", 1, 0, 5)]


def test_rate_limit_like_kafkas():
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    # Proportional to the backlog; a share below 1 is rounded up so b is not starved.
    assert rate_limit(10, {a: 0, b: 0}, {a: 100, b: 1}) == {a: 9, b: 1}
    assert rate_limit(10, {a: 5, b: 0}, {a: 5, b: 3}) == {a: 5, b: 3}
    # A partition new since start begins at its earliest offset.
    assert rate_limit(4, {a: 0}, {a: 10, c: 20}, {c: 10}) == {a: 2, c: 12}
    assert offset_json({b: 3, a: 1, ("s", 10): 2, ("s", 9): 1}) == \
        {"s": {"9": 1, "10": 2}, "t": {"0": 1, "1": 3}}


# -- Batch reading -----------------------------------------------------------------------

def test_batch_reader_returns_every_record_with_headers(data):
    path, written = data
    reader = KqliteBatchReader({"path": path, "subscribe": "t,missing",
                                "includeHeaders": "true"})
    parts = reader.partitions()
    assert [(p.topic, p.partition, p.start) for p in parts] == [("t", 0, 0), ("t", 1, 0)]
    assert sum(p.end for p in parts) == 10
    got = rows(pickle.loads(pickle.dumps(reader)), parts)
    assert {(r["partition"], r["offset"]): (r["key"], r["value"],
                                            int(r["timestamp"].timestamp() * 1000))
            for r in got} == written
    for r in got:
        n = int(r["value"][1:])
        assert r["topic"] == "t" and r["timestampType"] == 0
        assert r["headers"] == [{"key": "n", "value": b"%d" % n}, {"key": "empty", "value": None}]


def test_batch_reader_positions(data):
    path, written = data
    ends = {p: sum(1 for (q, _) in written if q == p) for p in (0, 1)}

    def plan(**options):
        reader = KqliteBatchReader({"path": path, **options})
        return [(p.topic, p.partition, p.start, p.end) for p in reader.partitions()]

    assert plan(assign='{"t":[1]}') == [("t", 1, 0, ends[1])]
    assert plan(subscribe="t", startingOffsets='{"t":{"0":2,"1":-2}}',
                endingOffsets='{"t":{"0":3}}') == [("t", 0, 2, 3), ("t", 1, 0, ends[1])]
    # startingTimestamp: the earliest offset whose timestamp is >= it, per partition.
    late = {(p, o) for (p, o), (_, _, ts) in written.items() if ts >= T0 + 7}
    planned = plan(subscribe="t", startingTimestamp=str(T0 + 7),
                   startingOffsetsByTimestampStrategy="latest")
    assert sum(e - s for _, _, s, e in planned) == len(late)
    with pytest.raises(SparkOptionError, match="no record at or after"):
        plan(subscribe="t", startingTimestamp=str(T0 + 100))
    assert sum(e - s for *_, s, e in plan(
        subscribe="t", startingTimestamp=str(T0 + 100),
        startingOffsetsByTimestampStrategy="latest")) == 0
    assert len(plan(subscribe="t", minPartitions="5")) == 5
    assert plan(subscribePattern="u|v") == []
    with pytest.raises(SparkOptionError, match="does not exist"):
        plan(assign='{"nope":[0]}')
    with pytest.raises(SparkOptionError, match="has 2 partition"):
        plan(assign='{"t":[2]}')
    with pytest.raises(SparkOptionError, match="past the end of the log"):
        plan(subscribe="t", endingOffsets='{"t":{"0":1000}}')
    with pytest.raises(SparkOptionError, match="after its ending offset"):
        plan(subscribe="t", startingOffsets='{"t":{"0":3}}', endingOffsets='{"t":{"0":2}}')
    with pytest.raises(SparkOptionError, match="not a kqlite data dir|no kqlite data dir"):
        plan(subscribe="t", path=path + "/nope")
    # Spark's placeholder partition when there is nothing to read.
    reader = KqliteBatchReader({"path": path, "subscribe": "u"})
    from pyspark.sql.datasource import InputPartition
    assert list(reader.read(InputPartition(None))) == []


def test_fail_on_data_loss(data):
    path, written = data
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.log("t", 0).delete_records(before=2)
    options = {"path": path, "assign": '{"t":[0]}', "startingOffsets": '{"t":{"0":0}}'}
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        KqliteBatchReader(options).partitions()
    reader = KqliteBatchReader({**options, "failOnDataLoss": "false"})
    parts = reader.partitions()
    assert [(p.start, p.end) for p in parts] == [(2, parts[0].end)]
    # Deleted between planning and reading: the executor sees it too.
    with pytest.raises(DataLossError):
        list(read_range(path, "t", 0, 0, 5))
    got = [r for b in read_range(path, "t", 0, 0, 5, fail_on_data_loss=False)
           for r in b.to_pylist()]
    assert [r["offset"] for r in got] == [2, 3, 4]
    with pytest.raises(DataLossError, match="now ends"):
        list(read_range(path, "t", 0, 2, 1000))


def _snapshot(root):
    """Every file's bytes; of a log's .kqlite-state the State record only: the rest of its
    page holds the write-lock handoff's shared-memory words (storage/lock_handoff.py),
    which every taking of the lock moves, never written through the seam nor fsynced."""
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            if name == STATE_FILE:
                data = data[:STATE_SIZE]
            files[os.path.relpath(os.path.join(dirpath, name), root)] = data
    return files


def test_reading_a_data_dir_changes_no_file_and_fsyncs_no_file(data, monkeypatch):
    """A query's planning and its tasks open the data dir, read and close it: the logs
    were only read, so closing them writes nothing and fsyncs nothing (storage/
    clean_mark.py). Counted at the storage file-system seam (kqlite/storage/fs.py)."""
    from kqlite.storage import fs as seam
    path, written = data
    before = _snapshot(path)
    done = []

    def counting(cls, name):
        original = getattr(cls, name)

        def call(self, *args):
            done.append((name, getattr(self, "path", None) or args[0]))
            return original(self, *args)
        monkeypatch.setattr(cls, name, call)

    for name in ("pwrite", "truncate", "sync"):
        counting(seam.OsFile, name)
    for name in ("rename", "remove", "fsync_dir", "makedirs"):
        counting(seam.OsFileSystem, name)
    reader = KqliteBatchReader({"path": path, "subscribe": "t", "includeHeaders": "true"})
    got = rows(reader, reader.partitions())
    assert {(r["partition"], r["offset"]): (r["key"], r["value"]) for r in got} == \
        {k: v[:2] for k, v in written.items()}
    # The one change is the data dir's clean-shutdown marker (storage/data_dir.py), removed
    # while a log is open and created again, with a directory fsync, by the last close.
    marker = os.path.join(path, ".kafka_cleanshutdown")
    assert [c for c in done if c[1] != marker and c != ("fsync_dir", path)] == []
    assert not [c for c in done if c[0] == "sync"]
    assert _snapshot(path) == before


def test_log_append_time_topic_reports_timestamp_type_1(tmp_path):
    path = str(tmp_path / "d")
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("la", 1, {"message.timestamp.type": "LogAppendTime"})
        db.producer().send("la", value=b"x", timestamp=5)
    reader = KqliteBatchReader({"path": path, "subscribe": "la"})
    got = rows(reader, reader.partitions())
    assert got[0]["timestampType"] == 1 and got[0]["timestamp"].year >= 2024


# -- Streaming reading -------------------------------------------------------------------

def append(path, topic, partition, n, tag=b"x"):
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.log(topic, partition).append([tag + b"%d" % i for i in range(n)])


def test_stream_reader_offsets_and_restart(data):
    path, written = data
    ends = {p: sum(1 for (q, _) in written if q == p) for p in (0, 1)}
    opts = {"path": path, "subscribe": "t"}
    reader = KqliteStreamReader(opts)
    assert reader.initialOffset() == {"t": {"0": ends[0], "1": ends[1]}}      # latest
    early = KqliteStreamReader({**opts, "startingOffsets": "earliest"})
    start = early.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    end = early.latestOffset()
    assert end == {"t": {"0": ends[0], "1": ends[1]}}
    assert json.loads(json.dumps(end)) == end          # what Spark's offset log stores
    parts = early.partitions(start, end)
    assert sum(p.end - p.start for p in parts) == 10
    assert early.partitions(end, end) == []
    first = rows(pickle.loads(pickle.dumps(early)), parts)
    append(path, "t", 1, 3)
    # A restarted query gets a new reader and the checkpointed offsets.
    again = KqliteStreamReader({**opts, "startingOffsets": "earliest"})
    end2 = again.latestOffset()
    assert end2 == {"t": {"0": ends[0], "1": ends[1] + 3}}
    second = rows(again, again.partitions(end, end2))
    assert [r["value"] for r in second] == [b"x0", b"x1", b"x2"]
    seen = [(r["partition"], r["offset"]) for r in first + second]
    assert len(seen) == len(set(seen)) == 13
    again.stop()


def test_stream_reader_new_partitions_and_topics_start_at_earliest(data):
    path, _ = data
    reader = KqliteStreamReader({"path": path, "subscribePattern": "t|new"})
    start = reader.initialOffset()
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_partitions("t", 3)
        db.create_topic("new", 1)
    append(path, "t", 2, 2)
    append(path, "new", 0, 4)
    end = reader.latestOffset()
    assert end["t"]["2"] == 2 and end["new"] == {"0": 4}
    parts = reader.partitions(start, end)
    assert {(p.topic, p.partition, p.start, p.end) for p in parts} == {
        ("t", 2, 0, 2), ("new", 0, 0, 4)}


def test_stream_reader_deleted_topic_is_data_loss(data):
    path, _ = data
    reader = KqliteStreamReader({"path": path, "subscribe": "t"})
    start = reader.initialOffset()
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.delete_topic("t")
    end = reader.latestOffset()
    assert end == {}
    with pytest.raises(DataLossError, match="is gone"):
        reader.partitions(start, end)
    lenient = KqliteStreamReader({"path": path, "subscribe": "t", "failOnDataLoss": "false"})
    assert lenient.partitions(start, end) == []


@pytest.mark.skipif(not ADMISSION_CONTROL, reason="read limits need Spark 4.2+")
def test_max_offsets_per_trigger_and_available_now(data):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
    path, written = data
    reader = KqliteStreamReader({"path": path, "subscribe": "t",
                                 "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"})
    assert reader.getDefaultReadLimit() == ReadMaxRows(4)
    reader.prepareForTriggerAvailableNow()
    append(path, "t", 0, 50)           # after the AvailableNow target: not read
    start, sizes = reader.initialOffset(), []
    while True:
        end = reader.latestOffset(start, ReadMaxRows(4))
        if end == start:
            break
        sizes.append(sum(p.end - p.start for p in reader.partitions(start, end)))
        start = end
    assert sum(sizes) == 10 and max(sizes) <= 4 and len(sizes) >= 3
    unlimited = KqliteStreamReader({"path": path, "subscribe": "t"})
    assert unlimited.getDefaultReadLimit() == ReadAllAvailable()
    assert unlimited.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable()) == \
        unlimited.reportLatestOffset()


def test_stream_reader_without_limits_on_old_signature(data):
    path, _ = data
    reader = KqliteStreamReader({"path": path, "subscribe": "t", "maxOffsetsPerTrigger": "2",
                                 "startingOffsets": "earliest"})
    # Spark 4.1 calls latestOffset() with no arguments: everything available.
    assert sum(int(v) for v in reader.latestOffset()["t"].values()) == 10


# -- Writing -----------------------------------------------------------------------------

def spark_batch(n, start=0, **extra):
    cols = {"key": [f"user-{i % 4}" for i in range(start, start + n)],
            "value": [b"row-%d" % i for i in range(start, start + n)]}
    cols.update(extra)
    return pa.RecordBatch.from_pydict(cols)


def consume(path, topic):
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        out = []
        for p in range(db.partitions_for(topic)):
            out.extend((p, r) for r in db.log(topic, p).read())
        return out


def test_writer_stages_then_publishes_on_commit(data):
    path, _ = data
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    writer = KqliteWriter({"path": path, "topic": "t"}, schema)
    before = len(consume(path, "t"))
    msgs = [pickle.loads(pickle.dumps(writer)).write(iter([spark_batch(6, 100)])),
            writer.write(iter([spark_batch(4, 200)])), writer.write(iter([]))]
    assert all(isinstance(m, WriteResult) for m in msgs) and msgs[2].file is None
    assert len(consume(path, "t")) == before              # nothing visible yet
    writer.commit(pickle.loads(pickle.dumps(msgs)))
    got = [(p, r) for p, r in consume(path, "t") if r.value.startswith(b"row-")]
    assert len(got) == 10
    for p, r in got:
        assert p == partition_for_key(r.key, 2)           # Kafka's partitioner
    # abort: staged rows are dropped, nothing is appended
    msg = writer.write(iter([spark_batch(3, 300)]))
    writer.abort([msg, None])
    assert len(consume(path, "t")) == before + 10
    assert writing._staging(path) and not [f for f in __import__("os").listdir(
        writing._staging(path)) if f.endswith(".arrow")]


def test_writer_columns_topic_partition_headers_timestamp(data):
    path, _ = data
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_arrays([
        pa.array([None, b"k"], pa.binary()), pa.array(["a", "b"]), pa.array(["u", "t"]),
        pa.array([0, 1], pa.int32()),
        pa.array([[{"key": "h", "value": b"1"}], None], headers_type),
        pa.array([T0 * 1000, None], pa.timestamp("us", tz="UTC")),
        pa.array([1, 2]),
    ], names=["key", "value", "topic", "partition", "headers", "timestamp", "ignored"])
    schema = StructType([StructField("key", BinaryType()), StructField("value", StringType()),
                         StructField("topic", StringType()),
                         StructField("partition", IntegerType())])
    writer = KqliteWriter({"path": path, "writeMode": "direct"}, schema)
    msg = writer.write(iter([batch]))
    assert msg.file is None and msg.counts == {("u", 0): 1, ("t", 1): 1}
    (p, rec), = consume(path, "u")
    assert (rec.key, rec.value, rec.headers, rec.timestamp) == (None, b"a", (("h", b"1"),), T0)
    last = consume(path, "t")[-1][1]
    assert (last.key, last.value, last.headers) == (b"k", b"b", ())


@pytest.mark.parametrize("fields, topic, message", [
    ([("key", "string")], "t", "needs a 'value' column"),
    ([("value", "int")], "t", "must be string or binary"),
    ([("value", "string")], None, "no topic"),
    ([("value", "string"), ("topic", "int")], None, "topic must be a string"),
    ([("value", "string"), ("partition", "string")], "t", "partition must be an int"),
    ([("value", "string"), ("headers", "array<string>")], "t", "headers must be"),
])
def test_sink_schema_rules(fields, topic, message):
    with pytest.raises(SparkOptionError, match=message):
        writing.check_sink_schema(fields, topic)


def test_writer_errors(data, tmp_path):
    path, _ = data
    schema = StructType([StructField("value", StringType())])
    with pytest.raises(SparkOptionError, match="does not exist"):
        KqliteWriter({"path": path, "topic": "nope"}, schema)
    with pytest.raises(SparkOptionError, match="append-only"):
        KqliteDataSource({"path": path, "topic": "t"}).writer(schema, True)
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("table", 1, {"cleanup.policy": "compact"})
    writer = KqliteWriter({"path": path, "topic": "table"}, schema)
    with pytest.raises(kqlite.InvalidRecordError, match="needs a non-null key"):
        writer.write(iter([pa.RecordBatch.from_pydict({"value": ["x"]})]))
    writer = KqliteWriter({"path": path, "topic": "t"}, schema)
    with pytest.raises(kqlite.InvalidRecordError, match="partition 5"):
        writer.write(iter([pa.RecordBatch.from_pydict(
            {"value": ["x"], "partition": pa.array([5], pa.int32())})]))


def test_stream_writer_is_exactly_once_per_batch_id(data):
    path, _ = data
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    opts = {"path": path, "topic": "u", "checkpointLocation": "/ck/1"}

    def run_batch(batch_id, n, start):
        writer = KqliteStreamWriter(opts, schema)          # tasks
        msgs = [writer.write(iter([spark_batch(n, start)]))]
        KqliteStreamWriter(opts, schema).commit(msgs, batch_id)     # a fresh driver writer

    run_batch(0, 3, 0)
    run_batch(1, 2, 3)
    run_batch(1, 2, 3)           # replayed after a failure: not appended again
    run_batch(0, 3, 0)
    assert [r.value for _, r in consume(path, "u")] == [b"row-%d" % i for i in range(5)]
    # Another sink (another query) has its own batch ids.
    other = {**opts, "sinkId": "other"}
    w = KqliteStreamWriter(other, schema)
    w.commit([w.write(iter([spark_batch(1, 9)]))], 0)
    assert len(consume(path, "u")) == 6


def test_publish_cut_short_is_finished_not_repeated(data, monkeypatch):
    """The driver dies half way through publishing micro-batch 7; Spark replays it."""
    path, _ = data
    batch1 = pa.RecordBatch.from_pydict({"value": [b"a%d" % i for i in range(5)],
                                         "partition": pa.array([0] * 5, pa.int32())})
    batch2 = pa.RecordBatch.from_pydict({"value": [b"b%d" % i for i in range(4)],
                                         "partition": pa.array([1] * 4, pa.int32())})
    staged = [writing.stage_rows(path, iter([b]), "t", "staged")[0] for b in (batch1, batch2)]
    # Publishing appends whole encoded batches: the driver dies on the second append.
    real_append = kqlite.Log.append_batches
    calls = []

    def dying_append(self, data, **kw):
        if calls:
            raise SystemExit("driver killed")
        calls.append(1)
        return real_append(self, data, **kw)

    monkeypatch.setattr(kqlite.Log, "append_batches", dying_append)
    with pytest.raises(SystemExit):
        writing.publish(path, staged, 7, "sink")
    monkeypatch.setattr(kqlite.Log, "append_batches", real_append)
    append(path, "t", 0, 2, b"other")                       # another writer meanwhile
    # The replay stages the same rows again (new files) and commits batch 7 again.
    again = [writing.stage_rows(path, iter([b]), "t", "staged")[0] for b in (batch1, batch2)]
    writing.publish(path, again, 7, "sink")
    values = [r.value for _, r in consume(path, "t")]
    for i in range(5):
        assert values.count(b"a%d" % i) == 1
    for i in range(4):
        assert values.count(b"b%d" % i) == 1
    assert writing.SinkState(path, "sink").last_batch() == 7
    assert writing.SinkState(path, "sink").pending() is None
    assert writing.publish(path, [], 7, "sink") == 0


def test_offset_range_pickles_small():
    part = OffsetRange("t", 3, 10, 20, 1)
    back = pickle.loads(pickle.dumps(part))
    assert back == part and back.timestamp_type == 1 and back.value == ("t", 3, 10, 20)
    assert len(pickle.dumps(part)) < 400
