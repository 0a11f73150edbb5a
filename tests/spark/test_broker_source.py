"""The kqlite source reading through a broker (kafka.bootstrap.servers) served by a real
`kqlite serve` child process (one per module) over the data dir the embedded producer
wrote: the rows are exactly the ones the data dir path gives."""

import glob
import itertools
import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")

import kqlite  # noqa: E402
from kqlite.spark.options import SparkOptionError  # noqa: E402
from kqlite.spark.reading import DataLossError, read_range  # noqa: E402
from test_spark import make_data  # noqa: E402

# The `kqlite serve` child-process helper the server tests use.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_process import BrokerProcess  # noqa: E402

FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
_names = itertools.count()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("served") / "data")
    written = make_data(path)
    broker = BrokerProcess(path, extra=["--no-auto-create-topics"],
                           global_args=["--log-level", "warning"])
    yield path, broker.bootstrap, written
    broker.stop()


def test_read_range_through_the_broker_matches_the_data_dir(served):
    path, bootstrap, written = served
    for p in range(3):
        n = sum(1 for (q, _) in written if q == p)
        via_dir = [b for b in read_range(path, "events", p, 0, n, include_headers=True)]
        via_broker = [b for b in read_range(None, "events", p, 0, n, include_headers=True,
                                            bootstrap=bootstrap)]
        assert [b.to_pylist() for b in via_broker] == [b.to_pylist() for b in via_dir]
        # A schema of some columns (tests/spark/test_column_subsets.py): the same projection.
        some = ("headers", "offset", "key")
        pruned = [b.to_pylist() for b in read_range(None, "events", p, 0, n, include_headers=True,
                                                   bootstrap=bootstrap, columns=some)]
        assert pruned == [[{c: r[c] for c in some} for r in b.to_pylist()] for b in via_dir]
        if n > 2:   # a middle range
            part = list(read_range(None, "events", p, 1, n - 1, bootstrap=bootstrap))
            assert [r["offset"] for b in part for r in b.to_pylist()] == list(range(1, n - 1))


def test_batch_read_through_the_broker(spark, served):
    path, bootstrap, written = served
    df = (spark.read.format("kqlite").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "events").option("includeHeaders", "true").load())
    got = {}
    for r in df.collect():
        got[(r.partition, r.offset)] = (None if r.key is None else bytes(r.key), bytes(r.value),
                                        int(r.timestamp.timestamp() * 1000),
                                        [(h.key, bytes(h.value)) for h in r.headers])
    assert got == written
    with pytest.raises(Exception, match="not both"):
        (spark.read.format("kqlite").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", "events").load(path)).collect()


def test_stream_through_the_broker_restarts_exactly_once(spark, served, tmp_path):
    path, bootstrap, written = served
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run():
        q = (spark.readStream.format("kqlite").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", "events").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "7").load()
             .selectExpr("partition", "offset")
             .writeStream.format("parquet").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(out))
        q.awaitTermination(180)
        assert not q.isActive and q.exception() is None

    run()
    expected = dict(written)
    with kqlite.open(path, retention_check_interval_ms=0) as db:   # while the broker serves
        with db.producer() as producer:
            for i in range(5):
                md = producer.send("events", key=b"late%d" % i, value=b"x").result()
                expected[(md.partition, md.offset)] = None
    run()
    got = [(r.partition, r.offset) for r in spark.read.parquet(out).collect()]
    assert sorted(got) == sorted(expected)
    offsets = sorted(glob.glob(os.path.join(ck, "offsets", "[0-9]*")),
                     key=lambda f: int(os.path.basename(f)))
    assert len(offsets) >= 4       # maxOffsetsPerTrigger split the reads
    last = json.loads(open(offsets[-1]).read().splitlines()[-1])
    assert sum(last["events"].values()) == len(expected)


def test_broker_errors_are_clear(served):
    _path, bootstrap, _ = served
    from kqlite.spark.options import SinkOptions, SourceOptions
    with pytest.raises(SparkOptionError, match="writes only with writeMode=transactional"):
        SinkOptions({"kafka.bootstrap.servers": bootstrap, "topic": "events"})
    opts = SourceOptions({"kafka.bootstrap.servers": bootstrap, "subscribe": "events"}, False)
    assert opts.path is None and opts.bootstrap == bootstrap
    assert opts.isolation == "read_uncommitted"
    with pytest.raises(SparkOptionError, match="kafka.isolation.level must be"):
        SourceOptions({"kafka.bootstrap.servers": bootstrap, "subscribe": "events",
                       "kafka.isolation.level": "dirty"}, False)
    from kqlite.spark.reading import open_source, selected_partitions
    catalog = open_source(bootstrap=bootstrap)
    try:
        assert selected_partitions(catalog, opts) == [("events", p) for p in range(3)]
        missing = SourceOptions({"kafka.bootstrap.servers": bootstrap,
                                 "assign": '{"nope": [0]}'}, False)
        with pytest.raises(SparkOptionError, match="'nope', which does not exist in the "
                                                   "broker at 127.0.0.1"):
            selected_partitions(catalog, missing)
        end = catalog.latest_offsets([("events", 0)])[("events", 0)]
        with pytest.raises(kqlite.OffsetOutOfRangeError, match=f"offset {end + 5} is out of "
                                                               f"range: the log holds "
                                                               f"\\[0, {end}\\)"):
            list(catalog.log("events", 0).read_arrow(end + 5, end + 9, False, 0, 100))
    finally:
        catalog.close()
    with pytest.raises(kqlite.KqliteError, match="gone: the log now ends at"):
        list(read_range(None, "events", 0, 0, 10**6, bootstrap=bootstrap))
    with pytest.raises(SparkOptionError, match="cannot reach"):
        from kqlite.spark.broker import BrokerCatalog
        BrokerCatalog("127.0.0.1:1", timeout=1.0).list_topics()


def test_records_gone_before_the_read(served):
    """Offsets below the log start (DeleteRecords through the broker): a data-loss error,
    or with failOnDataLoss=false the rows that are left."""
    path, bootstrap, _ = served
    topic = "trimmed"
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic(topic, partitions=1)
        db.log(topic, 0).append([b"r%d" % i for i in range(10)])
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, 0, 4)]).values()
    future.result(30)
    with pytest.raises(DataLossError, match=r"offsets \[0, 4\) of trimmed-0 are gone"):
        list(read_range(None, topic, 0, 0, 10, bootstrap=bootstrap))
    rest = list(read_range(None, topic, 0, 0, 10, bootstrap=bootstrap,
                           fail_on_data_loss=False))
    assert [r["offset"] for b in rest for r in b.to_pylist()] == list(range(4, 10))


blobs = st.one_of(st.none(), st.binary(max_size=30))
headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
                   max_size=2)
record = st.builds(lambda k, v, h, t: kqlite.Record(key=k, value=v, headers=h, timestamp=t),
                   blobs, blobs, headers, st.integers(0, 2 * 10**12))
batch = st.tuples(st.lists(record, min_size=1, max_size=12),
                  st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]))


def _legacy(offset, key, value, ts):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
    builder.append(offset, timestamp=ts, key=key, value=value)
    return bytes(builder.build())


def _rows(batches):
    return pa.Table.from_batches(batches).to_pylist() if batches else []


@FEW
@given(batches=st.lists(batch, min_size=1, max_size=5), legacy=st.integers(0, 3),
       window=st.tuples(st.integers(0, 70), st.integers(0, 70)),
       include_headers=st.booleans(), batch_rows=st.integers(1, 40),
       log_append=st.booleans(), isolation=st.sampled_from(["read_committed",
                                                             "read_uncommitted"]))
def test_the_broker_path_gives_the_data_dir_rows(served, batches, legacy, window,
                                                  include_headers, batch_rows, log_append,
                                                  isolation):
    """Keys, null keys, tombstones, headers, every codec, LogAppendTime and magic-1
    messages left by an old Kafka at the start of the log: read through the broker,
    exactly the data dir path's rows."""
    path, bootstrap, _ = served
    topic = f"h{next(_names)}"
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        config = {"message.timestamp.type": "LogAppendTime"} if log_append else None
        db.create_topic(topic, partitions=1, config=config)
    if legacy:      # before anyone opens the log, as test_arrow_paths does
        with open(os.path.join(path, f"{topic}-0", "%020d.log" % 0), "wb") as f:
            for i in range(legacy):
                f.write(_legacy(i, b"k%d" % i if i % 2 else None,
                                None if i == 2 else b"old%d" % i, 1000 + i))
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        lg = db.log(topic, 0)
        for recs, codec in batches:
            lg.append(recs, codec=codec)
        end = lg.end_offset
    from kqlite.spark.reading import open_source, timestamp_type
    catalog = open_source(bootstrap=bootstrap)
    try:
        ts_type = timestamp_type(catalog, topic)
    finally:
        catalog.close()
    assert ts_type == (1 if log_append else 0)
    start, stop = min(window), min(max(window), end)
    via_dir = _rows(list(read_range(path, topic, 0, start, stop, ts_type, include_headers,
                                    batch_rows=batch_rows)))
    via_broker = list(read_range(None, topic, 0, start, stop, ts_type, include_headers,
                                 batch_rows=batch_rows, bootstrap=bootstrap,
                                 isolation=isolation))
    assert _rows(via_broker) == via_dir
    assert len(via_dir) == max(0, stop - start)


def test_min_partitions_splits_broker_reads(served):
    """The planning of a batch read through the broker splits as a data dir's does, and
    the split ranges read the same rows."""
    path, bootstrap, _ = served
    from kqlite.spark.source import KqliteBatchReader
    ranges = KqliteBatchReader({"kafka.bootstrap.servers": bootstrap, "subscribe": "events",
                                "minPartitions": "9"}).partitions()
    same = KqliteBatchReader({"path": path, "subscribe": "events",
                              "minPartitions": "9"}).partitions()
    assert ranges == same and len(ranges) >= 9
    for r in ranges:
        via_dir = _rows(list(read_range(path, r.topic, r.partition, r.start, r.end,
                                        include_headers=True)))
        via_broker = _rows(list(read_range(None, r.topic, r.partition, r.start, r.end,
                                           include_headers=True, bootstrap=bootstrap)))
        assert via_broker == via_dir and len(via_dir) == r.end - r.start


def test_spark_min_partitions_through_the_broker(spark, served):
    path, bootstrap, _ = served
    df = (spark.read.format("kqlite").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "events").option("minPartitions", "7").load())
    assert df.rdd.getNumPartitions() >= 7
    via_dir = spark.read.format("kqlite").option("subscribe", "events").load(path)
    assert sorted(map(tuple, df.collect()), key=lambda r: (r[3], r[4])) == \
        sorted(map(tuple, via_dir.collect()), key=lambda r: (r[3], r[4]))
