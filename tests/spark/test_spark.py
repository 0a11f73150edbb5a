"""kqlite through a real SparkSession (local[2]): batch and streaming, read and write.

All tests share the one session of conftest.py; each uses its own data dir. The
format is found by Spark's auto-discovery of the ``pyspark_kqlite`` module (no
``spark.dataSource.register`` call anywhere here).
"""

import glob
import json
import os

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")

import kqlite  # noqa: E402
from kqlite.db.partitioner import partition_for_key
from kqlite.spark.source import ADMISSION_CONTROL

T0 = 1_700_000_000_000


def make_data(path, n=20, partitions=3):
    """Topic ``events`` written by the embedded producer; returns what was written as
    {(partition, offset): (key, value, timestamp_ms, headers)}."""
    written = {}
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("events", partitions)
        db.create_topic("copy", 2)
        with db.producer() as producer:
            for i in range(n):
                key = None if i % 5 == 4 else b"user-%d" % (i % 7)
                headers = [("seq", b"%d" % i), ("trace", b"abc")] if i % 2 else []
                md = producer.send("events", key=key, value=b'{"n": %d}' % i, headers=headers,
                                   partition=None if key else i % partitions,
                                   timestamp=T0 + 1000 * i).result()
                written[(md.partition, md.offset)] = (key, b'{"n": %d}' % i, T0 + 1000 * i,
                                                      headers)
    return written


def test_batch_read_returns_exactly_the_records(spark, tmp_path):
    path = str(tmp_path / "data")
    written = make_data(path)
    df = (spark.read.format("kqlite").option("subscribe", "events")
          .option("includeHeaders", "true").load(path))
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    got = {}
    for r in df.collect():
        assert r.topic == "events" and r.timestampType == 0
        ts = int(r.timestamp.timestamp() * 1000)
        got[(r.partition, r.offset)] = (None if r.key is None else bytes(r.key), bytes(r.value),
                                        ts, [(h.key, bytes(h.value)) for h in r.headers])
    assert got == written
    # Options: assign, JSON offsets, minPartitions, no headers by default (as Kafka).
    counts = {q: sum(1 for (p, _) in written if p == q) for q in range(3)}
    big = max(counts, key=counts.get)
    other = (big + 1) % 3
    assert counts[big] >= 3
    some = (spark.read.format("kqlite").option("assign", '{"events":[%d,%d]}' % (big, other))
            .option("startingOffsets", '{"events":{"%d":1,"%d":-2}}' % (big, other))
            .option("endingOffsets", '{"events":{"%d":%d,"%d":-1}}' % (big, counts[big] - 1,
                                                                     other))
            .option("minPartitions", "4").load(path))
    assert "headers" not in some.columns
    assert some.rdd.getNumPartitions() >= 4
    want = sorted((p, o) for (p, o) in written
                  if (p == big and 1 <= o < counts[big] - 1) or p == other)
    assert sorted((r.partition, r.offset) for r in some.select("partition", "offset")
                  .collect()) == want
    late = (spark.read.format("kqlite").option("subscribe", "events")
            .option("startingTimestamp", str(T0 + 15_000))
            .option("startingOffsetsByTimestampStrategy", "latest").load(path))
    assert late.count() == sum(1 for v in written.values() if v[2] >= T0 + 15_000)
    # Filters and SQL work on the rows like any DataFrame.
    df.createOrReplaceTempView("events")
    assert spark.sql("SELECT count(*) FROM events WHERE size(headers) = 2").first()[0] == 10


def test_batch_read_errors_are_clear(spark, tmp_path):
    path = str(tmp_path / "data")
    make_data(path, n=3)
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        (spark.read.format("kqlite").option("kafka.bootstrap.servers", "localhost:9092")
         .option("subscribe", "events").load(path).collect())
    with pytest.raises(Exception, match="exactly one of"):
        spark.read.format("kqlite").load(path).collect()
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.log("events", 0).append([b"x"] * 3)
        db.log("events", 0).delete_records(before=2)
    with pytest.raises(Exception, match="failOnDataLoss"):
        (spark.read.format("kqlite").option("subscribe", "events")
         .option("startingOffsets", '{"events":{"0":0}}').load(path).collect())


def test_a_schema_of_some_columns_reads_only_those(spark, tmp_path):
    """Spark 4.3 prunes no column of a Python source; a .schema(...) naming some of the
    Kafka-source columns, in any order, is what the reader hands Spark (batch and
    streaming). tests/spark/test_column_subsets.py tries every shape without a JVM."""
    path, ck = str(tmp_path / "data"), str(tmp_path / "ck")
    written = make_data(path)
    values = sorted(v for (_k, v, _t, _h) in written.values())

    def load(schema, reader=None, **options):
        r = (reader or spark.read).format("kqlite").schema(schema)
        return r.options(subscribe="events", **options).load(path)

    df = load("value BINARY")
    assert df.columns == ["value"]
    assert sorted(bytes(r.value) for r in df.collect()) == values
    df = load("headers ARRAY<STRUCT<key: STRING, value: BINARY>>, partition INT, offset BIGINT",
              includeHeaders="true")
    got = {(r.partition, r.offset): [(h.key, bytes(h.value)) for h in r.headers]
           for r in df.collect()}
    assert got == {tp: h for tp, (_k, _v, _t, h) in written.items()}
    with pytest.raises(Exception, match="fixed schema"):
        load("value STRING").collect()
    sums = []
    q = (load("value BINARY", spark.readStream, startingOffsets="earliest")
         .writeStream.trigger(availableNow=True).option("checkpointLocation", ck)
         .foreachBatch(lambda batch, _id: sums.append(
             (batch.columns, batch.selectExpr("sum(length(value))").collect()[0][0])))
         .start())
    q.awaitTermination(180)
    assert q.exception() is None
    assert sum(s or 0 for _c, s in sums) == sum(len(v) for v in values)
    assert all(c == ["value"] for c, _s in sums)


def test_write_dataframe_then_consume_with_embedded_api(spark, tmp_path):
    path = str(tmp_path / "data")
    make_data(path, n=1)
    rows = [(f"user-{i % 6}", json.dumps({"i": i}), [("src", b"spark")]) for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string, "
                                     "headers array<struct<key:string,value:binary>>")
    df.repartition(3).write.format("kqlite").option("topic", "copy").mode("append").save(path)
    # A topic column routes rows; a partition column pins them.
    spark.createDataFrame([("copy", 1, "pinned")], "topic string, partition int, value string") \
        .write.format("kqlite").mode("append").save(path)
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        consumer = db.consumer(["copy"], auto_offset_reset="earliest")
        got = []
        while True:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                break
            got.extend(batch)
    keyed = [r for r in got if r.key is not None]
    assert sorted(json.loads(r.value)["i"] for r in keyed) == list(range(40))
    for r in keyed:
        assert r.partition == partition_for_key(r.key, 2)
        assert r.headers == (("src", b"spark"),)
        assert json.loads(r.value)["i"] % 6 == int(r.key.decode().split("-")[1])
    pinned = [r for r in got if r.key is None]
    assert [(r.partition, r.value) for r in pinned] == [(1, b"pinned")]
    with pytest.raises(Exception, match="append-only"):
        df.write.format("kqlite").option("topic", "copy").mode("overwrite").save(path)


def test_stream_restart_reads_each_record_exactly_once(spark, tmp_path):
    path, out, ck = str(tmp_path / "data"), str(tmp_path / "out"), str(tmp_path / "ck")
    written = make_data(path, n=12)

    def run():
        q = (spark.readStream.format("kqlite").option("subscribe", "events")
             .option("startingOffsets", "earliest").load(path)
             .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(out))
        q.awaitTermination(180)
        assert not q.isActive and q.exception() is None

    run()
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        with db.producer() as producer:
            for i in range(12, 20):
                md = producer.send("events", key=b"k%d" % i, value=b'{"n": %d}' % i).result()
                written[(md.partition, md.offset)] = None
    run()
    got = [(r.partition, r.offset) for r in spark.read.parquet(out).collect()]
    assert sorted(got) == sorted(written) and len(got) == 20
    offsets = sorted(glob.glob(os.path.join(ck, "offsets", "[0-9]*")),
                     key=lambda f: int(os.path.basename(f)))
    last = json.loads(open(offsets[-1]).read().splitlines()[-1])
    ends = {}
    for (p, o) in written:
        ends[str(p)] = max(ends.get(str(p), 0), o + 1)
    assert last == {"events": ends}        # Kafka's offset JSON in Spark's checkpoint


def test_stream_write_into_kqlite_is_exactly_once_across_restarts(spark, tmp_path):
    path, ck = str(tmp_path / "data"), str(tmp_path / "ck")
    make_data(path, n=10)

    def run():
        q = (spark.readStream.format("kqlite").option("subscribe", "events")
             .option("startingOffsets", "earliest").load(path)
             .selectExpr("key", "value", "'copy' AS topic")
             .writeStream.format("kqlite").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(path))
        q.awaitTermination(180)
        assert q.exception() is None

    run()
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.producer().send("events", key=b"late", value=b"late")
    run()
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        values = sorted(r.value for p in range(2) for r in db.log("copy", p).read())
    assert len(values) == 11 and values.count(b"late") == 1
    # The sink recorded its last micro-batch id under the data dir's .kqlite folder.
    states = glob.glob(os.path.join(path, ".kqlite", "spark", "sinks", "*", "state.json"))
    assert len(states) == 1 and json.load(open(states[0]))["batchId"] == 1


@pytest.mark.skipif(not ADMISSION_CONTROL, reason="read limits need Spark 4.2+")
def test_max_offsets_per_trigger_splits_available_now(spark, tmp_path):
    path, ck = str(tmp_path / "data"), str(tmp_path / "ck")
    make_data(path, n=20)
    q = (spark.readStream.format("kqlite").option("subscribe", "events")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "8").load(path)
         .writeStream.format("noop").option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 20 and max(sizes) <= 8 and len(sizes) >= 3


def test_clickstream_example(spark, tmp_path):
    import sys
    here = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "clickstream")
    sys.path.insert(0, os.path.abspath(here))
    try:
        import run as clickstream
        lines = []
        expected, got = clickstream.run(spark, str(tmp_path / "clicks"), events=300, rounds=2,
                                        start_ms=T0, out=lines.append)
    finally:
        sys.path.remove(os.path.abspath(here))
        for name in ("run", "pipeline", "generate"):
            sys.modules.pop(name, None)
    assert sum(expected.values()) == 600
    assert got == dict(expected)
    assert any("compacted page-views-per-minute" in line for line in lines)
