"""writeMode=transactional through a `kqlite serve` broker (kafka.bootstrap.servers on a
streaming sink), driven without a JVM as Spark's workers and driver call it: each task
attempt is a transactional producer whose transaction stays open, the driver's commit
ends the accepted ones with EndTxn and has the coordinator abort every other one
(kqlite/spark/broker_sink.py)."""

import itertools
import os
import pickle
import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")

from pyspark.sql.types import BinaryType, StringType, StructField, StructType  # noqa: E402

import kqlite  # noqa: E402
from kqlite.spark import source  # noqa: E402
from kqlite.spark.broker_sink import BrokerTransactions, checkpoint_sink_dir  # noqa: E402
from kqlite.spark.broker import BrokerCatalog  # noqa: E402
from kqlite.spark.kafka_client import BrokerError  # noqa: E402
from kqlite.spark.options import SparkOptionError  # noqa: E402
from kqlite.spark.reading import read_range  # noqa: E402
from kqlite.spark.source import KqliteStreamWriter, KqliteWriter  # noqa: E402
from kqlite.spark.transactional import SinkTransactions  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_process import BrokerProcess  # noqa: E402
from test_transactional_sink import settle  # noqa: E402

SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
TOPICS = 5
_topics = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sink") / "data")
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        for i in range(TOPICS):
            db.create_topic(f"out{i}", 2)
    served = BrokerProcess(path, extra=["--no-auto-create-topics"],
                           global_args=["--log-level", "warning"])
    yield path, served.bootstrap
    served.stop()


@pytest.fixture
def sink(broker, tmp_path, monkeypatch):
    """Streaming sink options on a topic of its own, and a setter of the micro-batch id
    the tasks see (Spark's task local property)."""
    path, bootstrap = broker
    n = next(_topics)
    batch = {"id": None}
    monkeypatch.setattr(source, "_task_property",
                        lambda name: batch["id"] if name == "streaming.sql.batchId" else None)
    attempts = itertools.count()         # each call a task attempt of its own, as in Spark
    monkeypatch.setattr(source, "_task_attempt", lambda: (next(attempts), 0))

    def at(batch_id):
        batch["id"] = str(batch_id)
    opts = {"kafka.bootstrap.servers": bootstrap, "topic": f"out{n}",
            "writeMode": "transactional", "sinkId": f"sink{n}",
            "checkpointLocation": str(tmp_path / "ck")}
    return path, bootstrap, opts, at


def rows(n, start):
    keys = pa.array(["k%d" % (start + i) for i in range(n)], type=pa.string())
    values = pa.array([b"row-%d" % (start + i) for i in range(n)], type=pa.binary())
    return pa.RecordBatch.from_arrays([keys, values], names=["key", "value"])


def task(opts, n, start):
    writer = pickle.loads(pickle.dumps(KqliteStreamWriter(opts, SCHEMA)))
    return pickle.loads(pickle.dumps(writer.write(iter([rows(n, start)]))))


def committed(bootstrap, topic, path=None):
    """read_committed through the broker: the values below each last stable offset
    (with ``path``, once the coordinator has written the markers of every transaction
    it ended)."""
    if path is not None:
        settle(path, topic)
    catalog = BrokerCatalog(bootstrap, "read_committed")
    try:
        ends = catalog.latest_offsets([(topic, p) for p in range(2)])
    finally:
        catalog.close()
    out = []
    for (t, p), end in ends.items():
        for b in read_range(None, t, p, 0, end, bootstrap=bootstrap,
                            isolation="read_committed"):
            out += [r["value"] for r in b.to_pylist()]
    return sorted(out)


def open_ones(bootstrap, opts):
    txns = BrokerTransactions(BrokerCatalog(bootstrap))
    try:
        return txns.open_transactions(f"kqlite-spark-{opts['sinkId']}-")
    finally:
        txns.close()


def expect(*ranges):
    return sorted(b"row-%d" % i for start, n in ranges for i in range(start, start + n))


def test_prepared_through_the_broker_then_committed_by_the_driver(sink):
    path, bootstrap, opts, at = sink
    at(0)
    good = [task(opts, 5, 0), task(opts, 4, 5)]
    failed = task(opts, 3, 100)        # an attempt Spark gave up on: no message
    assert committed(bootstrap, opts["topic"]) == []
    assert len(open_ones(bootstrap, opts)) == 3
    KqliteStreamWriter(opts, SCHEMA).commit(good + [None], 0)
    assert committed(bootstrap, opts["topic"], path) == expect((0, 9))
    assert open_ones(bootstrap, opts) == {}
    # The failed attempt was fenced: its producer cannot write again.
    txns = BrokerTransactions(BrokerCatalog(bootstrap))
    try:
        p = failed.prepared
        with pytest.raises(BrokerError, match="PRODUCER_FENCED|INVALID_PRODUCER_EPOCH"):
            txns.add_partitions(p)
    finally:
        txns.close()
    # A re-run of the committed batch after a driver restart writes nothing again.
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 5, 0), task(opts, 4, 5)], 0)
    at(1)
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 1, 9)], 1)
    assert committed(bootstrap, opts["topic"], path) == expect((0, 10))
    assert open_ones(bootstrap, opts) == {}


def test_a_decided_batch_is_finished_by_its_re_run(sink):
    """The driver died after writing its decision, before EndTxn: the re-run of the
    batch commits the decided transactions and aborts its own."""
    path, bootstrap, opts, at = sink
    at(4)
    first = [task(opts, 2, 0), task(opts, 2, 2)]
    SinkTransactions(checkpoint_sink_dir(opts["checkpointLocation"])).decide(
        4, [m.prepared for m in first])
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 2, 0), task(opts, 2, 2)], 4)
    assert committed(bootstrap, opts["topic"], path) == expect((0, 4))
    assert open_ones(bootstrap, opts) == {}


def test_abort_through_the_broker(sink):
    path, bootstrap, opts, at = sink
    at(2)
    msgs = [task(opts, 2, 0), task(opts, 2, 2)]
    KqliteStreamWriter(opts, SCHEMA).abort(msgs[:1] + [None], 2)
    assert open_ones(bootstrap, opts) == {}
    at(3)
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 1, 7)], 3)
    assert committed(bootstrap, opts["topic"], path) == expect((7, 1))


def test_broker_sink_options(sink):
    path, bootstrap, opts, _ = sink
    with pytest.raises(SparkOptionError, match="writes only with writeMode=transactional"):
        KqliteStreamWriter({k: v for k, v in opts.items() if k != "checkpointLocation"},
                           SCHEMA)
    with pytest.raises(SparkOptionError, match="writes only with writeMode=transactional"):
        KqliteStreamWriter(dict(opts, writeMode="staged"), SCHEMA)
    with pytest.raises(SparkOptionError, match="only streaming queries"):
        KqliteWriter(opts, SCHEMA)
    with pytest.raises(SparkOptionError, match="not both"):
        KqliteStreamWriter(dict(opts, path=path), SCHEMA)
