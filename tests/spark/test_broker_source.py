"""The kqlite source reading through a broker (kafka.bootstrap.servers) served by a real
`kqlite serve` child process over the data dir the embedded producer wrote."""

import glob
import json
import os
import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")
pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

import kqlite  # noqa: E402
from kqlite.spark.options import SparkOptionError  # noqa: E402
from kqlite.spark.reading import read_range  # noqa: E402
from test_spark import make_data  # noqa: E402

# The `kqlite serve` child-process helper the server tests use.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_process import BrokerProcess  # noqa: E402


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
    with pytest.raises(SparkOptionError, match="not supported"):
        SinkOptions({"kafka.bootstrap.servers": bootstrap, "topic": "events"})
    opts = SourceOptions({"kafka.bootstrap.servers": bootstrap, "subscribe": "events"}, False)
    assert opts.path is None and opts.bootstrap == bootstrap
    from kqlite.spark.reading import open_source, selected_partitions
    catalog = open_source(bootstrap=bootstrap)
    try:
        assert selected_partitions(catalog, opts) == [("events", p) for p in range(3)]
        missing = SourceOptions({"kafka.bootstrap.servers": bootstrap,
                                 "assign": '{"nope": [0]}'}, False)
        with pytest.raises(SparkOptionError, match="'nope', which does not exist in the "
                                                   "broker at 127.0.0.1"):
            selected_partitions(catalog, missing)
        with pytest.raises(kqlite.OffsetOutOfRangeError):      # at once, as Log.read
            catalog.log("events", 0).read(10 ** 6, 10 ** 6 + 1)
    finally:
        catalog.close()
    with pytest.raises(kqlite.KqliteError, match="gone: the log now ends at"):
        list(read_range(None, "events", 0, 0, 10**6, bootstrap=bootstrap))
    with pytest.raises(SparkOptionError, match="cannot reach"):
        from kqlite.spark.broker import BrokerCatalog
        import kqlite.spark.broker as broker_module
        old = broker_module._TIMEOUT
        broker_module._TIMEOUT = 2.0
        try:
            BrokerCatalog("127.0.0.1:1").list_topics()
        finally:
            broker_module._TIMEOUT = old
