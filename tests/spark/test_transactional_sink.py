"""writeMode=transactional driven without a JVM, as Spark's workers and driver call it: tasks
prepare open transactions, the driver's commit writes the COMMIT markers, every other
prepared transaction of the batch is aborted, a committed batch id is never written twice
and a commit cut short is finished by the batch's re-run (kqlite/spark/transactional.py).
The last test runs it through Spark (txn_stream.py holds its query)."""

import os
import pickle
import sys
import time

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")

from pyspark.sql.types import BinaryType, StringType, StructField, StructType  # noqa: E402

import kqlite  # noqa: E402
from kqlite.errors import InvalidProducerEpochError  # noqa: E402
from kqlite.format.batch import build_batch, now_ms  # noqa: E402
from kqlite.spark import source, transactional, writing  # noqa: E402
from kqlite.spark.options import SinkOptions, SparkOptionError  # noqa: E402
from kqlite.spark.source import KqliteStreamWriter, KqliteWriter  # noqa: E402
from kqlite.storage import NO_VERIFICATION, Isolation  # noqa: E402
import txn_stream  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))

SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


@pytest.fixture
def sink(tmp_path, monkeypatch):
    """A data dir with topic ``out`` (3 partitions); the streaming options of a sink; a
    setter of the micro-batch id the tasks see (Spark's task local property)."""
    path = str(tmp_path / "data")
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("out", 3)
    batch = {"id": None}

    def prop(name):
        return {"streaming.sql.batchId": batch["id"]}.get(name)
    monkeypatch.setattr(source, "_task_property", prop)

    def at(batch_id):
        batch["id"] = None if batch_id is None else str(batch_id)
    opts = {"path": path, "topic": "out", "writeMode": "transactional",
            "checkpointLocation": str(tmp_path / "ck")}
    return path, opts, at


def rows(n, start):
    keys = pa.array(["k%d" % (start + i) for i in range(n)], type=pa.string())
    values = pa.array([b"row-%d" % (start + i) for i in range(n)], type=pa.binary())
    return pa.RecordBatch.from_arrays([keys, values], names=["key", "value"])


def task(opts, n, start):
    """One task attempt on an executor: the writer as Spark unpickles it."""
    writer = pickle.loads(pickle.dumps(KqliteStreamWriter(opts, SCHEMA)))
    return pickle.loads(pickle.dumps(writer.write(iter([rows(n, start)]))))


def read(path, isolation, settled=False):
    out = []
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        for p in range(db.partitions_for("out")):
            with db.leased_log("out", p) as lg:
                out += [r.value for r in lg.read(isolation=isolation)]
                if settled:
                    assert not lg.ongoing_transactions()
    return sorted(out)


def committed(path, settled=True):
    """What read_committed readers see; with ``settled``, no transaction is left open."""
    return read(path, Isolation.COMMITTED, settled)


def expect(*ranges):
    return sorted(b"row-%d" % i for start, n in ranges for i in range(start, start + n))


def prepared_files(path, opts, sink_name):
    ledger = transactional.SinkTransactions(writing.sink_dir(path, sink_name))
    return ledger.prepared()


def test_prepared_rows_are_invisible_until_the_driver_commits(sink):
    path, opts, at = sink
    at(0)
    good = [task(opts, 5, 0), task(opts, 4, 5)]
    failed = task(opts, 3, 100)          # an attempt Spark gave up on: no message
    assert committed(path, settled=False) == []   # open transactions hold the LSO
    assert len(read(path, Isolation.HIGH_WATERMARK)) == 12
    KqliteStreamWriter(opts, SCHEMA).commit(good + [None], 0)
    assert committed(path) == expect((0, 9))
    assert prepared_files(path, opts, f"checkpoint:{opts['checkpointLocation']}") == {}
    # The failed attempt's producer is fenced on every partition it enlisted.
    pid = failed.prepared.producer_id
    (tp, *_) = failed.prepared.partitions
    with kqlite.open(path, retention_check_interval_ms=0) as db, db.leased_log(*tp) as lg:
        with pytest.raises(InvalidProducerEpochError):
            lg.append_as_leader(build_batch([b"zombie"], producer_id=pid, producer_epoch=0,
                                            base_sequence=3, transactional=True),
                                leader_epoch=None, verification_guard=NO_VERIFICATION)


def test_a_committed_batch_id_is_not_written_twice(sink):
    path, opts, at = sink
    at(0)
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 3, 0)], 0)
    at(1)
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 2, 3)], 1)
    for batch_id, start in ((1, 3), (0, 0)):       # re-runs after a driver restart
        at(batch_id)
        KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 3, start)], batch_id)
    assert committed(path) == expect((0, 5))


def test_a_batch_prepared_before_a_driver_crash_is_run_again_once(sink):
    """The driver died after the tasks prepared micro-batch 0 and before its commit: the
    restarted query runs batch 0 again; the dead run's transactions are aborted."""
    path, opts, at = sink
    at(0)
    task(opts, 4, 0), task(opts, 3, 4)              # prepared, never committed
    again = [task(opts, 4, 0), task(opts, 3, 4)]
    KqliteStreamWriter(opts, SCHEMA).commit(again, 0)
    assert committed(path) == expect((0, 7))


def test_a_commit_cut_short_is_finished_by_the_re_run(sink, monkeypatch):
    """The driver died after the decision and the COMMIT markers, before recording the
    batch: the re-run commits what the decision names and aborts its own attempts."""
    path, opts, at = sink
    at(0)
    first = [task(opts, 4, 0), task(opts, 3, 4)]

    def crash(self, batch_id):
        raise KeyboardInterrupt("driver killed")
    finish = writing.SinkState.finish
    monkeypatch.setattr(writing.SinkState, "finish", crash)
    with pytest.raises(KeyboardInterrupt):
        KqliteStreamWriter(opts, SCHEMA).commit(first, 0)
    monkeypatch.setattr(writing.SinkState, "finish", finish)
    again = [task(opts, 4, 0), task(opts, 3, 4)]
    KqliteStreamWriter(opts, SCHEMA).commit(again, 0)
    assert committed(path) == expect((0, 7))
    assert len(read(path, Isolation.HIGH_WATERMARK)) == 14


def test_a_decision_without_markers_is_carried_out_by_the_re_run(sink, monkeypatch):
    """The driver died right after writing the decision (no marker yet)."""
    path, opts, at = sink
    at(0)
    first = [task(opts, 2, 0), task(opts, 2, 2)]
    sink_dir = writing.sink_dir(path, f"checkpoint:{opts['checkpointLocation']}")
    transactional.SinkTransactions(sink_dir).decide(0, [m.prepared for m in first])
    again = [task(opts, 2, 0), task(opts, 2, 2)]
    KqliteStreamWriter(opts, SCHEMA).commit(again, 0)
    assert committed(path) == expect((0, 4))


def test_abort_aborts_the_batch(sink):
    path, opts, at = sink
    at(3)
    msgs = [task(opts, 2, 0), task(opts, 2, 2)]
    KqliteStreamWriter(opts, SCHEMA).abort(msgs[:1] + [None], 3)
    assert committed(path) == []
    at(4)
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 1, 9)], 4)
    assert committed(path) == expect((9, 1))


def test_batch_write_commits_or_aborts_as_one_transaction_per_task(sink):
    path, opts, _ = sink
    options = {"path": path, "topic": "out", "writeMode": "transactional"}
    writer = KqliteWriter(options, SCHEMA)
    msgs = [pickle.loads(pickle.dumps(writer)).write(iter([rows(3, 0)])),
            writer.write(iter([rows(2, 3)]))]
    assert committed(path, settled=False) == []
    writer.commit(msgs)
    assert committed(path) == expect((0, 5))
    assert not os.path.exists(writing.sink_dir(path, f"job:{writer._job}"))
    writer = KqliteWriter(options, SCHEMA)
    writer.abort([writer.write(iter([rows(2, 50)])), None])
    assert committed(path) == expect((0, 5))
    # foreachBatch: sinkId and batchId protect a batch id as a micro-batch's.
    for _ in range(2):
        keyed = KqliteWriter(dict(options, sinkId="fb", batchId="7"), SCHEMA)
        keyed.commit([keyed.write(iter([rows(1, 70)]))])
    assert committed(path) == expect((0, 5), (70, 1))


def test_transactional_options():
    opts = SinkOptions({"path": "/x", "writeMode": "Transactional", "sinkId": "s",
                        "batchId": "3"})
    assert opts.write_mode == "transactional" and opts.batch_id == 3
    with pytest.raises(SparkOptionError, match="staged, direct or transactional"):
        SinkOptions({"path": "/x", "writeMode": "twice"})


def test_transactional_stream_survives_a_failed_task_and_a_restart(spark, tmp_path):
    """Real Spark: a task fails its first attempt after preparing rows (Spark retries it),
    and the query is stopped after the tasks prepared micro-batch 0, before its commit;
    the query started again from its checkpoint runs batch 0 again (its first attempt
    fails again) and commits it: a read_committed read counts every row exactly once."""
    path, ck, gates, hold = _stream_dirs(tmp_path)
    query = txn_stream.start_query(spark, path, ck, gates)
    try:
        _wait_prepared(path, lambda: query.isActive)
    finally:
        query.stop()
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    _restart_and_count(spark, path, ck, gates, hold)


def test_transactional_stream_through_a_broker(spark, tmp_path):
    """The same through `kqlite serve` (kafka.bootstrap.servers on the sink): each attempt
    is a Kafka transactional producer, the driver commits with EndTxn."""
    from broker_process import BrokerProcess
    path, ck, gates, hold = _stream_dirs(tmp_path)
    broker = BrokerProcess(path, extra=["--no-auto-create-topics"],
                           global_args=["--log-level", "warning"])
    try:
        query = txn_stream.start_query(spark, path, ck, gates, broker.bootstrap)
        try:
            _wait_prepared(path, lambda: query.isActive)
        finally:
            query.stop()
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        _restart_and_count(spark, path, ck, gates, hold, broker.bootstrap)
    finally:
        broker.stop()


@pytest.mark.soak
def test_transactional_stream_survives_a_killed_driver(spark, tmp_path):
    """As above, but the driver (its own Spark session in a child process) is killed with
    SIGKILL after the tasks prepared: no abort runs, the restarted query's commit aborts
    what the dead run prepared."""
    import signal
    import subprocess
    import sys
    path, ck, gates, hold = _stream_dirs(tmp_path)
    driver = subprocess.Popen([sys.executable, txn_stream.__file__, path, ck, gates],
                              start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_prepared(path, lambda: driver.poll() is None)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)       # the driver and its JVM and workers
        driver.wait()
    _restart_and_count(spark, path, ck, gates, hold)


def settle(path, topic, timeout=60):
    """Until no transaction is open on ``topic``: a broker's coordinator writes the
    markers after it answered EndTxn (as Kafka's)."""
    deadline = time.monotonic() + timeout
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        for p in range(db.partitions_for(topic)):
            with db.leased_log(topic, p) as lg:
                while lg.ongoing_transactions():
                    assert time.monotonic() < deadline, f"{topic}-{p}: still open"
                    time.sleep(0.05)


def _stream_dirs(tmp_path):
    path, ck, gates = (str(tmp_path / d) for d in ("data", "ck", "gates"))
    txn_stream.make_input(path)
    os.makedirs(gates)
    hold = os.path.join(gates, "hold")
    open(hold, "w").close()
    return path, ck, gates, hold


def _wait_prepared(path, running):
    """Until input partition 0's task prepared its rows twice (its first attempt 15 rows
    before failing, its second all 20); partition 1's task waits on the hold file, so
    the driver cannot commit."""
    failed_then_retried = txn_stream.ROWS - txn_stream.ARROW_ROWS + txn_stream.ROWS
    deadline = time.monotonic() + 240
    while len(read(path, Isolation.HIGH_WATERMARK)) < failed_then_retried:
        assert running(), "the first run of the query ended by itself"
        assert time.monotonic() < deadline, "the first run prepared nothing"
        time.sleep(0.2)
    assert committed(path, settled=False) == []


def _restart_and_count(spark, path, ck, gates, hold, bootstrap=None):
    os.remove(hold)
    try:
        query = txn_stream.start_query(spark, path, ck, gates, bootstrap)
        query.awaitTermination(240)
        assert query.exception() is None
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    want = sorted(b"in-%d-%d" % (p, i) for p in range(2) for i in range(txn_stream.ROWS))
    settle(path, "out")
    df = (spark.read.format("kqlite").option("subscribe", "out")
          .option("kafka.isolation.level", "read_committed"))
    df = df.option("kafka.bootstrap.servers", bootstrap).load() if bootstrap else df.load(path)
    assert sorted(bytes(r.value) for r in df.select("value").collect()) == want
    assert committed(path) == want
    # Aborted, and still in the log for read_uncommitted readers: the first run's two
    # attempts of input partition 0's task (by Spark's abort of the stopped query's batch,
    # or by the restarted run's commit when the driver died) and the restarted run's
    # failed first attempt.
    failed = txn_stream.ROWS - txn_stream.ARROW_ROWS
    assert len(read(path, Isolation.HIGH_WATERMARK)) == len(want) + failed + txn_stream.ROWS \
        + failed



def test_transactional_rows_keep_the_topic_settings(tmp_path, monkeypatch):
    """A LogAppendTime topic stamps the transactional batches at append; a compressed
    topic's batches are compressed; rows keep their keys and order per partition."""
    path = str(tmp_path / "data")
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("stamped", 1, config={"message.timestamp.type": "LogAppendTime",
                                              "compression.type": "gzip"})
    monkeypatch.setattr(source, "_task_property",
                        lambda name: "0" if name == "streaming.sql.batchId" else None)
    opts = {"path": path, "topic": "stamped", "writeMode": "transactional",
            "sinkId": "settings"}
    before = now_ms()
    KqliteStreamWriter(opts, SCHEMA).commit([task(opts, 30, 0)], 0)
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        lg = db.log("stamped", 0)
        got = list(lg.read(isolation=Isolation.COMMITTED))
        headers = [h for h in lg.batch_headers() if not h.is_control]
    assert [(r.key, r.value) for r in got] == [(b"k%d" % i, b"row-%d" % i) for i in range(30)]
    assert all(r.timestamp >= before for r in got)
    assert headers and all(h.is_transactional and h.timestamp_type == 1 and h.compression
                           for h in headers)
