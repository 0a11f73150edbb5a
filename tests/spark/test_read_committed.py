"""kafka.isolation.level over a topic holding committed, aborted and open transactions
(txn_data.py): read_committed plans up to the last stable offset and reads exactly the
committed records; read_uncommitted (the default) reads every data record; markers are
never rows. For a data dir (the Arrow path and the per-record path) and through a `kqlite
serve` broker (ListOffsets and Fetch with isolation level 1), without and with Spark."""

import os
import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'kqlite[spark]')")

from kqlite.spark.broker import BrokerCatalog  # noqa: E402
from kqlite.spark.reading import read_range  # noqa: E402
from kqlite.spark.source import KqliteBatchReader, KqliteStreamReader  # noqa: E402
from txn_data import TOPIC, make_transactions  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_process import BrokerProcess  # noqa: E402

LEVELS = ("read_committed", "read_uncommitted")


@pytest.fixture(scope="module")
def txns(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("txns") / "data")
    return path, make_transactions(path)


@pytest.fixture(scope="module")
def served(txns):
    path, expected = txns
    broker = BrokerProcess(path, extra=["--no-auto-create-topics"],
                           global_args=["--log-level", "warning"])
    yield path, broker.bootstrap, expected
    broker.stop()


def _values(batches):
    return [r["value"] for b in batches for r in b.to_pylist()]


def _want(expected, p, level):
    committed, everything, lso, hw = expected[p]
    return (committed, lso) if level == "read_committed" else (everything, hw)


@pytest.mark.parametrize("fast", [True, False], ids=["arrow", "row"])
def test_data_dir_range_by_isolation(txns, fast):
    path, expected = txns
    for p in expected:
        for level in LEVELS:
            values, end = _want(expected, p, level)
            got = read_range(path, TOPIC, p, 0, end, batch_rows=2, fast=fast, isolation=level)
            assert _values(got) == values, (p, level)
    # A range starting inside the aborted transaction still leaves out its rest.
    got = read_range(path, TOPIC, 0, 5, 11, fast=fast, isolation="read_committed")
    assert _values(got) == [b"a2", b"p2"]


def test_planning_stops_at_the_last_stable_offset(txns):
    path, expected = txns
    options = {"path": path, "subscribe": TOPIC}
    default = KqliteBatchReader(options).partitions()
    assert {r.partition: r.end for r in default} == {p: e[3] for p, e in expected.items()}
    committed = KqliteBatchReader(dict(options, **{"kafka.isolation.level": "READ_COMMITTED"}))
    assert {r.partition: r.end for r in committed.partitions()} == \
        {p: e[2] for p, e in expected.items()}
    stream = KqliteStreamReader(dict(options, **{"kafka.isolation.level": "read_committed"}))
    assert stream.latestOffset() == {TOPIC: {str(p): e[2] for p, e in expected.items()}}
    stream.stop()


def test_broker_reads_by_isolation(served):
    path, bootstrap, expected = served
    for level in LEVELS:
        catalog = BrokerCatalog(bootstrap, level)
        try:
            ends = catalog.latest_offsets([(TOPIC, p) for p in expected])
        finally:
            catalog.close()
        for p in expected:
            values, end = _want(expected, p, level)
            assert ends[(TOPIC, p)] == end
            got = read_range(None, TOPIC, p, 0, end, batch_rows=2, bootstrap=bootstrap,
                             isolation=level)
            assert _values(got) == values, (p, level)


def test_spark_counts_by_isolation(spark, served):
    """Real queries, data dir and broker: read_committed counts exactly the committed
    records and no offset at or past a partition's last stable offset."""
    path, bootstrap, expected = served
    sources = {"data dir": lambda r: r.load(path),
               "broker": lambda r: r.option("kafka.bootstrap.servers", bootstrap).load()}
    for name, load in sources.items():
        for level in LEVELS:
            df = load(spark.read.format("kqlite").option("subscribe", TOPIC)
                      .option("kafka.isolation.level", level))
            rows = df.select("partition", "offset", "value").collect()
            for p in expected:
                values, end = _want(expected, p, level)
                mine = sorted((r.offset, bytes(r.value)) for r in rows if r.partition == p)
                assert [v for _, v in mine] == values, (name, level, p)
                assert all(o < end for o, _ in mine)
        default = load(spark.read.format("kqlite").option("subscribe", TOPIC))
        assert default.count() == sum(len(e[1]) for e in expected.values())
